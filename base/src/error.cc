#include "sam/error.h"

#include <utility>

namespace sam {

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
    case ErrorCode::kInvalidJson: return "invalid-json";
    case ErrorCode::kBadRecord: return "bad-record";
    case ErrorCode::kBadValue: return "bad-value";
    case ErrorCode::kTokenizer: return "tokenizer";
    case ErrorCode::kCapacity: return "capacity";
    case ErrorCode::kBadCheckpoint: return "bad-checkpoint";
    case ErrorCode::kBadModelConfig: return "bad-model-config";
    case ErrorCode::kMissingTensor: return "missing-tensor";
    case ErrorCode::kShapeMismatch: return "shape-mismatch";
    case ErrorCode::kDtype: return "dtype";
    case ErrorCode::kUsage: return "usage";
    case ErrorCode::kInternal: return "internal";
  }
  return "unknown";
}

std::string ErrorContext::Render() const {
  std::string out;
  auto part = [&out](std::string_view text) {
    if (!out.empty()) out += ": ";
    out += text;
  };
  if (!file.empty()) part(file);
  if (!section.empty()) part("section " + section);
  if (!record.empty()) part(record);
  if (!field.empty()) part("field '" + field + "'");
  return out;
}

namespace {

std::string Compose(const ErrorContext& context, const std::string& problem) {
  if (context.empty()) return problem;
  return context.Render() + ": " + problem;
}

}  // namespace

Error::Error(ErrorCode code, const std::string& message)
    : std::runtime_error(message),
      code_(code),
      details_(std::make_shared<const Details>(Details{{}, message})) {}

Error::Error(ErrorCode code, ErrorContext context, const std::string& problem)
    : std::runtime_error(Compose(context, problem)),
      code_(code),
      details_(std::make_shared<const Details>(Details{std::move(context), problem})) {}

Error Error::WithContext(const ErrorContext& outer) const {
  ErrorContext merged = context();
  auto fill = [](std::string& part, const std::string& from) {
    if (part.empty()) part = from;
  };
  fill(merged.file, outer.file);
  fill(merged.section, outer.section);
  fill(merged.record, outer.record);
  fill(merged.field, outer.field);
  return Error(code_, std::move(merged), problem());
}

}  // namespace sam
