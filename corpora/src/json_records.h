// Record iteration over JSON corpus files, the skip-or-throw policy for malformed records, and
// typed field access that reports what is wrong with a record.
#ifndef SAM_CORPORA_SRC_JSON_RECORDS_H_
#define SAM_CORPORA_SRC_JSON_RECORDS_H_

#include <simdjson.h>

#include <cstdint>
#include <functional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>

#include "sam/corpora/corpora.h"
#include "sam/corpora/error.h"

namespace sam::corpora::internal {

// What is wrong with one record, and in which field when it is about one, without the file and
// location (added by the caller). Thrown only while a record is being validated, never by a sink.
class RecordProblem : public std::runtime_error {
 public:
  RecordProblem(CorpusError::Code code, const std::string& problem, std::string field = {})
      : std::runtime_error(problem), code_(code), field_(std::move(field)) {}
  CorpusError::Code code() const noexcept { return code_; }
  const std::string& field() const noexcept { return field_; }

 private:
  CorpusError::Code code_;
  std::string field_;
};

// The error "path: location: field 'F': problem" (no field part when `field` is empty). With
// `skip_bad`, counts the record as skipped in `stats` (by `code`, keeping the first few messages);
// otherwise throws it as a CorpusError whose context holds the path, location and field.
void HandleProblem(const std::string& path, std::string_view location, CorpusError::Code code,
                   std::string_view problem, bool skip_bad, ReadStats& stats,
                   std::string_view field = {});

// How the records of a JSON file are laid out.
enum class JsonLayout {
  kDetect,  // a top-level array when the first significant byte is '[', otherwise JSONL
  kLines,   // JSONL: one value per non-blank line
};

// Calls visit(record) for every record of the JSON input (a file or a stream): the elements of its top-level
// array or the values of its non-blank lines, as `layout` says. Counts stats.records. A
// RecordProblem thrown by `visit`, or a JSONL line that does not parse, goes through HandleProblem
// with the location "record N" (0-based) or "line N" (1-based). A JSON array file that does not
// parse throws CorpusError (kInvalidJson) naming the record, line and column where parsing failed,
// whatever `skip_bad` says. The element is valid only during the call.
void ForEachJsonRecord(Input& input, JsonLayout layout, bool skip_bad, ReadStats& stats,
                       const std::function<void(simdjson::dom::element record)>& visit);

// "an object", "a string", "null", ... for messages.
std::string_view DescribeType(simdjson::dom::element value);

// `value` as an object; otherwise throws RecordProblem (kBadRecord) "<what> is <type>, expected
// an object".
simdjson::dom::object ExpectObject(simdjson::dom::element value, std::string_view what);
// The value of field `field` as an object; otherwise throws RecordProblem (kBadRecord) about
// `field`: "is <type>, expected an object".
simdjson::dom::object ExpectObjectField(simdjson::dom::element value, std::string_view field);

// Field access on `object`. `field` names the field in messages, e.g. "output" or
// "quotes[2].text". Missing or mistyped fields throw RecordProblem (kBadRecord):
// "missing", "is null, expected a string", about the field `field`.
std::string_view RequiredString(simdjson::dom::object object, std::string_view key,
                                std::string_view field);
// As RequiredString, but a missing field reads as "".
std::string_view OptionalString(simdjson::dom::object object, std::string_view key,
                                std::string_view field);
simdjson::dom::array RequiredArray(simdjson::dom::object object, std::string_view key,
                                   std::string_view field);
int64_t RequiredInteger(simdjson::dom::object object, std::string_view key, std::string_view field);

}  // namespace sam::corpora::internal

#endif  // SAM_CORPORA_SRC_JSON_RECORDS_H_
