// Many threads, each with its own sessions, over one shared index file give
// the same drafts as one thread. Labelled `tsan` for ThreadSanitizer builds.
#include <gtest/gtest.h>

#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "sam/format/index.h"
#include "sam/runtime/replay.h"
#include "sam/runtime/session.h"
#include "test_index.h"

namespace sam::runtime {
namespace {

using test_util::Text;

// Replays `traces` with a fresh session and returns every proposed tree.
// With `shared`, the session attaches it instead of the bare view.
std::vector<DraftTree> Drafts(const format::IndexView* view, Policy policy,
                              const std::vector<ReplayTrace>& traces,
                              std::shared_ptr<const StaticIndex> shared = nullptr) {
  SessionOptions o;
  o.max_dynamic_bytes = 1 << 20;
  o.policy = policy;
  Session session(o);
  if (shared) session.AttachIndex(shared); else session.AttachIndex(view);
  std::vector<DraftTree> out;
  for (const ReplayTrace& t : traces) {
    session.Reset();
    session.Prefill(t.prompt);
    size_t i = 0;
    while (i < t.output.size()) {
      const DraftTree& tree = session.Propose(t.output[i]);
      out.push_back(tree);
      size_t a = AcceptedLength(tree, std::span<const uint32_t>(t.output).subspan(i + 1));
      session.Commit(std::span<const uint32_t>(t.output).subspan(i, a + 1));
      i += a + 1;
    }
  }
  return out;
}

TEST(Concurrency, SharedIndexSameDraftsAsOneThread) {
  std::mt19937 rng(77);
  const std::vector<Text> docs = test_util::RandomTexts(rng, 200, 30, 60, 50);
  const test_util::BuiltIndex index(docs, 50, "conc.sam");
  const format::IndexFile& file = index.file;
  std::vector<ReplayTrace> traces(6);
  for (auto& t : traces) {
    // Outputs copy corpus pieces so that drafts get accepted.
    t.prompt = docs[rng() % docs.size()];
    for (int piece = 0; piece < 5; ++piece) {
      const Text& d = docs[rng() % docs.size()];
      size_t from = rng() % (d.size() / 2);
      t.output.insert(t.output.end(), d.begin() + from, d.begin() + from + 10);
    }
  }
  const Policy policies[] = {Policy::kPaper, Policy::kTree, Policy::kCalibrated};
  std::vector<std::vector<DraftTree>> expected;
  for (Policy p : policies) expected.push_back(Drafts(&file.view(), p, traces));

  // Odd threads share one StaticIndex (hub tables): same drafts.
  const auto shared = StaticIndex::Create(&file.view(), {.min_degree = 4, .top_k = 8});
  constexpr int kThreads = 8;
  std::vector<std::vector<std::vector<DraftTree>>> got(kThreads);
  std::vector<std::thread> threads;
  for (int th = 0; th < kThreads; ++th) {
    threads.emplace_back([&, th] {
      for (Policy p : policies)
        got[th].push_back(Drafts(&file.view(), p, traces, th % 2 ? shared : nullptr));
    });
  }
  for (auto& t : threads) t.join();
  for (int th = 0; th < kThreads; ++th) {
    for (size_t p = 0; p < expected.size(); ++p) {
      ASSERT_EQ(got[th][p].size(), expected[p].size());
      for (size_t k = 0; k < expected[p].size(); ++k) {
        EXPECT_EQ(got[th][p][k].tokens, expected[p][k].tokens);
        EXPECT_EQ(got[th][p][k].parents, expected[p][k].parents);
      }
    }
  }
}

}  // namespace
}  // namespace sam::runtime
