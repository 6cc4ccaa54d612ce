#include "sam/corpora/corpora.h"

#include <array>
#include <utility>

#include "json_records.h"
#include "text_corpus.h"

namespace sam::corpora {
namespace {

using internal::ExpectObject;
using internal::ExpectObjectField;
using internal::OptionalString;
using internal::RequiredArray;
using internal::RequiredInteger;
using internal::RequiredString;
using simdjson::dom::element;

constexpr std::array<Kind, 6> kAllKinds = {Kind::kAlpaca, Kind::kPython18k, Kind::kGsm8k,
                                           Kind::kHagrid, Kind::kJsonl,     Kind::kText};

// One prompt/response pair of a record, before rendering. `response` points into the parsed
// record and is valid while it is.
struct Turn {
  std::string prompt;
  std::string_view response;
};

// alpaca and python18k: {instruction, input, output[, prompt]}.
void AlpacaTurns(element record, bool python18k, std::vector<Turn>& turns) {
  const simdjson::dom::object object = ExpectObject(record, "record");
  const std::string_view instruction = RequiredString(object, "instruction", "instruction");
  const std::string_view input = OptionalString(object, "input", "input");
  const std::string_view output = RequiredString(object, "output", "output");
  // python18k's ready-made Alpaca prompt repeats instruction and input: checked, not rendered.
  if (python18k) OptionalString(object, "prompt", "prompt");
  turns.push_back({JoinNonEmpty(instruction, input), output});
}

// gsm8k: {question, answer}.
void Gsm8kTurns(element record, std::vector<Turn>& turns) {
  const simdjson::dom::object object = ExpectObject(record, "record");
  const std::string_view question = RequiredString(object, "question", "question");
  const std::string_view answer = RequiredString(object, "answer", "answer");
  turns.push_back({std::string(question), answer});
}

// hagrid: one turn per answer; the prompt is the numbered quotes, then the query.
void HagridTurns(element record, std::vector<Turn>& turns) {
  const simdjson::dom::object object = ExpectObject(record, "record");
  const std::string_view query = RequiredString(object, "query", "query");
  std::string quotes_block;
  uint64_t index = 0;
  for (element quote_value : RequiredArray(object, "quotes", "quotes")) {
    const std::string field = "quotes[" + std::to_string(index++) + "]";
    const simdjson::dom::object quote = ExpectObjectField(quote_value, field);
    const int64_t idx = RequiredInteger(quote, "idx", field + ".idx");
    const std::string_view text = RequiredString(quote, "text", field + ".text");
    if (!quotes_block.empty()) quotes_block.push_back('\n');
    quotes_block.append("[").append(std::to_string(idx)).append("] ").append(text);
  }
  const std::string prompt = JoinNonEmpty(quotes_block, query);
  index = 0;
  for (element answer_value : RequiredArray(object, "answers", "answers")) {
    const std::string field = "answers[" + std::to_string(index++) + "]";
    const simdjson::dom::object answer = ExpectObjectField(answer_value, field);
    turns.push_back({prompt, RequiredString(answer, "answer", field + ".answer")});
  }
}

}  // namespace

std::span<const Kind> AllKinds() { return kAllKinds; }

std::string KindNames() {
  std::string names;
  for (Kind kind : kAllKinds) names.append(names.empty() ? "" : ", ").append(KindName(kind));
  return names;
}

Kind ParseKind(std::string_view name) {
  for (Kind kind : kAllKinds) {
    if (name == KindName(kind)) return kind;
  }
  throw CorpusError(CorpusError::Code::kInvalidArgument,
                    "unknown corpus kind '" + std::string(name) + "' (valid: " + KindNames() + ")");
}

std::string_view ReasonName(CorpusError::Code code) {
  switch (code) {
    case CorpusError::Code::kIo:
      return "I/O error";
    case CorpusError::Code::kInvalidJson:
      return "invalid JSON";
    case CorpusError::Code::kBadRecord:
      return "bad record";
    case CorpusError::Code::kBadValue:
      return "bad value";
    case CorpusError::Code::kInvalidArgument:
      return "invalid argument";
    default:  // the corpora readers throw only the codes above
      break;
  }
  return "other";
}

std::string DescribeSkips(const ReadStats& stats) {
  if (stats.skipped == 0) return "";
  std::string text = "skipped " + std::to_string(stats.skipped) + " of " +
                     std::to_string(stats.records) + " records (";
  bool first = true;
  for (const auto& [code, count] : stats.skipped_by_code) {
    text.append(first ? "" : ", ").append(ReasonName(code)).append(": ").append(
        std::to_string(count));
    first = false;
  }
  text += ")";
  for (size_t i = 0; i < stats.skip_examples.size(); ++i) {
    text.append(i == 0 ? ", e.g. " : "; ").append(stats.skip_examples[i]);
  }
  const uint64_t shown = stats.skip_examples.size();
  if (stats.skipped > shown) text += "; and " + std::to_string(stats.skipped - shown) + " more";
  return text;
}

std::string_view KindName(Kind kind) {
  switch (kind) {
    case Kind::kAlpaca:
      return "alpaca";
    case Kind::kPython18k:
      return "python18k";
    case Kind::kGsm8k:
      return "gsm8k";
    case Kind::kHagrid:
      return "hagrid";
    case Kind::kJsonl:
      return "jsonl";
    case Kind::kText:
      return "text";
  }
  return "unknown";
}

ReadStats ReadCorpus(Kind kind, const std::string& path, const ReadOptions& options,
                     const std::function<void(std::string&& document)>& sink) {
  Input input = Input::Open(path);
  return ReadCorpus(kind, input, options, sink);
}

ReadStats ReadCorpus(Kind kind, Input& input, const ReadOptions& options,
                     const std::function<void(std::string&& document)>& sink) {
  if (kind == Kind::kText) {
    return internal::ReadTextCorpus(input, options.text_split, options.skip_bad, sink);
  }

  ReadStats stats;
  auto emit = [&](std::string&& document) {
    if (document.empty()) return;
    ++stats.documents;
    sink(std::move(document));
  };
  std::vector<Turn> turns;
  internal::ForEachJsonRecord(
      input, internal::JsonLayout::kDetect, options.skip_bad, stats, [&](element record) {
        // Every turn of the record is extracted (and so validated) before the first is emitted: a
        // malformed record contributes no document even when it is skipped.
        turns.clear();
        switch (kind) {
          case Kind::kAlpaca:
            AlpacaTurns(record, /*python18k=*/false, turns);
            break;
          case Kind::kPython18k:
            AlpacaTurns(record, /*python18k=*/true, turns);
            break;
          case Kind::kGsm8k:
            Gsm8kTurns(record, turns);
            break;
          case Kind::kHagrid:
            HagridTurns(record, turns);
            break;
          case Kind::kJsonl: {
            const simdjson::dom::object object = ExpectObject(record, "record");
            emit(std::string(RequiredString(object, options.text_field, options.text_field)));
            return;
          }
          case Kind::kText:
            break;  // handled above
        }
        for (const Turn& turn : turns) {
          emit(RenderDocument(options.templ, turn.prompt, turn.response));
        }
      });
  return stats;
}

}  // namespace sam::corpora
