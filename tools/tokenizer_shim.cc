// A C interface over sam::indexer::Tokenizer, built as a loadable module (libsam_tokenizer_shim.so)
// for programs that also use libtorch (sam-generate, bench_generate).
//
// Why: Debian's libsentencepiece carries its own protobuf-lite 3.14 symbols; libtorch loads
// libprotobuf 3.21. In one global symbol scope, whichever loads first wins for both, and either
// libtorch's or SentencePiece's protobuf code runs against the wrong runtime (a crash at
// start-up, or "compiled against version 3.14.0 ... not compatible with the installed version
// (3.21.12)" when a model is loaded). tokenizer_shim.h loads this module with
// dlopen(RTLD_LOCAL | RTLD_DEEPBIND): SentencePiece then binds to its own protobuf copy and stays
// out of the global scope.
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <string>
#include <vector>

#include "sam/indexer/tokenizer.h"

namespace {

void SetError(const std::exception& e, char* error, size_t error_size) {
  if (error == nullptr || error_size == 0) return;
  std::strncpy(error, e.what(), error_size - 1);
  error[error_size - 1] = '\0';
}

}  // namespace

extern "C" {

void* sam_tokenizer_load(const char* path, char* error, size_t error_size) {
  try {
    return new sam::indexer::Tokenizer(sam::indexer::Tokenizer::Load(path));
  } catch (const std::exception& e) {
    SetError(e, error, error_size);
    return nullptr;
  }
}

void sam_tokenizer_free(void* tokenizer) { delete static_cast<sam::indexer::Tokenizer*>(tokenizer); }

uint32_t sam_tokenizer_vocab_size(const void* t) {
  return static_cast<const sam::indexer::Tokenizer*>(t)->vocab_size();
}
uint32_t sam_tokenizer_bos_id(const void* t) { return static_cast<const sam::indexer::Tokenizer*>(t)->bos_id(); }
uint32_t sam_tokenizer_eos_id(const void* t) { return static_cast<const sam::indexer::Tokenizer*>(t)->eos_id(); }
void sam_tokenizer_sha256(const void* t, uint8_t* out32) {
  const auto& digest = static_cast<const sam::indexer::Tokenizer*>(t)->sha256();
  std::memcpy(out32, digest.data(), 32);
}

// Encodes text into a malloc'd array (*ids, *count); free it with std::free. Returns 0 on success.
int sam_tokenizer_encode(const void* t, const char* text, size_t length, uint32_t** ids, size_t* count,
                         char* error, size_t error_size) {
  try {
    std::vector<uint32_t> out;
    static_cast<const sam::indexer::Tokenizer*>(t)->Encode(std::string_view(text, length), &out);
    *count = out.size();
    *ids = static_cast<uint32_t*>(std::malloc(std::max<size_t>(1, out.size()) * sizeof(uint32_t)));
    if (*ids == nullptr) throw std::bad_alloc();
    std::memcpy(*ids, out.data(), out.size() * sizeof(uint32_t));
    return 0;
  } catch (const std::exception& e) {
    SetError(e, error, error_size);
    return 1;
  }
}

// Decodes ids into a malloc'd string (*text, *length); free it with std::free. Returns 0 on success.
int sam_tokenizer_decode(const void* t, const uint32_t* ids, size_t count, char** text, size_t* length,
                         char* error, size_t error_size) {
  try {
    const std::string out = static_cast<const sam::indexer::Tokenizer*>(t)->Decode({ids, count});
    *length = out.size();
    *text = static_cast<char*>(std::malloc(out.size() + 1));
    if (*text == nullptr) throw std::bad_alloc();
    std::memcpy(*text, out.data(), out.size() + 1);
    return 0;
  } catch (const std::exception& e) {
    SetError(e, error, error_size);
    return 1;
  }
}

}  // extern "C"
