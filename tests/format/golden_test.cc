// Golden index files (tests/format/golden/, README.md there): committed
// files that every future reader must read, and that the writer must
// reproduce byte for byte from the same inputs. A change to writer and
// reader together cannot pass unnoticed: it changes the bytes, or the reader
// no longer answers what a brute-force search of the inputs answers.
#include <gtest/gtest.h>
#include <zstd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
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
  // Occurrences of any string, by scanning the text.
  Occurrences Count(const Tokens& s) const {
    Occurrences o;
    for (size_t end = s.size(); end <= text.size(); ++end)
      if (std::equal(s.begin(), s.end(), text.begin() + static_cast<long>(end - s.size())))
        if (o.count++ == 0) o.first_end = end;
    return o;
  }
};

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
    struct Kid {
      uint32_t token;
      uint64_t target, count;
    };
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
      for (const Kid& k : kids)
        if (!(s < v.num_tokens() && k.target == s + 1))
          ASSERT_TRUE(v.edge_filter().MayContain(s, k.token)) << "state " << s << " token " << k.token;
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
    std::sort(kids.begin(), kids.end(), [](const Kid& a, const Kid& b) {
      return a.count != b.count ? a.count > b.count : a.token < b.token;
    });
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

// The golden files of `dir`, written in format 1.`minor`: 1.0 files have no
// accelerator sections (a reader must still read them; the runtime prepares
// them at open).
void ReaderAnswersLikeBruteForce(const fs::path& dir, uint16_t minor) {
  for (const fs::path& json : Specs()) {
    auto spec = sam::golden::LoadGoldenSpec(json);
    if (minor == 0) spec.info.accelerators.reset();
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
    size_t checked = 0;
    for (const auto& [s, occ] : oracle.substrings) {
      const uint64_t state = Walk(v, s);
      ASSERT_NE(state, kNoState) << "a substring of the text is not found";
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
