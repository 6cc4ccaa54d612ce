// Errors of the index format library: sam::Error (sam/error.h), thrown as the subclass
// FormatError, with codes from the one sam::ErrorCode.
//
// Every failure to open, read, verify or write an index file names the file (context().file), and
// where it knows them the section and the field, the value found and the value expected.
//
//   try {
//     auto index = sam::format::IndexFile::Open("corpus.sam");
//   } catch (const sam::Error& e) {
//     if (e.code() == sam::ErrorCode::kTokenizerMismatch) { ... }
//     std::cerr << e.what() << "\n";
//   }
#ifndef SAM_FORMAT_ERROR_H_
#define SAM_FORMAT_ERROR_H_

#include "sam/export.h"
#include "sam/error.h"

namespace sam::format {

// The former names, kept: format::ErrorCode is sam::ErrorCode (same values).
using ErrorCode = sam::ErrorCode;
using sam::ErrorCodeName;

// A sam::Error thrown by the format library.
class SAM_API FormatError : public sam::Error {
 public:
  using sam::Error::Error;
};

}  // namespace sam::format

#endif  // SAM_FORMAT_ERROR_H_
