// The drafting accelerators of an index: hub tables (HUBS) and the edge
// filter (FILT), computed offline by sam-build and stored as two optional
// sections of the index file (FORMAT.md section 12), so that every process
// maps the same pages and opening stays O(1).
//
//   // Offline (sam-build, `sam-build --upgrade`):
//   sam::format::AcceleratorImages images =
//       sam::format::BuildAccelerators(view, sam::format::AcceleratorParams{});
//   // At open: IndexFile::Open parses present sections (O(1)); IndexView::hubs()
//   // and IndexView::edge_filter() give them to the runtime (StaticIndex).
//
// A hub is a state with at least min_degree explicit transitions (the root
// excluded). Its entry in the hub table gives its explicit edge range, its
// label table (label -> target, open addressing) and its top_k heaviest
// children (count descending, then token ascending). The edge filter is a
// blocked Bloom filter over the (state, label) pairs of the explicit
// transitions of every state that is not a hub (hubs answer through their
// label tables). Neither changes any answer: a transition looked up through
// them is the one IndexView::Next gives.
//
// Every function here is deterministic: the same index and parameters give
// the same bytes (the golden files depend on it).
#ifndef SAM_FORMAT_ACCELERATORS_H_
#define SAM_FORMAT_ACCELERATORS_H_

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "sam/export.h"
#include "sam/format/huge_buffer.h"

namespace sam::format {

class IndexView;

struct AcceleratorParams {
  uint32_t min_degree = 32;          // explicit transitions that make a state a hub (>= 1)
  uint32_t top_k = 8;                // children stored per hub (1..255)
  uint32_t filter_bits_per_edge = 10;  // 0: no filter section (at most 64)
  // Child records (RECS, sam/format/child_records.h) for the clones that
  // occur at least this often (0: no RECS section; otherwise at least 2).
  uint32_t record_min_count = 0;
  // The clone labels (CLAB): every clone's token stored where a transition
  // into it is read, one read instead of two dependent ones (FORMAT.md
  // section 14).
  bool clone_labels = true;
};
// What sam-build stores: a single index the runtime's defaults, a shard of a
// shard set the longer child lists its drafting reads (kShardTopK).
inline constexpr uint32_t kShardTopK = 32;

// One child of a hub. The 4 bytes after `token` are zero in the file.
struct HubChild {
  uint32_t token;
  uint64_t target;
  uint64_t count;
};
static_assert(sizeof(HubChild) == 24);

// A hub table entry (open addressing over key = state + 1; 0: empty).
struct HubEntry {
  uint64_t key;
  uint64_t edge_begin;  // its explicit transitions: EDGE[edge_begin, + degree)
  uint64_t slot_begin;  // its label table: label slots [slot_begin, + num_slots)
  uint32_t num_slots;
  uint32_t hub;         // hub number: its child list
};
static_assert(sizeof(HubEntry) == 32);

// A label table slot: label kNoToken marks an empty slot. value is the
// target when targets fit in 32 bits (HubTables::slots_hold_targets), else
// the edge's rank within the hub's range.
struct LabelSlot {
  uint32_t label;
  uint32_t value;
};
static_assert(sizeof(LabelSlot) == 8);

// The hash functions of the format (FORMAT.md section 12).
inline uint64_t HubSlotOf(uint64_t state, uint64_t mask) {
  uint64_t x = state * 0x9E3779B97F4A7C15ull;
  x ^= x >> 29;
  return x & mask;
}
inline uint64_t LabelSlotOf(uint32_t label, uint64_t num_slots) {
  const uint64_t x = (uint64_t{label} + 1) * 0x9E3779B97F4A7C15ull;
  return static_cast<uint64_t>((static_cast<unsigned __int128>(x) * num_slots) >> 64);
}
inline uint64_t LabelSlotsFor(uint64_t degree) { return degree + degree / 2 + 1; }
inline uint64_t EdgeHash(uint64_t v, uint32_t c) {
  uint64_t x = v * 0xD6E8FEB86659FD93ull + c;
  x ^= x >> 32;
  x *= 0xD6E8FEB86659FD93ull;
  x ^= x >> 29;
  return x;
}
// Filter blocks are one 64-byte cache line of 8 words; a pair sets one bit
// in each word.
inline constexpr size_t kFilterWords = 8;
inline uint64_t FilterBlockOf(uint64_t hash, uint64_t blocks) {
  return static_cast<uint64_t>((static_cast<unsigned __int128>(hash) * blocks) >> 64);
}

// The hub tables, read in place (from the file or an owned image).
struct HubTables {
  uint32_t min_degree = 0;
  uint32_t top_k = 0;  // the stride of `children`
  bool slots_hold_targets = false;
  uint64_t num_hubs = 0;
  uint64_t mask = 0;  // table size - 1
  const HubEntry* table = nullptr;
  const uint64_t* bits = nullptr;  // bit v: state v is a hub
  uint64_t bit_words = 0;
  const LabelSlot* slots = nullptr;
  uint64_t num_slots = 0;
  const uint8_t* sizes = nullptr;      // children per hub (<= top_k)
  const HubChild* children = nullptr;  // hub h: children[h * top_k, + sizes[h])
  bool present() const { return table != nullptr; }
  // Whether state v is a hub (its bit; false beyond the bits).
  bool IsHub(uint64_t v) const { return v < bit_words * 64 && (bits[v >> 6] >> (v & 63) & 1); }
};

// The hub table entry of `state` (nullptr: not a hub, no tables, or a table
// that does not hold it), bounded on any table.
SAM_API const HubEntry* FindHub(const HubTables& hubs, uint64_t state);

// The edge filter, read in place.
struct EdgeFilter {
  uint32_t bits_per_edge = 0;
  uint32_t min_degree = 0;  // the hubs whose edges it leaves out
  const uint64_t* words = nullptr;
  uint64_t blocks = 0;
  bool present() const { return words != nullptr; }
  // False when v certainly has no explicit transition on c (v not a hub).
  bool MayContain(uint64_t v, uint32_t c) const {
    const uint64_t h = EdgeHash(v, c);
    const uint64_t* block = &words[FilterBlockOf(h, blocks) * kFilterWords];
    uint64_t bits = h * 0x9E3779B97F4A7C15ull;
    bool all = true;
    for (size_t w = 0; w < kFilterWords; ++w, bits >>= 6) all &= (block[w] >> (bits & 63)) & 1;
    return all;
  }
};

// The two section images (FORMAT.md section 12); an empty buffer: no section
// (no filter with filter_bits_per_edge 0 or no edges).
struct AcceleratorImages {
  HugeBuffer hubs;
  HugeBuffer filter;
};

// Computes the sections for `view` in O(states + edges). Throws
// FormatError (kInvalidArgument) for parameters out of range.
SAM_API AcceleratorImages BuildAccelerators(const IndexView& view, const AcceleratorParams& params);

// The CLAB section of `view`'s index (FORMAT.md section 14): the token
// every clone's strings end with, Packed(clones, token_width). Throws
// FormatError (kInvalidArgument) when a label does not fit (a corrupt view).
SAM_API std::vector<uint8_t> BuildCloneLabels(const IndexView& view, unsigned token_width);

// Parses a HUBS / FILT image of `view`'s index in O(1): the head's fields,
// the image's size, and that the tables match the index (state count).
// Throws FormatError (kCorruptStructure) naming `file` and the section.
SAM_API HubTables ParseHubTables(std::span<const uint8_t> bytes, const IndexView& view,
                                 const std::string& file);
SAM_API EdgeFilter ParseEdgeFilter(std::span<const uint8_t> bytes, const IndexView& view,
                                   const std::string& file);

// --verify's check: the sections are exactly what BuildAccelerators gives
// for `view` with the parameters their heads state (an empty span: the
// section is absent; FILT needs HUBS, with the same min_degree). Throws
// FormatError (kCorruptStructure) naming `file`, the section and the first
// table entry that differs. O(states + edges).
SAM_API void VerifyAccelerators(const IndexView& view, std::span<const uint8_t> hubs,
                                std::span<const uint8_t> filter, const std::string& file);

// The top k children of state v whose explicit edges are EDGE[lo, hi):
// count descending, then token ascending; document ends left out. Returns
// how many (at most k) were written to out.
SAM_API uint32_t TopChildren(const IndexView& view, uint64_t v, uint64_t lo, uint64_t hi,
                             uint32_t k, HubChild* out);

}  // namespace sam::format

#endif  // SAM_FORMAT_ACCELERATORS_H_
