// libFuzzer target for the index loader: any byte string must either open
// (and then answer queries in bounds, verify or not) or fail with a
// FormatError; never crash, hang or read out of bounds, the runtime's
// reading of the accelerator sections (HUBS, FILT) included. Each input is tried
// as it is and re-sealed (checksums recomputed, tests/common/reseal.h), so
// that mutations also reach the checks behind the checksums.
//   tools/ci/fuzz.sh fuzz_loader   (docs/testing.md)
#include <cstdint>
#include <cstring>
#include <span>
#include <vector>

#include "reseal.h"
#include "sam/format/index.h"
#include "sam/runtime/static_index.h"

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
        // The accelerator sections as the runtime reads them (the file's
        // own tables, whatever they hold): bounded answers.
        if (v.hubs().present()) {
          sam::runtime::StaticIndex::Options so;
          so.min_degree = v.hubs().min_degree;
          so.top_k = v.hubs().top_k;
          so.filter_bits_per_edge =
              v.edge_filter().present() ? v.edge_filter().bits_per_edge : 0;
          const auto index = sam::runtime::StaticIndex::Create(&v, so);
          std::span<const sam::runtime::StaticIndex::Child> children;
          for (uint64_t st = 0; st < v.num_states() && st < 512; ++st) {
            if (index->TopChildren(st, &children))
              for (const auto& c : children) (void)index->Next(st, c.token);
            for (uint32_t c = 0; c < 16; ++c) (void)index->Next(st, c % (v.vocab_size() + 1));
          }
        }
        (void)f.ReadMetadata();
        (void)f.ReadVocabulary();
      } catch (const sam::Error&) {  // FormatError, or Create's refusal of absurd options
      }
    }
  }
  return 0;
}
