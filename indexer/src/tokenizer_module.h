// The C interface of libsam_tokenizer_shim.so, shared by the module (tokenizer_module.cc) and the
// isolated backend that loads it (tokenizer_isolated.cc); both are built from one tree, and the
// backend refuses a module whose kTokenizerModuleAbi differs.
//
// Handles are sam::indexer::Tokenizer objects of the module's own (SentencePiece) backend; caches
// are sam::indexer::Tokenizer::Cache objects owned by the caller (same compiler, same standard
// library: the module is private to this build, not a stable ABI). Functions that can fail
// return 0 on success, else write a NUL-terminated message to error[0, error_size) and return
// non-zero. Arrays and strings they return are malloc'd; the caller frees them with free().
#ifndef SAM_INDEXER_TOKENIZER_MODULE_H_
#define SAM_INDEXER_TOKENIZER_MODULE_H_

#include <cstddef>
#include <cstdint>

namespace sam::indexer::internal {

// Bumped whenever a signature below changes.
inline constexpr int kTokenizerModuleAbi = 4;

struct TokenizerModuleApi {
  int (*abi)();
  // *code: the sam::ErrorCode of a failure (kIo: the file cannot be read).
  void* (*load)(const char* path, int* code, char* error, size_t error_size);
  void (*free)(void* tokenizer);
  uint32_t (*vocab_size)(const void* tokenizer);
  uint32_t (*bos_id)(const void* tokenizer);
  uint32_t (*eos_id)(const void* tokenizer);
  int (*segment_cache_exact)(const void* tokenizer);
  int (*kind)(const void* tokenizer);  // a TokenizerKind
  void (*sha256)(const void* tokenizer, uint8_t* out32);
  // All pieces in id order, each as a 4-byte host-order length and its bytes.
  int (*pieces)(const void* tokenizer, char** bytes, size_t* length, char* error,
                size_t error_size);
  int (*encode)(const void* tokenizer, const char* text, size_t length, void* cache,
                uint32_t** ids, size_t* count, char* error, size_t error_size);
  int (*decode)(const void* tokenizer, const uint32_t* ids, size_t count, char** text,
                size_t* length, char* error, size_t error_size);
};

}  // namespace sam::indexer::internal

#endif  // SAM_INDEXER_TOKENIZER_MODULE_H_
