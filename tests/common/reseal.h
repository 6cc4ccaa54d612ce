// Re-sealing an index file's bytes after a deliberate edit (format/FORMAT.md
// sections 2-3): Reseal recomputes the checksum of every section that lies
// inside the buffer, then the header checksum; ResealHeader recomputes the
// header checksum only. Checksums catch accidents, not a hostile file, which
// is re-sealed: the fuzzers re-seal their inputs so that mutations reach the
// checks behind the checksums, and the corrupt-index tests re-seal damaged
// files so that only the structural checks can refuse them.
#ifndef SAM_TESTS_COMMON_RESEAL_H_
#define SAM_TESTS_COMMON_RESEAL_H_

#include <xxhash.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>

namespace sam::testing {

inline uint64_t LoadLe64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = v << 8 | p[i];
  return v;
}
inline uint32_t LoadLe32(const uint8_t* p) {
  return static_cast<uint32_t>(p[0] | p[1] << 8 | p[2] << 16 | uint32_t{p[3]} << 24);
}
inline void StoreLe64(uint8_t* p, uint64_t v) {
  for (int i = 0; i < 8; ++i, v >>= 8) p[i] = static_cast<uint8_t>(v);
}

// The header checksum: XXH3-64 of the 256-byte header with its checksum field
// zero, followed by the section table (as many of the header's entries as the
// buffer holds). Inputs shorter than the header are left as they are.
inline void ResealHeader(uint8_t* d, size_t size) {
  constexpr size_t kHeader = 256, kEntry = 64, kChecksumField = 56;
  if (size < kHeader) return;
  const size_t nsec = std::min<size_t>(LoadLe32(d + 44), (size - kHeader) / kEntry);
  StoreLe64(d + kChecksumField, 0);
  XXH3_state_t* st = XXH3_createState();
  XXH3_64bits_reset(st);
  XXH3_64bits_update(st, d, kHeader);
  XXH3_64bits_update(st, d + kHeader, nsec * kEntry);
  StoreLe64(d + kChecksumField, XXH3_64bits_digest(st));
  XXH3_freeState(st);
}

// Every section checksum, then the header's. Inputs too short or with an
// unusable section table are left as they are.
inline void Reseal(uint8_t* d, size_t size) {
  constexpr size_t kHeader = 256, kEntry = 64;
  if (size < kHeader) return;
  const uint32_t nsec = LoadLe32(d + 44), table = LoadLe32(d + 48);
  if (table != kHeader || nsec == 0 || nsec > 64 || kHeader + size_t{nsec} * kEntry > size) return;
  for (uint32_t i = 0; i < nsec; ++i) {
    uint8_t* e = d + kHeader + size_t{i} * kEntry;
    const uint64_t offset = LoadLe64(e + 16), stored = LoadLe64(e + 24);
    if (offset <= size && stored <= size - offset)
      StoreLe64(e + 40, XXH3_64bits(d + offset, stored));
  }
  ResealHeader(d, size);  // the whole table fits: checked above
}

}  // namespace sam::testing

#endif  // SAM_TESTS_COMMON_RESEAL_H_
