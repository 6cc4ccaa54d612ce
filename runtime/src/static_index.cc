#include "sam/runtime/static_index.h"

#include <algorithm>
#include <bit>
#include <string>
#include <utility>

#include "index_children.h"
#include "sam/error.h"

namespace sam::runtime {

namespace {

// Label table slots of a hub of `degree` explicit transitions.
inline uint64_t LabelSlotsFor(uint64_t degree) { return degree + degree / 2 + 1; }

inline uint64_t HashState(uint64_t state, uint64_t mask) {
  uint64_t x = state * 0x9E3779B97F4A7C15ull;
  x ^= x >> 29;
  return x & mask;
}

}  // namespace

std::shared_ptr<const StaticIndex> StaticIndex::Create(
    std::shared_ptr<const format::IndexView> view, const Options& options) {
  if (view == nullptr)
    throw Error(ErrorCode::kInvalidArgument, "StaticIndex::Create: null index view");
  // Create() made a non-const object: it may be completed here.
  std::shared_ptr<StaticIndex> index = std::const_pointer_cast<StaticIndex>(Create(view.get(), options));
  index->owner_ = std::move(view);
  return index;
}

std::shared_ptr<const StaticIndex> StaticIndex::Bare(
    std::shared_ptr<const format::IndexView> view) {
  std::shared_ptr<StaticIndex> index = std::const_pointer_cast<StaticIndex>(Bare(view.get()));
  index->owner_ = std::move(view);
  return index;
}

std::shared_ptr<const StaticIndex> StaticIndex::Bare(const format::IndexView* view) {
  if (view == nullptr)
    throw Error(ErrorCode::kInvalidArgument, "StaticIndex::Bare: null index view");
  std::shared_ptr<StaticIndex> index(new StaticIndex());
  index->view_ = view;
  index->options_.filter_bits_per_edge = 0;  // what it holds: nothing
  index->prepared_ = false;
  return index;
}

std::shared_ptr<const StaticIndex> StaticIndex::Create(const format::IndexView* view,
                                                       const Options& options) {
  if (view == nullptr)
    throw Error(ErrorCode::kInvalidArgument, "StaticIndex::Create: null index view");
  if (options.top_k == 0 || options.top_k > 255)
    throw Error(ErrorCode::kInvalidArgument, "StaticIndex::Create: top_k must be in 1..255");
  if (options.filter_bits_per_edge > 64)
    throw Error(ErrorCode::kInvalidArgument,
                "StaticIndex::Create: filter_bits_per_edge must be at most 64");
  std::shared_ptr<StaticIndex> index(new StaticIndex());
  index->view_ = view;
  index->options_ = options;
  const uint64_t min_degree = std::max<uint64_t>(options.min_degree, 1);

  if (options.filter_bits_per_edge > 0 && view->num_edges() > 0) {
    const uint64_t bits = view->num_edges() * options.filter_bits_per_edge;
    index->filter_.assign(std::max<uint64_t>(1, (bits + 511) / 512) * kFilterWords, 0);
  }
  // Hubs and the filter: consecutive states' explicit edge ranges are
  // adjacent, so one pass over the states finds them. (The root has its own
  // table and is no hub.) Labels are those IndexView::Next compares; corrupt
  // targets and document ends, which it never returns, are left out.
  // Edges go through the filter in batches, each stage prefetching what the
  // next one reads (a clone's first end position, the token there, the filter
  // block), so that the random reads of a batch overlap.
  // Hubs with their edge ranges as this pass finds them: tables built from
  // them take O(edges) in all even on a corrupt index (where select samples
  // that disagree with the degree vector could give other ranges).
  struct Hub {
    uint64_t state, lo, hi;
  };
  std::vector<Hub> hubs;
  const uint64_t num_states = view->num_states();
  const uint64_t n = view->num_tokens();
  const format::PackedView& edges = view->edges();
  constexpr size_t kBatch = 256;
  std::vector<std::pair<uint64_t, uint64_t>> batch;  // (state, target)
  std::vector<uint64_t> hashes;
  batch.reserve(kBatch + 4096);
  auto flush = [&] {
    for (const auto& [v, t] : batch)
      if (t > n) view->clone_min_endpos().Prefetch(t - n - 1);
    for (const auto& [v, t] : batch) {
      const uint64_t end = view->MinEndpos(t);
      if (end != 0) view->text().Prefetch(end - 1);
    }
    hashes.clear();
    for (const auto& [v, t] : batch) {
      const uint32_t label = view->LastToken(t);
      if (label >= view->vocab_size()) continue;
      hashes.push_back(EdgeHash(v, label));
      __builtin_prefetch(&index->filter_[index->FilterBlock(hashes.back()) * kFilterWords], 1);
    }
    for (uint64_t h : hashes) index->AddHash(h);
    batch.clear();
  };
  view->ForEachEdgeRange([&](uint64_t v, uint64_t lo, uint64_t hi) {
    if (v == format::kRoot) return;
    if (hi - lo >= min_degree) hubs.push_back(Hub{v, lo, hi});
    if (index->filter_.size() == 0) return;
    for (uint64_t e = lo; e < hi; ++e) {
      const uint64_t t = edges.Get(e);
      if (t != format::kRoot && t < num_states) batch.emplace_back(v, t);
    }
    if (batch.size() >= kBatch) flush();
  });
  flush();
  index->num_hubs_ = hubs.size();
  uint64_t table_size = 16;
  while (table_size < 2 * hubs.size()) table_size *= 2;
  index->mask_ = table_size - 1;
  index->hub_table_.assign(table_size, HubEntry{});
  index->hub_bits_.assign((num_states + 63) / 64, 0);
  // Label tables: per hub, open addressing over degree * 3/2 slots (at least
  // one empty, so that a search for an absent label ends).
  uint64_t total_slots = 0;
  std::vector<uint64_t> slot_begin(hubs.size() + 1, 0);
  for (size_t h = 0; h < hubs.size(); ++h) {
    slot_begin[h] = total_slots;
    total_slots += LabelSlotsFor(hubs[h].hi - hubs[h].lo);
  }
  slot_begin[hubs.size()] = total_slots;
  // Decided by the file's state width (not by the state count), so that an
  // index written with wide widths on a small corpus (the builder's
  // min_width, a test of the 64-bit paths) takes the offset path.
  index->slots_hold_targets_ = view->edges().width() <= 32;
  index->label_slots_.assign(total_slots, LabelSlot{format::kNoToken, 0});
  index->sizes_.assign(hubs.size(), 0);
  index->children_.resize(hubs.size() * options.top_k);
  for (uint32_t h = 0; h < hubs.size(); ++h) {
    const auto [v, lo, hi] = hubs[h];
    index->hub_bits_[v >> 6] |= uint64_t{1} << (v & 63);
    const uint64_t m = slot_begin[h + 1] - slot_begin[h];
    LabelSlot* table = &index->label_slots_[slot_begin[h]];
    for (uint64_t e = lo; e < hi; ++e) {
      // The labels IndexView::Next compares; corrupt targets (kNoToken) and
      // repeated labels (only in a corrupt index) are left out.
      const uint64_t t = view->edges().Get(e);
      if (t == format::kRoot || t >= num_states) continue;
      const uint32_t label = view->LastToken(t);
      if (label == format::kNoToken) continue;
      uint64_t i = LabelSlotOf(label, m);
      while (table[i].label != format::kNoToken && table[i].label != label) i = i + 1 == m ? 0 : i + 1;
      if (table[i].label == format::kNoToken)
        table[i] = LabelSlot{label, static_cast<uint32_t>(index->slots_hold_targets_ ? t : e - lo)};
    }
    uint64_t i = HashState(v, index->mask_);
    while (index->hub_table_[i].key != 0) i = (i + 1) & index->mask_;
    index->hub_table_[i] = HubEntry{v + 1, lo, slot_begin[h], static_cast<uint32_t>(m), h};
    index->sizes_[h] = static_cast<uint8_t>(
        internal::TopChildrenOf(*view, v, lo, hi, static_cast<uint32_t>(options.top_k),
                                &index->children_[h * options.top_k]));
  }
  if (options.record_min_count > 0) index->BuildRecords(options);
  return index;
}

void StaticIndex::BuildRecords(const Options& options) {
  const format::IndexView& view = *view_;
  const uint64_t n = view.num_tokens();
  const uint64_t clones = view.num_clones();
  // 32-bit fields: targets (states), counts and lengths (at most the number
  // of tokens) and record offsets.
  if (clones == 0 || view.num_states() > UINT32_MAX || n > UINT32_MAX) return;
  // Which clones get a record: those that occur often enough (a hub's
  // children are those of its table, so that a step to its record from a
  // suffix link or a parent finds them there too).
  auto wanted = [&](uint64_t v) { return v > n && view.Count(v) >= options.record_min_count; };
  // A hub's record places its label table in one more slot (32-bit fields).
  auto hub_slot = [&](uint64_t v) { return IsHub(v) && label_slots_.size() <= UINT32_MAX; };
  // First pass: a head and at most min(top_k, explicit transitions)
  // children per record (a clone has no implicit one), so the records are
  // written in place in one array of that size, not collected and copied
  // (peak memory once).
  uint64_t bound = 0, ranges = 0;
  view.ForEachEdgeRange([&](uint64_t v, uint64_t lo, uint64_t hi) {
    if (v <= n) return;
    ++ranges;
    if (wanted(v)) bound += 1 + std::min<uint64_t>(options.top_k, hi - lo) + (hub_slot(v) ? 1 : 0);
  });
  if (ranges != clones || bound >= kNoRecord) return;  // (a corrupt degree vector: no records)
  format::HugeArray<uint32_t> begin;
  format::HugeArray<Record> records;
  begin.assign(clones + 1, 0);
  records.assign(bound, Record{0, 0, 0, kNoRecord});
  std::vector<Child> top(options.top_k);
  uint64_t c = 0, size = 0;
  bool ok = true;
  view.ForEachEdgeRange([&](uint64_t v, uint64_t lo, uint64_t hi) {
    if (v <= n || !ok) return;
    if (c >= clones) {  // the degree vector changed between passes: impossible, but no overrun
      ok = false;
      return;
    }
    begin[c++] = static_cast<uint32_t>(size);
    if (!wanted(v)) return;
    const uint32_t k = internal::TopChildrenOf(view, v, lo, hi,
                                               static_cast<uint32_t>(options.top_k), top.data());
    const bool hub = hub_slot(v);
    if (size + 1 + k + hub > bound) {
      ok = false;
      return;
    }
    // The head's link_record and the children's records are known once
    // every record has its place (below).
    records[size++] = std::bit_cast<Record>(RecordHead{static_cast<uint32_t>(view.Len(v)),
                                                       static_cast<uint32_t>(view.Count(v)),
                                                       kNoRecord, k | uint32_t{hub} << 8});
    for (uint32_t i = 0; i < k; ++i)
      records[size++] = Record{top[i].token, static_cast<uint32_t>(top[i].target),
                               static_cast<uint32_t>(top[i].count), kNoRecord};
    if (hub) {  // where its label table is (the hub table's entry, copied)
      const HubEntry& e = HubOf(v);
      records[size++] = Record{static_cast<uint32_t>(e.slot_begin), e.num_slots,
                               static_cast<uint32_t>(e.edge_begin),
                               static_cast<uint32_t>(e.edge_begin >> 32)};
    }
  });
  if (!ok || c != clones) return;
  begin[clones] = static_cast<uint32_t>(size);
  record_begin_ = std::move(begin);
  records_ = std::move(records);
  // The links: each record's head gets its suffix link's record, each child
  // entry its target's, each position its suffix link's.
  auto entry_record = [&](const Record& e) -> uint32_t {
    // A position that occurs once: the token after it (the implicit
    // transition, IndexView::Next's; the separator at a document end).
    // Anything else its record, a clone that a corrupt file says occurs
    // once included (record_of_target() then hides it, nothing reads it
    // as a token).
    return e.count > 1 || e.target > n ? RecordOf(e.target)
           : e.target < n              ? view.Token(e.target + 1)
                                       : view.separator();
  };
  auto link = [&] {
    for (uint64_t k = 0; k < clones; ++k) {
      const uint32_t head = record_begin_[k];
      if (head == record_begin_[k + 1]) continue;
      RecordHead h = Head(head);
      h.link_record = RecordOf(view.Link(n + 1 + k));
      records_[head] = std::bit_cast<Record>(h);
      for (uint32_t i = head + 1; i < head + 1 + h.size(); ++i)
        records_[i].record = entry_record(records_[i]);
    }
  };
  link();
  position_link_record_.assign(n + 1, kNoRecord);
  for (uint64_t p = 1; p <= n; ++p) position_link_record_[p] = RecordOf(view.Link(p));
}

void StaticIndex::AddHash(uint64_t h) {
  uint64_t* block = &filter_[FilterBlock(h) * kFilterWords];
  uint64_t bits = h * 0x9E3779B97F4A7C15ull;
  for (size_t w = 0; w < kFilterWords; ++w, bits >>= 6) block[w] |= uint64_t{1} << (bits & 63);
}

uint64_t StaticIndex::HubNextAt(uint32_t hub_slot, uint32_t c) const {
  const Record& h = records_[hub_slot];
  const uint64_t edge_begin = h.count | uint64_t{h.record} << 32;
  const LabelSlot* table = &label_slots_[h.token];
  for (uint64_t i = LabelSlotOf(c, h.target);; i = i + 1 == h.target ? 0 : i + 1) {
    if (table[i].label == c)
      return slots_hold_targets_ ? table[i].value : view_->edges().Get(edge_begin + table[i].value);
    if (table[i].label == format::kNoToken) return format::kNoState;
  }
}

const StaticIndex::HubEntry& StaticIndex::HubOf(uint64_t state) const {
  uint64_t i = HashState(state, mask_);
  while (hub_table_[i].key != state + 1) i = (i + 1) & mask_;
  return hub_table_[i];
}

bool StaticIndex::TopChildren(uint64_t state, std::span<const Child>* children) const {
  if (!IsHub(state)) return false;
  const uint32_t h = HubOf(state).hub;
  *children = std::span<const Child>(&children_[h * options_.top_k], sizes_[h]);
  return true;
}

uint64_t StaticIndex::HubNext(uint64_t v, uint32_t c) const {
  // Next() has ruled out the root, out-of-vocabulary tokens and v -> v+1.
  const HubEntry& hub = HubOf(v);
  const LabelSlot* table = &label_slots_[hub.slot_begin];
  for (uint64_t i = LabelSlotOf(c, hub.num_slots);; i = i + 1 == hub.num_slots ? 0 : i + 1) {
    if (table[i].label == c)
      return slots_hold_targets_ ? table[i].value
                                 : view_->edges().Get(hub.edge_begin + table[i].value);
    if (table[i].label == format::kNoToken) return format::kNoState;
  }
}

size_t StaticIndex::memory_bytes() const {
  return sizeof(*this) + hub_table_.bytes() + hub_bits_.bytes() + label_slots_.bytes() +
         sizes_.capacity() + children_.capacity() * sizeof(Child) + filter_bytes() +
         record_bytes();
}

}  // namespace sam::runtime
