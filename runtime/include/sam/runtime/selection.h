// Draft selection policies: which drafter drafts this step, and the draft's shape.
//
//   const sam::runtime::NamedPolicy& p = sam::runtime::FindPolicy("sam-cal");
//   sam::runtime::Choice c = sam::runtime::ChoosePaper(l_dyn, l_static, has_fallback, {});
//
// A session's options, each policy's parameters among them, are in options.h.
//
// Policies (all drafts include the start token in their node count):
//   kPaper       SAM-Decoding's rule (Hu et al. 2024): l_s' = l_static - l_bias;
//                if max(l_dyn, l_s') >= l_threshold, draft linearly from the dynamic
//                SAM when l_dyn >= l_s', else from the static SAM; otherwise use the
//                fallback drafter. Without a fallback drafter, l_bias is 0 (when left
//                automatic) and any match (length >= 1) drafts.
//   kStaticOnly  linear drafts from the static SAM(s) only.
//   kDynamicOnly linear drafts from the dynamic SAM only.
//   kTree        when the static match is longer than the dynamic one, a count-weighted
//                best-first tree of min(tree.nodes, 1 + 4 l) nodes (<= tree.width per
//                depth); otherwise the dynamic linear draft of min(tree.nodes,
//                1 + 4 l) tokens.
//   kCalibrated  this project's policy: one merged tree of at most draft_size nodes
//                built from every candidate (dynamic continuation, each static index's
//                heaviest transitions, the fallback's tree), where each node's probability of acceptance given
//                its parent's is estimated from running acceptance statistics
//                (features: source, match length, depth, count ratio, occurrence
//                count), and the nodes with the highest path probability are kept.
//                Static children are looked up lazily, a bounded number of
//                branching states per step; a rare state also offers the heaviest
//                children of its next shorter context (its suffix link).
//                Nodes whose estimated path probability is low are left out, so drafts shrink when acceptance is low. The fallback
//                drafter (if any) contributes when no automaton matches. With a
//                cost_curve, each step keeps only as many of the ranked nodes as pay
//                for their verification (ChooseTreeSize, budget.h).
#ifndef SAM_RUNTIME_SELECTION_H_
#define SAM_RUNTIME_SELECTION_H_

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "sam/export.h"
#include "sam/runtime/budget.h"
#include "sam/runtime/chain.h"

namespace sam::runtime {

enum class Policy { kPaper, kStaticOnly, kDynamicOnly, kTree, kCalibrated };

// The policies by name: the one naming scheme of the tools (sam-replay,
// sam-generate, bench_step, bench_generate), the C API (sam_policy_name,
// sam_policy_from_name) and the docs. A name selects a Policy and whether a
// Token Recycling drafter is the session's fallback:
//   sam       kPaper, no fallback (l_bias 0)
//   static    kStaticOnly
//   dynamic   kDynamicOnly
//   sam-tree  kTree
//   sam-rec   kPaper with a Token Recycling fallback (l_bias 5, l_threshold 5)
//   sam-cal   kCalibrated
// (sam-replay and bench_step also accept "pld", the prompt lookup baseline,
// which is a drafter of its own rather than a session policy.)
struct SAM_API NamedPolicy {
  std::string_view name;
  Policy policy = Policy::kPaper;
  bool recycling_fallback = false;
  std::string_view description;  // for --help texts (lines end with \n but the last)
};
// The table above, in that order.
SAM_API std::span<const NamedPolicy> NamedPolicies();
// The entry named `name`. Throws sam::Error (kInvalidArgument) "unknown policy 'x'
// (valid: sam, static, dynamic, sam-tree, sam-rec, sam-cal)".
SAM_API const NamedPolicy& FindPolicy(std::string_view name);
// The name of `policy` without a fallback ("sam" for kPaper, "sam-cal" for
// kCalibrated, ...).
SAM_API std::string_view PolicyName(Policy policy);
// "sam, static, dynamic, sam-tree, sam-rec, sam-cal".
SAM_API std::string PolicyNameList();
// One line per policy, "name      description", for --help texts.
SAM_API std::string PolicyHelp();

// The largest draft (nodes, start token included) a session proposes:
// SessionOptions::draft_size and tree.nodes must not exceed it (the C
// API's SAM_MAX_DRAFT_SIZE). Far above what one verification pass can use,
// and low enough that a draft's depths always fit DraftTree's uint16_t.
inline constexpr size_t kMaxDraftSize = 4096;
// The largest tree width (SessionOptions::tree.width, the tuning's
// calibrated_width): a
// tree wider than a draft's kMaxDraftSize nodes would be cut anyway, and a
// width sizes per-node scratch.
inline constexpr size_t kMaxWidth = 64;

// Policy::kPaper's parameters (Hu et al. 2024): draft from the longer of the
// dynamic match and the static match less l_bias when it reaches
// l_threshold, else from the fallback drafter.
struct SAM_API PaperOptions {
  // Unset: 5 with a fallback drafter, 0 without.
  std::optional<uint32_t> l_bias;
  uint32_t l_threshold = 5;
};

enum class Choice { kNone, kStatic, kDynamic, kFallback };

// The paper's decision for match lengths l_dyn (dynamic) and l_static (the
// longest static match).
SAM_API Choice ChoosePaper(uint32_t l_dyn, uint32_t l_static, bool has_fallback,
                           const PaperOptions& options);

}  // namespace sam::runtime

#endif  // SAM_RUNTIME_SELECTION_H_
