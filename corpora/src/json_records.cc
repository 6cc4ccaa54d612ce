#include "json_records.h"

#include <algorithm>
#include <cstddef>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>
#include <utility>

#include "file_io.h"

namespace sam::corpora::internal {
namespace {

using simdjson::dom::element;
using simdjson::dom::element_type;

// Where a JSON text stops parsing, found by re-parsing it with nlohmann's SAX parser, which
// (unlike simdjson) reports a byte position and says what it expected. Only run on the error
// path. Also counts the elements of a top-level array to name the record that failed.
class SyntaxErrorLocator : public nlohmann::json_sax<nlohmann::json> {
 public:
  bool null() override { return Value(); }
  bool boolean(bool) override { return Value(); }
  bool number_integer(number_integer_t) override { return Value(); }
  bool number_unsigned(number_unsigned_t) override { return Value(); }
  bool number_float(number_float_t, const string_t&) override { return Value(); }
  bool string(string_t&) override { return Value(); }
  bool binary(binary_t&) override { return Value(); }
  bool start_object(std::size_t) override { return Open(); }
  bool key(string_t&) override { return true; }
  bool end_object() override { return Close(); }
  bool start_array(std::size_t) override { return Open(); }
  bool end_array() override { return Close(); }
  bool parse_error(std::size_t position, const std::string&,
                   const nlohmann::detail::exception& error) override {
    position_ = position;
    detail_ = error.what();
    // nlohmann's text reads "[json.exception.parse_error.101] parse error at line 1, column
    // 5: <detail>"; keep the detail, the location is computed from the position instead.
    const size_t column = detail_.find("column ");
    const size_t colon = column == std::string::npos ? column : detail_.find(": ", column);
    if (colon != std::string::npos) detail_.erase(0, colon + 2);
    return false;
  }

  // The record (element of the top-level array) being parsed when the error occurred:
  // the one that was open, or the next one when the error is between two records.
  uint64_t record() const {
    return depth_ > 1 || started_ == 0 ? std::max<uint64_t>(started_, 1) - 1 : started_;
  }
  std::optional<size_t> position() const { return position_; }
  const std::string& detail() const { return detail_; }

 private:
  bool Value() {
    if (depth_ == 1) ++started_;
    return true;
  }
  bool Open() {
    Value();
    ++depth_;
    return true;
  }
  bool Close() {
    --depth_;
    return true;
  }

  uint64_t depth_ = 0;
  uint64_t started_ = 0;
  std::optional<size_t> position_;
  std::string detail_;
};

struct SyntaxError {
  std::string problem;  // "invalid JSON at line 3, column 7: <what was expected>"
  uint64_t record = 0;  // meaningful for a top-level array only
  bool record_known = false;
};

// Describes why simdjson rejected `text` (with `code`). `multi_line` selects whether the
// location is given as "line L, column C" or as "column C" (for a JSONL line).
SyntaxError DescribeSyntaxError(std::string_view text, simdjson::error_code code, bool multi_line) {
  SyntaxError result;
  SyntaxErrorLocator locator;
  nlohmann::json::sax_parse(text.begin(), text.end(), &locator);
  if (!locator.position().has_value()) {
    // nlohmann accepts what simdjson rejects (e.g. nesting deeper than simdjson's limit, or a
    // file too large for it): only simdjson's reason is known.
    result.problem = std::string("invalid JSON: ") + simdjson::error_message(code);
    return result;
  }
  // nlohmann's position counts the bytes read, including the offending one.
  const size_t position = std::min(*locator.position(), text.size());
  const std::string_view before = text.substr(0, position > 0 ? position - 1 : 0);
  const size_t last_newline = before.rfind('\n');
  const size_t column =
      last_newline == std::string_view::npos ? before.size() + 1 : before.size() - last_newline;
  result.problem = "invalid JSON at ";
  if (multi_line) {
    const auto line = 1 + std::count(before.begin(), before.end(), '\n');
    result.problem += "line " + std::to_string(line) + ", ";
  }
  result.problem += "column " + std::to_string(column) + ": " + locator.detail();
  result.record = locator.record();
  result.record_known = true;
  return result;
}

std::string Location(std::string_view unit, uint64_t number) {
  return std::string(unit) + " " + std::to_string(number);
}

// Runs `visit` on one record, routing a RecordProblem to HandleProblem. The location is
// "<unit> <number>", built only when needed.
void VisitRecord(const std::string& path, std::string_view unit, uint64_t number, element record,
                 bool skip_bad, ReadStats& stats, const std::function<void(element)>& visit) {
  try {
    visit(record);
  } catch (const RecordProblem& problem) {
    HandleProblem(path, Location(unit, number), problem.code(), problem.what(), skip_bad, stats,
                  problem.field());
  }
}

void ForEachArrayRecord(Input& input, bool skip_bad, ReadStats& stats,
                        const std::function<void(element)>& visit) {
  const std::string& path = input.path();
  simdjson::padded_string storage;
  const std::string_view text = StripBom(WholeContent(input, storage));
  simdjson::dom::parser parser;
  element root;
  if (auto error = parser.parse(text.data(), text.size(), false).get(root)) {
    if (error == simdjson::CAPACITY) {
      throw CorpusError(CorpusError::Code::kInvalidArgument, ErrorContext{.file = path},
                        "a JSON array file is limited to 4 GiB; convert it to JSONL");
    }
    SyntaxError syntax = DescribeSyntaxError(text, error, /*multi_line=*/true);
    throw CorpusError(
        CorpusError::Code::kInvalidJson,
        ErrorContext{.file = path,
                     .record = syntax.record_known ? Location("record", syntax.record) : ""},
        syntax.problem);
  }
  simdjson::dom::array records;
  if (root.get_array().get(records)) {
    // Only reachable when the first byte is '[' but the value is not an array: impossible for
    // valid JSON, kept so a parser change can never turn into undefined behaviour.
    throw CorpusError(CorpusError::Code::kBadRecord, ErrorContext{.file = path},
                      "top level is not a JSON array");
  }
  uint64_t index = 0;
  for (element record : records) {
    ++stats.records;
    VisitRecord(path, "record", index, record, skip_bad, stats, visit);
    ++index;
  }
}

void ForEachLineRecord(Input& input, bool skip_bad, ReadStats& stats,
                       const std::function<void(element)>& visit) {
  const std::string& path = input.path();
  LineReader reader(input);
  simdjson::dom::parser parser;
  std::string_view line;
  while (reader.Next(line)) {
    if (IsBlank(line)) continue;
    ++stats.records;
    element record;
    // LineReader guarantees the padding simdjson needs behind the line: parse in place.
    if (auto error = parser.parse(line.data(), line.size(), false).get(record)) {
      HandleProblem(path, Location("line", reader.line_number()), CorpusError::Code::kInvalidJson,
                    DescribeSyntaxError(line, error, /*multi_line=*/false).problem, skip_bad,
                    stats);
      continue;
    }
    VisitRecord(path, "line", reader.line_number(), record, skip_bad, stats, visit);
  }
}

// The value of `key` in `object`, or throws "missing" about `field`.
element RequiredField(simdjson::dom::object object, std::string_view key, std::string_view field) {
  element value;
  if (object.at_key(key).get(value)) {
    throw RecordProblem(CorpusError::Code::kBadRecord, "missing", std::string(field));
  }
  return value;
}

[[noreturn]] void ThrowWrongType(element value, std::string_view field, std::string_view expected) {
  throw RecordProblem(
      CorpusError::Code::kBadRecord,
      "is " + std::string(DescribeType(value)) + ", expected " + std::string(expected),
      std::string(field));
}

std::string_view StringValue(element value, std::string_view field) {
  std::string_view text;
  if (value.get_string().get(text)) ThrowWrongType(value, field, "a string");
  return text;
}

}  // namespace

void HandleProblem(const std::string& path, std::string_view location, CorpusError::Code code,
                   std::string_view problem, bool skip_bad, ReadStats& stats,
                   std::string_view field) {
  CorpusError error(
      code,
      ErrorContext{.file = path, .record = std::string(location), .field = std::string(field)},
      std::string(problem));
  if (!skip_bad) throw error;
  ++stats.skipped;
  ++stats.skipped_by_code[code];
  if (stats.skip_examples.size() < ReadStats::kMaxSkipExamples) {
    stats.skip_examples.push_back(error.what());
  }
}

void ForEachJsonRecord(Input& input, JsonLayout layout, bool skip_bad, ReadStats& stats,
                       const std::function<void(simdjson::dom::element record)>& visit) {
  if (layout == JsonLayout::kDetect && FirstSignificantByte(input) == '[') {
    ForEachArrayRecord(input, skip_bad, stats, visit);
  } else {
    ForEachLineRecord(input, skip_bad, stats, visit);
  }
}

std::string_view DescribeType(simdjson::dom::element value) {
  switch (value.type()) {
    case element_type::ARRAY:
      return "an array";
    case element_type::OBJECT:
      return "an object";
    case element_type::INT64:
    case element_type::UINT64:
    case element_type::DOUBLE:
      return "a number";
    case element_type::STRING:
      return "a string";
    case element_type::BOOL:
      return "a boolean";
    case element_type::NULL_VALUE:
      return "null";
  }
  return "an unknown JSON value";
}

simdjson::dom::object ExpectObject(simdjson::dom::element value, std::string_view what) {
  simdjson::dom::object object;
  if (value.get_object().get(object)) {
    throw RecordProblem(
        CorpusError::Code::kBadRecord,
        std::string(what) + " is " + std::string(DescribeType(value)) + ", expected an object");
  }
  return object;
}

simdjson::dom::object ExpectObjectField(simdjson::dom::element value, std::string_view field) {
  simdjson::dom::object object;
  if (value.get_object().get(object)) ThrowWrongType(value, field, "an object");
  return object;
}

std::string_view RequiredString(simdjson::dom::object object, std::string_view key,
                                std::string_view field) {
  return StringValue(RequiredField(object, key, field), field);
}

std::string_view OptionalString(simdjson::dom::object object, std::string_view key,
                                std::string_view field) {
  element value;
  if (object.at_key(key).get(value)) return {};
  return StringValue(value, field);
}

simdjson::dom::array RequiredArray(simdjson::dom::object object, std::string_view key,
                                   std::string_view field) {
  const element value = RequiredField(object, key, field);
  simdjson::dom::array array;
  if (value.get_array().get(array)) ThrowWrongType(value, field, "an array");
  return array;
}

int64_t RequiredInteger(simdjson::dom::object object, std::string_view key,
                        std::string_view field) {
  const element value = RequiredField(object, key, field);
  int64_t number;
  if (value.get_int64().get(number)) ThrowWrongType(value, field, "an integer");
  return number;
}

}  // namespace sam::corpora::internal
