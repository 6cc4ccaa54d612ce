// A corpus split into k shards (k = 1, 2, 3, 7) and attached as a shard set
// behaves as the single index over all its documents: at every step of
// random streams, the same match lengths, linear drafts equal to a brute-force
// search over the documents, count trees equal to the single index's, whose
// weights equal brute-force counts summed over the documents.
#include "sam/runtime/shard_set.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "sam/format/index.h"
#include "sam/automaton/builder.h"
#include "sam/runtime/replay.h"
#include "sam/runtime/session.h"
#include "sam/runtime/static_index.h"
#include "sam/runtime/static_match.h"
#include "test_index.h"

namespace sam::runtime {
namespace {

using test_util::Text;
using Docs = std::vector<Text>;
constexpr uint32_t kVocab = 12;

// Brute force over the documents (never across them).
struct Union {
  Text text;  // documents, each followed by the separator (the vocabulary size)
  explicit Union(const Docs& docs, uint32_t vocab = kVocab) {
    for (const auto& d : docs) {
      text.insert(text.end(), d.begin(), d.end());
      text.push_back(vocab);
    }
  }
  // Occurrences of s and the first end (1-based; 0 when absent).
  std::pair<size_t, size_t> Find(const Text& s) const {
    size_t count = 0, first = 0;
    for (size_t end = s.size(); end <= text.size(); ++end)
      if (std::equal(s.begin(), s.end(), text.begin() + (end - s.size()))) {
        if (!first) first = end;
        ++count;
      }
    return {count, first};
  }
  // The longest suffix of q that occurs: (length, first end).
  std::pair<size_t, size_t> LongestSuffix(const Text& q) const {
    for (size_t len = q.size(); len > 0; --len) {
      const auto [count, first] = Find(Text(q.end() - len, q.end()));
      if (count) return {len, first};
    }
    return {0, 0};
  }
};

Docs RandomDocs(std::mt19937& rng, size_t n, uint32_t vocab = kVocab) {
  Docs docs(n);
  for (auto& d : docs) {
    d.resize(1 + rng() % 40);
    for (auto& t : d) t = rng() % 3 == 0 ? rng() % 2 : rng() % vocab;  // common tokens: hubs
  }
  return docs;
}

// A stream that mostly copies runs of the documents (long matches), with
// random tokens between.
Text RandomStream(std::mt19937& rng, const Docs& docs, size_t size, uint32_t vocab = kVocab) {
  Text s;
  while (s.size() < size) {
    if (rng() % 3 == 0) {
      s.push_back(rng() % vocab);
      continue;
    }
    const Text& d = docs[rng() % docs.size()];
    for (size_t i = rng() % d.size(); i < d.size() && s.size() < size && rng() % 12; ++i)
      s.push_back(d[i]);
  }
  return s;
}

struct Built {
  std::vector<std::string> paths;
  std::shared_ptr<const StaticIndex> single;
  std::vector<std::shared_ptr<const StaticIndex>> shards;
  ~Built() {
    for (const auto& p : paths) std::remove(p.c_str());
  }
};

// The single index and k shards over consecutive runs of the documents
// (random cut points).
void Build(const Docs& docs, size_t k, std::mt19937& rng, Built* out,
           StaticIndex::Options hubs = {.min_degree = 4, .top_k = 8}, uint32_t vocab = kVocab) {
  auto open = [&](const Docs& part, const std::string& name) {
    const std::string path = test_util::TempPath(name);
    out->paths.push_back(path);
    automaton::BuildIndexFile(part, vocab, path);
    return StaticIndex::Create(format::IndexFile::Open(path).shared_view(), hubs);
  };
  out->single = open(docs, "single");
  std::set<size_t> cuts;
  while (cuts.size() + 1 < k) cuts.insert(1 + rng() % (docs.size() - 1));
  cuts.insert(docs.size());
  size_t begin = 0;
  for (size_t cut : cuts) {
    out->shards.push_back(open(Docs(docs.begin() + begin, docs.begin() + cut),
                               "shard" + std::to_string(out->shards.size())));
    begin = cut;
  }
}

class ShardSetTest : public ::testing::TestWithParam<size_t> {};

TEST_P(ShardSetTest, SessionsMatchTheSingleIndexAndBruteForce) {
  const size_t k = GetParam();
  std::mt19937 rng(100 + k);
  const Docs docs = RandomDocs(rng, 80);
  const Union all(docs);
  Built built;
  Build(docs, k, rng, &built);
  ASSERT_EQ(built.shards.size(), k);
  for (const Policy policy : {Policy::kStaticOnly, Policy::kTree, Policy::kPaper}) {
    SessionOptions o;
    o.policy = policy;
    Session single(o), sharded(o);
    single.AttachIndex(built.single);
    sharded.AttachShardSet(built.shards);
    ASSERT_EQ(sharded.num_indexes(), k);
    for (int stream = 0; stream < 3; ++stream) {
      single.Reset();
      sharded.Reset();
      const Text s = RandomStream(rng, docs, 150);
      Text context;
      for (uint32_t t : s) {
        const DraftTree a = single.Propose(t);
        const DraftTree& b = sharded.Propose(t);
        context.push_back(t);
        const auto [len, first] = all.LongestSuffix(context);
        ASSERT_EQ(sharded.last_static_length(), len);
        ASSERT_EQ(single.last_static_length(), len);
        ASSERT_EQ(a.tokens, b.tokens) << "policy " << static_cast<int>(policy);
        ASSERT_EQ(a.parents, b.parents);
        if (policy == Policy::kStaticOnly && len > 0) {
          // The continuation of the first occurrence, up to the document end.
          Text expected;
          for (size_t p = first; p < all.text.size() && all.text[p] != kVocab &&
                                 expected.size() < LinearDraftSize(len, o);
               ++p)
            expected.push_back(all.text[p]);
          ASSERT_EQ(Text(b.tokens.begin() + 1, b.tokens.end()), expected);
        }
        sharded.Commit(std::span<const uint32_t>(&t, 1));
        single.Commit(std::span<const uint32_t>(&t, 1));
      }
    }
  }
}

TEST_P(ShardSetTest, MergedTreesEqualTheSingleIndexAndBruteForceCounts) {
  const size_t k = GetParam();
  std::mt19937 rng(200 + k);
  const Docs docs = RandomDocs(rng, 80);
  const Union all(docs);
  Built built;
  Build(docs, k, rng, &built);
  StaticTreeBuilder one;
  MergedStaticTreeBuilder merged;
  for (int trial = 0; trial < 150; ++trial) {
    const Text q = RandomStream(rng, docs, 1 + rng() % 6);
    StaticCursor c(built.single.get());
    for (uint32_t t : q) c.Advance(t);
    if (c.match().len == 0) continue;
    std::vector<ShardMatch> matches;
    for (const auto& shard : built.shards) {
      StaticCursor sc(shard.get());
      for (uint32_t t : q) sc.Advance(t);
      ASSERT_LE(sc.match().len, c.match().len);
      if (sc.match().len == c.match().len) matches.push_back({&shard->view(), sc.match().state});
    }
    ASSERT_FALSE(matches.empty());
    StaticTreeOptions opts;
    opts.max_nodes = 1 + rng() % 40;
    opts.max_width = 1 + rng() % 5;
    DraftTree ta, tb;
    ta.Reset(q.back(), DraftSource::kStatic);
    tb.Reset(q.back(), DraftSource::kStatic);
    std::vector<double> wa, wb;
    one.Build(built.single->view(), c.match().state, opts, &ta, &wa);
    merged.Build(matches, opts, &tb, &wb);
    ASSERT_EQ(ta.tokens, tb.tokens);
    ASSERT_EQ(ta.parents, tb.parents);
    // Weight = count(matched + path) / count(matched), counted over all documents.
    const Text matched(q.end() - c.match().len, q.end());
    const double base = static_cast<double>(all.Find(matched).first);
    for (size_t i = 1; i < tb.size(); ++i) {
      Text path;
      for (int v = static_cast<int>(i); v > 0; v = tb.parents[v]) path.push_back(tb.tokens[v]);
      Text s = matched;
      s.insert(s.end(), path.rbegin(), path.rend());
      const double count = static_cast<double>(all.Find(s).first);
      ASSERT_GT(count, 0);
      EXPECT_NEAR(wb[i], count / base, 1e-9);
      EXPECT_EQ(wb[i], wa[i]);
      // Its accept estimate: the count ratio under its parent, over all documents.
      const double parent_count = static_cast<double>(all.Find(Text(s.begin(), s.end() - 1)).first);
      ASSERT_EQ(tb.accept_estimates.size(), tb.size());
      EXPECT_NEAR(tb.accept_estimates[i], count / parent_count, 1e-6);
      EXPECT_EQ(tb.accept_estimates[i], ta.accept_estimates[i]);
    }
  }
}

// kCalibrated over a shard set offers a node's static children as the
// single index does (backoff children included: the union's shorter context) (counts summed by token over the shards that have the
// node's string, the match length of the set, one lookup a node against
// max_static_lookups), so its drafts equal the single index's at every step,
// whatever the limit and width: same candidates, same estimates, hence the
// same acceptances and the same learning. The streams commit the accepted
// path (exact greedy replay), so the estimates move and the cursors jump
// along accepted nodes. The single index's own drafts are checked against an
// eager brute-force ranking in calibrated_test.cc.
TEST_P(ShardSetTest, CalibratedDraftsEqualTheSingleIndex) {
  const size_t k = GetParam();
  std::mt19937 rng(300 + k);
  // A vocabulary of 12 (every shard state's children fit the session's
  // lists) and of 100 (the common tokens' states have more children than
  // the longest list, many of equal counts: ties at the threshold).
  for (const uint32_t vocab : {kVocab, uint32_t{100}}) {
    const Docs docs = RandomDocs(rng, vocab == kVocab ? 80 : 400, vocab);
    const Union all(docs, vocab);
    // Hub tables keeping 8 children or 2; or 32 (kShardTopK, as
    // ShardIndexOptions) with child records, which merged lookups read
    // instead of scanning (hubs 32 below); or none (hubs 0: a threshold no
    // state reaches, so that merged lookups read every state's children,
    // and with vocabulary 100 keep the heaviest 32 of the states with more).
    Built built8, built2, built32, built0;
    Build(docs, k, rng, &built8, {.min_degree = 4, .top_k = 8}, vocab);
    Build(docs, k, rng, &built2, {.min_degree = 2, .top_k = 2}, vocab);
    Build(docs, k, rng, &built32, {.min_degree = 16, .top_k = kShardTopK, .record_min_count = 2},
          vocab);
    Build(docs, k, rng, &built0, {.min_degree = 1000, .top_k = 8}, vocab);
    ASSERT_TRUE(built32.shards[0]->has_records());
    // width 8: the shards' lists and their sums; 3: ties at the threshold;
    // 12: wider than the session's caches; 40, 64: as wide as the longest
    // lists (ties at the threshold).
    for (const auto& [limit, width, hubs] :
         {std::tuple<size_t, size_t, int>{0, 8, 8}, {8, 8, 8}, {2, 8, 8}, {0, 3, 8},
          {0, 12, 8}, {4, 1, 8}, {0, 8, 2}, {0, 3, 2}, {8, 2, 2}, {0, 40, 2}, {0, 64, 8},
          {0, 8, 32}, {2, 8, 32}, {0, 3, 32}, {0, 40, 32}, {0, 8, 0}, {0, 3, 0}, {0, 40, 0}}) {
      const Built& built = hubs == 8 ? built8 : hubs == 2 ? built2 : hubs == 32 ? built32 : built0;
      SessionOptions o;
      o.max_dynamic_bytes = 1 << 20;
      o.policy = Policy::kCalibrated;
      o.tuning.max_static_lookups = limit;
      o.tuning.calibrated_width = width;
      // Backoff children (default backoff_count) included: a shard set backs
      // off to the union's shorter context, as the single index does. Also
      // with backoff everywhere (backoff_count large) every third setting.
      if (limit == 2) o.tuning.backoff_count = 1000;
      Session single(o), sharded(o);
      single.AttachIndex(built.single);
      sharded.AttachShardSet(built.shards);
      size_t steps = 0, accepted_total = 0, branching = 0;
      for (int stream = 0; stream < 2; ++stream) {
        single.Reset();
        sharded.Reset();
        const Text s = RandomStream(rng, docs, 400, vocab);
        Text context;
        for (size_t i = 0; i < s.size();) {
          const DraftTree a = single.Propose(s[i]);
          const DraftTree& b = sharded.Propose(s[i]);
          context.push_back(s[i]);
          ASSERT_EQ(sharded.last_static_length(), single.last_static_length());
          if (width == 8 && limit == 0 && vocab == kVocab) {  // (the brute force is slow)
            ASSERT_EQ(sharded.last_static_length(), all.LongestSuffix(context).first);
          }
          ASSERT_EQ(a.tokens, b.tokens) << "vocab " << vocab << " limit " << limit << " width "
                                        << width << " hubs " << hubs << " step " << steps;
          ASSERT_EQ(a.parents, b.parents);
          const size_t accepted =
              AcceptedLength(b, std::span<const uint32_t>(s).subspan(i + 1));
          const Text commit(s.begin() + i, s.begin() + i + accepted + 1);
          context.insert(context.end(), commit.begin() + 1, commit.end());
          single.Commit(commit);
          sharded.Commit(commit);
          accepted_total += accepted;
          branching += !b.IsLinear();
          i += accepted + 1;
          ++steps;
        }
      }
      // The streams exercise what they are meant to: accepted drafts, branching trees.
      EXPECT_GT(accepted_total, steps / 5) << vocab;
      EXPECT_GT(branching, steps / 10) << vocab;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Shards, ShardSetTest, ::testing::Values(1, 2, 3, 7));

TEST(ShardSet, AttachRefusesEmptyOrNull) {
  Session s;
  EXPECT_THROW(s.AttachShardSet({}), Error);
  std::vector<std::shared_ptr<const StaticIndex>> with_null = {nullptr};
  EXPECT_THROW(s.AttachShardSet(with_null), Error);
  EXPECT_EQ(s.num_indexes(), 0u);
}

}  // namespace
}  // namespace sam::runtime
