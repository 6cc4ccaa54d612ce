#include "sam/format/error.h"

namespace sam::format {

std::string_view ErrorCodeName(ErrorCode code) {
  switch (code) {
    case ErrorCode::kOk: return "ok";
    case ErrorCode::kIo: return "io";
    case ErrorCode::kTruncated: return "truncated";
    case ErrorCode::kBadMagic: return "bad-magic";
    case ErrorCode::kBadByteOrder: return "bad-byte-order";
    case ErrorCode::kUnsupportedVersion: return "unsupported-version";
    case ErrorCode::kUnknownRequiredFeature: return "unknown-required-feature";
    case ErrorCode::kBadHeader: return "bad-header";
    case ErrorCode::kBadSectionTable: return "bad-section-table";
    case ErrorCode::kOverlappingSections: return "overlapping-sections";
    case ErrorCode::kChecksumMismatch: return "checksum-mismatch";
    case ErrorCode::kSelfTestFailed: return "self-test-failed";
    case ErrorCode::kCorruptStructure: return "corrupt-structure";
    case ErrorCode::kTokenizerMismatch: return "tokenizer-mismatch";
    case ErrorCode::kInvalidArgument: return "invalid-argument";
    case ErrorCode::kCompression: return "compression";
  }
  return "unknown";
}

}  // namespace sam::format
