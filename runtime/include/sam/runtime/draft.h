// Draft trees: what a drafter proposes and a verifier scores in one pass.
//
//   sam::runtime::DraftTree tree;
//   tree.Reset(start_token, sam::runtime::DraftSource::kStatic);
//   int a = tree.Add(0, 42);      // child of the root
//   tree.Add(a, 7);               // grandchild
//   // tree.tokens = {start, 42, 7}, tree.parents = {-1, 0, 1}, tree.depths = {0, 1, 2}
//
// Node 0 is always the start token: the token the model produced last, which
// is not yet part of the verified context. A verifier evaluates every node;
// node i attends to the context and to its ancestors, at position
// context_length + depths[i]. Parents always precede their children.
#ifndef SAM_RUNTIME_DRAFT_H_
#define SAM_RUNTIME_DRAFT_H_

#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

#include "sam/export.h"

namespace sam::runtime {

// Which drafter produced a draft. Stable values (used in traces and the C API).
enum class DraftSource : uint8_t {
  kNone = 0,       // no draft: the tree is the start token alone
  kStatic = 1,     // static (corpus) suffix automaton
  kDynamic = 2,    // dynamic (prompt + generation) suffix automaton
  kRecycling = 3,  // Token Recycling
  kPld = 4,        // prompt lookup decoding (n-gram) baseline
  kMerged = 5,     // a tree merging several sources
  kOther = 6,      // a user-supplied drafter
  kModel = 7,      // a draft model (torch backend's ModelDrafter, tree_draft.h)
  kCache = 8,      // the cross-request response cache (response_cache.h)
  kSdsat = 9,      // SDSAT adaptive tokens (sdsat.h; torch backend's Generator)
};
SAM_API std::string_view DraftSourceName(DraftSource source);

struct SAM_API DraftTree {
  std::vector<uint32_t> tokens;   // tokens[0] = start token
  std::vector<int32_t> parents;   // parents[0] = -1, parents[i] < i
  std::vector<uint16_t> depths;   // depths[0] = 0
  // Optional proposal probabilities q(node | parent) for stochastic drafters
  // (empty for deterministic ones); used by lossless sampling verification.
  std::vector<float> draft_probs;
  // Optional estimates, per node, of the probability that the verifier accepts
  // the node once its parent is accepted (accept_estimates[0] = 1), from
  // policies that estimate acceptance (kCalibrated: its calibrated
  // estimates; kTree's static trees: each node's count ratio under its
  // parent); empty for the others. Shaping a tree into one chain for a
  // chain-only verifier reads them.
  std::vector<float> accept_estimates;
  DraftSource source = DraftSource::kNone;
  uint32_t match_len = 0;         // match length that produced the draft, if any

  void Reset(uint32_t start_token, DraftSource src) {
    tokens.assign(1, start_token);
    parents.assign(1, -1);
    depths.assign(1, 0);
    draft_probs.clear();
    accept_estimates.clear();
    source = src;
    match_len = 0;
  }
  // Deepest node a tree may hold: depths are uint16_t and never wrap.
  static constexpr uint16_t kMaxDepth = UINT16_MAX;
  // Appends a node under parent; returns its index. A child of a node at
  // kMaxDepth is refused with sam::Error (kCapacity), the tree unchanged.
  // (Sessions never get there: their drafts have at most kMaxDraftSize nodes.)
  int Add(int parent, uint32_t token) {
    const uint16_t depth = depths[parent];
    if (depth == kMaxDepth) ThrowTooDeep();
    tokens.push_back(token);
    parents.push_back(parent);
    depths.push_back(static_cast<uint16_t>(depth + 1));
    return static_cast<int>(tokens.size() - 1);
  }
  size_t size() const { return tokens.size(); }
  // The first child of `node` whose token is `token`, or -1 (children come
  // after their parent, so the search starts there).
  int Child(int node, uint32_t token) const {
    for (size_t i = static_cast<size_t>(node) + 1; i < tokens.size(); ++i)
      if (parents[i] == node && tokens[i] == token) return static_cast<int>(i);
    return -1;
  }
  // True when every node's parent is the node before it (a chain).
  bool IsLinear() const {
    for (size_t i = 1; i < parents.size(); ++i)
      if (parents[i] != static_cast<int32_t>(i) - 1) return false;
    return true;
  }

 private:
  [[noreturn]] static void ThrowTooDeep();
};

}  // namespace sam::runtime

#endif  // SAM_RUNTIME_DRAFT_H_
