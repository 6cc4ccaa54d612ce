// Verification budgets chosen from the cost of verification.
//
//   // t(n): the time of one verification pass over n draft tokens (bench-generate
//   // --cost-curve-out writes it for a model and a machine).
//   sam::runtime::CostCurve curve = sam::runtime::CostCurve::Load("cpu.csv");
//   double c = curve.Relative(24);                      // t(24) / t(1)
//   options.cost_curve = curve;               // sam-cal sizes each tree by it
//   // the choice itself, for path probabilities ranked best first:
//   size_t n = sam::runtime::ChooseTreeSize(ranked_paths, curve, /*rate=*/1.8);
//
// How many tokens to verify per step depends on the model and the hardware: on a
// GPU, verifying 16 tokens costs about what verifying 1 does; on a CPU, 64 tokens
// cost 2.5 times as much. A draft of n nodes (start token included) whose node
// acceptance estimates are the path probabilities p_1 >= p_2 >= ... yields on
// average E(n) = 1 + p_1 + ... + p_{n-1} tokens (the bonus token included, the
// MAT convention) and costs t(n). Generation runs at sum(tokens) / sum(t) over
// all its steps; ChooseTreeSize picks the n of one step (see there for why it
// maximises E(n) - rate * t(n) / t(1) rather than E(n) / t(n)).
//
// Cost curve file (CSV text, the format bench-generate --cost-curve-out writes):
//
//   # comment lines start with '#'; blank lines are ignored
//   tokens,cost              <- optional header, exactly these names
//   1,178.2                  <- tokens verified in one pass, its time in any unit
//   2,191.0
//   64,443.0
//
// `tokens` are integers in 1..kMaxDraftSize, strictly increasing, the first 1;
// `cost` is a positive finite number in any unit (milliseconds, or already
// t(n)/t(1)): the curve is cost / cost of the first row. Between rows t is
// interpolated linearly; beyond the last row N it grows in proportion to the
// tokens, t(n) = t(N) * n / N (a pass that is already compute-bound).
#ifndef SAM_RUNTIME_BUDGET_H_
#define SAM_RUNTIME_BUDGET_H_

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "sam/export.h"

namespace sam::runtime {

struct SAM_API CostPoint {
  size_t tokens = 1;  // tokens verified in one pass
  double cost = 1.0;  // its time, any unit
};

// t(n)/t(1) for every n >= 1. A default-constructed curve is empty: no cost
// model (SessionOptions::cost_curve unset). Copies are cheap enough for
// options (one double per measured token count); immutable once built.
class SAM_API CostCurve {
 public:
  CostCurve() = default;
  // From measured points (see the file format above for the rules). Throws
  // sam::Error (kBadValue) naming the offending point and `source` (a file
  // name, or "" for a program's own points) when a rule is broken.
  static CostCurve FromPoints(std::span<const CostPoint> points, const std::string& source = "");
  // Parses the CSV text of a cost curve file. Throws sam::Error with the file
  // (`source`) and the line: kBadRecord for a line that is not "tokens,cost"
  // numbers, kBadValue for numbers outside the rules, kBadRecord for a file
  // without rows.
  static CostCurve Parse(std::string_view text, const std::string& source = "");
  // Reads and parses a cost curve file; kIo when it cannot be read.
  static CostCurve Load(const std::string& path);
  // t(n) = t(1) for n <= up_to (then proportional): a GPU-like curve.
  static CostCurve Flat(size_t up_to = 128);

  bool empty() const { return relative_.empty(); }
  // The largest measured token count (0 when empty).
  size_t measured_up_to() const { return relative_.size(); }
  // t(n)/t(1) for n >= 1 (n = 0 reads as 1); 1.0 for every n when empty.
  double Relative(size_t n) const;
  // The measured points it was built from.
  const std::vector<CostPoint>& points() const { return points_; }

  // The CSV text of `points` (header "tokens,cost", one row per point): what
  // Parse reads back into the same curve.
  static std::string ToCsv(std::span<const CostPoint> points, std::string_view comment = "");

 private:
  std::vector<double> relative_;  // relative_[n - 1] = t(n)/t(1), n = 1..last measured
  std::vector<CostPoint> points_;
};

// The draft size n (nodes, start token included; 1 = no draft) in
// [1, ranked_paths.size() + 1] that keeps the first n - 1 candidates of
// `ranked_paths` (estimated path probabilities, best first: the expected
// accepted tokens of a tree are the sum of its nodes' path probabilities, so
// the best tree of each size is a prefix of this ranking) and maximises
//
//   rate > 0:  E(n) - rate * t(n)/t(1)       E(n) = 1 + sum of the first n - 1
//   rate <= 0: E(n) / (t(n)/t(1))
//
// Throughput over a whole generation is sum(E) / sum(t). Maximising each
// step's own ratio E/t is not the same: a step with a strong draft should keep
// adding nodes as long as they pay more than the generation's rate, even when
// that lowers its own ratio, and a step with a weak draft should stop sooner.
// The optimum of sum(E)/sum(t) over per-step choices is reached by maximising
// E(n) - rate * t(n) at every step with rate = that optimum (Dinkelbach's
// fractional programming); a session uses its measured rate so far. With
// rate <= 0 the per-step ratio is maximised instead (what Dinkelbach gives
// when each step is its own generation). Ties go to the smaller n. An empty
// curve costs every n alike (the largest n with a positive gain). O(n).
SAM_API size_t ChooseTreeSize(std::span<const double> ranked_paths, const CostCurve& curve,
                              double rate = 0.0);

// Projected speed-up of steps verified with this curve: tokens produced /
// (sum over steps of t(size)/t(1)), i.e. the rate against plain decoding (one
// token per t(1)); steps_by_size[n] = steps whose draft had n nodes (start
// token included). 0 without steps.
SAM_API double ProjectedSpeedup(std::span<const uint64_t> steps_by_size, uint64_t tokens,
                                const CostCurve& curve);

}  // namespace sam::runtime

#endif  // SAM_RUNTIME_BUDGET_H_
