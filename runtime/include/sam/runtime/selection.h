// Draft selection policies: which drafter drafts this step, and the draft's shape.
//
//   sam::runtime::SelectionOptions options;            // the paper's rule, 40 tokens
//   options.policy = sam::runtime::Policy::kCalibrated;
//   sam::runtime::Choice c = sam::runtime::ChoosePaper(l_dyn, l_static, has_fallback, options);
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
//                best-first tree of min(max_tree_nodes, 1 + 4 l) nodes (<= max_width per
//                depth); otherwise the dynamic linear draft of min(max_tree_nodes,
//                1 + 4 l) tokens.
//   kCalibrated  this project's policy: one merged tree of at most draft_size nodes
//                built from every candidate (dynamic continuation, each static index's
//                heaviest transitions, the fallback's tree), where each node's probability of acceptance given
//                its parent's is estimated from running acceptance statistics
//                (features: source, match length, depth, count ratio, occurrence
//                count), and the nodes with the highest path probability are kept.
//                Static children are looked up lazily, at most max_static_lookups
//                branching states per step; a state that occurs fewer than
//                backoff_count times also offers the heaviest children of its next
//                shorter context (its suffix link).
//                Nodes whose estimated path probability is below min_path_probability
//                are left out, so drafts shrink when acceptance is low. The fallback
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
// SelectionOptions::draft_size and max_tree_nodes must not exceed it (the C
// API's SAM_MAX_DRAFT_SIZE). Far above what one verification pass can use,
// and low enough that a draft's depths always fit DraftTree's uint16_t.
inline constexpr size_t kMaxDraftSize = 4096;
// The largest SelectionOptions::max_width (the tools' --max-width range): a
// tree wider than a draft's kMaxDraftSize nodes would be cut anyway, and a
// width sizes per-node scratch.
inline constexpr size_t kMaxWidth = 64;

struct SAM_API SelectionOptions {
  // The default everywhere (C, Python, tools, engine adapters): kCalibrated
  // drafts the most accepted tokens per token verified of all policies, as a
  // tree and as the first-child chain a chain-only engine verifies
  // (docs/performance.md; README, "Choosing a policy and options").
  Policy policy = Policy::kCalibrated;
  // Draft size in nodes, start token included (the paper: 40; 16 for code);
  // 1..kMaxDraftSize.
  size_t draft_size = 40;
  // The paper's rule. l_bias unset: 5 with a fallback drafter, 0 without.
  std::optional<uint32_t> l_bias;
  uint32_t l_threshold = 5;
  // Linear drafts of min(draft_size, 1 + length_per_match * match_len) nodes.
  bool adaptive_length = false;
  uint32_t length_per_match = 4;
  // Dynamic drafts climb suffix links while the continuation is short.
  bool dynamic_link_fallback = true;
  // kTree; at most kMaxDraftSize.
  size_t max_tree_nodes = 60;
  // kTree: nodes per depth; kCalibrated: static children offered per node.
  // 1..kMaxWidth.
  size_t max_width = 8;
  // kCalibrated: nodes below this estimated path probability are not drafted
  // (0.015 since the backoff children: 23.5 tokens verified per step on the
  // dev traces; it was 0.01).
  double min_path_probability = 0.015;
  // kCalibrated: the verification cost curve t(n)/t(1) (budget.h); empty: off.
  // When set, each step keeps the n best-ranked nodes (n <= draft_size) that
  // maximise E(n) - rate * t(n)/t(1), with rate the session's measured tokens
  // per t(1) so far (ChooseTreeSize), so the tree grows where verification is
  // cheap (GPU) and shrinks where it is not (CPU), down to no draft at all.
  CostCurve cost_curve;
  // kCalibrated: at most this many static lookups of a branching state's
  // children per step (in best-first order; each costs several cache misses
  // in the index; a state that occurs once has one child, read from the text,
  // and is not counted). 0: no limit. 8 bounds the step's p99 at about 3x
  // below the unlimited ranking's, for 1% of MAT (docs/runtime.md).
  size_t max_static_lookups = 8;
  // kCalibrated: a node whose static state occurs fewer than this many times
  // also offers the heaviest children of the next shorter context (the
  // state's suffix link) that its own heaviest children do not include, with
  // calibration cells of their own (a lookup each, counted in
  // max_static_lookups). 0: never. Rare contexts are where the longest match
  // misleads: MAT 2.499 -> 2.664 on the dev traces, for about 2.5x the
  // propose time at the median (docs/runtime.md).
  uint64_t backoff_count = 8;
  // Every policy: the drafts' shape (chain.h). kTree: the policy's tree.
  // kChain: one path of it, for verifiers that take one sequence per
  // request: the path that maximises the expected accepted tokens under the
  // tree's accept estimates (kCalibrated's calibrated estimates, kTree's
  // count ratios; a linear draft is its own chain), ending before the path
  // probability falls below chain_min_path_probability, with at most
  // draft_size - 1 tokens, and with a cost_curve at the length that pays
  // (ChainShaper). Statistics count the chain; kCalibrated still calibrates
  // on the whole tree (every node whose trial the chain's verification
  // decided).
  DraftShape shape = DraftShape::kTree;
  double chain_min_path_probability = ChainOptions::kDefaultMinPathProbability;
};

enum class Choice { kNone, kStatic, kDynamic, kFallback };

// The paper's decision for match lengths l_dyn (dynamic) and l_static (the
// longest static match).
SAM_API Choice ChoosePaper(uint32_t l_dyn, uint32_t l_static, bool has_fallback,
                           const SelectionOptions& options);

// Linear draft size (nodes, start token included) for a match length.
SAM_API size_t LinearDraftSize(uint32_t match_len, const SelectionOptions& options);

}  // namespace sam::runtime

#endif  // SAM_RUNTIME_SELECTION_H_
