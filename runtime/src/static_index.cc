#include "sam/runtime/static_index.h"

#include <algorithm>
#include <string>
#include <utility>

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

// The file's own sections when they were built with these parameters
// (child lists at least as long: the first top_k of a longer list are the
// same children); otherwise Create computes them, the same way sam-build does.
bool StaticIndex::FileSectionsFit(const format::IndexView& view, const Options& options) {
  const uint32_t min_degree =
      static_cast<uint32_t>(std::clamp<uint64_t>(options.min_degree, 1, UINT32_MAX));
  const format::HubTables& hubs = view.hubs();
  const format::EdgeFilter& filter = view.edge_filter();
  const bool hubs_fit =
      hubs.present() && hubs.min_degree == min_degree && hubs.top_k >= options.top_k;
  const bool filter_fits = options.filter_bits_per_edge == 0 || view.num_edges() == 0 ||
                           (filter.present() && filter.bits_per_edge == options.filter_bits_per_edge &&
                            filter.min_degree == min_degree);
  return hubs_fit && filter_fits;
}

void StaticIndex::CheckOptions(const Options& options, const char* caller) {
  if (options.top_k == 0 || options.top_k > 255)
    throw Error(ErrorCode::kInvalidArgument, std::string(caller) + ": top_k must be in 1..255");
  if (options.filter_bits_per_edge > 64)
    throw Error(ErrorCode::kInvalidArgument,
                std::string(caller) + ": filter_bits_per_edge must be at most 64");
}

std::shared_ptr<const StaticIndex> StaticIndex::FromFile(
    std::shared_ptr<const format::IndexView> view, const Options& options) {
  if (view == nullptr)
    throw Error(ErrorCode::kInvalidArgument, "StaticIndex::FromFile: null index view");
  CheckOptions(options, "StaticIndex::FromFile");
  if (!FileSectionsFit(*view, options)) return Bare(std::move(view));
  // Records only as the file holds them (record_min_count 0 takes the
  // file's RECS when they fit): none are computed.
  Options from_file = options;
  from_file.record_min_count = 0;
  return Create(std::move(view), from_file);
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
  CheckOptions(options, "StaticIndex::Create");
  std::shared_ptr<StaticIndex> index(new StaticIndex());
  index->view_ = view;
  index->options_ = options;
  const uint32_t min_degree =
      static_cast<uint32_t>(std::clamp<uint64_t>(options.min_degree, 1, UINT32_MAX));
  const format::HubTables& file_hubs = view->hubs();
  const format::EdgeFilter& file_filter = view->edge_filter();
  if (FileSectionsFit(*view, options)) {
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
  index->SetUpRecords(options);
  return index;
}

void StaticIndex::SetUpRecords(const Options& options) {
  const format::IndexView& view = *view_;
  const format::ChildRecords& file = view.child_records();
  // The file's records when they were built over these hub tables (the
  // file's, with this top_k) and the options ask for none or for the same.
  // (1 asks for what 2 gives: every clone occurs at least twice.)
  const uint64_t min_count = std::clamp<uint64_t>(options.record_min_count, 2, UINT32_MAX);
  if (file.present() && from_file_ && file.top_k == options.top_k &&
      (options.record_min_count == 0 || min_count == file.min_count)) {
    records_ = file;
    records_trusted_ = false;
    return;
  }
  if (options.record_min_count == 0 || !hubs_.present()) return;
  const format::ChildRecordParams params{static_cast<uint32_t>(min_count),
                                         static_cast<uint32_t>(options.top_k)};
  record_image_ = format::BuildChildRecords(view, hubs_, params);
  if (record_image_.size == 0) return;  // (too large for 32-bit records)
  records_ = format::ParseChildRecords(record_image_.bytes(), view, "StaticIndex");
  records_trusted_ = true;
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
  const format::RecordEntrySlot& h = records_.slots[hub_slot];
  return LabelTableNext(h.token, h.target, h.count | uint64_t{h.record} << 32, c);
}

const StaticIndex::HubEntry* StaticIndex::HubOf(uint64_t state) const {
  return format::FindHub(hubs_, state);
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
  return sizeof(*this) + images_.hubs.size() + images_.filter.size() + record_image_.size;
}

}  // namespace sam::runtime
