// Tokenization: the one tokenizer wrapper of the project (indexing, replay, generation).
//
//   auto tok = sam::indexer::Tokenizer::Load("llama-32k.model");   // or a tokenizer.json

//   sam::indexer::Tokenizer::Cache cache;             // one per thread
//   std::vector<uint32_t> ids;
//   tok.Encode("Hello world", &ids, &cache);           // no BOS added
//   std::vector<uint32_t> prompt;
//   tok.EncodePrompt(rendered_prompt, &prompt);        // BOS (if the model has one), then the text
//
// Two kinds of model files, chosen by content:
//  * a SentencePiece model (.model): encoded by SentencePiece itself;
//  * a Hugging Face tokenizer.json (a file whose text starts with '{', or a folder holding
//    tokenizer.json): a BPE with merges (byte-level alphabet or byte fallback), its normalizer,
//    pre-tokenizer, added tokens and decoder, encoded as Hugging Face's Rust `tokenizers` does
//    with add_special_tokens = false (src/hf_tokenizer.h lists what is supported; anything else
//    is refused at Load, naming the file and the component). BOS and EOS come from
//    tokenizer_config.json beside the file (bos_token unless add_bos_token is false, eos_token),
//    else BOS from a TemplateProcessing post-processor. Invalid UTF-8 in encoded text is replaced
//    by U+FFFD (Rust's from_utf8_lossy) before encoding.
//
// Two link-time backends implement this one class; a program links exactly one of them:
//  * sam::tokenizer (src/tokenizer.cc) calls SentencePiece directly;
//  * sam::tokenizer_isolated (src/tokenizer_isolated.cc) is for programs that also link libtorch:
//    Debian's SentencePiece and libtorch carry clashing protobuf copies, so this backend loads
//    the SentencePiece backend from a module, libsam_tokenizer_shim.so
//    (src/tokenizer_module.cc), with dlopen(RTLD_LOCAL | RTLD_DEEPBIND) and forwards every call
//    to it. The module is looked up beside the shared object holding the backend (the shared
//    runtime library, the Python extension), in ../lib/ and next to the program, then at its
//    build-tree path. Such programs must link
//    neither sam::indexer nor SentencePiece.
// Both backends handle both kinds and behave identically (tests/indexer/tokenizer_test.cc checks both against
// SentencePiece's own tools) and throw the same TokenizerError.
//
// Model files: Load() reads regular files and streams (pipes, FIFOs with a writer attached)
// once, hashing the bytes it parses; it never blocks on a FIFO that has no writer (that reads as
// empty), and refuses directories and devices by name.
//
// Encode() returns exactly what SentencePieceProcessor::Encode returns. With
// a Cache it is faster: for models whose pieces never contain a whitespace
// marker after another character (LLaMA's BPE model, identity normaliser, no
// extra-whitespace removal), no piece can span a " x" boundary, so the text is
// cut at the spaces that follow a non-space and each segment is encoded once
// and remembered. Load() checks those conditions on the model (reading the
// ModelProto fields itself) and Encode() falls back to whole-text encoding when
// they do not hold.
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

enum class TokenizerKind { kSentencePiece, kHuggingFace };

// "sentencepiece" or "tokenizer.json".
inline const char* TokenizerKindName(TokenizerKind kind) {
  return kind == TokenizerKind::kSentencePiece ? "sentencepiece" : "tokenizer.json";
}

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

  // Loads a SentencePiece model, a tokenizer.json, or a folder holding tokenizer.json; throws
  // TokenizerError naming the file (and, for the isolated backend, the module) on failure.
  static Tokenizer Load(const std::string& path);
  Tokenizer(Tokenizer&&) noexcept;
  Tokenizer& operator=(Tokenizer&&) noexcept;
  ~Tokenizer();

  uint32_t vocab_size() const;
  uint32_t bos_id() const;  // format::kNoToken if the model has none
  uint32_t eos_id() const;
  // The fingerprint an index records: SHA-256 of the SentencePiece model bytes that were parsed,
  // or for a tokenizer.json of its model (vocabulary, merges, options), normalizer,
  // pre-tokenizer and added tokens, serialised canonically (formatting does not matter).
  const format::Sha256Digest& sha256() const;
  TokenizerKind kind() const;
  const std::string& path() const;
  // True when segment caching is exact for this model (see above; always for tokenizer.json,
  // whose Cache memoises pre-tokens).
  bool segment_cache_exact() const;
  std::vector<std::string> Pieces() const;

  // Appends the ids of text to *out. With cache == nullptr or a model that
  // does not allow segment caching, encodes the whole text at once.
  void Encode(std::string_view text, std::vector<uint32_t>* out, Cache* cache = nullptr) const;
  // Appends the ids of a prompt the model continues: BOS when the model has one, then the
  // ids of `rendered` (a prompt already rendered with corpora::RenderPrompt). The one
  // prompt encoding of sam-generate, bench_generate and sam-replay's string traces.
  void EncodePrompt(std::string_view rendered, std::vector<uint32_t>* out) const {
    if (bos_id() != format::kNoToken) out->push_back(bos_id());
    Encode(rendered, out);
  }
  std::string Decode(std::span<const uint32_t> ids) const;

 private:
  struct Impl;
  explicit Tokenizer(std::unique_ptr<Impl> impl);
  void EncodeWhole(std::string_view text, std::vector<uint32_t>* out) const;
  std::unique_ptr<Impl> impl_;
};

}  // namespace sam::indexer

#endif  // SAM_INDEXER_TOKENIZER_H_
