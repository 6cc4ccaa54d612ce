// Re-seals a fuzzed index file in place: recomputes the checksum of every
// section that lies inside the buffer, then the header checksum
// (format/FORMAT.md sections 2-3). Checksums catch accidents, not a hostile
// file, which is re-sealed; without this almost every mutation would only
// reach the checksum checks. Inputs too short or with an unusable section
// table are left as they are.
#ifndef SAM_TESTS_FUZZ_RESEAL_H_
#define SAM_TESTS_FUZZ_RESEAL_H_

#include <xxhash.h>

#include <cstddef>
#include <cstdint>
#include <cstring>

namespace sam::fuzz {

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

inline void Reseal(uint8_t* d, size_t size) {
  constexpr size_t kHeader = 256, kEntry = 64, kChecksumField = 56;
  if (size < kHeader) return;
  const uint32_t nsec = LoadLe32(d + 44), table = LoadLe32(d + 48);
  if (table != kHeader || nsec == 0 || nsec > 64 || kHeader + size_t{nsec} * kEntry > size) return;
  for (uint32_t i = 0; i < nsec; ++i) {
    uint8_t* e = d + kHeader + size_t{i} * kEntry;
    const uint64_t offset = LoadLe64(e + 16), stored = LoadLe64(e + 24);
    if (offset <= size && stored <= size - offset)
      StoreLe64(e + 40, XXH3_64bits(d + offset, stored));
  }
  StoreLe64(d + kChecksumField, 0);
  XXH3_state_t* st = XXH3_createState();
  XXH3_64bits_reset(st);
  XXH3_64bits_update(st, d, kHeader);
  XXH3_64bits_update(st, d + kHeader, size_t{nsec} * kEntry);
  StoreLe64(d + kChecksumField, XXH3_64bits_digest(st));
  XXH3_freeState(st);
}

}  // namespace sam::fuzz

#endif  // SAM_TESTS_FUZZ_RESEAL_H_
