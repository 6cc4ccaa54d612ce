// libsam_tokenizer_shim.so: the SentencePiece backend of sam::indexer::Tokenizer behind a C
// interface (tokenizer_module.h), for programs that also use libtorch (sam-generate,
// bench_generate) through the isolated backend (tokenizer_isolated.cc).
//
// Why: Debian's libsentencepiece carries its own protobuf-lite 3.14 symbols; libtorch loads
// libprotobuf 3.21. In one global symbol scope, whichever loads first wins for both, and either
// libtorch's or SentencePiece's protobuf code runs against the wrong runtime (a crash at
// start-up, or "compiled against version 3.14.0 ... not compatible with the installed version
// (3.21.12)" when a model is loaded). The isolated backend loads this module with
// dlopen(RTLD_LOCAL | RTLD_DEEPBIND): SentencePiece then binds to its own protobuf copy and stays
// out of the global scope. The module is linked with --exclude-libs,ALL, so that it exports only
// the sam_tokenizer_* functions below, never its copy of the Tokenizer class.
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <new>
#include <string>
#include <type_traits>
#include <vector>

#include "sam/indexer/tokenizer.h"
#include "tokenizer_module.h"

namespace {

using sam::indexer::Tokenizer;

void SetError(const char* message, char* error, size_t error_size) {
  if (error == nullptr || error_size == 0) return;
  std::strncpy(error, message, error_size - 1);
  error[error_size - 1] = '\0';
}

const Tokenizer* Of(const void* t) { return static_cast<const Tokenizer*>(t); }

// Copies bytes into a malloc'd buffer (at least one byte, NUL-terminated for text).
template <typename T>
T* MallocCopy(const T* data, size_t count, bool terminate) {
  T* out = static_cast<T*>(std::malloc(std::max<size_t>(1, count + (terminate ? 1 : 0)) * sizeof(T)));
  if (out == nullptr) throw std::bad_alloc();
  if (count > 0) std::memcpy(out, data, count * sizeof(T));
  if (terminate) out[count] = T{};
  return out;
}

}  // namespace

extern "C" {

__attribute__((visibility("default"))) int sam_tokenizer_abi() {
  return sam::indexer::internal::kTokenizerModuleAbi;
}

__attribute__((visibility("default"))) void* sam_tokenizer_load(const char* path, int* code,
                                                                char* error, size_t error_size) {
  *code = static_cast<int>(sam::ErrorCode::kTokenizer);
  try {
    return new Tokenizer(Tokenizer::Load(path));
  } catch (const sam::Error& e) {
    *code = static_cast<int>(e.code());  // kIo for a file that cannot be read
    SetError(e.what(), error, error_size);
    return nullptr;
  } catch (const std::exception& e) {
    SetError(e.what(), error, error_size);
    return nullptr;
  }
}

__attribute__((visibility("default"))) void sam_tokenizer_free(void* t) {
  delete static_cast<Tokenizer*>(t);
}

__attribute__((visibility("default"))) uint32_t sam_tokenizer_vocab_size(const void* t) {
  return Of(t)->vocab_size();
}
__attribute__((visibility("default"))) uint32_t sam_tokenizer_bos_id(const void* t) {
  return Of(t)->bos_id();
}
__attribute__((visibility("default"))) uint32_t sam_tokenizer_eos_id(const void* t) {
  return Of(t)->eos_id();
}
__attribute__((visibility("default"))) int sam_tokenizer_segment_cache_exact(const void* t) {
  return Of(t)->segment_cache_exact() ? 1 : 0;
}
__attribute__((visibility("default"))) int sam_tokenizer_kind(const void* t) {
  return static_cast<int>(Of(t)->kind());
}
__attribute__((visibility("default"))) void sam_tokenizer_sha256(const void* t, uint8_t* out32) {
  std::memcpy(out32, Of(t)->sha256().data(), 32);
}

// All pieces in id order, each as a 4-byte host-order length followed by its bytes.
__attribute__((visibility("default"))) int sam_tokenizer_pieces(const void* t, char** bytes,
                                                                size_t* length, char* error,
                                                                size_t error_size) {
  try {
    std::string out;
    for (const std::string& piece : Of(t)->Pieces()) {
      const uint32_t n = static_cast<uint32_t>(piece.size());
      out.append(reinterpret_cast<const char*>(&n), sizeof(n));
      out += piece;
    }
    *length = out.size();
    *bytes = MallocCopy(out.data(), out.size(), true);
    return 0;
  } catch (const std::exception& e) {
    SetError(e.what(), error, error_size);
    return 1;
  }
}

__attribute__((visibility("default"))) int sam_tokenizer_encode(const void* t, const char* text,
                                                                size_t length, void* cache,
                                                                uint32_t** ids, size_t* count,
                                                                char* error, size_t error_size) {
  try {
    std::vector<uint32_t> out;
    Of(t)->Encode(std::string_view(text, length), &out, static_cast<Tokenizer::Cache*>(cache));
    *count = out.size();
    *ids = MallocCopy(out.data(), out.size(), false);
    return 0;
  } catch (const std::exception& e) {
    SetError(e.what(), error, error_size);
    return 1;
  }
}

__attribute__((visibility("default"))) int sam_tokenizer_decode(const void* t, const uint32_t* ids,
                                                                size_t count, char** text,
                                                                size_t* length, char* error,
                                                                size_t error_size) {
  try {
    const std::string out = Of(t)->Decode({ids, count});
    *length = out.size();
    *text = MallocCopy(out.data(), out.size(), true);
    return 0;
  } catch (const std::exception& e) {
    SetError(e.what(), error, error_size);
    return 1;
  }
}

}  // extern "C"

// The signatures the isolated backend expects (tokenizer_module.h).
namespace {
using Api = sam::indexer::internal::TokenizerModuleApi;
static_assert(std::is_same_v<decltype(&sam_tokenizer_abi), decltype(Api::abi)>);
static_assert(std::is_same_v<decltype(&sam_tokenizer_load), decltype(Api::load)>);
static_assert(std::is_same_v<decltype(&sam_tokenizer_free), decltype(Api::free)>);
static_assert(std::is_same_v<decltype(&sam_tokenizer_vocab_size), decltype(Api::vocab_size)>);
static_assert(std::is_same_v<decltype(&sam_tokenizer_bos_id), decltype(Api::bos_id)>);
static_assert(std::is_same_v<decltype(&sam_tokenizer_eos_id), decltype(Api::eos_id)>);
static_assert(std::is_same_v<decltype(&sam_tokenizer_segment_cache_exact),
                             decltype(Api::segment_cache_exact)>);
static_assert(std::is_same_v<decltype(&sam_tokenizer_sha256), decltype(Api::sha256)>);
static_assert(std::is_same_v<decltype(&sam_tokenizer_kind), decltype(Api::kind)>);
static_assert(std::is_same_v<decltype(&sam_tokenizer_pieces), decltype(Api::pieces)>);
static_assert(std::is_same_v<decltype(&sam_tokenizer_encode), decltype(Api::encode)>);
static_assert(std::is_same_v<decltype(&sam_tokenizer_decode), decltype(Api::decode)>);
}  // namespace
