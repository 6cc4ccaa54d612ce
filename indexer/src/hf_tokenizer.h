// The Hugging Face tokenizer.json backend of sam::indexer::Tokenizer (internal).
//
// Implements what the byte-level and SentencePiece-style BPE files of current models use, with
// the semantics of Hugging Face's Rust `tokenizers` library (encode without post-processing,
// i.e. add_special_tokens = false):
//  * added tokens: the text is first cut at added tokens whose `normalized` is false (matched
//    leftmost-longest on the raw text), the remaining pieces are normalized, then cut at added
//    tokens whose `normalized` is true; `lstrip`/`rstrip` widen a match over white space;
//    `special` does not change encoding (special tokens written in the text are recognised);
//  * normalizers: NFC, NFD, NFKC, NFKD (ICU), Replace with a string pattern, Prepend, Sequence;
//  * pre-tokenizers: Split (string or regex pattern, every split behaviour, invert), ByteLevel
//    (with or without its regex, add_prefix_space), Sequence; regexes run on PCRE2 with `\s` and
//    `\S` rewritten to Oniguruma's classes, which the Rust library uses;
//  * model: BPE with merges (string or pair form), byte-level alphabet or byte fallback, unk
//    token (fuse_unk), ignore_merges;
//  * decoders: ByteLevel, Replace, ByteFallback, Fuse, Strip, Sequence.
// Anything else is refused at load, naming the file and the component.
//
// Invalid UTF-8 in the text to encode is replaced by U+FFFD, one per maximal invalid
// subsequence, exactly as Rust's String::from_utf8_lossy (and a browser's or Node's UTF-8
// decoder) do; the ids are then those Hugging Face gives for that repaired string.
#ifndef SAM_INDEXER_HF_TOKENIZER_H_
#define SAM_INDEXER_HF_TOKENIZER_H_

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "sam/format/index.h"
#include "sam/indexer/tokenizer.h"

namespace sam::indexer::internal {

class HfTokenizer {
 public:
  // Parses tokenizer.json bytes. `config` is tokenizer_config.json's text or empty; it names
  // BOS and EOS. `path` names the file in errors; `named_json` says the user named a
  // tokenizer.json (a file named *.json or a folder), else a file that does not parse as JSON is
  // reported as neither kind. Throws TokenizerError.
  static std::unique_ptr<HfTokenizer> Parse(const std::string& path, std::string_view json,
                                            std::string_view config, bool named_json);
  ~HfTokenizer();

  uint32_t vocab_size() const;
  uint32_t bos_id() const;
  uint32_t eos_id() const;
  // SHA-256 of the parts that decide the ids: model (vocabulary, merges, options), normalizer,
  // pre-tokenizer and added tokens, each serialised canonically (sorted keys, no spaces).
  const format::Sha256Digest& fingerprint() const;
  std::vector<std::string> Pieces() const;

  void Encode(std::string_view text, std::vector<uint32_t>* out, Tokenizer::Cache* cache) const;
  std::string Decode(std::span<const uint32_t> ids) const;

  struct State;

 private:
  HfTokenizer();
  std::unique_ptr<State> s_;
};

// Replaces every maximal invalid UTF-8 subsequence of `text` by U+FFFD (from_utf8_lossy).
// Returns false and leaves *out alone when text is valid.
bool RepairUtf8(std::string_view text, std::string* out);

}  // namespace sam::indexer::internal

#endif  // SAM_INDEXER_HF_TOKENIZER_H_
