// The session fuzzer's input encoding: an index file without its alignment
// padding. Hot sections start on 4096-byte boundaries, so a small index is
// about 45 KB of which a few KB are data; mutating the padding is wasted
// work. The compact form is the header and section table followed by each
// section's stored bytes, in table order; Expand() lays them out again at
// the offsets the (possibly mutated) table gives, in a buffer of the header's
// file size. Inputs whose header or table cannot be laid out (too short,
// unusable table, file size above 4 MiB) are used as they are.
#ifndef SAM_TESTS_FUZZ_COMPACT_H_
#define SAM_TESTS_FUZZ_COMPACT_H_

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "reseal.h"

namespace sam::fuzz {

using sam::testing::LoadLe32;
using sam::testing::LoadLe64;

constexpr size_t kHeaderBytes = 256, kEntryBytes = 64;
constexpr uint64_t kMaxExpandedBytes = uint64_t{4} << 20;

// Number of section table entries, or 0 when the table is unusable.
inline size_t TableEntries(const uint8_t* d, size_t size) {
  if (size < kHeaderBytes) return 0;
  const uint32_t nsec = LoadLe32(d + 44), table = LoadLe32(d + 48);
  if (table != kHeaderBytes || nsec == 0 || nsec > 64 || kHeaderBytes + size_t{nsec} * kEntryBytes > size)
    return 0;
  return nsec;
}

// Compact form -> file bytes (8-byte aligned storage; *size receives the length).
inline std::vector<uint64_t> Expand(const uint8_t* d, size_t size, size_t* out_size) {
  const size_t nsec = TableEntries(d, size);
  const uint64_t file_size = size >= kHeaderBytes ? LoadLe64(d + 32) : 0;
  const size_t head = kHeaderBytes + nsec * kEntryBytes;
  if (nsec == 0 || file_size > kMaxExpandedBytes || file_size < head) {
    std::vector<uint64_t> raw(size / 8 + 1);
    if (size) std::memcpy(raw.data(), d, size);
    *out_size = size;
    return raw;
  }
  std::vector<uint64_t> out(file_size / 8 + 1);
  uint8_t* o = reinterpret_cast<uint8_t*>(out.data());
  std::memcpy(o, d, head);
  size_t pos = head;
  for (size_t i = 0; i < nsec && pos < size; ++i) {
    const uint8_t* e = d + kHeaderBytes + i * kEntryBytes;
    const uint64_t offset = LoadLe64(e + 16), stored = LoadLe64(e + 24);
    const size_t take = static_cast<size_t>(std::min<uint64_t>(stored, size - pos));
    if (offset >= head && offset <= file_size && take <= file_size - offset)
      std::memcpy(o + offset, d + pos, take);
    pos += take;
  }
  *out_size = file_size;
  return out;
}

// File bytes -> compact form (sections that do not lie inside the file are left out).
inline std::vector<uint8_t> Compact(const uint8_t* d, size_t size) {
  const size_t nsec = TableEntries(d, size);
  if (nsec == 0) return std::vector<uint8_t>(d, d + size);
  std::vector<uint8_t> out(d, d + kHeaderBytes + nsec * kEntryBytes);
  for (size_t i = 0; i < nsec; ++i) {
    const uint8_t* e = d + kHeaderBytes + i * kEntryBytes;
    const uint64_t offset = LoadLe64(e + 16), stored = LoadLe64(e + 24);
    if (offset <= size && stored <= size - offset) out.insert(out.end(), d + offset, d + offset + stored);
  }
  return out;
}

}  // namespace sam::fuzz

#endif  // SAM_TESTS_FUZZ_COMPACT_H_
