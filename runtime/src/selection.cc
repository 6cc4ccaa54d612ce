#include "sam/runtime/selection.h"

#include <algorithm>
#include <string>

#include "sam/error.h"

namespace sam::runtime {

namespace {

constexpr NamedPolicy kNamedPolicies[] = {
    {"sam", Policy::kPaper, false,
     "paper rule (Hu et al. 2024), no fallback (l_bias 0): linear drafts of draft_size (40)"},
    {"static", Policy::kStaticOnly, false, "static SAM (the indexes) only, linear drafts"},
    {"dynamic", Policy::kDynamicOnly, false,
     "dynamic SAM (prompt + generation) only, linear drafts"},
    {"sam-tree", Policy::kTree, false,
     "count-weighted static trees (min(60, 1+4l) nodes, <= 8 per depth) when the\n"
     "static match is longer, else the dynamic draft of that length"},
    {"sam-rec", Policy::kPaper, true,
     "paper rule (l_bias 5, l_threshold 5) with a Token Recycling fallback"},
    {"sam-cal", Policy::kCalibrated, false,
     "calibrated merged trees of at most draft_size (40) nodes (this project's policy)"},
};

}  // namespace

std::span<const NamedPolicy> NamedPolicies() { return kNamedPolicies; }

const NamedPolicy& FindPolicy(std::string_view name) {
  for (const NamedPolicy& p : kNamedPolicies)
    if (p.name == name) return p;
  throw Error(ErrorCode::kInvalidArgument, "unknown policy '" + std::string(name) + "' (valid: " +
                              PolicyNameList() + ")");
}

std::string_view PolicyName(Policy policy) {
  for (const NamedPolicy& p : kNamedPolicies)
    if (p.policy == policy && !p.recycling_fallback) return p.name;
  return "unknown";
}

std::string PolicyNameList() {
  std::string out;
  for (const NamedPolicy& p : kNamedPolicies) {
    if (!out.empty()) out += ", ";
    out += p.name;
  }
  return out;
}

std::string PolicyHelp() {
  std::string out;
  for (const NamedPolicy& p : kNamedPolicies) {
    if (!out.empty()) out += '\n';
    std::string name(p.name);
    name.resize(std::max<size_t>(name.size() + 1, 10), ' ');
    out += name;
    for (char c : p.description) {
      out += c;
      if (c == '\n') out += std::string(10, ' ');  // continuation lines line up
    }
  }
  return out;
}

Choice ChoosePaper(uint32_t l_dyn, uint32_t l_static, bool has_fallback,
                   const PaperOptions& options) {
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

}  // namespace sam::runtime
