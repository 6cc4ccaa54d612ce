// The one exception family of every sam library (format, corpora, indexer, runtime, the torch
// backend) and of the tools.
//
// Every error the libraries detect is thrown as a sam::Error (or a subclass kept for its name:
// format::FormatError, corpora::CorpusError, indexer::BuildError, indexer::TokenizerError,
// torch_backend::Error). It carries one stable code from the one enum below (for programs) and a
// message for people that names where the problem is and what it is. When the thrower knows the
// place in a structured way it passes an ErrorContext, and what() reads
//
//   "FILE: section X: RECORD: field 'F': problem"
//
// with the parts that are unknown left out, e.g.
//
//   "data/alpaca_data.json: record 17: field 'output': missing"
//   "corpus.sam: section EDEG: degree bits sum to 12, expected 15 edges"
//
//   try {
//     auto index = sam::format::IndexFile::Open("corpus.sam");
//   } catch (const sam::Error& e) {
//     if (e.code() == sam::ErrorCode::kTokenizerMismatch) { ... }
//     std::cerr << e.what() << "\n";              // the whole message
//     std::cerr << e.context().file << "\n";      // where, when the thrower knew it
//   }
//
// Standard exceptions other than these (std::bad_alloc, and std::exception from a callback the
// caller passed in) pass through unchanged.
#ifndef SAM_ERROR_H_
#define SAM_ERROR_H_

#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>

#include "sam/export.h"

namespace sam {

// Stable error codes. A value never changes meaning and is never reused; new codes are appended.
// ErrorCodeName gives each a stable short name. Values 0-15 are those of the former
// format::ErrorCode.
enum class ErrorCode : int {
  kOk = 0,
  // --- Files in general and the index format.
  kIo = 1,                      // open/read/write/rename/fsync failed, or not a regular file
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
  kCorruptStructure = 12,       // a value inside a section is impossible
  kTokenizerMismatch = 13,      // index built with another tokenizer
  kInvalidArgument = 14,        // caller error: bad option, null pointer, id out of range, ...
  kCompression = 15,            // zstd failure on a compressed section
  // --- Corpora and other JSON / text inputs.
  kInvalidJson = 16,  // a JSON file or JSONL line that does not parse
  kBadRecord = 17,    // valid JSON of the wrong shape: not an object, field missing or mistyped
  kBadValue = 18,     // a well-typed value out of its domain (e.g. a token id >= vocab size)
  // --- Indexer.
  kTokenizer = 19,  // a tokenizer model that cannot be loaded, or encoding that fails
  kCapacity = 20,   // a size limit is exceeded (2^31 tokens per index, a full KV cache, ...)
  // --- Torch backend (model checkpoints).
  kBadCheckpoint = 21,   // a safetensors file is malformed (truncated, bad header, bad offsets)
  kBadModelConfig = 22,  // config.json is malformed or describes an unsupported model
  kMissingTensor = 23,   // a tensor the model needs is absent from the checkpoint
  kShapeMismatch = 24,   // a tensor has the wrong shape
  kDtype = 25,           // a tensor or option has an unsupported dtype
  // --- Tools and bugs.
  kUsage = 26,     // a command-line usage error (the tools exit with status 2)
  kInternal = 27,  // a broken internal invariant: a bug, please report the message
};

// The largest code; every value in [0, kLastErrorCode] is a code.
inline constexpr ErrorCode kLastErrorCode = ErrorCode::kInternal;

// Short stable name of a code, e.g. "truncated", "bad-record"; "unknown" for a value that is not
// a code.
SAM_API std::string_view ErrorCodeName(ErrorCode code);

// Where a problem is. Every part is optional (empty = unknown or not applicable). Built with
// designated initializers: ErrorContext{.file = path, .record = "line 3"}.
struct SAM_API ErrorContext {
  std::string file = {};     // path of the file, e.g. "data/alpaca_data.json"
  std::string section = {};  // part of the file, e.g. the index section "EDEG"
  std::string record = {};   // which record, with its unit: "record 17" (0-based element of a
                             // JSON array), "line 3" (1-based), "document 5" (0-based)
  std::string field = {};    // field of the record or section, e.g. "output", "quotes[2].text"

  bool empty() const { return file.empty() && section.empty() && record.empty() && field.empty(); }

  // "FILE: section X: RECORD: field 'F'", leaving out the empty parts ("" when all are empty).
  std::string Render() const;
};

class SAM_API Error : public std::runtime_error {
 public:
  // `message` is the whole message (it names the place itself); context() is empty and problem()
  // is the message.
  Error(ErrorCode code, const std::string& message);
  // what() is context.Render() + ": " + problem (just `problem` when the context is empty).
  Error(ErrorCode code, ErrorContext context, const std::string& problem);

  ErrorCode code() const noexcept { return code_; }
  const ErrorContext& context() const noexcept { return details_->context; }
  // The message without its context.
  const std::string& problem() const noexcept { return details_->problem; }

  // A copy of this error whose empty context parts are filled from `outer`: how a caller that
  // knows more (the corpus file a document came from) adds it to a callee's structured error.
  // The copy is a sam::Error, not the subclass. Use it on errors thrown with a context: a plain
  // message may already name the file.
  Error WithContext(const ErrorContext& outer) const;

 private:
  struct Details {
    ErrorContext context;
    std::string problem;
  };
  ErrorCode code_;
  std::shared_ptr<const Details> details_;  // shared: copying an exception must not throw
};

}  // namespace sam

#endif  // SAM_ERROR_H_
