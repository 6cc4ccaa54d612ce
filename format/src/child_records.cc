// The RECS section (FORMAT.md section 13): built from an index's automaton
// and hub tables in two passes over its edge ranges, parsed in place in O(1).
#include "sam/format/child_records.h"

#include <algorithm>
#include <bit>
#include <cstring>
#include <vector>

#include "layout.h"
#include "sam/format/error.h"
#include "sam/format/index.h"

namespace sam::format {
namespace {

using layout::AlignUp;
using layout::Read32;
using layout::Read64;
using layout::Write32;
using layout::Write64;

constexpr uint32_t kImageVersion = 1;
constexpr uint64_t kHeadBytes = 64;

// RECS head field offsets.
enum : uint32_t {
  kRecVersion = 0,
  kRecMinCount = 4,
  kRecTopK = 8,
  kRecFlags = 12,
  kRecClones = 16,
  kRecSlots = 24,
  kRecPositions = 32,
};

// Where each array of a RECS image starts (every one 64-byte aligned).
struct RecordLayout {
  uint64_t begin, slots, links, end;
};
RecordLayout LayoutOf(uint64_t clones, uint64_t slots, uint64_t positions) {
  RecordLayout l;
  l.begin = kHeadBytes;
  l.slots = l.begin + AlignUp((clones + 1) * 4, 64);
  l.links = l.slots + AlignUp(slots * sizeof(RecordEntrySlot), 64);
  l.end = l.links + positions * 4;
  return l;
}

[[noreturn]] void Corrupt(const std::string& file, const std::string& what) {
  throw FormatError(ErrorCode::kCorruptStructure, ErrorContext{.file = file}, "RECS: " + what);
}

}  // namespace

ChildRecordImage BuildChildRecords(const IndexView& view, const HubTables& hubs,
                                   const ChildRecordParams& params) {
  auto invalid = [](const std::string& what) {
    throw FormatError(ErrorCode::kInvalidArgument, ErrorContext{}, "child records: " + what);
  };
  if (params.min_count < 2) invalid("min_count must be at least 2");
  if (!hubs.present()) invalid("they need the index's hub tables");
  if (params.top_k == 0 || params.top_k > 255) invalid("top_k must be in 1..255");
  ChildRecordImage out;
  const uint64_t n = view.num_tokens();
  const uint64_t clones = view.num_clones();
  // 32-bit fields: targets (states), counts and lengths (at most the number
  // of tokens), record slots and label slots.
  if (view.num_states() > UINT32_MAX || n >= UINT32_MAX || hubs.num_slots > UINT32_MAX)
    return out;
  // Which clones get a record: those that occur often enough (a hub's
  // children are those of its list, so that a step to its record from a
  // suffix link or a parent finds them there too).
  auto wanted = [&](uint64_t v) { return view.Count(v) >= params.min_count; };
  auto hub_entry = [&](uint64_t v) { return hubs.IsHub(v) ? FindHub(hubs, v) : nullptr; };
  // First pass: a head and at most min(top_k, explicit transitions) children
  // per record (a clone has no implicit one), so the records are written in
  // place into one image of that size (the document ends a record leaves
  // out only shorten it).
  uint64_t bound = 0, ranges = 0;
  view.ForEachEdgeRange([&](uint64_t v, uint64_t lo, uint64_t hi) {
    if (v <= n) return;
    ++ranges;
    if (wanted(v))
      bound += 1 + std::min<uint64_t>(params.top_k, hi - lo) + (hub_entry(v) != nullptr ? 1 : 0);
  });
  if (ranges != clones || bound >= kNoRecord) return out;  // (a corrupt degree vector: none)
  const RecordLayout most = LayoutOf(clones, bound, n + 1);
  out.buffer = HugeBuffer(most.end);
  auto* base = static_cast<uint8_t*>(out.buffer.data());
  std::memset(base, 0, most.slots);
  auto* begin = reinterpret_cast<uint32_t*>(base + most.begin);
  auto* slots = reinterpret_cast<RecordEntrySlot*>(base + most.slots);
  std::vector<HubChild> top(params.top_k);
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
    const uint32_t k = TopChildren(view, v, lo, hi, params.top_k, top.data());
    const HubEntry* hub = hub_entry(v);
    if (size + 1 + k + (hub != nullptr) > bound) {
      ok = false;
      return;
    }
    // The head's link_record and the children's records are known once
    // every record has its place (below).
    slots[size++] = std::bit_cast<RecordEntrySlot>(
        RecordHeadSlot{static_cast<uint32_t>(view.Len(v)), static_cast<uint32_t>(view.Count(v)),
                       kNoRecord, k | uint32_t{hub != nullptr} << 8});
    for (uint32_t i = 0; i < k; ++i)
      slots[size++] = RecordEntrySlot{top[i].token, static_cast<uint32_t>(top[i].target),
                                      static_cast<uint32_t>(top[i].count), kNoRecord};
    if (hub != nullptr)  // where its label table is (the hub table's entry, copied)
      slots[size++] = RecordEntrySlot{static_cast<uint32_t>(hub->slot_begin), hub->num_slots,
                                      static_cast<uint32_t>(hub->edge_begin),
                                      static_cast<uint32_t>(hub->edge_begin >> 32)};
  });
  if (!ok || c != clones) return ChildRecordImage{};
  begin[clones] = static_cast<uint32_t>(size);
  auto record_of = [&](uint64_t state) -> uint32_t {
    if (state <= n || state - n - 1 >= clones) return kNoRecord;
    const uint64_t k = state - n - 1;
    return begin[k] == begin[k + 1] ? kNoRecord : begin[k];
  };
  // The links: each record's head gets its suffix link's record, each child
  // its target's (a target that occurs once: the token after it), each
  // position its suffix link's.
  for (uint64_t k = 0; k < clones; ++k) {
    if (begin[k] == begin[k + 1]) continue;
    RecordHeadSlot h = std::bit_cast<RecordHeadSlot>(slots[begin[k]]);
    h.link_record = record_of(view.Link(n + 1 + k));
    slots[begin[k]] = std::bit_cast<RecordEntrySlot>(h);
    for (uint32_t i = begin[k] + 1; i < begin[k] + 1 + h.size(); ++i) {
      RecordEntrySlot& e = slots[i];
      e.record = e.count > 1 || e.target > n ? record_of(e.target)
                 : e.target < n              ? view.Token(e.target + 1)
                                             : view.separator();
    }
  }
  const RecordLayout l = LayoutOf(clones, size, n + 1);
  std::memset(base + most.slots + size * sizeof(RecordEntrySlot), 0,
              l.links - (most.slots + size * sizeof(RecordEntrySlot)));
  auto* links = reinterpret_cast<uint32_t*>(base + l.links);
  links[0] = kNoRecord;
  for (uint64_t p = 1; p <= n; ++p) links[p] = record_of(view.Link(p));
  Write32(base + kRecVersion, kImageVersion);
  Write32(base + kRecMinCount, params.min_count);
  Write32(base + kRecTopK, params.top_k);
  Write32(base + kRecFlags, 0);
  Write64(base + kRecClones, clones);
  Write64(base + kRecSlots, size);
  Write64(base + kRecPositions, n + 1);
  out.size = l.end;
  return out;
}

ChildRecords ParseChildRecords(std::span<const uint8_t> bytes, const IndexView& view,
                               const std::string& file) {
  if (bytes.size() < kHeadBytes) Corrupt(file, "shorter than its 64-byte head");
  if (reinterpret_cast<uintptr_t>(bytes.data()) % 8 != 0)
    Corrupt(file, "not 8-byte aligned in memory");
  const uint8_t* p = bytes.data();
  if (Read32(p + kRecVersion) != kImageVersion)
    Corrupt(file, "unknown records version " + std::to_string(Read32(p + kRecVersion)));
  ChildRecords r;
  r.min_count = Read32(p + kRecMinCount);
  r.top_k = Read32(p + kRecTopK);
  const uint32_t flags = Read32(p + kRecFlags);
  r.num_clones = Read64(p + kRecClones);
  r.num_slots = Read64(p + kRecSlots);
  r.num_positions = Read64(p + kRecPositions);
  if (r.min_count < 2 || r.top_k == 0 || r.top_k > 255 || flags != 0)
    Corrupt(file, "head fields out of range (min count " + std::to_string(r.min_count) +
                      ", top k " + std::to_string(r.top_k) + ", flags " + std::to_string(flags) +
                      ")");
  if (r.num_clones != view.num_clones() || r.num_positions != view.num_tokens() + 1)
    Corrupt(file, "records for " + std::to_string(r.num_clones) + " clones and " +
                      std::to_string(r.num_positions) + " positions, the index has " +
                      std::to_string(view.num_clones()) + " and " +
                      std::to_string(view.num_tokens() + 1));
  if (r.num_slots >= kNoRecord || r.num_slots > bytes.size() / sizeof(RecordEntrySlot))
    Corrupt(file, "slot count impossible for " + std::to_string(bytes.size()) + " bytes");
  const RecordLayout l = LayoutOf(r.num_clones, r.num_slots, r.num_positions);
  if (l.end != bytes.size())
    Corrupt(file, std::to_string(bytes.size()) + " bytes, its head implies " +
                      std::to_string(l.end));
  r.record_begin = reinterpret_cast<const uint32_t*>(p + l.begin);
  r.slots = reinterpret_cast<const RecordEntrySlot*>(p + l.slots);
  r.position_link_record = reinterpret_cast<const uint32_t*>(p + l.links);
  r.bytes = bytes.size();
  return r;
}

void VerifyChildRecords(const IndexView& view, std::span<const uint8_t> hubs,
                        std::span<const uint8_t> records, const std::string& file) {
  if (records.empty()) return;
  if (hubs.empty()) Corrupt(file, "child records without hub tables (HUBS)");
  const HubTables t = ParseHubTables(hubs, view, file);
  const ChildRecords r = ParseChildRecords(records, view, file);
  // The section is a function of the automaton, the hub tables and its
  // parameters: computed again, it must be the same bytes.
  const ChildRecordImage want = BuildChildRecords(view, t, ChildRecordParams{r.min_count, r.top_k});
  const std::span<const uint8_t> w = want.bytes();
  if (w.empty()) Corrupt(file, "this automaton cannot have child records (too large)");
  const size_t at = layout::FirstDifference(records, w);
  if (at == records.size() && records.size() == w.size()) return;
  const RecordLayout l = LayoutOf(r.num_clones, r.num_slots, r.num_positions);
  std::string what;
  if (at < kHeadBytes)
    what = "head differs from this automaton's (byte " + std::to_string(at) + ")";
  else if (records.size() != w.size())
    what = "the records of this automaton take " + std::to_string(w.size()) +
           " bytes, the section " + std::to_string(records.size());
  else if (at < l.slots)
    what = "the record offset of clone " + std::to_string((at - l.begin) / 4) +
           " differs from this automaton's";
  else if (at < l.links)
    what = "record slot " + std::to_string((at - l.slots) / sizeof(RecordEntrySlot)) +
           " differs from this automaton's heaviest children";
  else
    what = "the suffix link record of position " + std::to_string((at - l.links) / 4) +
           " differs from this automaton's";
  Corrupt(file, what);
}

}  // namespace sam::format
