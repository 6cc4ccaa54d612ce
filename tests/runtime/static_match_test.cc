// Static cursor, linear drafts and count-weighted trees against brute force
// on indexes built with the indexer; corrupted indexes.
#include "sam/runtime/static_match.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "sam/format/error.h"
#include "sam/format/index.h"
#include "sam/automaton/builder.h"
#include "sam/runtime/session.h"
#include "heaviest_children.h"
#include "test_index.h"

namespace sam::runtime {
namespace {

using test_util::TempPath;
using test_util::Text;
using Docs = std::vector<Text>;

// The corpus as the index sees it: documents each followed by a separator.
struct Corpus {
  Docs docs;
  uint32_t sep;
  Text text;  // 0-based copy of positions 1..N
  Corpus(Docs d, uint32_t vocab) : docs(std::move(d)), sep(vocab) {
    for (const auto& doc : docs) {
      if (doc.empty()) continue;
      text.insert(text.end(), doc.begin(), doc.end());
      text.push_back(sep);
    }
  }
  // Occurrences of s (never containing sep) and the first end (1-based).
  std::pair<size_t, size_t> Find(const Text& s) const {
    size_t count = 0, first = 0;
    for (uint32_t t : s)
      if (t >= sep) return {0, 0};  // no match crosses (or contains) a document end
    for (size_t end = s.size(); end <= text.size(); ++end) {
      if (std::equal(s.begin(), s.end(), text.begin() + (end - s.size()))) {
        if (!first) first = end;
        ++count;
      }
    }
    return {count, first};
  }
  // Longest suffix of q occurring in the corpus: (len, first end).
  std::pair<size_t, size_t> LongestSuffix(const Text& q) const {
    for (size_t len = q.size(); len > 0; --len) {
      Text s(q.end() - len, q.end());
      auto [count, first] = Find(s);
      if (count) return {len, first};
    }
    return {0, 0};
  }
};

// 1 to max_len tokens each.
Docs RandomDocs(std::mt19937& rng, size_t num_docs, size_t max_len, uint32_t alphabet) {
  return test_util::RandomTexts(rng, num_docs, 1, max_len, alphabet);
}

// The same with a third of the tokens among three very common ones: their
// states have many transitions (hubs) and many clones.
Docs HubDocs(std::mt19937& rng, size_t num_docs, size_t max_len, uint32_t alphabet) {
  Docs docs = RandomDocs(rng, num_docs, max_len, alphabet);
  for (auto& d : docs)
    for (auto& t : d)
      if (rng() % 3 == 0) t = rng() % 3;
  return docs;
}

// A built index with its brute-force oracle.
class TestIndex {
 public:
  TestIndex(const Docs& docs, uint32_t vocab, const std::string& name)
      : index_(docs, vocab, name + ".sam"), corpus_(docs, vocab) {}
  const format::IndexView& view() const { return index_.view(); }
  const Corpus& corpus() const { return corpus_; }

 private:
  test_util::BuiltIndex index_;
  Corpus corpus_;
};

void CheckCursorAgainstBruteForce(const TestIndex& index, const Text& query) {
  const Corpus& corpus = index.corpus();
  StaticCursor cursor(&index.view());
  Text prefix;
  for (uint32_t t : query) {
    StaticMatch peek = cursor.Peek(t);
    cursor.Advance(t);
    prefix.push_back(t);
    ASSERT_EQ(peek.state, cursor.match().state);
    auto [len, first] = corpus.LongestSuffix(prefix);
    ASSERT_EQ(cursor.match().len, len) << "after " << prefix.size() << " tokens";
    if (len == 0) continue;
    ASSERT_EQ(index.view().MinEndpos(cursor.match().state), first);
    // Linear draft: what follows the first occurrence, up to the document end.
    uint32_t out[50];
    size_t n = StaticContinuation(index.view(), cursor.match().state, 50, out);
    size_t expect = 0;
    while (expect < 50 && first + expect < corpus.text.size() &&
           corpus.text[first + expect] != corpus.sep)
      ++expect;
    ASSERT_EQ(n, expect);
    for (size_t k = 0; k < n; ++k) {
      EXPECT_EQ(out[k], corpus.text[first + k]);
      EXPECT_LT(out[k], corpus.sep);  // never crosses a document end
    }
  }
}

struct Shape {
  uint32_t alphabet;
  size_t docs, max_len;
};

class StaticCursorRandom : public ::testing::TestWithParam<Shape> {};

TEST_P(StaticCursorRandom, MatchesBruteForce) {
  const Shape shape = GetParam();
  std::mt19937 rng(99 + shape.alphabet);
  TestIndex index(RandomDocs(rng, shape.docs, shape.max_len, shape.alphabet), shape.alphabet,
                    "cursor" + std::to_string(shape.alphabet));
  for (int q = 0; q < 5; ++q) {
    Text query(80);
    // Queries mix corpus fragments (long matches) and random tokens.
    for (size_t i = 0; i < query.size(); ++i) {
      if (i % 20 == 0 || rng() % 10 == 0) {
        query[i] = rng() % (shape.alphabet + 1);  // may be out of vocabulary
      } else {
        query[i] = index.corpus().text[rng() % index.corpus().text.size()];
        if (query[i] == index.corpus().sep) query[i] = 0;
      }
    }
    CheckCursorAgainstBruteForce(index, query);
    // A query that is a document run continues through its document.
    const auto& doc = index.corpus().docs[rng() % shape.docs];
    CheckCursorAgainstBruteForce(index, doc);
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, StaticCursorRandom,
                         ::testing::Values(Shape{2, 30, 40}, Shape{3, 40, 60},
                                           Shape{20, 50, 80}, Shape{1000, 40, 100}));

TEST(StaticCursor, RepetitiveCorpus) {
  Docs docs;
  for (int d = 0; d < 10; ++d) {
    std::vector<uint32_t> doc;
    for (int i = 0; i < 40; ++i) doc.push_back(i % (3 + d % 3));
    docs.push_back(doc);
  }
  TestIndex index(docs, 8, "repetitive");
  Text q;
  for (int i = 0; i < 60; ++i) q.push_back(i % 4);
  CheckCursorAgainstBruteForce(index, q);
}

// The sequential scan of the degree bit vector gives every state's EdgeRange.
TEST(IndexView, ForEachEdgeRangeEqualsEdgeRange) {
  for (const uint32_t alphabet : {2u, 7u, 300u}) {
    std::mt19937 rng(50 + alphabet);
    TestIndex index(RandomDocs(rng, 60, 70, alphabet), alphabet, "ranges");
    const format::IndexView& view = index.view();
    uint64_t expected = 0;
    view.ForEachEdgeRange([&](uint64_t v, uint64_t lo, uint64_t hi) {
      ASSERT_EQ(v, expected++);
      const auto [elo, ehi] = view.EdgeRange(v);
      ASSERT_EQ(lo, elo) << v;
      ASSERT_EQ(hi, ehi) << v;
    });
    EXPECT_EQ(expected, view.num_states());
  }
}

// The one child enumeration (IndexView::ForEachChild, which the tree builders
// and hub tables use) against brute force over the alphabet: exactly the
// transitions Next() takes, in increasing token order, document ends never.
TEST(IndexView, ForEachChildEqualsNextOverTheAlphabet) {
  for (const uint32_t alphabet : {2u, 7u, 60u}) {
    std::mt19937 rng(70 + alphabet);
    TestIndex index(RandomDocs(rng, 50, 60, alphabet), alphabet, "children");
    const format::IndexView& view = index.view();
    for (uint64_t v = 0; v < view.num_states(); ++v) {
      std::vector<std::pair<uint32_t, uint64_t>> expected, got;
      for (uint32_t c = 0; c <= alphabet; ++c) {  // c == alphabet: the separator
        const uint64_t t = view.Next(v, c);
        if (t != format::kNoState) expected.emplace_back(c, t);
      }
      view.ForEachChild(v, [&](uint32_t c, uint64_t t) { got.emplace_back(c, t); });
      ASSERT_EQ(got, expected) << "state " << v;
      ASSERT_EQ(view.Degree(v), expected.size()) << "state " << v;
    }
  }
}

// Jumping over the tokens after a match's first occurrence equals
// transferring on them one by one, for every reachable match and every k.
TEST(StaticCursor, AdvanceAlongFirstOccurrenceEqualsTransfers) {
  for (const uint32_t alphabet : {2u, 4u, 30u}) {
    std::mt19937 rng(40 + alphabet);
    Docs docs = RandomDocs(rng, 40, 50, alphabet);
    TestIndex index(docs, alphabet, "jump");
    const format::IndexView& view = index.view();
    size_t checked = 0;
    StaticCursor cursor(&view);
    for (int step = 0; step < 3000; ++step) {
      cursor.Advance(rng() % alphabet);
      const StaticMatch m = cursor.match();
      if (m.state == format::kRoot) continue;
      const uint64_t e = view.MinEndpos(m.state);
      StaticMatch slow = m;
      for (uint64_t k = 1; e + k <= view.num_tokens() && !view.IsDocumentEnd(e + k); ++k) {
        slow = sam::runtime::Transfer(view, slow, view.Token(e + k));
        const StaticMatch fast = sam::runtime::AdvanceAlongFirstOccurrence(view, m, k);
        ASSERT_EQ(fast.state, slow.state) << "alphabet " << alphabet << " k " << k;
        ASSERT_EQ(fast.len, slow.len);
        ++checked;
      }
    }
    EXPECT_GT(checked, 1000u);
  }
}

TEST(StaticTree, RespectsBudgetsAndIsCountOrdered) {
  std::mt19937 rng(5);
  TestIndex index(RandomDocs(rng, 60, 50, 4), 4, "tree");
  const Corpus& corpus = index.corpus();
  StaticTreeBuilder builder;
  for (int trial = 0; trial < 30; ++trial) {
    Text q = {static_cast<uint32_t>(rng() % 4), static_cast<uint32_t>(rng() % 4)};
    StaticCursor cursor(&index.view());
    for (uint32_t t : q) cursor.Advance(t);
    if (cursor.match().len == 0) continue;
    Text matched(q.end() - cursor.match().len, q.end());
    StaticTreeOptions opts;
    opts.max_nodes = 1 + rng() % 40;
    opts.max_width = 1 + rng() % 5;
    DraftTree tree;
    tree.Reset(q.back(), DraftSource::kStatic);
    std::vector<double> weights;
    builder.Build(index.view(), cursor.match().state, opts, &tree, &weights);
    ASSERT_LE(tree.size(), opts.max_nodes);
    ASSERT_EQ(weights.size(), tree.size());
    std::vector<size_t> width(100, 0);
    const double base = static_cast<double>(corpus.Find(matched).first);
    for (size_t i = 1; i < tree.size(); ++i) {
      ASSERT_LT(tree.parents[i], static_cast<int32_t>(i));
      ASSERT_LE(++width[tree.depths[i]], opts.max_width);
      EXPECT_LE(weights[i], weights[i - 1] + 1e-12);  // best-first: non-increasing
      // Weight = count(matched + path) / count(matched).
      Text s = matched;
      Text path;
      for (int v = static_cast<int>(i); v > 0; v = tree.parents[v]) path.push_back(tree.tokens[v]);
      s.insert(s.end(), path.rbegin(), path.rend());
      const double count = static_cast<double>(corpus.Find(s).first);
      ASSERT_GT(count, 0);
      EXPECT_NEAR(weights[i], count / base, 1e-9);
      // Its accept estimate: count(matched + path) / count(matched + parent's path).
      const double parent_count =
          static_cast<double>(corpus.Find(Text(s.begin(), s.end() - 1)).first);
      ASSERT_EQ(tree.accept_estimates.size(), tree.size());
      EXPECT_NEAR(tree.accept_estimates[i], count / parent_count, 1e-6);
    }
    if (tree.size() > 1) {
      EXPECT_EQ(tree.accept_estimates[0], 1.0f);
    }
    // Siblings of a full-width-free tree with budget left: nothing is missing
    // at depth 1 that beats a chosen sibling.
  }
}

// The shared StaticIndex (hub label arrays, top children) gives the same
// transitions, cursors and trees as the bare view.
TEST(SharedStaticIndex, SameAnswersAsTheView) {
  std::mt19937 rng(17);
  Docs docs = HubDocs(rng, 200, 60, 40);
  TestIndex index(docs, 40, "shared");
  const format::IndexView& view = index.view();
  // Every transition, with and without hubs and edge filters (1 bit per edge:
  // many false positives; 10: few), and with child records (which answer
  // first: a full record, shorter than top_k, also answers "none"; a
  // record of top_k children falls through to the filter when it lacks the
  // token), including out-of-vocabulary tokens.
  for (const sam::runtime::StaticIndex::Options o :
       {sam::runtime::StaticIndex::Options{.min_degree = 4, .top_k = 8, .filter_bits_per_edge = 0},
        sam::runtime::StaticIndex::Options{.min_degree = 2, .top_k = 3, .filter_bits_per_edge = 1},
        sam::runtime::StaticIndex::Options{.min_degree = 1000, .top_k = 8},
        sam::runtime::StaticIndex::Options{.min_degree = 4, .top_k = 8},
        sam::runtime::StaticIndex::Options{.min_degree = 1000, .top_k = 8, .record_min_count = 2},
        sam::runtime::StaticIndex::Options{
            .min_degree = 4, .top_k = 2, .filter_bits_per_edge = 1, .record_min_count = 1},
        sam::runtime::StaticIndex::Options{.min_degree = 1000, .top_k = 1, .record_min_count = 3}}) {
    const auto s = sam::runtime::StaticIndex::Create(&view, o);
    EXPECT_EQ(s->num_hubs() > 0, o.min_degree < 1000);
    EXPECT_EQ(s->filter_bytes() > 0, o.filter_bits_per_edge > 0);
    EXPECT_EQ(s->record_bytes() > 0, o.record_min_count > 0);
    for (uint64_t v = 0; v < view.num_states(); ++v)
      for (uint32_t c = 0; c <= 41; ++c)
        ASSERT_EQ(s->Next(v, c), view.Next(v, c)) << v << " " << c << " " << o.min_degree;
  }
  const auto shared = sam::runtime::StaticIndex::Create(&view, {.min_degree = 4, .top_k = 8});
  ASSERT_GT(shared->num_hubs(), 0u);
  EXPECT_GT(shared->memory_bytes(), shared->filter_bytes());
  // Child records and no hubs: trees read the records of the clones that
  // have one.
  const auto records = sam::runtime::StaticIndex::Create(
      &view, {.min_degree = 1000, .top_k = 8, .record_min_count = 2});
  ASSERT_EQ(records->num_hubs(), 0u);
  ASSERT_GT(records->record_bytes(), 0u);
  StaticCursor plain(&view), fast(shared.get());
  StaticTreeBuilder a, b, c;
  for (int i = 0; i < 3000; ++i) {
    const uint32_t t = rng() % 4 == 0 ? rng() % 3 : rng() % 40;
    plain.Advance(t);
    fast.Advance(t);
    ASSERT_EQ(plain.match().state, fast.match().state);
    ASSERT_EQ(plain.match().len, fast.match().len);
    if (plain.match().len == 0) continue;
    StaticTreeOptions opts;
    opts.max_nodes = 40;
    DraftTree ta, tb;
    ta.Reset(t, DraftSource::kStatic);
    tb.Reset(t, DraftSource::kStatic);
    a.Build(view, plain.match().state, opts, &ta);
    opts.hubs = shared.get();
    b.Build(view, plain.match().state, opts, &tb);
    ASSERT_EQ(ta.tokens, tb.tokens);
    ASSERT_EQ(ta.parents, tb.parents);
    DraftTree tc;
    tc.Reset(t, DraftSource::kStatic);
    opts.hubs = records.get();
    c.Build(view, plain.match().state, opts, &tc);
    ASSERT_EQ(ta.tokens, tc.tokens);
    ASSERT_EQ(ta.parents, tc.parents);
  }
  EXPECT_THROW(sam::runtime::StaticIndex::Create(static_cast<const sam::format::IndexView*>(nullptr)),
               sam::Error);
  EXPECT_THROW(sam::runtime::StaticIndex::Create(std::shared_ptr<const sam::format::IndexView>()),
               sam::Error);
}

// Child records: for every clone that occurs at least record_min_count
// times, its top_k heaviest children (count descending, then token), as a
// brute-force enumeration and sort finds them (a hub's are its table's);
// nothing for other states. Each record's head holds the state's length and
// count and its suffix link's record, each child its target's record (a
// target that occurs once: the token after it), and each position its
// suffix link's record, as the view says.
TEST(SharedStaticIndex, ChildRecordsAreEachClonesHeaviestChildren) {
  using sam::runtime::StaticIndex;
  std::mt19937 rng(23);
  Docs docs = HubDocs(rng, 200, 60, 40);
  TestIndex index(docs, 40, "records");
  const format::IndexView& view = index.view();
  ASSERT_GT(view.num_clones(), 100u);
  // Computed at open, and read from a file written with them (RECS; the
  // file's min count is at least 2, which gives every clone a record as 1
  // does).
  for (const bool from_file : {false, true})
  for (const auto& [min_count, top_k] : std::vector<std::pair<uint64_t, size_t>>{
           {1, 8}, {2, 3}, {3, 1}, {5, 8}, {2, 8}, {3, 2}}) {
    std::unique_ptr<test_util::BuiltIndex> file;
    std::shared_ptr<const StaticIndex> s;
    if (from_file) {
      automaton::IndexInfo info;
      info.accelerators = format::AcceleratorParams{
          .min_degree = 12, .top_k = static_cast<uint32_t>(top_k), .filter_bits_per_edge = 10,
          .record_min_count = static_cast<uint32_t>(std::max<uint64_t>(min_count, 2))};
      file = std::make_unique<test_util::BuiltIndex>(docs, 40, "records_file.sam", info);
      ASSERT_TRUE(file->view().child_records().present());
      s = StaticIndex::Create(&file->view(), {.min_degree = 12, .top_k = top_k});
      ASSERT_TRUE(s->records_from_file()) << min_count << " " << top_k;
      EXPECT_EQ(s->memory_bytes(), sizeof(StaticIndex));  // nothing private
      // The records are the bytes the same options compute at open.
      const auto computed = StaticIndex::Create(
          &file->view(), {.min_degree = 12, .top_k = top_k, .filter_bits_per_edge = 9,
                          .record_min_count = min_count});
      ASSERT_FALSE(computed->records_from_file());
      ASSERT_EQ(computed->record_bytes(), s->record_bytes());
    } else {
      s = StaticIndex::Create(&view, {.min_degree = 12, .top_k = top_k,
                                      .record_min_count = min_count});
      EXPECT_FALSE(s->records_from_file());
    }
    const format::IndexView& view = s->view();
    EXPECT_GT(s->record_bytes(), 0u);
    // The record every state should have (kNoRecord: none), found by its id.
    auto record_of = [&](uint64_t v) { return s->RecordOf(v); };
    std::vector<StaticIndex::Child> got(top_k);
    size_t with_records = 0, hubs_seen = 0, links_followed = 0;
    for (uint64_t v = 0; v < view.num_states(); ++v) {
      uint32_t size = 0;
      const bool has = s->RecordChildren(v, got.data(), &size);
      // The oracle: every child, sorted.
      const std::vector<StaticIndex::Child> all = test_util::HeaviestChildren(view, v);
      std::span<const StaticIndex::Child> hub_children;
      const bool hub = s->TopChildren(v, &hub_children);
      const bool expected = view.IsClone(v) && view.Count(v) >= min_count;
      ASSERT_EQ(has, expected) << "state " << v << " min_count " << min_count;
      ASSERT_EQ(record_of(v) != StaticIndex::kNoRecord, expected) << v;
      if (!view.IsClone(v) && v != format::kRoot) {
        // A position: its suffix link's record is kept.
        ASSERT_EQ(s->PositionLinkRecord(v), record_of(view.Link(v))) << v;
        links_followed += s->PositionLinkRecord(v) != StaticIndex::kNoRecord;
      }
      if (!has) continue;
      ++with_records;
      hubs_seen += hub;
      ASSERT_EQ(size, std::min(all.size(), top_k)) << v;
      if (hub) {
        ASSERT_EQ(hub_children.size(), size) << v;
        for (uint32_t i = 0; i < size; ++i) ASSERT_EQ(hub_children[i].token, got[i].token) << v;
      }
      const uint32_t r = record_of(v);
      const StaticIndex::RecordHead head = s->Head(r);
      ASSERT_EQ(head.len, view.Len(v)) << v;
      ASSERT_EQ(head.count, view.Count(v)) << v;
      ASSERT_EQ(head.size(), size) << v;
      ASSERT_EQ(head.hub(), hub) << v;
      ASSERT_EQ(head.link_record, record_of(view.Link(v))) << v;
      links_followed += head.link_record != StaticIndex::kNoRecord;
      const StaticIndex::RecordEntry* entries = s->Entries(r);
      for (uint32_t i = 0; i < size; ++i) {
        ASSERT_EQ(got[i].token, all[i].token) << v << " " << i;
        ASSERT_EQ(got[i].target, all[i].target) << v << " " << i;
        ASSERT_EQ(got[i].count, all[i].count) << v << " " << i;
        ASSERT_EQ(entries[i].token, all[i].token) << v << " " << i;
        ASSERT_EQ(entries[i].target, all[i].target) << v << " " << i;
        ASSERT_EQ(entries[i].count, all[i].count) << v << " " << i;
        ASSERT_EQ(entries[i].record_of_target(), record_of(all[i].target)) << v << " " << i;
        if (all[i].count == 1 && !view.IsClone(all[i].target)) {  // the token after it
          const uint64_t t = all[i].target;
          ASSERT_EQ(entries[i].record,
                    t < view.num_tokens() ? view.Token(t + 1) : view.separator()) << v << " " << i;
        } else {
          ASSERT_EQ(entries[i].record, record_of(all[i].target)) << v << " " << i;
        }
      }
    }
    EXPECT_GT(with_records, 50u) << min_count;
    EXPECT_GT(links_followed, 50u) << min_count;
    EXPECT_GT(hubs_seen, 0u) << "no hub with a record: the test would not see hubs";
  }
  // Off by default.
  const auto plain = StaticIndex::Create(&view);
  EXPECT_EQ(plain->record_bytes(), 0u);
  std::vector<StaticIndex::Child> out(8);
  uint32_t size = 0;
  EXPECT_FALSE(plain->RecordChildren(view.num_tokens() + 1, out.data(), &size));
  EXPECT_EQ(plain->RecordOf(view.num_tokens() + 1), StaticIndex::kNoRecord);
  EXPECT_EQ(plain->PositionLinkRecord(1), StaticIndex::kNoRecord);
}

// TransferByRecords gives Transfer's match from every state at every match
// length it can have (Len(Link(v)) < len <= Len(v)) for every token, out of
// the vocabulary included, with the state's record given or looked up, over
// records of 1, 2 and 8 children (full ones fall back to the other paths),
// with and without hubs; the record it reports is the returned state's.
TEST(SharedStaticIndex, TransferByRecordsEqualsTransfer) {
  using sam::runtime::StaticIndex;
  std::mt19937 rng(29);
  Docs docs = HubDocs(rng, 200, 60, 40);
  TestIndex index(docs, 40, "transfer");
  const format::IndexView& view = index.view();
  for (const StaticIndex::Options o :
       {StaticIndex::Options{.min_degree = 1000, .top_k = 8, .record_min_count = 2},
        StaticIndex::Options{.min_degree = 4, .top_k = 2, .filter_bits_per_edge = 1, .record_min_count = 1},
        StaticIndex::Options{.min_degree = 6, .top_k = 1, .record_min_count = 3},
        StaticIndex::Options{.min_degree = 4, .top_k = 8}}) {
    const auto s = StaticIndex::Create(&view, o);
    size_t by_record = 0, climbed = 0;
    for (uint64_t v = 0; v < view.num_states(); ++v) {
      const uint64_t lo = v == format::kRoot ? 0 : view.Len(view.Link(v)) + 1;
      // About four lengths from lo to Len(v), both included.
      const uint64_t hi = view.Len(v), step = std::max<uint64_t>(1, (hi - lo) / 3);
      for (uint64_t len = lo; len <= hi; len = len == hi ? hi + 1 : std::min(hi, len + step)) {
        for (uint32_t c = 0; c <= 41; ++c) {
          const StaticMatch m{v, len};
          const StaticMatch want = sam::runtime::Transfer(view, m, c, s.get());
          for (const uint32_t hint : {StaticIndex::kNoRecord, s->RecordOf(v)}) {
            uint32_t record = 0;
            const StaticMatch got = sam::runtime::TransferByRecords(*s, m, hint, c, &record);
            ASSERT_EQ(got.state, want.state) << v << " " << len << " " << c;
            ASSERT_EQ(got.len, want.len) << v << " " << len << " " << c;
            if (record != StaticIndex::kNoRecord) {
              ASSERT_EQ(record, s->RecordOf(got.state)) << v << " " << len << " " << c;
              ++by_record;
            }
          }
          climbed += want.len != 0 && want.len <= len;
        }
      }
    }
    EXPECT_GT(climbed, 1000u);
    EXPECT_EQ(by_record > 0, o.record_min_count > 0) << o.top_k;
  }
}

// One transition path: a StaticCursor over any StaticIndex (a Bare() one, a
// prepared one, one with child records, PrepareOptions(true)'s) moves
// exactly as a cursor over the bare view (the plain transfer rule) on random
// streams that mix corpus stretches, random tokens and out-of-vocabulary
// ones, through Advance, Peek and Set; the record it keeps is its state's.
// A Bare() index holds nothing and is made without a pass over the states.
TEST(SharedStaticIndex, CursorOverEveryIndexFollowsTheBareView) {
  using sam::runtime::StaticCursor;
  using sam::runtime::StaticIndex;
  std::mt19937 rng(37);
  Docs docs = HubDocs(rng, 200, 60, 40);
  TestIndex index(docs, 40, "one_path");
  const format::IndexView& view = index.view();
  const auto bare = StaticIndex::Bare(&view);
  EXPECT_FALSE(bare->prepared());
  EXPECT_FALSE(bare->has_records());
  EXPECT_EQ(bare->num_hubs(), 0u);
  EXPECT_EQ(bare->filter_bytes(), 0u);
  EXPECT_THROW(StaticIndex::Bare(static_cast<const format::IndexView*>(nullptr)), sam::Error);
  const std::vector<std::shared_ptr<const StaticIndex>> indexes = {
      bare, StaticIndex::Create(&view),
      StaticIndex::Create(&view, {.min_degree = 4, .top_k = 2, .record_min_count = 2}),
      StaticIndex::Create(&view, sam::runtime::PrepareOptions(true))};
  for (const auto& s : indexes) {
    StaticCursor want(&view), got(s.get());
    for (int step = 0; step < 20000; ++step) {
      uint32_t c = 0;
      if (rng() % 3 != 0) {  // the corpus's next token: long matches
        const uint64_t v = want.match().state;
        c = v != format::kRoot && v < view.num_tokens() ? view.Token(v + 1) : rng() % 40;
      } else {
        c = rng() % 42;  // 40, 41: out of the vocabulary
      }
      uint32_t record = 0;
      const StaticMatch peeked = got.Peek(c, &record);
      want.Advance(c);
      ASSERT_EQ(peeked.state, want.match().state) << step;
      ASSERT_EQ(peeked.len, want.match().len) << step;
      if (record != StaticIndex::kNoRecord) {
        ASSERT_EQ(record, s->RecordOf(peeked.state)) << step;
      }
      if (step % 2 == 0) got.Set(peeked, record);
      else got.Advance(c);
      ASSERT_EQ(got.match().state, want.match().state) << step;
      ASSERT_EQ(got.match().len, want.match().len) << step;
      if (got.record() != StaticIndex::kNoRecord) {
        ASSERT_EQ(got.record(), s->RecordOf(got.match().state)) << step;
      }
      got.Prefetch();
      if (step % 5000 == 4999) {
        got.Reset();
        want.Reset();
      }
    }
  }
}

// An index written with wide widths (the builder's min_width: state ids of
// 40 and 57 bits, as a corpus past 2^32 states has) gives the same
// transitions, matches, linear drafts and trees as the narrow one, with its
// hub label tables holding edge offsets instead of 32-bit targets.
TEST(SharedStaticIndex, WideWidthsGiveTheSameAnswers) {
  std::mt19937 rng(31);
  Docs docs = HubDocs(rng, 150, 60, 30);
  const std::string narrow_path = TempPath("narrow_widths");
  automaton::BuildIndexFile(docs, 30, narrow_path);
  const format::IndexFile narrow = format::IndexFile::Open(narrow_path);
  const auto narrow_index = StaticIndex::Create(&narrow.view(), {.min_degree = 4, .top_k = 8});
  for (const unsigned width : {40u, 57u}) {
    const std::string wide_path = TempPath("wide_widths");
    automaton::BuildIndexFile(docs, 30, wide_path, {}, {.min_width = width});
    format::OpenOptions verify;
    verify.verify = true;
    const format::IndexFile wide = format::IndexFile::Open(wide_path, verify);
    ASSERT_EQ(wide.header().state_width, width);
    const auto wide_index = StaticIndex::Create(&wide.view(), {.min_degree = 4, .top_k = 8});
    ASSERT_GT(wide_index->num_hubs(), 0u);
    ASSERT_EQ(wide_index->num_hubs(), narrow_index->num_hubs());
    for (uint64_t v = 0; v < narrow.view().num_states(); ++v)
      for (uint32_t c = 0; c <= 31; ++c)
        ASSERT_EQ(wide_index->Next(v, c), narrow.view().Next(v, c)) << v << " " << c;
    StaticCursor a(narrow_index.get()), b(wide_index.get());
    StaticTreeBuilder ta_builder, tb_builder;
    for (int i = 0; i < 2000; ++i) {
      const uint32_t t = rng() % 4 == 0 ? rng() % 3 : rng() % 30;
      a.Advance(t);
      b.Advance(t);
      ASSERT_EQ(a.match().state, b.match().state);
      ASSERT_EQ(a.match().len, b.match().len);
      uint32_t da[16], db[16];
      const size_t na = StaticContinuation(narrow.view(), a.match().state, 16, da);
      ASSERT_EQ(StaticContinuation(wide.view(), b.match().state, 16, db), na);
      ASSERT_TRUE(std::equal(da, da + na, db));
      if (a.match().len == 0) continue;
      StaticTreeOptions opts;
      opts.max_nodes = 30;
      DraftTree ta, tb;
      ta.Reset(t, DraftSource::kStatic);
      tb.Reset(t, DraftSource::kStatic);
      opts.hubs = narrow_index.get();
      ta_builder.Build(narrow.view(), a.match().state, opts, &ta);
      opts.hubs = wide_index.get();
      tb_builder.Build(wide.view(), b.match().state, opts, &tb);
      ASSERT_EQ(ta.tokens, tb.tokens);
      ASSERT_EQ(ta.parents, tb.parents);
    }
    std::remove(wide_path.c_str());
  }
  std::remove(narrow_path.c_str());
}

// The edge filter never denies an existing explicit transition, and at 10
// bits per edge denies almost all absent ones (brute force over all pairs).
TEST(SharedStaticIndex, EdgeFilterHasNoFalseNegativesAndFewFalsePositives) {
  std::mt19937 rng(29);
  Docs docs = RandomDocs(rng, 300, 80, 200);
  TestIndex index(docs, 200, "filter");
  const format::IndexView& view = index.view();
  const auto s = sam::runtime::StaticIndex::Create(&view);
  size_t absent = 0, maybe_absent = 0, present = 0;
  ASSERT_GT(s->num_hubs(), 0u);
  for (uint64_t v = 1; v < view.num_states(); ++v) {
    if (s->IsHub(v)) continue;  // a hub's label table answers; the filter leaves hubs out
    std::vector<bool> explicit_label(200, false);
    view.ForEachChild(v, [&](uint32_t c, uint64_t t) {
      if (t != v + 1 || v >= view.num_tokens()) explicit_label[c] = true;
    });
    for (uint32_t c = 0; c < 200; ++c) {
      if (explicit_label[c]) {
        ++present;
        ASSERT_TRUE(s->MayHaveEdge(v, c)) << v << " " << c;
      } else if (view.Next(v, c) == format::kNoState) {
        ++absent;
        maybe_absent += s->MayHaveEdge(v, c);
      }
    }
  }
  ASSERT_GT(present, 1000u);
  const double fpr = static_cast<double>(maybe_absent) / static_cast<double>(absent);
  EXPECT_LT(fpr, 0.03) << maybe_absent << " of " << absent;
}

// The accelerator sections of a file (format 1.1) against the same tables
// computed at open from a file written without them (as format 1.0 files
// are): every transition, every hub's children and every session's drafts
// are the same; options other than the file's (another minimum degree,
// another filter size, more children than stored) compute their own.
// Sessions over a and over b, with every policy, draft the same trees along a
// stream copied from `docs` (each step commits what the stream accepts).
void ExpectSameSessionDrafts(const std::shared_ptr<const sam::runtime::StaticIndex>& a,
                             const std::shared_ptr<const sam::runtime::StaticIndex>& b,
                             const Docs& docs, std::mt19937& rng) {
  for (const sam::runtime::Policy policy :
       {sam::runtime::Policy::kPaper, sam::runtime::Policy::kTree,
        sam::runtime::Policy::kCalibrated}) {
    SCOPED_TRACE("policy " + std::to_string(static_cast<int>(policy)));
    sam::runtime::SessionOptions so;
    so.policy = policy;
    sam::runtime::Session x(so), y(so);
    x.AttachIndex(a);
    y.AttachIndex(b);
    const Text stream = test_util::CopiedStream(rng, docs, 600, 50, 8, 12);
    x.Prefill(std::span<const uint32_t>(stream.data(), 20));
    y.Prefill(std::span<const uint32_t>(stream.data(), 20));
    for (size_t p = 20; p + 1 < stream.size();) {
      const sam::runtime::DraftTree& dx = x.Propose(stream[p]);
      const sam::runtime::DraftTree& dy = y.Propose(stream[p]);
      ASSERT_EQ(dx.tokens, dy.tokens) << "step " << p;
      ASSERT_EQ(dx.parents, dy.parents) << "step " << p;
      // The stream's tokens as far as the tree holds them (node 0: start).
      size_t node = 0, accepted = 0;
      for (bool found = true; found && p + accepted + 1 < stream.size();) {
        found = false;
        for (size_t k = node + 1; k < dx.tokens.size(); ++k)
          if (static_cast<size_t>(dx.parents[k]) == node &&
              dx.tokens[k] == stream[p + accepted + 1]) {
            node = k;
            ++accepted;
            found = true;
            break;
          }
      }
      x.Commit(std::span<const uint32_t>(&stream[p], accepted + 1));
      y.Commit(std::span<const uint32_t>(&stream[p], accepted + 1));
      p += accepted + 1;
    }
  }
}

TEST(SharedStaticIndex, FileSectionsAnswerAsTablesComputedAtOpen) {
  std::mt19937 rng(31);
  const Docs docs = HubDocs(rng, 300, 60, 50);
  automaton::IndexInfo with;
  with.accelerators = format::AcceleratorParams{.min_degree = 4, .top_k = 6,
                                                .filter_bits_per_edge = 10};
  const test_util::BuiltIndex plain(docs, 50, "sections_plain.sam");
  const test_util::BuiltIndex mapped(docs, 50, "sections_mapped.sam", with);
  ASSERT_FALSE(plain.view().hubs().present());
  ASSERT_TRUE(mapped.view().hubs().present());
  const sam::runtime::StaticIndex::Options o{.min_degree = 4, .top_k = 6};
  const auto computed = sam::runtime::StaticIndex::Create(&plain.view(), o);
  const auto from_file = sam::runtime::StaticIndex::Create(&mapped.view(), o);
  EXPECT_FALSE(computed->accelerators_from_file());
  ASSERT_TRUE(from_file->accelerators_from_file());
  EXPECT_EQ(from_file->memory_bytes(), sizeof(sam::runtime::StaticIndex));  // nothing private
  EXPECT_GT(computed->memory_bytes(), computed->hub_bytes());
  EXPECT_EQ(from_file->hub_bytes(), computed->hub_bytes());
  EXPECT_EQ(from_file->filter_bytes(), computed->filter_bytes());
  ASSERT_GT(from_file->num_hubs(), 10u);
  EXPECT_EQ(from_file->num_hubs(), computed->num_hubs());
  std::vector<sam::runtime::StaticIndex::Child> scratch;
  for (uint64_t v = 0; v < plain.view().num_states(); ++v) {
    for (uint32_t c = 0; c <= 51; ++c) {
      ASSERT_EQ(from_file->Next(v, c), plain.view().Next(v, c)) << v << " " << c;
      ASSERT_EQ(computed->Next(v, c), plain.view().Next(v, c)) << v << " " << c;
    }
    std::span<const sam::runtime::StaticIndex::Child> a, b;
    ASSERT_EQ(from_file->TopChildren(v, &a), computed->TopChildren(v, &b)) << v;
    ASSERT_EQ(a.size(), b.size()) << v;
    for (size_t i = 0; i < a.size(); ++i) {
      EXPECT_EQ(a[i].token, b[i].token);
      EXPECT_EQ(a[i].target, b[i].target);
      EXPECT_EQ(a[i].count, b[i].count);
    }
  }
  // Fewer children than stored: the file's first ones. Anything else: computed.
  EXPECT_TRUE(sam::runtime::StaticIndex::Create(&mapped.view(), {.min_degree = 4, .top_k = 2})
                  ->accelerators_from_file());
  for (const sam::runtime::StaticIndex::Options other :
       {sam::runtime::StaticIndex::Options{.min_degree = 5, .top_k = 6},
        sam::runtime::StaticIndex::Options{.min_degree = 4, .top_k = 7},
        sam::runtime::StaticIndex::Options{.min_degree = 4, .top_k = 6, .filter_bits_per_edge = 12}}) {
    const auto s = sam::runtime::StaticIndex::Create(&mapped.view(), other);
    EXPECT_FALSE(s->accelerators_from_file()) << other.min_degree << " " << other.top_k;
    for (uint64_t v = 0; v < plain.view().num_states(); v += 7)
      for (uint32_t c = 0; c < 50; c += 3) ASSERT_EQ(s->Next(v, c), plain.view().Next(v, c));
  }
  // Sessions draft the same, with every policy.
  ExpectSameSessionDrafts(computed, from_file, docs, rng);
}

// FromFile takes what the file holds and computes nothing: its HUBS, FILT
// and RECS when built with the options' parameters (the same tables Create
// takes), else the plain automaton, which answers like the view.
TEST(SharedStaticIndex, FromFileTakesTheFilesSectionsOrNothing) {
  using sam::runtime::StaticIndex;
  std::mt19937 rng(37);
  const Docs docs = HubDocs(rng, 300, 60, 50);
  automaton::IndexInfo with;
  with.accelerators = format::AcceleratorParams{
      .min_degree = 4, .top_k = 6, .filter_bits_per_edge = 10, .record_min_count = 2};
  const test_util::BuiltIndex plain(docs, 50, "from_file_plain.sam");
  const test_util::BuiltIndex mapped(docs, 50, "from_file_mapped.sam", with);
  ASSERT_TRUE(mapped.view().child_records().present());
  const StaticIndex::Options o{.min_degree = 4, .top_k = 6};

  const auto taken = StaticIndex::FromFile(mapped.shared_view(), o);
  ASSERT_TRUE(taken->prepared());
  EXPECT_TRUE(taken->accelerators_from_file());
  EXPECT_TRUE(taken->records_from_file());
  EXPECT_EQ(taken->memory_bytes(), sizeof(StaticIndex));  // nothing private
  const auto created = StaticIndex::Create(mapped.shared_view(), o);
  EXPECT_EQ(taken->num_hubs(), created->num_hubs());
  EXPECT_EQ(taken->record_bytes(), created->record_bytes());
  // A record min count other than the file's takes the file's records, not
  // computed ones.
  const auto other_count =
      StaticIndex::FromFile(mapped.shared_view(), {.min_degree = 4, .top_k = 6, .record_min_count = 5});
  EXPECT_TRUE(other_count->records_from_file());
  EXPECT_EQ(other_count->memory_bytes(), sizeof(StaticIndex));

  // Parameters the file's sections were not built with, or a file without
  // them: the plain automaton (Create would compute the tables).
  for (const auto& [view, options] :
       std::vector<std::pair<std::shared_ptr<const format::IndexView>, StaticIndex::Options>>{
           {plain.shared_view(), o},
           {mapped.shared_view(), {.min_degree = 5, .top_k = 6}},
           {mapped.shared_view(), {.min_degree = 4, .top_k = 7}},
           {mapped.shared_view(), {.min_degree = 4, .top_k = 6, .filter_bits_per_edge = 12}}}) {
    const auto s = StaticIndex::FromFile(view, options);
    EXPECT_FALSE(s->prepared()) << options.min_degree << " " << options.top_k;
    EXPECT_FALSE(s->has_records());
    EXPECT_EQ(s->memory_bytes(), sizeof(StaticIndex));
    EXPECT_TRUE(StaticIndex::Create(view, options)->prepared());
  }

  // Sessions over what FromFile gave draft like sessions over the bare view.
  ExpectSameSessionDrafts(StaticIndex::Bare(&plain.view()), taken, docs, rng);
  EXPECT_THROW(StaticIndex::FromFile(nullptr, o), sam::Error);
  // Options out of range are refused as Create refuses them, whatever the file.
  for (const auto& view : {plain.shared_view(), mapped.shared_view()}) {
    EXPECT_THROW(StaticIndex::FromFile(view, {.min_degree = 4, .top_k = 0}), sam::Error);
    EXPECT_THROW(StaticIndex::FromFile(view, {.min_degree = 4, .top_k = 6, .filter_bits_per_edge = 65}),
                 sam::Error);
  }
}

TEST(CorruptIndex, FailsToOpenOrStaysSafe) {
  std::mt19937 rng(3);
  const std::string path = TempPath("corrupt_src.sam");
  automaton::BuildIndexFile(RandomDocs(rng, 40, 60, 30), 30, path);
  std::vector<format::SectionInfo> sections = format::IndexFile::Open(path).sections();
  std::vector<char> bytes;
  {
    std::ifstream in(path, std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(in), {});
  }
  std::remove(path.c_str());
  auto write = [](const std::string& p, const std::vector<char>& b) {
    std::ofstream out(p, std::ios::binary | std::ios::trunc);
    out.write(b.data(), static_cast<std::streamsize>(b.size()));
  };
  const std::string bad = TempPath("corrupt.sam");
  // Truncated and bad magic: refused on open.
  write(bad, std::vector<char>(bytes.begin(), bytes.begin() + bytes.size() / 2));
  EXPECT_THROW(format::IndexFile::Open(bad), format::FormatError);
  std::vector<char> magic = bytes;
  magic[0] ^= 0x55;
  write(bad, magic);
  EXPECT_THROW(format::IndexFile::Open(bad), format::FormatError);
  // Random damage inside the sections: deep verify refuses it; a cheap open
  // may accept it, and then a session over it must still never crash.
  for (int trial = 0; trial < 20; ++trial) {
    std::vector<char> damaged = bytes;
    for (int k = 0; k < 8; ++k) {
      const format::SectionInfo& s = sections[rng() % sections.size()];
      if (s.stored_bytes == 0) continue;
      damaged[s.offset + rng() % s.stored_bytes] ^= static_cast<char>(1 + rng() % 255);
    }
    if (damaged == bytes) continue;
    write(bad, damaged);
    format::OpenOptions verify;
    verify.verify = true;
    EXPECT_THROW(format::IndexFile::Open(bad, verify), format::FormatError);
    try {
      format::IndexFile file = format::IndexFile::Open(bad);
      SessionOptions options;
      options.max_dynamic_bytes = 1 << 20;
      for (Policy p : {Policy::kPaper, Policy::kTree, Policy::kCalibrated}) {
        options.policy = p;
        Session session(options);
        session.AttachIndex(&file.view());
        Text prompt(50);
        for (auto& t : prompt) t = rng() % 30;
        session.Prefill(prompt);
        for (int step = 0; step < 50; ++step) {
          uint32_t start = rng() % 30;
          const DraftTree& tree = session.Propose(start);
          // A well-formed tree within the policy's budget; its tokens come
          // from the text (below the separator, 30) or the stream (<= 30).
          const size_t budget = p == Policy::kTree ? options.tree.nodes
                                                   : options.draft_size;
          ASSERT_EQ(test_util::MalformedDraft(tree.tokens.data(), tree.parents.data(),
                                              tree.depths.data(), tree.size(), start, 31, budget),
                    "");
          std::vector<uint32_t> commit(tree.tokens.begin(),
                                       tree.tokens.begin() + std::min<size_t>(tree.size(), 3));
          session.Commit(commit);
        }
      }
    } catch (const format::FormatError&) {
      // refused on open: fine
    }
  }
  std::remove(bad.c_str());
}

}  // namespace
}  // namespace sam::runtime
