// SentencePiece tokenization for indexing and replay.
//
//   auto tok = sam::indexer::Tokenizer::Load("llama-32k.model");
//   sam::indexer::Tokenizer::Cache cache;             // one per thread
//   std::vector<uint32_t> ids;
//   tok.Encode("Hello world", &ids, &cache);           // no BOS added
//
// Encode() returns exactly what SentencePieceProcessor::Encode returns. With
// a Cache it is faster: for models whose pieces never contain a whitespace
// marker after another character (LLaMA's BPE model, identity normaliser, no
// extra-whitespace removal), no piece can span a " x" boundary, so the text is
// cut at the spaces that follow a non-space and each segment is encoded once
// and remembered. Load() checks those conditions on the model and Encode()
// falls back to whole-text encoding when they do not hold; the equality of
// both paths is tested on the real corpora.
//
// Thread safety: a loaded Tokenizer is immutable and may be shared; a Cache
// belongs to one thread.
#ifndef SAM_INDEXER_TOKENIZER_H_
#define SAM_INDEXER_TOKENIZER_H_

#include <cstdint>
#include <memory>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "sam/error.h"
#include "sam/format/index.h"

namespace sam::indexer {

// A sam::Error thrown by Tokenizer: kIo when the model cannot be read, kTokenizer when it does
// not parse or encoding fails.
class TokenizerError : public sam::Error {
 public:
  using sam::Error::Error;
  // Code kTokenizer with a plain message.
  explicit TokenizerError(const std::string& message)
      : sam::Error(ErrorCode::kTokenizer, message) {}
};

class Tokenizer {
 public:
  // Per-thread memo of encoded segments.
  struct Cache {
    struct Hash {
      using is_transparent = void;
      size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
    };
    // segment -> (offset, length) in ids; looked up by string_view, no copy.
    std::unordered_map<std::string, std::pair<uint32_t, uint32_t>, Hash, std::equal_to<>> index;
    std::vector<uint32_t> ids;
    uint64_t hits = 0, misses = 0;
  };

  // Loads a SentencePiece model file; throws TokenizerError naming the file.
  static Tokenizer Load(const std::string& path);
  Tokenizer(Tokenizer&&) noexcept;
  Tokenizer& operator=(Tokenizer&&) noexcept;
  ~Tokenizer();

  uint32_t vocab_size() const;
  uint32_t bos_id() const;  // format::kNoToken if the model has none
  uint32_t eos_id() const;
  const format::Sha256Digest& sha256() const;  // of the model file's bytes
  const std::string& path() const;
  // True when segment caching is exact for this model (see above).
  bool segment_cache_exact() const;
  std::vector<std::string> Pieces() const;

  // Appends the ids of text to *out. With cache == nullptr or a model that
  // does not allow segment caching, encodes the whole text at once.
  void Encode(std::string_view text, std::vector<uint32_t>* out, Cache* cache = nullptr) const;
  std::string Decode(std::span<const uint32_t> ids) const;

 private:
  struct Impl;
  explicit Tokenizer(std::unique_ptr<Impl> impl);
  void EncodeWhole(std::string_view text, std::vector<uint32_t>* out) const;
  std::unique_ptr<Impl> impl_;
};

}  // namespace sam::indexer

#endif  // SAM_INDEXER_TOKENIZER_H_
