// The C API's tokenizer calls (sam/sam.h, "Tokenizers") over sam::indexer::Tokenizer's isolated
// backend, which loads SentencePiece from libsam_tokenizer_shim.so in its own symbol scope: the
// runtime library gains no protobuf of its own to clash with libtorch's.
#include <algorithm>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include "c_api_internal.h"
#include "sam/error.h"
#include "sam/format/sha256.h"
#include "sam/indexer/tokenizer.h"
#include "sam/sam.h"

struct sam_tokenizer {
  sam::indexer::Tokenizer tokenizer;
  std::string sha256_hex;
};

namespace {

using sam::capi_internal::Guard;
using sam::capi_internal::Require;

void WriteHex(const std::string& hex, char out[65]) {
  std::memcpy(out, hex.c_str(), hex.size() + 1);
}

}  // namespace

int sam_tokenizer_open(const char* path, sam_tokenizer** out) {
  return Guard([&] {
    Require(path != nullptr, "sam_tokenizer_open", "path is NULL");
    Require(out != nullptr, "sam_tokenizer_open", "out is NULL");
    auto tokenizer = sam::indexer::Tokenizer::Load(path);
    const std::string hex = sam::format::DigestToHex(tokenizer.sha256());
    *out = new sam_tokenizer{std::move(tokenizer), hex};
  });
}

void sam_tokenizer_free(sam_tokenizer* tokenizer) { delete tokenizer; }

uint32_t sam_tokenizer_vocab_size(const sam_tokenizer* tokenizer) {
  return tokenizer == nullptr ? 0 : tokenizer->tokenizer.vocab_size();
}

uint32_t sam_tokenizer_bos_id(const sam_tokenizer* tokenizer) {
  return tokenizer == nullptr ? SAM_NO_TOKEN : tokenizer->tokenizer.bos_id();
}

uint32_t sam_tokenizer_eos_id(const sam_tokenizer* tokenizer) {
  return tokenizer == nullptr ? SAM_NO_TOKEN : tokenizer->tokenizer.eos_id();
}

int sam_tokenizer_sha256(const sam_tokenizer* tokenizer, char out[65]) {
  return Guard([&] {
    Require(tokenizer != nullptr, "sam_tokenizer_sha256", "tokenizer is NULL");
    Require(out != nullptr, "sam_tokenizer_sha256", "out is NULL");
    WriteHex(tokenizer->sha256_hex, out);
  });
}

int sam_tokenizer_encode(const sam_tokenizer* tokenizer, const char* text, size_t length,
                         int add_bos, uint32_t* ids, size_t capacity, size_t* count) {
  return Guard([&] {
    Require(tokenizer != nullptr, "sam_tokenizer_encode", "tokenizer is NULL");
    Require(text != nullptr || length == 0, "sam_tokenizer_encode", "text is NULL");
    Require(ids != nullptr || capacity == 0, "sam_tokenizer_encode", "ids is NULL");
    Require(count != nullptr, "sam_tokenizer_encode", "count is NULL");
    const std::string_view view(text == nullptr ? "" : text, length);
    std::vector<uint32_t> encoded;
    if (add_bos != 0)
      tokenizer->tokenizer.EncodePrompt(view, &encoded);
    else
      tokenizer->tokenizer.Encode(view, &encoded);
    std::copy_n(encoded.begin(), std::min(capacity, encoded.size()), ids);
    *count = encoded.size();
  });
}

int sam_tokenizer_decode(const sam_tokenizer* tokenizer, const uint32_t* ids, size_t n,
                         char* text, size_t capacity, size_t* length) {
  return Guard([&] {
    Require(tokenizer != nullptr, "sam_tokenizer_decode", "tokenizer is NULL");
    Require(ids != nullptr || n == 0, "sam_tokenizer_decode", "ids is NULL");
    Require(text != nullptr || capacity == 0, "sam_tokenizer_decode", "text is NULL");
    Require(length != nullptr, "sam_tokenizer_decode", "length is NULL");
    const uint32_t vocab = tokenizer->tokenizer.vocab_size();
    for (size_t i = 0; i < n; ++i)
      Require(ids[i] < vocab, "sam_tokenizer_decode",
              "ids[" + std::to_string(i) + "] = " + std::to_string(ids[i]) +
                  " is outside the vocabulary of " + tokenizer->tokenizer.path() + " (" +
                  std::to_string(vocab) + " ids)");
    const std::string decoded = tokenizer->tokenizer.Decode({ids, n});
    const size_t written = std::min(capacity, decoded.size());
    if (written > 0) std::memcpy(text, decoded.data(), written);  // text may be NULL (capacity 0)
    if (capacity > decoded.size()) text[decoded.size()] = '\0';
    *length = decoded.size();
  });
}

int sam_tokenizer_check_index(const sam_tokenizer* tokenizer, const sam_index* index) {
  char recorded[65];
  if (const int status = sam_index_tokenizer_sha256(index, recorded); status != SAM_OK)
    return status;
  return Guard([&] {
    Require(tokenizer != nullptr, "sam_tokenizer_check_index", "tokenizer is NULL");
    if (tokenizer->sha256_hex == recorded) return;
    throw sam::Error(sam::ErrorCode::kTokenizerMismatch,
                     std::string("sam_tokenizer_check_index: the index was built ") +
                         (recorded[0] == '\0' ? std::string("from token ids (no tokenizer)")
                                              : "with tokenizer " + std::string(recorded)) +
                         ", not with " + tokenizer->tokenizer.path() + " (tokenizer " +
                         tokenizer->sha256_hex + ")");
  });
}
