// Replay harness on hand-computed traces.
#include "sam/runtime/replay.h"

#include <gtest/gtest.h>

#include <vector>

#include "sam/runtime/session.h"

namespace sam::runtime {
namespace {

TEST(Replay, AcceptedLengthFollowsTheMatchingBranch) {
  DraftTree t;
  t.Reset(1, DraftSource::kStatic);
  int a = t.Add(0, 2);
  t.Add(a, 3);
  int b = t.Add(0, 4);
  int c = t.Add(b, 5);
  t.Add(c, 6);
  std::vector<uint32_t> next = {4, 5, 6, 7};
  EXPECT_EQ(AcceptedLength(t, next), 3u);
  next = {2, 9};
  EXPECT_EQ(AcceptedLength(t, next), 1u);
  next = {9};
  EXPECT_EQ(AcceptedLength(t, next), 0u);
  EXPECT_EQ(AcceptedLength(t, {}), 0u);
}

// Prompt "1 2 3 4 5", output "1 2 3 4 9 9": dynamic-only drafting.
//   step 1: start 1, dynamic match "1" -> draft 2 3 4 5; accepted 2 3 4 (3); bonus 9
//   step 2: start 9, no match -> accepted 0; bonus 9
//   step 3: start 9 (last output token), "9" matched -> draft "?" nothing follows
//           except climbing: "9" first ends at 10 -> empty continuation; accepted 0
// Steps 3, tokens 6: MAT = 2.0.
TEST(Replay, HandComputedMat) {
  SessionOptions o;
  o.max_dynamic_bytes = 1 << 20;
  o.selection.policy = Policy::kDynamicOnly;
  o.selection.draft_size = 5;
  Session session(o);
  std::vector<ReplayTrace> traces = {{"t1", "cat", {1, 2, 3, 4, 5}, {1, 2, 3, 4, 9, 9}}};
  ReplayReport r = Replay(session, traces);
  EXPECT_EQ(r.total.steps, 3u);
  EXPECT_EQ(r.total.tokens, 6u);
  EXPECT_DOUBLE_EQ(r.total.Mat(), 2.0);
  EXPECT_EQ(r.total.accepted, 3u);
  EXPECT_EQ(r.total.verified_nodes, 5u + 1u + 1u);
  EXPECT_EQ(r.by_category["cat"].steps, 3u);
  EXPECT_EQ(r.by_source[static_cast<size_t>(DraftSource::kDynamic)].steps, 1u);
  EXPECT_EQ(r.by_source[static_cast<size_t>(DraftSource::kNone)].steps, 2u);
  EXPECT_EQ(r.accepted_at_depth[2], 1u);
  EXPECT_EQ(r.propose_ns.size(), 3u);
  EXPECT_NEAR(r.DraftShare(), 1.0 / 3.0, 1e-12);
  // The session saw the same acceptance.
  EXPECT_EQ(session.statistics().source(DraftSource::kDynamic).accepted_tokens, 3u);
}

// A drafter that never drafts gives MAT exactly 1.
class NoDrafter : public Drafter {
 public:
  std::string_view name() const override { return "none"; }
  bool Propose(uint32_t start, size_t, DraftTree* out) override {
    out->Reset(start, DraftSource::kNone);
    return false;
  }
};

TEST(Replay, PlainDecodingIsOne) {
  NoDrafter d;
  std::vector<ReplayTrace> traces = {{"a", "x", {1}, {5, 6, 7}}, {"b", "y", {1}, {8}}};
  ReplayReport r = Replay(d, traces);
  EXPECT_DOUBLE_EQ(r.total.Mat(), 1.0);
  EXPECT_DOUBLE_EQ(r.total.TokensPerStep(), 1.0);
  EXPECT_EQ(r.total.steps, 4u);
  EXPECT_DOUBLE_EQ(r.DraftShare(), 0.0);
}

TEST(Replay, PercentileNearestRank) {
  EXPECT_EQ(Percentile({}, 50), 0.0);
  EXPECT_EQ(Percentile({5, 1, 3}, 50), 3.0);
  EXPECT_EQ(Percentile({5, 1, 3}, 99), 5.0);
  EXPECT_EQ(Percentile({5, 1, 3}, 0), 1.0);
}

}  // namespace
}  // namespace sam::runtime
