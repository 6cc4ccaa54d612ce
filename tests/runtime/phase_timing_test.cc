// phase_timing.h: a default build records nothing (the marks compile away);
// a build configured with -DSAM_PHASE_TIMING=ON records one sample of each
// phase per step that passes through it, per thread. The test holds in
// either build (CI runs the default one).
#include <gtest/gtest.h>

#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "sam/runtime/draft.h"
#include "sam/runtime/phase_timing.h"
#include "sam/runtime/replay.h"
#include "sam/runtime/session.h"
#include "sam/runtime/static_index.h"
#include "test_index.h"

namespace sam::runtime {
namespace {

using test_util::BuiltIndex;
using test_util::RandomTexts;
using test_util::Text;

TEST(PhaseTiming, NamesAreDistinct) {
  std::set<std::string> names;
  for (size_t p = 0; p < kNumPhases; ++p) names.insert(std::string(PhaseName(p)));
  EXPECT_EQ(names.size(), size_t{kNumPhases});
  EXPECT_EQ(names.count("?"), 0u);
  EXPECT_EQ(PhaseName(kNumPhases), "?");
  EXPECT_TRUE(PhaseTimes(kNumPhases).empty());
}

// Runs `steps` calibrated steps on a fresh session over an index of random
// documents, the generation copied from them (so that drafts get accepted).
size_t RunSteps(const BuiltIndex& built, const std::vector<Text>& docs, size_t steps) {
  SessionOptions o;
  o.max_dynamic_bytes = 1 << 20;
  o.policy = Policy::kCalibrated;
  o.draft_size = 16;
  Session s(o);
  StaticIndex::Options h;
  h.record_min_count = 2;
  s.AttachIndex(StaticIndex::Create(&built.view(), h));
  s.Prefill(docs[0]);
  Text gen;
  for (size_t d = 1; gen.size() < 40 * steps; ++d)
    gen.insert(gen.end(), docs[d % docs.size()].begin(), docs[d % docs.size()].end());
  size_t i = 0, done = 0;
  for (; done < steps && i + 1 < gen.size(); ++done) {
    const DraftTree& t = s.Propose(gen[i]);
    const size_t a = AcceptedLength(t, std::span<const uint32_t>(gen).subspan(i + 1));
    s.Commit(std::span<const uint32_t>(gen).subspan(i, a + 1));
    i += a + 1;
  }
  return done;
}

TEST(PhaseTiming, OneSampleAPhaseAStepWhenEnabledElseNone) {
  std::mt19937 rng(7);
  const uint32_t vocab = 50;
  const std::vector<Text> docs = RandomTexts(rng, 30, 20, 40, vocab);
  BuiltIndex built(docs, vocab, "phase_timing.sam");
  ClearPhaseTimes();
  const size_t steps = RunSteps(built, docs, 100);
  ASSERT_EQ(steps, 100u);
  if (!PhaseTimingEnabled()) {
    for (size_t p = 0; p < kNumPhases; ++p) EXPECT_TRUE(PhaseTimes(p).empty()) << PhaseName(p);
    return;
  }
  // Every step peeks, looks up, sets up, ranks and commits; the ranking's
  // stages only as far as its tree grew.
  for (Phase p : {kPeek, kDynamicLookup, kCalSetup, kCalRankRest, kCommitAccept, kCommitCursors,
                  kCommitUpdate})
    EXPECT_EQ(PhaseTimes(p).size(), steps) << PhaseName(p);
  EXPECT_GE(PhaseTimes(kCalRankTo2).size(), PhaseTimes(kCalRankTo4).size());
  EXPECT_GE(PhaseTimes(kCalRankTo4).size(), PhaseTimes(kCalRankTo8).size());
  EXPECT_LE(PhaseTimes(kCalOutput).size(), steps);
  EXPECT_GT(PhaseTimes(kCalOutput).size(), steps / 2);
  // Per thread: another thread's steps are its own.
  size_t other = 0;
  std::thread t([&] {
    RunSteps(built, docs, 10);
    other = PhaseTimes(kPeek).size();
  });
  t.join();
  EXPECT_EQ(other, 10u);
  EXPECT_EQ(PhaseTimes(kPeek).size(), steps);
  ClearPhaseTimes();
  for (size_t p = 0; p < kNumPhases; ++p) EXPECT_TRUE(PhaseTimes(p).empty()) << PhaseName(p);
}

}  // namespace
}  // namespace sam::runtime
