// Trace input shared by the runtime tools (sam-replay, bench_step): the JSONL trace reader.
//
//   auto tok = sam::indexer::Tokenizer::Load("llama-32k.model");
//   auto traces = sam::tools::ReadTraces("t.jsonl", &tok, tok.bos_id(), tok.vocab_size());
//
// A trace line is {"id", "category", "prompt", "output"} with strings (needs a
// tokenizer) or {"prompt_ids", "output_ids"} with id arrays. A string prompt is
// encoded with Tokenizer::EncodePrompt (BOS, then the text as rendered by
// corpora::RenderPrompt, which `sam-traces` applied), an output with
// Tokenizer::Encode. Prompts start with `bos` (added when missing, unless it is
// format::kNoToken); traces with an empty output are skipped. Errors throw
// sam::Error naming the file, line and field (context() holds them).
// With a tenant_field, each trace's `tenant` is that field's value (a string
// as is, any other JSON value as its JSON text); a trace without it is refused.
#ifndef SAM_TOOLS_TRACE_IO_H_
#define SAM_TOOLS_TRACE_IO_H_

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "sam/indexer/tokenizer.h"
#include "sam/runtime/replay.h"

namespace sam::tools {

// Appends the ids of a string field: a prompt (`is_prompt`, BOS first) or an output.
using FieldEncoder =
    std::function<void(std::string_view text, bool is_prompt, std::vector<uint32_t>* out)>;

// `tokenizer` may be null when every trace gives ids.
std::vector<runtime::ReplayTrace> ReadTraces(const std::string& path,
                                             const indexer::Tokenizer* tokenizer, uint32_t bos,
                                             uint32_t vocab_size,
                                             const std::string& tenant_field = "");

// The same with any encoder (empty: string fields are refused), for tests.
std::vector<runtime::ReplayTrace> ReadTraces(const std::string& path, const FieldEncoder& encode,
                                             uint32_t bos, uint32_t vocab_size,
                                             const std::string& tenant_field = "");

}  // namespace sam::tools

#endif  // SAM_TOOLS_TRACE_IO_H_
