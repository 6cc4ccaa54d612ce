// IsolatedTokenizer: sam::indexer::Tokenizer loaded from libsam_tokenizer_shim.so with
// dlopen(RTLD_LOCAL | RTLD_DEEPBIND), for programs that also link libtorch (see
// tokenizer_shim.cc for the protobuf clash this avoids). Such programs must not link
// sam::indexer or SentencePiece themselves.
//
//   IsolatedTokenizer tok("llama-32k.model");   // throws sam::Error (kTokenizer)
//   std::vector<uint32_t> ids = tok.Encode("Hello");
//   std::string text = tok.Decode(ids);
//
// The module is looked up next to the program (../lib/ and the program's folder), then at the
// build-tree path SAM_TOKENIZER_SHIM_PATH.
#pragma once

#include <dlfcn.h>
#include <unistd.h>

#include <array>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <span>
#include <string>
#include <vector>

#include "sam/error.h"

class IsolatedTokenizer {
 public:
  explicit IsolatedTokenizer(const std::string& model_path) {
    module_ = OpenModule();
    Bind();
    char error[1024] = "";
    handle_ = load_(model_path.c_str(), error, sizeof(error));
    if (handle_ == nullptr) throw sam::Error(sam::ErrorCode::kTokenizer, error);
    vocab_size_ = vocab_size_fn_(handle_);
    bos_id_ = bos_fn_(handle_);
    eos_id_ = eos_fn_(handle_);
    sha256_fn_(handle_, sha256_.data());
  }
  ~IsolatedTokenizer() {
    if (handle_ != nullptr) free_(handle_);
    // The module stays loaded: SentencePiece and protobuf keep process-wide state.
  }
  IsolatedTokenizer(const IsolatedTokenizer&) = delete;
  IsolatedTokenizer& operator=(const IsolatedTokenizer&) = delete;

  uint32_t vocab_size() const { return vocab_size_; }
  uint32_t bos_id() const { return bos_id_; }
  uint32_t eos_id() const { return eos_id_; }
  const std::array<uint8_t, 32>& sha256() const { return sha256_; }

  // Appends the ids of text (no BOS added).
  void Encode(const std::string& text, std::vector<uint32_t>* out) const {
    uint32_t* ids = nullptr;
    size_t count = 0;
    char error[1024] = "";
    if (encode_(handle_, text.data(), text.size(), &ids, &count, error, sizeof(error)) != 0)
      throw sam::Error(sam::ErrorCode::kTokenizer, std::string("tokenizer: ") + error);
    out->insert(out->end(), ids, ids + count);
    std::free(ids);
  }
  std::string Decode(std::span<const uint32_t> ids) const {
    char* text = nullptr;
    size_t length = 0;
    char error[1024] = "";
    if (decode_(handle_, ids.data(), ids.size(), &text, &length, error, sizeof(error)) != 0)
      throw sam::Error(sam::ErrorCode::kTokenizer, std::string("tokenizer: ") + error);
    std::string result(text, length);
    std::free(text);
    return result;
  }

 private:
  static void* OpenModule() {
    std::vector<std::filesystem::path> candidates;
    std::error_code ec;
    const std::filesystem::path exe = std::filesystem::read_symlink("/proc/self/exe", ec);
    if (!ec) {
      candidates.push_back(exe.parent_path() / ".." / "lib" / "libsam_tokenizer_shim.so");
      candidates.push_back(exe.parent_path() / "libsam_tokenizer_shim.so");
    }
#ifdef SAM_TOKENIZER_SHIM_PATH
    candidates.emplace_back(SAM_TOKENIZER_SHIM_PATH);
#endif
    std::string tried;
    for (const auto& path : candidates) {
      if (!std::filesystem::exists(path, ec)) {
        tried += "\n  " + path.string() + " (absent)";
        continue;
      }
      if (void* module = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL | RTLD_DEEPBIND)) return module;
      tried += "\n  " + path.string() + ": " + dlerror();
    }
    throw sam::Error(sam::ErrorCode::kIo,
                     "cannot load the tokenizer module libsam_tokenizer_shim.so; tried:" + tried);
  }
  template <typename F>
  void Symbol(F* fn, const char* name) {
    *fn = reinterpret_cast<F>(dlsym(module_, name));
    if (*fn == nullptr)
      throw sam::Error(sam::ErrorCode::kInternal, std::string("tokenizer module lacks ") + name);
  }
  void Bind() {
    Symbol(&load_, "sam_tokenizer_load");
    Symbol(&free_, "sam_tokenizer_free");
    Symbol(&vocab_size_fn_, "sam_tokenizer_vocab_size");
    Symbol(&bos_fn_, "sam_tokenizer_bos_id");
    Symbol(&eos_fn_, "sam_tokenizer_eos_id");
    Symbol(&sha256_fn_, "sam_tokenizer_sha256");
    Symbol(&encode_, "sam_tokenizer_encode");
    Symbol(&decode_, "sam_tokenizer_decode");
  }

  void* module_ = nullptr;
  void* handle_ = nullptr;
  void* (*load_)(const char*, char*, size_t) = nullptr;
  void (*free_)(void*) = nullptr;
  uint32_t (*vocab_size_fn_)(const void*) = nullptr;
  uint32_t (*bos_fn_)(const void*) = nullptr;
  uint32_t (*eos_fn_)(const void*) = nullptr;
  void (*sha256_fn_)(const void*, uint8_t*) = nullptr;
  int (*encode_)(const void*, const char*, size_t, uint32_t**, size_t*, char*, size_t) = nullptr;
  int (*decode_)(const void*, const uint32_t*, size_t, char**, size_t*, char*, size_t) = nullptr;
  uint32_t vocab_size_ = 0, bos_id_ = 0, eos_id_ = 0;
  std::array<uint8_t, 32> sha256_{};
};
