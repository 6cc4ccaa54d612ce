// Internal: the drafting policies behind a Session (SessionOptions::policy).
//
// The session keeps the request's automata and cursors. At each step it peeks
// every static source with the start token, looks the dynamic automaton up
// and peeks the response cache, once, into a StepContext; the policy drafts
// from that (Propose). After verification the session hands the proposal and
// its accepted path back (Observe), and moving the cursors over the accepted
// tokens it asks the policy for the states it already knows (FollowKnown).
//
// One file per simple policy (paper_policy.cc: the paper's rule;
// linear_policy.cc: one source's linear drafts; tree_policy.cc: count-weighted
// static trees), a folder for the calibrated one (calibrated/), and MakePolicy
// (policy.cc) picks one.
#ifndef SAM_RUNTIME_SRC_POLICY_H_
#define SAM_RUNTIME_SRC_POLICY_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>

#include "sam/runtime/draft.h"
#include "sam/runtime/drafter.h"
#include "sam/runtime/dynamic_sam.h"
#include "sam/runtime/options.h"
#include "sam/runtime/selection.h"
#include "static_source.h"

namespace sam::runtime::internal {

// What every policy reads at a step.
struct StepContext {
  uint32_t start_token = 0;
  size_t max_nodes = 0;  // the caller's bound on the tree's nodes
  DynamicSam::Match dyn;
  const DynamicSam* dynamic = nullptr;
  // The static sources with their peeks; the last one is the response
  // cache's compiled index when cache_unit (DraftPolicy::uses_compiled_cache).
  std::span<const StaticSource> sources;
  bool cache_unit = false;
  // The longest static match, of the first source with it (0: none).
  size_t best = 0;
  uint64_t best_len = 0;
  uint32_t static_len = 0;  // best_len, capped to 32 bits
  // The response cache's match and continuation (DraftPolicy::uses_cache).
  uint32_t cache_len = 0;
  std::span<const uint32_t> cache_draft;
  Drafter* fallback = nullptr;  // may be null
  double measured_rate = 1.0;   // tokens per t(1) so far (SessionOptions::cost_curve)
};

// What the verifier tried of the last proposal's tree: on_path[k] says whether
// node k was accepted, and every node whose parent was accepted was a trial,
// except, when a chain of the tree was verified, the children of its last
// accepted node (untried_parent) other than the chain's next node
// (tried_child; -1 when the chain ended there).
struct ObservedPath {
  std::span<const uint8_t> on_path;
  int untried_parent = -1;
  int32_t tried_child = -1;
  bool Trial(const DraftTree& tree, size_t i) const {
    const int32_t parent = tree.parents[i];
    if (!on_path[parent]) return false;
    return parent != untried_parent || static_cast<int32_t>(i) == tried_child;
  }
};

class DraftPolicy {
 public:
  virtual ~DraftPolicy() = default;
  // Drafts into `tree`, already reset to the start token (a tree of the start
  // token alone: no draft).
  virtual void Propose(const StepContext& step, DraftTree* tree) = 0;
  // Forgets the last proposal (the session's tree is no longer its).
  virtual void Forget() {}
  // Whether Observe wants the accepted path of the last proposal, a tree of
  // `tree_size` nodes (ObservedPath).
  virtual bool Observes(size_t /*tree_size*/) const { return false; }
  virtual void Observe(const DraftTree& /*tree*/, const ObservedPath& /*path*/) {}
  // Source i's cursor, already at its peek (tokens[0], the start token), moved
  // over the accepted tokens whose states the last proposal knows; `accepted`
  // of tokens[1..] were accepted. Returns how many of `tokens` it has matched
  // (1: none beyond the start token).
  virtual size_t FollowKnown(size_t /*i*/, std::span<const uint32_t> /*tokens*/,
                             size_t /*accepted*/, const DraftTree& /*tree*/,
                             StaticSource& /*source*/) {
    return 1;
  }
  // Clears what the policy has learned across requests.
  virtual void ClearLearned() {}
  // A view it may have cached children of is going away.
  virtual void ForgetViews() {}

  // What the session computes for it: the response cache's peek, its
  // compiled index as one more source, and early loads of the peeked
  // states' children.
  bool uses_cache() const { return uses_cache_; }
  bool uses_compiled_cache() const { return uses_compiled_cache_; }
  bool prefetches_children() const { return prefetches_children_; }

 protected:
  bool uses_cache_ = false;
  bool uses_compiled_cache_ = false;
  bool prefetches_children_ = false;
};

// The policy `options.policy` names, with its options.
std::unique_ptr<DraftPolicy> MakePolicy(const SessionOptions& options);
std::unique_ptr<DraftPolicy> MakePaperPolicy(const SessionOptions& options);
std::unique_ptr<DraftPolicy> MakeLinearPolicy(const SessionOptions& options);
std::unique_ptr<DraftPolicy> MakeTreePolicy(const SessionOptions& options);
std::unique_ptr<DraftPolicy> MakeCalibratedPolicy(const SessionOptions& options);

}  // namespace sam::runtime::internal

#endif  // SAM_RUNTIME_SRC_POLICY_H_
