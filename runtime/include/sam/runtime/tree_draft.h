// Draft trees from a stochastic drafter (a small model): chains, best-first
// top-k trees, Recursive Speculative Decoding trees (RSD-C, RSD-S; Jeon et al.
// 2024) and SpecInfer-style multi-draft sampling. Nothing here knows about
// models: an expander supplies the drafter's next-token distribution q(.|node)
// for the nodes the builder asks about, one call per level (a model answers a
// level with one forward pass and tree attention).
//
//   struct MyExpander : sam::runtime::TreeExpander {
//     size_t vocab_size() const override { return V; }
//     void Expand(const sam::runtime::DraftTree& tree, std::span<const int32_t> nodes,
//                 std::span<float> rows) override { /* rows[j*V..] = q(.|nodes[j]) */ }
//   } expander;
//   sam::runtime::TreeDraftOptions options{.mode = sam::runtime::TreeMode::kRsdC,
//                                          .branching = {4, 2, 1}};
//   sam::runtime::TreeDraft draft;
//   sam::runtime::Rng rng(seed);
//   sam::runtime::BuildTreeDraft(options, start_token, /*max_nodes=*/16, expander, rng, &draft);
//   // verify: VerifySampling(draft.tree, target, rng, draft.verify_mode,
//   //                        [&](int32_t n) { return draft.ProposalRow(n); })
//
// Modes (depth L; every tree is cut at max_nodes nodes, root included, in the
// order its nodes are made):
//   kChain      greedy decoding: the argmax chain of L tokens. Sampling: L
//               tokens each sampled from q(.|previous) (single-chain
//               speculative sampling, verified with the standard rule).
//   kTree       the best-first top-k tree by draft path probability (the
//               product of q along the path): each level expands the `width`
//               most probable nodes of the previous level, `width` children
//               each (their top-`width` tokens); of all candidates the
//               max_nodes - 1 most probable are kept (a child is never more
//               probable than its parent, so they form a tree). Deterministic
//               given the rows: verified by recursive rejection (kDeterministic).
//   kRsdC       RSD with a constant branching factor per level, b_1..b_L
//               (`branching`): under every node of level l-1, the b_l tokens
//               with the largest keys log q(x|node) + Gumbel(0,1), in key order
//               (Gumbel-top-k: a draw without replacement from q).
//   kRsdS       RSD with stochastic beam search (Kool et al. 2019), width W
//               (`width`), depth L: every sequence carries a key; a child's key
//               is a Gumbel-perturbed log path probability truncated below its
//               parent's key; the W largest keys of a level survive (so the
//               tree has at most 1 + W*L nodes and unlikely branches stop
//               early); siblings are in key order, again a draw without
//               replacement from q(.|parent).
//   kSpecInfer  b_l tokens drawn independently with replacement from q(.|node)
//               under every node of level l-1 (duplicates stay separate nodes).
// Verification: kRsdC, kRsdS -> DraftMode::kWithoutReplacement; kSpecInfer and
// sampled kChain -> kWithReplacement; kTree and greedy kChain ->
// kDeterministic. Under greedy decoding every tree is verified greedily
// (VerifyGreedy), which is exact for any tree.
//
// Errors: sam::Error (kInvalidArgument) for an unusable option (depth 0, an
// empty or zero branching factor, width 0), an expander row of the wrong size
// or without positive mass. Never prints.
// Thread safety: reentrant; one TreeDraft per thread.
#ifndef SAM_RUNTIME_TREE_DRAFT_H_
#define SAM_RUNTIME_TREE_DRAFT_H_

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "sam/export.h"
#include "sam/runtime/draft.h"
#include "sam/runtime/verify.h"

namespace sam::runtime {

enum class TreeMode { kChain, kTree, kRsdC, kRsdS, kSpecInfer };

// "chain", "tree", "rsd-c", "rsd-s", "specinfer".
SAM_API std::string_view TreeModeName(TreeMode mode);
// The mode of a name above, or nullopt.
SAM_API std::optional<TreeMode> TreeModeFromName(std::string_view name);
// "chain, tree, rsd-c, rsd-s, specinfer".
SAM_API std::string TreeModeNameList();

struct SAM_API TreeDraftOptions {
  TreeMode mode = TreeMode::kChain;
  // Decoding is greedy: kChain drafts the argmax chain.
  bool greedy = false;
  // L for kChain, kTree and kRsdS.
  size_t depth = 4;
  // b_1..b_L for kRsdC and kSpecInfer (the depth is the list's length).
  std::vector<size_t> branching = {4, 2, 2, 1};
  // W for kRsdS (beam width) and kTree (nodes expanded per level and children
  // per expanded node).
  size_t width = 4;

  // The depth of the trees this makes (L, or branching.size()).
  size_t Depth() const;
  // The most nodes (root included) a tree can have before max_nodes cuts it.
  size_t MaxNodes() const;
  // Throws sam::Error (kInvalidArgument) naming the unusable field.
  void Validate() const;
};

// Supplies the drafter's distributions.
class SAM_API TreeExpander {
 public:
  virtual ~TreeExpander() = default;
  virtual size_t vocab_size() const = 0;
  // Writes q(.|node) for each of `nodes` (indices into `tree`, in increasing
  // order) into rows[j * V, (j + 1) * V): non-negative weights with a positive
  // sum (normalised by the builder). Every node's parent was expanded in an
  // earlier call; the first call is {0}, the root. `tree` may hold nodes the
  // final draft drops (kTree keeps the most probable candidates).
  virtual void Expand(const DraftTree& tree, std::span<const int32_t> nodes,
                      std::span<float> rows) = 0;
};

// A drafted tree and the proposal rows recursive rejection needs.
struct SAM_API TreeDraft {
  DraftTree tree;  // source kModel; draft_probs[i] = q(token_i | parent)
  DraftMode verify_mode = DraftMode::kDeterministic;
  size_t vocab = 0;
  // Per node of `tree`: its index in the expander's tree (the `tree` argument
  // of Expand); identity except for kTree.
  std::vector<int32_t> build_ids;
  // Per node: the index of its normalised proposal row in `rows`, or -1 when
  // the node was not expanded (a leaf).
  std::vector<int32_t> row_of_node;
  std::vector<float> rows;

  // q(.|node), normalised; empty for a node that was not expanded.
  std::span<const float> ProposalRow(int32_t node) const;
};

// Builds a tree rooted at start_token with at most max_nodes nodes (>= 1; 1
// gives the root alone and calls the expander nothing). Consumes `rng` (not
// for kTree and greedy kChain). Expand is called once per level.
SAM_API void BuildTreeDraft(const TreeDraftOptions& options, uint32_t start_token, size_t max_nodes,
                            TreeExpander& expander, Rng& rng, TreeDraft* out);

// Gumbel-top-k: the k indices with the largest log(weights[i]) + Gumbel(0,1)
// keys among positive weights, largest first (a draw without replacement from
// weights / sum; fewer when fewer weights are positive). O(V + k log k).
SAM_API void GumbelTopK(std::span<const float> weights, size_t k, Rng& rng,
                        std::vector<uint32_t>* out);

}  // namespace sam::runtime

#endif  // SAM_RUNTIME_TREE_DRAFT_H_
