// Trace input shared by the runtime tools (sam-replay, bench_step): the
// SentencePiece tokenizer wrapper and the JSONL trace reader.
//
//   sam::tools::Tokenizer tok("llama-32k.model");
//   auto traces = sam::tools::ReadTraces("t.jsonl", &tok, tok.bos(), tok.vocab_size());
//
// A trace line is {"id", "category", "prompt", "output"} with strings (needs a
// tokenizer) or {"prompt_ids", "output_ids"} with id arrays. Prompts start
// with BOS (added when missing); traces with an empty output are skipped.
// Errors throw sam::Error naming the file, line and field (context() holds them).
#ifndef SAM_TOOLS_TRACE_IO_H_
#define SAM_TOOLS_TRACE_IO_H_

#include <memory>
#include <string>
#include <vector>

#include "sam/runtime/replay.h"

namespace sentencepiece {
class SentencePieceProcessor;
}

namespace sam::tools {

class Tokenizer {
 public:
  explicit Tokenizer(const std::string& path);
  ~Tokenizer();
  std::vector<uint32_t> Encode(const std::string& text) const;
  uint32_t bos() const;
  uint32_t vocab_size() const;

 private:
  std::unique_ptr<sentencepiece::SentencePieceProcessor> sp_;
};

std::vector<runtime::ReplayTrace> ReadTraces(const std::string& path, const Tokenizer* tokenizer,
                                             uint32_t bos, uint32_t vocab_size);

}  // namespace sam::tools

#endif  // SAM_TOOLS_TRACE_IO_H_
