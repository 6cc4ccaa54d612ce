#include "sam/runtime/verify.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>
#include <numeric>
#include <string>

#include "sam/error.h"

namespace sam::runtime {
namespace {

[[noreturn]] void Fail(const std::string& message) {
  throw Error(ErrorCode::kInvalidArgument, message);
}

// Parents precede children, depths follow the parents: the invariants every
// walk below relies on.
void CheckTree(const DraftTree& tree) {
  const size_t n = tree.tokens.size();
  if (n == 0) Fail("draft tree is empty: node 0 (the start token) is required");
  if (tree.parents.size() != n || tree.depths.size() != n)
    Fail("draft tree arrays differ in size: tokens " + std::to_string(n) + ", parents " +
         std::to_string(tree.parents.size()) + ", depths " + std::to_string(tree.depths.size()));
  if (tree.parents[0] != -1 || tree.depths[0] != 0)
    Fail("draft tree node 0 must be the root (parent -1, depth 0)");
  for (size_t i = 1; i < n; ++i) {
    const int32_t p = tree.parents[i];
    if (p < 0 || static_cast<size_t>(p) >= i)
      Fail("draft tree node " + std::to_string(i) + " has parent " + std::to_string(p) +
           "; expected a parent in [0, " + std::to_string(i) + ")");
    if (tree.depths[i] != tree.depths[p] + 1)
      Fail("draft tree node " + std::to_string(i) + " has depth " + std::to_string(tree.depths[i]) +
           "; its parent's depth plus one is " + std::to_string(tree.depths[p] + 1));
  }
}

// Copies a probability row into *out (as double: the residual arithmetic
// below subtracts nearly equal numbers) and returns its sum. The first row
// fixes the vocabulary size.
double LoadRow(std::span<const float> row, const char* what, int32_t node, size_t* vocab,
               std::vector<double>* out) {
  if (*vocab == 0) {
    if (row.empty()) Fail(std::string(what) + " row of node " + std::to_string(node) + " is empty");
    *vocab = row.size();
  } else if (row.size() != *vocab) {
    Fail(std::string(what) + " row of node " + std::to_string(node) + " has " +
         std::to_string(row.size()) + " entries; expected " + std::to_string(*vocab));
  }
  out->resize(row.size());
  double sum = 0;
  for (size_t v = 0; v < row.size(); ++v) {
    const float p = row[v];
    if (!(p >= 0) || !std::isfinite(p))
      Fail(std::string(what) + " row of node " + std::to_string(node) + " has probability " +
           std::to_string(p) + " at token " + std::to_string(v) + "; expected a finite value >= 0");
    (*out)[v] = p;
    sum += p;
  }
  if (!(sum > 0))
    Fail(std::string(what) + " row of node " + std::to_string(node) + " sums to zero");
  return sum;
}

// Index i with probability weights[i] / total, from u in [0, 1).
template <typename T>
uint32_t SampleIndex(std::span<const T> weights, double total, double u) {
  const double target = u * total;
  double cumulative = 0;
  size_t last_positive = weights.size();
  for (size_t i = 0; i < weights.size(); ++i) {
    if (weights[i] <= 0) continue;
    cumulative += weights[i];
    last_positive = i;
    if (target < cumulative) return static_cast<uint32_t>(i);
  }
  // Rounding left target at or past the running sum: the last positive
  // weight is the one whose interval it fell into.
  if (last_positive == weights.size()) Fail("cannot sample from an all-zero distribution");
  return static_cast<uint32_t>(last_positive);
}

double Sum(const std::vector<double>& values) {
  return std::accumulate(values.begin(), values.end(), 0.0);
}

}  // namespace

// ---------------------------------------------------------------------------
// Greedy.

void VerifyGreedy(const DraftTree& tree, std::span<const uint32_t> argmax, GreedyResult* out) {
  CheckTree(tree);
  const size_t n = tree.size();
  if (argmax.size() != n)
    Fail("VerifyGreedy: argmax has " + std::to_string(argmax.size()) +
         " entries; expected one per tree node (" + std::to_string(n) + ")");
  // accepted_nodes doubles as the per-node "on an accepted path" flag array
  // until the deepest accepted node is known, then holds that node's path.
  std::vector<int32_t>& flags = out->accepted_nodes;
  flags.assign(n, 0);
  flags[0] = 1;
  size_t best = 0;
  for (size_t i = 1; i < n; ++i) {
    const int32_t p = tree.parents[i];
    if (flags[p] && tree.tokens[i] == argmax[p]) {
      flags[i] = 1;
      if (tree.depths[i] > tree.depths[best]) best = i;  // strict: lowest index wins ties
    }
  }
  const size_t length = tree.depths[best] + 1;
  flags.resize(length);
  int32_t node = static_cast<int32_t>(best);
  for (size_t k = length; k-- > 0; node = tree.parents[node]) flags[k] = node;
  out->accepted_tokens.resize(length - 1);
  for (size_t k = 1; k < length; ++k) out->accepted_tokens[k - 1] = tree.tokens[flags[k]];
  out->bonus_token = argmax[best];
}

GreedyResult VerifyGreedy(const DraftTree& tree, std::span<const uint32_t> argmax) {
  GreedyResult result;
  VerifyGreedy(tree, argmax, &result);
  return result;
}

// ---------------------------------------------------------------------------
// Sampling parameters.

void ApplySampling(std::span<float> scores, const SamplingParams& params, ScoreKind kind) {
  if (scores.empty()) Fail("ApplySampling: empty score vector");
  const float temperature = params.temperature;
  if (!(temperature >= 0) || !std::isfinite(temperature))
    Fail("ApplySampling: temperature " + std::to_string(temperature) +
         "; expected a finite value >= 0 (0 = greedy)");
  if (!(params.top_p > 0 && params.top_p <= 1))
    Fail("ApplySampling: top_p " + std::to_string(params.top_p) + "; expected a value in (0, 1]");

  const size_t vocab = scores.size();
  size_t argmax = 0;
  for (size_t v = 0; v < vocab; ++v) {
    const float s = scores[v];
    if (kind == ScoreKind::kLogits) {
      if (std::isnan(s) || s == std::numeric_limits<float>::infinity())
        Fail("ApplySampling: logit " + std::to_string(s) + " at token " + std::to_string(v) +
             "; expected a finite value or -inf");
    } else if (!(s >= 0) || !std::isfinite(s)) {
      Fail("ApplySampling: probability " + std::to_string(s) + " at token " + std::to_string(v) +
           "; expected a finite value >= 0");
    }
    if (s > scores[argmax]) argmax = v;
  }
  const float top = scores[argmax];
  if (kind == ScoreKind::kLogits && top == -std::numeric_limits<float>::infinity())
    Fail("ApplySampling: every logit is -inf");
  if (kind == ScoreKind::kProbabilities && top == 0)
    Fail("ApplySampling: every probability is zero");

  if (temperature == 0) {
    std::fill(scores.begin(), scores.end(), 0.0f);
    scores[argmax] = 1.0f;
    return;
  }

  // Temperature, scaled so the largest weight is 1 (no overflow, no
  // underflow of the top token).
  if (kind == ScoreKind::kLogits) {
    for (float& s : scores) s = std::exp((s - top) / temperature);
  } else {
    const double exponent = 1.0 / temperature;
    for (float& s : scores) s = static_cast<float>(std::pow(double{s} / top, exponent));
  }

  // Rank order: higher weight first, lower token id among equal weights.
  std::vector<uint32_t> order;
  auto higher = [&](uint32_t a, uint32_t b) {
    return scores[a] > scores[b] || (scores[a] == scores[b] && a < b);
  };
  size_t kept = vocab;  // order[0..kept) holds the candidates once order is filled
  if (params.top_k > 0 && static_cast<size_t>(params.top_k) < vocab) {
    const size_t k = static_cast<size_t>(params.top_k);
    order.resize(vocab);
    std::iota(order.begin(), order.end(), 0u);
    std::nth_element(order.begin(), order.begin() + (k - 1), order.end(), higher);
    for (size_t r = k; r < vocab; ++r) scores[order[r]] = 0.0f;
    kept = k;
  }
  if (params.top_p < 1) {
    if (order.empty()) {
      order.resize(vocab);
      std::iota(order.begin(), order.end(), 0u);
    }
    std::sort(order.begin(), order.begin() + kept, higher);
    double total = 0;
    for (size_t r = 0; r < kept; ++r) total += scores[order[r]];
    const double threshold = params.top_p * total;
    double above = 0;  // weight of the tokens ranked above order[r]
    for (size_t r = 0; r < kept; ++r) {
      if (above >= threshold) {
        scores[order[r]] = 0.0f;
      } else {
        above += scores[order[r]];
      }
    }
  }

  double total = 0;
  for (float s : scores) total += s;
  for (float& s : scores) s = static_cast<float>(s / total);
}

// ---------------------------------------------------------------------------
// Random numbers.

namespace {
uint64_t SplitMix64(uint64_t* x) {
  uint64_t z = (*x += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}
}  // namespace

void Rng::Seed(uint64_t seed) {
  for (uint64_t& s : s_) s = SplitMix64(&seed);
}

uint64_t Rng::Next() {
  const uint64_t result = std::rotl(s_[1] * 5, 7) * 9;
  const uint64_t t = s_[1] << 17;
  s_[2] ^= s_[0];
  s_[3] ^= s_[1];
  s_[1] ^= s_[2];
  s_[0] ^= s_[3];
  s_[2] ^= t;
  s_[3] = std::rotl(s_[3], 45);
  return result;
}

uint32_t SampleToken(std::span<const float> weights, Rng& rng) {
  if (weights.empty()) Fail("SampleToken: empty distribution");
  double total = 0;
  for (size_t v = 0; v < weights.size(); ++v) {
    if (!(weights[v] >= 0) || !std::isfinite(weights[v]))
      Fail("SampleToken: weight " + std::to_string(weights[v]) + " at token " + std::to_string(v) +
           "; expected a finite value >= 0");
    total += weights[v];
  }
  if (!(total > 0)) Fail("SampleToken: every weight is zero");
  return SampleIndex(weights, total, rng.Uniform());
}

// ---------------------------------------------------------------------------
// Sampling verification.
//
// Invariant (both modes): when the walk is at a node with residual r, the
// rest of the procedure emits a next token distributed as r / sum(r). Each
// tried child keeps it:
//   deterministic child x: P(emit y) = r(y) [y = x] + (1 - r(x)) r'(y) with
//     r' = r without x, renormalised = r(y) / (1 - r(x)) for y != x, so
//     P(emit y) = r(y).
//   RSD child x ~ q: P(emit y) = q(y) min(1, r(y)/q(y)) + P(reject) r'(y)
//     with r' = norm(max(r - q, 0)) and P(reject) = sum(max(r - q, 0)),
//     so P(emit y) = min(q(y), r(y)) + max(r(y) - q(y), 0) = r(y).
//     (With replacement the same holds with q unchanged for the next sibling.)
// Descending into an accepted child restarts the invariant there with the
// model's row for that child.
SampleResult VerifySampling(const DraftTree& tree, const NodeDistribution& target, Rng& rng,
                            DraftMode mode, const NodeDistribution& proposal) {
  CheckTree(tree);
  if (!target) Fail("VerifySampling: no target distribution accessor");
  // Both stochastic modes use the proposal; only kWithoutReplacement removes
  // a rejected sibling from it.
  const bool stochastic = mode != DraftMode::kDeterministic;
  const bool without_replacement = mode == DraftMode::kWithoutReplacement;
  if (stochastic && !proposal)
    Fail("VerifySampling: a stochastic DraftMode needs the proposal distributions");

  const int32_t n = static_cast<int32_t>(tree.size());
  SampleResult result;
  result.accepted_nodes.push_back(0);
  size_t vocab = 0;
  std::vector<double> residual;  // r: unnormalised, total `mass`
  std::vector<double> q;         // q_k: unnormalised, total `q_mass`
  int32_t node = 0;
  for (;;) {
    double mass = LoadRow(target(node), "target", node, &vocab, &residual);
    bool q_loaded = false;
    double q_mass = 0;
    int32_t accepted = -1;
    for (int32_t child = node + 1; child < n && accepted < 0; ++child) {
      if (tree.parents[child] != node) continue;
      const uint32_t x = tree.tokens[child];
      if (x >= vocab)
        Fail("VerifySampling: node " + std::to_string(child) + " has token " + std::to_string(x) +
             " outside the vocabulary of " + std::to_string(vocab));
      if (stochastic && !q_loaded) {
        q_mass = LoadRow(proposal(node), "proposal", node, &vocab, &q);
        q_loaded = true;
      }
      const double u = rng.Uniform();
      if (stochastic && q[x] > 0) {
        const double p_x = residual[x] / mass;
        const double q_x = q[x] / q_mass;
        if (p_x >= q_x || u * q_x < p_x) {
          accepted = child;
          break;
        }
        double new_mass = 0;
        for (size_t v = 0; v < vocab; ++v) {
          const double r = residual[v] / mass - q[v] / q_mass;
          residual[v] = r > 0 ? r : 0;
          new_mass += residual[v];
        }
        if (without_replacement) {
          q_mass -= q[x];
          q[x] = 0;
          if (!(q_mass > 0)) q_mass = Sum(q);
        }
        // max(p - q, 0) vanishes only when p == q, where min(1, p_x / q_x) = 1;
        // only rounding gets here, and x is then accepted.
        if (!(new_mass > 0)) {
          accepted = child;
          break;
        }
        mass = new_mass;
        continue;
      }
      const double p_x = residual[x];
      if (p_x > 0 && (p_x >= mass || u * mass < p_x)) {
        accepted = child;
        break;
      }
      mass -= p_x;
      residual[x] = 0;
      if (!(mass > 0)) mass = Sum(residual);  // subtraction drift
    }
    if (accepted < 0) {
      result.bonus_token = SampleIndex(std::span<const double>(residual), mass, rng.Uniform());
      return result;
    }
    result.accepted_nodes.push_back(accepted);
    result.accepted_tokens.push_back(tree.tokens[accepted]);
    node = accepted;
  }
}

}  // namespace sam::runtime
