// The isolated backend of sam::indexer::Tokenizer (see tokenizer.h): every call is forwarded to
// libsam_tokenizer_shim.so (tokenizer_module.cc), which this file loads once per process with
// dlopen(RTLD_NOW | RTLD_LOCAL | RTLD_DEEPBIND) and never unloads (SentencePiece and protobuf
// keep process-wide state). The module is looked up beside the shared object holding this code
// (libsam_runtime.so, the Python extension), in ../lib/ and beside the program, then at its
// build-tree path.
//
// Sanitizer runtimes (ASan, TSan, MSan) refuse RTLD_DEEPBIND, so sanitized builds load the module
// with RTLD_LOCAL alone. That is enough for processes without libtorch, which are the only ones
// sanitized builds run (the torch programs are not built with sanitizers).
#include <dlfcn.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <string>
#include <vector>

#include "sam/indexer/tokenizer.h"
#include "tokenizer_module.h"

namespace sam::indexer {
namespace {

using internal::TokenizerModuleApi;

constexpr const char* kModuleName = "libsam_tokenizer_shim.so";

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
constexpr int kDlopenFlags = RTLD_NOW | RTLD_LOCAL;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer) || \
    __has_feature(memory_sanitizer)
constexpr int kDlopenFlags = RTLD_NOW | RTLD_LOCAL;
#else
constexpr int kDlopenFlags = RTLD_NOW | RTLD_LOCAL | RTLD_DEEPBIND;
#endif
#else
constexpr int kDlopenFlags = RTLD_NOW | RTLD_LOCAL | RTLD_DEEPBIND;
#endif

template <typename F>
void Bind(void* module, const std::string& path, F* fn, const char* name) {
  *fn = reinterpret_cast<F>(dlsym(module, name));
  if (*fn == nullptr)
    throw TokenizerError("tokenizer module " + path + " lacks " + name +
                         " (a module from another build?)");
}

TokenizerModuleApi OpenModule() {
  std::vector<std::filesystem::path> candidates;
  std::error_code ec;
  // Beside the shared object holding this backend, when that is not the program: the shared
  // runtime library (libsam_runtime.so, its C tokenizer calls) or the Python extension.
  Dl_info self{};
  if (dladdr(reinterpret_cast<const void*>(&OpenModule), &self) != 0 && self.dli_fname != nullptr &&
      std::strchr(self.dli_fname, '/') != nullptr) {
    const std::filesystem::path object = std::filesystem::absolute(self.dli_fname, ec);
    if (!ec) candidates.push_back(object.parent_path() / kModuleName);
  }
  const std::filesystem::path exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    candidates.push_back(exe.parent_path() / ".." / "lib" / kModuleName);
    candidates.push_back(exe.parent_path() / kModuleName);
  }
#ifdef SAM_TOKENIZER_SHIM_PATH
  candidates.emplace_back(SAM_TOKENIZER_SHIM_PATH);
#endif
  std::string tried;
  for (const auto& candidate : candidates) {
    if (!std::filesystem::exists(candidate, ec)) {
      tried += "\n  " + candidate.string() + " (absent)";
      continue;
    }
    void* module = dlopen(candidate.c_str(), kDlopenFlags);
    if (module == nullptr) {
      tried += "\n  " + candidate.string() + ": " + dlerror();
      continue;
    }
    const std::string path = candidate.string();
    TokenizerModuleApi api{};
    Bind(module, path, &api.abi, "sam_tokenizer_abi");
    if (api.abi() != internal::kTokenizerModuleAbi)
      throw TokenizerError("tokenizer module " + path + " has interface version " +
                           std::to_string(api.abi()) + ", this program needs " +
                           std::to_string(internal::kTokenizerModuleAbi));
    Bind(module, path, &api.load, "sam_tokenizer_load");
    Bind(module, path, &api.free, "sam_tokenizer_free");
    Bind(module, path, &api.vocab_size, "sam_tokenizer_vocab_size");
    Bind(module, path, &api.bos_id, "sam_tokenizer_bos_id");
    Bind(module, path, &api.eos_id, "sam_tokenizer_eos_id");
    Bind(module, path, &api.segment_cache_exact, "sam_tokenizer_segment_cache_exact");
    Bind(module, path, &api.sha256, "sam_tokenizer_sha256");
    Bind(module, path, &api.kind, "sam_tokenizer_kind");
    Bind(module, path, &api.pieces, "sam_tokenizer_pieces");
    Bind(module, path, &api.encode, "sam_tokenizer_encode");
    Bind(module, path, &api.decode, "sam_tokenizer_decode");
    return api;
  }
  throw TokenizerError(std::string("cannot load the tokenizer module ") + kModuleName +
                       "; tried:" + tried);
}

// The module, loaded on first use; a failure is reported to every caller.
const TokenizerModuleApi& Module() {
  static std::once_flag once;
  static TokenizerModuleApi api;
  static std::string failure;
  std::call_once(once, [] {
    try {
      api = OpenModule();
    } catch (const TokenizerError& e) {
      failure = e.what();
    }
  });
  if (!failure.empty()) throw TokenizerError(failure);
  return api;
}

struct MallocDeleter {
  void operator()(void* p) const { std::free(p); }
};

}  // namespace

struct Tokenizer::Impl {
  const TokenizerModuleApi* api = nullptr;
  void* handle = nullptr;
  std::string path;
  format::Sha256Digest sha{};
  uint32_t vocab_size = 0, bos_id = 0, eos_id = 0;
  bool cache_exact = false;
  TokenizerKind kind = TokenizerKind::kSentencePiece;

  ~Impl() {
    if (handle != nullptr) api->free(handle);
  }
};

Tokenizer::Tokenizer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;
Tokenizer::~Tokenizer() = default;

Tokenizer Tokenizer::Load(const std::string& path) {
  auto impl = std::make_unique<Impl>();
  impl->api = &Module();
  impl->path = path;
  char error[2048] = "";
  int code = static_cast<int>(ErrorCode::kTokenizer);
  impl->handle = impl->api->load(path.c_str(), &code, error, sizeof(error));
  if (impl->handle == nullptr)
    throw TokenizerError(code == static_cast<int>(ErrorCode::kIo) ? ErrorCode::kIo
                                                                  : ErrorCode::kTokenizer,
                         error);
  impl->vocab_size = impl->api->vocab_size(impl->handle);
  impl->bos_id = impl->api->bos_id(impl->handle);
  impl->eos_id = impl->api->eos_id(impl->handle);
  impl->cache_exact = impl->api->segment_cache_exact(impl->handle) != 0;
  impl->api->sha256(impl->handle, impl->sha.data());
  impl->kind = static_cast<TokenizerKind>(impl->api->kind(impl->handle));
  return Tokenizer(std::move(impl));
}

uint32_t Tokenizer::vocab_size() const { return impl_->vocab_size; }
uint32_t Tokenizer::bos_id() const { return impl_->bos_id; }
uint32_t Tokenizer::eos_id() const { return impl_->eos_id; }
const format::Sha256Digest& Tokenizer::sha256() const { return impl_->sha; }
const std::string& Tokenizer::path() const { return impl_->path; }
bool Tokenizer::segment_cache_exact() const { return impl_->cache_exact; }
TokenizerKind Tokenizer::kind() const { return impl_->kind; }

std::vector<std::string> Tokenizer::Pieces() const {
  char* bytes = nullptr;
  size_t length = 0;
  char error[2048] = "";
  if (impl_->api->pieces(impl_->handle, &bytes, &length, error, sizeof(error)) != 0)
    throw TokenizerError(error);
  const std::unique_ptr<char, MallocDeleter> owned(bytes);
  std::vector<std::string> pieces;
  pieces.reserve(impl_->vocab_size);
  for (size_t at = 0; at + sizeof(uint32_t) <= length;) {
    uint32_t n;
    std::memcpy(&n, bytes + at, sizeof(n));
    at += sizeof(n);
    if (n > length - at) throw TokenizerError(impl_->path + ": tokenizer module sent a bad piece list");
    pieces.emplace_back(bytes + at, n);
    at += n;
  }
  return pieces;
}

void Tokenizer::Encode(std::string_view text, std::vector<uint32_t>* out, Cache* cache) const {
  uint32_t* ids = nullptr;
  size_t count = 0;
  char error[2048] = "";
  if (impl_->api->encode(impl_->handle, text.data(), text.size(), cache, &ids, &count, error,
                         sizeof(error)) != 0)
    throw TokenizerError(error);
  const std::unique_ptr<uint32_t, MallocDeleter> owned(ids);
  out->insert(out->end(), ids, ids + count);
}

std::string Tokenizer::Decode(std::span<const uint32_t> ids) const {
  char* text = nullptr;
  size_t length = 0;
  char error[2048] = "";
  if (impl_->api->decode(impl_->handle, ids.data(), ids.size(), &text, &length, error,
                         sizeof(error)) != 0)
    throw TokenizerError(error);
  const std::unique_ptr<char, MallocDeleter> owned(text);
  return std::string(text, length);
}

}  // namespace sam::indexer
