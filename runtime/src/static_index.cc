#include "sam/runtime/static_index.h"

#include <algorithm>
#include <bit>
#include <string>
#include <utility>

#include "index_children.h"
#include "sam/error.h"

namespace sam::runtime {

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
  const uint32_t min_degree =
      static_cast<uint32_t>(std::clamp<uint64_t>(options.min_degree, 1, UINT32_MAX));
  // The file's own sections when they were built with these parameters
  // (child lists at least as long: the first top_k of a longer list are the
  // same children); otherwise computed here, the same way sam-build does.
  const format::HubTables& file_hubs = view->hubs();
  const format::EdgeFilter& file_filter = view->edge_filter();
  const bool hubs_fit = file_hubs.present() && file_hubs.min_degree == min_degree &&
                        file_hubs.top_k >= options.top_k;
  const bool filter_fits = options.filter_bits_per_edge == 0 ||
                           view->num_edges() == 0 ||
                           (file_filter.present() &&
                            file_filter.bits_per_edge == options.filter_bits_per_edge &&
                            file_filter.min_degree == min_degree);
  if (hubs_fit && filter_fits) {
    index->hubs_ = file_hubs;
    if (options.filter_bits_per_edge > 0) index->filter_ = file_filter;
    index->from_file_ = true;
  } else {
    const format::AcceleratorParams params{min_degree, static_cast<uint32_t>(options.top_k),
                                           options.filter_bits_per_edge};
    index->images_ = format::BuildAccelerators(*view, params);
    auto bytes = [](const format::HugeBuffer& b) {
      return std::span<const uint8_t>(static_cast<const uint8_t*>(b.data()), b.size());
    };
    index->hubs_ = format::ParseHubTables(bytes(index->images_.hubs), *view, "StaticIndex");
    if (index->images_.filter.size() != 0)
      index->filter_ = format::ParseEdgeFilter(bytes(index->images_.filter), *view, "StaticIndex");
  }
  index->hub_bytes_ = index->hubs_.present()
                          ? sizeof(format::HubEntry) * (index->hubs_.mask + 1) +
                                8 * index->hubs_.bit_words +
                                sizeof(format::LabelSlot) * index->hubs_.num_slots +
                                index->hubs_.num_hubs * (1 + sizeof(Child) * index->hubs_.top_k)
                          : 0;
  index->filter_bytes_ = index->filter_.present() ? index->filter_.blocks * 64 : 0;
  if (options.record_min_count > 0) index->BuildRecords(options);
  return index;
}

void StaticIndex::BuildRecords(const Options& options) {
  const format::IndexView& view = *view_;
  const uint64_t n = view.num_tokens();
  const uint64_t clones = view.num_clones();
  // 32-bit fields: targets (states), counts and lengths (at most the number
  // of tokens) and record offsets.
  if (clones == 0 || view.num_states() > UINT32_MAX || n > UINT32_MAX ||
      hubs_.num_slots > UINT32_MAX)
    return;
  // Which clones get a record: those that occur often enough (a hub's
  // children are those of its table, so that a step to its record from a
  // suffix link or a parent finds them there too).
  auto wanted = [&](uint64_t v) { return v > n && view.Count(v) >= options.record_min_count; };
  // A hub's record places its label table in one more slot (32-bit fields).
  auto hub_slot = [&](uint64_t v) { return IsHub(v) && HubOf(v) != nullptr; };
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
      const HubEntry& e = *HubOf(v);
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

uint64_t StaticIndex::LabelTableNext(uint64_t slot_begin, uint64_t num_slots,
                                     uint64_t edge_begin, uint32_t c) const {
  if (num_slots == 0 || slot_begin > hubs_.num_slots || num_slots > hubs_.num_slots - slot_begin)
    return format::kNoState;  // (a corrupt table)
  const LabelSlot* table = &hubs_.slots[slot_begin];
  uint64_t i = format::LabelSlotOf(c, num_slots);
  for (uint64_t probes = 0; probes < num_slots; ++probes, i = i + 1 == num_slots ? 0 : i + 1) {
    if (table[i].label == c) {
      if (hubs_.slots_hold_targets)
        return table[i].value < view_->num_states() ? table[i].value : format::kNoState;
      const uint64_t e = edge_begin + table[i].value;
      return e < view_->num_edges() ? view_->edges().Get(e) : format::kNoState;
    }
    if (table[i].label == format::kNoToken) return format::kNoState;
  }
  return format::kNoState;
}

uint64_t StaticIndex::HubNextAt(uint32_t hub_slot, uint32_t c) const {
  const Record& h = records_[hub_slot];
  return LabelTableNext(h.token, h.target, h.count | uint64_t{h.record} << 32, c);
}

const StaticIndex::HubEntry* StaticIndex::HubOf(uint64_t state) const {
  uint64_t i = format::HubSlotOf(state, hubs_.mask);
  for (uint64_t probes = 0; probes <= hubs_.mask; ++probes, i = (i + 1) & hubs_.mask) {
    if (hubs_.table[i].key == state + 1) return &hubs_.table[i];
    if (hubs_.table[i].key == 0) return nullptr;
  }
  return nullptr;
}

bool StaticIndex::TopChildren(uint64_t state, std::span<const Child>* children) const {
  if (!IsHub(state)) return false;
  const HubEntry* e = HubOf(state);
  if (e == nullptr || e->hub >= hubs_.num_hubs) return false;
  const size_t size = std::min<size_t>(hubs_.sizes[e->hub], options_.top_k);
  const Child* list = &hubs_.children[uint64_t{e->hub} * hubs_.top_k];
  // Children of this state (a corrupt list is no list: the caller scans).
  const uint64_t count = view_->Count(state);
  for (size_t i = 0; i < size; ++i)
    if (list[i].target == format::kRoot || list[i].target >= view_->num_states() ||
        list[i].token >= view_->vocab_size() || list[i].count == 0 || list[i].count > count)
      return false;
  *children = std::span<const Child>(list, size);
  return true;
}

uint64_t StaticIndex::HubNext(uint64_t v, uint32_t c) const {
  // Next() has ruled out the root, out-of-vocabulary tokens and v -> v+1.
  const HubEntry* hub = HubOf(v);
  if (hub == nullptr) return view_->Next(v, c);
  return LabelTableNext(hub->slot_begin, hub->num_slots, hub->edge_begin, c);
}

size_t StaticIndex::memory_bytes() const {
  return sizeof(*this) + images_.hubs.size() + images_.filter.size() + record_bytes();
}

}  // namespace sam::runtime
