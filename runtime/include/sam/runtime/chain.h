// Chains from trees: one draft sequence for verifiers that take one sequence
// per request (vLLM, Hugging Face assisted generation, most custom loops).
//
//   sam::runtime::ChainOptions options;               // defaults: see below
//   sam::runtime::DraftTree chain;
//   sam::runtime::ChainShaper shaper;                 // scratch memory, reused
//   shaper.Shape(tree, options, &chain);              // a path of `tree`, root first
//   // chain.IsLinear(); chain.tokens[k] is the node at depth k of that path
//
// A tree's node v is accepted when every node on its root path is; with
// accept_estimates e (DraftTree: e(u) = P(u accepted | its parent accepted)),
// its path probability is P(v) = product of e over its path, and a chain that
// ends at v is expected to yield
//
//   E(v) = P(v_1) + P(v_2) + ... + P(v)     (v_1 .. v: the path below the root)
//
// accepted tokens. A ChainShaper drafts the root-to-node path that maximises E
// among the nodes it may end at:
//   - depth(v) <= max_tokens, and P(v) >= min_path_probability (SuffixDecoding's
//     minimum token probability: a token less likely than that to be
//     accepted is not worth verifying);
//   - with a cost curve (budget.h), the node that maximises
//     1 + E(v) - rate * t(depth(v) + 1) / t(1) (rate > 0; the per-step ratio
//     (1 + E(v)) / t(depth(v) + 1) when rate <= 0), as ChooseTreeSize sizes
//     trees: a chain grows where verification is cheap;
//   - among equal values, the shallower node, then the first in node order.
// Since P never grows along a path, the allowed nodes form a subtree and the
// chain is found in one pass over the nodes (O(n)).
//
// Without estimates (accept_estimates empty) the draft's own q(node | parent)
// (draft_probs) stands for them when it has them; otherwise a node's estimate
// is 1 when it is its parent's first child and 0 otherwise: the chain is the
// first-child chain (drafters add a parent's best candidate first), cut at
// max_tokens. A linear tree is its own chain.
#ifndef SAM_RUNTIME_CHAIN_H_
#define SAM_RUNTIME_CHAIN_H_

#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

#include "sam/export.h"
#include "sam/runtime/budget.h"
#include "sam/runtime/draft.h"

namespace sam::runtime {

// The shape of a session's drafts (SessionOptions::shape).
enum class DraftShape : uint8_t {
  kTree = 0,   // the policy's tree (for tree-attention verifiers)
  kChain = 1,  // one root-to-node path of it (ChainShaper)
};
// "tree", "chain".
SAM_API std::string_view DraftShapeName(DraftShape shape);
// The shape named `name`; throws sam::Error (kInvalidArgument)
// "unknown draft shape 'x' (valid: tree, chain)".
SAM_API DraftShape FindDraftShape(std::string_view name);

struct SAM_API ChainOptions {
  // Draft tokens at most (the root not counted).
  size_t max_tokens = kDefaultMaxTokens;
  // A chain ends before a node whose estimated path probability is lower
  // (0: it may end at any node of the tree, whose policy has its own cut).
  // A chain session passes experimental::Tuning::chain_min_path_probability
  // (0.003), which is also the cut of the tree sam-cal draws for it
  // (docs/runtime.md, "Chains").
  double min_path_probability = kDefaultMinPathProbability;
  // Optional cost curve t(n)/t(1) (not owned; null or empty: none) and the
  // rate it is weighed against (tokens per t(1); see above).
  const CostCurve* cost_curve = nullptr;
  double rate = 0.0;

  static constexpr size_t kDefaultMaxTokens = 32;
  static constexpr double kDefaultMinPathProbability = 0.0;
};

// Shapes trees into chains (see above), reusing its scratch memory: no
// allocation in steady state. One thread at a time.
class SAM_API ChainShaper {
 public:
  // The chain of `tree` into *chain (which must not be `tree`): tokens,
  // parents and depths of the path (node 0: the root), the tree's
  // accept_estimates and draft_probs along it where the tree has them, its
  // source and match length. path() then holds the tree's node index of
  // every chain node (path()[0] = 0).
  void Shape(const DraftTree& tree, const ChainOptions& options, DraftTree* chain);
  const std::vector<int32_t>& path() const { return path_; }

 private:
  std::vector<double> path_probability_, expected_;
  std::vector<uint8_t> allowed_, has_child_;
  std::vector<int32_t> path_;
};

}  // namespace sam::runtime

#endif  // SAM_RUNTIME_CHAIN_H_
