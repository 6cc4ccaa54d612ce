// The HUBS and FILT sections (FORMAT.md section 12): built from an index's
// automaton in one pass over its edge ranges, parsed in place in O(1).
#include "sam/format/accelerators.h"

#include <algorithm>
#include <cstring>
#include <utility>
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

// HUBS head field offsets.
enum : uint32_t {
  kHubVersion = 0,
  kHubMinDegree = 4,
  kHubTopK = 8,
  kHubFlags = 12,
  kHubCount = 16,
  kHubTableSize = 24,
  kHubSlots = 32,
  kHubBitWords = 40,
};
// FILT head field offsets.
enum : uint32_t {
  kFiltVersion = 0,
  kFiltBits = 4,
  kFiltMinDegree = 8,
  kFiltBlocks = 16,
};

// Where each table of a HUBS image starts (every one 64-byte aligned).
struct HubLayout {
  uint64_t table, bits, slots, sizes, children, end;
};
HubLayout LayoutOf(uint64_t table_size, uint64_t bit_words, uint64_t num_slots, uint64_t num_hubs,
                   uint64_t top_k) {
  HubLayout l;
  l.table = kHeadBytes;
  l.bits = l.table + AlignUp(table_size * sizeof(HubEntry), 64);
  l.slots = l.bits + AlignUp(bit_words * 8, 64);
  l.sizes = l.slots + AlignUp(num_slots * sizeof(LabelSlot), 64);
  l.children = l.sizes + AlignUp(num_hubs, 64);
  l.end = l.children + num_hubs * top_k * sizeof(HubChild);
  return l;
}

[[noreturn]] void Corrupt(const std::string& file, const char* tag, const std::string& what) {
  throw FormatError(ErrorCode::kCorruptStructure, ErrorContext{.file = file},
                    std::string(tag) + ": " + what);
}

struct Hub {
  uint64_t state, lo, hi;
};

// One pass over the edge ranges: the hubs, and the filter's (state, label)
// pairs hashed into `filter` (when it has blocks). Edges go through the
// filter in batches, each stage prefetching what the next one reads (a
// clone's first end position, the token there, the filter block), so that
// the random reads of a batch overlap.
std::vector<Hub> ScanEdges(const IndexView& view, uint64_t min_degree, uint64_t* filter,
                           uint64_t blocks) {
  std::vector<Hub> hubs;
  const uint64_t num_states = view.num_states();
  const uint64_t n = view.num_tokens();
  const PackedView& edges = view.edges();
  constexpr size_t kBatch = 256;
  std::vector<std::pair<uint64_t, uint64_t>> batch;  // (state, target)
  std::vector<uint64_t> hashes;
  batch.reserve(kBatch + 4096);
  auto flush = [&] {
    for (const auto& [v, t] : batch)
      if (t > n) view.clone_min_endpos().Prefetch(t - n - 1);
    for (const auto& [v, t] : batch) {
      const uint64_t end = view.MinEndpos(t);
      if (end != 0) view.text().Prefetch(end - 1);
    }
    hashes.clear();
    for (const auto& [v, t] : batch) {
      const uint32_t label = view.LastToken(t);
      if (label >= view.vocab_size()) continue;
      hashes.push_back(EdgeHash(v, label));
      __builtin_prefetch(&filter[FilterBlockOf(hashes.back(), blocks) * kFilterWords], 1);
    }
    for (uint64_t h : hashes) {
      uint64_t* block = &filter[FilterBlockOf(h, blocks) * kFilterWords];
      uint64_t bits = h * 0x9E3779B97F4A7C15ull;
      for (size_t w = 0; w < kFilterWords; ++w, bits >>= 6) block[w] |= uint64_t{1} << (bits & 63);
    }
    batch.clear();
  };
  view.ForEachEdgeRange([&](uint64_t v, uint64_t lo, uint64_t hi) {
    if (v == kRoot) return;
    if (hi - lo >= min_degree) {
      hubs.push_back(Hub{v, lo, hi});
      return;  // its label table answers; the filter leaves it out
    }
    if (blocks == 0) return;
    for (uint64_t e = lo; e < hi; ++e) {
      const uint64_t t = edges.Get(e);
      if (t != kRoot && t < num_states) batch.emplace_back(v, t);
    }
    if (batch.size() >= kBatch) flush();
  });
  if (blocks != 0) flush();
  return hubs;
}

// Explicit transitions of the states that are not hubs (the filter's pairs,
// an upper bound: corrupt targets and document ends are left out later).
uint64_t FilterEdges(const IndexView& view, uint64_t min_degree) {
  uint64_t edges = 0;
  view.ForEachEdgeRange([&](uint64_t v, uint64_t lo, uint64_t hi) {
    if (v != kRoot && hi - lo < min_degree) edges += hi - lo;
  });
  return edges;
}

void StoreChild(uint8_t* out, const HubChild& c) {
  std::memset(out, 0, sizeof(HubChild));  // the padding after the token: zero
  std::memcpy(out + offsetof(HubChild, token), &c.token, 4);
  std::memcpy(out + offsetof(HubChild, target), &c.target, 8);
  std::memcpy(out + offsetof(HubChild, count), &c.count, 8);
}

HugeBuffer BuildHubImage(const IndexView& view, const std::vector<Hub>& hubs,
                         const AcceleratorParams& params) {
  uint64_t table_size = 16;
  while (table_size < 2 * hubs.size()) table_size *= 2;
  const uint64_t mask = table_size - 1;
  const uint64_t bit_words = (view.num_states() + 63) / 64;
  std::vector<uint64_t> slot_begin(hubs.size() + 1, 0);
  uint64_t num_slots = 0;
  for (size_t h = 0; h < hubs.size(); ++h) {
    slot_begin[h] = num_slots;
    num_slots += LabelSlotsFor(hubs[h].hi - hubs[h].lo);
  }
  slot_begin[hubs.size()] = num_slots;
  const HubLayout l = LayoutOf(table_size, bit_words, num_slots, hubs.size(), params.top_k);
  HugeBuffer image(l.end);  // zeroed
  uint8_t* base = static_cast<uint8_t*>(image.data());
  // Decided by the file's state width (not by the state count), so that an
  // index written with wide widths on a small corpus takes the rank path.
  const bool slots_hold_targets = view.edges().width() <= 32;
  Write32(base + kHubVersion, kImageVersion);
  Write32(base + kHubMinDegree, params.min_degree);
  Write32(base + kHubTopK, params.top_k);
  Write32(base + kHubFlags, slots_hold_targets ? 1 : 0);
  Write64(base + kHubCount, hubs.size());
  Write64(base + kHubTableSize, table_size);
  Write64(base + kHubSlots, num_slots);
  Write64(base + kHubBitWords, bit_words);
  auto* table = reinterpret_cast<HubEntry*>(base + l.table);
  auto* bits = reinterpret_cast<uint64_t*>(base + l.bits);
  auto* slots = reinterpret_cast<LabelSlot*>(base + l.slots);
  uint8_t* sizes = base + l.sizes;
  for (uint64_t i = 0; i < num_slots; ++i) slots[i] = LabelSlot{kNoToken, 0};
  std::vector<HubChild> top(params.top_k);
  const uint64_t num_states = view.num_states();
  for (uint32_t h = 0; h < hubs.size(); ++h) {
    const auto [v, lo, hi] = hubs[h];
    bits[v >> 6] |= uint64_t{1} << (v & 63);
    const uint64_t m = slot_begin[h + 1] - slot_begin[h];
    LabelSlot* own = slots + slot_begin[h];
    for (uint64_t e = lo; e < hi; ++e) {
      // The labels IndexView::Next compares; corrupt targets (kNoToken) and
      // repeated labels (only in a corrupt index) are left out.
      const uint64_t t = view.edges().Get(e);
      if (t == kRoot || t >= num_states) continue;
      const uint32_t label = view.LastToken(t);
      if (label == kNoToken) continue;
      uint64_t i = LabelSlotOf(label, m);
      while (own[i].label != kNoToken && own[i].label != label) i = i + 1 == m ? 0 : i + 1;
      if (own[i].label == kNoToken)
        own[i] = LabelSlot{label, static_cast<uint32_t>(slots_hold_targets ? t : e - lo)};
    }
    uint64_t i = HubSlotOf(v, mask);
    while (table[i].key != 0) i = (i + 1) & mask;
    table[i] = HubEntry{v + 1, lo, slot_begin[h], static_cast<uint32_t>(m), h};
    const uint32_t k = TopChildren(view, v, lo, hi, params.top_k, top.data());
    sizes[h] = static_cast<uint8_t>(k);
    for (uint32_t j = 0; j < k; ++j)
      StoreChild(base + l.children + (uint64_t{h} * params.top_k + j) * sizeof(HubChild), top[j]);
  }
  return image;
}

}  // namespace

const HubEntry* FindHub(const HubTables& hubs, uint64_t state) {
  if (!hubs.present()) return nullptr;
  uint64_t i = HubSlotOf(state, hubs.mask);
  for (uint64_t probes = 0; probes <= hubs.mask; ++probes, i = (i + 1) & hubs.mask) {
    if (hubs.table[i].key == state + 1) return &hubs.table[i];
    if (hubs.table[i].key == 0) return nullptr;
  }
  return nullptr;
}

uint32_t TopChildren(const IndexView& view, uint64_t v, uint64_t lo, uint64_t hi, uint32_t k,
                     HubChild* out) {
  uint32_t size = 0;
  view.ForEachChild(v, lo, hi, [&](uint32_t token, uint64_t target) {
    const uint64_t count = view.Count(target);
    uint32_t pos = size;
    while (pos > 0 && (out[pos - 1].count < count ||
                       (out[pos - 1].count == count && out[pos - 1].token > token)))
      --pos;
    if (pos >= k) return;
    const uint32_t last = std::min(size, k - 1);
    for (uint32_t i = last; i > pos; --i) out[i] = out[i - 1];
    out[pos] = HubChild{token, target, count};
    if (size < k) ++size;
  });
  return size;
}

AcceleratorImages BuildAccelerators(const IndexView& view, const AcceleratorParams& params) {
  auto invalid = [](const std::string& what) {
    throw FormatError(ErrorCode::kInvalidArgument, ErrorContext{}, "accelerators: " + what);
  };
  if (params.min_degree == 0) invalid("min_degree must be at least 1");
  if (params.top_k == 0 || params.top_k > 255) invalid("top_k must be in 1..255");
  if (params.filter_bits_per_edge > 64) invalid("filter_bits_per_edge must be at most 64");
  AcceleratorImages out;
  uint64_t blocks = 0;
  if (params.filter_bits_per_edge > 0) {
    const uint64_t bits = FilterEdges(view, params.min_degree) * params.filter_bits_per_edge;
    blocks = std::max<uint64_t>(1, (bits + 511) / 512);
    out.filter = HugeBuffer(kHeadBytes + blocks * kFilterWords * 8);
    uint8_t* head = static_cast<uint8_t*>(out.filter.data());
    Write32(head + kFiltVersion, kImageVersion);
    Write32(head + kFiltBits, params.filter_bits_per_edge);
    Write32(head + kFiltMinDegree, params.min_degree);
    Write64(head + kFiltBlocks, blocks);
  }
  uint64_t* words = blocks == 0 ? nullptr
                                : reinterpret_cast<uint64_t*>(
                                      static_cast<uint8_t*>(out.filter.data()) + kHeadBytes);
  const std::vector<Hub> hubs = ScanEdges(view, params.min_degree, words, blocks);
  out.hubs = BuildHubImage(view, hubs, params);
  return out;
}

std::vector<uint8_t> BuildCloneLabels(const IndexView& view, unsigned token_width) {
  const uint64_t n = view.num_tokens(), c = view.num_clones();
  PackedWriter out(token_width, c);
  for (uint64_t k = 0; k < c; ++k) {
    const uint32_t label = view.LastToken(n + 1 + k);
    if (label > view.separator())  // (a document end for a clone of strings that end one)
      throw FormatError(ErrorCode::kInvalidArgument, ErrorContext{},
                        "clone labels: clone state " + std::to_string(n + 1 + k) +
                            " ends with no token of the text");
    out.Push(label);
  }
  return out.Finish();
}

HubTables ParseHubTables(std::span<const uint8_t> bytes, const IndexView& view,
                         const std::string& file) {
  const char* tag = "HUBS";
  if (bytes.size() < kHeadBytes) Corrupt(file, tag, "shorter than its 64-byte head");
  if (reinterpret_cast<uintptr_t>(bytes.data()) % 8 != 0)
    Corrupt(file, tag, "not 8-byte aligned in memory");
  const uint8_t* p = bytes.data();
  if (Read32(p + kHubVersion) != kImageVersion)
    Corrupt(file, tag, "unknown table version " + std::to_string(Read32(p + kHubVersion)));
  HubTables t;
  t.min_degree = Read32(p + kHubMinDegree);
  t.top_k = Read32(p + kHubTopK);
  const uint32_t flags = Read32(p + kHubFlags);
  t.num_hubs = Read64(p + kHubCount);
  const uint64_t table_size = Read64(p + kHubTableSize);
  t.num_slots = Read64(p + kHubSlots);
  t.bit_words = Read64(p + kHubBitWords);
  const uint64_t limit = bytes.size();
  if (t.min_degree == 0 || t.top_k == 0 || t.top_k > 255 || flags > 1)
    Corrupt(file, tag, "head fields out of range (min degree " + std::to_string(t.min_degree) +
                           ", top k " + std::to_string(t.top_k) + ", flags " +
                           std::to_string(flags) + ")");
  if (t.bit_words != (view.num_states() + 63) / 64)
    Corrupt(file, tag, "hub bits for " + std::to_string(t.bit_words * 64) +
                           " states, the index has " + std::to_string(view.num_states()));
  if (table_size < 16 || (table_size & (table_size - 1)) != 0 || t.num_hubs > table_size / 2 ||
      table_size > limit || t.num_slots > limit || t.num_hubs > limit)
    Corrupt(file, tag, "table sizes impossible for " + std::to_string(limit) + " bytes");
  if (flags == 1 && view.edges().width() > 32)
    Corrupt(file, tag, "label slots hold targets, but states take more than 32 bits");
  const HubLayout l = LayoutOf(table_size, t.bit_words, t.num_slots, t.num_hubs, t.top_k);
  if (l.end != limit)
    Corrupt(file, tag, std::to_string(limit) + " bytes, its head implies " +
                           std::to_string(l.end));
  t.slots_hold_targets = flags == 1;
  t.mask = table_size - 1;
  t.table = reinterpret_cast<const HubEntry*>(p + l.table);
  t.bits = reinterpret_cast<const uint64_t*>(p + l.bits);
  t.slots = reinterpret_cast<const LabelSlot*>(p + l.slots);
  t.sizes = p + l.sizes;
  t.children = reinterpret_cast<const HubChild*>(p + l.children);
  return t;
}

EdgeFilter ParseEdgeFilter(std::span<const uint8_t> bytes, const IndexView& view,
                           const std::string& file) {
  (void)view;
  const char* tag = "FILT";
  if (bytes.size() < kHeadBytes) Corrupt(file, tag, "shorter than its 64-byte head");
  if (reinterpret_cast<uintptr_t>(bytes.data()) % 8 != 0)
    Corrupt(file, tag, "not 8-byte aligned in memory");
  const uint8_t* p = bytes.data();
  if (Read32(p + kFiltVersion) != kImageVersion)
    Corrupt(file, tag, "unknown filter version " + std::to_string(Read32(p + kFiltVersion)));
  EdgeFilter f;
  f.bits_per_edge = Read32(p + kFiltBits);
  f.min_degree = Read32(p + kFiltMinDegree);
  f.blocks = Read64(p + kFiltBlocks);
  if (f.bits_per_edge == 0 || f.bits_per_edge > 64 || f.min_degree == 0)
    Corrupt(file, tag, "head fields out of range (bits per edge " +
                           std::to_string(f.bits_per_edge) + ", min degree " +
                           std::to_string(f.min_degree) + ")");
  if (f.blocks == 0 || f.blocks > bytes.size() / 64 ||
      kHeadBytes + f.blocks * kFilterWords * 8 != bytes.size())
    Corrupt(file, tag, std::to_string(bytes.size()) + " bytes for " + std::to_string(f.blocks) +
                           " blocks of 64");
  f.words = reinterpret_cast<const uint64_t*>(p + kHeadBytes);
  return f;
}

void VerifyAccelerators(const IndexView& view, std::span<const uint8_t> hubs,
                        std::span<const uint8_t> filter, const std::string& file) {
  if (hubs.empty() && filter.empty()) return;
  if (hubs.empty()) Corrupt(file, "FILT", "an edge filter without hub tables (HUBS)");
  const HubTables t = ParseHubTables(hubs, view, file);
  AcceleratorParams params{t.min_degree, t.top_k, 0};
  if (!filter.empty()) {
    const EdgeFilter f = ParseEdgeFilter(filter, view, file);
    if (f.min_degree != t.min_degree)
      Corrupt(file, "FILT, HUBS",
              "the filter leaves out the hubs of " + std::to_string(f.min_degree) +
                  " transitions or more, the hub tables hold those of " +
                  std::to_string(t.min_degree));
    params.filter_bits_per_edge = f.bits_per_edge;
  }
  // The sections are a function of the automaton and their parameters:
  // computed again, they must be the same bytes.
  const AcceleratorImages want = BuildAccelerators(view, params);
  auto first_difference = [](std::span<const uint8_t> have, const HugeBuffer& want) {
    return layout::FirstDifference(
        have, std::span<const uint8_t>(static_cast<const uint8_t*>(want.data()), want.size()));
  };
  if (hubs.size() != want.hubs.size() || first_difference(hubs, want.hubs) < hubs.size()) {
    const uint64_t at = first_difference(hubs, want.hubs);
    const HubLayout l = LayoutOf(t.mask + 1, t.bit_words, t.num_slots, t.num_hubs, t.top_k);
    std::string what;
    if (hubs.size() != want.hubs.size())
      what = "the hub tables of this automaton take " + std::to_string(want.hubs.size()) +
             " bytes, the section " + std::to_string(hubs.size());
    else if (at < l.table)
      what = "head differs from this automaton's (byte " + std::to_string(at) + ")";
    else if (at < l.bits)
      what = "hub table entry " + std::to_string((at - l.table) / sizeof(HubEntry)) +
             " differs from this automaton's";
    else if (at < l.slots)
      what = "hub bit of state " + std::to_string((at - l.bits) * 8) + ".. differs from this "
             "automaton's (a state's degree)";
    else if (at < l.sizes)
      what = "label slot " + std::to_string((at - l.slots) / sizeof(LabelSlot)) +
             " differs from this automaton's transitions";
    else if (at < l.children)
      what = "child count of hub " + std::to_string(at - l.sizes) + " differs";
    else
      what = "child " + std::to_string((at - l.children) / sizeof(HubChild) % t.top_k) +
             " of hub " + std::to_string((at - l.children) / sizeof(HubChild) / t.top_k) +
             " differs from this automaton's heaviest children";
    Corrupt(file, "HUBS", what);
  }
  if (!filter.empty() &&
      (filter.size() != want.filter.size() || first_difference(filter, want.filter) < filter.size())) {
    const uint64_t at = first_difference(filter, want.filter);
    Corrupt(file, "FILT",
            filter.size() != want.filter.size()
                ? "the edge filter of this automaton takes " + std::to_string(want.filter.size()) +
                      " bytes, the section " + std::to_string(filter.size())
                : at < kHeadBytes
                    ? "head differs from this automaton's (byte " + std::to_string(at) + ")"
                    : "block " + std::to_string((at - kHeadBytes) / 64) +
                          " differs from this automaton's transitions");
  }
}

}  // namespace sam::format
