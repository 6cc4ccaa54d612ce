// Matching against a static (corpus) index and the drafts it gives.
//
//   const sam::format::IndexView& view = index_file.view();
//   sam::runtime::StaticCursor cursor(&view);
//   for (uint32_t t : context) cursor.Advance(t);        // longest suffix match
//   sam::runtime::StaticMatch m = cursor.Peek(start);     // what start would give
//   uint32_t draft[39];
//   size_t n = sam::runtime::StaticContinuation(view, m.state, 39, draft);
//
// Transfer rule (DESIGN.md section 4): on token c, while the state is not the
// root and has no transition on c, move to its suffix link and set the length
// to that state's Len; then take the transition (length + 1) or reset to
// (root, 0). Amortised O(1) transitions per token.
//
// Corrupt indexes (one that --verify refuses, e.g. re-sealed with valid
// checksums): every loop here is bounded by an invariant checked where it is
// used, never by what the file claims. A suffix link must shorten the match
// (Len(Link(v)) < match length); where it does not, matching stops: the
// cursor resets to (root, 0), as when no suffix has a transition, so each
// climb step still consumes match length and the amortised bound holds. Edge
// ranges hold at most vocab_size() transitions (IndexView::EdgeRange), draft
// copies stop at the end of the text. A step over a corrupt index therefore
// always finishes, with a draft that may be wrong or empty, never an error;
// IndexFile::Verify (sam-inspect --verify, SAM_OPEN_VERIFY) detects it.
//
// Thread safety: a cursor is a small value owned by one session; the view it
// points to is shared read-only by any number of cursors and threads.
// Lifetime: a cursor borrows its view (and StaticIndex): they must outlive
// it. An IndexFile's view keeps its address when the file is moved
// (format/index.h); a Session keeps what its cursors point to alive when it
// was attached by shared_ptr.
#ifndef SAM_RUNTIME_STATIC_MATCH_H_
#define SAM_RUNTIME_STATIC_MATCH_H_

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "sam/export.h"
#include "sam/format/index.h"
#include "sam/runtime/draft.h"
#include "sam/runtime/static_index.h"

namespace sam::runtime {

struct SAM_API StaticMatch {
  uint64_t state = format::kRoot;
  uint64_t len = 0;
};

// One transfer step of the matching rule. With `hubs` (a StaticIndex of the
// same view), transitions of hub states are looked up in its label arrays;
// the result is the same.
inline StaticMatch Transfer(const format::IndexView& view, StaticMatch m, uint32_t token,
                            const StaticIndex* hubs = nullptr) {
  auto next_of = [&](uint64_t v) { return hubs ? hubs->Next(v, token) : view.Next(v, token); };
  uint64_t state = m.state;
  uint64_t len = m.len;
  if (state != format::kRoot) view.PrefetchLink(state);
  uint64_t next = next_of(state);
  while (next == format::kNoState && state != format::kRoot) {
    state = view.Link(state);
    if (state != format::kRoot) view.PrefetchLink(state);
    const uint64_t shorter = view.Len(state);
    if (shorter >= len) return StaticMatch{};  // corrupt: a link must shorten the match
    len = shorter;
    next = next_of(state);
  }
  if (next == format::kNoState) return StaticMatch{};
  return StaticMatch{next, len + 1};
}

// Transfer over `index`: through its accelerators when it is prepared, the
// plain rule over a Bare() index. (Matching that follows records from record
// to record is StaticCursor's.)
inline StaticMatch Transfer(const StaticIndex& index, StaticMatch m, uint32_t token) {
  return Transfer(index.view(), m, token, index.prepared() ? &index : nullptr);
}

// Transfer(index.view(), m, token, &index), the same match, through the
// index's child records (StaticIndex::Options::record_min_count): a climb
// to a suffix link reads the link's record (its length and heaviest
// transitions, one or two cache lines) instead of the link, its length and
// the record's offset, one after the other. `record` is m.state's record
// when the caller knows it (StaticIndex::kNoRecord: looked up when needed);
// *record_out receives the record of the returned state when it is known on
// the way (a record's child), else kNoRecord. Without records it is
// Transfer. A corrupt index stops the match as Transfer does (a link that
// does not shorten it).
inline StaticMatch TransferByRecords(const StaticIndex& index, StaticMatch m, uint32_t record,
                                     uint32_t token, uint32_t* record_out) {
  *record_out = StaticIndex::kNoRecord;
  const format::IndexView& view = index.view();
  if (!index.has_records()) return Transfer(view, m, token, &index);
  const size_t top_k = index.options().top_k;
  // The current state: `state` itself, or (climbs > 0) the state that many
  // suffix links above it, known only by its record `rec`.
  uint64_t state = m.state, len = m.len;
  size_t climbs = 0;
  uint32_t rec = view.IsClone(state) ? record : StaticIndex::kNoRecord;
  auto resolve = [&] {  // the current state's id (the links climbed by record)
    for (; climbs > 0; --climbs) state = view.Link(state);
  };
  // A position climbs unless the token continues its one occurrence: its
  // suffix link's record starts loading with the text after it.
  if (state != format::kRoot && !view.IsClone(state)) index.PrefetchPositionLinkRecord(state);
  for (;;) {
    if (climbs == 0 && rec == StaticIndex::kNoRecord && view.IsClone(state)) rec = index.RecordOf(state);
    uint64_t next = format::kNoState;
    if (rec != StaticIndex::kNoRecord) {
      const StaticIndex::RecordHead head = index.Head(rec);
      const StaticIndex::RecordEntry* e = index.Entries(rec);
      // A hub's label table answers in one probe: cheaper than reading a
      // long record's children first (a shard's top_k is 32), dearer than
      // searching the few that share the head's lines (top_k 8: the
      // likely tokens).
      const uint32_t search = head.hub() && head.size() > 8 ? 0 : head.size();
      for (uint32_t i = 0; i < search; ++i) {
        if (e[i].token == token) {
          if (!index.EntryOk(e[i], head)) return StaticMatch{};  // (a damaged file's record)
          *record_out = e[i].record_of_target();
          return StaticMatch{e[i].target, len + 1};
        }
      }
      if (search < head.size() || head.size() >= top_k) {  // not all of them: the other paths
        // Where the climb goes if they have no transition either: its record
        // loads while they are read (a hub's table, the filter, the edges).
        index.PrefetchRecordAt(head.link_record);
        if (!head.hub()) resolve();  // a hub's needs no state, the filter's does
        next = index.NextAt(rec, head, state, token);
      }
    } else {
      next = index.Next(state, token);  // climbs == 0: no record, the state is known
    }
    if (next != format::kNoState) return StaticMatch{next, len + 1};
    if (climbs == 0 && state == format::kRoot) return StaticMatch{};
    // The suffix link's record: a position keeps it, a record's head holds it.
    const uint32_t link_record = rec != StaticIndex::kNoRecord ? index.Head(rec).link_record
                                 : !view.IsClone(state)       ? index.PositionLinkRecord(state)
                                                              : StaticIndex::kNoRecord;
    if (link_record != StaticIndex::kNoRecord) {
      const uint64_t shorter = index.Head(link_record).len;
      if (shorter >= len) return StaticMatch{};  // corrupt: a link must shorten the match
      len = shorter;
      rec = link_record;
      ++climbs;
      continue;
    }
    resolve();
    state = view.Link(state);
    const uint64_t shorter = view.Len(state);
    if (shorter >= len) return StaticMatch{};  // corrupt: a link must shorten the match
    len = shorter;
    rec = StaticIndex::kNoRecord;
  }
}

// The match after the k tokens that follow the first occurrence of m's
// strings, i.e. k transfers on Token(e + 1), ..., Token(e + k) where
// e = MinEndpos(m.state): the length-(m.len + k) suffix of the corpus prefix
// ending at e + k, whose state is found by climbing suffix links from the
// non-clone state e + k (usually one or two links) instead of k lookups.
// Requires m.state != root, k >= 1, e + k <= num_tokens() and no document
// end among those k tokens (what StaticContinuation copies); otherwise
// (root, 0). On a corrupt index the climb stops where lengths stop
// decreasing.
inline StaticMatch AdvanceAlongFirstOccurrence(const format::IndexView& view, StaticMatch m,
                                               uint64_t k) {
  const uint64_t first_end = view.MinEndpos(m.state);
  if (first_end == 0 || k > view.num_tokens() - first_end) return StaticMatch{};
  const uint64_t end = first_end + k;
  const uint64_t length = m.len + k;
  uint64_t v = end;
  uint64_t v_len = end;  // a non-clone state's length is its id
  for (;;) {
    const uint64_t u = view.Link(v);
    if (u == format::kRoot) break;
    const uint64_t u_len = view.Len(u);
    if (u_len < length || u_len >= v_len) break;
    v = u;
    v_len = u_len;
  }
  return StaticMatch{v, length};
}

// A match that moves token by token: the one transition path of a static
// source. Over a StaticIndex it uses whatever accelerators the index holds
// (child records, followed from record to record: TransferByRecords; hub
// label tables and the edge filter: StaticIndex::Next); over a bare view or
// a Bare() index it is the plain transfer rule. The match is the same
// either way.
class SAM_API StaticCursor {
 public:
  StaticCursor() = default;
  explicit StaticCursor(const format::IndexView* view) : view_(view) {}
  // A cursor over index->view() that uses its accelerators (borrowed).
  explicit StaticCursor(const StaticIndex* index)
      : view_(&index->view()),
        hubs_(index->prepared() ? index : nullptr),
        records_(index->has_records() ? index : nullptr) {}

  void Reset() {
    match_ = StaticMatch{};
    record_ = StaticIndex::kNoRecord;
  }
  void Advance(uint32_t token) { match_ = Step(token, &record_); }
  // The match after `token` without moving the cursor; *record (when given)
  // receives its state's child record when known on the way, else
  // StaticIndex::kNoRecord (always without records).
  StaticMatch Peek(uint32_t token) const {
    uint32_t record = StaticIndex::kNoRecord;
    return Step(token, &record);
  }
  StaticMatch Peek(uint32_t token, uint32_t* record) const { return Step(token, record); }
  // Moves to a match obtained from Peek() at the current position, or
  // otherwise known; `record` is its state's child record when known.
  void Set(StaticMatch m, uint32_t record = StaticIndex::kNoRecord) {
    match_ = m;
    record_ = record;
  }
  // Starts loading what the next Peek() or Advance() reads first, before its
  // token is known (a hint): with child records, a position's next token and
  // its suffix link's record, or a clone's record when known; else the
  // state's suffix link, the text after it (its implicit transition), its
  // hub bit and its edge range.
  void Prefetch() const {
    const uint64_t v = match_.state;
    if (view_ == nullptr || v == format::kRoot) return;
    if (records_ != nullptr) {
      if (!view_->IsClone(v)) {
        view_->PrefetchToken(v + 1);
        records_->PrefetchPositionLinkRecord(v);
        return;
      }
      if (record_ != StaticIndex::kNoRecord) {
        records_->PrefetchRecordAt(record_);
        return;
      }
    }
    view_->PrefetchLink(v);
    view_->PrefetchToken(v + 1);
    view_->PrefetchEdgeRange(v);
    if (hubs_ != nullptr) {
      hubs_->PrefetchHubBit(v);
      hubs_->PrefetchRecord(v);  // a clone's child record answers most transitions
    }
  }

  const StaticMatch& match() const { return match_; }
  // The child record of match().state when known, else StaticIndex::kNoRecord.
  uint32_t record() const { return record_; }
  const format::IndexView* view() const { return view_; }

 private:
  StaticMatch Step(uint32_t token, uint32_t* record_out) const {
    if (records_ != nullptr) return TransferByRecords(*records_, match_, record_, token, record_out);
    *record_out = StaticIndex::kNoRecord;
    return Transfer(*view_, match_, token, hubs_);
  }

  const format::IndexView* view_ = nullptr;
  const StaticIndex* hubs_ = nullptr;     // a prepared index: its Next
  const StaticIndex* records_ = nullptr;  // an index with child records
  StaticMatch match_;
  uint32_t record_ = StaticIndex::kNoRecord;
};

// Copies up to `want` tokens that follow the first occurrence (MinEndpos) of
// state's strings into out, stopping before a document end or the end of the
// corpus (never padded). Returns the number copied; 0 for the root.
SAM_API size_t StaticContinuation(const format::IndexView& view, uint64_t state, size_t want,
                                  uint32_t* out);

// Count-weighted best-first draft trees over a static automaton.
struct SAM_API StaticTreeOptions {
  size_t max_nodes = 60;   // root (start token) included
  size_t max_width = 8;    // nodes per depth
  size_t max_depth = 64;
  // Shared top children of hub states (borrowed; may be null). Used when it
  // belongs to the view being drafted from and max_width <= its top_k;
  // otherwise the builder's own cache is used. The trees are the same.
  const StaticIndex* hubs = nullptr;
};

// A direct-mapped cache of the kChildren heaviest children (count
// descending, then token ascending) of automaton states, for states whose
// transitions are many (kMinDegree explicit transitions or more) and would
// otherwise be scanned at every step. A state of fewer is cheaper scanned
// than cached: its entry would rarely be met again before it is replaced.
// `entries` (a power of two) slots of about 216 bytes each, allocated on the
// first Get. One cache serves one thread (a builder, a session).
class SAM_API TopChildrenCache {
 public:
  static constexpr size_t kChildren = 8;
  static constexpr uint64_t kMinDegree = 32;
  explicit TopChildrenCache(size_t entries);
  // The heaviest children of `state` in `view` (at most kChildren).
  std::span<const StaticIndex::Child> Get(const format::IndexView& view, uint64_t state);
  // Forgets every entry. Entries are keyed by the view's address: call it
  // when a view the cache has seen is destroyed and another may take its
  // address (a response cache's recompiled index).
  void Clear();

 private:
  struct Entry {
    const format::IndexView* view = nullptr;
    uint64_t state = 0;
    uint32_t size = 0;
    std::array<StaticIndex::Child, kChildren> children;
  };
  size_t entries_;
  int shift_;  // a slot is the top log2(entries) bits of the hashed key
  std::vector<Entry> table_;
};

// Reusable scratch space: building a tree allocates nothing once warm. The
// heaviest children of high-degree states (short, common matches, whose
// transitions are many and stored in token order) come from the shared
// StaticIndex when one is given (StaticTreeOptions::hubs), else from a cache
// per builder, so that a state's transitions are scanned at most once per
// builder, not at every step.
class SAM_API StaticTreeBuilder {
 public:
  // Grows `tree` (whose node 0, the start token, already corresponds to
  // `state`) best-first: a node's weight is the product along its path of
  // Count(child) / Count(parent state); the heaviest frontier node is added
  // next, until max_nodes nodes or no candidate is left; a depth that already
  // has max_width nodes takes no more. Document-end continuations are never
  // proposed. Nodes are added in non-increasing weight order, so every prefix
  // of the result is itself the best tree of its size. If weights_out is not
  // null it receives the weight of every node (1 for the root). The tree's
  // accept_estimates are each node's count ratio (1 for the root).
  void Build(const format::IndexView& view, uint64_t state, const StaticTreeOptions& options,
             DraftTree* tree, std::vector<double>* weights_out = nullptr);
  // The automaton state of every node of the last built tree.
  const std::vector<uint64_t>& node_states() const { return node_state_; }

 private:
  struct Candidate {
    double weight;
    int32_t parent;
    uint64_t state;
    uint32_t token;
    float share;  // Count(child) / Count(parent state): its accept estimate
  };
  // Top children of high-degree states (8192 entries: about 1.7 MiB,
  // allocated when first needed).
  static constexpr size_t kCachedChildren = TopChildrenCache::kChildren;

  TopChildrenCache cache_{8192};
  std::vector<StaticIndex::Child> records_;  // a child record's children
  std::vector<Candidate> heap_;
  std::vector<Candidate> children_;
  std::vector<uint64_t> node_state_;
  std::vector<uint32_t> width_;
};

}  // namespace sam::runtime

#endif  // SAM_RUNTIME_STATIC_MATCH_H_
