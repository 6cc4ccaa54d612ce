// Golden index files (tests/format/golden/, README.md there): committed
// files that every future reader must read, and that the writer must
// reproduce byte for byte from the same inputs. A change to writer and
// reader together cannot pass unnoticed: it changes the bytes, or the reader
// no longer answers what a brute-force search of the inputs answers.
#include <gtest/gtest.h>
#include <zstd.h>

#include <algorithm>
#include <bit>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <nlohmann/json.hpp>
#include <sstream>

#include "golden.h"
#include "sam/format/index.h"
#include "temp_dir.h"

namespace {

namespace fs = std::filesystem;
using sam::format::IndexFile;
using sam::format::kNoState;
using sam::format::kRoot;
using Bytes = std::vector<uint8_t>;
using Tokens = std::vector<uint32_t>;

const fs::path kGoldenDir = SAM_GOLDEN_DIR;

Bytes ReadBytes(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return Bytes(std::istreambuf_iterator<char>(in), {});
}

std::vector<fs::path> Specs() {
  auto specs = sam::golden::GoldenSpecs(kGoldenDir);
  EXPECT_GE(specs.size(), 3u) << "golden descriptions missing in " << kGoldenDir;
  return specs;
}

// What a brute-force search of the text says about one substring.
struct Occurrences {
  uint64_t count = 0;
  uint64_t first_end = 0;  // 1-based end of the first occurrence
};

// The concatenated text T[1..N] (SEP after each document) and every
// substring of up to max_len tokens inside a document, with its occurrences,
// found by enumerating every start position.
struct Oracle {
  Tokens text;
  uint32_t sep = 0;
  std::map<Tokens, Occurrences> substrings;

  Oracle(const sam::golden::GoldenSpec& spec, size_t max_len) : sep(spec.vocab_size) {
    for (const auto& d : spec.documents) {
      text.insert(text.end(), d.begin(), d.end());
      text.push_back(sep);
    }
    for (size_t start = 0; start < text.size(); ++start) {
      Tokens s;
      for (size_t end = start; end < text.size() && text[end] != sep && s.size() < max_len;
           ++end) {
        s.push_back(text[end]);
        Occurrences& o = substrings[s];
        if (o.count++ == 0) o.first_end = end + 1;
      }
    }
  }
  // The 1-based end positions of every occurrence of any string (separators
  // included), in increasing order, by scanning the text; the empty string
  // ends everywhere, 0 included.
  std::vector<uint64_t> Ends(const Tokens& s) const {
    std::vector<uint64_t> ends;
    for (size_t end = s.size(); end <= text.size(); ++end)
      if (std::equal(s.begin(), s.end(), text.begin() + static_cast<long>(end - s.size())))
        ends.push_back(end);
    return ends;
  }
  Occurrences Count(const Tokens& s) const {
    const std::vector<uint64_t> ends = Ends(s);
    return Occurrences{ends.size(), ends.empty() ? 0 : ends.front()};
  }
};

// A transition and its target's occurrence count; the heaviest first is the
// order of the hub tables' and the child records' lists.
struct Kid {
  uint32_t token;
  uint64_t target, count;
};
void SortHeaviestFirst(std::vector<Kid>* kids) {
  std::sort(kids->begin(), kids->end(), [](const Kid& a, const Kid& b) {
    return a.count != b.count ? a.count > b.count : a.token < b.token;
  });
}

uint64_t Walk(const sam::format::IndexView& v, const Tokens& s) {
  uint64_t state = kRoot;
  for (uint32_t t : s) {
    state = v.Next(state, t);
    if (state == kNoState) return kNoState;
  }
  return state;
}

// The reader answers every question about the committed file as a brute-force
// search of the inputs does.
// The accelerator sections against a brute-force reading of the automaton:
// the hubs are exactly the states (the root aside) with at least
// min_degree transitions other than the implicit one; each hub's label
// table finds every token's transition, as IndexView::Next does, and none
// for the others; its children are its heaviest (count descending, then
// token), enumerated and sorted here; the filter says "maybe" for every
// transition of the other states.
void AcceleratorsAgreeWithBruteForce(const sam::format::IndexView& v,
                                     const sam::format::AcceleratorParams& params) {
  const sam::format::HubTables& hubs = v.hubs();
  ASSERT_TRUE(hubs.present());
  EXPECT_EQ(hubs.min_degree, params.min_degree);
  EXPECT_EQ(hubs.top_k, params.top_k);
  ASSERT_EQ(v.edge_filter().present(), params.filter_bits_per_edge > 0);
  uint64_t found = 0;
  for (uint64_t s = 1; s < v.num_states(); ++s) {
    std::vector<Kid> kids;  // every transition (document ends aside)
    size_t explicit_edges = 0;  // the implicit s -> s+1 left out
    for (uint32_t c = 0; c < v.vocab_size(); ++c) {
      const uint64_t t = v.Next(s, c);
      if (t == kNoState) continue;
      kids.push_back({c, t, v.Count(t)});
      explicit_edges += !(s < v.num_tokens() && t == s + 1);
    }
    const bool hub = explicit_edges >= params.min_degree;
    ASSERT_EQ((hubs.bits[s >> 6] >> (s & 63) & 1) != 0, hub) << "state " << s;
    if (!hub) {
      for (const Kid& k : kids) {
        if (!(s < v.num_tokens() && k.target == s + 1)) {
          ASSERT_TRUE(v.edge_filter().MayContain(s, k.token)) << "state " << s << " token " << k.token;
        }
      }
      continue;
    }
    ++found;
    const sam::format::HubEntry* entry = nullptr;
    for (uint64_t i = 0; i <= hubs.mask; ++i)
      if (hubs.table[i].key == s + 1) entry = &hubs.table[i];
    ASSERT_NE(entry, nullptr) << "hub " << s << " has no table entry";
    for (uint32_t c = 0; c < v.vocab_size(); ++c) {
      uint64_t got = kNoState;
      for (uint64_t i = 0; i < entry->num_slots; ++i) {
        const sam::format::LabelSlot& slot = hubs.slots[entry->slot_begin + i];
        if (slot.label == c)
          got = hubs.slots_hold_targets ? slot.value : v.edges().Get(entry->edge_begin + slot.value);
      }
      const uint64_t want = v.Next(s, c);
      const bool explicit_edge = want != kNoState && !(s < v.num_tokens() && want == s + 1);
      ASSERT_EQ(got, explicit_edge ? want : kNoState) << "hub " << s << " token " << c;
    }
    SortHeaviestFirst(&kids);
    const size_t k = std::min<size_t>(kids.size(), params.top_k);
    ASSERT_EQ(hubs.sizes[entry->hub], k) << "hub " << s;
    for (size_t i = 0; i < k; ++i) {
      const sam::format::HubChild& c = hubs.children[uint64_t{entry->hub} * hubs.top_k + i];
      ASSERT_EQ(c.token, kids[i].token) << "hub " << s << " child " << i;
      ASSERT_EQ(c.target, kids[i].target);
      ASSERT_EQ(c.count, kids[i].count);
    }
  }
  EXPECT_EQ(found, hubs.num_hubs);
  EXPECT_GT(found, 0u) << "a golden file with accelerators should have hubs";
}

// A state's class as the documents give it, checked against the reader:
// its longest string, read at its first occurrence (the reader's Len and
// MinEndpos), occurs Count times, first there, and one more token on its
// left occurs less often (no longer string has the same occurrences); its
// suffix link is the state of its longest proper suffix that occurs more
// often; and, with `transitions`, its transitions are the tokens after its
// occurrences (document ends aside), each to the state of the longer
// string, which occurs as often as that token follows.
struct StateClass {
  uint64_t count = 0;
  uint64_t link = kRoot;
  std::vector<Kid> kids;                   // heaviest first
  std::map<uint32_t, uint64_t> first_end;  // of the longer string, by token
};

void ReadClass(const sam::format::IndexView& v, const Oracle& oracle, uint64_t state,
               bool transitions, StateClass* out) {
  const uint64_t e = v.MinEndpos(state), len = v.Len(state);
  ASSERT_TRUE(len > 0 && e >= len && e <= oracle.text.size()) << "state " << state;
  const Tokens s(oracle.text.begin() + static_cast<long>(e - len),
                 oracle.text.begin() + static_cast<long>(e));
  const std::vector<uint64_t> ends = oracle.Ends(s);
  ASSERT_FALSE(ends.empty());
  ASSERT_EQ(ends.front(), e) << "state " << state;
  out->count = ends.size();
  ASSERT_EQ(v.Count(state), out->count) << "state " << state;
  if (e > len) {
    Tokens longer = s;
    longer.insert(longer.begin(), oracle.text[e - len - 1]);
    ASSERT_LT(oracle.Count(longer).count, out->count)
        << "state " << state << ": a longer string occurs as often";
  }
  // The suffix link: suffixes occur no less often than longer ones, so the
  // longest one that occurs more often is found by bisection (the empty
  // suffix, the root's, occurs everywhere).
  auto suffix = [&](uint64_t l) { return Tokens(s.end() - static_cast<long>(l), s.end()); };
  uint64_t lo = 0, hi = len - 1;
  while (lo < hi) {
    const uint64_t mid = (lo + hi + 1) / 2;
    if (oracle.Count(suffix(mid)).count > out->count)
      lo = mid;
    else
      hi = mid - 1;
  }
  out->link = v.Link(state);
  ASSERT_EQ(v.Len(out->link), lo) << "state " << state;
  if (lo == 0) {
    ASSERT_EQ(out->link, kRoot) << "state " << state;
  } else {
    const Occurrences o = oracle.Count(suffix(lo));
    ASSERT_EQ(v.Count(out->link), o.count) << "state " << state;
    ASSERT_EQ(v.MinEndpos(out->link), o.first_end) << "state " << state;
  }
  out->kids.clear();
  out->first_end.clear();
  if (!transitions) return;
  std::map<uint32_t, std::vector<uint64_t>> after;  // token -> end positions of s + token
  for (uint64_t q : ends)
    if (q < oracle.text.size() && oracle.text[q] != oracle.sep)
      after[oracle.text[q]].push_back(q + 1);
  for (const auto& [c, longer_ends] : after) {
    const uint64_t t = v.Next(state, c);
    ASSERT_NE(t, kNoState) << "state " << state << " token " << c;
    ASSERT_EQ(v.Count(t), longer_ends.size()) << "state " << state << " token " << c;
    ASSERT_EQ(v.MinEndpos(t), longer_ends.front()) << "state " << state << " token " << c;
    ASSERT_TRUE(v.Len(t) > len && v.Len(v.Link(t)) <= len) << "state " << state << " token " << c;
    out->kids.push_back(Kid{c, t, longer_ends.size()});
    out->first_end[c] = longer_ends.front();
  }
  SortHeaviestFirst(&out->kids);
}

// The child records (RECS) against the documents: every clone that occurs
// at least min_count times has a record, laid out in clone order (a head,
// its children, and for a hub the slot that places its label table), and
// no other clone has one; the head holds the clone's length and count, its
// suffix link's record and its number of children and hub bit; the
// children are its heaviest transitions (count descending, then token;
// document ends aside; at most top_k), each with its target's record, or,
// for a target that occurs once (a position), the token after its one
// occurrence (the separator at a document end); every position holds its
// suffix link's record. Also checks that the golden file exercises each of
// these cases.
void ChildRecordsAgreeWithBruteForce(const sam::format::IndexView& v, const Oracle& oracle,
                                     const sam::format::AcceleratorParams& params) {
  using sam::format::kNoRecord;
  using sam::format::RecordEntrySlot;
  using sam::format::RecordHeadSlot;
  const sam::format::ChildRecords& r = v.child_records();
  ASSERT_TRUE(r.present());
  EXPECT_EQ(r.min_count, params.record_min_count);
  EXPECT_EQ(r.top_k, params.top_k);
  const uint64_t n = v.num_tokens(), clones = v.num_clones();
  ASSERT_EQ(r.num_clones, clones);
  ASSERT_EQ(r.num_positions, n + 1);
  // The layout the records must have, from each clone's class.
  std::vector<StateClass> classes(clones);
  std::vector<uint32_t> record(clones, kNoRecord);  // the head's slot
  uint64_t slots = 0;
  for (uint64_t k = 0; k < clones; ++k) {
    StateClass& c = classes[k];
    ReadClass(v, oracle, n + 1 + k, /*transitions=*/true, &c);
    if (::testing::Test::HasFatalFailure()) return;
    if (c.count < params.record_min_count) continue;
    record[k] = static_cast<uint32_t>(slots);
    const bool hub = c.kids.size() >= params.min_degree;  // a clone's transitions are all explicit
    slots += 1 + std::min<size_t>(c.kids.size(), params.top_k) + (hub ? 1 : 0);
  }
  auto record_of = [&](uint64_t state) {
    return state > n && state - n - 1 < clones ? record[state - n - 1] : kNoRecord;
  };
  ASSERT_EQ(r.num_slots, slots);
  ASSERT_EQ(r.record_begin[clones], slots);
  // What the file exercises.
  size_t with_records = 0, without = 0, truncated = 0, hubs = 0, several = 0, linked = 0,
         unlinked = 0, to_records = 0, to_no_record = 0, to_tokens = 0, to_document_ends = 0;
  for (uint64_t k = 0; k < clones; ++k) {
    const uint64_t state = n + 1 + k;
    SCOPED_TRACE("clone state " + std::to_string(state));
    const StateClass& c = classes[k];
    const uint32_t begin = r.record_begin[k], end = r.record_begin[k + 1];
    if (record[k] == kNoRecord) {
      ASSERT_EQ(begin, end) << "a clone that occurs " << c.count << " times has a record";
      ++without;
      continue;
    }
    ++with_records;
    ASSERT_EQ(begin, record[k]);
    const RecordHeadSlot head = std::bit_cast<RecordHeadSlot>(r.slots[begin]);
    const size_t size = std::min<size_t>(c.kids.size(), params.top_k);
    const bool hub = c.kids.size() >= params.min_degree;
    ASSERT_EQ(end - begin, 1 + size + (hub ? 1 : 0));
    EXPECT_EQ(head.len, v.Len(state));
    EXPECT_EQ(head.count, c.count);
    EXPECT_EQ(head.link_record, record_of(c.link));
    ASSERT_EQ(head.size(), size);
    ASSERT_EQ(head.hub(), hub);
    EXPECT_EQ(head.bits >> 9, 0u);
    truncated += size < c.kids.size();
    several += size > 1;
    (head.link_record == kNoRecord ? unlinked : linked)++;
    for (size_t i = 0; i < size; ++i) {
      const RecordEntrySlot e = r.slots[begin + 1 + i];
      const Kid& want = c.kids[i];
      SCOPED_TRACE("child " + std::to_string(i));
      ASSERT_EQ(e.token, want.token);
      ASSERT_EQ(e.target, want.target);
      ASSERT_EQ(e.count, want.count);
      if (want.count > 1 || want.target > n) {
        EXPECT_EQ(e.record, record_of(want.target));
        (e.record == kNoRecord ? to_no_record : to_records)++;
      } else {
        // A position: the token after its one occurrence.
        const uint64_t at = c.first_end.at(want.token);
        ASSERT_EQ(want.target, at);
        const uint32_t after = at < oracle.text.size() ? oracle.text[at] : oracle.sep;
        EXPECT_EQ(e.record, after);
        (after == oracle.sep ? to_document_ends : to_tokens)++;
      }
    }
    if (hub) {  // the slot that places its label table: the hub table's entry
      ++hubs;
      const sam::format::HubEntry* entry = sam::format::FindHub(v.hubs(), state);
      ASSERT_NE(entry, nullptr);
      const RecordEntrySlot place = r.slots[begin + 1 + size];
      EXPECT_EQ(place.token, entry->slot_begin);
      EXPECT_EQ(place.target, entry->num_slots);
      EXPECT_EQ(place.count | uint64_t{place.record} << 32, entry->edge_begin);
    }
  }
  // Every position's suffix link's record (position 0 has none).
  EXPECT_EQ(r.position_link_record[0], kNoRecord);
  size_t positions_linked = 0;
  for (uint64_t p = 1; p <= n; ++p) {
    StateClass c;
    ReadClass(v, oracle, p, /*transitions=*/false, &c);
    if (::testing::Test::HasFatalFailure()) return;
    ASSERT_EQ(r.position_link_record[p], record_of(c.link)) << "position " << p;
    positions_linked += r.position_link_record[p] != kNoRecord;
  }
  EXPECT_GT(with_records, 0u);
  EXPECT_GT(without, 0u) << "no clone occurs too rarely for a record";
  EXPECT_GT(truncated, 0u) << "no record leaves children out (top_k below a degree)";
  EXPECT_GT(hubs, 0u) << "no hub record";
  EXPECT_GT(several, 0u) << "no record with several children";
  EXPECT_GT(linked, 0u) << "no head whose suffix link has a record";
  EXPECT_GT(unlinked, 0u) << "no head whose suffix link has none";
  EXPECT_GT(to_records, 0u) << "no child with a record";
  EXPECT_GT(to_no_record, 0u) << "no recurring child without a record";
  EXPECT_GT(to_tokens, 0u) << "no child that occurs once";
  EXPECT_GT(to_document_ends, 0u) << "no child that occurs once, at a document end";
  EXPECT_GT(positions_linked, 0u);
  EXPECT_LT(positions_linked, n) << "every position's suffix link has a record";
}

// The golden files of `dir`, written in format 1.`minor`: 1.0 files have no
// accelerator sections (a reader must still read them; the runtime prepares
// them at open).
void ReaderAnswersLikeBruteForce(const fs::path& dir, uint16_t minor) {
  for (const fs::path& json : Specs()) {
    auto spec = sam::golden::LoadGoldenSpec(json);
    if (minor == 0) {
      // Format 1.0 has no accelerator sections; a file whose point is its
      // child records or its clone labels has no 1.0 counterpart.
      if (spec.info.accelerators && (spec.info.accelerators->record_min_count > 0 ||
                                     spec.info.accelerators->clone_labels))
        continue;
      spec.info.accelerators.reset();
    }
    SCOPED_TRACE(spec.name + " in " + dir.string());
    const fs::path sam_path = dir / (spec.name + ".sam");
    ASSERT_TRUE(fs::exists(sam_path)) << sam_path;
    sam::format::OpenOptions verify;
    verify.verify = true;
    IndexFile f = IndexFile::Open(sam_path.string(), verify);
    const auto& v = f.view();
    const Oracle oracle(spec, /*max_len=*/6);

    // Header and cold sections: the inputs as given.
    const auto& h = f.header();
    EXPECT_EQ(h.major_version, 1);
    EXPECT_EQ(h.minor_version, minor);
    EXPECT_EQ(h.vocab_size, spec.vocab_size);
    EXPECT_EQ(h.separator_id, spec.vocab_size);
    EXPECT_EQ(h.bos_id, spec.info.bos_id);
    EXPECT_EQ(h.eos_id, spec.info.eos_id);
    EXPECT_EQ(h.tokenizer_sha256, spec.info.tokenizer_sha256);
    EXPECT_EQ(h.num_documents, spec.documents.size());
    EXPECT_EQ(h.num_tokens, oracle.text.size());
    EXPECT_EQ(f.ReadMetadata().json, spec.info.metadata_json);
    EXPECT_EQ(f.ReadVocabulary(), spec.info.vocabulary);
    std::vector<std::string> tags;
    for (const auto& s : f.sections()) tags.push_back(s.tag);
    std::vector<std::string> want = {"TEXT", "LINK", "CLEN", "CMEP", "CCNT", "NCNT", "ROOT",
                                     "EDGE", "EDEG", "ESEL", "META"};
    if (!spec.info.vocabulary.empty()) want.push_back("VOCB");
    want.push_back("TEST");
    if (spec.info.accelerators) {
      want.push_back("HUBS");
      if (spec.info.accelerators->filter_bits_per_edge > 0) want.push_back("FILT");
      if (spec.info.accelerators->record_min_count > 0) want.push_back("RECS");
      if (spec.info.accelerators->clone_labels) want.push_back("CLAB");
    }
    EXPECT_EQ(tags, want);

    // The text, token by token.
    ASSERT_EQ(v.num_tokens(), oracle.text.size());
    for (uint64_t p = 1; p <= v.num_tokens(); ++p) {
      ASSERT_EQ(v.Token(p), oracle.text[p - 1]) << "position " << p;
      ASSERT_EQ(v.IsDocumentEnd(p), oracle.text[p - 1] == oracle.sep) << "position " << p;
    }
    EXPECT_EQ(v.Count(kRoot), v.num_tokens());

    // Every substring of up to 6 tokens: its state, count and first end
    // position; and each one-token extension exists exactly when the longer
    // string occurs (ForEachChild lists exactly those, in token order).
    // With CLAB, each clone's label is checked against the last token of a
    // substring that reaches it; every clone must be reached.
    const bool labels = spec.info.accelerators && spec.info.accelerators->clone_labels;
    ASSERT_EQ(v.clone_labels().size(), labels ? v.num_clones() : 0);
    std::set<uint64_t> labelled;
    size_t checked = 0;
    for (const auto& [s, occ] : oracle.substrings) {
      const uint64_t state = Walk(v, s);
      ASSERT_NE(state, kNoState) << "a substring of the text is not found";
      if (labels && state > v.num_tokens()) {
        ASSERT_EQ(v.clone_labels().Get(state - v.num_tokens() - 1), s.back()) << "clone " << state;
        labelled.insert(state);
      }
      ASSERT_EQ(v.Count(state), occ.count);
      ASSERT_EQ(v.MinEndpos(state), occ.first_end);
      ASSERT_GE(v.Len(state), s.size());
      ASSERT_LT(v.Len(v.Link(state)), s.size());
      ASSERT_EQ(v.LastToken(state), s.back());
      if (s.size() < 6) {
        std::vector<uint32_t> expected_children;
        Tokens longer = s;
        longer.push_back(0);
        for (uint32_t c = 0; c < spec.vocab_size; ++c) {
          longer.back() = c;
          const bool occurs = oracle.substrings.count(longer) != 0;
          if (occurs) expected_children.push_back(c);
          ASSERT_EQ(v.Next(state, c) != kNoState, occurs) << "token " << c;
        }
        std::vector<uint32_t> children;
        v.ForEachChild(state, [&](uint32_t c, uint64_t) { children.push_back(c); });
        ASSERT_EQ(children, expected_children);
      }
      ++checked;
    }
    EXPECT_GT(checked, 0u);
    if (labels) {
      // The clones no substring above reaches (strings across a document
      // end, or longer than 6 tokens): the text's token at their first end
      // position (its first end positions are --verify's, checked above
      // against the substrings that reach them). Among them the separator:
      // the clones of strings that end a document.
      ASSERT_GT(labelled.size(), 0u);
      size_t separators = 0;
      for (uint64_t k = 0; k < v.num_clones(); ++k) {
        const uint64_t state = v.num_tokens() + 1 + k;
        if (labelled.count(state) != 0) continue;
        ASSERT_EQ(v.clone_labels().Get(k), oracle.text[v.MinEndpos(state) - 1]) << "clone " << state;
        separators += v.clone_labels().Get(k) == oracle.sep;
      }
      EXPECT_GT(separators, 0u);
    }
    // Each whole document (up to 60 tokens here), however long.
    for (const auto& d : spec.documents) {
      const uint64_t state = Walk(v, d);
      ASSERT_NE(state, kNoState);
      const Occurrences occ = oracle.Count(d);
      EXPECT_EQ(v.Count(state), occ.count);
      EXPECT_EQ(v.MinEndpos(state), occ.first_end);
    }
    // Strings absent from the text: the separator, a token past the
    // vocabulary, and a document followed by its own separator's successor.
    EXPECT_EQ(v.Next(kRoot, spec.vocab_size), kNoState);
    EXPECT_EQ(v.Next(kRoot, spec.vocab_size + 1), kNoState);
    if (spec.info.accelerators) AcceleratorsAgreeWithBruteForce(v, *spec.info.accelerators);
    if (spec.info.accelerators && spec.info.accelerators->record_min_count > 0)
      ChildRecordsAgreeWithBruteForce(v, oracle, *spec.info.accelerators);
    else
      EXPECT_FALSE(v.child_records().present());
  }
}

TEST(Golden, ReaderAnswersLikeBruteForceOnTheInputs) { ReaderAnswersLikeBruteForce(kGoldenDir, 1); }

TEST(Golden, ReaderReadsFormat1_0Files) { ReaderAnswersLikeBruteForce(kGoldenDir / "1.0", 0); }

// Every byte of a file that must not depend on the zstd version: the header
// (less the file size and checksum), the table (less the stored sizes,
// offsets and checksums of compressed sections), raw sections byte for byte,
// compressed ones after decompression. Empty when the files agree so.
std::string DescribeDifferences(const Bytes& want, const Bytes& got) {
  std::ostringstream out;
  auto u32 = [](const Bytes& b, size_t o) { uint32_t v; std::memcpy(&v, b.data() + o, 4); return v; };
  auto u64 = [](const Bytes& b, size_t o) { uint64_t v; std::memcpy(&v, b.data() + o, 8); return v; };
  if (want.size() < 256 || got.size() < 256) return "a file is shorter than its header";
  for (size_t o = 0; o < 256; ++o)
    if ((o < 32 || o >= 40) && (o < 56 || o >= 64) && want[o] != got[o])
      out << "header byte " << o << " differs; ";
  const uint32_t nsec = u32(want, 44);
  if (nsec != u32(got, 44) || nsec > 64 || 256 + 64 * nsec > std::min(want.size(), got.size()))
    return out.str() + "section tables differ";
  for (uint32_t i = 0; i < nsec; ++i) {
    const size_t e = 256 + 64 * i;
    const std::string tag(reinterpret_cast<const char*>(want.data() + e), 4);
    const bool zstd = u32(want, e + 4) == 1;
    for (size_t o = 0; o < 64; ++o)
      if ((!zstd || o < 16 || o >= 48 || (o >= 32 && o < 40)) && want[e + o] != got[e + o]) {
        out << "section " << tag << ": table entry byte " << o << " differs; ";
        break;
      }
    auto contents = [&](const Bytes& b) {
      const uint64_t off = u64(b, e + 16), stored = u64(b, e + 24), raw = u64(b, e + 32);
      if (off > b.size() || stored > b.size() - off) return Bytes{};
      if (!zstd) return Bytes(b.begin() + static_cast<long>(off), b.begin() + static_cast<long>(off + stored));
      Bytes out_bytes(raw);
      const size_t n = ZSTD_decompress(out_bytes.data(), raw, b.data() + off, stored);
      if (ZSTD_isError(n) || n != raw) return Bytes{};
      return out_bytes;
    };
    if (contents(want) != contents(got)) out << "section " << tag << " contents differ; ";
  }
  return out.str();
}

// The writer reproduces each committed file from its inputs, byte for byte.
TEST(Golden, WriterReproducesTheFilesByteForByte) {
  const sam::testing::TempDir tmp("sam_golden");
  const fs::path& dir = tmp.path();
  const std::string recorded_zstd = [] {
    std::ifstream in(kGoldenDir / "ZSTD_VERSION");
    std::string v;
    in >> v;
    return v;
  }();
  for (const fs::path& json : Specs()) {
    const auto spec = sam::golden::LoadGoldenSpec(json);
    SCOPED_TRACE(spec.name);
    const std::string out = (dir / (spec.name + ".sam")).string();
    sam::golden::BuildGolden(spec, out);
    const Bytes want = ReadBytes(kGoldenDir / (spec.name + ".sam"));
    const Bytes got = ReadBytes(out);
    const std::string differences = DescribeDifferences(want, got);
    EXPECT_EQ(differences, "") << "the writer no longer writes " << spec.name
                               << ".sam as committed";
    if (recorded_zstd == ZSTD_versionString()) {
      EXPECT_TRUE(want == got) << spec.name << ".sam differs from the committed file";
    } else if (want != got) {
      // Another zstd may compress the cold sections differently; everything
      // else was compared above.
      std::cout << "note: " << spec.name << ".sam: compressed sections differ under zstd "
                << ZSTD_versionString() << " (the golden files were written with zstd "
                << recorded_zstd << "); their decompressed contents agree\n";
    }
  }
}

}  // namespace
