// A static index prepared for drafting, shared by any number of sessions.
//
//   auto file = sam::format::IndexFile::Open("general.sam");
//   std::shared_ptr<const sam::runtime::StaticIndex> index =
//       sam::runtime::StaticIndex::Create(file.shared_view());  // once per index file
//   sam::runtime::Session a(options), b(options);           // any threads
//   a.AttachIndex(index);
//   b.AttachIndex(index);
//
// What it adds to the bare IndexView, for every "hub" state (one with at
// least min_degree explicit transitions: the short, common matches such as a
// space, "the" or "=", whose transitions number in the thousands):
//  - its top-K children (by occurrence count, then smaller token), which
//    count-weighted trees (Policy::kTree, Policy::kCalibrated) need at almost
//    every step. Without the table each session finds them by scanning all
//    the transitions the first time it meets a hub (milliseconds for a fresh
//    session on a 6.8M-token index); with it every session reads them in O(1).
//  - its transition labels in a small hash table (label -> target,
//    1.5 slots per transition), so that Next() on a hub reads one or two
//    cache lines instead of binary searching edge targets whose labels are
//    read from the text (two dependent cache misses a probe). Matching
//    mostly climbs through hubs.
//
// And for every other state, an edge filter: a blocked Bloom filter over the
// (state, token) pairs of their explicit transitions (Options::filter_bits_per_edge
// bits per transition; about 1% false positives at 10). Matching after a
// rejected draft mostly asks for transitions that do not exist, climbing
// suffix links; without the filter each such question costs a select on the
// degree bit vector and a scan of the state's edges, whose labels are read
// from the text (two dependent cache misses per edge); with it, one cache
// line answers "no" and only the rare "maybe" takes the full path. Answers
// are identical either way.
//
// Where they come from: the index file's HUBS and FILT sections
// (format/FORMAT.md section 12, written by sam-build), mapped in O(1) and
// shared by every process, when Options match the parameters they were
// built with (min_degree, filter_bits_per_edge, and a stored top_k at least
// Options::top_k); accelerators_from_file() then says true. Otherwise
// Create() computes the same tables (format::BuildAccelerators) into
// private memory on 2 MiB pages where available: O(states + edges), about
// 0.3-0.8 s and 34 MiB for the 6.8M-token index (9.2M states, 7.7M explicit
// transitions, 17.8K hubs of >= 32 transitions holding 1.6M of them);
// memory_bytes() counts them then. Child records (Options::record_min_count)
// come from the file's RECS section the same way, or are computed here.
//
// Lifetime and threads: immutable after Create(), so any number of threads
// may use one concurrently. Created from IndexFile::shared_view(), it keeps
// the index file mapped for as long as it lives; created from a raw view
// pointer, it borrows the view, which must then outlive it (and every session
// it is attached to). Sessions hold it by shared_ptr.
#ifndef SAM_RUNTIME_STATIC_INDEX_H_
#define SAM_RUNTIME_STATIC_INDEX_H_

#include <bit>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <utility>
#include <vector>

#include "sam/export.h"
#include "sam/format/child_records.h"
#include "sam/format/huge_buffer.h"
#include "sam/format/index.h"

namespace sam::runtime {

// The record_min_count that PrepareOptions(true) sets, and sam-build
// --child-records writes (format::kChildRecordMinCount): on the 6.8M-token
// index 2 costs 41 MiB more than 3 (157 against 115 MiB of records) for
// sam-cal steps 8-10% cheaper (docs/runtime.md).
inline constexpr uint64_t kChildRecordMinCount = format::kChildRecordMinCount;

class SAM_API StaticIndex {
 public:
  struct Options {
    uint64_t min_degree = 32;  // explicit transitions that make a state a hub
    size_t top_k = 8;          // children kept per hub (trees use at most max_width)
    // Edge filter size in bits per explicit transition (0: no filter; at most
    // 64). 10 gives about 1% false positives.
    unsigned filter_bits_per_edge = 10;
    // Child records (format/FORMAT.md section 13, sam/format/child_records.h).
    // For every clone state that occurs at least this many times (hubs
    // included), its (at most top_k) heaviest children are stored together:
    // token, target, count and the target's own record, 16 bytes each,
    // after a 16-byte head with the state's length and count and the record
    // of its suffix link; found through one offset per clone (4 bytes a
    // clone), and each position's suffix link's record is kept too (4 bytes
    // a token). A lookup of a branching state then reads one or two
    // adjacent cache lines instead of a chain of four or five misses
    // (select sample, degree word, edges, each child's first end position
    // and the token there), and a step to a suffix link (a backoff, a climb
    // of the matching) one record instead of the link, its length and
    // count, the record's offset and the record. Transitions (Next, hence
    // every match) look in the record first: the heaviest children are the
    // likely next tokens, and a record shorter than top_k holds them all.
    // Drafts are the same with or without them.
    //
    // Where they come from: the index file's RECS section (sam-build
    // --child-records), mapped and shared by every process, whenever the
    // file has one built for this top_k over the file's own hub tables and
    // this is 0 or the section's min count; records_from_file() then says
    // true. Otherwise, when this is above 0 (at least 2 is used), Create()
    // computes them into private memory: for the 6.8M-token index at 2
    // (kChildRecordMinCount) 157 MiB (23 bytes per corpus token) and about
    // 1 s. 0 and no RECS section: none (sam-cal steps cost about twice as
    // much; docs/runtime.md). Kept only when states fit in 32 bits.
    uint64_t record_min_count = 0;
  };
  // One child of a hub: the transition token, its target and the target's count.
  using Child = format::HubChild;

  // Builds the hub table of `view`, which it shares: the view (and its file's
  // mapping) lives at least as long as the StaticIndex. Throws
  // sam::Error (kInvalidArgument) for a null view or top_k == 0.
  static std::shared_ptr<const StaticIndex> Create(std::shared_ptr<const format::IndexView> view,
                                                   const Options& options);
  static std::shared_ptr<const StaticIndex> Create(std::shared_ptr<const format::IndexView> view) {
    return Create(std::move(view), Options{});
  }
  // Same over a borrowed view, which must outlive the StaticIndex.
  static std::shared_ptr<const StaticIndex> Create(const format::IndexView* view,
                                                   const Options& options);
  static std::shared_ptr<const StaticIndex> Create(const format::IndexView* view) {
    return Create(view, Options{});
  }

  // What the index file holds, nothing computed: Create(view, options) when
  // the file's sections fit the options (its HUBS and FILT built with
  // these parameters; then also its RECS when built for this top_k,
  // whatever options.record_min_count says), else Bare(view). O(1)
  // whatever the index's size; what a default sam_index_open gives. Throws
  // as Create does.
  static std::shared_ptr<const StaticIndex> FromFile(std::shared_ptr<const format::IndexView> view,
                                                     const Options& options);
  static std::shared_ptr<const StaticIndex> FromFile(std::shared_ptr<const format::IndexView> view) {
    return FromFile(std::move(view), Options{});
  }
  // True when Create(view, options) would take the file's hub tables and
  // edge filter rather than compute them.
  static bool FileSectionsFit(const format::IndexView& view, const Options& options);

  // A trivial index over `view`: no accelerators (no edge filter, hub
  // tables or records), made in O(1). A session holds one for a bare view
  // that was attached, so that every static source steps through the same
  // entry point (StaticCursor); its matching is the plain transfer rule
  // (prepared() is false). The first form shares the view, the second
  // borrows it (it must outlive the index). Throws sam::Error
  // (kInvalidArgument) for a null view.
  static std::shared_ptr<const StaticIndex> Bare(std::shared_ptr<const format::IndexView> view);
  static std::shared_ptr<const StaticIndex> Bare(const format::IndexView* view);

  const format::IndexView& view() const { return *view_; }
  const Options& options() const { return options_; }
  // False for a Bare() index: then nothing below accelerates anything
  // (no hub, no record, no filter), and matching reads the view alone.
  bool prepared() const { return prepared_; }
  // True when the hub tables and the edge filter are the index file's own
  // sections (HUBS, FILT), mapped and shared by every process; false when
  // Create() computed them into private memory (a file written without
  // them, or options other than the ones they were built with).
  bool accelerators_from_file() const { return from_file_; }
  // True when `state` is a hub; then *children receives its (at most top_k)
  // heaviest children, heaviest first (count descending, then token ascending;
  // document-end transitions excluded).
  bool TopChildren(uint64_t state, std::span<const Child>* children) const;
  // True when `state` has a child record (Options::record_min_count); then
  // out[0..*size) receives its (at most top_k) heaviest children in the
  // same order (a hub's are those of its table). `out` holds at least
  // options().top_k children.
  bool RecordChildren(uint64_t state, Child* out, uint32_t* size) const {
    uint32_t begin = 0, end = 0;
    if (!RecordRange(state, &begin, &end)) return false;
    const RecordHead head = Head(begin - 1);
    *size = head.size();
    const RecordEntry* e = Entries(begin - 1);
    bool ok = true;
    for (uint32_t i = 0; i < *size; ++i) {
      ok &= EntryOk(e[i], head);
      out[i] = Child{e[i].token, e[i].target, e[i].count};
    }
    return ok;  // (a damaged record is none: the caller enumerates the state's transitions)
  }
  // The same into *scratch (resized as needed): the record's children, or
  // an empty span when `state` has none (nothing resized without records).
  std::span<const Child> RecordChildren(uint64_t state, std::vector<Child>* scratch) const {
    if (!has_records()) return {};
    scratch->resize(options_.top_k);
    uint32_t size = 0;
    if (!RecordChildren(state, scratch->data(), &size)) return {};
    return std::span<const Child>(scratch->data(), size);
  }
  bool has_records() const { return records_.present(); }
  // True when the child records are the index file's RECS section (mapped,
  // shared by every process); false when Create() computed them or there
  // are none.
  bool records_from_file() const { return records_.present() && record_image_.size == 0; }
  // Bytes of the child records, wherever they are (0: none).
  size_t record_bytes() const { return records_.bytes; }
  // Starts loading the offset of `state`'s child record (none: nothing).
  void PrefetchRecord(uint64_t state) const {
    const uint64_t n = view_->num_tokens();
    if (state > n && state - n - 1 < records_.num_clones)
      __builtin_prefetch(&records_.record_begin[state - n - 1]);
  }

  // Records by where they are (their head's slot): what a drafter that
  // follows records from record to record reads, one record a cache miss,
  // without the state's offset. kNoRecord: none.
  static constexpr uint32_t kNoRecord = format::kNoRecord;
  // A record's head: the state's length and count, the record of its suffix
  // link (kNoRecord when the link has none: the root, a clone that occurs
  // too rarely), the number of children that follow, and whether the state
  // is a hub (then one more slot after them places its label table, so that
  // a transition its record lacks costs one probe of that table: NextAt).
  using RecordHead = format::RecordHeadSlot;
  // A child in a record: its token, target, the target's count and record;
  // for a position that occurs once (which has no record), the token after
  // it instead (its one continuation, a document end included:
  // separator()), so that a chain of such states starts without reading
  // the text. record_of_target() is the record, never such a token.
  struct RecordEntry : format::RecordEntrySlot {
    uint32_t record_of_target() const { return count > 1 ? record : kNoRecord; }
  };
  // The record of `state` (reads its offset), kNoRecord when it has none.
  uint32_t RecordOf(uint64_t state) const {
    uint32_t begin = 0, end = 0;
    return RecordRange(state, &begin, &end) ? begin - 1 : kNoRecord;
  }
  // The record of the suffix link of position `p` (a non-clone state),
  // kNoRecord when it has none (or there are no records).
  uint32_t PositionLinkRecord(uint64_t p) const {
    return p < records_.num_positions ? records_.position_link_record[p] : kNoRecord;
  }
  // The head of `record` (a RecordOf, a head's link_record or an entry's
  // record). Records read from a file are checked as they are read, so
  // that whatever the section holds nothing is read outside it and no
  // impossible value leaves it (--verify refuses such a file): here, that
  // the entries a head announces (and a hub's slot) lie inside the slots,
  // at most top_k, with a possible length and count; a head that fails
  // reads as a record without children (length 0, count 1, no link).
  RecordHead Head(uint32_t record) const {
    if (record >= records_.num_slots) return RecordHead{0, 1, kNoRecord, 0};
    const RecordHead h = std::bit_cast<RecordHead>(records_.slots[record]);
    if (records_trusted_ || PlausibleHead(record, h)) return h;
    return RecordHead{0, 1, kNoRecord, 0};
  }
  // Whether an entry of the record whose head is `head` may be used: always
  // for records computed here; for a file's, a vocabulary token, a target
  // that is a state other than the root, and a count from 1 to the head's.
  // Whoever reads an entry's token, target or count asks first (an entry
  // that fails is skipped, or ends a transition as none).
  bool EntryOk(const RecordEntry& e, const RecordHead& head) const {
    return records_trusted_ ||
           (e.token < view_->vocab_size() && e.target != format::kRoot &&
            e.target < view_->num_states() && e.count != 0 && e.count <= head.count);
  }
  const RecordEntry* Entries(uint32_t record) const {
    return static_cast<const RecordEntry*>(&records_.slots[record + 1]);
  }
  // The transition of the state of `record` (whose head is `head`) on a
  // token c its children lack, when the record does not hold all of them
  // (head.size() == top_k): a hub's label table (found through the record,
  // without the hub table's probe), else the edge filter and the edges;
  // `state` is the record's state. The same as Next(state, c).
  uint64_t NextAt(uint32_t record, const RecordHead& head, uint64_t state, uint32_t c) const {
    if (head.hub()) return HubNextAt(record + 1 + head.size(), c);
    if (c >= view_->vocab_size()) return format::kNoState;
    view_->PrefetchEdgeRange(state);  // overlaps the filter's cache miss
    if (!MayHaveEdge(state, c)) return format::kNoState;
    return view_->Next(state, c);
  }
  // Starts loading a record: its head and first children (two lines).
  void PrefetchRecordAt(uint32_t record) const {
    if (record >= records_.num_slots) return;
    const char* p = reinterpret_cast<const char*>(&records_.slots[record]);
    __builtin_prefetch(p);
    __builtin_prefetch(p + 64);
  }
  void PrefetchPositionLinkRecord(uint64_t p) const {
    if (p < records_.num_positions) __builtin_prefetch(&records_.position_link_record[p]);
  }
  // Same result as view().Next(v, c): transitions that the edge filter rules
  // out cost one cache line, hubs a probe of their label table. (On a corrupt
  // index whose select samples contradict its degree vector, which --verify
  // refuses, the two may differ; both stay bounded, see static_match.h.)
  uint64_t Next(uint64_t v, uint32_t c) const {
    const format::IndexView& view = *view_;
    if (v == format::kRoot || c >= view.vocab_size()) return view.Next(v, c);
    if (v < view.num_tokens() && view.Token(v + 1) == c) return v + 1;  // implicit v -> v+1
    // A state that occurs once continues only as its one occurrence does:
    // a non-clone state's other transitions exist only where its prefix
    // recurs (Count above 1). No filter, hub bit or edge read.
    if (v <= view.num_tokens() && view.Count(v) == 1) return format::kNoState;
    // A clone's child record holds its heaviest transitions, the likely
    // ones: one or two cache lines instead of the filter's and the edge
    // search's. A record shorter than top_k holds all of them (a clone has
    // no implicit transition; the record leaves out only document ends,
    // which c, a vocabulary token, is not), so a token it lacks has none.
    if (uint32_t begin = 0, end = 0; RecordRange(v, &begin, &end)) {
      const RecordHead head = Head(begin - 1);
      const RecordEntry* e = Entries(begin - 1);
      // A hub's long record (a shard's top_k is 32) is not searched: its
      // label table answers in one probe (TransferByRecords does the same).
      const uint32_t search = head.hub() && head.size() > 8 ? 0 : head.size();
      for (uint32_t i = 0; i < search; ++i)
        if (e[i].token == c) return EntryOk(e[i], head) ? e[i].target : format::kNoState;
      if (search == head.size() && head.size() < options_.top_k) return format::kNoState;
      return NextAt(begin - 1, head, v, c);
    }
    if (IsHub(v)) return HubNext(v, c);  // its label table answers as fast as the filter
    view.PrefetchEdgeRange(v);  // overlaps the filter's cache miss; used if it says maybe
    if (!MayHaveEdge(v, c)) return format::kNoState;
    return view.Next(v, c);
  }
  bool IsHub(uint64_t v) const { return hubs_.IsHub(v); }
  // Starts loading what IsHub(v) reads.
  void PrefetchHubBit(uint64_t v) const {
    if (v < hubs_.bit_words * 64) __builtin_prefetch(&hubs_.bits[v >> 6]);
  }
  // False when v, which is not a hub, certainly has no explicit transition
  // on c (the filter leaves hubs out); true when it may have one, or when
  // there is no filter.
  bool MayHaveEdge(uint64_t v, uint32_t c) const {
    return !filter_.present() || filter_.MayContain(v, c);
  }
  size_t num_hubs() const { return hubs_.num_hubs; }
  // Bytes of the edge filter (0 without one) and of the hub tables, wherever
  // they are; memory_bytes(): what this object keeps in private memory (the
  // hub tables and filter only when Create() computed them, and records).
  size_t filter_bytes() const { return filter_bytes_; }
  size_t hub_bytes() const { return hub_bytes_; }
  size_t memory_bytes() const;

 private:
  // The slots of the child record of `state` after its head: [*begin,
  // *end); false when it has none (not a clone, no records, not one of its
  // clones, or offsets that do not place one inside the slots).
  bool RecordRange(uint64_t state, uint32_t* begin, uint32_t* end) const {
    const uint64_t n = view_->num_tokens();
    if (state <= n || state - n - 1 >= records_.num_clones) return false;
    *begin = records_.record_begin[state - n - 1];
    *end = records_.record_begin[state - n];
    if (*begin >= *end || *end > records_.num_slots) return false;
    ++*begin;  // the head
    return true;
  }
  // Whether the head `h` at slot `record` of a file's records announces
  // at most top_k entries (and a hub's slot) inside the slots, with a
  // possible length and count.
  bool PlausibleHead(uint32_t record, const RecordHead& h) const {
    const uint64_t n = view_->num_tokens();
    return h.bits >> 9 == 0 && h.size() <= options_.top_k &&
           h.size() + uint64_t{h.hub()} < records_.num_slots - record && h.count != 0 &&
           h.count <= n && h.len <= n;
  }
  // Throws kInvalidArgument, naming `caller`, for options out of range.
  static void CheckOptions(const Options& options, const char* caller);
  // HubNext through a hub record's slot that places its label table
  // (BuildRecords): slot_begin, num_slots, and edge_begin's two halves.
  uint64_t HubNextAt(uint32_t hub_slot, uint32_t c) const;
  // Adopts the file's RECS section when it fits `options`, else computes
  // the records when they ask for them.
  void SetUpRecords(const Options& options);

  using HubEntry = format::HubEntry;
  using LabelSlot = format::LabelSlot;

  StaticIndex() = default;
  // The hub table's entry of `state`; nullptr when it has none (a state
  // that is not a hub, or a corrupt table).
  const HubEntry* HubOf(uint64_t state) const;
  // The transition on c through a hub's label table (slots [slot_begin, +
  // num_slots), edges from edge_begin): bounded whatever the table holds.
  uint64_t LabelTableNext(uint64_t slot_begin, uint64_t num_slots, uint64_t edge_begin,
                          uint32_t c) const;
  uint64_t HubNext(uint64_t v, uint32_t c) const;

  const format::IndexView* view_ = nullptr;
  std::shared_ptr<const format::IndexView> owner_;  // view_'s owner; null when borrowed
  Options options_;
  // The hub tables and the edge filter: the file's sections, or images_.
  format::HubTables hubs_;
  format::EdgeFilter filter_;
  format::AcceleratorImages images_;  // computed by Create() (empty when from the file)
  size_t hub_bytes_ = 0, filter_bytes_ = 0;
  bool from_file_ = false;
  bool prepared_ = true;  // false: Bare()
  // Child records: the file's RECS section or record_image_ (computed).
  format::ChildRecords records_;
  format::ChildRecordImage record_image_;
  bool records_trusted_ = true;  // computed here: Head() need not check them
};

// The default options, with child records at kChildRecordMinCount when
// `child_records`: what SAM_OPEN_CHILD_RECORDS, Python's
// Index.open(child_records=True) and sam-replay --child-records prepare.
inline StaticIndex::Options PrepareOptions(bool child_records) {
  StaticIndex::Options options;
  if (child_records) options.record_min_count = kChildRecordMinCount;
  return options;
}

// The StaticIndex that the sessions of an opened index file attach, as
// sam_index_open and Python's Index.open give it: with `prepare` or
// `child_records`, Create with PrepareOptions(child_records) (the file's
// sections when they fit, else computed at open); without, FromFile (what
// the file holds, nothing computed: a plain automaton when it has none).
inline std::shared_ptr<const StaticIndex> IndexForOpen(std::shared_ptr<const format::IndexView> view,
                                                       bool prepare, bool child_records) {
  if (prepare || child_records)
    return StaticIndex::Create(std::move(view), PrepareOptions(child_records));
  return StaticIndex::FromFile(std::move(view), PrepareOptions(false));
}

}  // namespace sam::runtime

#endif  // SAM_RUNTIME_STATIC_INDEX_H_
