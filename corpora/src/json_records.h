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

#include "sam/corpora/corpora.h"
#include "sam/corpora/error.h"

namespace sam::corpora::internal {

// What is wrong with one record, without the file and location (added by the caller).
// Thrown only while a record is being validated, never by a sink.
class RecordProblem : public std::runtime_error {
 public:
  RecordProblem(CorpusError::Code code, const std::string& problem)
      : std::runtime_error(problem), code_(code) {}
  CorpusError::Code code() const noexcept { return code_; }

 private:
  CorpusError::Code code_;
};

// Formats "path: location: problem". With `skip_bad`, counts the record as skipped in `stats`
// (by `code`, keeping the first few messages); otherwise throws it as a CorpusError.
void HandleProblem(const std::string& path, std::string_view location, CorpusError::Code code,
                   std::string_view problem, bool skip_bad, ReadStats& stats);

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

// Field access on `object`. `field` names the field in messages, e.g. "output" or
// "quotes[2].text". Missing or mistyped fields throw RecordProblem (kBadRecord):
// "field 'output' missing", "field 'output' is null, expected a string".
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
