// Replay harness, statistics and draft-tree limits on hand-computed values.
#include "sam/runtime/percentile.h"
#include "sam/runtime/replay.h"

#include <gtest/gtest.h>

#include <stdexcept>
#include <string>
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
  o.policy = Policy::kDynamicOnly;
  o.draft_size = 5;
  Session session(o);
  std::vector<ReplayTrace> traces = {{"t1", "cat", {1, 2, 3, 4, 5}, {1, 2, 3, 4, 9, 9}, ""}};
  ReplayReport r = Replay(session, traces);
  EXPECT_EQ(r.total.steps, 3u);
  EXPECT_EQ(r.total.Tokens(), 6u);
  EXPECT_DOUBLE_EQ(r.total.Mat(), 2.0);
  EXPECT_EQ(r.total.accepted_tokens, 3u);
  EXPECT_EQ(r.total.draft_tokens, 4u);                        // 5 + 1 + 1 nodes, roots excluded
  EXPECT_DOUBLE_EQ(r.total.TokensPerStep(), 7.0 / 3.0);
  EXPECT_EQ(r.by_category["cat"].steps, 3u);
  EXPECT_EQ(r.by_source[static_cast<size_t>(DraftSource::kDynamic)].steps, 1u);
  EXPECT_DOUBLE_EQ(r.by_source[static_cast<size_t>(DraftSource::kDynamic)].Mat(), 4.0);
  EXPECT_EQ(r.by_source[static_cast<size_t>(DraftSource::kNone)].steps, 2u);
  EXPECT_DOUBLE_EQ(r.by_source[static_cast<size_t>(DraftSource::kNone)].Mat(), 1.0);
  EXPECT_EQ(r.total.accepted_at_depth[2], 1u);
  EXPECT_EQ(r.total.accepted_at_depth[3], 0u);
  EXPECT_EQ(r.propose_ns.size(), 3u);
  EXPECT_NEAR(r.DraftShare(), 1.0 / 3.0, 1e-12);
  // The session counted the same steps with the same type: the same MAT.
  const SessionStatistics& st = session.statistics();
  EXPECT_EQ(st.source(DraftSource::kDynamic).accepted_tokens, 3u);
  EXPECT_EQ(st.Total().steps, 3u);
  EXPECT_DOUBLE_EQ(st.Total().Mat(), 2.0);
  EXPECT_DOUBLE_EQ(st.source(DraftSource::kDynamic).Mat(), 4.0);
}

// SourceStatistics by hand: MAT counts the bonus token, i.e. it is the mean
// over steps of (accepted draft tokens + 1).
TEST(Statistics, MatIsTheMeanOfAcceptedPlusOne) {
  SourceStatistics s;
  EXPECT_EQ(s.Mat(), 0.0);  // no steps
  EXPECT_EQ(s.TokensPerStep(), 0.0);
  DraftTree chain;  // start + 4 draft tokens, depths 1..4
  chain.Reset(7, DraftSource::kStatic);
  for (int i = 0; i < 4; ++i) chain.Add(i, 10 + i);
  chain.match_len = 40;  // bucket 32 (32 and longer)
  DraftTree tree;  // start + 2 children + 1 grandchild: depths 1, 1, 2
  tree.Reset(7, DraftSource::kStatic);
  const int a = tree.Add(0, 1);
  tree.Add(0, 2);
  tree.Add(a, 3);
  tree.match_len = 3;
  DraftTree none;
  none.Reset(7, DraftSource::kNone);
  s.Record(chain, 3);  // 3 + 1 tokens
  s.Record(tree, 0);   // 0 + 1
  s.Record(none, 0);   // 0 + 1
  s.Record(chain, 4);  // 4 + 1
  // Steps 4; tokens (3+1) + (0+1) + (0+1) + (4+1) = 11; MAT = 11/4.
  EXPECT_EQ(s.steps, 4u);
  EXPECT_EQ(s.accepted_tokens, 7u);
  EXPECT_EQ(s.Tokens(), 11u);
  EXPECT_DOUBLE_EQ(s.Mat(), 2.75);
  // Verified nodes 5 + 4 + 1 + 5 = 15, draft tokens 4 + 3 + 0 + 4 = 11.
  EXPECT_EQ(s.draft_tokens, 11u);
  EXPECT_DOUBLE_EQ(s.TokensPerStep(), 3.75);
  // Depth reached by a proposal: chain 1..4 (twice), tree 1..2.
  EXPECT_EQ(s.proposed_at_depth[0], 3u);
  EXPECT_EQ(s.proposed_at_depth[1], 3u);
  EXPECT_EQ(s.proposed_at_depth[2], 2u);
  EXPECT_EQ(s.proposed_at_depth[3], 2u);
  EXPECT_EQ(s.proposed_at_depth[4], 0u);
  // Accepted paths: 3 and 4 long.
  EXPECT_EQ(s.accepted_at_depth[0], 2u);
  EXPECT_EQ(s.accepted_at_depth[2], 2u);
  EXPECT_EQ(s.accepted_at_depth[3], 1u);
  EXPECT_EQ(s.accepted_at_depth[4], 0u);
  EXPECT_EQ(s.steps_by_match_length[32], 2u);
  EXPECT_EQ(s.accepted_by_match_length[32], 7u);
  EXPECT_EQ(s.steps_by_match_length[3], 1u);
  EXPECT_EQ(s.steps_by_match_length[0], 1u);

  // Merging is adding: two halves give the whole.
  SourceStatistics first, second;
  first.Record(chain, 3);
  first.Record(tree, 0);
  second.Record(none, 0);
  second.Record(chain, 4);
  first.Merge(second);
  EXPECT_EQ(first.steps, s.steps);
  EXPECT_EQ(first.Tokens(), s.Tokens());
  EXPECT_EQ(first.accepted_at_depth, s.accepted_at_depth);
  EXPECT_EQ(first.proposed_at_depth, s.proposed_at_depth);
  EXPECT_DOUBLE_EQ(first.Mat(), 2.75);

  // The session's JSON carries the same figures under the same names.
  SessionStatistics session;
  session.source(DraftSource::kStatic) = s;
  const std::string json = session.ToJson();
  EXPECT_NE(json.find("\"static\":{\"steps\":4,\"draft_tokens\":11,\"accepted_tokens\":7,"
                      "\"mat\":2.75,"),
            std::string::npos)
      << json;
}

// Depths are uint16_t: a tree refuses a node below depth 65535 instead of
// wrapping its depth to 0; everything shallower is still accepted.
TEST(DraftTreeLimits, DepthNeverWraps) {
  DraftTree t;
  t.Reset(1, DraftSource::kOther);
  int node = 0;
  for (uint32_t d = 1; d <= 65535; ++d) node = t.Add(node, d % 7);
  ASSERT_EQ(t.size(), 65536u);
  EXPECT_EQ(t.depths.back(), 65535);  // at the limit
  EXPECT_EQ(node, 65535);
  EXPECT_THROW(t.Add(node, 3), sam::Error);  // beyond: refused
  EXPECT_EQ(t.size(), 65536u);                        // unchanged
  EXPECT_EQ(t.parents.size(), 65536u);
  EXPECT_EQ(t.depths.size(), 65536u);
  const int sibling = t.Add(node - 1, 5);  // another node at depth 65535 is fine
  EXPECT_EQ(t.depths[sibling], 65535);
  for (size_t i = 1; i < t.size(); ++i) ASSERT_EQ(t.depths[i], t.depths[t.parents[i]] + 1) << i;
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
  std::vector<ReplayTrace> traces = {{"a", "x", {1}, {5, 6, 7}, ""}, {"b", "y", {1}, {8}, ""}};
  ReplayReport r = Replay(d, traces);
  EXPECT_DOUBLE_EQ(r.total.Mat(), 1.0);
  EXPECT_DOUBLE_EQ(r.total.TokensPerStep(), 1.0);
  EXPECT_EQ(r.total.steps, 4u);
  EXPECT_DOUBLE_EQ(r.DraftShare(), 0.0);
}

TEST(Replay, HooksRunAroundEachTraceInOrder) {
  // A drafter that logs its calls; the hooks log theirs in the same list.
  class Logger : public Drafter {
   public:
    explicit Logger(std::vector<std::string>* log) : log_(log) {}
    std::string_view name() const override { return "logger"; }
    void Reset() override { log_->push_back("reset"); }
    bool Propose(uint32_t start, size_t, DraftTree* out) override {
      out->Reset(start, DraftSource::kNone);
      return false;
    }
    void Commit(std::span<const uint32_t>) override { log_->push_back("commit"); }

   private:
    std::vector<std::string>* log_;
  };
  std::vector<std::string> log;
  Logger logger(&log);
  std::vector<ReplayTrace> traces = {{"a", "x", {1}, {5, 6}, "t1"}, {"b", "y", {1}, {8}, "t2"}};
  ReplayHooks hooks;
  hooks.before_trace = [&](const ReplayTrace& t) { log.push_back("before " + t.tenant); };
  hooks.after_trace = [&](const ReplayTrace& t) { log.push_back("after " + t.id); };
  Replay(logger, traces, 40, hooks);
  EXPECT_EQ(log, (std::vector<std::string>{"before t1", "reset", "commit", "commit", "after a",
                                           "before t2", "reset", "commit", "after b"}));
}

TEST(Replay, PercentileNearestRank) {
  EXPECT_EQ(Percentile({}, 50), 0.0);
  EXPECT_EQ(Percentile({5, 1, 3}, 50), 3.0);
  EXPECT_EQ(Percentile({5, 1, 3}, 99), 5.0);
  EXPECT_EQ(Percentile({5, 1, 3}, 0), 1.0);
}

}  // namespace
}  // namespace sam::runtime
