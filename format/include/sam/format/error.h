// Errors of the index format library.
//
// Every failure to open, read, verify or write an index file is a FormatError
// carrying a stable code (for programs) and a message that names the file,
// the field, the value found and the value expected (for people).
//
//   try {
//     auto index = sam::format::IndexFile::Open("corpus.sam");
//   } catch (const sam::format::FormatError& e) {
//     if (e.code() == sam::format::ErrorCode::kTokenizerMismatch) { ... }
//     std::cerr << e.what() << "\n";
//   }
#ifndef SAM_FORMAT_ERROR_H_
#define SAM_FORMAT_ERROR_H_

#include <stdexcept>
#include <string>
#include <string_view>

namespace sam::format {

// Stable error codes. Values never change meaning; new codes are appended.
enum class ErrorCode : int {
  kOk = 0,
  kIo = 1,                      // open/read/write/rename/fsync failed
  kTruncated = 2,               // file shorter than the header or its declared size
  kBadMagic = 3,                // not an index file (or mangled by a text-mode copy)
  kBadByteOrder = 4,            // byte-order mark does not read as little-endian
  kUnsupportedVersion = 5,      // major version this library cannot read
  kUnknownRequiredFeature = 6,  // a required feature bit this library does not know
  kBadHeader = 7,               // header field out of range or inconsistent
  kBadSectionTable = 8,         // section out of bounds, misaligned, missing, wrong size
  kOverlappingSections = 9,     // two sections share bytes
  kChecksumMismatch = 10,       // header or section checksum differs (deep verify)
  kSelfTestFailed = 11,         // a stored self-test sample gives another answer
  kCorruptStructure = 12,       // a value inside a section is impossible (deep verify)
  kTokenizerMismatch = 13,      // index built with another tokenizer
  kInvalidArgument = 14,        // caller error (bad option, empty input, ...)
  kCompression = 15,            // zstd failure on a compressed section
};

// Short stable name of a code, e.g. "truncated".
std::string_view ErrorCodeName(ErrorCode code);

class FormatError : public std::runtime_error {
 public:
  FormatError(ErrorCode code, const std::string& message)
      : std::runtime_error(message), code_(code) {}
  ErrorCode code() const { return code_; }

 private:
  ErrorCode code_;
};

}  // namespace sam::format

#endif  // SAM_FORMAT_ERROR_H_
