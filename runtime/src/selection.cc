#include "sam/runtime/selection.h"

#include <algorithm>
#include <string>

#include "sam/error.h"

namespace sam::runtime {

std::string_view PolicyName(Policy policy) {
  switch (policy) {
    case Policy::kPaper: return "paper";
    case Policy::kStaticOnly: return "static";
    case Policy::kDynamicOnly: return "dynamic";
    case Policy::kTree: return "tree";
    case Policy::kCalibrated: return "calibrated";
  }
  return "unknown";
}

Policy ParsePolicy(std::string_view name) {
  for (Policy p : {Policy::kPaper, Policy::kStaticOnly, Policy::kDynamicOnly, Policy::kTree,
                   Policy::kCalibrated})
    if (PolicyName(p) == name) return p;
  throw Error(ErrorCode::kInvalidArgument,
              "unknown selection policy '" + std::string(name) +
                  "' (valid: paper, static, dynamic, tree, calibrated)");
}

NamedPolicy PolicyFromToolName(std::string_view name) {
  if (name == "sam") return {Policy::kPaper, false};
  if (name == "sam-rec") return {Policy::kPaper, true};
  if (name == "static") return {Policy::kStaticOnly, false};
  if (name == "dynamic") return {Policy::kDynamicOnly, false};
  if (name == "sam-tree") return {Policy::kTree, false};
  if (name == "sam-cal") return {Policy::kCalibrated, false};
  throw Error(ErrorCode::kInvalidArgument,
              "unknown policy '" + std::string(name) +
                  "' (valid: sam, sam-rec, static, dynamic, sam-tree, sam-cal)");
}

Choice ChoosePaper(uint32_t l_dyn, uint32_t l_static, bool has_fallback,
                   const SelectionOptions& options) {
  const int64_t bias = options.l_bias.value_or(has_fallback ? 5 : 0);
  const int64_t l_s = static_cast<int64_t>(l_static) - bias;
  const int64_t dyn = l_dyn;
  // With nothing to fall back to, any match is better than no draft.
  const int64_t threshold = has_fallback ? options.l_threshold : 1;
  if (std::max(dyn, l_s) >= threshold) {
    if (dyn >= l_s) return l_dyn > 0 ? Choice::kDynamic : Choice::kNone;
    return Choice::kStatic;
  }
  return has_fallback ? Choice::kFallback : Choice::kNone;
}

size_t LinearDraftSize(uint32_t match_len, const SelectionOptions& options) {
  if (!options.adaptive_length) return options.draft_size;
  const size_t adaptive = 1 + size_t{options.length_per_match} * match_len;
  return std::min(options.draft_size, adaptive);
}

}  // namespace sam::runtime
