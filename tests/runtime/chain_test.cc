// Chains from trees (chain.h): the chain against brute-force enumeration of
// every root-to-node path, the fallbacks, and sessions that draft chains.
#include "sam/runtime/chain.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <random>
#include <span>
#include <vector>

#include "sam/error.h"
#include "sam/runtime/replay.h"
#include "sam/runtime/session.h"
#include "test_index.h"

namespace sam::runtime {
namespace {

using test_util::BuiltIndex;
using test_util::RandomTexts;
using test_util::Text;

// A random tree of n nodes (parents before children, siblings' tokens
// distinct), with estimates in [0, 1] (some 0 and some 1) when `estimates`.
DraftTree RandomTree(std::mt19937& rng, size_t n, bool estimates) {
  DraftTree t;
  t.Reset(1000, DraftSource::kStatic);
  t.match_len = 7;
  if (estimates) t.accept_estimates.assign(1, 1.0f);
  for (size_t i = 1; i < n; ++i) {
    // Deep and bushy trees alike: the parent is often one of the last nodes.
    const int parent = rng() % 2 ? static_cast<int>(i - 1 - rng() % std::min<size_t>(i, 3))
                                 : static_cast<int>(rng() % i);
    uint32_t token = 0;
    do token = rng() % 50;
    while (t.Child(parent, token) >= 0);
    t.Add(parent, token);
    if (estimates) {
      const uint32_t r = rng() % 10;
      t.accept_estimates.push_back(r == 0 ? 0.0f : r == 1 ? 1.0f
                                                          : std::uniform_real_distribution<float>(0, 1)(rng));
    }
  }
  return t;
}

// The root path of node v (root first).
std::vector<int> PathOf(const DraftTree& t, int v) {
  std::vector<int> path;
  for (; v >= 0; v = t.parents[v]) path.push_back(v);
  std::reverse(path.begin(), path.end());
  return path;
}

// Brute force: every node's root path, its expected accepted tokens summed
// from the root down, its value; the best node by (value, then shallower,
// then first).
int BruteForceBest(const DraftTree& t, const ChainOptions& o, std::span<const double> e) {
  int best = 0;
  double best_value = 0;
  for (size_t v = 0; v < t.size(); ++v) {
    const std::vector<int> path = PathOf(t, static_cast<int>(v));
    double p = 1.0, expected = 0.0;
    bool allowed = path.size() - 1 <= o.max_tokens;
    for (size_t k = 1; k < path.size(); ++k) {
      p *= e[path[k]];
      expected += p;
      allowed = allowed && p >= o.min_path_probability;
    }
    if (!allowed) continue;
    double value = expected;
    if (o.cost_curve != nullptr && !o.cost_curve->empty()) {
      const double cost = o.cost_curve->Relative(path.size());
      value = o.rate > 0 ? 1.0 + expected - o.rate * cost : (1.0 + expected) / cost;
    }
    if (v == 0 || value > best_value ||
        (value == best_value && t.depths[v] < t.depths[best])) {
      best = static_cast<int>(v);
      best_value = value;
    }
  }
  return best;
}

void ExpectChainIsPath(const DraftTree& tree, const DraftTree& chain, int end) {
  const std::vector<int> path = PathOf(tree, end);
  ASSERT_EQ(chain.size(), path.size());
  ASSERT_TRUE(chain.IsLinear());
  for (size_t k = 0; k < path.size(); ++k) {
    EXPECT_EQ(chain.tokens[k], tree.tokens[path[k]]);
    EXPECT_EQ(chain.depths[k], k);
    if (!tree.accept_estimates.empty()) {
      EXPECT_EQ(chain.accept_estimates[k], tree.accept_estimates[path[k]]);
    }
  }
  EXPECT_EQ(chain.source, tree.source);
  EXPECT_EQ(chain.match_len, tree.match_len);
}

TEST(Chain, MaximisesExpectedAcceptedTokensOverEveryPath) {
  std::mt19937 rng(3);
  ChainShaper shaper;
  const CostCurve cpu = CostCurve::FromPoints(
      std::vector<CostPoint>{{1, 1.0}, {2, 1.1}, {8, 1.5}, {16, 2.2}, {64, 5.0}});
  size_t nontrivial = 0;
  for (int trial = 0; trial < 3000; ++trial) {
    const DraftTree tree = RandomTree(rng, 1 + rng() % 60, true);
    ChainOptions o;
    o.max_tokens = rng() % 4 == 0 ? 1 + rng() % 6 : 64;
    o.min_path_probability = rng() % 3 == 0 ? 0.0 : std::uniform_real_distribution<double>(0, 0.5)(rng);
    if (trial % 3 == 1) {
      o.cost_curve = &cpu;
      o.rate = trial % 2 ? 0.0 : std::uniform_real_distribution<double>(0.2, 2.0)(rng);
    }
    std::vector<double> e(tree.accept_estimates.begin(), tree.accept_estimates.end());
    DraftTree chain;
    shaper.Shape(tree, o, &chain);
    const int best = BruteForceBest(tree, o, e);
    ASSERT_NO_FATAL_FAILURE(ExpectChainIsPath(tree, chain, best)) << "trial " << trial;
    ASSERT_EQ(shaper.path(), PathOf(tree, best));
    nontrivial += chain.size() > 2 && !tree.IsLinear();
  }
  EXPECT_GT(nontrivial, 1000u);
}

TEST(Chain, WithoutEstimatesTheDraftProbabilitiesOrTheFirstChildChain) {
  std::mt19937 rng(4);
  ChainShaper shaper;
  for (int trial = 0; trial < 500; ++trial) {
    DraftTree tree = RandomTree(rng, 1 + rng() % 40, false);
    ChainOptions o;
    o.max_tokens = 1 + rng() % 20;
    DraftTree chain;
    shaper.Shape(tree, o, &chain);
    // The first child at each depth, down to max_tokens.
    int v = 0;
    for (size_t depth = 0; depth < o.max_tokens; ++depth) {
      int first = -1;
      for (size_t i = 1; i < tree.size() && first < 0; ++i)
        if (tree.parents[i] == v) first = static_cast<int>(i);
      if (first < 0) break;
      v = first;
    }
    ASSERT_NO_FATAL_FAILURE(ExpectChainIsPath(tree, chain, v));
    EXPECT_TRUE(chain.accept_estimates.empty());
    // A draft's own q(node | parent) stands for the estimates.
    tree.draft_probs.assign(1, 1.0f);
    for (size_t i = 1; i < tree.size(); ++i)
      tree.draft_probs.push_back(std::uniform_real_distribution<float>(0, 1)(rng));
    o.min_path_probability = 0.05;
    shaper.Shape(tree, o, &chain);
    std::vector<double> q(tree.draft_probs.begin(), tree.draft_probs.end());
    const int best = BruteForceBest(tree, o, q);
    ASSERT_NO_FATAL_FAILURE(ExpectChainIsPath(tree, chain, best));
    for (size_t k = 0; k < chain.size(); ++k)
      EXPECT_EQ(chain.draft_probs[k], tree.draft_probs[shaper.path()[k]]);
  }
}

TEST(Chain, ShapeNames) {
  EXPECT_EQ(FindDraftShape("tree"), DraftShape::kTree);
  EXPECT_EQ(FindDraftShape("chain"), DraftShape::kChain);
  EXPECT_EQ(DraftShapeName(DraftShape::kChain), "chain");
  try {
    FindDraftShape("path");
    FAIL() << "accepted 'path'";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("unknown draft shape 'path' (valid: tree, chain)"),
              std::string::npos);
  }
  SessionOptions bad;
  bad.tuning.chain_min_path_probability = 1.5;
  EXPECT_THROW(Session{bad}, Error);
}

Text Stream(std::mt19937& rng, const std::vector<Text>& docs, size_t n, uint32_t vocab) {
  return test_util::CopiedStream(rng, docs, n, vocab, 4, 15);
}

// A session drafting chains drafts the chain of the tree the same policy
// drafts (Session::last_tree), and its statistics count the chains.
void CheckSessionChains(Policy policy, uint32_t seed) {
  std::mt19937 rng(seed);
  const uint32_t vocab = 8;
  std::vector<Text> docs = RandomTexts(rng, 40, 10, 60, vocab);
  for (int k = 0; k < 15; ++k) docs.push_back(docs[rng() % docs.size()]);
  BuiltIndex index(docs, vocab, "chain_session_" + std::to_string(seed) + ".sam");
  SessionOptions o;
  o.max_dynamic_bytes = 1 << 20;
  o.policy = policy;
  o.shape = DraftShape::kChain;
  o.tuning.chain_min_path_probability = 0.1;
  Session chain_session(o);
  chain_session.AttachIndex(&index.view());
  SessionOptions tree_options = o;
  tree_options.shape = DraftShape::kTree;
  Session tree_session(tree_options);  // kTree, kPaper: no learning, same trees
  tree_session.AttachIndex(&index.view());
  const Text prompt = Stream(rng, docs, 20, vocab);
  chain_session.Prefill(prompt);
  tree_session.Prefill(prompt);
  const Text gen = Stream(rng, docs, 1200, vocab);
  ChainShaper shaper;
  ChainOptions shape;
  shape.max_tokens = o.draft_size - 1;
  shape.min_path_probability = o.tuning.chain_min_path_probability;
  uint64_t drafted = 0, accepted_total = 0, cut = 0, bounded = 0;
  size_t steps = 0;
  for (size_t i = 0; i + 1 < gen.size(); ++steps) {
    // A caller's max_nodes bounds the chain, not the tree it is cut from.
    const size_t max_nodes = rng() % 3 == 0 ? 2 + rng() % 5 : SIZE_MAX;
    DraftTree chain;
    if (max_nodes == SIZE_MAX) chain = chain_session.Propose(gen[i]);
    else chain_session.Propose(gen[i], max_nodes, &chain);
    const DraftTree& tree = chain_session.last_tree();
    ASSERT_TRUE(chain.IsLinear());
    shape.max_tokens = std::min(o.draft_size, max_nodes) - 1;
    bounded += tree.size() > max_nodes;
    DraftTree expected;
    shaper.Shape(tree, shape, &expected);
    ASSERT_EQ(chain.tokens, expected.tokens) << "step " << steps;
    ASSERT_EQ(chain.accept_estimates, expected.accept_estimates);
    if (policy != Policy::kCalibrated) {
      const DraftTree& other = tree_session.Propose(gen[i]);
      ASSERT_EQ(other.tokens, tree.tokens) << "step " << steps;
      ASSERT_EQ(other.parents, tree.parents);
    }
    cut += chain.size() < tree.size();
    drafted += chain.size() - 1;
    const size_t a = AcceptedLength(chain, std::span<const uint32_t>(gen).subspan(i + 1));
    accepted_total += a;
    const Text commit(gen.begin() + i, gen.begin() + i + a + 1);
    chain_session.Commit(commit);
    if (policy != Policy::kCalibrated) tree_session.Commit(commit);
    i += a + 1;
  }
  const SourceStatistics total = chain_session.statistics().Total();
  EXPECT_EQ(total.steps, steps);
  EXPECT_EQ(total.draft_tokens, drafted);
  EXPECT_EQ(total.accepted_tokens, accepted_total);
  EXPECT_GT(accepted_total, steps / 4);
  EXPECT_GT(bounded, steps / 20);
  if (policy != Policy::kPaper) {
    EXPECT_GT(cut, steps / 10);  // trees that branch or fall below the threshold
  }
}

TEST(Chain, SessionsDraftTheChainsOfTheirTrees) {
  for (uint32_t seed = 1; seed <= 3; ++seed) {
    CheckSessionChains(Policy::kPaper, seed);
    CheckSessionChains(Policy::kTree, seed + 10);
    CheckSessionChains(Policy::kCalibrated, seed + 20);
  }
}

// A sam-cal chain session draws its tree with its chain tuning: before any calibration, its
// tree is the one a tree session draws whose tree tuning is set to those values, and it
// differs from the tree the same options draw as a tree.
TEST(Chain, CalibratedChainSessionsDrawTheirTreesWithTheChainTuning) {
  std::mt19937 rng(77);
  const uint32_t vocab = 8;
  std::vector<Text> docs = RandomTexts(rng, 40, 10, 60, vocab);
  for (int k = 0; k < 15; ++k) docs.push_back(docs[rng() % docs.size()]);
  BuiltIndex index(docs, vocab, "chain_tuning.sam");
  SessionOptions o;
  o.max_dynamic_bytes = 1 << 20;
  o.policy = Policy::kCalibrated;
  o.shape = DraftShape::kChain;
  o.tuning.chain_min_path_probability = 0.02;
  o.tuning.chain_calibrated_width = 2;
  o.tuning.chain_max_static_lookups = 3;
  SessionOptions same = o;
  same.shape = DraftShape::kTree;
  same.tuning.min_path_probability = 0.02;
  same.tuning.calibrated_width = 2;
  same.tuning.max_static_lookups = 3;
  SessionOptions as_tree = o;
  as_tree.shape = DraftShape::kTree;
  size_t differ = 0;
  for (int k = 0; k < 40; ++k) {
    const Text prompt = Stream(rng, docs, 30, vocab);
    Session chain(o), tree(same), other(as_tree);
    for (Session* s : {&chain, &tree, &other}) {
      s->AttachIndex(&index.view());
      s->Prefill(prompt);
    }
    const uint32_t start = prompt[rng() % prompt.size()];
    chain.Propose(start);
    const DraftTree& expected = tree.Propose(start);
    ASSERT_EQ(chain.last_tree().tokens, expected.tokens) << "prompt " << k;
    ASSERT_EQ(chain.last_tree().parents, expected.parents);
    differ += other.Propose(start).tokens != expected.tokens;
  }
  EXPECT_GT(differ, 10u);
}

}  // namespace
}  // namespace sam::runtime
