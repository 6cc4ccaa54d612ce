// The automaton, built and read back from its file, against brute-force
// search over the documents: longest-suffix match lengths, first end
// positions, occurrence counts and document boundaries.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>

#include "sam/format/index.h"
#include "sam/automaton/builder.h"

namespace {

using sam::format::IndexFile;
using sam::format::IndexView;
using sam::format::kNoState;
using sam::format::kRoot;
using Docs = std::vector<std::vector<uint32_t>>;

std::string TempPath(const std::string& name) {
  return (std::filesystem::temp_directory_path() /
          (name + "-" + std::to_string(::getpid()) + ".sam"))
      .string();
}

// Brute force over the documents (never across them).
struct Oracle {
  Docs docs;
  std::vector<uint64_t> doc_start;  // 1-based global position of each doc's first token

  explicit Oracle(Docs d) : docs(std::move(d)) {
    uint64_t pos = 1;
    for (const auto& doc : docs) {
      doc_start.push_back(pos);
      pos += doc.size() + 1;  // + separator
    }
  }
  // Occurrence count and first end position (global, 1-based) of pattern.
  std::pair<uint64_t, uint64_t> Find(const std::vector<uint32_t>& pat) const {
    uint64_t count = 0, first = 0;
    for (size_t d = 0; d < docs.size(); ++d) {
      const auto& doc = docs[d];
      if (pat.size() > doc.size()) continue;
      for (size_t i = 0; i + pat.size() <= doc.size(); ++i) {
        if (std::equal(pat.begin(), pat.end(), doc.begin() + i)) {
          ++count;
          const uint64_t end = doc_start[d] + i + pat.size() - 1;
          if (first == 0 || end < first) first = end;
        }
      }
    }
    return {count, first};
  }
};

// Walks the cursor transfer rule of DESIGN.md section 4 over query and
// checks every step's match length against brute force.
void CheckQuery(const IndexView& v, const Oracle& o, const std::vector<uint32_t>& query) {
  uint64_t state = kRoot, len = 0;
  for (size_t j = 0; j < query.size(); ++j) {
    const uint32_t c = query[j];
    while (state != kRoot && v.Next(state, c) == kNoState) {
      state = v.Link(state);
      len = v.Len(state);
    }
    const uint64_t next = v.Next(state, c);
    if (next != kNoState) {
      state = next;
      ++len;
    } else {
      state = kRoot;
      len = 0;
    }
    // Brute force: the longest suffix of query[0..j] occurring in a document.
    uint64_t best = 0;
    for (uint64_t l = 1; l <= j + 1; ++l) {
      std::vector<uint32_t> suf(query.begin() + (j + 1 - l), query.begin() + j + 1);
      if (o.Find(suf).first == 0) break;
      best = l;
    }
    ASSERT_EQ(len, best) << "at query position " << j;
    if (len > 0) {
      std::vector<uint32_t> suf(query.begin() + (j + 1 - len), query.begin() + j + 1);
      auto [count, first] = o.Find(suf);
      ASSERT_EQ(v.Count(state), count);
      ASSERT_EQ(v.MinEndpos(state), first);
      ASSERT_GE(v.Len(state), len);
      ASSERT_LT(v.Len(v.Link(state)), len);
      // The continuation from min_endpos stays inside the document.
      for (uint64_t k = 0; k < len; ++k)
        ASSERT_EQ(v.Token(first - len + 1 + k), suf[k]);
    }
  }
}

// Every substring of every document (up to a length) is found with exact
// count and first end position; every transition label is consistent.
void CheckAllSubstrings(const IndexView& v, const Oracle& o, size_t max_len) {
  for (const auto& doc : o.docs) {
    for (size_t i = 0; i < doc.size(); ++i) {
      uint64_t state = kRoot;
      std::vector<uint32_t> pat;
      for (size_t l = 1; l <= max_len && i + l <= doc.size(); ++l) {
        pat.push_back(doc[i + l - 1]);
        state = v.Next(state, doc[i + l - 1]);
        ASSERT_NE(state, kNoState);
        auto [count, first] = o.Find(pat);
        ASSERT_EQ(v.Count(state), count);
        ASSERT_EQ(v.MinEndpos(state), first);
      }
    }
  }
}

Docs RandomDocs(std::mt19937& rng, int ndocs, int max_len, uint32_t alphabet) {
  Docs docs(ndocs);
  for (auto& d : docs) {
    d.resize(1 + rng() % max_len);
    for (auto& t : d) t = rng() % alphabet;
  }
  return docs;
}

void RoundTrip(const Docs& docs, uint32_t vocab, std::mt19937& rng, size_t max_sub = 6,
               const sam::automaton::BuilderOptions& builder = {}) {
  const std::string path = TempPath("oracle");
  sam::automaton::BuildIndexFile(docs, vocab, path, {}, builder);
  sam::format::OpenOptions opts;
  opts.verify = true;
  IndexFile f = IndexFile::Open(path, opts);
  const IndexView& v = f.view();
  Oracle o(docs);
  CheckAllSubstrings(v, o, max_sub);
  for (int q = 0; q < 20; ++q) {
    std::vector<uint32_t> query(1 + rng() % 30);
    // Mix random tokens with copied runs so that long matches happen.
    for (size_t i = 0; i < query.size(); ++i) query[i] = rng() % vocab;
    const auto& d = docs[rng() % docs.size()];
    const size_t from = rng() % d.size();
    const size_t at = rng() % query.size();
    for (size_t k = 0; at + k < query.size() && from + k < d.size(); ++k)
      query[at + k] = d[from + k];
    CheckQuery(v, o, query);
  }
  std::filesystem::remove(path);
}

TEST(AutomatonOracle, SmallAlphabet) {
  std::mt19937 rng(1);
  for (int rep = 0; rep < 20; ++rep) RoundTrip(RandomDocs(rng, 1 + rng() % 6, 40, 2), 2, rng);
}

TEST(AutomatonOracle, MediumAlphabetManyDocuments) {
  std::mt19937 rng(2);
  for (int rep = 0; rep < 10; ++rep) RoundTrip(RandomDocs(rng, 50, 30, 5), 5, rng);
}

TEST(AutomatonOracle, LargeAlphabet) {
  std::mt19937 rng(3);
  for (int rep = 0; rep < 5; ++rep) RoundTrip(RandomDocs(rng, 20, 60, 300), 1000, rng);
}

TEST(AutomatonOracle, RepetitiveAndAdversarial) {
  std::mt19937 rng(4);
  Docs docs;
  docs.push_back(std::vector<uint32_t>(50, 0));                  // a^50
  std::vector<uint32_t> ab;
  for (int i = 0; i < 40; ++i) ab.push_back(i % 2);              // (ab)^20
  docs.push_back(ab);
  std::vector<uint32_t> fib = {0}, prev = {1};                   // Fibonacci word
  while (fib.size() < 60) { auto next = fib; next.insert(next.end(), prev.begin(), prev.end()); prev = fib; fib = next; }
  docs.push_back(fib);
  docs.push_back(ab);                                            // duplicate document
  docs.push_back({2});                                           // one-token document
  RoundTrip(docs, 3, rng, 12);
}

// The 64-bit paths, on corpora far below 2^31 tokens: the builder forced to
// 64-bit ids, or widened in the middle of a build, writes the very bytes of
// the 32-bit build; forced wide widths give the same automaton, which the
// brute-force oracle checks like any other (and --verify accepts).
std::vector<char> FileBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::vector<char>(std::istreambuf_iterator<char>(in), {});
}

TEST(AutomatonOracle, WideIdsWriteTheSameFile) {
  using sam::automaton::BuilderOptions;
  std::mt19937 rng(6);
  for (int rep = 0; rep < 12; ++rep) {
    const uint32_t vocab = rep % 3 == 0 ? 2 : rep % 3 == 1 ? 7 : 500;
    const Docs docs = RandomDocs(rng, 1 + rng() % 40, 80, vocab);
    uint64_t tokens = 0;
    for (const auto& d : docs) tokens += d.size() + 1;
    const std::string narrow = TempPath("narrow"), wide = TempPath("wide"),
                      widened = TempPath("widened");
    sam::automaton::BuildIndexFile(docs, vocab, narrow);
    sam::automaton::BuildIndexFile(docs, vocab, wide, {}, {.ids = BuilderOptions::Ids::kWide});
    {
      // Widened before the document that takes the corpus past half its
      // tokens (expected_tokens 0: nothing reserved, so widening also moves
      // arrays that are not full).
      sam::automaton::SuffixAutomatonBuilder b(vocab, 0, {.widen_at_tokens = tokens / 2 + 1});
      bool widened_mid_build = false;
      for (const auto& d : docs) {
        const bool before = b.wide_ids();
        b.AddDocument(d);
        widened_mid_build |= !before && b.wide_ids() && b.num_documents() > 1;
      }
      EXPECT_TRUE(b.wide_ids());
      EXPECT_EQ(widened_mid_build, docs.size() > 1 && docs[0].size() + 1 < tokens / 2 + 1);
      b.Write(widened, {});
    }
    const auto expected = FileBytes(narrow);
    ASSERT_FALSE(expected.empty());
    EXPECT_EQ(FileBytes(wide), expected) << "rep " << rep;
    EXPECT_EQ(FileBytes(widened), expected) << "rep " << rep;
    for (const auto& p : {narrow, wide, widened}) std::filesystem::remove(p);
  }
}

// WriteToMemory (format::IndexWriter's memory mode) gives the file's bytes,
// which open with IndexFile::FromBuffer; an empty builder is refused.
TEST(AutomatonOracle, InMemoryIndexEqualsTheFile) {
  std::mt19937 rng(8);
  for (int rep = 0; rep < 6; ++rep) {
    const uint32_t vocab = rep % 2 == 0 ? 5 : 300;
    const Docs docs = RandomDocs(rng, 1 + rng() % 30, 60, vocab);
    const std::string path = TempPath("file");
    sam::automaton::IndexInfo info;
    info.metadata_json = "{\"rep\": " + std::to_string(rep) + "}";
    sam::automaton::BuildIndexFile(docs, vocab, path, info);
    sam::automaton::SuffixAutomatonBuilder b(vocab);
    for (const auto& d : docs) b.AddDocument(d);
    std::vector<uint8_t> memory = {1, 2, 3};  // replaced
    const auto report = b.WriteToMemory(info, &memory, "memory");
    const auto expected = FileBytes(path);
    ASSERT_EQ(memory.size(), expected.size()) << "rep " << rep;
    EXPECT_TRUE(std::equal(memory.begin(), memory.end(),
                           reinterpret_cast<const uint8_t*>(expected.data())))
        << "rep " << rep;
    EXPECT_EQ(report.file_bytes, memory.size());
    const auto file = sam::format::IndexFile::FromBuffer(memory.data(), memory.size(), "memory");
    EXPECT_EQ(file.view().num_tokens(), sam::format::IndexFile::Open(path).view().num_tokens());
    std::filesystem::remove(path);
  }
  sam::automaton::SuffixAutomatonBuilder empty(10);
  std::vector<uint8_t> memory = {1};
  EXPECT_THROW(empty.WriteToMemory({}, &memory, "memory"), sam::format::FormatError);
}

TEST(AutomatonOracle, WideWidthsGiveTheSameAutomaton) {
  using sam::automaton::BuilderOptions;
  std::mt19937 rng(7);
  for (int rep = 0; rep < 6; ++rep) {
    const uint32_t vocab = rep % 2 ? 4 : 300;
    const Docs docs = RandomDocs(rng, 1 + rng() % 30, 60, vocab);
    for (const unsigned width : {33u, 57u}) {
      RoundTrip(docs, vocab, rng, 6, {.ids = BuilderOptions::Ids::kWide, .min_width = width});
      // Every state and transition equals the narrow build's.
      const std::string narrow = TempPath("narrow"), wide = TempPath("wide");
      sam::automaton::BuildIndexFile(docs, vocab, narrow);
      sam::automaton::BuildIndexFile(docs, vocab, wide, {}, {.min_width = width});
      sam::format::OpenOptions opts;
      opts.verify = true;
      IndexFile a = IndexFile::Open(narrow, opts), b = IndexFile::Open(wide, opts);
      const sam::format::IndexHeader& h = b.header();
      EXPECT_EQ(h.state_width, width);
      EXPECT_EQ(h.position_width, width);
      EXPECT_EQ(h.clone_len_width, width);
      EXPECT_EQ(h.count_width, width);
      const IndexView& x = a.view();
      const IndexView& y = b.view();
      ASSERT_EQ(x.num_states(), y.num_states());
      ASSERT_EQ(x.num_edges(), y.num_edges());
      for (uint64_t v = 0; v < x.num_states(); ++v) {
        ASSERT_EQ(x.Len(v), y.Len(v));
        ASSERT_EQ(x.Link(v), y.Link(v));
        ASSERT_EQ(x.Count(v), y.Count(v));
        ASSERT_EQ(x.MinEndpos(v), y.MinEndpos(v));
        for (uint32_t c = 0; c < vocab; ++c) ASSERT_EQ(x.Next(v, c), y.Next(v, c));
      }
      std::filesystem::remove(narrow);
      std::filesystem::remove(wide);
    }
  }
}

TEST(AutomatonOracle, BuilderOptionsAreChecked) {
  EXPECT_THROW(sam::automaton::SuffixAutomatonBuilder(10, 0, {.min_width = 58}),
               sam::format::FormatError);
  EXPECT_THROW(sam::automaton::SuffixAutomatonBuilder(10, sam::automaton::kMaxBuilderTokens),
               sam::format::FormatError);
  EXPECT_FALSE(sam::automaton::SuffixAutomatonBuilder(10, 1000).wide_ids());
}

TEST(AutomatonOracle, NoMatchCrossesDocuments) {
  std::mt19937 rng(5);
  const std::string path = TempPath("boundary");
  Docs docs = {{1, 2, 3}, {4, 5, 6}};
  sam::automaton::BuildIndexFile(docs, 10, path);
  IndexFile f = IndexFile::Open(path);
  const IndexView& v = f.view();
  // "3 4" spans the boundary and must not be found.
  uint64_t s = v.Next(kRoot, 3);
  ASSERT_NE(s, kNoState);
  EXPECT_EQ(v.Next(s, 4), kNoState);
  EXPECT_EQ(v.Next(s, v.separator()), kNoState);
  // The continuation after "2 3" stops at the document end.
  s = v.Next(v.Next(kRoot, 2), 3);
  EXPECT_TRUE(v.IsDocumentEnd(v.MinEndpos(s) + 1));
  std::filesystem::remove(path);
}

TEST(AutomatonOracle, EmptyDocumentsAreSkippedAndEmptyCorpusRefused) {
  const std::string path = TempPath("empty");
  EXPECT_THROW(sam::automaton::BuildIndexFile({{}, {}}, 10, path), sam::format::FormatError);
  EXPECT_FALSE(std::filesystem::exists(path));
  EXPECT_THROW(sam::automaton::BuildIndexFile({{1, 11}}, 10, path), sam::format::FormatError);
}

}  // namespace
