// Tests of the stochastic draft trees (tree_draft.h) with their verification
// rules, in pure C++: a synthetic target p(.|context) and a synthetic drafter
// q(.|context) = p with noise on the logits, both functions of the whole token
// path (a hash), over a small vocabulary.
//
// Losslessness (chi-square). For each tree mode, the first 3 emitted tokens
// after a fixed context are generated n = 30,000 times by speculative steps
// (draft a tree, VerifySampling with the mode's rule, continue from the
// accepted path until 3 tokens are out) and their histogram over the V^3 = 64
// sequences is compared with the exact product p(t1) p(t2|t1) p(t3|t1 t2) by
// Pearson's chi-square (cells whose expected count is below 5 are pooled).
// Threshold: the chi-square quantile at p = 1e-4 for the degrees of freedom
// (Wilson-Hilferty); seeds are fixed, so a run is reproducible. A negative
// control (RSD-C draws verified as if drawn with replacement) must exceed it.
//
// Acceptance against theory. For a one-level tree of k children at the root,
// the probability that recursive rejection accepts a child is computed exactly
// from p and q (with replacement: 1 - prod_j TV(r_j, q); without replacement:
// a recursion over the tried prefixes) and compared with the rate over n =
// 100,000 trials within 4.5 standard errors.
#include "sam/runtime/tree_draft.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <numeric>
#include <string>
#include <vector>

#include "sam/error.h"
#include "sam/runtime/verify.h"

namespace sam::runtime {
namespace {

uint64_t HashPath(std::span<const uint32_t> path, uint64_t salt) {
  uint64_t h = 1469598103934665603ULL ^ salt;
  for (const uint32_t t : path) h = (h ^ (t + 1)) * 1099511628211ULL;
  return h;
}

// Softmax of scale * N(0,1) logits drawn from the path's hash, plus `noise` *
// N(0,1) logits from a second hash (the drafter's error).
std::vector<float> Distribution(std::span<const uint32_t> path, size_t vocab, double scale,
                                double noise) {
  Rng a(HashPath(path, 1)), b(HashPath(path, 2));
  std::vector<double> logits(vocab);
  auto normal = [](Rng& r) {
    const double u1 = (static_cast<double>(r.Next() >> 11) + 0.5) * 0x1.0p-53;
    return std::sqrt(-2 * std::log(u1)) * std::cos(2 * M_PI * r.Uniform());
  };
  for (double& l : logits) l = scale * normal(a);
  for (double& l : logits) l += noise * normal(b);
  const double top = *std::max_element(logits.begin(), logits.end());
  std::vector<float> p(vocab);
  double sum = 0;
  for (size_t v = 0; v < vocab; ++v) sum += std::exp(logits[v] - top);
  for (size_t v = 0; v < vocab; ++v) p[v] = static_cast<float>(std::exp(logits[v] - top) / sum);
  return p;
}

// The token path from the context through node `node` of `tree`.
std::vector<uint32_t> PathOf(const std::vector<uint32_t>& context, const DraftTree& tree,
                             int32_t node) {
  std::vector<uint32_t> tail;
  for (int32_t n = node; n >= 0; n = tree.parents[n]) tail.push_back(tree.tokens[n]);
  std::vector<uint32_t> path = context;
  path.insert(path.end(), tail.rbegin(), tail.rend());
  return path;
}

struct Synthetic {
  size_t vocab = 4;
  double scale = 1.2;
  double noise = 0.8;  // drafter noise; 0 = the drafter is the target

  std::vector<float> P(std::span<const uint32_t> path) const {
    return Distribution(path, vocab, scale, 0.0);
  }
  std::vector<float> Q(std::span<const uint32_t> path) const {
    return Distribution(path, vocab, scale, noise);
  }
};

// The drafter: q(.|context + path to node).
class SyntheticExpander : public TreeExpander {
 public:
  SyntheticExpander(const Synthetic& s, const std::vector<uint32_t>* context)
      : s_(s), context_(context) {}
  size_t vocab_size() const override { return s_.vocab; }
  void Expand(const DraftTree& tree, std::span<const int32_t> nodes,
              std::span<float> rows) override {
    ++calls;
    for (size_t j = 0; j < nodes.size(); ++j) {
      const std::vector<float> q = s_.Q(PathOf(*context_, tree, nodes[j]));
      std::copy(q.begin(), q.end(), rows.begin() + j * s_.vocab);
    }
  }
  int calls = 0;

 private:
  const Synthetic& s_;
  const std::vector<uint32_t>* context_;
};

// One speculative step after `context` (whose last token is the start token):
// the emitted tokens (accepted + bonus).
std::vector<uint32_t> Step(const Synthetic& s, const TreeDraftOptions& options, size_t max_nodes,
                           const std::vector<uint32_t>& context, Rng& draft_rng, Rng& verify_rng,
                           std::optional<DraftMode> mode_override = std::nullopt) {
  const std::vector<uint32_t> prefix(context.begin(), context.end() - 1);
  SyntheticExpander expander(s, &prefix);
  TreeDraft draft;
  BuildTreeDraft(options, context.back(), max_nodes, expander, draft_rng, &draft);
  std::map<int32_t, std::vector<float>> rows;
  const SampleResult r = VerifySampling(
      draft.tree,
      [&](int32_t node) -> std::span<const float> {
        auto [it, fresh] = rows.try_emplace(node);
        if (fresh) it->second = s.P(PathOf(prefix, draft.tree, node));
        return it->second;
      },
      verify_rng, mode_override.value_or(draft.verify_mode),
      [&](int32_t node) { return draft.ProposalRow(node); });
  std::vector<uint32_t> out = r.accepted_tokens;
  out.push_back(r.bonus_token);
  return out;
}

// Chi-square quantile (Wilson-Hilferty) at upper tail probability 1e-4.
double ChiSquareCritical(double df) {
  const double z = 3.719;  // standard normal quantile at 1 - 1e-4
  const double a = 2.0 / (9.0 * df);
  return df * std::pow(1 - a + z * std::sqrt(a), 3);
}

struct ChiSquare {
  double statistic = 0;
  double critical = 0;
};

// Histogram of the first 3 emitted tokens against the exact distribution.
ChiSquare LosslessnessChiSquare(const Synthetic& s, const TreeDraftOptions& options,
                                size_t max_nodes, uint64_t seed,
                                std::optional<DraftMode> mode_override = std::nullopt) {
  const std::vector<uint32_t> context{1, 3, 0};
  constexpr size_t kTokens = 3;
  constexpr int kTrials = 30000;
  const size_t v = s.vocab;
  std::vector<double> counts(v * v * v, 0);
  Rng draft_rng(seed), verify_rng(seed + 1000);
  for (int trial = 0; trial < kTrials; ++trial) {
    std::vector<uint32_t> ctx = context, emitted;
    while (emitted.size() < kTokens) {
      const std::vector<uint32_t> step = Step(s, options, max_nodes, ctx, draft_rng, verify_rng,
                                              mode_override);
      emitted.insert(emitted.end(), step.begin(), step.end());
      ctx.insert(ctx.end(), step.begin(), step.end());
    }
    counts[(emitted[0] * v + emitted[1]) * v + emitted[2]] += 1;
  }
  // Exact probabilities and pooled Pearson statistic.
  ChiSquare result;
  double pooled_expected = 0, pooled_observed = 0;
  int cells = 0;
  for (uint32_t a = 0; a < v; ++a) {
    std::vector<uint32_t> pa = context;
    const std::vector<float> p1 = s.P(pa);
    for (uint32_t b = 0; b < v; ++b) {
      std::vector<uint32_t> pb = context;
      pb.push_back(a);
      const std::vector<float> p2 = s.P(pb);
      pb.push_back(b);
      const std::vector<float> p3 = s.P(pb);
      for (uint32_t c = 0; c < v; ++c) {
        const double expected = kTrials * double{p1[a]} * p2[b] * p3[c];
        const double observed = counts[(a * v + b) * v + c];
        if (expected < 5) {
          pooled_expected += expected;
          pooled_observed += observed;
          continue;
        }
        result.statistic += (observed - expected) * (observed - expected) / expected;
        ++cells;
      }
    }
  }
  if (pooled_expected > 0) {
    result.statistic +=
        (pooled_observed - pooled_expected) * (pooled_observed - pooled_expected) / pooled_expected;
    ++cells;
  }
  result.critical = ChiSquareCritical(cells - 1);
  return result;
}

TreeDraftOptions Options(TreeMode mode) {
  TreeDraftOptions o;
  o.mode = mode;
  o.depth = 3;
  o.width = 3;
  o.branching = {3, 2, 1};
  return o;
}

class Lossless : public ::testing::TestWithParam<TreeMode> {};

TEST_P(Lossless, EmittedTokensFollowTheTarget) {
  const Synthetic s;
  const TreeDraftOptions o = Options(GetParam());
  const ChiSquare c = LosslessnessChiSquare(s, o, 12, 7);
  RecordProperty("chi_square", std::to_string(c.statistic));
  RecordProperty("critical", std::to_string(c.critical));
  EXPECT_LT(c.statistic, c.critical) << TreeModeName(GetParam());
}

INSTANTIATE_TEST_SUITE_P(Modes, Lossless,
                         ::testing::Values(TreeMode::kChain, TreeMode::kTree, TreeMode::kRsdC,
                                           TreeMode::kRsdS, TreeMode::kSpecInfer),
                         [](const auto& info) {
                           std::string name(TreeModeName(info.param));
                           std::erase(name, '-');
                           return name;
                         });

TEST(LosslessControl, WithoutReplacementDrawsVerifiedWithReplacementAreBiased) {
  // Siblings drawn without replacement but verified as independent draws: the
  // second sibling's proposal is wrong, and the test must see it.
  Synthetic s;
  s.noise = 1.5;
  TreeDraftOptions o = Options(TreeMode::kRsdC);
  o.branching = {4, 3, 1};
  const ChiSquare c = LosslessnessChiSquare(s, o, 20, 7, DraftMode::kWithReplacement);
  RecordProperty("chi_square", std::to_string(c.statistic));
  EXPECT_GT(c.statistic, c.critical);
}

// ---------------------------------------------------------------------------
// Acceptance of one-level trees against the exact probability.

double Tv(const std::vector<double>& r, const std::vector<double>& q) {
  double tv = 0;
  for (size_t i = 0; i < r.size(); ++i) tv += std::max(r[i] - q[i], 0.0);
  return tv;
}

std::vector<double> Residual(const std::vector<double>& r, const std::vector<double>& q) {
  std::vector<double> out(r.size());
  double sum = 0;
  for (size_t i = 0; i < r.size(); ++i) sum += out[i] = std::max(r[i] - q[i], 0.0);
  for (double& x : out) x /= sum;
  return out;
}

// With replacement: k independent rounds against the same q.
double AcceptWithReplacement(std::vector<double> r, const std::vector<double>& q, size_t k) {
  double all_rejected = 1;
  for (size_t j = 0; j < k; ++j) {
    const double reject = Tv(r, q);
    all_rejected *= reject;
    if (reject <= 1e-15) break;
    r = Residual(r, q);
  }
  return 1 - all_rejected;
}

// Without replacement: x drawn from q restricted to the untried tokens.
double RejectWithoutReplacement(const std::vector<double>& r, const std::vector<double>& q,
                                size_t k) {
  if (k == 0) return 1;
  double mass = 0;
  for (double x : q) mass += x;
  if (mass <= 0) return 1;
  std::vector<double> qn(q.size());
  for (size_t i = 0; i < q.size(); ++i) qn[i] = q[i] / mass;
  const double reject_mass = Tv(r, qn);
  if (reject_mass <= 1e-15) return 0;
  const std::vector<double> next_r = Residual(r, qn);
  double total = 0;
  for (size_t x = 0; x < q.size(); ++x) {
    if (qn[x] <= 0) continue;
    const double reject_x = 1 - std::min(1.0, r[x] / qn[x]);
    if (reject_x <= 0) continue;
    std::vector<double> q_next = q;
    q_next[x] = 0;
    total += qn[x] * reject_x * RejectWithoutReplacement(next_r, q_next, k - 1);
  }
  return total;
}

void CheckOneLevelAcceptance(TreeMode mode, size_t k, uint64_t seed) {
  Synthetic s;
  s.vocab = 6;
  s.noise = 1.0;
  const std::vector<uint32_t> context{2, 5};
  const std::vector<float> pf = s.P(context), qf = s.Q(context);
  const std::vector<double> p(pf.begin(), pf.end()), q(qf.begin(), qf.end());
  const double exact = mode == TreeMode::kSpecInfer ? AcceptWithReplacement(p, q, k)
                                                    : 1 - RejectWithoutReplacement(p, q, k);
  TreeDraftOptions o;
  o.mode = mode;
  o.branching = {k};
  Rng draft_rng(seed), verify_rng(seed + 1);
  constexpr int kTrials = 100000;
  int accepted = 0;
  for (int t = 0; t < kTrials; ++t)
    accepted += Step(s, o, 1 + k, context, draft_rng, verify_rng).size() > 1;
  const double rate = static_cast<double>(accepted) / kTrials;
  const double se = std::sqrt(exact * (1 - exact) / kTrials);
  ::testing::Test::RecordProperty("exact", std::to_string(exact));
  ::testing::Test::RecordProperty("rate", std::to_string(rate));
  EXPECT_NEAR(rate, exact, 4.5 * se + 1e-9) << TreeModeName(mode) << " k=" << k;
  // Sanity of the oracle: more children never accept less.
  EXPECT_GT(exact, 0.0);
  EXPECT_LE(exact, 1.0);
}

TEST(OneLevelAcceptance, RsdCMatchesTheExactProbability) {
  for (size_t k : {1, 2, 3}) CheckOneLevelAcceptance(TreeMode::kRsdC, k, 11 + k);
}

TEST(OneLevelAcceptance, SpecInferMatchesTheExactProbability) {
  for (size_t k : {1, 2, 3}) CheckOneLevelAcceptance(TreeMode::kSpecInfer, k, 21 + k);
}

TEST(OneLevelAcceptance, WithoutReplacementBeatsWithReplacementForTheSameBudget) {
  // The RSD paper's argument at one level, on the exact values.
  Synthetic s;
  s.vocab = 6;
  s.noise = 1.0;
  const std::vector<float> pf = s.P(std::vector<uint32_t>{2, 5}),
                           qf = s.Q(std::vector<uint32_t>{2, 5});
  const std::vector<double> p(pf.begin(), pf.end()), q(qf.begin(), qf.end());
  for (size_t k = 2; k <= 4; ++k)
    EXPECT_GE(1 - RejectWithoutReplacement(p, q, k) + 1e-12, AcceptWithReplacement(p, q, k)) << k;
}

// ---------------------------------------------------------------------------
// Draft = target: every accepted node is its parent's first child (p/q = 1).

TEST(DraftEqualsTarget, RecursiveRejectionAcceptsTheFirstChild) {
  Synthetic s;
  s.noise = 0;
  for (const TreeMode mode :
       {TreeMode::kChain, TreeMode::kRsdC, TreeMode::kRsdS, TreeMode::kSpecInfer}) {
    const TreeDraftOptions o = Options(mode);
    Rng draft_rng(3), verify_rng(4);
    const std::vector<uint32_t> context{0, 1};
    for (int t = 0; t < 300; ++t) {
      const std::vector<uint32_t> prefix{0};
      SyntheticExpander expander(s, &prefix);
      TreeDraft draft;
      BuildTreeDraft(o, 1, 12, expander, draft_rng, &draft);
      const SampleResult r = VerifySampling(
          draft.tree,
          [&](int32_t node) -> std::span<const float> {
            static thread_local std::vector<float> row;
            row = s.P(PathOf(prefix, draft.tree, node));
            return row;
          },
          verify_rng, draft.verify_mode, [&](int32_t node) { return draft.ProposalRow(node); });
      const DraftTree& tree = draft.tree;
      for (size_t j = 1; j < r.accepted_nodes.size(); ++j) {
        const int32_t node = r.accepted_nodes[j];
        int32_t first = -1;
        for (size_t c = 1; c < tree.size() && first < 0; ++c)
          if (tree.parents[c] == r.accepted_nodes[j - 1]) first = static_cast<int32_t>(c);
        ASSERT_EQ(node, first) << TreeModeName(mode);
      }
      // The walk stops only at a leaf.
      const int32_t last = r.accepted_nodes.back();
      for (size_t c = 1; c < tree.size(); ++c) ASSERT_NE(tree.parents[c], last) << TreeModeName(mode);
    }
  }
}

// ---------------------------------------------------------------------------
// Shapes.

TEST(TreeShapes, GreedyChainIsTheArgmaxPath) {
  Synthetic s;
  s.vocab = 7;
  TreeDraftOptions o;
  o.mode = TreeMode::kChain;
  o.greedy = true;
  o.depth = 5;
  const std::vector<uint32_t> prefix{4};
  SyntheticExpander expander(s, &prefix);
  Rng rng(1);
  TreeDraft draft;
  BuildTreeDraft(o, 2, 100, expander, rng, &draft);
  ASSERT_EQ(draft.tree.size(), 6u);
  EXPECT_TRUE(draft.tree.IsLinear());
  EXPECT_EQ(expander.calls, 5);
  std::vector<uint32_t> path{4, 2};
  for (size_t i = 1; i < draft.tree.size(); ++i) {
    const std::vector<float> q = s.Q(path);
    const uint32_t argmax = static_cast<uint32_t>(std::max_element(q.begin(), q.end()) - q.begin());
    EXPECT_EQ(draft.tree.tokens[i], argmax);
    EXPECT_FLOAT_EQ(draft.tree.draft_probs[i], q[argmax]);
    path.push_back(argmax);
  }
  EXPECT_EQ(draft.verify_mode, DraftMode::kDeterministic);
  // The budget cuts the chain.
  BuildTreeDraft(o, 2, 3, expander, rng, &draft);
  EXPECT_EQ(draft.tree.size(), 3u);
}

TEST(TreeShapes, BestFirstTreeKeepsTheMostProbablePaths) {
  // Width >= V expands every node: the kept nodes must be the max_nodes - 1
  // most probable paths of the full tree (brute force).
  Synthetic s;
  s.vocab = 3;
  TreeDraftOptions o;
  o.mode = TreeMode::kTree;
  o.depth = 3;
  o.width = 9;
  const std::vector<uint32_t> prefix{1};
  for (size_t budget : {2u, 5u, 9u, 20u}) {
    SyntheticExpander expander(s, &prefix);
    Rng rng(1);
    TreeDraft draft;
    BuildTreeDraft(o, 0, budget, expander, rng, &draft);
    ASSERT_EQ(draft.tree.size(), budget);
    // Brute force over all paths of length 1..3.
    std::vector<std::pair<double, std::vector<uint32_t>>> all;
    std::function<void(std::vector<uint32_t>, double)> walk = [&](std::vector<uint32_t> path,
                                                                  double prob) {
      if (path.size() > 1) all.emplace_back(prob, path);
      if (path.size() == 4) return;
      std::vector<uint32_t> full = prefix;
      full.insert(full.end(), path.begin(), path.end());
      const std::vector<float> q = s.Q(full);
      for (uint32_t t = 0; t < 3; ++t) {
        std::vector<uint32_t> next = path;
        next.push_back(t);
        walk(next, prob * q[t]);
      }
    };
    walk({0}, 1.0);
    std::sort(all.begin(), all.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
    std::vector<std::vector<uint32_t>> expected, got;
    for (size_t i = 0; i + 1 < budget; ++i) expected.push_back(all[i].second);
    for (size_t i = 1; i < draft.tree.size(); ++i) {
      const std::vector<uint32_t> path = PathOf({}, draft.tree, static_cast<int32_t>(i));
      got.push_back(path);
    }
    std::sort(expected.begin(), expected.end());
    std::sort(got.begin(), got.end());
    EXPECT_EQ(got, expected) << "budget " << budget;
  }
}

TEST(TreeShapes, RsdSHasAtMostWidthNodesPerLevelAndSiblingsAreDistinct) {
  Synthetic s;
  s.vocab = 8;
  TreeDraftOptions o = Options(TreeMode::kRsdS);
  o.width = 4;
  o.depth = 5;
  const std::vector<uint32_t> prefix{1};
  Rng rng(5);
  for (int t = 0; t < 50; ++t) {
    SyntheticExpander expander(s, &prefix);
    TreeDraft draft;
    BuildTreeDraft(o, 0, 100, expander, rng, &draft);
    const DraftTree& tree = draft.tree;
    EXPECT_LE(tree.size(), 1 + o.width * o.depth);
    std::vector<size_t> per_depth(o.depth + 1, 0);
    for (size_t i = 1; i < tree.size(); ++i) {
      ++per_depth[tree.depths[i]];
      for (size_t j = 1; j < i; ++j)
        EXPECT_FALSE(tree.parents[j] == tree.parents[i] && tree.tokens[j] == tree.tokens[i]);
    }
    for (size_t d = 1; d <= o.depth; ++d) EXPECT_EQ(per_depth[d], o.width) << d;
    EXPECT_EQ(expander.calls, static_cast<int>(o.depth));  // one expansion per level
  }
}

TEST(TreeShapes, RsdCLevelsFollowTheBranchingFactors) {
  Synthetic s;
  s.vocab = 8;
  TreeDraftOptions o = Options(TreeMode::kRsdC);
  o.branching = {3, 2, 2};
  const std::vector<uint32_t> prefix{1};
  SyntheticExpander expander(s, &prefix);
  Rng rng(5);
  TreeDraft draft;
  BuildTreeDraft(o, 0, 100, expander, rng, &draft);
  EXPECT_EQ(draft.tree.size(), 1u + 3 + 6 + 12);
  EXPECT_EQ(o.MaxNodes(), 22u);
  EXPECT_EQ(expander.calls, 3);
  BuildTreeDraft(o, 0, 7, expander, rng, &draft);
  EXPECT_EQ(draft.tree.size(), 7u);
}

TEST(TreeShapes, GumbelTopKDrawsWithoutReplacement) {
  // The first key's token is distributed as w; the second as the
  // without-replacement marginal sum_x w(x) w(y) / (1 - w(x)).
  const std::vector<float> w{0.5f, 0.3f, 0.2f};
  Rng rng(9);
  std::vector<uint32_t> out;
  std::vector<double> first(3, 0), second(3, 0);
  constexpr int kTrials = 60000;
  for (int t = 0; t < kTrials; ++t) {
    GumbelTopK(w, 2, rng, &out);
    ASSERT_EQ(out.size(), 2u);
    ASSERT_NE(out[0], out[1]);
    first[out[0]] += 1;
    second[out[1]] += 1;
  }
  for (uint32_t y = 0; y < 3; ++y) {
    double exact_second = 0;
    for (uint32_t x = 0; x < 3; ++x)
      if (x != y) exact_second += w[x] * w[y] / (1 - w[x]);
    EXPECT_NEAR(first[y] / kTrials, w[y], 0.01);
    EXPECT_NEAR(second[y] / kTrials, exact_second, 0.01);
  }
  GumbelTopK(std::vector<float>{0.0f, 1.0f}, 5, rng, &out);
  EXPECT_EQ(out, std::vector<uint32_t>{1});
}

TEST(TreeDraftErrors, BadOptionsAndRowsAreRefused) {
  Synthetic s;
  const std::vector<uint32_t> prefix{1};
  SyntheticExpander expander(s, &prefix);
  Rng rng(1);
  TreeDraft draft;
  TreeDraftOptions o;
  o.mode = TreeMode::kRsdC;
  o.branching = {};
  EXPECT_THROW(BuildTreeDraft(o, 0, 5, expander, rng, &draft), sam::Error);
  o.branching = {2, 0};
  EXPECT_THROW(BuildTreeDraft(o, 0, 5, expander, rng, &draft), sam::Error);
  o.mode = TreeMode::kChain;
  o.depth = 0;
  EXPECT_THROW(BuildTreeDraft(o, 0, 5, expander, rng, &draft), sam::Error);
  o.depth = 2;
  EXPECT_THROW(BuildTreeDraft(o, 0, 0, expander, rng, &draft), sam::Error);
  struct Zero : TreeExpander {
    size_t vocab_size() const override { return 3; }
    void Expand(const DraftTree&, std::span<const int32_t>, std::span<float>) override {}
  } zero;
  EXPECT_THROW(BuildTreeDraft(o, 0, 5, zero, rng, &draft), sam::Error);
  EXPECT_EQ(TreeModeFromName("rsd-s"), TreeMode::kRsdS);
  EXPECT_FALSE(TreeModeFromName("beam").has_value());
}

}  // namespace
}  // namespace sam::runtime
