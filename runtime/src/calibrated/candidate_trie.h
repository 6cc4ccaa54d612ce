// The candidate trie of Policy::kCalibrated: every source's candidates merged
// into one trie, each node with its best calibrated estimate, its state in
// every static source, and the best-first queue that ranks them.
#ifndef SAM_RUNTIME_SRC_CALIBRATED_CANDIDATE_TRIE_H_
#define SAM_RUNTIME_SRC_CALIBRATED_CANDIDATE_TRIE_H_

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "calibrated/calibrator.h"
#include "sam/format/index.h"
#include "sam/runtime/draft.h"
#include "sam/runtime/selection.h"
#include "sam/runtime/static_index.h"
#include "sam/runtime/static_match.h"

namespace sam::runtime::calibrated {


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
// The trie of one proposal, kept across steps so that proposing does not
// allocate once warm: its nodes, its best-first queue and ranking, each
// node's automaton state in every static source (kNoState: none).
struct CandidateTrie {
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
  };
  static_assert(sizeof(IndexState) == 24, "a node's state in an index: three words");
  std::vector<IndexState> states;
  // The best-first queue: entries q[head, tail), best first, in a buffer
  // with room on both sides (Push).
  std::vector<QueueEntry> q, q_spare;
  size_t head = 0, tail = 0;
  bool QueueEmpty() const { return head == tail; }
  std::vector<int32_t> ranked;   // ranked[r]: the node of rank r (tree node r)
  // The pending proposal is this trie's ranking (Commit may read the states).
  bool valid = false;
  double min_key = 0.0;  // experimental::Tuning::min_path_probability

  // A shard set's backoff (CalibratedPolicy::OfferBackoff): per node
  // and cursor, the longest suffix of the node's string in that shard
  // (matches, known when match_known holds this step's match_step), grown
  // on demand, node-major like states. The stamps keep a step from clearing
  // what the last one wrote.
  std::vector<StaticMatch> matches;
  std::vector<uint32_t> match_known;
  uint32_t match_step = 0;
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
    if (++match_step == 0) {  // (wrapped: stale stamps could match)
      std::fill(match_known.begin(), match_known.end(), 0);
      match_step = 1;
    }
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

}  // namespace sam::runtime::calibrated

#endif  // SAM_RUNTIME_SRC_CALIBRATED_CANDIDATE_TRIE_H_
