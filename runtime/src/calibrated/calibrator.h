// The calibration of Policy::kCalibrated: running estimates of a candidate
// node's acceptance given its parent, per feature cell (calibrator.h's
// Calibrator), and the bucketing of the features.
#ifndef SAM_RUNTIME_SRC_CALIBRATED_CALIBRATOR_H_
#define SAM_RUNTIME_SRC_CALIBRATED_CALIBRATOR_H_

#include <algorithm>
#include <array>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <iterator>
#include <vector>

namespace sam::runtime::calibrated {

// 1, 2, 3, 4, 5-6, 7-8, 9-12, 13-16, 17-24, 25-32, 33+ -> 0..10 (0 -> 0).
constexpr size_t LengthBucketOf(uint64_t x) {
  constexpr uint64_t kUpper[] = {1, 2, 3, 4, 6, 8, 12, 16, 24, 32};
  for (size_t i = 0; i < std::size(kUpper); ++i)
    if (x <= kUpper[i]) return i;
  return std::size(kUpper);
}
// LengthBucketOf by table (it is called for every offered node, its loop of
// unpredictable branches was a visible share of a step).
constexpr auto kLengthBucketTable = [] {
  std::array<uint8_t, 33> t{};
  for (uint64_t x = 0; x < t.size(); ++x) t[x] = static_cast<uint8_t>(LengthBucketOf(x));
  return t;
}();
static_assert(LengthBucketOf(33) == 10 && LengthBucketOf(~uint64_t{0}) == 10);
inline size_t LengthBucket(uint64_t x) { return x < 33 ? kLengthBucketTable[x] : 10; }
constexpr size_t kLengthBuckets = 11;

// 1, 2, 3-4, 5-8, 9-16, 17-128, 129-1024, 1025+ -> 0..7.
constexpr size_t CountBucketOf(uint64_t count) {
  size_t b = 0;
  for (uint64_t upper = 1; b < 7 && count > upper; upper *= (b < 5 ? 2 : 8)) ++b;
  return b;
}
// CountBucketOf by the bit width of count - 1: its bounds are powers of two,
// so counts of one width share a bucket.
constexpr auto kCountBucketTable = [] {
  std::array<uint8_t, 65> t{};
  for (size_t w = 0; w < t.size(); ++w)
    t[w] = static_cast<uint8_t>(CountBucketOf(w == 0 ? 1 : (uint64_t{1} << (w - 1)) + 1));
  return t;
}();
static_assert(CountBucketOf(16) == 4 && CountBucketOf(17) == 5 && CountBucketOf(128) == 5 &&
              CountBucketOf(129) == 6 && CountBucketOf(1024) == 6 && CountBucketOf(1025) == 7 &&
              CountBucketOf(0) == 0);
inline size_t CountBucket(uint64_t count) {
  return kCountBucketTable[std::bit_width(count == 0 ? 0 : count - 1)];
}
constexpr size_t kCountBuckets = 8;
constexpr size_t kRatioBuckets = 10;
constexpr size_t kRankBuckets = 8;
// A drafter's own probability of a node given its parent (a draft model's
// q), in tenths: [0, 0.1) ... [0.9, 1].
constexpr size_t kProbBuckets = 10;


// Running estimates of P(node accepted | its parent accepted), one Beta-like
// cell per feature combination, shrunk towards a prior mean. This is what
// lets Policy::kCalibrated compare a dynamic continuation, count-weighted
// static branches and fallback branches on one scale (expected accepted
// tokens = sum of path probabilities), and learn which of them deserve the
// node budget on the current workload. Estimates are kept ready (updated at
// each observation), with, per (parent count, match length) of a static
// node, the largest estimate over the count ratios: an upper bound on any
// static child's probability before the children are looked up.
//
// Static cells come in two kinds: a child of the node's own state (the
// longest context), and a backoff child, a child of the next shorter context
// (the state's suffix link) that the longest context does not offer among
// its heaviest children. A backoff child's features are those of the shorter
// context (its count ratio there, that state's count and length). Their upper
// bound, before the link is read, is per length bucket the largest backoff
// estimate at that length or shorter (the shorter context is shorter).
//
// Static cells come in two families with the same features and priors: the
// attached indexes (family 0) and a response cache's compiled index (family
// 1, ResponseCache::CompileOptions), so that earlier responses earn their
// own acceptance rates.
class Calibrator {
 public:
  static constexpr double kPriorWeight = 4.0;

  Calibrator() {
    const size_t dynamic = kLengthBuckets * kLengthBuckets;
    const size_t fixed_static = kFamilies * 2 * kStaticCells;
    const size_t fallback = kLengthBuckets * kRankBuckets;
    const size_t model = kLengthBuckets * kProbBuckets;
    const size_t cache = kLengthBuckets * kLengthBuckets;
    static_base_ = dynamic;
    fallback_base_ = dynamic + fixed_static;
    model_base_ = fallback_base_ + fallback;
    cache_base_ = model_base_ + model;
    prior_.resize(dynamic + fixed_static + fallback + model + cache);
    for (size_t l = 0; l < kLengthBuckets; ++l)
      for (size_t d = 0; d < kLengthBuckets; ++d)
        prior_[l * kLengthBuckets + d] = std::min(0.85, 0.35 + 0.05 * static_cast<double>(l + d));
    // A backoff child is a token the longer context did not favour: half the
    // prior of a child of the same ratio.
    for (size_t f = 0; f < kFamilies; ++f)
      for (size_t b = 0; b < 2; ++b)
        for (size_t r = 0; r < kRatioBuckets; ++r)
          for (size_t c = 0; c < kCountBuckets; ++c)
            for (size_t l = 0; l < kLengthBuckets; ++l)
              prior_[StaticCellOf(f, b, r, c, l)] =
                  (b == 0 ? 0.8 : 0.4) * (static_cast<double>(r) + 0.5) / kRatioBuckets;
    for (size_t d = 0; d < kLengthBuckets; ++d)
      for (size_t k = 0; k < kRankBuckets; ++k)
        prior_[fallback_base_ + d * kRankBuckets + k] = 0.3 / static_cast<double>(k + 1);
    // A draft model's q: the acceptance of a drafted token is about its
    // probability under the draft, when the draft resembles the target.
    for (size_t d = 0; d < kLengthBuckets; ++d)
      for (size_t q = 0; q < kProbBuckets; ++q)
        prior_[model_base_ + d * kProbBuckets + q] = 0.9 * (static_cast<double>(q) + 0.5) / kProbBuckets;
    // Earlier responses are weaker evidence than the request's own text.
    for (size_t l = 0; l < kLengthBuckets; ++l)
      for (size_t d = 0; d < kLengthBuckets; ++d)
        prior_[cache_base_ + l * kLengthBuckets + d] =
            std::min(0.8, 0.25 + 0.05 * static_cast<double>(l + d));
    Clear();
  }

  void Clear() {
    evidence_.resize(prior_.size());
    for (size_t c = 0; c < prior_.size(); ++c)
      evidence_[c] = Evidence{0.0, 0.0, kPriorWeight * prior_[c]};
    prob_.resize(prior_.size());
    for (size_t c = 0; c < prior_.size(); ++c) prob_[c] = Estimate(c);
    static_max_.assign(kFamilies * kCountBuckets * kLengthBuckets, 0.0);
    backoff_len_max_.assign(kFamilies * kLengthBuckets, 0.0);
    backoff_max_.assign(kFamilies * kLengthBuckets, 0.0);
    for (size_t f = 0; f < kFamilies; ++f) {
      for (size_t k = 0; k < kCountBuckets * kLengthBuckets; ++k) UpdateStaticMax(f, k);
      for (size_t l = 0; l < kLengthBuckets; ++l) UpdateBackoffMax(f, l);
    }
  }

  int DynamicCell(uint64_t match_len, size_t depth) const {
    return static_cast<int>(LengthBucket(match_len) * kLengthBuckets + LengthBucket(depth));
  }
  // A static child of count ratio `ratio` under a state of `parent_count`
  // occurrences and match length `match_len`; backoff: that state is the
  // shorter context (see above).
  int StaticCell(double ratio, uint64_t parent_count, uint64_t match_len, bool backoff = false,
                 size_t family = 0) const {
    return StaticCellBase(parent_count, match_len, backoff, family) + RatioOffset(ratio);
  }
  // StaticCell in two parts: what one state's children share (computed once
  // per lookup), and what depends on the child's count ratio.
  int StaticCellBase(uint64_t parent_count, uint64_t match_len, bool backoff,
                     size_t family) const {
    return StaticCellOf(family, backoff ? 1 : 0, 0, CountBucket(parent_count),
                        LengthBucket(match_len));
  }
  static int RatioOffset(double ratio) {
    // ratio is in [0, 1] (a child's weight never exceeds its parent's); the
    // comparisons keep anything else, NaN included, away from the conversion.
    const size_t r = !(ratio > 0.0) ? 0
                     : ratio < 1.0  ? static_cast<size_t>(ratio * kRatioBuckets)
                                    : kRatioBuckets - 1;
    return static_cast<int>(r * kCountBuckets * kLengthBuckets);
  }
  int FallbackCell(size_t depth, size_t rank) const {
    return static_cast<int>(fallback_base_ + LengthBucket(depth) * kRankBuckets +
                            std::min(rank, kRankBuckets - 1));
  }
  int CacheCell(uint64_t match_len, size_t depth) const {
    return static_cast<int>(cache_base_ + LengthBucket(match_len) * kLengthBuckets +
                            LengthBucket(depth));
  }
  // A node a drafter proposed with probability q given its parent (a draft
  // model's tree: DraftTree::draft_probs).
  int ModelCell(size_t depth, float q) const {
    const size_t b = !(q > 0.0f) ? 0
                     : q < 1.0f  ? static_cast<size_t>(q * kProbBuckets)
                                 : kProbBuckets - 1;
    return static_cast<int>(model_base_ + LengthBucket(depth) * kProbBuckets + b);
  }
  double Probability(int cell) const { return prob_[static_cast<size_t>(cell)]; }
  // At least Probability(StaticCell(r, parent_count, match_len)) for every ratio r.
  double StaticBound(uint64_t parent_count, uint64_t match_len, size_t family = 0) const {
    return static_max_[(family * kCountBuckets + CountBucket(parent_count)) * kLengthBuckets +
                       LengthBucket(match_len)];
  }
  // At least the estimate of every backoff child of a state of match length
  // match_len (its shorter context is shorter; any count and ratio).
  double BackoffBound(uint64_t match_len, size_t family = 0) const {
    return backoff_max_[family * kLengthBuckets + LengthBucket(match_len)];
  }
  void Observe(int cell, bool accepted) {
    const size_t c = static_cast<size_t>(cell);
    Evidence& e = evidence_[c];
    e.trials += 1.0;
    if (accepted) e.hits += 1.0;
    const double old = prob_[c];
    prob_[c] = Estimate(c);
    if (c >= static_base_ && c < fallback_base_) {
      const size_t block = (c - static_base_) / kStaticCells;  // family * 2 + backoff
      const size_t within = (c - static_base_) % kStaticCells;
      // A maximum over a group of cells moves only if this cell exceeds it,
      // or was it and fell: the same value as a full recomputation, without
      // one at most observations.
      if (block % 2 == 0) {
        // The (count, length) bucket's maximum over its 10 ratio cells.
        const size_t k = within % (kCountBuckets * kLengthBuckets);
        double& max = static_max_[block / 2 * kCountBuckets * kLengthBuckets + k];
        if (prob_[c] > max) {
          max = prob_[c];
        } else if (old == max && prob_[c] < max) {
          UpdateStaticMax(block / 2, k);
        }
      } else {
        // The length bucket's maximum over its 80 cells.
        const size_t f = block / 2, l = within % kLengthBuckets;
        const double max = backoff_len_max_[f * kLengthBuckets + l];
        if (prob_[c] > max || (old == max && prob_[c] < max)) UpdateBackoffMax(f, l);
      }
    }
  }

 private:
  static constexpr size_t kFamilies = 2;
  static constexpr size_t kStaticCells = kRatioBuckets * kCountBuckets * kLengthBuckets;
  int StaticCellOf(size_t family, size_t backoff, size_t r, size_t count, size_t len) const {
    return static_cast<int>(static_base_ + (family * 2 + backoff) * kStaticCells +
                            (r * kCountBuckets + count) * kLengthBuckets + len);
  }
  // After a change of a backoff cell of family f and length bucket l.
  void UpdateBackoffMax(size_t f, size_t l) {
    double best = 0.0;
    for (size_t r = 0; r < kRatioBuckets; ++r)
      for (size_t c = 0; c < kCountBuckets; ++c)
        best = std::max(best, prob_[StaticCellOf(f, 1, r, c, l)]);
    backoff_len_max_[f * kLengthBuckets + l] = best;
    best = 0.0;
    for (size_t k = 0; k < kLengthBuckets; ++k) {
      best = std::max(best, backoff_len_max_[f * kLengthBuckets + k]);
      backoff_max_[f * kLengthBuckets + k] = best;
    }
  }
  double Estimate(size_t cell) const {
    const Evidence& e = evidence_[cell];
    return (e.hits + e.weighted_prior) / (e.trials + kPriorWeight);
  }
  // k = count bucket * kLengthBuckets + length bucket, of family f.
  void UpdateStaticMax(size_t f, size_t k) {
    double best = 0.0;
    for (size_t r = 0; r < kRatioBuckets; ++r)
      best = std::max(best, prob_[static_base_ + 2 * f * kStaticCells +
                                  r * kCountBuckets * kLengthBuckets + k]);
    static_max_[f * kCountBuckets * kLengthBuckets + k] = best;
  }

  size_t static_base_ = 0;
  size_t fallback_base_ = 0;
  size_t model_base_ = 0;
  size_t cache_base_ = 0;
  std::vector<double> prior_, prob_, static_max_;
  // What Observe updates and Estimate reads of a cell, together: one cache
  // line instead of three arrays' (an observation's reads missed the first
  // level about once per array).
  struct alignas(32) Evidence {
    double hits = 0.0, trials = 0.0;
    double weighted_prior = 0.0;  // kPriorWeight * prior_ (exact: a power of two)
  };
  std::vector<Evidence> evidence_;
  // Per length bucket: the largest backoff estimate of that length, and of
  // that length or shorter.
  std::vector<double> backoff_len_max_, backoff_max_;
};

}  // namespace sam::runtime::calibrated

#endif  // SAM_RUNTIME_SRC_CALIBRATED_CALIBRATOR_H_
