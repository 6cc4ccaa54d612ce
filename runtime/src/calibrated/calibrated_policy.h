// Policy::kCalibrated: candidates from every drafter go into one trie, each
// node with its calibrated conditional acceptance probability (the best
// offer), and the nodes of highest *path* probability are kept. The expected
// number of accepted tokens of a tree is the sum of its nodes' path
// probabilities, so this maximises the estimate for the budget; since a
// child's path probability never exceeds its parent's, every prefix of the
// ranking is a tree.
//
// Sources come in two kinds:
//  - eager ones offer their whole draft before the search: the dynamic
//    continuation, the fallback drafter's tree and the response cache's
//    continuation (OfferEagerSources);
//  - the static sources are lazy: a ranked node's static children (the
//    max_width heaviest transitions of its automaton state) are looked up
//    only when they can still rank, i.e. when the node's path probability
//    times an upper bound on any static child's estimate
//    (Calibrator::StaticBound) comes up in the best-first queue, or when one
//    of its children is about to be ranked. Lookups are the cost of a step
//    (cache misses in the index); most leaves of the draft never need theirs.
// A node's backoff children (experimental::Tuning::backoff_count) are a second
// lazy expansion of the same kind, with its own bound (Calibrator::
// BackoffBound), after the node's own static children; before a child ranks,
// its parent's backoff children are offered too if they may give it a state.
// Without max_static_lookups the ranking is exact: the same nodes in the same
// order as ranking the whole (unbounded) candidate trie, which
// tests/runtime/calibrated_test.cc checks against an eager construction.
// max_static_lookups (default 8) stops the lookups of branching states after
// that many in a step, which bounds the step's cache misses.
//
// Static sources are grouped into units: a shard set is one unit (one index
// over the union of its documents), an index of its own another. One code
// path serves one index and many: a unit whose node state is in one source
// expands from it (ExpandSource), with its child records when the session
// has one index and nothing else (records_); in several shards, from their
// children summed (ShardChildren).
#ifndef SAM_RUNTIME_SRC_CALIBRATED_CALIBRATED_POLICY_H_
#define SAM_RUNTIME_SRC_CALIBRATED_CALIBRATED_POLICY_H_

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "calibrated/calibrator.h"
#include "calibrated/candidate_trie.h"
#include "calibrated/shard_children.h"
#include "sam/runtime/draft.h"
#include "sam/runtime/drafter.h"
#include "sam/runtime/dynamic_sam.h"
#include "sam/runtime/selection.h"
#include "sam/runtime/static_index.h"
#include "policy.h"
#include "static_source.h"

namespace sam::runtime::calibrated {

class CalibratedPolicy : public internal::DraftPolicy {
 public:
  explicit CalibratedPolicy(const SessionOptions& options) : sel_(ForShape(options)) {
    uses_cache_ = uses_compiled_cache_ = prefetches_children_ = true;
    node_cells_.reserve(256);
  }

  // A chain session's trees are drawn for their one path: its chain tuning
  // stands in for the tree's (options.h).
  static SessionOptions ForShape(SessionOptions options) {
    if (options.shape == DraftShape::kChain) {
      experimental::Tuning& t = options.tuning;
      t.min_path_probability = t.chain_min_path_probability;
      t.calibrated_width = t.chain_calibrated_width;
      t.max_static_lookups = t.chain_max_static_lookups;
    }
    return options;
  }

  void Propose(const internal::StepContext& step, DraftTree* tree) override;
  void Forget() override {
    node_cells_.clear();
    trie_.valid = false;
  }
  // Calibration from the last proposal, `tree`, whose node k was accepted
  // when on_path[k]: every node whose parent was accepted was a trial.
  bool Observes(size_t tree_size) const override { return node_cells_.size() == tree_size; }
  void Observe(const DraftTree& tree, const internal::ObservedPath& path) override;
  // Accepted nodes whose state in source i is known (a transition from the
  // parent's): the cursor moves there, one node at a time, without looking
  // the transitions up again.
  size_t FollowKnown(size_t i, std::span<const uint32_t> tokens, size_t accepted,
                     const DraftTree& tree, internal::StaticSource& source) override;
  void ClearLearned() override { calibrator_.Clear(); }
  // The top-children cache is keyed by view address: an index that may be
  // freed (the response cache's compiled one) is forgotten with it.
  void ForgetViews() override { top_cache_.Clear(); }

 private:
  // What the children of one lookup share (StaticOffersFor), then each
  // child's cell (StaticCell).
  struct StaticOffers {
    uint64_t total;
    int base;  // Calibrator::StaticCellBase
    int slot;
    uint8_t source;
  };
  // Upper bounds on the estimate of any static child of a node and of any
  // of its backoff children (0: none).
  struct Bounds {
    double static_children = 0.0, backoff_children = 0.0;
    uint64_t max_count = 0;  // the node's largest unit count
  };

  // Setting up a step.
  void SetUpUnits();
  void SetRootStates();
  void OfferEagerSources();
  void PrefetchRootBackoff() const;
  // The best-first ranking and the tree it gives.
  void RankBestFirst();
  void Rank(int32_t node);
  bool QueueExpansion(int32_t node, double bound, bool backoff);
  Bounds BoundsOf(int32_t node) const;
  void Output(DraftTree* tree);
  size_t CostAwareKeep(size_t keep);

  // Offers.
  size_t FamilyOf(size_t u) const { return u == cache_unit_index_ ? 1 : 0; }
  StaticOffers StaticOffersFor(uint64_t total, uint64_t len, bool backoff, size_t u) const;
  static int StaticCell(uint64_t count, const StaticOffers& o);
  void OfferStatic(int32_t child, uint64_t count, const StaticOffers& o);
  int32_t OfferStaticAmong(int32_t node, int32_t first, uint32_t token, uint64_t count,
                           const StaticOffers& o);
  int32_t OfferStaticChild(int32_t node, uint32_t token, uint64_t count, const StaticOffers& o);

  // The lazy static source: lookups and prefetches.
  bool LookupsSpent() const { return lookups_left_ == 0; }
  std::span<const StaticIndex::Child> TopChildren(size_t i, uint64_t v, uint64_t count);
  void PrefetchChild(size_t i, uint64_t target, uint64_t count,
                     uint32_t record = StaticIndex::kNoRecord) const;
  uint32_t RecordOf(const CandidateTrie::IndexState& s) const;
  uint32_t LinkRecordOf(const CandidateTrie::IndexState& s) const;

  // Expansions: a node's static children, then its backoff children, unit
  // by unit.
  void Expand(int32_t node);
  void ExpandUnit(int32_t node, size_t u);
  void ExpandSource(int32_t node, size_t i, size_t u);
  void ExpandFromRecord(int32_t node, const CandidateTrie::IndexState& s, uint32_t r,
                        const StaticOffers& offers);
  void BackOff(int32_t node);
  void OfferBackoff(int32_t node, size_t u);
  uint64_t ShorterContext(int32_t node, size_t u);
  void BackoffFromRecord(int32_t node, const CandidateTrie::IndexState& s, uint32_t lr);
  bool BackoffReaches(int32_t parent, int32_t child) const;
  uint64_t UnitCount(int32_t node, size_t u, uint64_t* len) const;
  bool UnitHasState(int32_t node, size_t u) const;
  bool UnitBacksOff(int32_t node, size_t u) const;
  StaticMatch MatchIn(int32_t node, size_t i);

  SessionOptions sel_;
  Calibrator calibrator_;
  CandidateTrie trie_;
  ShardChildren shards_;
  // Top children of high-degree states of indexes attached without a hub
  // table (1024 entries: about 220 KiB, allocated when first needed).
  TopChildrenCache top_cache_{1024};
  std::vector<StaticIndex::Child> children_;
  std::vector<int32_t> tree_index_;
  std::vector<double> ranked_paths_;  // cost-aware sizing (SessionOptions::cost_curve)
  std::vector<uint32_t> chain_;       // the dynamic continuation
  DraftTree fallback_tree_;
  std::vector<std::array<int, 4>> node_cells_;  // calibration cells of the tree's nodes
  // The static sources as units: unit u is sources [unit_begin_[u],
  // unit_begin_[u + 1]) (a shard set's shards, or one index), matching
  // unit_len_[u] tokens at the root (the longest over its shards).
  std::vector<size_t> unit_begin_;
  std::vector<uint64_t> unit_len_;

  // The step in progress.
  const internal::StepContext* step_ = nullptr;
  std::span<const internal::StaticSource> src_;
  size_t budget_ = 0;
  size_t num_units_ = 0;
  size_t cache_unit_index_ = SIZE_MAX;
  // The dynamic continuation's length, and the chain node whose child is
  // offered next (Rank offers it one node at a time).
  size_t dyn_chain_ = 0;
  int32_t dyn_tip_ = 0;
  DraftSource fallback_source_ = DraftSource::kOther;
  // Lookups of states with more than one occurrence (a unit's summed count)
  // still allowed in this step (SIZE_MAX: no limit, never spent).
  size_t lookups_left_ = 0;
  // Child records followed from record to record (one index with records
  // usable at this width; else null): what one index and many differ by.
  const StaticIndex* records_ = nullptr;
#ifdef SAM_PHASE_TIMING
  size_t phase_nodes_ = 2;  // the ranking's phase ends when this many nodes rank
#endif
  void PhaseMark();
};

}  // namespace sam::runtime::calibrated

#endif  // SAM_RUNTIME_SRC_CALIBRATED_CALIBRATED_POLICY_H_
