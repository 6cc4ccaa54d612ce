// The exception type of the corpora library: a sam::Error (sam/error.h, the one family of every
// sam library) with codes from the one sam::ErrorCode.
#ifndef SAM_CORPORA_ERROR_H_
#define SAM_CORPORA_ERROR_H_

#include "sam/error.h"

namespace sam::corpora {

// Thrown for every error the library detects. what() names the file, the place in it (1-based
// "line N" for JSONL and text, 0-based "record N" for a JSON array), the field, and the problem;
// context() holds the same parts separately:
//   "data/alpaca_data.json: record 17: field 'output': missing"
//   "data/train.jsonl: line 3: field 'answer': is a number, expected a string"
// code() is one of kIo (file missing, unreadable, or a directory where a file is expected),
// kInvalidJson (a JSON array file or a JSONL line that does not parse), kBadRecord (valid JSON of
// the wrong shape: not an object, field missing or mistyped), kBadValue (a well-typed value out of
// its domain, e.g. a token id >= vocab size), kInvalidArgument (a bad argument from the caller:
// unknown kind name, vocab size 0).
class CorpusError : public sam::Error {
 public:
  // The former nested name, kept: CorpusError::Code is sam::ErrorCode.
  using Code = sam::ErrorCode;
  using sam::Error::Error;
};

}  // namespace sam::corpora

#endif  // SAM_CORPORA_ERROR_H_
