#include "sam/runtime/session.h"

#include <algorithm>
#include <array>
#include <bit>
#include <chrono>
#include <functional>
#include <limits>
#include <string>

#include "index_children.h"
#include "phase_marks.h"
#include "sam/error.h"

namespace sam::runtime {

namespace {

uint64_t NowNs() {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                   std::chrono::steady_clock::now().time_since_epoch())
                                   .count());
}

// 1, 2, 3, 4, 5-6, 7-8, 9-12, 13-16, 17-24, 25-32, 33+ -> 0..10 (0 -> 0).
constexpr size_t LengthBucketOf(uint64_t x) {
  constexpr uint64_t kUpper[] = {1, 2, 3, 4, 6, 8, 12, 16, 24, 32};
  for (size_t i = 0; i < std::size(kUpper); ++i)
    if (x <= kUpper[i]) return i;
  return std::size(kUpper);
}
// LengthBucketOf by table (it is called for every offered node, its loop of
// unpredictable branches was a visible share of a step).
constexpr auto kLengthBucketTable = [] {
  std::array<uint8_t, 33> t{};
  for (uint64_t x = 0; x < t.size(); ++x) t[x] = static_cast<uint8_t>(LengthBucketOf(x));
  return t;
}();
static_assert(LengthBucketOf(33) == 10 && LengthBucketOf(~uint64_t{0}) == 10);
inline size_t LengthBucket(uint64_t x) { return x < 33 ? kLengthBucketTable[x] : 10; }
constexpr size_t kLengthBuckets = 11;

// 1, 2, 3-4, 5-8, 9-16, 17-128, 129-1024, 1025+ -> 0..7.
constexpr size_t CountBucketOf(uint64_t count) {
  size_t b = 0;
  for (uint64_t upper = 1; b < 7 && count > upper; upper *= (b < 5 ? 2 : 8)) ++b;
  return b;
}
// CountBucketOf by the bit width of count - 1: its bounds are powers of two,
// so counts of one width share a bucket.
constexpr auto kCountBucketTable = [] {
  std::array<uint8_t, 65> t{};
  for (size_t w = 0; w < t.size(); ++w)
    t[w] = static_cast<uint8_t>(CountBucketOf(w == 0 ? 1 : (uint64_t{1} << (w - 1)) + 1));
  return t;
}();
static_assert(CountBucketOf(16) == 4 && CountBucketOf(17) == 5 && CountBucketOf(128) == 5 &&
              CountBucketOf(129) == 6 && CountBucketOf(1024) == 6 && CountBucketOf(1025) == 7 &&
              CountBucketOf(0) == 0);
inline size_t CountBucket(uint64_t count) {
  return kCountBucketTable[std::bit_width(count == 0 ? 0 : count - 1)];
}
constexpr size_t kCountBuckets = 8;
constexpr size_t kRatioBuckets = 10;
constexpr size_t kRankBuckets = 8;
// A drafter's own probability of a node given its parent (a draft model's
// q), in tenths: [0, 0.1) ... [0.9, 1].
constexpr size_t kProbBuckets = 10;

}  // namespace

// Running estimates of P(node accepted | its parent accepted), one Beta-like
// cell per feature combination, shrunk towards a prior mean. This is what
// lets Policy::kCalibrated compare a dynamic continuation, count-weighted
// static branches and fallback branches on one scale (expected accepted
// tokens = sum of path probabilities), and learn which of them deserve the
// node budget on the current workload. Estimates are kept ready (updated at
// each observation), with, per (parent count, match length) of a static
// node, the largest estimate over the count ratios: an upper bound on any
// static child's probability before the children are looked up.
//
// Static cells come in two kinds: a child of the node's own state (the
// longest context), and a backoff child, a child of the next shorter context
// (the state's suffix link) that the longest context does not offer among
// its heaviest children. A backoff child's features are those of the shorter
// context (its count ratio there, that state's count and length). Their upper
// bound, before the link is read, is per length bucket the largest backoff
// estimate at that length or shorter (the shorter context is shorter).
//
// Static cells come in two families with the same features and priors: the
// attached indexes (family 0) and a response cache's compiled index (family
// 1, ResponseCache::CompileOptions), so that earlier responses earn their
// own acceptance rates.
class Session::Calibrator {
 public:
  static constexpr double kPriorWeight = 4.0;

  Calibrator() {
    const size_t dynamic = kLengthBuckets * kLengthBuckets;
    const size_t fixed_static = kFamilies * 2 * kStaticCells;
    const size_t fallback = kLengthBuckets * kRankBuckets;
    const size_t model = kLengthBuckets * kProbBuckets;
    const size_t cache = kLengthBuckets * kLengthBuckets;
    static_base_ = dynamic;
    fallback_base_ = dynamic + fixed_static;
    model_base_ = fallback_base_ + fallback;
    cache_base_ = model_base_ + model;
    prior_.resize(dynamic + fixed_static + fallback + model + cache);
    for (size_t l = 0; l < kLengthBuckets; ++l)
      for (size_t d = 0; d < kLengthBuckets; ++d)
        prior_[l * kLengthBuckets + d] = std::min(0.85, 0.35 + 0.05 * static_cast<double>(l + d));
    // A backoff child is a token the longer context did not favour: half the
    // prior of a child of the same ratio.
    for (size_t f = 0; f < kFamilies; ++f)
      for (size_t b = 0; b < 2; ++b)
        for (size_t r = 0; r < kRatioBuckets; ++r)
          for (size_t c = 0; c < kCountBuckets; ++c)
            for (size_t l = 0; l < kLengthBuckets; ++l)
              prior_[StaticCellOf(f, b, r, c, l)] =
                  (b == 0 ? 0.8 : 0.4) * (static_cast<double>(r) + 0.5) / kRatioBuckets;
    for (size_t d = 0; d < kLengthBuckets; ++d)
      for (size_t k = 0; k < kRankBuckets; ++k)
        prior_[fallback_base_ + d * kRankBuckets + k] = 0.3 / static_cast<double>(k + 1);
    // A draft model's q: the acceptance of a drafted token is about its
    // probability under the draft, when the draft resembles the target.
    for (size_t d = 0; d < kLengthBuckets; ++d)
      for (size_t q = 0; q < kProbBuckets; ++q)
        prior_[model_base_ + d * kProbBuckets + q] = 0.9 * (static_cast<double>(q) + 0.5) / kProbBuckets;
    // Earlier responses are weaker evidence than the request's own text.
    for (size_t l = 0; l < kLengthBuckets; ++l)
      for (size_t d = 0; d < kLengthBuckets; ++d)
        prior_[cache_base_ + l * kLengthBuckets + d] =
            std::min(0.8, 0.25 + 0.05 * static_cast<double>(l + d));
    Clear();
  }

  void Clear() {
    evidence_.resize(prior_.size());
    for (size_t c = 0; c < prior_.size(); ++c)
      evidence_[c] = Evidence{0.0, 0.0, kPriorWeight * prior_[c]};
    prob_.resize(prior_.size());
    for (size_t c = 0; c < prior_.size(); ++c) prob_[c] = Estimate(c);
    static_max_.assign(kFamilies * kCountBuckets * kLengthBuckets, 0.0);
    backoff_len_max_.assign(kFamilies * kLengthBuckets, 0.0);
    backoff_max_.assign(kFamilies * kLengthBuckets, 0.0);
    for (size_t f = 0; f < kFamilies; ++f) {
      for (size_t k = 0; k < kCountBuckets * kLengthBuckets; ++k) UpdateStaticMax(f, k);
      for (size_t l = 0; l < kLengthBuckets; ++l) UpdateBackoffMax(f, l);
    }
  }

  int DynamicCell(uint64_t match_len, size_t depth) const {
    return static_cast<int>(LengthBucket(match_len) * kLengthBuckets + LengthBucket(depth));
  }
  // A static child of count ratio `ratio` under a state of `parent_count`
  // occurrences and match length `match_len`; backoff: that state is the
  // shorter context (see above).
  int StaticCell(double ratio, uint64_t parent_count, uint64_t match_len, bool backoff = false,
                 size_t family = 0) const {
    return StaticCellBase(parent_count, match_len, backoff, family) + RatioOffset(ratio);
  }
  // StaticCell in two parts: what one state's children share (computed once
  // per lookup), and what depends on the child's count ratio.
  int StaticCellBase(uint64_t parent_count, uint64_t match_len, bool backoff,
                     size_t family) const {
    return StaticCellOf(family, backoff ? 1 : 0, 0, CountBucket(parent_count),
                        LengthBucket(match_len));
  }
  static int RatioOffset(double ratio) {
    // ratio is in [0, 1] (a child's weight never exceeds its parent's); the
    // comparisons keep anything else, NaN included, away from the conversion.
    const size_t r = !(ratio > 0.0) ? 0
                     : ratio < 1.0  ? static_cast<size_t>(ratio * kRatioBuckets)
                                    : kRatioBuckets - 1;
    return static_cast<int>(r * kCountBuckets * kLengthBuckets);
  }
  int FallbackCell(size_t depth, size_t rank) const {
    return static_cast<int>(fallback_base_ + LengthBucket(depth) * kRankBuckets +
                            std::min(rank, kRankBuckets - 1));
  }
  int CacheCell(uint64_t match_len, size_t depth) const {
    return static_cast<int>(cache_base_ + LengthBucket(match_len) * kLengthBuckets +
                            LengthBucket(depth));
  }
  // A node a drafter proposed with probability q given its parent (a draft
  // model's tree: DraftTree::draft_probs).
  int ModelCell(size_t depth, float q) const {
    const size_t b = !(q > 0.0f) ? 0
                     : q < 1.0f  ? static_cast<size_t>(q * kProbBuckets)
                                 : kProbBuckets - 1;
    return static_cast<int>(model_base_ + LengthBucket(depth) * kProbBuckets + b);
  }
  double Probability(int cell) const { return prob_[static_cast<size_t>(cell)]; }
  // At least Probability(StaticCell(r, parent_count, match_len)) for every ratio r.
  double StaticBound(uint64_t parent_count, uint64_t match_len, size_t family = 0) const {
    return static_max_[(family * kCountBuckets + CountBucket(parent_count)) * kLengthBuckets +
                       LengthBucket(match_len)];
  }
  // At least the estimate of every backoff child of a state of match length
  // match_len (its shorter context is shorter; any count and ratio).
  double BackoffBound(uint64_t match_len, size_t family = 0) const {
    return backoff_max_[family * kLengthBuckets + LengthBucket(match_len)];
  }
  void Observe(int cell, bool accepted) {
    const size_t c = static_cast<size_t>(cell);
    Evidence& e = evidence_[c];
    e.trials += 1.0;
    if (accepted) e.hits += 1.0;
    const double old = prob_[c];
    prob_[c] = Estimate(c);
    if (c >= static_base_ && c < fallback_base_) {
      const size_t block = (c - static_base_) / kStaticCells;  // family * 2 + backoff
      const size_t within = (c - static_base_) % kStaticCells;
      // A maximum over a group of cells moves only if this cell exceeds it,
      // or was it and fell: the same value as a full recomputation, without
      // one at most observations.
      if (block % 2 == 0) {
        // The (count, length) bucket's maximum over its 10 ratio cells.
        const size_t k = within % (kCountBuckets * kLengthBuckets);
        double& max = static_max_[block / 2 * kCountBuckets * kLengthBuckets + k];
        if (prob_[c] > max) {
          max = prob_[c];
        } else if (old == max && prob_[c] < max) {
          UpdateStaticMax(block / 2, k);
        }
      } else {
        // The length bucket's maximum over its 80 cells.
        const size_t f = block / 2, l = within % kLengthBuckets;
        const double max = backoff_len_max_[f * kLengthBuckets + l];
        if (prob_[c] > max || (old == max && prob_[c] < max)) UpdateBackoffMax(f, l);
      }
    }
  }

 private:
  static constexpr size_t kFamilies = 2;
  static constexpr size_t kStaticCells = kRatioBuckets * kCountBuckets * kLengthBuckets;
  int StaticCellOf(size_t family, size_t backoff, size_t r, size_t count, size_t len) const {
    return static_cast<int>(static_base_ + (family * 2 + backoff) * kStaticCells +
                            (r * kCountBuckets + count) * kLengthBuckets + len);
  }
  // After a change of a backoff cell of family f and length bucket l.
  void UpdateBackoffMax(size_t f, size_t l) {
    double best = 0.0;
    for (size_t r = 0; r < kRatioBuckets; ++r)
      for (size_t c = 0; c < kCountBuckets; ++c)
        best = std::max(best, prob_[StaticCellOf(f, 1, r, c, l)]);
    backoff_len_max_[f * kLengthBuckets + l] = best;
    best = 0.0;
    for (size_t k = 0; k < kLengthBuckets; ++k) {
      best = std::max(best, backoff_len_max_[f * kLengthBuckets + k]);
      backoff_max_[f * kLengthBuckets + k] = best;
    }
  }
  double Estimate(size_t cell) const {
    const Evidence& e = evidence_[cell];
    return (e.hits + e.weighted_prior) / (e.trials + kPriorWeight);
  }
  // k = count bucket * kLengthBuckets + length bucket, of family f.
  void UpdateStaticMax(size_t f, size_t k) {
    double best = 0.0;
    for (size_t r = 0; r < kRatioBuckets; ++r)
      best = std::max(best, prob_[static_base_ + 2 * f * kStaticCells +
                                  r * kCountBuckets * kLengthBuckets + k]);
    static_max_[f * kCountBuckets * kLengthBuckets + k] = best;
  }

  size_t static_base_ = 0;
  size_t fallback_base_ = 0;
  size_t model_base_ = 0;
  size_t cache_base_ = 0;
  std::vector<double> prior_, prob_, static_max_;
  // What Observe updates and Estimate reads of a cell, together: one cache
  // line instead of three arrays' (an observation's reads missed the first
  // level about once per array).
  struct alignas(32) Evidence {
    double hits = 0.0, trials = 0.0;
    double weighted_prior = 0.0;  // kPriorWeight * prior_ (exact: a power of two)
  };
  std::vector<Evidence> evidence_;
  // Per length bucket: the largest backoff estimate of that length, and of
  // that length or shorter.
  std::vector<double> backoff_len_max_, backoff_max_;
};

namespace {

// A node of the merged candidate trie of Policy::kCalibrated.
struct MergedNode {
  uint32_t token;
  int32_t parent;
  uint16_t depth;
  uint8_t sources;        // bit per contributing source
  bool expanded;          // its static children have been offered (or it has none)
  bool backed_off;        // its backoff children have been offered (or it has none)
  double prob;            // P(accepted | parent accepted): the best offer
  double path;            // product of prob along the path (set when ranked)
  double queued;          // key of its latest queue entry (-1: none)
  int32_t rank;           // position in the ranking (-1: not ranked)
  int32_t first_child;    // children list (-1: none)
  int32_t next_sibling;
  std::array<int, 4> cells;  // dynamic, static, fallback, cache calibration cells (-1: none)
};

constexpr uint8_t kFromDynamic = 1, kFromStatic = 2, kFromFallback = 4, kFromCache = 8;
// Static candidates are offered down to this depth (StaticTreeOptions' default).
constexpr uint16_t kMaxStaticDepth = 64;

// An entry of the best-first queue: a node to rank (key = its path
// probability), or a ranked node whose static children are still to be
// looked up (key = its path probability times an upper bound on any static
// child's probability).
struct QueueEntry {
  double key;
  uint64_t order;  // at equal keys the smaller first (OrderAtEqualKeys)
  int32_t node;
  bool expand;
  bool backoff;  // an expansion: of the backoff children
};

// The ranking order: path probability descending; at equal keys an expansion
// first (it may offer a node of that key), then the shallower node, then the
// one whose parent ranks first, then the smaller token (and, for one node's
// two expansions, the static one first). Everything but the key is a
// property of the node itself, so the order (and the drafts) do not depend
// on the order in which candidates were offered. "Its parent" of an
// expansion is the expanded node itself (a node is queued only once its
// parent ranks, an expansion only once its node does; ranks never change).
// Two entries equal in all of these are one node's (a parent's children
// have distinct tokens; ranks are distinct): the order is total. Packed at
// the push into one word, so that a tie of keys (frequent: siblings of one
// cell) costs one more comparison, not reads of the nodes. Depths and ranks
// are below the budget (a node is queued only once its parent ranks).
static_assert(kMaxDraftSize < (size_t{1} << 13), "depth and rank take 13 bits in the order");
inline uint64_t OrderAtEqualKeys(bool expand, uint16_t depth, int32_t rank, uint32_t token,
                                 bool backoff) {
  return uint64_t{!expand} << 63 | (uint64_t{depth} & 0x1fff) << 50 |
         (static_cast<uint64_t>(rank) & 0x1fff) << 37 | uint64_t{token} << 5 |
         uint64_t{backoff} << 4;
}
inline bool RanksBefore(const QueueEntry& a, const QueueEntry& b) {
  return a.key > b.key || (a.key == b.key && a.order < b.order);  // keys are never NaN
}
}  // namespace

// Scratch for kCalibrated, kept across steps so that proposing does not
// allocate once warm: the merged trie, its best-first queue and ranking,
// each node's automaton state in every static index (kNoState: none).
struct Session::MergedScratch {
  // The trie's nodes are nodes[0, num_nodes): the vector only grows (Grow),
  // so that adding a node is a few stores, not a push_back.
  std::vector<MergedNode> nodes;
  size_t num_nodes = 0;
  size_t num_indexes = 0;
  // Per node and index (num_nodes x num_indexes, node-major; allocated for
  // nodes.size() nodes): the
  // node's automaton state there, its Count() and its match length (the
  // root's peeked length plus the depth, except below a backoff child, a
  // shorter context). One array: a new node grows it once.
  struct IndexState {
    uint64_t state;
    uint64_t count;
    // The match length (below the session's text length: 32 bits, so that
    // the state takes 32 bytes with the fields below).
    uint32_t len;
    // Its child record when known from its parent's (StaticIndex::
    // RecordEntry::record; one index only), else kNoRecord: look it up; for
    // a state that occurs once (a position), the token after it when known.
    uint32_t record = StaticIndex::kNoRecord;
    // The record whose entries offered it (StaticIndex::Options::
    // subtree_nodes), and its place there: its children among that
    // record's subtree entries need no lookup.
    uint32_t sub = StaticIndex::kNoRecord;
    uint32_t place = 0;
  };
  static_assert(sizeof(IndexState) == 32, "a node's state in an index: half a cache line");
  std::vector<IndexState> states;
  // The best-first queue: entries q[head, tail), best first, in a buffer
  // with room on both sides (Push).
  std::vector<QueueEntry> q, q_spare;
  size_t head = 0, tail = 0;
  bool QueueEmpty() const { return head == tail; }
  std::vector<int32_t> ranked;   // ranked[r]: the node of rank r (tree node r)
  std::vector<int32_t> tree_index;
  std::vector<double> ranked_paths;  // cost-aware sizing (SelectionOptions::cost_curve)
  std::vector<StaticIndex::Child> children;
  // The static sources: unit u is cursors [unit_begin[u], unit_begin[u + 1])
  // (a shard set's shards, or one index), matching unit_len[u] tokens at the
  // root (the longest over its shards).
  std::vector<size_t> unit_begin;
  std::vector<uint64_t> unit_len;
  // A merged lookup over a unit's shards (merged_children in ProposeCalibrated).
  struct ShardState {
    size_t cursor;
    uint64_t state;
    uint64_t count;
    uint32_t list_begin, list_size;  // its heaviest children: lists[begin, + size)
    bool complete;                   // ... and they are all of its children
  };
  struct MergedChild {
    uint32_t token;
    uint64_t count;  // summed over the shards
    uint32_t row;    // its target in shard state e: targets[row * shard_states.size() + e]
  };
  struct Gathered {
    uint32_t token;
    uint32_t shard;  // index into shard_states
    uint64_t target, count;
  };
  std::vector<ShardState> shard_states;
  std::vector<StaticIndex::Child> lists;
  std::vector<MergedChild> merged;
  std::vector<uint64_t> targets, target_counts;  // rows x shard_states.size() (kNoState, 0: none)
  std::vector<Gathered> gathered;
  std::vector<uint64_t> upper, lower;  // candidates' bounds (merged_children)
  // Lists of the kLongChildren heaviest children of shard states that are
  // not hubs (count descending, then token ascending; all of them when
  // fewer): direct-mapped, kLongEntries entries of about 790 bytes,
  // allocated when first needed.
  static constexpr size_t kLongChildren = 32, kLongEntries = 1024;
  struct LongEntry {
    const format::IndexView* view = nullptr;
    uint64_t state = 0;
    uint32_t size = 0;
    std::array<StaticIndex::Child, kLongChildren> children;
  };
  std::vector<LongEntry> long_lists;
  std::vector<StaticIndex::Child> record_children;  // a shard state's child record
  std::span<const StaticIndex::Child> LongList(const format::IndexView& view, uint64_t state) {
    if (long_lists.empty()) long_lists.resize(kLongEntries);
    const uint64_t h = (state ^ reinterpret_cast<uintptr_t>(&view)) * 0x9E3779B97F4A7C15ull;
    LongEntry& e = long_lists[h >> (64 - std::countr_zero(kLongEntries))];
    if (e.view != &view || e.state != state) {
      e.view = &view;
      e.state = state;
      e.size = internal::TopChildrenOf(view, state, kLongChildren, e.children.data());
    }
    return std::span<const StaticIndex::Child>(e.children.data(), e.size);
  }
  // The merged top children of recent shard-set nodes (a common short
  // match's states recur from step to step, and their lookup may have to
  // enumerate thousands of transitions in each tied shard): direct-mapped by
  // the shard states, for at most kMergedShards tied shards and
  // TopChildrenCache::kChildren children (kMergedEntries entries of about
  // 1.4 KiB, allocated when first needed).
  static constexpr size_t kMergedShards = 8, kMergedEntries = 512;
  static constexpr size_t kMergedChildren = TopChildrenCache::kChildren;
  struct MergedEntry {
    uint64_t hash = 0;
    uint8_t shards = 0, size = 0, width = 0;  // shards == 0: empty
    std::array<uint32_t, kMergedShards> cursors;
    std::array<uint64_t, kMergedShards> states;
    std::array<uint32_t, kMergedChildren> tokens;
    std::array<uint64_t, kMergedChildren> counts;
    std::array<uint64_t, kMergedChildren * kMergedShards> targets, target_counts;
  };
  std::vector<MergedEntry> merged_cache;
  uint64_t MergedHash(size_t width) const {
    uint64_t h = width;
    for (const ShardState& e : shard_states)
      h = (h ^ (e.state * 0x9E3779B97F4A7C15ull + e.cursor)) * 0xD6E8FEB86659FD93ull;
    return h ^ (h >> 29);
  }
  MergedEntry* MergedSlot(uint64_t hash) {
    if (merged_cache.empty()) merged_cache.resize(kMergedEntries);
    return &merged_cache[hash & (kMergedEntries - 1)];
  }
  // Fills merged / targets / target_counts from the cache; false on a miss.
  bool FindMerged(size_t width) {
    if (shard_states.size() > kMergedShards || width > kMergedChildren) return false;
    const uint64_t hash = MergedHash(width);
    const MergedEntry& c = *MergedSlot(hash);
    const size_t n = shard_states.size();
    if (c.hash != hash || c.shards != n || c.width != width) return false;
    for (size_t e = 0; e < n; ++e)
      if (c.cursors[e] != shard_states[e].cursor || c.states[e] != shard_states[e].state)
        return false;
    merged.clear();
    targets.assign(c.size * n, 0);
    target_counts.assign(c.size * n, 0);
    for (uint32_t k = 0; k < c.size; ++k) {
      merged.push_back({c.tokens[k], c.counts[k], k});
      for (size_t e = 0; e < n; ++e) {
        targets[k * n + e] = c.targets[k * kMergedShards + e];
        target_counts[k * n + e] = c.target_counts[k * kMergedShards + e];
      }
    }
    return true;
  }
  void StoreMerged(size_t width) {
    const size_t n = shard_states.size();
    if (n > kMergedShards || width > kMergedChildren || merged.size() > kMergedChildren) return;
    const uint64_t hash = MergedHash(width);
    MergedEntry& c = *MergedSlot(hash);
    c.hash = hash;
    c.shards = static_cast<uint8_t>(n);
    c.width = static_cast<uint8_t>(width);
    c.size = static_cast<uint8_t>(merged.size());
    for (size_t e = 0; e < n; ++e) {
      c.cursors[e] = static_cast<uint32_t>(shard_states[e].cursor);
      c.states[e] = shard_states[e].state;
    }
    for (size_t k = 0; k < merged.size(); ++k) {
      c.tokens[k] = merged[k].token;
      c.counts[k] = merged[k].count;
      for (size_t e = 0; e < n; ++e) {
        c.targets[k * kMergedShards + e] = targets[merged[k].row * n + e];
        c.target_counts[k * kMergedShards + e] = target_counts[merged[k].row * n + e];
      }
    }
  }
  // Top children of high-degree states of indexes attached without a hub
  // table (1024 entries: about 220 KiB, allocated when first needed).
  TopChildrenCache cache{1024};
  // The pending proposal is this trie's ranking (Commit may read the states).
  bool valid = false;
  double min_key = 0.0;  // SelectionOptions::min_path_probability

  // A shard set's backoff (ProposeCalibrated's offer_backoff): per node
  // and cursor, the longest suffix of the node's string in that shard
  // (matches, known when match_known), grown on demand, node-major like
  // states.
  std::vector<StaticMatch> matches;
  std::vector<uint8_t> match_known;
  void GrowMatches() {
    if (matches.size() >= num_nodes * num_indexes) return;
    matches.resize(states.size());
    match_known.resize(states.size(), 0);
  }

  void Reset(uint32_t start_token, size_t indexes) {
    num_nodes = 0;
    if (q.empty()) q.resize(256);  // 4 KiB: a step rarely fills a side of it
    head = tail = q.size() / 2;
    ranked.clear();
    num_indexes = indexes;
    if (states.size() < nodes.size() * num_indexes) states.resize(nodes.size() * num_indexes);
    matches.clear();
    match_known.clear();
    valid = false;
    Add(-1, start_token);
    nodes[0].prob = 1.0;
  }
  // Room for twice as many nodes (never in a warm session's usual step).
  __attribute__((noinline)) void Grow() {
    nodes.resize(std::max<size_t>(64, 2 * nodes.size()));
    states.resize(nodes.size() * num_indexes);
  }
  __attribute__((always_inline)) int32_t Add(int32_t parent, uint32_t token) {
    if (num_nodes == nodes.size()) Grow();
    const int32_t id = static_cast<int32_t>(num_nodes++);
    MergedNode& n = nodes[id];
    n.token = token;
    n.parent = parent;
    n.sources = 0;
    n.expanded = false;
    n.backed_off = false;
    n.prob = 0.0;
    n.path = 0.0;
    n.queued = -1.0;
    n.rank = -1;
    n.first_child = -1;
    n.next_sibling = -1;
    n.cells = {-1, -1, -1, -1};
    if (parent >= 0) {
      MergedNode& p = nodes[parent];
      n.depth = static_cast<uint16_t>(p.depth + 1);
      n.next_sibling = p.first_child;
      p.first_child = id;
    } else {
      n.depth = 0;
    }
    IndexState* st = states.data() + static_cast<size_t>(id) * num_indexes;
    if (num_indexes == 1) {  // the usual case, without the loop
      st[0] = IndexState{format::kNoState, 0, 0};
    } else {
      for (size_t i = 0; i < num_indexes; ++i) st[i] = IndexState{format::kNoState, 0, 0};
    }
    return id;
  }
  // The child with `token` among the siblings from `first` on (-1: none).
  // A node's children are listed newest first, so a lookup whose children
  // have distinct tokens (one state's transitions) need only compare with
  // the children that were there before it (`first` = the node's
  // first_child then): those it adds cannot match. (A corrupt index whose
  // state repeats a label gives two siblings with one token: still a
  // well-formed tree.)
  int32_t FindAmong(int32_t first, uint32_t token) const {
    for (int32_t c = first; c >= 0; c = nodes[c].next_sibling)
      if (nodes[c].token == token) return c;
    return -1;
  }
  int32_t Child(int32_t parent, uint32_t token) {
    return ChildAmong(parent, nodes[parent].first_child, token);
  }
  // Child(parent, token), searched among the siblings from `first` on.
  int32_t ChildAmong(int32_t parent, int32_t first, uint32_t token) {
    const int32_t c = FindAmong(first, token);
    return c >= 0 ? c : Add(parent, token);
  }
  uint64_t& State(int32_t node, size_t index) { return states[node * num_indexes + index].state; }
  uint64_t& StateCount(int32_t node, size_t index) {
    return states[node * num_indexes + index].count;
  }
  uint32_t& StateLen(int32_t node, size_t index) { return states[node * num_indexes + index].len; }

  // The queue is sorted best first: a pop takes the first entry. A push
  // that ranks first (a chain's next node, usually) goes before it; any
  // other is placed by moving the entries that it ranks before one slot
  // back, from the end (a lookup's children usually rank last). It holds a
  // few dozen entries, and a pop is as frequent as a push: cheaper than a
  // heap's sift-down at every pop, or a binary search and a move of the
  // queue's tail at every push. (The order is total, so the entries come
  // out as from any priority queue.)
  void Push(const QueueEntry& e) {
    if (head == tail || RanksBefore(e, q[head])) {
      if (head == 0) Recentre();
      q[--head] = e;
      return;
    }
    if (tail == q.size()) Recentre();
    size_t i = tail++;
    for (; RanksBefore(e, q[i - 1]); --i) q[i] = q[i - 1];  // stops at q[head] at the latest
    q[i] = e;
  }
  QueueEntry Pop() { return q[head++]; }
  // Room on both sides again: the entries moved to the middle of a buffer
  // at least four times their number (rare: a step that pushes more than
  // half the buffer's entries on one side).
  __attribute__((noinline)) void Recentre() {
    const size_t n = tail - head;
    q_spare.resize(std::max({q.size(), 4 * n + 8, size_t{64}}));
    const size_t h = (q_spare.size() - n) / 2;
    std::copy(q.begin() + static_cast<ptrdiff_t>(head), q.begin() + static_cast<ptrdiff_t>(tail),
              q_spare.begin() + static_cast<ptrdiff_t>(h));
    q.swap(q_spare);
    head = h;
    tail = h + n;
  }
  // Queues a node of a ranked parent (again, when its probability rose);
  // not below min_key (the ranking stops there: it would never be popped).
  void Enqueue(int32_t node) {
    MergedNode& n = nodes[node];
    const MergedNode& p = nodes[n.parent];
    const double key = p.path * n.prob;
    if (!(key > n.queued) || key < min_key) return;
    n.queued = key;
    Push(QueueEntry{key, OrderAtEqualKeys(false, n.depth, p.rank, n.token, false), node, false,
                    false});
  }
  // Offer to a node just added (Add): what Offer does then, without the
  // comparisons with a cell and an estimate it has not got.
  void OfferNew(const Calibrator& cal, int32_t node, int slot, int cell, uint8_t source) {
    MergedNode& n = nodes[node];
    const double p = cal.Probability(cell);
    n.cells[slot] = cell;
    n.sources = source;
    if (!(p > 0.0)) return;
    n.prob = p;
    if (nodes[n.parent].rank >= 0) Enqueue(node);
  }
  // Child(parent, token) offered by a source: Offer, or OfferNew when added.
  int32_t OfferChild(const Calibrator& cal, int32_t parent, uint32_t token, int slot, int cell,
                     uint8_t source) {
    return OfferChildAmong(cal, parent, nodes[parent].first_child, token, slot, cell, source);
  }
  // The same, searched among the siblings from `first` on (FindAmong).
  int32_t OfferChildAmong(const Calibrator& cal, int32_t parent, int32_t first, uint32_t token,
                          int slot, int cell, uint8_t source) {
    int32_t child = FindAmong(first, token);
    if (child >= 0) {
      Offer(cal, child, slot, cell, source);
    } else {
      child = Add(parent, token);
      OfferNew(cal, child, slot, cell, source);
    }
    return child;
  }
  // A source's estimate for a node: the node keeps the best one, and for
  // each source slot the cell of the best estimate (the cells learn).
  void Offer(const Calibrator& cal, int32_t node, int slot, int cell, uint8_t source) {
    MergedNode& n = nodes[node];
    const double p = cal.Probability(cell);
    // At equal estimates the smaller cell, so that the cells that learn do
    // not depend on the order of the offers either.
    if (n.cells[slot] < 0 || p > cal.Probability(n.cells[slot]) ||
        (p == cal.Probability(n.cells[slot]) && cell < n.cells[slot]))
      n.cells[slot] = cell;
    n.sources |= source;
    if (p > n.prob) {
      n.prob = p;
      if (nodes[n.parent].rank >= 0) Enqueue(node);
    }
  }
};

namespace {

// SessionOptions::max_dynamic_bytes, 0 meaning the default; checked before
// anything is reserved.
size_t DynamicBytes(size_t bytes) {
  if (bytes == 0) return SessionOptions{}.max_dynamic_bytes;
  const size_t least = DynamicSam::BytesForCapacity(kMinDynamicWindowTokens);
  if (bytes < least)
    throw Error(ErrorCode::kInvalidArgument,
                "SessionOptions: max_dynamic_bytes " + std::to_string(bytes) +
                    " holds no useful window: give 0 (the default, " +
                    std::to_string(SessionOptions{}.max_dynamic_bytes) + ") or at least " +
                    std::to_string(least) + " (a window of " +
                    std::to_string(kMinDynamicWindowTokens) + " tokens)");
  return bytes;
}

}  // namespace

Session::Session(const SessionOptions& options)
    : options_(options),
      dynamic_(DynamicSam::CapacityForBytes(DynamicBytes(options.max_dynamic_bytes))),
      calibrator_(std::make_unique<Calibrator>()) {
  const SelectionOptions& sel = options_.selection;
  if (sel.draft_size < 1 || sel.draft_size > kMaxDraftSize)
    throw Error(ErrorCode::kInvalidArgument,
                "SessionOptions: selection.draft_size must be in 1.." +
                    std::to_string(kMaxDraftSize) + ", got " + std::to_string(sel.draft_size));
  if (sel.max_tree_nodes > kMaxDraftSize)
    throw Error(ErrorCode::kInvalidArgument,
                "SessionOptions: selection.max_tree_nodes must be at most " +
                    std::to_string(kMaxDraftSize) + ", got " +
                    std::to_string(sel.max_tree_nodes));
  // A width of 0 would draft no static node, and a NaN floor would silently
  // drop every static expansion (no comparison with it holds).
  if (sel.max_width < 1 || sel.max_width > kMaxWidth)
    throw Error(ErrorCode::kInvalidArgument,
                "SessionOptions: selection.max_width must be at least 1 and at most " +
                    std::to_string(kMaxWidth) + ", got " + std::to_string(sel.max_width));
  if (!(sel.min_path_probability >= 0.0 && sel.min_path_probability <= 1.0))
    throw Error(ErrorCode::kInvalidArgument,
                "SessionOptions: selection.min_path_probability must be in [0, 1], got " +
                    std::to_string(sel.min_path_probability));
  tree_.Reset(0, DraftSource::kNone);
  node_cells_.reserve(256);
  merged_ = std::make_unique<MergedScratch>();
}

Session::~Session() = default;

void Session::AttachCursor(StaticCursor cursor, std::shared_ptr<const StaticIndex> index,
                           size_t group) {
  CheckVocabulary(*cursor.view());
  if (cache_) cache_cursor_.set_vocab_limit(cursor.view()->vocab_size());  // ids the model knows
  for (size_t p = 1; p <= dynamic_.size(); ++p) cursor.Advance(dynamic_.Token(p));
  group_.push_back(group == SIZE_MAX ? cursors_.size() : group);
  cursors_.push_back(cursor);
  shared_.push_back(std::move(index));
  peeked_.resize(cursors_.size());
  cursor_record_.resize(cursors_.size(), StaticIndex::kNoRecord);
  peeked_record_.resize(cursors_.size(), StaticIndex::kNoRecord);
}

void Session::CheckVocabulary(const format::IndexView& view) const {
  if (!cursors_.empty() && cursors_[0].view()->vocab_size() != view.vocab_size())
    throw Error(ErrorCode::kInvalidArgument,
                "Session::AttachIndex: an index of vocabulary size " +
                    std::to_string(view.vocab_size()) + " beside one of " +
                    std::to_string(cursors_[0].view()->vocab_size()) +
                    " (one session drafts for one vocabulary)");
}

void Session::AdvanceCursor(size_t i, uint32_t token) {
  StaticCursor& c = cursors_[i];
  const StaticIndex* index = shared_[i].get();
  if (index == nullptr || !index->has_records()) {
    c.Advance(token);
    return;
  }
  c.Set(TransferByRecords(*index, c.match(), cursor_record_[i], token, &cursor_record_[i]));
}

void Session::PrefetchPeek(size_t i) const {
  const StaticCursor& c = cursors_[i];
  const StaticIndex* index = shared_[i].get();
  if (index == nullptr || !index->has_records()) {
    c.Prefetch();
    return;
  }
  // What TransferByRecords reads first: the text after a position (its
  // implicit transition) and its suffix link's record; a clone's record.
  const uint64_t v = c.match().state;
  const format::IndexView& view = *c.view();
  if (v == format::kRoot) return;
  if (!view.IsClone(v)) {
    view.PrefetchToken(v + 1);
    index->PrefetchPositionLinkRecord(v);
  } else if (cursor_record_[i] != StaticIndex::kNoRecord) {
    index->PrefetchRecordAt(cursor_record_[i]);
  } else {
    c.Prefetch();
  }
}

void Session::AttachShardSet(std::span<const std::shared_ptr<const StaticIndex>> shards) {
  if (shards.empty())
    throw Error(ErrorCode::kInvalidArgument, "Session::AttachShardSet: no shard");
  for (const auto& shard : shards) {
    if (shard == nullptr)
      throw Error(ErrorCode::kInvalidArgument, "Session::AttachShardSet: null StaticIndex");
    CheckVocabulary(shard->view());  // before anything is attached
  }
  const size_t group = cursors_.size();
  for (const auto& shard : shards) AttachCursor(StaticCursor(shard.get()), shard, group);
}

void Session::AttachIndex(const format::IndexView* view) {
  if (view == nullptr)
    throw Error(ErrorCode::kInvalidArgument, "Session::AttachIndex: null index view");
  AttachCursor(StaticCursor(view), nullptr);
}

void Session::AttachIndex(std::shared_ptr<const format::IndexView> view) {
  if (view == nullptr)
    throw Error(ErrorCode::kInvalidArgument, "Session::AttachIndex: null index view");
  owned_views_.reserve(owned_views_.size() + 1);  // no throw after attaching
  AttachCursor(StaticCursor(view.get()), nullptr);
  owned_views_.push_back(std::move(view));
}

void Session::AttachIndex(std::shared_ptr<const StaticIndex> index) {
  if (index == nullptr)
    throw Error(ErrorCode::kInvalidArgument, "Session::AttachIndex: null StaticIndex");
  AttachCursor(StaticCursor(index.get()), index);
}

void Session::SetFallback(Drafter* fallback) { options_.fallback = fallback; }

void Session::AttachCache(std::shared_ptr<ResponseCache> cache, std::string_view tenant) {
  if (cache_compiled_.index) merged_->cache.Clear();  // its view may be freed (above)
  cache_compiled_ = ResponseCache::Compiled{};
  cache_static_ = StaticCursor();
  if (cache == nullptr) {
    cache_.reset();
    cache_cursor_ = ResponseCache::Cursor();
    return;
  }
  ResponseCache::Cursor cursor = cache->OpenCursor(tenant);
  // Bring it up to date with the window's last tokens (all a cursor keeps).
  const size_t n = dynamic_.size();
  const size_t from = n > ResponseCache::kRematchTokens ? n - ResponseCache::kRematchTokens : 0;
  std::vector<uint32_t> recent;
  for (size_t p = from + 1; p <= n; ++p) recent.push_back(dynamic_.Token(p));
  cursor.Advance(recent);
  if (!cursors_.empty()) cursor.set_vocab_limit(cursors_[0].view()->vocab_size());
  cache_draft_.resize(options_.selection.draft_size);
  cache_ = std::move(cache);
  cache_cursor_ = std::move(cursor);
}

void Session::SyncCompiledCache() {
  ResponseCache::Compiled now = cache_cursor_.compiled();
  if (now.index == cache_compiled_.index) return;
  // The old index may be freed now and the new one take its address: the
  // top-children cache (keyed by view address) forgets both.
  merged_->cache.Clear();
  cache_compiled_ = std::move(now);
  cache_static_ =
      cache_compiled_.index ? StaticCursor(cache_compiled_.index.get()) : StaticCursor();
  if (cache_compiled_.index == nullptr) return;
  // Matched over the window's last tokens, as the cache's own cursor is.
  const size_t n = dynamic_.size();
  const size_t from = n > ResponseCache::kRematchTokens ? n - ResponseCache::kRematchTokens : 0;
  for (size_t p = from + 1; p <= n; ++p) cache_static_.Advance(dynamic_.Token(p));
}

bool Session::CacheRequest() { return CacheRequest(options_.cache_prompts); }

bool Session::CacheRequest(bool include_prompt) {
  if (cache_ == nullptr) return false;
  const uint64_t begin = include_prompt ? 0 : output_begin_;
  const uint64_t first = std::max(begin, dynamic_.window_offset());
  std::vector<uint32_t> text;
  for (uint64_t t = first; t < dynamic_.total_extended(); ++t)
    text.push_back(dynamic_.Token(static_cast<size_t>(t - dynamic_.window_offset() + 1)));
  return cache_->Insert(cache_cursor_.tenant(), text);
}

void Session::Reset() {
  dynamic_.Reset();
  cache_cursor_.Reset();
  cache_static_.Reset();
  output_begin_ = 0;
  for (StaticCursor& c : cursors_) c.Reset();
  std::fill(cursor_record_.begin(), cursor_record_.end(), StaticIndex::kNoRecord);
  if (options_.fallback) options_.fallback->Reset();
  pending_ = false;
  tree_.Reset(0, DraftSource::kNone);
}

void Session::ResetStatistics() {
  stats_ = SessionStatistics{};
  rate_tokens_ = rate_cost_ = 0.0;
  calibrator_->Clear();
}

void Session::PrefillCursor(StaticCursor& c, const StaticIndex* index, uint32_t* record,
                            std::span<const uint32_t> tokens) {
  auto advance = [&](uint32_t t) {
    if (index == nullptr || !index->has_records()) c.Advance(t);
    else c.Set(TransferByRecords(*index, c.match(), *record, t, record));
  };
  if (tokens.size() > kPrefillMatchWindow) {
    const StaticMatch before = c.match();
    const uint32_t before_record = *record;
    c.Reset();
    *record = StaticIndex::kNoRecord;
    for (uint32_t t : tokens.last(kPrefillMatchWindow)) advance(t);
    if (c.match().len < kPrefillMatchWindow) return;  // the whole text's match
    c.Set(before);  // it may be longer than the window: match every token
    *record = before_record;
  }
  for (uint32_t t : tokens) advance(t);
}

void Session::Prefill(std::span<const uint32_t> prompt) {
  const uint64_t t0 = options_.collect_timing ? NowNs() : 0;
  dynamic_.Extend(prompt);
  for (size_t i = 0; i < cursors_.size(); ++i)
    PrefillCursor(cursors_[i], shared_[i].get(), &cursor_record_[i], prompt);
  if (options_.fallback) options_.fallback->Prefill(prompt);
  if (cache_) cache_cursor_.Advance(prompt);
  if (cache_compiled_.index) {
    uint32_t no_record = StaticIndex::kNoRecord;
    PrefillCursor(cache_static_, nullptr, &no_record, prompt);
  }
  output_begin_ = dynamic_.total_extended();
  pending_ = false;
  stats_.prefill_tokens += prompt.size();
  if (options_.collect_timing) stats_.prefill_ns += NowNs() - t0;
}

const DraftTree& Session::Propose(uint32_t start_token) {
  ProposeInto(start_token, std::numeric_limits<size_t>::max(), &tree_);
  return tree_;
}

bool Session::Propose(uint32_t start_token, size_t max_nodes, DraftTree* out) {
  ProposeInto(start_token, std::max<size_t>(max_nodes, 1), &tree_);
  *out = tree_;
  return tree_.size() > 1;
}

void Session::ProposeInto(uint32_t start_token, size_t max_nodes, DraftTree* tree) {
  const uint64_t t0 = options_.collect_timing ? NowNs() : 0;
  const SelectionOptions& sel = options_.selection;
  tree->Reset(start_token, DraftSource::kNone);
  node_cells_.clear();
  linear_static_cursor_ = SIZE_MAX;
  merged_->valid = false;

  size_t best = 0;
  uint64_t best_len = 0;
  SAM_PHASE_START();
  // The dynamic automaton's lookup below probes its hash table first: that
  // line starts loading now, overlapping the static peek.
  dynamic_.PrefetchLookup(start_token);
  for (size_t i = 0; i < cursors_.size(); ++i) {
    if (const StaticIndex* index = shared_[i].get(); index != nullptr && index->has_records()) {
      peeked_[i] = TransferByRecords(*index, cursors_[i].match(), cursor_record_[i], start_token,
                                     &peeked_record_[i]);
    } else {
      peeked_[i] = cursors_[i].Peek(start_token);
      peeked_record_[i] = StaticIndex::kNoRecord;
    }
    if (peeked_[i].len > best_len) {
      best_len = peeked_[i].len;
      best = i;
    }
    // The calibrated policy reads the matched state's count, then its
    // children (the text after it, a hub table or a child record): those
    // first cache misses start now, together, and overlap the dynamic
    // automaton's lookup below rather than following each other. A rare
    // state also backs off to its suffix link (ProposeCalibrated
    // prefetches the link's state once the link is in).
    if (sel.policy == Policy::kCalibrated && peeked_[i].len > 0) {
      const uint64_t v = peeked_[i].state;
      const format::IndexView& view = *cursors_[i].view();
      if (peeked_record_[i] != StaticIndex::kNoRecord) {
        // Its record, known from the peek: its count, children and suffix
        // link's record.
        shared_[i]->PrefetchRecordAt(peeked_record_[i]);
        continue;
      }
      view.PrefetchCount(v);
      view.PrefetchToken(v + 1);
      if (sel.backoff_count > 0) view.PrefetchLink(v);
      if (const StaticIndex* shared = shared_[i].get()) {
        shared->PrefetchHubBit(v);
        shared->PrefetchRecord(v);
        if (shared->has_records() && !view.IsClone(v)) shared->PrefetchPositionLinkRecord(v);
      }
    }
  }
  SAM_PHASE_END(kPeek);
  const DynamicSam::Match dyn = dynamic_.Lookup(start_token);
  if (dyn.len > 0) dynamic_.PrefetchMatch(dyn);
  SAM_PHASE_END(kDynamicLookup);
  num_peeked_ = cursors_.size();
  last_dyn_len_ = dyn.len;
  last_static_len_ = static_cast<uint32_t>(std::min<uint64_t>(best_len, UINT32_MAX));
  // The response cache's match and continuation (at most draft_size - 1
  // tokens), for the policies that use it.
  last_cache_len_ = 0;
  cache_draft_count_ = 0;
  if (cache_ && (sel.policy == Policy::kPaper || sel.policy == Policy::kCalibrated))
    last_cache_len_ = cache_cursor_.Peek(start_token, cache_draft_.size() - 1,
                                         sel.dynamic_link_fallback, cache_draft_.data(),
                                         &cache_draft_count_);
  // The paper rule treats the cache like the dynamic automaton: the longer of
  // the two matches stands for both, and drafts. (kTree ignores the cache: its
  // chains displaced better static trees, -8% MAT on the dev traces.)
  const bool cache_wins = last_cache_len_ > dyn.len;
  const uint32_t own_len = std::max(dyn.len, last_cache_len_);

  auto linear_size = [&](uint32_t len) { return std::min(max_nodes, LinearDraftSize(len, sel)); };
  switch (sel.policy) {
    case Policy::kPaper:
      switch (ChoosePaper(own_len, last_static_len_, options_.fallback != nullptr, sel)) {
        case Choice::kDynamic:
          if (cache_wins) ProposeLinearCache(linear_size(own_len), tree);
          else ProposeLinearDynamic(dyn, linear_size(dyn.len), tree);
          break;
        case Choice::kStatic:
          ProposeLinearStatic(best, peeked_[best], linear_size(last_static_len_), tree);
          break;
        case Choice::kFallback: ProposeFallback(start_token, max_nodes, tree); break;
        case Choice::kNone: break;
      }
      break;
    case Policy::kStaticOnly:
      if (best_len > 0) ProposeLinearStatic(best, peeked_[best], linear_size(last_static_len_), tree);
      break;
    case Policy::kDynamicOnly:
      if (dyn.len > 0) ProposeLinearDynamic(dyn, linear_size(dyn.len), tree);
      break;
    case Policy::kTree: {
      auto tree_size = [&](uint64_t len) {
        return std::min({max_nodes, sel.max_tree_nodes, 1 + size_t{sel.length_per_match} * len});
      };
      if (best_len > dyn.len) {
        StaticTreeOptions opts;
        opts.max_nodes = tree_size(best_len);
        opts.max_width = sel.max_width;
        opts.hubs = shared_[best].get();
        // Shards of best's shard set that match as long: counts summed.
        shard_matches_.clear();
        for (size_t i = best; i < cursors_.size(); ++i)
          if (group_[i] == group_[best] && peeked_[i].len == best_len)
            shard_matches_.push_back(ShardMatch{cursors_[i].view(), peeked_[i].state});
        if (shard_matches_.size() > 1)
          merged_tree_builder_.Build(shard_matches_, opts, tree);
        else
          tree_builder_.Build(*cursors_[best].view(), peeked_[best].state, opts, tree);
        if (tree->size() > 1) {
          tree->source = DraftSource::kStatic;
          tree->match_len = last_static_len_;
        }
      } else if (dyn.len > 0) {
        ProposeLinearDynamic(dyn, tree_size(dyn.len), tree);
      }
      break;
    }
    case Policy::kCalibrated:
      if (cache_ && cache_->compile_options().enabled) SyncCompiledCache();  // else none
      ProposeCalibrated(start_token, dyn, max_nodes, tree);
      break;
  }
  pending_ = true;
  pending_ns_ = options_.collect_timing ? NowNs() - t0 : 0;
}

void Session::ChainLinks(size_t base, DraftTree* tree) {
  // Parents and depths of tokens [base, size) hanging as a chain under node base - 1.
  const size_t size = tree->tokens.size();
  const uint16_t depth = tree->depths[base - 1];
  tree->parents.resize(size);
  tree->depths.resize(size);
  for (size_t k = base; k < size; ++k) {
    tree->parents[k] = static_cast<int32_t>(k - 1);
    tree->depths[k] = static_cast<uint16_t>(depth + 1 + (k - base));
  }
}

void Session::ProposeLinearDynamic(DynamicSam::Match m, size_t size, DraftTree* tree) {
  if (size < 2) return;
  // The continuation is copied straight into the tree (after its root).
  const size_t base = tree->size();
  tree->tokens.resize(base + size - 1);
  const size_t n = dynamic_.Continuation(m, size - 1, options_.selection.dynamic_link_fallback,
                                         tree->tokens.data() + base);
  tree->tokens.resize(base + n);
  if (n == 0) return;  // nothing to draft: the tree stays the start token alone
  ChainLinks(base, tree);
  tree->source = DraftSource::kDynamic;
  tree->match_len = m.len;
}

void Session::ProposeLinearCache(size_t size, DraftTree* tree) {
  const size_t n = std::min(cache_draft_count_, size > 0 ? size - 1 : 0);
  if (n == 0) return;
  const size_t base = tree->size();
  tree->tokens.insert(tree->tokens.end(), cache_draft_.begin(), cache_draft_.begin() + n);
  ChainLinks(base, tree);
  tree->source = DraftSource::kCache;
  tree->match_len = last_cache_len_;
}

void Session::ProposeLinearStatic(size_t index, StaticMatch m, size_t size, DraftTree* tree) {
  if (size < 2) return;
  const size_t base = tree->size();
  tree->tokens.resize(base + size - 1);
  const size_t n =
      StaticContinuation(*cursors_[index].view(), m.state, size - 1, tree->tokens.data() + base);
  tree->tokens.resize(base + n);
  if (n == 0) return;
  ChainLinks(base, tree);
  tree->source = DraftSource::kStatic;
  tree->match_len = static_cast<uint32_t>(std::min<uint64_t>(m.len, UINT32_MAX));
  if (tree == &tree_) linear_static_cursor_ = index;
}

void Session::ProposeFallback(uint32_t start_token, size_t max_nodes, DraftTree* tree) {
  const size_t size = std::min(max_nodes, options_.selection.draft_size);
  if (!options_.fallback->Propose(start_token, size, tree) || tree->size() <= 1) {
    tree->Reset(start_token, DraftSource::kNone);
    return;
  }
  if (tree->source == DraftSource::kNone) tree->source = DraftSource::kOther;
}

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
//    continuation and the fallback drafter's tree (OfferChain / OfferTree
//    below; another source, with its own cells and slot, goes there too);
//  - the static indexes are lazy: a ranked node's static children (the
//    max_width heaviest transitions of its automaton state) are looked up
//    only when they can still rank, i.e. when the node's path probability
//    times an upper bound on any static child's estimate
//    (Calibrator::StaticBound) comes up in the best-first queue, or when one
//    of its children is about to be ranked. Lookups are the cost of a step
//    (cache misses in the index); most leaves of the draft never need theirs.
// A node's backoff children (SelectionOptions::backoff_count) are a second
// lazy expansion of the same kind, with its own bound (Calibrator::
// BackoffBound), after the node's own static children; before a child ranks,
// its parent's backoff children are offered too if they may give it a state.
// Without max_static_lookups the ranking is exact: the same nodes in the same
// order as ranking the whole (unbounded) candidate trie, which
// tests/runtime/calibrated_test.cc checks against an eager construction.
// max_static_lookups (default 8) stops the lookups of branching states after
// that many in a step, which bounds the step's cache misses.
void Session::ProposeCalibrated(uint32_t start_token, DynamicSam::Match dyn, size_t max_nodes,
                                DraftTree* tree) {
  const SelectionOptions& sel = options_.selection;
  const size_t budget = std::min(max_nodes, sel.draft_size);
  if (budget < 2) return;
  MergedScratch& m = *merged_;
  const Calibrator& cal = *calibrator_;
  // The response cache's compiled index: one more static unit (the last) for
  // this proposal only, with the cells of family 1 and the cache's slot.
  const bool cache_unit = cache_compiled_.index != nullptr;
  if (cache_unit) {
    cursors_.reserve(cursors_.size() + 1);  // the pushes below cannot throw
    shared_.reserve(shared_.size() + 1);
    group_.reserve(group_.size() + 1);
    peeked_.reserve(peeked_.size() + 1);
    group_.push_back(cursors_.size());
    cursors_.push_back(cache_static_);
    shared_.push_back(cache_compiled_.index);
    peeked_.push_back(cache_static_.Peek(start_token));
  }
  struct RemoveCacheUnit {
    Session* s;
    bool on;
    ~RemoveCacheUnit() {
      if (!on) return;
      s->cursors_.pop_back();
      s->shared_.pop_back();
      s->group_.pop_back();
      s->peeked_.pop_back();
    }
  } remove_cache_unit{this, cache_unit};
  m.Reset(start_token, cursors_.size());
  m.min_key = sel.min_path_probability;
  // The static sources as units: a shard set is one index over the union of
  // its documents, matching as long as its longest shard; only the shards
  // that match that long (tied) have the match's string, so only they hold
  // the root's state (and their counts add up to its count).
  m.unit_begin.clear();
  m.unit_len.clear();
  for (size_t i = 0; i < cursors_.size(); ++i) {
    if (i == 0 || group_[i] != group_[i - 1]) {
      m.unit_begin.push_back(i);
      m.unit_len.push_back(0);
    }
    m.unit_len.back() = std::max(m.unit_len.back(), peeked_[i].len);
  }
  m.unit_begin.push_back(cursors_.size());
  // The calibration family of unit u's static children, the slot of their
  // cells and the source they count for.
  const size_t num_units = m.unit_begin.size() - 1;  // loops read it once, not the vector
  const size_t cache_unit_index = cache_unit ? num_units - 1 : SIZE_MAX;
  auto family_of = [cache_unit_index](size_t u) -> size_t {
    return u == cache_unit_index ? 1 : 0;
  };
  // Offers `child` of unit u, which occurs `count` times under a state (or a
  // shard set's states) of `total` occurrences and match length `len`, with
  // the cells of u's family, in its slot, for its source. A child occurs at
  // most as often as its parent; clamping keeps the ratios of a corrupt index
  // in [0, 1].
  // What the children of one lookup share (static_offers), then each child
  // (offer_static).
  struct StaticOffers {
    uint64_t total;
    int base;  // Calibrator::StaticCellBase
    int slot;
    uint8_t source;
  };
  auto static_offers = [&](uint64_t total, uint64_t len, bool backoff, size_t u) {
    const size_t family = family_of(u);
    return StaticOffers{total, cal.StaticCellBase(total, len, backoff, family),
                        family == 0 ? 1 : 3, family == 0 ? kFromStatic : kFromCache};
  };
  auto static_cell = [](uint64_t count, const StaticOffers& o) {
    const double ratio =
        count < o.total ? static_cast<double>(count) / static_cast<double>(o.total) : 1.0;
    return o.base + Calibrator::RatioOffset(ratio);
  };
  auto offer_static = [&](int32_t child, uint64_t count, const StaticOffers& o) {
    m.Offer(cal, child, o.slot, static_cell(count, o), o.source);
  };
  // The child of `node` with `token` (found among its children from
  // `first` on, MergedScratch::FindAmong, or added), offered as above;
  // offer_static_child looks among all of them.
  auto offer_static_among = [&](int32_t node, int32_t first, uint32_t token, uint64_t count,
                                const StaticOffers& o) {
    return m.OfferChildAmong(cal, node, first, token, o.slot, static_cell(count, o), o.source);
  };
  auto offer_static_child = [&](int32_t node, uint32_t token, uint64_t count,
                                const StaticOffers& o) {
    return offer_static_among(node, m.nodes[node].first_child, token, count, o);
  };
  for (size_t u = 0; u < num_units; ++u) {
    if (m.unit_len[u] == 0) continue;
    for (size_t i = m.unit_begin[u]; i < m.unit_begin[u + 1]; ++i) {
      if (peeked_[i].len != m.unit_len[u]) continue;
      m.State(0, i) = peeked_[i].state;
      m.StateLen(0, i) = static_cast<uint32_t>(peeked_[i].len);
      const uint32_t record =
          i < peeked_record_.size() ? peeked_record_[i] : StaticIndex::kNoRecord;
      if (record != StaticIndex::kNoRecord) {  // its count is in its record (prefetched)
        m.StateCount(0, i) = shared_[i]->Head(record).count;
        m.states[i].record = record;  // node 0's
      } else {
        m.StateCount(0, i) = cursors_[i].view()->Count(peeked_[i].state);
      }
    }
  }

  // ---- Eager sources.
  // A draft tree rooted at the start token; cell_of(k) for its node k.
  auto offer_tree = [&](const DraftTree& t, int slot, uint8_t source, auto&& cell_of) {
    m.tree_index.assign(t.size(), 0);
    for (size_t k = 1; k < t.size(); ++k) {
      m.tree_index[k] = m.OfferChild(cal, m.tree_index[t.parents[k]], t.tokens[k], slot,
                                     cell_of(k), source);
    }
  };
  // The dynamic continuation (with the suffix-link fallback): a chain, offered
  // one node at a time as its nodes rank (rank() below), which is the same as
  // offering it whole now but creates only the nodes that can rank.
  size_t dyn_chain = 0;
  if (dyn.len > 0) {
    chain_.resize(budget - 1);
    dyn_chain = dynamic_.Continuation(dyn, budget - 1, sel.dynamic_link_fallback, chain_.data());
  }
  int32_t dyn_tip = 0;  // the chain node whose child is offered next
  // The fallback drafter's tree, on the same scale (cells: depth and sibling
  // rank; or depth and the drafter's own probability q(node | parent) when it
  // gives one, as a draft model does).
  DraftSource fallback_source = DraftSource::kOther;
  if (options_.fallback != nullptr &&
      options_.fallback->Propose(start_token, budget, &scratch_tree_)) {
    if (scratch_tree_.source != DraftSource::kNone) fallback_source = scratch_tree_.source;
    const bool has_q = scratch_tree_.draft_probs.size() == scratch_tree_.size();
    offer_tree(scratch_tree_, 2, kFromFallback, [&](size_t k) {
      if (has_q) return cal.ModelCell(scratch_tree_.depths[k], scratch_tree_.draft_probs[k]);
      size_t rank = 0;
      for (size_t j = 1; j < k; ++j) rank += scratch_tree_.parents[j] == scratch_tree_.parents[k];
      return cal.FallbackCell(scratch_tree_.depths[k], rank);
    });
  }
  // The response cache's continuation: a chain with its own cells (slot 3).
  if (last_cache_len_ > 0) {
    int32_t node = 0;
    for (size_t j = 0; j < std::min(cache_draft_count_, budget - 1); ++j) {
      node = m.OfferChild(cal, node, cache_draft_[j], 3, cal.CacheCell(last_cache_len_, j + 1),
                          kFromCache);
    }
  }

  // The root's backoff (a state that occurs fewer than backoff_count times)
  // reads its suffix link's length, count and children: their loads start
  // now that the link, prefetched at the peek, has had the dynamic lookup's
  // time to arrive, so that they overlap the root's own expansion.
  for (size_t i = 0; i < cursors_.size(); ++i) {
    const MergedScratch::IndexState& r = m.states[i];  // node 0's, index i
    if (r.state == format::kNoState || r.count == 0 || r.count >= sel.backoff_count) continue;
    const format::IndexView& view = *cursors_[i].view();
    if (const StaticIndex* shared = shared_[i].get(); shared != nullptr && shared->has_records()) {
      // With child records the link's record holds all of it: found through
      // the root's record (known from the peek) or a position's link record.
      if (r.record != StaticIndex::kNoRecord) {
        shared->PrefetchRecordAt(shared->Head(r.record).link_record);
        continue;
      }
      if (!view.IsClone(r.state)) {
        shared->PrefetchRecordAt(shared->PositionLinkRecord(r.state));
        continue;
      }
    }
    const uint64_t w = view.Link(r.state);
    if (w == format::kRoot) continue;
    view.PrefetchLink(w);  // its link, and a clone's length
    view.PrefetchCount(w);
    if (w < view.num_tokens()) view.PrefetchToken(w + 1);
    if (const StaticIndex* shared = shared_[i].get()) {
      shared->PrefetchHubBit(w);
      shared->PrefetchRecord(w);
    }
  }

  // ---- The lazy static source.
  // The max_width heaviest children of state v of index i, which occurs
  // `count` times (count descending, then token ascending), as
  // StaticTreeBuilder expands them.
  auto top_children = [&](size_t i, uint64_t v,
                          uint64_t count) -> std::span<const StaticIndex::Child> {
    const format::IndexView& view = *cursors_[i].view();
    const size_t width = sel.max_width;
    if (width == 0) return {};
    // A state that occurs once continues as its one occurrence does: one
    // child, the next text position (the implicit transition), which occurs
    // once too; no edge lookup, one read of the text.
    if (!view.IsClone(v) && count == 1) {
      if (v >= view.num_tokens()) return {};
      const uint32_t token = view.Token(v + 1);
      if (token >= view.separator()) return {};
      m.children.assign(1, StaticIndex::Child{token, v + 1, 1});
      return m.children;
    }
    const StaticIndex* hubs = shared_[i].get();
    std::span<const StaticIndex::Child> top;
    if (hubs != nullptr && width <= hubs->options().top_k) {
      // The state's child record (Options::record_min_count), else a hub's
      // table (a hub's record holds its table's children). The record
      // first: its offset was prefetched when the state was offered, the
      // hub bit was not.
      top = hubs->RecordChildren(v, &m.children);
      if (!top.empty()) return top.first(std::min(width, top.size()));
      if (hubs->TopChildren(v, &top)) return top.first(std::min(width, top.size()));
    }
    if (width <= TopChildrenCache::kChildren) {
      const std::span<const StaticIndex::Child> cached = m.cache.Get(view, v);
      return cached.first(std::min(width, cached.size()));
    }
    const auto [lo, hi] = view.EdgeRange(v);
    m.children.resize(width);
    const uint32_t n =
        internal::TopChildrenOf(view, v, lo, hi, static_cast<uint32_t>(width), m.children.data());
    return std::span<const StaticIndex::Child>(m.children.data(), n);
  };
  // The max_width heaviest children of a node over the shards of a unit that
  // have a state there (m.shard_states, two or more), their counts summed by
  // token, in the same order: what one index over the shards' documents
  // gives. Into m.merged, with each child's target in each shard (kNoState:
  // none) in m.targets / m.target_counts.
  //
  // A threshold algorithm over each shard's own heaviest children (hub
  // table, or the long cache; a list of 32, or fewer when they are all):
  // every token in some list whose upper bound can reach the top gets its
  // exact sum (a transition lookup in the incomplete shards whose list
  // lacks it); a token in no list sums to at most the incomplete lists'
  // last counts (the threshold). When the max_width-th best candidate
  // exceeds it (or equals it with a small enough token), the candidates'
  // top is the top; otherwise (ties, wider trees) every transition of the
  // shards' states is enumerated, as MergedStaticTreeBuilder does. Results
  // are cached by shard states (FindMerged).
  auto merged_children = [&]() {
    const size_t width = sel.max_width;
    const size_t n = m.shard_states.size();
    m.merged.clear();
    m.targets.clear();
    m.target_counts.clear();
    if (width == 0 || m.FindMerged(width)) return;
    auto new_row = [&](uint32_t token) {
      m.merged.push_back({token, 0, static_cast<uint32_t>(m.merged.size())});
      m.targets.resize(m.targets.size() + n, format::kNoState);
      m.target_counts.resize(m.target_counts.size() + n, 0);
    };
    auto heavier = [](const MergedScratch::MergedChild& a, const MergedScratch::MergedChild& b) {
      return a.count != b.count ? a.count > b.count : a.token < b.token;
    };
    // From the shards' lists of their heaviest children: the hub table's
    // (top_k: kShardTopK for a shard set's shards) or the long cache's
    // (kLongChildren). False when they cannot decide.
    auto from_lists = [&]() {
      m.merged.clear();
      m.targets.clear();
      m.target_counts.clear();
      m.lists.clear();
      uint64_t threshold = 0;   // a token in no list sums to at most this
      uint32_t last_token = 0;  // ... and is above this when it reaches it
      for (MergedScratch::ShardState& e : m.shard_states) {
        const format::IndexView& view = *cursors_[e.cursor].view();
        e.list_begin = static_cast<uint32_t>(m.lists.size());
        std::span<const StaticIndex::Child> top;
        const StaticIndex* hubs = shared_[e.cursor].get();
        if (!view.IsClone(e.state) && e.count == 1) {
          e.complete = true;
          if (e.state < view.num_tokens() && view.Token(e.state + 1) < view.separator())
            m.lists.push_back({view.Token(e.state + 1), e.state + 1, 1});
        } else {
          if (hubs != nullptr && hubs->TopChildren(e.state, &top)) {
            e.complete = top.size() < hubs->options().top_k;  // a hub's list: never scanned
          } else {
            // Its child record when it has one that holds the long list (a
            // shard's top_k is kShardTopK): the list's children without the
            // scan; else the long list.
            if (hubs != nullptr && hubs->options().top_k >= MergedScratch::kLongChildren) {
              top = hubs->RecordChildren(e.state, &m.record_children);
              top = top.first(std::min(top.size(), MergedScratch::kLongChildren));
            }
            if (top.empty()) top = m.LongList(view, e.state);
            e.complete = top.size() < MergedScratch::kLongChildren;
          }
          m.lists.insert(m.lists.end(), top.begin(), top.end());  // copied: slots get reused
        }
        e.list_size = static_cast<uint32_t>(m.lists.size() - e.list_begin);
        if (!e.complete && e.list_size > 0) {
          threshold += m.lists.back().count;
          last_token = std::max(last_token, m.lists.back().token);
        }
      }
      // Candidates: the tokens of every list, with their sums over the
      // lists that hold them (a lower bound) and, adding the last count of
      // the other incomplete lists, an upper bound.
      m.gathered.clear();
      for (size_t e = 0; e < n; ++e) {
        const MergedScratch::ShardState& s = m.shard_states[e];
        for (uint32_t k = s.list_begin; k < s.list_begin + s.list_size; ++k)
          m.gathered.push_back({m.lists[k].token, static_cast<uint32_t>(e), m.lists[k].target,
                                m.lists[k].count});
      }
      std::sort(m.gathered.begin(), m.gathered.end(),
                [](const MergedScratch::Gathered& a, const MergedScratch::Gathered& b) {
                  return a.token != b.token ? a.token < b.token : a.shard < b.shard;
                });
      m.upper.clear();
      for (size_t k = 0; k < m.gathered.size(); ++k) {
        const MergedScratch::Gathered& g = m.gathered[k];
        if (k == 0 || g.token != m.gathered[k - 1].token) {
          new_row(g.token);
          m.upper.push_back(threshold);
        }
        const MergedScratch::ShardState& s = m.shard_states[g.shard];
        const uint32_t row = m.merged.back().row;
        m.targets[row * n + g.shard] = g.target;
        m.target_counts[row * n + g.shard] = g.count;
        m.merged.back().count += g.count;
        if (!s.complete) m.upper[row] -= m.lists[s.list_begin + s.list_size - 1].count;
        m.upper[row] += g.count;
      }
      // The width-th largest lower bound: a candidate whose upper bound is
      // below it cannot be among the heaviest; the others get exact sums
      // (a transition lookup in each incomplete shard whose list lacks them).
      uint64_t cut = 0;
      if (m.merged.size() >= width) {
        m.lower.clear();
        for (const MergedScratch::MergedChild& c : m.merged) m.lower.push_back(c.count);
        std::nth_element(m.lower.begin(), m.lower.begin() + (width - 1), m.lower.end(),
                         std::greater<uint64_t>());
        cut = m.lower[width - 1];
      }
      for (MergedScratch::MergedChild& c : m.merged) {
        if (m.upper[c.row] < cut || m.upper[c.row] == c.count) continue;
        for (size_t e = 0; e < n; ++e) {
          const MergedScratch::ShardState& s = m.shard_states[e];
          if (s.complete || m.targets[c.row * n + e] != format::kNoState) continue;
          const format::IndexView& view = *cursors_[s.cursor].view();
          const StaticIndex* hubs = shared_[s.cursor].get();
          const uint64_t t = hubs ? hubs->Next(s.state, c.token) : view.Next(s.state, c.token);
          if (t == format::kNoState) continue;
          m.targets[c.row * n + e] = t;
          m.target_counts[c.row * n + e] = view.Count(t);
          c.count += view.Count(t);
        }
      }
      std::sort(m.merged.begin(), m.merged.end(), heavier);
      // A token in no list ranks after the width-th candidate when that one
      // sums to more than the threshold, or to as much with a token no
      // greater than last_token (such a token sums to the threshold only by
      // equalling every incomplete list's last count, and then comes after
      // its last token).
      if (threshold == 0 ||
          (m.merged.size() >= width &&
           (m.merged[width - 1].count > threshold ||
            (m.merged[width - 1].count == threshold && m.merged[width - 1].token <= last_token)))) {
        if (m.merged.size() > width) m.merged.resize(width);
        return true;
      }
      return false;
    };
    if (from_lists()) {
      m.StoreMerged(width);
      return;
    }
    m.merged.clear();
    m.targets.clear();
    m.target_counts.clear();
    // Every transition of every shard state.
    m.gathered.clear();
    for (size_t e = 0; e < n; ++e) {
      const format::IndexView& view = *cursors_[m.shard_states[e].cursor].view();
      view.ForEachChild(m.shard_states[e].state, [&](uint32_t token, uint64_t target) {
        m.gathered.push_back({token, static_cast<uint32_t>(e), target, view.Count(target)});
      });
    }
    std::sort(m.gathered.begin(), m.gathered.end(),
              [](const MergedScratch::Gathered& a, const MergedScratch::Gathered& b) {
                return a.token != b.token ? a.token < b.token : a.shard < b.shard;
              });
    for (size_t k = 0; k < m.gathered.size(); ++k) {
      const MergedScratch::Gathered& g = m.gathered[k];
      if (k == 0 || g.token != m.gathered[k - 1].token) new_row(g.token);
      MergedScratch::MergedChild& c = m.merged.back();
      m.targets[c.row * n + g.shard] = g.target;
      m.target_counts[c.row * n + g.shard] = g.count;
      c.count += g.count;
    }
    const size_t keep = std::min(width, m.merged.size());
    std::partial_sort(m.merged.begin(), m.merged.begin() + keep, m.merged.end(), heavier);
    m.merged.resize(keep);
    m.StoreMerged(width);
  };
  // Lookups of states with more than one occurrence (a unit's summed count)
  // still allowed in this step (SIZE_MAX: no limit, never spent).
  size_t lookups_left = sel.max_static_lookups != 0 ? sel.max_static_lookups : SIZE_MAX;
  // Past max_static_lookups a branching state offers no children (expand)
  // and no backoff children (offer_backoff): such expansions are not queued
  // (the same ranking, without their pushes and pops), and nothing is
  // prefetched for lookups that will not be made.
  auto lookups_spent = [&] { return lookups_left == 0; };
  // A static child (state `target` of index i, `count` occurrences) was just
  // offered: the first of its own lookup's dependent cache misses (or, for a
  // state that occurs once, the text it continues with) starts now,
  // overlapping the rest of the step.
  auto prefetch_child = [&](size_t i, uint64_t target, uint64_t count,
                            uint32_t record = StaticIndex::kNoRecord) {
    const format::IndexView& view = *cursors_[i].view();
    if (count <= 1) view.PrefetchToken(target + 1);
    if (lookups_spent()) return;  // neither its lookup nor its backoff will be made
    const StaticIndex* shared = shared_[i].get();
    if (record != StaticIndex::kNoRecord) {
      // Its record, known from its parent's: its children, and the head
      // that leads to its suffix link's record if it backs off.
      shared->PrefetchRecordAt(record);
      return;
    }
    if (count > 1) {
      view.PrefetchEdgeRange(target);
      if (shared != nullptr && shared->has_records()) shared->PrefetchRecord(target);
    }
    // A rare string backs off to its suffix link's state if it ranks:
    // its link (and a clone's length) start loading too, or with records a
    // position's suffix link's record.
    if (count < sel.backoff_count) {
      if (shared != nullptr && shared->has_records() && !view.IsClone(target))
        shared->PrefetchPositionLinkRecord(target);
      else
        view.PrefetchLink(target);
    }
  };
  // Child records followed from record to record (one index): a node's
  // record, its own (known from its parent's) or looked up by its state
  // (kNoRecord: none, or records unusable at this width).
  const StaticIndex* records =
      cursors_.size() == 1 && shared_[0] != nullptr && shared_[0]->has_records() &&
              sel.max_width <= shared_[0]->options().top_k
          ? shared_[0].get()
          : nullptr;
  auto record_of = [&](const MergedScratch::IndexState& s) {
    return s.record != StaticIndex::kNoRecord ? s.record : records->RecordOf(s.state);
  };
  // The record of the suffix link of a node's state, kNoRecord when it has
  // none or is not known without reading the link (a rare clone's).
  auto link_record_of = [&](const MergedScratch::IndexState& s) {
    if (!cursors_[0].view()->IsClone(s.state)) return records->PositionLinkRecord(s.state);
    const uint32_t r = record_of(s);
    return r != StaticIndex::kNoRecord ? records->Head(r).link_record : StaticIndex::kNoRecord;
  };
  // The usual deployment, one static index and nothing else: expand below
  // without its unit and shard loops (the same offers, in the same order).
  const bool one_index = cursors_.size() == 1;
  // Subtree records (StaticIndex::Options::subtree_nodes): a node offered
  // by a record's children or subtree entries may find its own children
  // among that record's subtree entries.
  const bool subtrees = records != nullptr && records->options().subtree_nodes > 0;
  // Its children among the subtree entries of the record that offered it
  // (free: no lookup of its own record); false when there are none.
  auto subtree_children = [&](const MergedScratch::IndexState& s) __attribute__((noinline)) {
    const StaticIndex::RecordHead h = records->Head(s.sub);
    const StaticIndex::RecordEntry* de = records->Descendants(s.sub, h);
    for (uint32_t j = 0; j < h.descendants(); ++j)
      if (StaticIndex::DescendantParent(de[j]) == s.place) return true;
    return false;
  };
  auto offer_subtree = [&](int32_t node, const MergedScratch::IndexState& s)
                           __attribute__((noinline)) {
    const StaticIndex::RecordHead h = records->Head(s.sub);
    const uint32_t d = h.descendants();
    if (d == 0) return false;
    const StaticIndex::RecordEntry* de = records->Descendants(s.sub, h);
    const StaticOffers offers = static_offers(s.count, s.len, false, 0);
    const int32_t first = m.nodes[node].first_child;
    bool any = false;
    for (uint32_t j = 0; j < d; ++j) {
      if (StaticIndex::DescendantParent(de[j]) != s.place) continue;
      any = true;
      const int32_t child = offer_static_among(node, first, StaticIndex::DescendantToken(de[j]),
                                               de[j].count, offers);
      m.states[child] = MergedScratch::IndexState{de[j].target, de[j].count, s.len + 1u,
                                                  de[j].record, s.sub, h.size() + j};
      prefetch_child(0, de[j].target, de[j].count, de[j].record_of_target());
    }
    return any;
  };
  auto expand_one = [&](int32_t node) {
    m.nodes[node].expanded = true;
    if (m.nodes[node].depth >= kMaxStaticDepth) return;
    const MergedScratch::IndexState s = m.states[node];  // num_indexes == 1
    if (s.state == format::kNoState || s.count == 0) return;
    if (subtrees && s.sub != StaticIndex::kNoRecord && s.count > 1 && offer_subtree(node, s))
      return;
    if (s.count > 1) {
      if (lookups_left == 0) return;
      --lookups_left;
    }
    const format::IndexView& view = *cursors_[0].view();
    const StaticOffers offers = static_offers(s.count, s.len, false, 0);
    if (s.count == 1 && !view.IsClone(s.state)) {
      // top_children's first case, inline: the text after the one occurrence
      // (known from the parent's record when it came from one).
      if (s.state >= view.num_tokens()) return;
      const uint32_t token = s.record != StaticIndex::kNoRecord ? s.record : view.Token(s.state + 1);
      if (token >= view.separator()) return;
      const int32_t child = offer_static_child(node, token, 1, offers);
      m.states[child] = MergedScratch::IndexState{s.state + 1, 1, s.len + 1u};
      prefetch_child(0, s.state + 1, 1);
      // Its backoff, if it ranks, starts from its suffix link's record.
      if (records != nullptr && s.count < sel.backoff_count && !lookups_spent())
        records->PrefetchRecordAt(records->PositionLinkRecord(s.state));
      return;
    }
    if (const uint32_t r = records != nullptr ? record_of(s) : StaticIndex::kNoRecord;
        r != StaticIndex::kNoRecord) {
      // Its record's children (top_children's record case), each with its
      // own record; a rare state's suffix link's record starts loading for
      // its backoff.
      const StaticIndex::RecordHead head = records->Head(r);
      if (s.count < sel.backoff_count && !lookups_spent()) records->PrefetchRecordAt(head.link_record);
      const StaticIndex::RecordEntry* e = records->Entries(r);
      const uint32_t k = std::min<uint32_t>(head.size(), static_cast<uint32_t>(sel.max_width));
      // One state's children have distinct tokens: each is compared with
      // the node's earlier children only.
      const int32_t first = m.nodes[node].first_child;
      for (uint32_t j = 0; j < k; ++j) {
        const int32_t child = offer_static_among(node, first, e[j].token, e[j].count, offers);
        m.states[child] =
            MergedScratch::IndexState{e[j].target, e[j].count, s.len + 1u, e[j].record, r, j};
        prefetch_child(0, e[j].target, e[j].count, e[j].record_of_target());
      }
      return;
    }
    const int32_t first = m.nodes[node].first_child;
    for (const StaticIndex::Child& c : top_children(0, s.state, s.count)) {
      const int32_t child = offer_static_among(node, first, c.token, c.count, offers);
      m.states[child] = MergedScratch::IndexState{c.target, c.count, s.len + 1u};
      prefetch_child(0, c.target, c.count);
    }
  };
  // Offers the static children of `node` from every unit with a state there
  // (a shard set's as one index's: counts summed over its shards).
  auto expand = [&](int32_t node) {
    if (one_index) return expand_one(node);
    m.nodes[node].expanded = true;
    const uint16_t depth = m.nodes[node].depth;
    if (depth >= kMaxStaticDepth) return;
    for (size_t u = 0; u < num_units; ++u) {
      // The shards with a state here (usually one: an index of its own, or
      // the one shard that has the node's string).
      uint64_t total = 0;
      size_t with_state = 0, only = 0;
      for (size_t i = m.unit_begin[u]; i < m.unit_begin[u + 1]; ++i) {
        const uint64_t count = m.StateCount(node, i);
        if (m.State(node, i) == format::kNoState || count == 0) continue;
        total += count;
        ++with_state;
        only = i;
      }
      if (with_state == 0) continue;
      // Past max_static_lookups, a branching state offers no children: the
      // bound on a step's cache misses (states that occur once are free).
      if (total > 1) {
        if (lookups_left == 0) continue;
        --lookups_left;
      }
      // The match length of the node in this unit (its shards with a state
      // all have it; below a backoff child, a shorter one).
      const uint64_t match_len = m.StateLen(node, only);
      const StaticOffers offers = static_offers(total, match_len, false, u);
      auto offer = [&](uint32_t token, uint64_t count) {
        return offer_static_child(node, token, count, offers);
      };
      auto set_state = [&](int32_t child, size_t i, uint64_t target, uint64_t count) {
        m.State(child, i) = target;
        m.StateCount(child, i) = count;
        m.StateLen(child, i) = static_cast<uint32_t>(match_len + 1);
        prefetch_child(i, target, count);
      };
      if (with_state == 1) {
        for (const StaticIndex::Child& c : top_children(only, m.State(node, only), total))
          set_state(offer(c.token, c.count), only, c.target, c.count);
        continue;
      }
      m.shard_states.clear();
      for (size_t i = m.unit_begin[u]; i < m.unit_begin[u + 1]; ++i)
        if (m.State(node, i) != format::kNoState && m.StateCount(node, i) > 0)
          m.shard_states.push_back({i, m.State(node, i), m.StateCount(node, i), 0, 0, false});
      merged_children();
      const size_t n = m.shard_states.size();
      for (const MergedScratch::MergedChild& c : m.merged) {
        const int32_t child = offer(c.token, c.count);
        for (size_t e = 0; e < n; ++e)
          if (m.targets[c.row * n + e] != format::kNoState)
            set_state(child, m.shard_states[e].cursor, m.targets[c.row * n + e],
                      m.target_counts[c.row * n + e]);
      }
    }
  };
  // Whether state v of index i (with `total` occurrences) offers backoff children.
  // Backoff by unit: a unit (an index, or a shard set as one index) backs
  // off at `node` when the node's string occurs there fewer than
  // backoff_count times (its shards' counts summed).
  auto unit_count = [&](int32_t node, size_t u, uint64_t* len) {
    uint64_t total = 0;
    for (size_t i = m.unit_begin[u]; i < m.unit_begin[u + 1]; ++i) {
      if (m.State(node, i) == format::kNoState) continue;
      total += m.StateCount(node, i);
      *len = m.StateLen(node, i);
    }
    return total;
  };
  auto unit_has_state = [&](int32_t node, size_t u) {
    for (size_t i = m.unit_begin[u]; i < m.unit_begin[u + 1]; ++i)
      if (m.State(node, i) != format::kNoState) return true;
    return false;
  };
  auto unit_backs_off = [&](int32_t node, size_t u) {
    uint64_t len = 0;
    const uint64_t total = unit_count(node, u, &len);
    return total > 0 && total < sel.backoff_count;
  };
  // The longest suffix of `node`'s string that occurs in shard i (its state
  // and length): the node's own state there, or, where the string does not
  // occur, one transfer from its parent's, memoised. (For a backoff child,
  // whose string is u*c rather than sc, the transfer from the parent gives
  // the same where u*c does not occur: a suffix of sc longer than u*c shares
  // s's occurrences, so it occurs only where sc, hence u*c, does.)
  // (Recursive through `self`: no std::function, whose construction may
  // allocate at every step.)
  auto match_rec = [&](auto& self, int32_t node, size_t i) -> StaticMatch {
    if (m.State(node, i) != format::kNoState)
      return StaticMatch{m.State(node, i), m.StateLen(node, i)};
    if (node == 0) return peeked_[i];
    m.GrowMatches();
    const size_t at = static_cast<size_t>(node) * m.num_indexes + i;
    if (m.match_known[at]) return m.matches[at];
    const StaticMatch from = self(self, m.nodes[node].parent, i);
    const StaticMatch r =
        Transfer(*cursors_[i].view(), from, m.nodes[node].token, shared_[i].get());
    m.matches[at] = r;
    m.match_known[at] = 1;
    return r;
  };
  auto match_in = [&](int32_t node, size_t i) { return match_rec(match_rec, node, i); };
  // SelectionOptions::backoff_count: the backoff children of `node` in unit
  // u (Calibrator: their own cells): the heaviest children of the node's
  // shorter context u* that the node's own heaviest children do not include.
  // The node's string s occurs fewer than backoff_count times in the unit;
  // u* is the longest proper suffix of s that occurs more often than s (in
  // one index, the suffix link of s's state). Over a shard set it is the
  // union's: in a shard that has s, that shard's suffix link; in one that
  // does not, the longest suffix of s occurring there at all; the children
  // of u* are summed over the shards where it occurs. A child's state is
  // u*'s transition, a shorter match than the longest one (Commit does not
  // move cursors there). Counts as a lookup.
  auto offer_backoff = [&](int32_t node, size_t u) {
    // A shorter context occurs more often than s (its end positions are a
    // strict superset): a branching state, so past the limit nothing is read.
    if (lookups_spent()) return;
    uint64_t slen = 0;
    unit_count(node, u, &slen);
    uint64_t lstar = 0;
    for (size_t i = m.unit_begin[u]; i < m.unit_begin[u + 1]; ++i) {
      const format::IndexView& view = *cursors_[i].view();
      const uint64_t v = m.State(node, i);
      const uint64_t l = v != format::kNoState ? view.Len(view.Link(v)) : match_in(node, i).len;
      lstar = std::max(lstar, l);
    }
    if (lstar == 0) return;  // the empty context
    m.shard_states.clear();
    for (size_t i = m.unit_begin[u]; i < m.unit_begin[u + 1]; ++i) {
      const format::IndexView& view = *cursors_[i].view();
      uint64_t w = format::kNoState;
      if (const uint64_t v = m.State(node, i); v != format::kNoState) {
        // s occurs here, so does u*: in the suffix link's state when that is
        // u*'s length (the shard that set it; one index), else in s's own
        // state (a longer suffix than the link's shares s's occurrences).
        w = view.Len(view.Link(v)) == lstar ? view.Link(v) : v;
      } else {
        const StaticMatch f = match_in(node, i);
        if (f.len == lstar) w = f.state;
      }
      if (w == format::kNoState || w == format::kRoot) continue;
      m.shard_states.push_back({i, w, view.Count(w), 0, 0, false});
    }
    uint64_t total = 0;
    for (const MergedScratch::ShardState& e : m.shard_states) total += e.count;
    if (total == 0) return;
    --lookups_left;
    if (lstar >= slen) return;  // corrupt: a link must shorten the match
    // The children (in m.merged, heaviest first), with their target and count
    // in every shard state (m.targets / m.target_counts, row `row`).
    const size_t n = m.shard_states.size();
    if (n == 1) {
      const MergedScratch::ShardState e = m.shard_states[0];
      m.merged.clear();
      m.targets.clear();
      m.target_counts.clear();
      for (const StaticIndex::Child& c : top_children(e.cursor, e.state, e.count)) {
        m.merged.push_back({c.token, c.count, static_cast<uint32_t>(m.merged.size())});
        m.targets.push_back(c.target);
        m.target_counts.push_back(c.count);
      }
    } else {
      merged_children();
    }
    const StaticOffers offers = static_offers(total, lstar, true, u);
    for (const MergedScratch::MergedChild& c : m.merged) {
      const int32_t child = m.Child(node, c.token);
      if (unit_has_state(child, u)) continue;  // s's child too
      for (size_t e = 0; e < n; ++e) {
        const size_t i = m.shard_states[e].cursor;
        const uint64_t target = m.targets[c.row * n + e];
        if (target == format::kNoState) continue;
        m.State(child, i) = target;
        m.StateCount(child, i) = m.target_counts[c.row * n + e];
        m.StateLen(child, i) = lstar + 1;
        if (m.StateCount(child, i) > 1 && !lookups_spent())
          cursors_[i].view()->PrefetchEdgeRange(target);
      }
      offer_static(child, c.count, offers);
    }
  };
  // offer_backoff for one index and nothing else (one_index), where the node
  // has a state (it backs off): u* is its suffix link's state, and the
  // children are that state's top children, without the shard rows (the
  // same offers, in the same order).
  auto backoff_one = [&](int32_t node) {
    if (lookups_spent()) return;
    const MergedScratch::IndexState s = m.states[node];
    const format::IndexView& view = *cursors_[0].view();
    if (const uint32_t lr = records != nullptr ? link_record_of(s) : StaticIndex::kNoRecord;
        lr != StaticIndex::kNoRecord) {
      // The suffix link's record: its length, count and children in one
      // place (a clone's: the root has no record), the same as below.
      const StaticIndex::RecordHead head = records->Head(lr);
      const uint64_t lstar = head.len, total = head.count;
      if (lstar == 0 || total == 0) return;
      --lookups_left;
      if (lstar >= s.len) return;  // corrupt: a link must shorten the match
      const StaticOffers offers = static_offers(total, lstar, true, 0);
      const StaticIndex::RecordEntry* e = records->Entries(lr);
      const uint32_t k = std::min<uint32_t>(head.size(), static_cast<uint32_t>(sel.max_width));
      const int32_t first = m.nodes[node].first_child;  // the children it may share
      for (uint32_t j = 0; j < k; ++j) {
        const int32_t child = m.ChildAmong(node, first, e[j].token);
        MergedScratch::IndexState& cs = m.states[child];
        if (cs.state != format::kNoState) continue;  // s's child too
        cs = MergedScratch::IndexState{e[j].target, e[j].count, static_cast<uint32_t>(lstar + 1),
                                       e[j].record, lr, j};
        if (e[j].count > 1 && !lookups_spent()) records->PrefetchRecordAt(e[j].record);
        offer_static(child, e[j].count, offers);
      }
      return;
    }
    const uint64_t w = view.Link(s.state);  // kRoot when none: never kNoState
    const uint64_t lstar = view.Len(w);
    if (lstar == 0) return;  // the empty context (the root)
    const uint64_t total = view.Count(w);
    if (total == 0) return;
    --lookups_left;
    if (lstar >= s.len) return;  // corrupt: a link must shorten the match
    const StaticOffers offers = static_offers(total, lstar, true, 0);
    const int32_t first = m.nodes[node].first_child;
    for (const StaticIndex::Child& c : top_children(0, w, total)) {
      const int32_t child = m.ChildAmong(node, first, c.token);
      MergedScratch::IndexState& cs = m.states[child];
      if (cs.state != format::kNoState) continue;  // s's child too
      cs = MergedScratch::IndexState{c.target, c.count, static_cast<uint32_t>(lstar + 1)};
      if (c.count > 1 && !lookups_spent()) view.PrefetchEdgeRange(c.target);
      offer_static(child, c.count, offers);
    }
  };
  // Offers the backoff children of `node` (after its own static children).
  auto back_off = [&](int32_t node) {
    if (!m.nodes[node].expanded) expand(node);
    m.nodes[node].backed_off = true;
    if (m.nodes[node].depth >= kMaxStaticDepth) return;
    if (one_index) {
      const MergedScratch::IndexState& s = m.states[node];
      if (s.state != format::kNoState && s.count > 0 && s.count < sel.backoff_count)
        backoff_one(node);
      return;
    }
    for (size_t u = 0; u < num_units; ++u)
      if (unit_backs_off(node, u)) offer_backoff(node, u);
  };
  // Whether the backoff children of `parent` may offer `child` (give it a
  // state and a cell): it lacks a state in a unit where `parent` backs off.
  auto backoff_reaches = [&](int32_t parent, int32_t child) {
    if (one_index) {
      const MergedScratch::IndexState& s = m.states[parent];
      return s.state != format::kNoState && s.count > 0 && s.count < sel.backoff_count &&
             m.states[child].state == format::kNoState;
    }
    for (size_t u = 0; u < num_units; ++u) {
      if (unit_backs_off(parent, u) && !unit_has_state(child, u)) return true;
    }
    return false;
  };
  // Upper bounds on the estimate of any static child of `node` and of any
  // of its backoff children (0: none), in one pass over the units.
  struct Bounds {
    double static_children = 0.0, backoff_children = 0.0;
    uint64_t max_count = 0;  // the node's largest unit count
  };
  auto bounds_of = [&](int32_t node) {
    Bounds b;
    if (m.nodes[node].depth >= kMaxStaticDepth) return b;
    const bool spent = lookups_spent();
    if (one_index) {  // the loop below over one unit of one index
      const MergedScratch::IndexState& s = m.states[node];
      if (s.state == format::kNoState || s.count == 0) return b;
      b.max_count = s.count;
      // Both bounds read, then selected: whether lookups are spent, and the
      // count, are data (early returns on them mispredicted about five
      // times a step in callgrind's branch simulation).
      const double static_bound = cal.StaticBound(s.count, s.len, 0);
      const double backoff_bound = cal.BackoffBound(s.len, 0);
      const bool free_children = subtrees && spent && s.count > 1 &&
                                 s.sub != StaticIndex::kNoRecord && subtree_children(s);
      b.static_children = spent && s.count > 1 && !free_children ? 0.0 : static_bound;
      b.backoff_children = !spent && s.count < sel.backoff_count ? backoff_bound : 0.0;
      return b;
    }
    for (size_t u = 0; u < num_units; ++u) {
      uint64_t len = 0;
      const uint64_t total = unit_count(node, u, &len);
      if (total == 0) continue;
      b.max_count = std::max(b.max_count, total);
      if (spent && total > 1) continue;
      b.static_children = std::max(b.static_children, cal.StaticBound(total, len, family_of(u)));
      if (!spent && total < sel.backoff_count)
        b.backoff_children = std::max(b.backoff_children, cal.BackoffBound(len, family_of(u)));
    }
    return b;
  };
  // Ranks `node` (its parent ranked and expanded), queues its children.
  auto rank = [&](int32_t node) {
    {
      MergedNode& r = m.nodes[node];
      r.rank = static_cast<int32_t>(m.ranked.size());
      r.path = r.parent < 0 ? 1.0 : m.nodes[r.parent].path * r.prob;
    }
    m.ranked.push_back(node);
    if (node == dyn_tip && m.nodes[node].depth < dyn_chain) {
      const uint16_t depth = m.nodes[node].depth;
      dyn_tip = m.OfferChild(cal, node, chain_[depth], 0, cal.DynamicCell(dyn.len, depth + 1u),
                             kFromDynamic);
    }
    const MergedNode& n = m.nodes[node];
    for (int32_t c = n.first_child; c >= 0; c = m.nodes[c].next_sibling) m.Enqueue(c);
    // Queues the node's expansion (of its static children, or of its backoff
    // children) at its path probability times `bound`; false when there is
    // none (bound 0). Below min_path_probability the entry would never be
    // popped: the node is then expanded only if one of its children comes to
    // rank.
    auto queue_expansion = [&](double bound, bool backoff) {
      if (!(bound > 0.0)) return false;
      const MergedNode& r = m.nodes[node];
      if (r.path * bound >= sel.min_path_probability)
        m.Push(QueueEntry{r.path * bound, OrderAtEqualKeys(true, r.depth, r.rank, r.token, backoff),
                          node, true, backoff});
      return true;
    };
    const Bounds b = bounds_of(node);
    if (b.max_count == 1 && b.static_children > 0.0 &&
        m.nodes[node].path * b.static_children >= sel.min_path_probability) {
      // Its strings occur once: its one static child (the text after that
      // occurrence) needs no lookup, and is offered now rather than through
      // a queued expansion. The ranking is the same: the expansion would have
      // come before anything its child ranks after.
      expand(node);
    } else if (!queue_expansion(b.static_children, false)) {
      m.nodes[node].expanded = true;
    }
    // The backoff children: an expansion of their own, usually later (their
    // estimates are lower), so that most of their lookups are never made.
    if (!queue_expansion(b.backoff_children, true)) m.nodes[node].backed_off = true;
  };

  // ---- Best-first ranking, at most `budget` nodes (root included).
  SAM_PHASE_END(kCalSetup);
#ifdef SAM_PHASE_TIMING
  size_t phase_nodes = 2;  // the ranking's phase ends when this many nodes rank
  auto phase_mark = [&] {
    if (m.ranked.size() < phase_nodes || phase_nodes > 8) return;
    if (phase_nodes == 2) SAM_PHASE_END(kCalRankTo2);
    else if (phase_nodes == 4) SAM_PHASE_END(kCalRankTo4);
    else SAM_PHASE_END(kCalRankTo8);
    phase_nodes *= 2;
  };
#else
  auto phase_mark = [] {};
#endif
  rank(0);
  while (!m.QueueEmpty() && m.ranked.size() < budget) {
    phase_mark();
    const QueueEntry e = m.Pop();
    if (e.key < sel.min_path_probability) break;  // nothing left reaches it
    if (e.expand) {
      if (e.backoff) {
        if (lookups_spent()) m.nodes[e.node].backed_off = true;  // nothing to offer
        if (!m.nodes[e.node].backed_off) back_off(e.node);
      } else if (!m.nodes[e.node].expanded) {
        expand(e.node);
      }
      continue;
    }
    if (m.nodes[e.node].rank >= 0 || e.key < m.nodes[e.node].queued) continue;  // stale
    // Its parent's static offers come first: they may give it a state (and
    // a cell). They cannot raise its estimate: the parent's expansion entry,
    // which bounds them, would have come first.
    const int32_t parent = m.nodes[e.node].parent;
    if (!m.nodes[parent].expanded) {
      expand(parent);
      if (m.nodes[e.node].queued > e.key) continue;  // defensive: re-queued higher
    }
    // Likewise its parent's backoff children, when they may give it a state.
    if (!m.nodes[parent].backed_off && lookups_spent()) {
      m.nodes[parent].backed_off = true;  // nothing to offer
    } else if (!m.nodes[parent].backed_off && backoff_reaches(parent, e.node)) {
      back_off(parent);
      if (m.nodes[e.node].queued > e.key) continue;  // defensive: re-queued higher
    }
    rank(e.node);
  }

  // ---- Selection: how many of the ranked nodes to draft. Any prefix of the
  // ranking is a tree (a parent ranks before its children): every ranked node
  // (at most budget - 1, each at or above min_path_probability), or with a
  // cost curve the prefix that pays for its verification (ChooseTreeSize).
  phase_mark();
  SAM_PHASE_END(kCalRankRest);
  size_t keep = m.ranked.size() - 1;
  if (!sel.cost_curve.empty()) keep = CostAwareKeep(m.ranked.data() + 1, keep);
  if (keep == 0) return;

  // Tree node r is the node of rank r (a parent ranks first, so the tree is
  // what DraftTree::Add would build; depths stay far below kMaxDepth).
  // (Appended, not resized and then written: the vectors keep their
  // capacity, and a resize would first fill the new elements with zeros.)
  node_cells_.assign(1, std::array<int, 4>{-1, -1, -1, -1});
  uint8_t sources = 0;
  for (size_t r = 1; r <= keep; ++r) {
    const MergedNode& n = m.nodes[m.ranked[r]];
    tree->tokens.push_back(n.token);
    tree->parents.push_back(m.nodes[n.parent].rank);
    tree->depths.push_back(n.depth);
    node_cells_.push_back(n.cells);
    sources |= n.sources;
  }
  m.ranked.resize(keep + 1);
  m.valid = true;
  switch (sources) {
    case kFromDynamic: tree->source = DraftSource::kDynamic; break;
    case kFromStatic: tree->source = DraftSource::kStatic; break;
    case kFromFallback: tree->source = fallback_source; break;
    case kFromCache: tree->source = DraftSource::kCache; break;
    case 0: tree->source = DraftSource::kNone; break;
    default: tree->source = DraftSource::kMerged; break;
  }
  tree->match_len = std::max(dyn.len, last_static_len_);
  SAM_PHASE_END(kCalOutput);
}

size_t Session::CostAwareKeep(const int32_t* ranked, size_t keep) {
  std::vector<double>& paths = merged_->ranked_paths;
  paths.clear();
  for (size_t r = 0; r < keep; ++r) paths.push_back(merged_->nodes[ranked[r]].path);
  return ChooseTreeSize(paths, options_.selection.cost_curve, MeasuredRate()) - 1;
}

double Session::MeasuredRate() const {
  // Tokens per t(1) over the steps so far, starting from plain decoding's 1
  // (worth kPriorSteps steps), so that the first steps draft like a session
  // that has not yet seen speculation pay.
  constexpr double kPriorSteps = 4.0;
  return (rate_tokens_ + kPriorSteps) / (rate_cost_ + kPriorSteps);
}

size_t Session::RecordAcceptance(std::span<const uint32_t> tokens) {
  const DraftTree& t = tree_;
  // The accepted path; its nodes are marked only for calibration.
  const bool calibrating = node_cells_.size() == t.size();
  if (calibrating) {
    on_path_.assign(t.size(), 0);
    on_path_[0] = 1;
  }
  int node = 0;
  size_t accepted = 0;
  for (size_t k = 1; k < tokens.size(); ++k) {
    node = t.Child(node, tokens[k]);
    if (node < 0) break;
    if (calibrating) on_path_[node] = 1;
    ++accepted;
  }
  SourceStatistics& s = stats_.source(t.source);
  s.Record(t, accepted);
  if (!options_.selection.cost_curve.empty()) {
    rate_tokens_ += static_cast<double>(accepted + 1);
    rate_cost_ += options_.selection.cost_curve.Relative(t.size());
  }
  s.propose_ns += pending_ns_;
  ++stats_.steps;

  // Calibration: every node whose parent was accepted was a trial.
  if (calibrating) {
    for (size_t i = 1; i < t.size(); ++i) {
      if (!on_path_[t.parents[i]]) continue;
      for (int cell : node_cells_[i])
        if (cell >= 0) calibrator_->Observe(cell, on_path_[i] != 0);
    }
  }
  return accepted;
}

void Session::Commit(std::span<const uint32_t> tokens) {
  const uint64_t t0 = options_.collect_timing ? NowNs() : 0;
  // The proposal peeked every cursor with its start token: reuse that match.
  const bool peeked = pending_ && !tokens.empty() && tokens[0] == tree_.tokens[0];
  SAM_PHASE_START();
  const size_t accepted = peeked ? RecordAcceptance(tokens) : 0;
  SAM_PHASE_END(kCommitAccept);
  pending_ = false;
  // Accepted tokens of a linear static draft are the corpus text after the
  // drafting cursor's match: that cursor jumps over them in one climb.
  const size_t along = linear_static_cursor_ < num_peeked_ ? accepted : 0;
  for (size_t i = 0; i < cursors_.size(); ++i) {
    StaticCursor& c = cursors_[i];
    size_t k = 0;
    if (peeked && i < num_peeked_) {  // not if attached since
      c.Set(peeked_[i]);
      cursor_record_[i] = peeked_record_[i];
      k = 1;
    }
    if (i == linear_static_cursor_ && along > 0) {
      c.Set(AdvanceAlongFirstOccurrence(*c.view(), peeked_[i], along));
      cursor_record_[i] = StaticIndex::kNoRecord;
      k = 1 + along;
    } else if (k == 1 && merged_->valid && i < merged_->num_indexes) {
      // Accepted nodes of a merged tree (kCalibrated) whose state in this
      // index is known (a transition from the parent's): the cursor moves
      // there, one node at a time, without looking the transitions up again.
      int node = 0;
      for (; k < tokens.size(); ++k) {
        const int child = tree_.Child(node, tokens[k]);
        if (child < 0) break;
        const int32_t merged = merged_->ranked[child];
        const uint64_t state = merged_->State(merged, i);
        // A backoff child's state is a shorter match than the longest one.
        if (state == format::kNoState || merged_->StateLen(merged, i) != peeked_[i].len + k) break;
        c.Set(StaticMatch{state, peeked_[i].len + k});
        cursor_record_[i] = merged_->states[static_cast<size_t>(merged) * merged_->num_indexes + i].record;
        node = child;
      }
    }
    for (; k < tokens.size(); ++k) AdvanceCursor(i, tokens[k]);
    // The next proposal starts with a Peek from here: its first cache misses
    // overlap the dynamic automaton's update below.
    PrefetchPeek(i);
  }
  linear_static_cursor_ = SIZE_MAX;
  SAM_PHASE_END(kCommitCursors);
  dynamic_.Extend(tokens);
  dynamic_.Prefetch();  // the next Lookup's (and Extend's) first read
  if (options_.fallback) options_.fallback->Commit(tokens);
  if (cache_) cache_cursor_.Advance(tokens);
  if (cache_compiled_.index)
    for (uint32_t t : tokens) cache_static_.Advance(t);
  stats_.committed_tokens += tokens.size();
  if (options_.collect_timing) stats_.commit_ns += NowNs() - t0;
  SAM_PHASE_END(kCommitUpdate);
}

void Session::ObserveTopK(std::span<const uint32_t> tokens, std::span<const uint32_t> topk,
                          size_t k) {
  if (options_.fallback) options_.fallback->ObserveTopK(tokens, topk, k);
}

}  // namespace sam::runtime
