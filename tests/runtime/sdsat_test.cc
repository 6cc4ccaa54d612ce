// SdsatDrafter (sam/runtime/sdsat.h): the adaptive ids, the rows' life cycle, and the trees it
// builds from q_1..q_k, against brute force over every path.
#include "sam/runtime/sdsat.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <random>
#include <set>
#include <vector>

#include "sam/error.h"

namespace {

namespace rt = sam::runtime;

// k random distributions over `vocab` tokens (no ties), flattened.
std::vector<float> RandomRows(size_t k, size_t vocab, uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> u(0.01f, 1.0f);
  std::vector<float> rows(k * vocab);
  for (size_t j = 0; j < k; ++j) {
    float sum = 0;
    for (size_t t = 0; t < vocab; ++t) sum += rows[j * vocab + t] = u(gen);
    for (size_t t = 0; t < vocab; ++t) rows[j * vocab + t] /= sum;
  }
  return rows;
}

TEST(SdsatTokens, OneIdRepeatsAndKIdsAreKept) {
  const uint32_t one[] = {32011};
  EXPECT_EQ(rt::ExpandSdsatTokens(one, 4), (std::vector<uint32_t>{32011, 32011, 32011, 32011}));
  const uint32_t three[] = {5, 6, 7};
  EXPECT_EQ(rt::ExpandSdsatTokens(three, 3), (std::vector<uint32_t>{5, 6, 7}));
  EXPECT_THROW(rt::ExpandSdsatTokens(three, 4), sam::Error);  // 3 ids for k = 4
  EXPECT_THROW(rt::ExpandSdsatTokens(one, 0), sam::Error);
  EXPECT_THROW(rt::ExpandSdsatTokens(one, rt::kMaxSdsatTokens + 1), sam::Error);
  EXPECT_THROW(rt::ExpandSdsatTokens({}, 2), sam::Error);
}

TEST(SdsatDrafter, RefusesIdsOutsideTheVocabularyAndBadRows) {
  EXPECT_THROW(rt::SdsatDrafter({.adaptive_tokens = {10}}, 10), sam::Error);
  EXPECT_THROW(rt::SdsatDrafter({.adaptive_tokens = {}}, 10), sam::Error);
  rt::SdsatDrafter d({.adaptive_tokens = {9, 9}}, 10);
  EXPECT_THROW(d.SetRows(std::vector<float>(19)), sam::Error);
  try {
    rt::SdsatDrafter({.adaptive_tokens = {3, 12}}, 10);
    ADD_FAILURE();
  } catch (const sam::Error& e) {
    EXPECT_NE(std::string(e.what()).find("12"), std::string::npos) << e.what();
  }
}

TEST(SdsatDrafter, RowsAreConsumedByOnePropose) {
  const size_t k = 3, vocab = 6;
  rt::SdsatDrafter d({.adaptive_tokens = {5, 5, 5}}, vocab);
  d.Configure({.temperature = 0.0f}, 1);
  rt::DraftTree tree;
  EXPECT_FALSE(d.Propose(2, 10, &tree));
  EXPECT_TRUE(d.wanted());
  EXPECT_EQ(tree.size(), 1u);
  d.SetRows(RandomRows(k, vocab, 1));
  EXPECT_FALSE(d.wanted());
  EXPECT_TRUE(d.Propose(2, 10, &tree));
  EXPECT_EQ(tree.source, rt::DraftSource::kSdsat);
  EXPECT_FALSE(d.has_rows());
  EXPECT_FALSE(d.Propose(2, 10, &tree));  // consumed
  // SwapRows: the same rows without a copy, and the previous buffer back.
  std::vector<float> buffer = RandomRows(k, vocab, 3);
  const std::vector<float> swapped = buffer;
  d.SetRows(RandomRows(k, vocab, 4));
  d.SwapRows(&buffer);
  EXPECT_EQ(buffer, RandomRows(k, vocab, 4));
  rt::DraftTree from_swap, from_copy;
  ASSERT_TRUE(d.Propose(2, 10, &from_swap));
  d.SetRows(swapped);
  ASSERT_TRUE(d.Propose(2, 10, &from_copy));
  EXPECT_EQ(from_swap.tokens, from_copy.tokens);
  std::vector<float> short_rows(k * vocab - 1);
  EXPECT_THROW(d.SwapRows(&short_rows), sam::Error);
  d.SetRows(RandomRows(k, vocab, 2));
  d.ClearRows();
  EXPECT_FALSE(d.Propose(2, 10, &tree));
  d.SetRows(RandomRows(k, vocab, 2));
  d.Reset();
  EXPECT_FALSE(d.Propose(2, 10, &tree));
}

TEST(SdsatDrafter, GreedyChainIsTheArgmaxOfEachRow) {
  for (uint32_t seed = 0; seed < 50; ++seed) {
    const size_t k = 1 + seed % 5, vocab = 7;
    rt::SdsatDrafter d({.adaptive_tokens = std::vector<uint32_t>(k, 6)}, vocab);
    d.Configure({.temperature = 0.0f}, seed);
    const std::vector<float> rows = RandomRows(k, vocab, seed);
    d.SetRows(rows);
    rt::DraftTree tree;
    const size_t max_nodes = 1 + (seed % 7);
    d.Propose(4, max_nodes, &tree);
    ASSERT_EQ(tree.size(), std::min(max_nodes, k + 1)) << seed;
    EXPECT_EQ(tree.tokens[0], 4u);
    for (size_t i = 1; i < tree.size(); ++i) {
      const auto row = rows.begin() + static_cast<std::ptrdiff_t>((i - 1) * vocab);
      EXPECT_EQ(tree.tokens[i], static_cast<uint32_t>(std::max_element(row, row + vocab) - row)) << seed;
      EXPECT_EQ(tree.parents[i], static_cast<int32_t>(i) - 1);
      EXPECT_FLOAT_EQ(tree.draft_probs[i], row[tree.tokens[i]]);
    }
    EXPECT_EQ(d.last_draft().verify_mode, rt::DraftMode::kDeterministic);
  }
}

// The best-first top-W tree: its nodes are the max_nodes - 1 most probable paths (products of
// q_1..q_d) among those the top-W expansion can reach, by brute force.
TEST(SdsatDrafter, TopWTreeKeepsTheMostProbablePaths) {
  for (uint32_t seed = 0; seed < 30; ++seed) {
    const size_t k = 3, vocab = 5, width = 2;
    rt::SdsatDrafter d({.adaptive_tokens = {4, 4, 4}, .width = width, .without_replacement = false}, vocab);
    d.Configure({.temperature = 0.0f}, seed);
    const std::vector<float> rows = RandomRows(k, vocab, 100 + seed);
    d.SetRows(rows);
    rt::DraftTree tree;
    const size_t max_nodes = 4 + seed % 6;
    d.Propose(0, max_nodes, &tree);
    // Brute force: every level keeps the top-W tokens of its row under each of the W most
    // probable nodes of the previous level; candidates ranked by path probability.
    std::vector<std::pair<double, std::vector<uint32_t>>> level = {{1.0, {}}}, all;
    std::vector<uint32_t> order(vocab);
    for (size_t depth = 0; depth < k; ++depth) {
      const float* q = rows.data() + depth * vocab;
      for (size_t t = 0; t < vocab; ++t) order[t] = static_cast<uint32_t>(t);
      std::sort(order.begin(), order.end(), [&](uint32_t a, uint32_t b) { return q[a] > q[b]; });
      std::sort(level.begin(), level.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
      if (level.size() > width) level.resize(width);
      std::vector<std::pair<double, std::vector<uint32_t>>> next;
      for (const auto& [p, path] : level)
        for (size_t c = 0; c < width; ++c) {
          std::vector<uint32_t> longer = path;
          longer.push_back(order[c]);
          next.push_back({p * q[order[c]], longer});
        }
      all.insert(all.end(), next.begin(), next.end());
      level = next;
    }
    std::sort(all.begin(), all.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
    std::set<std::vector<uint32_t>> expected, got;
    for (size_t i = 0; i + 1 < max_nodes && i < all.size(); ++i) expected.insert(all[i].second);
    for (size_t i = 1; i < tree.size(); ++i) {
      std::vector<uint32_t> path;
      for (int32_t n = static_cast<int32_t>(i); n > 0; n = tree.parents[n]) path.push_back(tree.tokens[n]);
      std::reverse(path.begin(), path.end());
      got.insert(path);
    }
    EXPECT_EQ(got, expected) << "seed " << seed;
  }
}

// Sampling without replacement: siblings are distinct, every node's proposal row is q at its
// depth, and the first child's token is distributed as q_1 (a chi-square over many draws).
TEST(SdsatDrafter, WithoutReplacementDrawsFromTheDepthsRow) {
  const size_t k = 2, vocab = 4;
  rt::SdsatDrafter d({.adaptive_tokens = {3, 3}, .width = 2, .without_replacement = true}, vocab);
  d.Configure({.temperature = 1.0f}, 7);
  const std::vector<float> rows = RandomRows(k, vocab, 9);
  std::vector<int> first(vocab, 0);
  const int draws = 20000;
  for (int r = 0; r < draws; ++r) {
    d.SetRows(rows);
    rt::DraftTree tree;
    ASSERT_TRUE(d.Propose(1, 32, &tree));
    const rt::TreeDraft& draft = d.last_draft();
    EXPECT_EQ(draft.verify_mode, rt::DraftMode::kWithoutReplacement);
    for (size_t i = 0; i < tree.size(); ++i) {
      const std::span<const float> row = draft.ProposalRow(static_cast<int32_t>(i));
      if (row.empty()) continue;
      const size_t depth = tree.depths[i];
      ASSERT_LT(depth, k);
      for (size_t t = 0; t < vocab; ++t) ASSERT_NEAR(row[t], rows[depth * vocab + t], 1e-5);
      std::set<uint32_t> children;
      for (size_t c = 1; c < tree.size(); ++c) {
        if (tree.parents[c] == static_cast<int32_t>(i)) {
          EXPECT_TRUE(children.insert(tree.tokens[c]).second);
        }
      }
    }
    ++first[tree.tokens[1]];
  }
  double chi2 = 0;
  for (size_t t = 0; t < vocab; ++t) {
    const double e = rows[t] * draws;
    chi2 += (first[t] - e) * (first[t] - e) / e;
  }
  EXPECT_LT(chi2, 16.27);  // df 3, p = 0.001
}

}  // namespace
