// Child records: for every clone state that occurs often enough, its
// heaviest children with their counts and their own records, stored
// together, so that drafting reads one or two cache lines where the bare
// automaton reads a chain of four or five misses (FORMAT.md section 13,
// section RECS). sam-build writes them on request (`--child-records`); a
// runtime that finds them maps them in O(1), shared by every process, and
// otherwise can compute the same image into private memory
// (runtime::StaticIndex::Options::record_min_count).
//
// The image holds three arrays:
//  - record_begin: one u32 per clone and one more; clone k's record is the
//    slots [record_begin[k], record_begin[k + 1]) (empty: none);
//  - slots of 16 bytes: each record is a head (RecordHeadSlot), then its
//    children (RecordEntrySlot), then, for a hub, one slot that places its
//    label table in the HUBS section;
//  - position_link_record: for each position p in 1..N, the record of its
//    suffix link (slot 0 unused).
// Records refer to each other by the slot of their head; kNoRecord: none.
//
// Every function here is deterministic: the same index, hub tables and
// parameters give the same bytes (the golden files depend on it).
#ifndef SAM_FORMAT_CHILD_RECORDS_H_
#define SAM_FORMAT_CHILD_RECORDS_H_

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

#include "sam/export.h"
#include "sam/format/accelerators.h"
#include "sam/format/huge_buffer.h"

namespace sam::format {

class IndexView;

inline constexpr uint32_t kNoRecord = ~uint32_t{0};
// The min_count sam-build writes and the runtime computes on request: every
// clone occurs at least twice, so at 2 every step to a suffix link finds a
// record (at 3 a clone that occurs twice has none, and such a step reads
// the link, its length and the offset again).
inline constexpr uint32_t kChildRecordMinCount = 2;

struct ChildRecordParams {
  // Clones that occur at least this many times get a record (>= 2: every
  // clone occurs at least twice, so 2 gives every clone one).
  uint32_t min_count = 2;
  // Children kept per record (1..255): the drafting's top_k (8 for one
  // index, 32 for a shard of a shard set, as in HUBS).
  uint32_t top_k = 8;
};

// A record's head: the state's length and count, the record of its suffix
// link (kNoRecord when that has none: the root, a clone that occurs too
// rarely), and bits: the number of children that follow (low 8 bits) and
// whether the state is a hub (bit 8; then one more slot after the children
// places its label table: u32 first label slot, u32 label slots, u64 first
// EDGE index in two halves).
struct RecordHeadSlot {
  uint32_t len, count, link_record, bits;
  uint32_t size() const { return bits & 0xff; }
  bool hub() const { return (bits >> 8 & 1) != 0; }
};
// A child in a record: its token, target, the target's count, and the
// target's record; for a target that occurs once (a position, which has
// no record), the token after it instead (its one continuation, the
// separator at a document end).
struct RecordEntrySlot {
  uint32_t token, target, count, record;
};
static_assert(sizeof(RecordHeadSlot) == 16 && sizeof(RecordEntrySlot) == 16);

// The records, read in place (from the file or an owned image).
struct ChildRecords {
  uint32_t min_count = 0;
  uint32_t top_k = 0;
  const uint32_t* record_begin = nullptr;  // num_clones + 1 entries
  uint64_t num_clones = 0;
  const RecordEntrySlot* slots = nullptr;  // heads are slots too (bit_cast)
  uint64_t num_slots = 0;
  const uint32_t* position_link_record = nullptr;  // num_tokens + 1 entries
  uint64_t num_positions = 0;                      // num_tokens + 1
  uint64_t bytes = 0;                              // the image's
  bool present() const { return record_begin != nullptr; }
};

// An image and how many of its bytes are the section (the buffer may be
// longer: it is allocated for the largest records before their children
// are known).
struct ChildRecordImage {
  HugeBuffer buffer;
  size_t size = 0;
  std::span<const uint8_t> bytes() const {
    return std::span<const uint8_t>(static_cast<const uint8_t*>(buffer.data()), size);
  }
};

// Computes the RECS image of `view`, whose hub tables (the HUBS section's,
// or an image of them) are `hubs`, in O(states + edges). Empty (size 0)
// when records cannot be represented: more than 2^32 - 1 states, tokens or
// slots. An index without clones gets an image without records. Throws FormatError (kInvalidArgument)
// for parameters out of range (min_count < 2, top_k outside 1..255, no hub
// tables).
SAM_API ChildRecordImage BuildChildRecords(const IndexView& view, const HubTables& hubs,
                                           const ChildRecordParams& params);

// Parses a RECS image of `view`'s index in O(1): the head's fields, the
// image's size, and that its arrays match the index (clones, positions).
// Throws FormatError (kCorruptStructure) naming `file` and the section.
// Contents are checked only by VerifyChildRecords: a reader bounds every
// value it takes from them.
SAM_API ChildRecords ParseChildRecords(std::span<const uint8_t> bytes, const IndexView& view,
                                       const std::string& file);

// --verify's check: the section is exactly what BuildChildRecords gives for
// `view` and `hubs` (the HUBS section's bytes) with the parameters its head
// states (an empty span: absent). Throws FormatError (kCorruptStructure)
// naming `file`, the section and the first array entry that differs.
SAM_API void VerifyChildRecords(const IndexView& view, std::span<const uint8_t> hubs,
                                std::span<const uint8_t> records, const std::string& file);

}  // namespace sam::format

#endif  // SAM_FORMAT_CHILD_RECORDS_H_
