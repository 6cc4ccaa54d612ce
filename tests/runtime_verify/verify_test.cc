// Tests of the verification bookkeeping: greedy against brute force and
// plain greedy decoding; sampling parameters; lossless sampling against the
// exact distribution of a toy model.
//
// Statistical tests. A toy "model" over a vocabulary of V tokens has a fixed
// table of next-token distributions that depend on the last token only. For a
// fixed start token, sequences of the next L tokens are generated n = 200,000
// times by speculative sampling (one configuration of drafter and acceptance
// rule per test) and the empirical distribution over the V^L sequences is
// compared with the exact one (the product of the table's rows) by total
// variation distance TV. With exact probabilities p over K cells,
//   E[TV] <= 0.5 * sum_c sqrt(p_c (1 - p_c) / n)        (Jensen, per cell)
// and TV changes by at most 1/n when one sample changes, so by McDiarmid's
// inequality P(TV >= E[TV] + t) <= exp(-2 n t^2). The tolerance is the bound
// on E[TV] plus t = 0.01 (0.015 to 0.018 for the configurations here, with
// V = 5 or 6 and L = 3): a correct sampler fails with probability
// <= exp(-40) ~ 4e-18. Seeds are fixed, so a run is reproducible anyway.
// Two negative controls (drafts verified under the wrong acceptance rule; a
// proposal processed at another temperature than the one the drafts were
// drawn from) must exceed the same tolerance: the test has the power to see
// such mistakes. The measured TV and tolerance of each configuration are
// recorded as test properties (--gtest_output=xml).
#include "sam/runtime/verify.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <numeric>
#include <stdexcept>
#include <string>
#include <vector>

#include "sam/error.h"
#include "sam/runtime/draft.h"
#include "sam/runtime/recycling.h"

namespace sam::runtime {
namespace {

// ---------------------------------------------------------------------------
// Helpers.

// A random tree of `size` nodes with tokens in [0, vocab). Each node's token
// is, with probability `follow`, next(parent token) (so that greedy paths are
// long), otherwise uniform. distinct_siblings avoids repeated sibling tokens.
DraftTree RandomTree(Rng& rng, uint32_t start, size_t size, uint32_t vocab, double follow,
                     const std::function<uint32_t(uint32_t)>& next, bool distinct_siblings) {
  DraftTree tree;
  tree.Reset(start, DraftSource::kOther);
  for (size_t attempts = 0; tree.size() < size && attempts < 100 * size; ++attempts) {
    const int parent = static_cast<int>(rng.Next() % tree.size());
    const uint32_t token = rng.Uniform() < follow ? next(tree.tokens[parent])
                                                  : static_cast<uint32_t>(rng.Next() % vocab);
    if (distinct_siblings) {
      bool repeated = false;
      for (size_t c = 1; c < tree.size(); ++c)
        repeated |= tree.parents[c] == parent && tree.tokens[c] == token;
      if (repeated) continue;
    }
    tree.Add(parent, token);
  }
  return tree;
}

// Greedy acceptance by brute force: every node whose root path matches the
// argmax chain; the deepest, lowest index among equals.
GreedyResult BruteForceGreedy(const DraftTree& tree, const std::vector<uint32_t>& argmax) {
  size_t best = 0;
  for (size_t i = 1; i < tree.size(); ++i) {
    bool ok = true;
    for (size_t v = i; v != 0; v = tree.parents[v]) ok &= tree.tokens[v] == argmax[tree.parents[v]];
    if (ok && tree.depths[i] > tree.depths[best]) best = i;
  }
  GreedyResult r;
  for (int32_t v = static_cast<int32_t>(best); v != -1; v = tree.parents[v])
    r.accepted_nodes.insert(r.accepted_nodes.begin(), v);
  for (size_t k = 1; k < r.accepted_nodes.size(); ++k)
    r.accepted_tokens.push_back(tree.tokens[r.accepted_nodes[k]]);
  r.bonus_token = argmax[best];
  return r;
}

// The toy model: rows_[t] = processed next-token distribution after token t.
class ToyModel {
 public:
  // Random logits in [-2, 2], a few masked with -inf, processed by params.
  ToyModel(uint32_t vocab, uint64_t seed, const SamplingParams& params) : vocab_(vocab) {
    Rng rng(seed);
    for (uint32_t t = 0; t < vocab; ++t) {
      std::vector<float> row(vocab);
      for (float& x : row) x = static_cast<float>(4 * rng.Uniform() - 2);
      row[rng.Next() % vocab] = -std::numeric_limits<float>::infinity();
      ApplySampling(row, params);
      rows_.push_back(row);
    }
  }
  uint32_t vocab() const { return vocab_; }
  std::span<const float> Row(uint32_t token) const { return rows_[token]; }

  // Exact probability of every sequence of `length` tokens after start,
  // indexed base-V with the first token most significant.
  std::vector<double> SequenceDistribution(uint32_t start, size_t length) const {
    std::vector<double> dist{1.0};
    std::vector<uint32_t> last{start};
    for (size_t step = 0; step < length; ++step) {
      std::vector<double> next_dist;
      std::vector<uint32_t> next_last;
      for (size_t c = 0; c < dist.size(); ++c)
        for (uint32_t t = 0; t < vocab_; ++t) {
          next_dist.push_back(dist[c] * rows_[last[c]][t]);
          next_last.push_back(t);
        }
      dist.swap(next_dist);
      last.swap(next_last);
    }
    return dist;
  }

 private:
  uint32_t vocab_;
  std::vector<std::vector<float>> rows_;
};

size_t SequenceIndex(const std::vector<uint32_t>& seq, size_t length, uint32_t vocab) {
  size_t index = 0;
  for (size_t i = 0; i < length; ++i) index = index * vocab + seq[i];
  return index;
}

// Builds a draft for one step; proposal rows (kWithoutReplacement) are the
// draft model's rows of each node's token.
using DraftFn = std::function<void(uint32_t start, Rng& draft_rng, DraftTree* tree)>;

struct Config {
  DraftFn draft;
  DraftMode mode = DraftMode::kDeterministic;
  const ToyModel* proposal = nullptr;  // kWithoutReplacement: the draft model
};

constexpr size_t kSamples = 200000;
constexpr size_t kLength = 3;
constexpr uint32_t kStart = 0;

// Generates kLength tokens after kStart by speculative sampling.
std::vector<uint32_t> SpeculativeSequence(const ToyModel& model, const Config& config, Rng& rng,
                                          Rng& draft_rng, DraftTree* tree, size_t* steps) {
  std::vector<uint32_t> seq;
  uint32_t start = kStart;
  while (seq.size() < kLength) {
    config.draft(start, draft_rng, tree);
    NodeDistribution proposal;
    if (config.proposal != nullptr)
      proposal = [&](int32_t node) { return config.proposal->Row(tree->tokens[node]); };
    const SampleResult r = VerifySampling(
        *tree, [&](int32_t node) { return model.Row(tree->tokens[node]); }, rng, config.mode,
        proposal);
    seq.insert(seq.end(), r.accepted_tokens.begin(), r.accepted_tokens.end());
    seq.push_back(r.bonus_token);
    start = r.bonus_token;
    ++*steps;
  }
  return seq;
}

struct TvResult {
  double tv = 0;
  double tolerance = 0;
  double tokens_per_step = 0;
};

// Compares kSamples sequences from `sample` with the model's exact
// distribution (see the file comment for the tolerance).
TvResult MeasureTv(const ToyModel& model, const std::function<std::vector<uint32_t>()>& sample,
                   const size_t* steps) {
  const std::vector<double> exact = model.SequenceDistribution(kStart, kLength);
  std::vector<double> counts(exact.size(), 0);
  for (size_t s = 0; s < kSamples; ++s) counts[SequenceIndex(sample(), kLength, model.vocab())]++;
  TvResult result;
  double bound = 0;
  for (size_t c = 0; c < exact.size(); ++c) {
    result.tv += 0.5 * std::abs(counts[c] / kSamples - exact[c]);
    bound += 0.5 * std::sqrt(exact[c] * (1 - exact[c]) / kSamples);
  }
  result.tolerance = bound + 0.01;
  // Shown by --gtest_output=xml: how close each configuration came.
  ::testing::Test::RecordProperty("tv", std::to_string(result.tv));
  ::testing::Test::RecordProperty("tolerance", std::to_string(result.tolerance));
  if (steps != nullptr) {
    result.tokens_per_step = double(kSamples * kLength) / double(*steps);
    ::testing::Test::RecordProperty("tokens_per_step", std::to_string(result.tokens_per_step));
  }
  return result;
}

TvResult RunSpeculative(const ToyModel& model, const Config& config, uint64_t seed) {
  Rng rng(seed), draft_rng(seed ^ 0x5eed);
  DraftTree tree;
  size_t steps = 0;
  return MeasureTv(
      model, [&] { return SpeculativeSequence(model, config, rng, draft_rng, &tree, &steps); },
      &steps);
}

// Draws `count` distinct tokens from row without replacement, in draw order
// (sequential: each draw from the row renormalised without earlier ones).
std::vector<uint32_t> DrawWithoutReplacement(std::span<const float> row, size_t count, Rng& rng) {
  std::vector<float> left(row.begin(), row.end());
  std::vector<uint32_t> drawn;
  while (drawn.size() < count &&
         std::any_of(left.begin(), left.end(), [](float p) { return p > 0; })) {
    const uint32_t t = SampleToken(left, rng);
    drawn.push_back(t);
    left[t] = 0;
  }
  return drawn;
}

// An RSD draft: every node at depth d < branching.size() gets branching[d]
// children drawn without replacement from the draft model's row.
void RsdTree(const ToyModel& draft_model, const std::vector<size_t>& branching, uint32_t start,
             Rng& rng, DraftTree* tree) {
  tree->Reset(start, DraftSource::kOther);
  for (size_t i = 0; i < tree->size(); ++i) {
    const size_t depth = tree->depths[i];
    if (depth >= branching.size()) continue;
    const std::span<const float> q = draft_model.Row(tree->tokens[i]);
    for (uint32_t t : DrawWithoutReplacement(q, branching[depth], rng)) {
      tree->Add(static_cast<int>(i), t);
      tree->draft_probs.resize(tree->size(), 0.0f);  // q(node | parent), informational
      tree->draft_probs.back() = q[t];
    }
  }
}

const SamplingParams kPlain{1.0f, 0, 1.0f};

// ---------------------------------------------------------------------------
// Greedy.

TEST(VerifyGreedy, MatchesBruteForceOnRandomTrees) {
  Rng rng(1);
  constexpr uint32_t kVocab = 6;
  std::vector<uint32_t> next(kVocab);
  for (auto& t : next) t = rng.Next() % kVocab;
  GreedyResult reused;
  for (int trial = 0; trial < 3000; ++trial) {
    const size_t size = 1 + rng.Next() % 40;
    const DraftTree tree = RandomTree(
        rng, rng.Next() % kVocab, size, kVocab, 0.6, [&](uint32_t t) { return next[t]; },
        /*distinct_siblings=*/trial % 2 == 0);
    std::vector<uint32_t> argmax(tree.size());
    for (auto& a : argmax) a = rng.Next() % kVocab;
    // Make argmax follow the tree often, so that long paths are accepted.
    for (size_t i = 1; i < tree.size(); ++i)
      if (rng.Uniform() < 0.7) argmax[tree.parents[i]] = tree.tokens[i];
    const GreedyResult expected = BruteForceGreedy(tree, argmax);
    const GreedyResult got = VerifyGreedy(tree, argmax);
    ASSERT_EQ(got.accepted_nodes, expected.accepted_nodes) << "trial " << trial;
    ASSERT_EQ(got.accepted_tokens, expected.accepted_tokens);
    ASSERT_EQ(got.bonus_token, expected.bonus_token);
    VerifyGreedy(tree, argmax, &reused);  // reused buffers give the same answer
    ASSERT_EQ(reused.accepted_nodes, expected.accepted_nodes);
    ASSERT_EQ(reused.accepted_tokens, expected.accepted_tokens);
    ASSERT_EQ(reused.bonus_token, expected.bonus_token);
  }
}

TEST(VerifyGreedy, EqualsPlainGreedyDecoding) {
  // A deterministic toy model whose argmax depends on the last two tokens,
  // so that the argmax at a node depends on its ancestors.
  constexpr uint32_t kVocab = 7;
  Rng rng(2);
  std::vector<uint32_t> table(kVocab * kVocab);
  for (auto& t : table) t = rng.Next() % kVocab;
  auto model = [&](uint32_t prev, uint32_t last) { return table[prev * kVocab + last]; };

  constexpr size_t kTokens = 400;
  std::vector<uint32_t> plain{3, 5};
  while (plain.size() < kTokens) plain.push_back(model(plain[plain.size() - 2], plain.back()));

  std::vector<uint32_t> spec{3, 5};
  size_t steps = 0;
  while (spec.size() < kTokens) {
    // Draft: a random tree whose tokens often follow the true continuation.
    const uint32_t prev = spec[spec.size() - 2];
    const DraftTree tree = RandomTree(
        rng, spec.back(), 1 + rng.Next() % 20, kVocab, 0.5,
        [&](uint32_t t) { return table[(t * 3 + prev) % (kVocab * kVocab)]; }, true);
    std::vector<uint32_t> argmax(tree.size());
    for (size_t i = 0; i < tree.size(); ++i) {
      const uint32_t before = i == 0 ? prev : tree.tokens[tree.parents[i]];
      argmax[i] = model(before, tree.tokens[i]);
    }
    const GreedyResult r = VerifyGreedy(tree, argmax);
    spec.insert(spec.end(), r.accepted_tokens.begin(), r.accepted_tokens.end());
    spec.push_back(r.bonus_token);
    ++steps;
  }
  spec.resize(kTokens);
  EXPECT_EQ(spec, plain);
  EXPECT_LT(steps, kTokens - 2);  // some drafts were accepted
}

TEST(VerifyGreedy, PicksFirstOfEqualLengthPaths) {
  DraftTree tree;
  tree.Reset(9, DraftSource::kOther);
  const int a = tree.Add(0, 4);  // node 1
  const int b = tree.Add(0, 4);  // node 2: same token as its sibling
  tree.Add(b, 6);                // node 3: depth 2 under node 2
  tree.Add(a, 6);                // node 4: depth 2 under node 1
  const GreedyResult r = VerifyGreedy(tree, std::vector<uint32_t>{4, 6, 6, 1, 2});
  EXPECT_EQ(r.accepted_nodes, (std::vector<int32_t>{0, 2, 3}));  // node 3 precedes node 4
  EXPECT_EQ(r.accepted_tokens, (std::vector<uint32_t>{4, 6}));
  EXPECT_EQ(r.bonus_token, 1u);
}

TEST(VerifyGreedy, RootOnlyTreeEmitsTheArgmax) {
  DraftTree tree;
  tree.Reset(3, DraftSource::kNone);
  const GreedyResult r = VerifyGreedy(tree, std::vector<uint32_t>{8});
  EXPECT_EQ(r.accepted_nodes, (std::vector<int32_t>{0}));
  EXPECT_TRUE(r.accepted_tokens.empty());
  EXPECT_EQ(r.bonus_token, 8u);
}

TEST(VerifyGreedy, RejectsBadInput) {
  DraftTree tree;
  tree.Reset(3, DraftSource::kNone);
  tree.Add(0, 1);
  EXPECT_THROW(VerifyGreedy(tree, std::vector<uint32_t>{1}), sam::Error);
  DraftTree bad = tree;
  bad.parents[1] = 1;  // a node cannot be its own parent
  EXPECT_THROW(VerifyGreedy(bad, std::vector<uint32_t>{1, 2}), sam::Error);
  bad = tree;
  bad.depths[1] = 2;
  EXPECT_THROW(VerifyGreedy(bad, std::vector<uint32_t>{1, 2}), sam::Error);
  bad = tree;
  bad.tokens.clear();
  bad.parents.clear();
  bad.depths.clear();
  EXPECT_THROW(VerifyGreedy(bad, std::vector<uint32_t>{}), sam::Error);
}

// ---------------------------------------------------------------------------
// Sampling parameters.

TEST(ApplySampling, SoftmaxAtTemperatureOne) {
  std::vector<float> v{0.0f, std::log(3.0f), -std::numeric_limits<float>::infinity()};
  ApplySampling(v, kPlain);
  EXPECT_NEAR(v[0], 0.25, 1e-6);
  EXPECT_NEAR(v[1], 0.75, 1e-6);
  EXPECT_EQ(v[2], 0.0f);
}

TEST(ApplySampling, TemperatureScalesLogitsAndPowersProbabilities) {
  std::vector<float> logits{0.0f, std::log(3.0f)};
  ApplySampling(logits, {0.5f, 0, 1.0f});  // 1 : 9
  EXPECT_NEAR(logits[1], 0.9, 1e-6);
  std::vector<float> probs{0.25f, 0.75f};
  ApplySampling(probs, {0.5f, 0, 1.0f}, ScoreKind::kProbabilities);
  EXPECT_NEAR(probs[1], 0.9, 1e-6);
}

TEST(ApplySampling, TemperatureZeroIsOneHotOnTheFirstArgmax) {
  std::vector<float> v{1.0f, 5.0f, 5.0f, -3.0f};
  ApplySampling(v, {0.0f, 2, 0.5f});
  EXPECT_EQ(v, (std::vector<float>{0, 1, 0, 0}));
}

TEST(ApplySampling, TopKKeepsTheKMostProbableLowerIdOnTies) {
  std::vector<float> v{0.1f, 0.3f, 0.2f, 0.3f, 0.1f};
  ApplySampling(v, {1.0f, 2, 1.0f}, ScoreKind::kProbabilities);
  EXPECT_NEAR(v[1], 0.5, 1e-6);
  EXPECT_NEAR(v[3], 0.5, 1e-6);
  EXPECT_EQ(v[0] + v[2] + v[4], 0.0f);
  std::vector<float> ties{0.25f, 0.25f, 0.25f, 0.25f};
  ApplySampling(ties, {1.0f, 3, 1.0f}, ScoreKind::kProbabilities);
  EXPECT_EQ(ties[3], 0.0f);
  EXPECT_NEAR(ties[0], 1.0 / 3, 1e-6);
}

TEST(ApplySampling, TopPKeepsTheSmallestSetReachingP) {
  std::vector<float> v{0.15f, 0.5f, 0.05f, 0.3f};
  ApplySampling(v, {1.0f, 0, 0.75f}, ScoreKind::kProbabilities);
  // 0.5 < 0.75 so 0.3 stays; 0.8 >= 0.75 so 0.15 goes.
  EXPECT_NEAR(v[1], 0.625, 1e-6);
  EXPECT_NEAR(v[3], 0.375, 1e-6);
  EXPECT_EQ(v[0] + v[2], 0.0f);
  std::vector<float> tiny{0.15f, 0.5f, 0.05f, 0.3f};
  ApplySampling(tiny, {1.0f, 0, 0.01f}, ScoreKind::kProbabilities);
  EXPECT_EQ(tiny, (std::vector<float>{0, 1, 0, 0}));  // the top token always stays
}

TEST(ApplySampling, TopPAppliesAfterTopKOnTheRenormalisedRest) {
  // top-k 3 leaves {0.4, 0.3, 0.2}/0.9; top-p 0.7 keeps 0.444 + 0.333 (0.444 < 0.7).
  std::vector<float> v{0.4f, 0.3f, 0.2f, 0.1f};
  ApplySampling(v, {1.0f, 3, 0.7f}, ScoreKind::kProbabilities);
  EXPECT_NEAR(v[0], 4.0 / 7, 1e-6);
  EXPECT_NEAR(v[1], 3.0 / 7, 1e-6);
  EXPECT_EQ(v[2] + v[3], 0.0f);
}

TEST(ApplySampling, RejectsBadInput) {
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<float> nan{0.0f, std::nanf("")};
  EXPECT_THROW(ApplySampling(nan, kPlain), sam::Error);
  std::vector<float> masked{-inf, -inf};
  EXPECT_THROW(ApplySampling(masked, kPlain), sam::Error);
  std::vector<float> plus_inf{0.0f, inf};
  EXPECT_THROW(ApplySampling(plus_inf, kPlain), sam::Error);
  std::vector<float> negative{0.5f, -0.5f};
  EXPECT_THROW(ApplySampling(negative, kPlain, ScoreKind::kProbabilities), sam::Error);
  std::vector<float> zeros{0.0f, 0.0f};
  EXPECT_THROW(ApplySampling(zeros, kPlain, ScoreKind::kProbabilities), sam::Error);
  std::vector<float> ok{1.0f, 2.0f};
  EXPECT_THROW(ApplySampling(ok, {-1.0f, 0, 1.0f}), sam::Error);
  EXPECT_THROW(ApplySampling(ok, {1.0f, 0, 0.0f}), sam::Error);
  EXPECT_THROW(ApplySampling(ok, {1.0f, 0, 1.5f}), sam::Error);
  std::vector<float> empty;
  EXPECT_THROW(ApplySampling(empty, kPlain), sam::Error);
}

TEST(Rng, IsDeterministicPerSeedAndUniformInUnitInterval) {
  Rng a(42), b(42), c(43);
  bool differs = false;
  double sum = 0;
  for (int i = 0; i < 100000; ++i) {
    const uint64_t x = a.Next();
    EXPECT_EQ(x, b.Next());
    differs |= x != c.Next();
    const double u = a.Uniform();
    b.Uniform();
    ASSERT_GE(u, 0.0);
    ASSERT_LT(u, 1.0);
    sum += u;
  }
  EXPECT_TRUE(differs);
  EXPECT_NEAR(sum / 100000, 0.5, 0.005);  // sd of the mean is 0.0009
}

// ---------------------------------------------------------------------------
// Sampling verification: exactness.

TEST(VerifySampling, TemperatureZeroEqualsGreedy) {
  constexpr uint32_t kVocab = 6;
  Rng rng(3), tree_rng(4);
  // Logits depend on the node's token: a random permutation of 0, 2, 4, ...,
  // so distinct and far enough apart that at temperature 0.01 every token
  // but the argmax underflows to probability 0 as well.
  std::vector<std::vector<float>> logits(kVocab, std::vector<float>(kVocab));
  for (auto& row : logits) {
    for (size_t t = 0; t < kVocab; ++t) row[t] = 2.0f * t;
    for (size_t t = kVocab - 1; t > 0; --t) std::swap(row[t], row[rng.Next() % (t + 1)]);
  }
  for (float temperature : {0.0f, 0.01f}) {
    std::vector<std::vector<float>> probs = logits;
    std::vector<uint32_t> argmax_of(kVocab);
    for (uint32_t t = 0; t < kVocab; ++t) {
      argmax_of[t] = static_cast<uint32_t>(std::max_element(logits[t].begin(), logits[t].end()) -
                                           logits[t].begin());
      ApplySampling(probs[t], {temperature, 0, 1.0f});
    }
    for (int trial = 0; trial < 2000; ++trial) {
      const DraftTree tree = RandomTree(
          tree_rng, tree_rng.Next() % kVocab, 1 + tree_rng.Next() % 30, kVocab, 0.6,
          [&](uint32_t t) { return argmax_of[t]; }, /*distinct_siblings=*/true);
      std::vector<uint32_t> argmax(tree.size());
      for (size_t i = 0; i < tree.size(); ++i) argmax[i] = argmax_of[tree.tokens[i]];
      const GreedyResult greedy = VerifyGreedy(tree, argmax);
      const SampleResult sampled = VerifySampling(
          tree, [&](int32_t node) { return std::span<const float>(probs[tree.tokens[node]]); },
          rng);
      ASSERT_EQ(sampled.accepted_nodes, greedy.accepted_nodes) << "T " << temperature;
      ASSERT_EQ(sampled.accepted_tokens, greedy.accepted_tokens);
      ASSERT_EQ(sampled.bonus_token, greedy.bonus_token);
    }
  }
}

TEST(VerifySampling, PlainSamplingHarnessPasses) {
  // The reference for the tests below: plain sampling, one token at a time.
  const ToyModel model(5, 10, kPlain);
  Rng rng(11);
  const TvResult r = MeasureTv(
      model,
      [&] {
        std::vector<uint32_t> seq;
        uint32_t last = kStart;
        while (seq.size() < kLength) seq.push_back(last = SampleToken(model.Row(last), rng));
        return seq;
      },
      nullptr);
  EXPECT_LT(r.tv, r.tolerance);
  EXPECT_LT(r.tolerance, 0.025);
}

TEST(VerifySampling, LosslessWithRandomLinearDrafts) {
  const ToyModel model(5, 12, kPlain);
  Config config;
  config.draft = [](uint32_t start, Rng& rng, DraftTree* tree) {
    tree->Reset(start, DraftSource::kOther);
    for (int d = 0; d < 3; ++d) tree->Add(d, rng.Next() % 5);
  };
  const TvResult r = RunSpeculative(model, config, 13);
  EXPECT_LT(r.tv, r.tolerance);
}

TEST(VerifySampling, LosslessWithRandomTreesAndRepeatedSiblings) {
  const ToyModel model(5, 14, kPlain);
  Config config;
  config.draft = [](uint32_t start, Rng& rng, DraftTree* tree) {
    *tree = RandomTree(
        rng, start, 1 + rng.Next() % 12, 5, 0.0, [](uint32_t t) { return t; },
        /*distinct_siblings=*/false);
  };
  const TvResult r = RunSpeculative(model, config, 15);
  EXPECT_LT(r.tv, r.tolerance);
}

TEST(VerifySampling, LosslessWithTopKTopPAndTemperature) {
  // The same processed rows serve as target rows at every node and as the
  // reference distribution: "applied identically at every position".
  const ToyModel model(6, 16, {0.7f, 4, 0.9f});
  Config config;
  config.draft = [](uint32_t start, Rng& rng, DraftTree* tree) {
    *tree = RandomTree(
        rng, start, 1 + rng.Next() % 10, 6, 0.0, [](uint32_t t) { return t; }, true);
  };
  const TvResult r = RunSpeculative(model, config, 17);
  EXPECT_LT(r.tv, r.tolerance);
}

TEST(VerifySampling, LosslessWithTokenRecyclingDrafts) {
  // A deterministic drafter: Token Recycling with a table filled from a
  // different (draft) model's top-3 tokens.
  const ToyModel model(5, 18, kPlain);
  const ToyModel draft_model(5, 19, kPlain);
  auto recycling = std::make_shared<RecyclingDrafter>(5);
  for (uint32_t t = 0; t < 5; ++t) {
    std::vector<uint32_t> order(5);
    std::iota(order.begin(), order.end(), 0u);
    const auto row = draft_model.Row(t);
    std::stable_sort(order.begin(), order.end(),
                     [&](uint32_t a, uint32_t b) { return row[a] > row[b]; });
    order.resize(3);
    recycling->ObserveTopK(std::vector<uint32_t>{t}, order, 3);
  }
  Config config;
  config.draft = [recycling](uint32_t start, Rng&, DraftTree* tree) {
    recycling->Propose(start, 30, tree);
  };
  const TvResult r = RunSpeculative(model, config, 20);
  EXPECT_LT(r.tv, r.tolerance);
  EXPECT_GT(r.tokens_per_step, 1.3);  // drafts were accepted, not just bonus tokens
}

TEST(VerifySampling, LosslessWithLinearRsdDrafts) {
  const ToyModel model(5, 21, kPlain);
  const ToyModel draft_model(5, 22, kPlain);
  Config config;
  config.mode = DraftMode::kWithoutReplacement;
  config.proposal = &draft_model;
  config.draft = [&](uint32_t start, Rng& rng, DraftTree* tree) {
    RsdTree(draft_model, {1, 1, 1}, start, rng, tree);
  };
  const TvResult r = RunSpeculative(model, config, 23);
  EXPECT_LT(r.tv, r.tolerance);
}

TEST(VerifySampling, LosslessWithRsdTrees) {
  const ToyModel model(5, 24, kPlain);
  const ToyModel draft_model(5, 25, {0.8f, 0, 1.0f});
  Config config;
  config.mode = DraftMode::kWithoutReplacement;
  config.proposal = &draft_model;
  config.draft = [&](uint32_t start, Rng& rng, DraftTree* tree) {
    RsdTree(draft_model, {3, 2, 1}, start, rng, tree);
  };
  const TvResult r = RunSpeculative(model, config, 26);
  EXPECT_LT(r.tv, r.tolerance);
}

TEST(VerifySampling, LosslessWithRsdTreesExhaustingTheProposalSupport) {
  // The proposal keeps 2 tokens (top-k 2) but 4 siblings are drafted: after
  // the two drawn from q the rest are arbitrary tokens (zero proposal
  // probability), which the verifier treats as deterministic drafts.
  const ToyModel model(5, 27, kPlain);
  const ToyModel draft_model(5, 28, {1.0f, 2, 1.0f});
  Config config;
  config.mode = DraftMode::kWithoutReplacement;
  config.proposal = &draft_model;
  config.draft = [&](uint32_t start, Rng& rng, DraftTree* tree) {
    RsdTree(draft_model, {2, 2}, start, rng, tree);
    for (int extra = 0; extra < 2; ++extra) tree->Add(0, rng.Next() % 5);
  };
  const TvResult r = RunSpeculative(model, config, 29);
  EXPECT_LT(r.tv, r.tolerance);
}

TEST(VerifySampling, DetectsDraftsVerifiedUnderTheWrongRule) {
  // Negative control: deterministic drafts (the draft model's top-2 tokens)
  // claimed to be drawn without replacement from it. min(1, p/q) is then not
  // a lossless rule and the harness must notice.
  const ToyModel model(5, 30, kPlain);
  const ToyModel draft_model(5, 31, kPlain);
  Config config;
  config.mode = DraftMode::kWithoutReplacement;
  config.proposal = &draft_model;
  config.draft = [&](uint32_t start, Rng&, DraftTree* tree) {
    tree->Reset(start, DraftSource::kOther);
    for (int d = 0; d < 3; ++d) {
      const auto row = draft_model.Row(tree->tokens.back());
      const uint32_t top =
          static_cast<uint32_t>(std::max_element(row.begin(), row.end()) - row.begin());
      tree->Add(d, top);
    }
  };
  const TvResult r = RunSpeculative(model, config, 32);
  EXPECT_GT(r.tv, r.tolerance);
}

TEST(VerifySampling, DetectsAProposalProcessedDifferentlyFromTheDrafts) {
  // Negative control for a subtle mistake: the drafts are drawn from the
  // draft model at temperature 1 but verified against its rows at 0.7.
  const ToyModel model(5, 24, kPlain);
  const ToyModel draft_model(5, 25, kPlain);
  const ToyModel mismatched(5, 25, {0.7f, 0, 1.0f});
  Config config;
  config.mode = DraftMode::kWithoutReplacement;
  config.proposal = &mismatched;
  config.draft = [&](uint32_t start, Rng& rng, DraftTree* tree) {
    RsdTree(draft_model, {3, 2, 1}, start, rng, tree);
  };
  const TvResult r = RunSpeculative(model, config, 26);
  EXPECT_GT(r.tv, r.tolerance);
}

TEST(VerifySampling, RejectsBadInput) {
  DraftTree tree;
  tree.Reset(0, DraftSource::kOther);
  tree.Add(0, 7);  // outside a vocabulary of 3
  const std::vector<float> row{0.2f, 0.3f, 0.5f};
  Rng rng(5);
  auto target = [&](int32_t) { return std::span<const float>(row); };
  EXPECT_THROW(VerifySampling(tree, target, rng), sam::Error);
  tree.tokens[1] = 1;
  EXPECT_NO_THROW(VerifySampling(tree, target, rng));
  EXPECT_THROW(VerifySampling(tree, target, rng, DraftMode::kWithoutReplacement),
               sam::Error);  // no proposal
  const std::vector<float> short_row{0.5f, 0.5f};
  EXPECT_THROW(VerifySampling(tree, target, rng, DraftMode::kWithoutReplacement,
                              [&](int32_t) { return std::span<const float>(short_row); }),
               sam::Error);
  const std::vector<float> negative{0.5f, -0.1f, 0.6f};
  EXPECT_THROW(VerifySampling(
                   tree, [&](int32_t) { return std::span<const float>(negative); }, rng),
               sam::Error);
  const std::vector<float> zeros{0.0f, 0.0f, 0.0f};
  EXPECT_THROW(VerifySampling(
                   tree, [&](int32_t) { return std::span<const float>(zeros); }, rng),
               sam::Error);
}

TEST(SampleToken, FollowsTheWeights) {
  const std::vector<float> weights{1.0f, 0.0f, 3.0f};
  Rng rng(6);
  std::vector<int> counts(3, 0);
  for (int i = 0; i < 40000; ++i) counts[SampleToken(weights, rng)]++;
  EXPECT_EQ(counts[1], 0);
  EXPECT_NEAR(counts[2] / 40000.0, 0.75, 0.01);  // sd 0.0022
  EXPECT_THROW(SampleToken(std::vector<float>{0.0f}, rng), sam::Error);
  EXPECT_THROW(SampleToken(std::vector<float>{}, rng), sam::Error);
}

}  // namespace
}  // namespace sam::runtime
