// Prompt templates: how one prompt/response pair becomes the text of one document.
//
// Usage:
//   std::string doc = sam::corpora::RenderDocument(sam::corpora::Template::kVicuna,
//                                                  "Name a colour.", "Blue.");
//   // The generation tool feeds the same prompt format to the model:
//   std::string prompt = sam::corpora::RenderPrompt(sam::corpora::Template::kVicuna,
//                                                   "Name a colour.");
//
// The corpus documents and the prompts given to the model at generation time must use the
// same template, or retrieval finds few matches; this header is the one place that defines
// them. All functions are pure and thread-safe.
#ifndef SAM_CORPORA_TEMPLATES_H_
#define SAM_CORPORA_TEMPLATES_H_

#include <string>
#include <string_view>

#include "sam/corpora/error.h"

namespace sam::corpora {

// How a prompt/response pair is rendered into document text.
enum class Template {
  // The non-empty parts joined by "\n" (prompt parts, then the response).
  kRaw,
  // FastChat's Vicuna v1.1 conversation format (see RenderVicuna).
  kVicuna,
};

// Parses "raw" or "vicuna" (exact, lower case). Throws CorpusError (code kInvalidArgument)
// naming the valid names otherwise.
Template ParseTemplate(std::string_view name);

// The name ParseTemplate accepts for `templ`.
std::string_view TemplateName(Template templ);

// The Vicuna v1.1 system prompt that opens every conversation.
inline constexpr std::string_view kVicunaSystemPrompt =
    "A chat between a curious user and an artificial intelligence assistant. The assistant "
    "gives helpful, detailed, and polite answers to the user's questions.";

// The prompt part of a Vicuna v1.1 conversation, ready for the model to continue:
//   "<system> USER: {prompt} ASSISTANT:"
std::string RenderVicunaPrompt(std::string_view prompt);

// A whole single-turn Vicuna v1.1 conversation:
//   "<system> USER: {prompt} ASSISTANT: {response}"
// No "</s>" is appended: document ends are handled by the index. An empty response gives
// exactly RenderVicunaPrompt(prompt) (FastChat renders an empty turn as the bare role).
std::string RenderVicuna(std::string_view prompt, std::string_view response);

// The non-empty of `first` and `second` joined by "\n" (either may be empty; both empty
// gives ""). Used for raw documents and to join prompt parts such as instruction and input.
std::string JoinNonEmpty(std::string_view first, std::string_view second);

// Renders one prompt/response pair with `templ`: JoinNonEmpty(prompt, response) for kRaw,
// RenderVicuna(prompt, response) for kVicuna.
std::string RenderDocument(Template templ, std::string_view prompt, std::string_view response);

// Renders a prompt for the model to continue, as the documents of `templ` lay it out before
// the response: for kRaw the prompt and the "\n" that RenderDocument puts before a response
// ("" for an empty prompt); for kVicuna RenderVicunaPrompt(prompt) (FastChat leaves the space
// before the response to the model). The one prompt rendering of sam-generate, bench_generate
// and `sam-traces`.
std::string RenderPrompt(Template templ, std::string_view prompt);

}  // namespace sam::corpora

#endif  // SAM_CORPORA_TEMPLATES_H_
