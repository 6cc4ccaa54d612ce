// The one exception type of the corpora library.
#ifndef SAM_CORPORA_ERROR_H_
#define SAM_CORPORA_ERROR_H_

#include <stdexcept>
#include <string>

namespace sam::corpora {

// Thrown for every error the library detects. what() names the file, the place in it (1-based
// "line N" for JSONL and text, 0-based "record N" for a JSON array) and the problem, e.g.
//   "data/alpaca_data.json: record 17: field 'output' missing"
//   "data/train.jsonl: line 3: field 'answer' is a number, expected a string"
// code() classifies the error; the codes are stable.
class CorpusError : public std::runtime_error {
 public:
  enum class Code {
    kIo = 1,           // file missing, unreadable, or a directory where a file is expected
    kInvalidJson = 2,  // a JSON array file or a JSONL line that does not parse
    kBadRecord = 3,    // valid JSON of the wrong shape: not an object, field missing or mistyped
    kBadValue = 4,     // a well-typed value out of its domain (e.g. a token id >= vocab size)
    kInvalidArgument = 5,  // a bad argument from the caller (unknown kind name, vocab size 0)
  };

  CorpusError(Code code, const std::string& message) : std::runtime_error(message), code_(code) {}

  Code code() const noexcept { return code_; }

 private:
  Code code_;
};

}  // namespace sam::corpora

#endif  // SAM_CORPORA_ERROR_H_
