// Tests of the Token Recycling drafter: table updates, the tree template,
// pruning, the node budget and cross-request state.
#include "sam/runtime/recycling.h"

#include <gtest/gtest.h>

#include <map>
#include <stdexcept>
#include <vector>

#include "sam/error.h"

namespace sam::runtime {
namespace {

constexpr uint32_t kVocab = 1000;

// Rank path of every template slot: slot s's candidate ranks from the root.
std::vector<std::vector<int>> TemplatePaths() {
  const auto& slots = RecyclingDrafter::Template();
  std::vector<std::vector<int>> paths(slots.size() + 1);  // paths[0] = root = {}
  for (size_t s = 1; s <= slots.size(); ++s) {
    paths[s] = paths[slots[s - 1].parent];
    paths[s].push_back(slots[s - 1].rank);
  }
  paths.erase(paths.begin());
  return paths;
}

// Every row set, with 8 candidates that identify (row, rank): candidate j of
// row t is (t * 8 + j + 1) % kVocab.
void FillAllRows(RecyclingDrafter* drafter) {
  std::vector<uint32_t> tokens(kVocab), topk;
  for (uint32_t t = 0; t < kVocab; ++t) {
    tokens[t] = t;
    for (uint32_t j = 0; j < 8; ++j) topk.push_back((t * 8 + j + 1) % kVocab);
  }
  drafter->ObserveTopK(tokens, topk, 8);
}

std::vector<size_t> NodesPerDepth(const DraftTree& tree) {
  std::vector<size_t> counts;
  for (size_t i = 1; i < tree.size(); ++i) {
    if (counts.size() < tree.depths[i]) counts.resize(tree.depths[i], 0);
    counts[tree.depths[i] - 1]++;
  }
  return counts;
}

TEST(RecyclingDrafter, TemplateIsThePapersTwoTwoTwoTree) {
  // The "2.2.2" template of the Token Recycling code, as rank paths.
  // clang-format off
  const std::vector<std::vector<int>> expected = {
      {0}, {1}, {2}, {3}, {4}, {5}, {6}, {7},
      {0, 0}, {0, 1}, {0, 2}, {0, 3}, {0, 4}, {0, 5}, {0, 6}, {0, 7}, {1, 0}, {1, 1}, {1, 2},
      {1, 3}, {2, 0}, {2, 1}, {2, 2}, {3, 0}, {3, 1}, {4, 0}, {5, 0}, {6, 0}, {7, 0},
      {0, 0, 0}, {0, 0, 1}, {0, 0, 2}, {0, 0, 3}, {0, 0, 4}, {0, 0, 5}, {0, 0, 6}, {0, 0, 7},
      {0, 1, 0}, {0, 1, 1}, {0, 1, 2}, {0, 2, 0}, {0, 2, 1}, {0, 3, 0}, {0, 4, 0}, {0, 5, 0},
      {0, 6, 0}, {0, 7, 0}, {1, 0, 0}, {1, 0, 1}, {1, 1, 0}, {2, 0, 0}, {3, 0, 0}, {4, 0, 0},
      {5, 0, 0},
      {0, 0, 0, 0}, {0, 0, 0, 1}, {0, 0, 0, 2}, {0, 0, 0, 3}, {0, 0, 0, 4}, {0, 0, 1, 0},
      {0, 0, 1, 1}, {0, 0, 2, 0}, {0, 0, 3, 0}, {0, 0, 4, 0}, {0, 1, 0, 0}, {0, 2, 0, 0},
      {1, 0, 0, 0}, {2, 0, 0, 0}, {3, 0, 0, 0},
      {0, 0, 0, 0, 0}, {0, 0, 0, 0, 1}, {0, 0, 0, 0, 2}, {0, 0, 0, 1, 0}, {0, 0, 0, 2, 0},
      {0, 0, 1, 0, 0}, {0, 1, 0, 0, 0}, {1, 0, 0, 0, 0},
      {0, 0, 0, 0, 0, 0}, {0, 0, 0, 0, 0, 1}, {0, 0, 0, 1, 0, 0},
  };
  // clang-format on
  EXPECT_EQ(TemplatePaths(), expected);
}

TEST(RecyclingDrafter, FullTableFillsTheWholeTemplate) {
  RecyclingDrafter drafter(kVocab);
  FillAllRows(&drafter);
  DraftTree tree;
  ASSERT_TRUE(drafter.Propose(5, 1000, &tree));
  EXPECT_EQ(tree.size(), 81u);
  EXPECT_EQ(tree.source, DraftSource::kRecycling);
  EXPECT_EQ(tree.tokens[0], 5u);
  EXPECT_EQ(NodesPerDepth(tree), (std::vector<size_t>{8, 21, 25, 15, 8, 3}));
  // Node i fills slot i: its token is candidate `rank` of its parent's row.
  const auto& slots = RecyclingDrafter::Template();
  for (size_t i = 1; i < tree.size(); ++i) {
    EXPECT_EQ(tree.parents[i], slots[i - 1].parent);
    EXPECT_EQ(tree.depths[i], slots[i - 1].depth);
    EXPECT_EQ(tree.tokens[i], (tree.tokens[tree.parents[i]] * 8 + slots[i - 1].rank + 1) % kVocab);
  }
}

TEST(RecyclingDrafter, TableUpdateSemantics) {
  RecyclingDrafter drafter(kVocab);
  EXPECT_TRUE(drafter.Row(3).empty());
  // k < 8 stores k candidates; k > 8 stores the first 8.
  drafter.ObserveTopK(std::vector<uint32_t>{3, 4}, std::vector<uint32_t>{10, 11, 12, 20, 21, 22},
                      3);
  EXPECT_EQ(std::vector<uint32_t>(drafter.Row(3).begin(), drafter.Row(3).end()),
            (std::vector<uint32_t>{10, 11, 12}));
  std::vector<uint32_t> ten(10);
  for (uint32_t j = 0; j < 10; ++j) ten[j] = 100 + j;
  drafter.ObserveTopK(std::vector<uint32_t>{4}, ten, 10);
  EXPECT_EQ(std::vector<uint32_t>(drafter.Row(4).begin(), drafter.Row(4).end()),
            (std::vector<uint32_t>{100, 101, 102, 103, 104, 105, 106, 107}));
  // Last writer wins, within one call and across calls; the row is replaced
  // whole (a shorter write shortens it).
  drafter.ObserveTopK(std::vector<uint32_t>{4, 4}, std::vector<uint32_t>{1, 2, 7, 8}, 2);
  EXPECT_EQ(std::vector<uint32_t>(drafter.Row(4).begin(), drafter.Row(4).end()),
            (std::vector<uint32_t>{7, 8}));
  // k = 0 changes nothing.
  drafter.ObserveTopK(std::vector<uint32_t>{4}, std::vector<uint32_t>{}, 0);
  EXPECT_EQ(drafter.Row(4).size(), 2u);
}

TEST(RecyclingDrafter, BadObservationsThrowAndChangeNothing) {
  RecyclingDrafter drafter(kVocab);
  drafter.ObserveTopK(std::vector<uint32_t>{1}, std::vector<uint32_t>{2, 3}, 2);
  EXPECT_THROW(drafter.ObserveTopK(std::vector<uint32_t>{1, 2}, std::vector<uint32_t>{5, 6, 7}, 2),
               sam::Error);
  EXPECT_THROW(
      drafter.ObserveTopK(std::vector<uint32_t>{1, kVocab}, std::vector<uint32_t>{5, 6}, 1),
      sam::Error);
  EXPECT_THROW(
      drafter.ObserveTopK(std::vector<uint32_t>{1, 2}, std::vector<uint32_t>{5, kVocab}, 1),
      sam::Error);
  EXPECT_EQ(std::vector<uint32_t>(drafter.Row(1).begin(), drafter.Row(1).end()),
            (std::vector<uint32_t>{2, 3}));
  EXPECT_TRUE(drafter.Row(2).empty());
  EXPECT_THROW(drafter.Row(kVocab), sam::Error);
  DraftTree tree;
  EXPECT_THROW(drafter.Propose(kVocab, 10, &tree), sam::Error);
  EXPECT_THROW(RecyclingDrafter(0), sam::Error);
}

TEST(RecyclingDrafter, PrunesChildrenOfUnsetAndShortRows) {
  RecyclingDrafter drafter(kVocab);
  DraftTree tree;
  EXPECT_FALSE(drafter.Propose(1, 81, &tree));  // empty table: root only
  EXPECT_EQ(tree.size(), 1u);
  // Row 1 -> {2, 3, 4}; row 2 -> {5, 6}; every other row unset.
  drafter.ObserveTopK(std::vector<uint32_t>{1, 2}, std::vector<uint32_t>{2, 3, 4, 5, 6, 0}, 3);
  drafter.ObserveTopK(std::vector<uint32_t>{2}, std::vector<uint32_t>{5, 6}, 2);
  ASSERT_TRUE(drafter.Propose(1, 81, &tree));
  // Depth 1: 2, 3, 4 (slots 0..2 of the root's 8). Depth 2: only node 2 has
  // a row: its 2 candidates (the template gives it 8 slots). Tokens 5 and 6
  // have no rows, so nothing deeper.
  EXPECT_EQ(tree.tokens, (std::vector<uint32_t>{1, 2, 3, 4, 5, 6}));
  EXPECT_EQ(tree.parents, (std::vector<int32_t>{-1, 0, 0, 0, 1, 1}));
}

TEST(RecyclingDrafter, PrunedSlotsKeepTheTemplateOfTheRest) {
  // Rows set for every token but one: the subtree under that token's slots
  // disappears, the rest of the tree is the full tree minus that subtree.
  RecyclingDrafter full(kVocab), pruned(kVocab);
  FillAllRows(&full);
  FillAllRows(&pruned);
  DraftTree full_tree, pruned_tree;
  full.Propose(5, 81, &full_tree);
  const uint32_t missing = full_tree.tokens[2];  // slot {1}
  std::vector<uint32_t> tokens, topk;
  for (uint32_t t = 0; t < kVocab; ++t) {
    if (t == missing) continue;
    tokens.push_back(t);
    for (uint32_t j = 0; j < 8; ++j) topk.push_back((t * 8 + j + 1) % kVocab);
  }
  pruned.Clear();
  pruned.ObserveTopK(tokens, topk, 8);
  pruned.Propose(5, 81, &pruned_tree);
  // Expected: the full tree without every node having node 2 as an ancestor
  // (other than node 2 itself).
  std::vector<uint32_t> expected_tokens;
  std::vector<size_t> depth_counts;
  for (size_t i = 0; i < full_tree.size(); ++i) {
    bool under = false;
    for (int32_t v = full_tree.parents[i]; v > 0; v = full_tree.parents[v]) under |= v == 2;
    if (!under) expected_tokens.push_back(full_tree.tokens[i]);
  }
  EXPECT_EQ(pruned_tree.tokens, expected_tokens);
  EXPECT_LT(pruned_tree.size(), full_tree.size());
}

TEST(RecyclingDrafter, RespectsMaxNodes) {
  RecyclingDrafter drafter(kVocab);
  FillAllRows(&drafter);
  DraftTree full, tree;
  drafter.Propose(7, 81, &full);
  for (size_t max_nodes : {0, 1, 2, 9, 10, 30, 80, 81, 82}) {
    const bool proposed = drafter.Propose(7, max_nodes, &tree);
    const size_t expected = std::max<size_t>(1, std::min<size_t>(max_nodes, 81));
    EXPECT_EQ(tree.size(), expected) << max_nodes;
    EXPECT_EQ(proposed, expected > 1);
    // A budget keeps a breadth-first prefix of the full tree.
    EXPECT_TRUE(std::equal(tree.tokens.begin(), tree.tokens.end(), full.tokens.begin()));
    EXPECT_TRUE(std::equal(tree.parents.begin(), tree.parents.end(), full.parents.begin()));
  }
}

TEST(RecyclingDrafter, ResetKeepsTheTableClearEmptiesIt) {
  RecyclingDrafter drafter(kVocab);
  drafter.ObserveTopK(std::vector<uint32_t>{1}, std::vector<uint32_t>{2, 3}, 2);
  Drafter& as_drafter = drafter;
  as_drafter.Reset();
  DraftTree tree;
  EXPECT_TRUE(drafter.Propose(1, 81, &tree));
  EXPECT_EQ(tree.size(), 3u);
  drafter.Clear();
  EXPECT_FALSE(drafter.Propose(1, 81, &tree));
  EXPECT_TRUE(drafter.Row(1).empty());
}

TEST(RecyclingDrafter, ProposeDoesNotAllocateOnceCapacitySuffices) {
  RecyclingDrafter drafter(kVocab);
  FillAllRows(&drafter);
  DraftTree tree;
  drafter.Propose(3, 81, &tree);
  const uint32_t* data = tree.tokens.data();
  const size_t capacity = tree.tokens.capacity();
  drafter.Propose(9, 81, &tree);
  EXPECT_EQ(tree.tokens.data(), data);
  EXPECT_EQ(tree.tokens.capacity(), capacity);
}

}  // namespace
}  // namespace sam::runtime
