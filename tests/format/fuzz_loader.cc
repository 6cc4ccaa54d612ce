// libFuzzer target for the index loader: any byte string must either open
// (and then answer queries in bounds, verify or not) or fail with a
// FormatError; never crash, hang or read out of bounds. Each input is tried
// as it is and re-sealed (checksums recomputed, tests/common/reseal.h), so
// that mutations also reach the checks behind the checksums.
//   tools/ci/fuzz.sh fuzz_loader   (docs/testing.md)
#include <cstdint>
#include <cstring>
#include <vector>

#include "reseal.h"
#include "sam/format/index.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::vector<uint64_t> aligned((size + 7) / 8 + 1);
  if (size) std::memcpy(aligned.data(), data, size);
  for (bool resealed : {false, true}) {
    if (resealed) sam::testing::Reseal(reinterpret_cast<uint8_t*>(aligned.data()), size);
    for (bool verify : {false, true}) {
      try {
        sam::format::OpenOptions o;
        o.verify = verify;
        auto f = sam::format::IndexFile::FromBuffer(aligned.data(), size, "fuzz", o);
        const auto& v = f.view();
        uint64_t s = sam::format::kRoot;
        for (uint32_t i = 0; i < 64; ++i) {
          const uint64_t n = v.Next(s, i % (v.vocab_size() + 1));
          s = n == sam::format::kNoState ? v.Link(s) : n;
          (void)v.Count(s);
          (void)v.MinEndpos(s);
        }
        (void)f.ReadMetadata();
        (void)f.ReadVocabulary();
      } catch (const sam::format::FormatError&) {
      }
    }
  }
  return 0;
}
