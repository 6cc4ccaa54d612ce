// Cost curves (parsing, interpolation, errors), the cost-aware tree size
// against exhaustive search over every subset of candidates, projected
// speed-ups against direct sums, and sessions whose trees follow the curve.
#include "sam/runtime/budget.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "sam/runtime/replay.h"
#include "sam/runtime/session.h"
#include "test_index.h"
#include "thrown.h"

namespace sam::runtime {
namespace {

using sam::testing::Thrown;
using test_util::BuiltIndex;
using test_util::Text;

// t(n) by the rules of budget.h, written independently: find the segment, interpolate.
double ExpectedRelative(const std::vector<CostPoint>& pts, size_t n) {
  const double t1 = pts.front().cost;
  if (n <= 1) return 1.0;
  if (n >= pts.back().tokens) return pts.back().cost / t1 * n / pts.back().tokens;
  for (size_t i = 1; i < pts.size(); ++i)
    if (n <= pts[i].tokens) {
      const double x0 = pts[i - 1].tokens, x1 = pts[i].tokens;
      return (pts[i - 1].cost + (pts[i].cost - pts[i - 1].cost) * (n - x0) / (x1 - x0)) / t1;
    }
  return -1;
}

TEST(CostCurve, ParsesCsvAndInterpolates) {
  const std::string text =
      "# measured on a CPU\r\n\ntokens,cost\r\n1,178\n2, 191.5\n  8 ,229\n64,443e0\n";
  const CostCurve c = CostCurve::Parse(text, "cpu.csv");
  const std::vector<CostPoint> pts = {{1, 178}, {2, 191.5}, {8, 229}, {64, 443}};
  ASSERT_EQ(c.points().size(), pts.size());
  EXPECT_EQ(c.measured_up_to(), 64u);
  for (size_t n = 0; n <= 300; ++n)
    EXPECT_NEAR(c.Relative(n), ExpectedRelative(pts, n), 1e-12) << n;
  EXPECT_DOUBLE_EQ(c.Relative(5), (191.5 + (229 - 191.5) * 3 / 6) / 178);
  EXPECT_DOUBLE_EQ(c.Relative(128), 443.0 / 178 * 2);  // proportional beyond the last row
  // Written and read back: the same curve.
  const CostCurve back = CostCurve::Parse(CostCurve::ToCsv(pts, "a comment\nover two lines"));
  for (size_t n = 1; n <= 300; ++n) EXPECT_DOUBLE_EQ(back.Relative(n), c.Relative(n)) << n;
  // A single row: proportional from 1 token on.
  const CostCurve one = CostCurve::Parse("1,5\n");
  EXPECT_DOUBLE_EQ(one.Relative(7), 7.0);
  // Empty: every size costs t(1).
  EXPECT_TRUE(CostCurve().empty());
  EXPECT_DOUBLE_EQ(CostCurve().Relative(50), 1.0);
  EXPECT_DOUBLE_EQ(CostCurve::Flat(128).Relative(128), 1.0);
  EXPECT_DOUBLE_EQ(CostCurve::Flat(128).Relative(256), 2.0);
}

TEST(CostCurve, RefusesMalformedFilesNamingTheLine) {
  struct Case {
    const char* text;
    ErrorCode code;
    const char* line;  // "" when no line is named
    const char* says;
  };
  const Case cases[] = {
      {"", ErrorCode::kBadRecord, "", "no 'tokens,cost' rows"},
      {"# only a comment\ntokens,cost\n", ErrorCode::kBadRecord, "", "no 'tokens,cost' rows"},
      {"1;2\n", ErrorCode::kBadRecord, "line 1", "two comma-separated"},
      {"1,2,3\n", ErrorCode::kBadRecord, "line 1", "two comma-separated"},
      {"1,2\nx,3\n", ErrorCode::kBadRecord, "line 2", "not a whole number"},
      {"1,2\n2.5,3\n", ErrorCode::kBadRecord, "line 2", "not a whole number"},
      {"1,abc\n", ErrorCode::kBadRecord, "line 1", "not a number"},
      {"1,\n", ErrorCode::kBadRecord, "line 1", "not a number"},
      {"1,2\ntokens,cost\n", ErrorCode::kBadRecord, "line 2", "not a whole number"},
      {"2,1\n", ErrorCode::kBadValue, "line 1", "first point must be 1 token"},
      {"0,1\n", ErrorCode::kBadValue, "line 1", "tokens must be in 1..4096"},
      {"1,1\n5000,2\n", ErrorCode::kBadValue, "line 2", "tokens must be in 1..4096"},
      {"1,1\n4,2\n4,3\n", ErrorCode::kBadValue, "line 3", "must increase"},
      {"1,1\n4,2\n3,3\n", ErrorCode::kBadValue, "line 3", "must increase"},
      {"1,0\n", ErrorCode::kBadValue, "line 1", "positive finite"},
      {"1,1\n2,-1\n", ErrorCode::kBadValue, "line 2", "positive finite"},
      {"1,1\n2,nan\n", ErrorCode::kBadValue, "line 2", "positive finite"},
      {"1,1\n2,inf\n", ErrorCode::kBadValue, "line 2", "positive finite"},
      {"1,1e999\n", ErrorCode::kBadRecord, "line 1", "not a number"},
  };
  for (const Case& c : cases) {
    const Error e = Thrown([&] { CostCurve::Parse(c.text, "curve.csv"); });
    EXPECT_EQ(e.code(), c.code) << c.text << " -> " << e.what();
    EXPECT_EQ(e.context().file, "curve.csv") << c.text;
    EXPECT_EQ(e.context().record, c.line) << c.text << " -> " << e.what();
    EXPECT_NE(std::string(e.what()).find(c.says), std::string::npos) << c.text << " -> " << e.what();
  }
  const Error missing = Thrown([] { CostCurve::Load(test_util::TempPath("no_such_curve.csv")); });
  EXPECT_EQ(missing.code(), ErrorCode::kIo);
  const std::vector<CostPoint> none;
  EXPECT_EQ(Thrown([&] { CostCurve::FromPoints(none); }).code(), ErrorCode::kBadValue);
}

TEST(CostCurve, LoadsAFile) {
  const std::string path = test_util::TempPath("curve.csv");
  std::ofstream(path) << "tokens,cost\n1,2\n3,4\n";
  const CostCurve c = CostCurve::Load(path);
  std::remove(path.c_str());
  EXPECT_DOUBLE_EQ(c.Relative(2), 1.5);
}

// ChooseTreeSize against the best of every subset of the candidates: the best
// tree of each size is the prefix of the ranking, so no subset may beat it.
TEST(ChooseTreeSize, MatchesExhaustiveSearchOverSubsets) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  for (int round = 0; round < 3000; ++round) {
    const size_t k = rng() % 11;
    std::vector<double> paths(k);
    for (double& p : paths) p = round % 5 == 0 ? std::floor(unit(rng) * 4) / 4 : unit(rng);
    std::sort(paths.rbegin(), paths.rend());
    // Curves: concave, convex, flat, steep, and non-monotone ones.
    std::vector<CostPoint> pts = {{1, 1.0}};
    size_t n = 1;
    while (n < 14) {
      n += 1 + rng() % 4;
      const double step = round % 4 == 0 ? 0.0 : unit(rng) * (round % 3 == 0 ? 1.5 : 0.3);
      pts.push_back({n, std::max(0.05, pts.back().cost + step - (round % 7 == 0 ? 0.2 : 0.0))});
    }
    const CostCurve curve = CostCurve::FromPoints(pts);
    const double rate = round % 2 ? 0.0 : 0.5 + 3 * unit(rng);
    auto value = [&](double expected, size_t size) {
      const double t = curve.Relative(size);
      return rate > 0 ? expected - rate * t : expected / t;
    };
    double best = -1e300;
    size_t best_size = 0;
    for (uint32_t mask = 0; mask < (1u << k); ++mask) {
      double e = 1.0;
      for (size_t i = 0; i < k; ++i)
        if (mask >> i & 1) e += paths[i];
      const size_t size = 1 + static_cast<size_t>(__builtin_popcount(mask));
      const double v = value(e, size);
      if (v > best + 1e-12 || (std::abs(v - best) <= 1e-12 && size < best_size)) {
        best = v;
        best_size = size;
      }
    }
    const size_t chosen = ChooseTreeSize(paths, curve, rate);
    ASSERT_GE(chosen, 1u);
    ASSERT_LE(chosen, k + 1);
    double e = 1.0;
    for (size_t i = 0; i + 1 < chosen; ++i) e += paths[i];
    ASSERT_NEAR(value(e, chosen), best, 1e-9) << "round " << round << " k " << k;
    // Ties go to the smaller size (up to rounding between equal sums).
    if (std::abs(value(e, chosen) - best) <= 1e-12) {
      EXPECT_LE(chosen, best_size) << "round " << round;
    }
  }
}

TEST(ChooseTreeSize, EdgeCases) {
  const std::vector<double> none;
  EXPECT_EQ(ChooseTreeSize(none, CostCurve::Flat(), 0.0), 1u);
  const std::vector<double> paths = {0.9, 0.5, 0.1};
  // Flat: every node pays; proportional (t(n) = n): none does.
  EXPECT_EQ(ChooseTreeSize(paths, CostCurve::Flat(), 0.0), 4u);
  EXPECT_EQ(ChooseTreeSize(paths, CostCurve::Flat(), 2.0), 4u);
  const CostCurve linear = CostCurve::Parse("1,1\n2,2\n");
  EXPECT_EQ(ChooseTreeSize(paths, linear, 0.0), 1u);
  EXPECT_EQ(ChooseTreeSize(paths, linear, 1.0), 1u);
  // t(n) = 1 + 0.2 (n - 1): by ratio, (1.9)/1.2 < (2.4)/1.4 > (2.5)/1.6; at rate 1, the
  // third node's 0.1 is below 1 * 0.2 while the second's 0.5 is above.
  const CostCurve slope = CostCurve::Parse("1,1\n11,3\n");
  EXPECT_EQ(ChooseTreeSize(paths, slope, 0.0), 3u);
  EXPECT_EQ(ChooseTreeSize(paths, slope, 1.0), 3u);
  EXPECT_EQ(ChooseTreeSize(paths, slope, 3.0), 2u);  // 0.9 > 3 * 0.2, 0.5 < 3 * 0.2
}

TEST(ProjectedSpeedup, IsTokensOverTheStepsCost) {
  const std::vector<uint64_t> by_size = {0, 10, 0, 5, 2};  // 10 steps of 1 node, 5 of 3, 2 of 4
  EXPECT_DOUBLE_EQ(ProjectedSpeedup(by_size, 40, CostCurve::Flat()), 40.0 / 17);
  const CostCurve linear = CostCurve::Parse("1,1\n2,2\n");
  EXPECT_DOUBLE_EQ(ProjectedSpeedup(by_size, 40, linear), 40.0 / (10 + 15 + 8));
  EXPECT_DOUBLE_EQ(ProjectedSpeedup({}, 0, linear), 0.0);
}

// ---------------------------------------------------------------- sessions

struct Workload {
  std::vector<Text> docs;
  std::vector<ReplayTrace> traces;
};

// Documents over a small alphabet with repeated phrases (so drafts get
// accepted) and traces whose outputs reuse them.
Workload MakeWorkload() {
  std::mt19937 rng(11);
  std::vector<Text> phrases = test_util::RandomTexts(rng, 12, 4, 6, 40);
  auto sentence = [&](size_t parts) {
    Text t;
    for (size_t i = 0; i < parts; ++i) {
      const Text& p = phrases[rng() % phrases.size()];
      t.insert(t.end(), p.begin(), p.end());
      if (rng() % 3 == 0) t.push_back(rng() % 40);
    }
    return t;
  };
  Workload w;
  for (int d = 0; d < 60; ++d) w.docs.push_back(sentence(8));
  for (int i = 0; i < 12; ++i)
    w.traces.push_back({std::to_string(i), "c", sentence(4), sentence(10), ""});
  return w;
}

ReplayReport ReplayCalibrated(const format::IndexView& view, const std::vector<ReplayTrace>& traces,
                              const CostCurve& curve, std::vector<DraftTree>* trees = nullptr) {
  SessionOptions o;
  o.max_dynamic_bytes = 1 << 20;
  o.policy = Policy::kCalibrated;
  o.draft_size = 24;
  o.cost_curve = curve;
  Session s(o);
  s.AttachIndex(&view);
  if (trees == nullptr) return Replay(s, traces);
  // The same loop as Replay, keeping every tree.
  struct Recorder : Drafter {
    Session& s;
    std::vector<DraftTree>& out;
    Recorder(Session& session, std::vector<DraftTree>& o) : s(session), out(o) {}
    std::string_view name() const override { return "rec"; }
    void Reset() override { s.Reset(); }
    void Prefill(std::span<const uint32_t> p) override { s.Prefill(p); }
    bool Propose(uint32_t start, size_t max_nodes, DraftTree* t) override {
      const bool r = s.Propose(start, max_nodes, t);
      out.push_back(*t);
      return r;
    }
    void Commit(std::span<const uint32_t> tokens) override { s.Commit(tokens); }
  } recorder(s, *trees);
  return Replay(recorder, traces);
}

TEST(CostAwareSession, FlatCurveDraftsLikeNoCurveAndProportionalDraftsNothing) {
  const Workload w = MakeWorkload();
  BuiltIndex index(w.docs, 41, "budget.sam");
  std::vector<DraftTree> plain, flat;
  const ReplayReport r_plain = ReplayCalibrated(index.view(), w.traces, CostCurve(), &plain);
  const ReplayReport r_flat =
      ReplayCalibrated(index.view(), w.traces, CostCurve::Flat(kMaxDraftSize), &flat);
  ASSERT_GT(r_plain.total.Mat(), 1.3);  // the workload drafts
  ASSERT_EQ(plain.size(), flat.size());
  for (size_t i = 0; i < plain.size(); ++i) {
    EXPECT_EQ(plain[i].tokens, flat[i].tokens) << "step " << i;
    EXPECT_EQ(plain[i].parents, flat[i].parents) << "step " << i;
  }
  // t(n) = n: a node never pays for itself (its path probability is below 1).
  const ReplayReport r_linear =
      ReplayCalibrated(index.view(), w.traces, CostCurve::Parse("1,1\n2,2\n"));
  EXPECT_EQ(r_linear.total.draft_tokens, 0u);
  EXPECT_DOUBLE_EQ(r_linear.total.Mat(), 1.0);
  EXPECT_EQ(r_linear.total.Tokens(), r_plain.total.Tokens());
}

// A fresh session's first tree under a curve is a prefix (in rank order) of
// the tree without one; over a replay, a CPU-like curve shortens trees and
// does not lower the projected speed-up on that curve.
TEST(CostAwareSession, TreesArePrefixesOfTheRankingAndPayOnTheirCurve) {
  const Workload w = MakeWorkload();
  BuiltIndex index(w.docs, 41, "budget2.sam");
  const CostCurve cpu = CostCurve::Parse("1,1\n8,1.28\n16,1.32\n32,1.62\n64,2.48\n");
  for (const ReplayTrace& trace : w.traces) {
    DraftTree a, b;
    for (const CostCurve* curve : {static_cast<const CostCurve*>(nullptr), &cpu}) {
      SessionOptions o;
      o.max_dynamic_bytes = 1 << 20;
      o.policy = Policy::kCalibrated;
      o.draft_size = 24;
      if (curve) o.cost_curve = *curve;
      Session s(o);
      s.AttachIndex(&index.view());
      s.Prefill(trace.prompt);
      s.Propose(trace.output[0], 1 << 16, curve ? &b : &a);
    }
    ASSERT_LE(b.size(), a.size());
    for (size_t i = 0; i < b.size(); ++i) {
      EXPECT_EQ(b.tokens[i], a.tokens[i]);
      EXPECT_EQ(b.parents[i], a.parents[i]);
    }
  }
  const ReplayReport plain = ReplayCalibrated(index.view(), w.traces, CostCurve());
  const ReplayReport aware = ReplayCalibrated(index.view(), w.traces, cpu);
  EXPECT_LT(aware.total.TokensPerStep(), plain.total.TokensPerStep());
  EXPECT_GE(aware.ProjectedSpeedup(cpu), plain.ProjectedSpeedup(cpu) * 0.98);
  uint64_t steps = 0, nodes = 0;
  for (size_t n = 0; n < aware.steps_by_size.size(); ++n) {
    steps += aware.steps_by_size[n];
    nodes += n * aware.steps_by_size[n];
  }
  EXPECT_EQ(steps, aware.total.steps);
  EXPECT_EQ(nodes, aware.total.draft_tokens + aware.total.steps);
}

}  // namespace
}  // namespace sam::runtime
