// libFuzzer target for the index loader: any byte string must either open
// (and then answer queries in bounds, verify or not) or fail with a
// FormatError; never crash, hang or read out of bounds, the runtime's
// reading of the accelerator sections (HUBS, FILT) and of the child records
// (RECS) included. Each input is tried as it is and re-sealed (checksums
// recomputed, tests/common/reseal.h), so that mutations also reach the
// checks behind the checksums.
//   tools/ci/fuzz.sh fuzz_loader   (docs/testing.md)
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <span>
#include <vector>

#include "reseal.h"
#include "sam/error.h"
#include "sam/format/index.h"
#include "sam/runtime/session.h"
#include "sam/runtime/static_index.h"
#include "sam/runtime/static_match.h"

namespace {

using sam::runtime::StaticIndex;
using sam::runtime::StaticMatch;

[[noreturn]] void Fail(const char* what) {
  std::fprintf(stderr, "fuzz_loader: %s\n", what);
  std::abort();
}

// The file's child records as the runtime reads them (index->records_from_file():
// the section itself, whatever it holds): every value taken from them is
// bounded, and the work here is too (at most 512 states, 512 positions, 256
// matched tokens, 8 drafting steps). `verified`: the file passed --verify,
// so the records are right and matching through them must give the plain
// rule's match.
void ExerciseRecords(const sam::format::IndexView& v,
                     const std::shared_ptr<const StaticIndex>& index, bool verified) {
  const uint64_t n = v.num_tokens();
  const uint32_t vocab = v.vocab_size();
  const size_t top_k = index->options().top_k;
  // By state: its record, the head and the children it announces, the
  // records those name (an entry's field read as a record whatever it is:
  // Head bounds any value), the climb along link records, and transitions
  // on the children's tokens and on others.
  std::vector<StaticIndex::Child> out(top_k), scratch;
  for (uint64_t i = 0; i < 512 && i < v.num_states(); ++i) {
    const uint64_t st = n + 1 + i < v.num_states() ? n + 1 + i : i;  // clones first
    uint32_t size = 0;
    if (index->RecordChildren(st, out.data(), &size) && size > top_k)
      Fail("a record announces more children than top_k");
    (void)index->RecordChildren(st, &scratch);
    index->PrefetchRecord(st);
    const uint32_t rec = index->RecordOf(st);
    index->PrefetchRecordAt(rec);
    const StaticIndex::RecordHead head = index->Head(rec);
    if (head.size() > top_k) Fail("a head announces more children than top_k");
    if (head.size() > 0) {
      const StaticIndex::RecordEntry* e = index->Entries(rec);
      for (uint32_t k = 0; k < head.size(); ++k) {
        (void)index->Head(e[k].record_of_target());
        (void)index->Head(e[k].record);
        (void)index->Next(st, e[k].token);
        (void)index->NextAt(rec, head, st, e[k].token);
      }
    }
    for (uint32_t c = 0; c < 4; ++c)
      (void)index->NextAt(rec, head, st,
                          static_cast<uint32_t>((c * 7 + 1) % (uint64_t{vocab} + 1)));
    uint32_t up = rec;
    for (int climb = 0; climb < 64 && up != StaticIndex::kNoRecord; ++climb)
      up = index->Head(up).link_record;
  }
  for (uint64_t p = 0; p <= n + 1 && p < 512; ++p) {
    index->PrefetchPositionLinkRecord(p);
    (void)index->Head(index->PositionLinkRecord(p));
  }
  (void)index->PositionLinkRecord(~uint64_t{0});
  (void)index->Head(StaticIndex::kNoRecord - 1);
  // Matching by records over the index's own text (deep matches) and a few
  // other tokens, the separator and beyond the vocabulary included.
  StaticMatch by_records, plain;
  uint32_t rec = StaticIndex::kNoRecord;
  for (uint64_t i = 0; i < 256; ++i) {
    const uint32_t token = i % 5 == 4 || n == 0
                               ? static_cast<uint32_t>(i * 13 % (uint64_t{vocab} + 2))
                               : v.Token(1 + i % n);
    uint32_t next_rec = StaticIndex::kNoRecord;
    by_records = sam::runtime::TransferByRecords(*index, by_records, rec, token, &next_rec);
    rec = next_rec;
    if (!verified) continue;
    plain = sam::runtime::Transfer(v, plain, token);
    if (by_records.state != plain.state || by_records.len != plain.len)
      Fail("TransferByRecords differs from the transfer rule on a verified file");
    if (rec != StaticIndex::kNoRecord && rec != index->RecordOf(by_records.state))
      Fail("TransferByRecords gives a record that is not its state's");
  }
  // A few drafting steps of sam-cal over the records (a session may refuse
  // a corrupt file's draft tokens with an error, which ends them).
  if (vocab == 0) return;
  try {
    sam::runtime::SessionOptions o;
    o.policy = sam::runtime::Policy::kCalibrated;
    o.max_dynamic_bytes = size_t{1} << 20;
    sam::runtime::Session session(o);
    session.AttachIndex(index);
    std::vector<uint32_t> tokens;
    for (uint64_t p = 1; p <= n && tokens.size() < 16; ++p)
      if (v.Token(p) < vocab) tokens.push_back(v.Token(p));
    session.Prefill(tokens);
    uint32_t start = tokens.empty() ? 0 : tokens.back();
    for (uint64_t step = 0; step < 8; ++step) {
      const sam::runtime::DraftTree& tree = session.Propose(start);
      // Accept up to 3 tokens of the first root path.
      std::vector<uint32_t> commit = {start};
      int node = 0;
      for (size_t i = 1; i < tree.size() && commit.size() < 4; ++i)
        if (tree.parents[i] == node) commit.push_back(tree.tokens[node = static_cast<int>(i)]);
      session.Commit(commit);
      start = n == 0 ? 0 : v.Token(1 + (step * 31 + 7) % n);
      if (start >= vocab) start = 0;
    }
  } catch (const sam::Error&) {
  }
}

}  // namespace

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
        // own tables, whatever they hold): bounded answers. The options
        // are the ones the sections were built with, so that the runtime
        // maps them, child records included (their top_k when the hub
        // tables' lists are at least as long).
        if (v.hubs().present()) {
          const sam::format::ChildRecords& records = v.child_records();
          const bool records_fit = records.present() && records.top_k <= v.hubs().top_k;
          StaticIndex::Options so;
          so.min_degree = v.hubs().min_degree;
          so.top_k = records_fit ? records.top_k : v.hubs().top_k;
          so.filter_bits_per_edge =
              v.edge_filter().present() ? v.edge_filter().bits_per_edge : 0;
          so.record_min_count = records_fit ? records.min_count : 0;
          const auto index = StaticIndex::Create(&v, so);
          std::span<const StaticIndex::Child> children;
          for (uint64_t st = 0; st < v.num_states() && st < 512; ++st) {
            if (index->TopChildren(st, &children))
              for (const auto& c : children) (void)index->Next(st, c.token);
            for (uint32_t c = 0; c < 16; ++c) (void)index->Next(st, c % (v.vocab_size() + 1));
          }
          if (index->records_from_file()) ExerciseRecords(v, index, verify);
        }
        (void)f.ReadMetadata();
        (void)f.ReadVocabulary();
      } catch (const sam::Error&) {  // FormatError, or Create's refusal of absurd options
      }
    }
  }
  return 0;
}
