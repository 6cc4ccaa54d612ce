#include "sam/corpora/templates.h"

#include "sam/corpora/error.h"

namespace sam::corpora {

Template ParseTemplate(std::string_view name) {
  for (Template templ : {Template::kRaw, Template::kVicuna}) {
    if (name == TemplateName(templ)) return templ;
  }
  throw CorpusError(CorpusError::Code::kInvalidArgument,
                    "unknown template '" + std::string(name) + "' (valid: raw, vicuna)");
}

std::string_view TemplateName(Template templ) {
  switch (templ) {
    case Template::kRaw:
      return "raw";
    case Template::kVicuna:
      return "vicuna";
  }
  return "unknown";
}

std::string RenderVicunaPrompt(std::string_view prompt) {
  constexpr std::string_view kUser = " USER: ";
  constexpr std::string_view kAssistant = " ASSISTANT:";
  std::string text;
  text.reserve(kVicunaSystemPrompt.size() + kUser.size() + prompt.size() + kAssistant.size());
  text.append(kVicunaSystemPrompt).append(kUser).append(prompt).append(kAssistant);
  return text;
}

std::string RenderVicuna(std::string_view prompt, std::string_view response) {
  std::string text = RenderVicunaPrompt(prompt);
  if (!response.empty()) {
    text.reserve(text.size() + 1 + response.size());
    text.append(" ").append(response);
  }
  return text;
}

std::string JoinNonEmpty(std::string_view first, std::string_view second) {
  std::string text;
  text.reserve(first.size() + 1 + second.size());
  text.append(first);
  if (!first.empty() && !second.empty()) text.push_back('\n');
  text.append(second);
  return text;
}

std::string RenderDocument(Template templ, std::string_view prompt, std::string_view response) {
  switch (templ) {
    case Template::kRaw:
      return JoinNonEmpty(prompt, response);
    case Template::kVicuna:
      return RenderVicuna(prompt, response);
  }
  throw CorpusError(CorpusError::Code::kInvalidArgument, "unknown template value");
}

std::string RenderPrompt(Template templ, std::string_view prompt) {
  switch (templ) {
    case Template::kRaw:
      return prompt.empty() ? std::string() : std::string(prompt) + "\n";
    case Template::kVicuna:
      return RenderVicunaPrompt(prompt);
  }
  throw CorpusError(CorpusError::Code::kInvalidArgument, "unknown template value");
}

}  // namespace sam::corpora
