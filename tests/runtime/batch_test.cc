// DraftPool::Propose drafts like each session's own Propose, one after the
// other; errors stay with their session. Labelled `tsan` for
// ThreadSanitizer builds.
#include <gtest/gtest.h>

#include <memory>
#include <random>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "sam/error.h"
#include "sam/runtime/batch.h"
#include "sam/runtime/replay.h"
#include "sam/runtime/session.h"
#include "test_index.h"

namespace sam::runtime {
namespace {

using test_util::Text;

struct Stream {
  Text prompt;
  Text output;  // start tokens and the tokens that verification accepts
  size_t at = 0;
};

// Streams whose outputs copy corpus pieces, so that drafts get accepted.
std::vector<Stream> MakeStreams(std::mt19937& rng, const std::vector<Text>& docs, size_t n) {
  std::vector<Stream> streams(n);
  for (Stream& s : streams) {
    s.prompt = docs[rng() % docs.size()];
    for (int piece = 0; piece < 6; ++piece) {
      const Text& d = docs[rng() % docs.size()];
      const size_t from = rng() % (d.size() / 2);
      s.output.insert(s.output.end(), d.begin() + from, d.begin() + from + 10);
    }
  }
  return streams;
}

std::vector<std::unique_ptr<Session>> MakeSessions(const std::vector<Stream>& streams,
                                                   std::shared_ptr<const StaticIndex> index,
                                                   Policy policy,
                                                   DraftShape shape = DraftShape::kTree) {
  std::vector<std::unique_ptr<Session>> sessions;
  for (const Stream& s : streams) {
    SessionOptions o;
    o.max_dynamic_bytes = 1 << 20;
    o.policy = policy;
    o.shape = shape;
    sessions.push_back(std::make_unique<Session>(o));
    sessions.back()->AttachIndex(index);
    sessions.back()->Prefill(s.prompt);
  }
  return sessions;
}

// Commits what the stream accepts of `tree` and moves the stream on.
void Advance(const DraftTree& tree, Session* session, Stream* s) {
  const std::span<const uint32_t> out(s->output);
  const size_t a = AcceptedLength(tree, out.subspan(s->at + 1));
  session->Commit(out.subspan(s->at, a + 1));
  s->at += a + 1;
}

TEST(DraftPool, SameDraftsAsSequentialPropose) {
  std::mt19937 rng(91);
  const std::vector<Text> docs = test_util::RandomTexts(rng, 200, 30, 60, 50);
  const test_util::BuiltIndex built(docs, 50, "batch.sam");
  const auto index = StaticIndex::Create(&built.view(), {.min_degree = 4, .top_k = 8});
  const Policy policies[] = {Policy::kPaper, Policy::kStaticOnly, Policy::kTree,
                             Policy::kCalibrated};
  for (size_t threads : {1, 3, 8}) {
    DraftPool pool(threads);
    ASSERT_EQ(pool.num_threads(), threads);
    for (Policy policy : policies) {
      for (size_t n : {1, 2, 17, 64}) {
        SCOPED_TRACE("threads " + std::to_string(threads) + ", policy " +
                     std::to_string(static_cast<int>(policy)) + ", n " + std::to_string(n));
        std::vector<Stream> streams = MakeStreams(rng, docs, n);
        std::vector<Stream> expected_streams = streams;
        auto batched = MakeSessions(streams, index, policy);
        auto sequential = MakeSessions(streams, index, policy);
        std::vector<Session*> active;
        std::vector<size_t> which;
        std::vector<uint32_t> starts;
        std::vector<BatchDraft> drafts;
        for (;;) {
          // Sessions whose stream is not done take part in this step.
          active.clear();
          which.clear();
          starts.clear();
          for (size_t i = 0; i < n; ++i) {
            if (streams[i].at >= streams[i].output.size()) continue;
            active.push_back(batched[i].get());
            which.push_back(i);
            starts.push_back(streams[i].output[streams[i].at]);
          }
          if (active.empty()) break;
          drafts.assign(active.size(), {});
          pool.Propose(active, starts, drafts);
          for (size_t k = 0; k < active.size(); ++k) {
            const size_t i = which[k];
            ASSERT_FALSE(drafts[k].error);
            ASSERT_NE(drafts[k].tree, nullptr);
            const DraftTree& want = sequential[i]->Propose(starts[k]);
            ASSERT_EQ(drafts[k].tree->tokens, want.tokens);
            ASSERT_EQ(drafts[k].tree->parents, want.parents);
            Advance(*drafts[k].tree, batched[i].get(), &streams[i]);
            Advance(want, sequential[i].get(), &expected_streams[i]);
          }
        }
      }
    }
  }
}

// Per-session node limits: each session drafts what its own
// Propose(start, max_nodes) drafts, trees and chains alike.
TEST(DraftPool, PerSessionNodeLimits) {
  std::mt19937 rng(33);
  const std::vector<Text> docs = test_util::RandomTexts(rng, 200, 30, 60, 50);
  const test_util::BuiltIndex built(docs, 50, "batch_limits.sam");
  const auto index = StaticIndex::Create(&built.view(), {.min_degree = 4, .top_k = 8});
  DraftPool pool(3);
  for (DraftShape shape : {DraftShape::kTree, DraftShape::kChain}) {
    for (Policy policy : {Policy::kPaper, Policy::kCalibrated}) {
      SCOPED_TRACE(std::string(DraftShapeName(shape)) + ", policy " +
                   std::to_string(static_cast<int>(policy)));
      constexpr size_t n = 24;
      std::vector<Stream> streams = MakeStreams(rng, docs, n);
      std::vector<Stream> expected_streams = streams;
      auto batched = MakeSessions(streams, index, policy, shape);
      auto sequential = MakeSessions(streams, index, policy, shape);
      std::vector<Session*> active;
      std::vector<size_t> which, limits;
      std::vector<uint32_t> starts;
      std::vector<BatchDraft> drafts;
      size_t checked = 0;
      for (;;) {
        active.clear();
        which.clear();
        starts.clear();
        limits.clear();
        for (size_t i = 0; i < n; ++i) {
          if (streams[i].at >= streams[i].output.size()) continue;
          active.push_back(batched[i].get());
          which.push_back(i);
          starts.push_back(streams[i].output[streams[i].at]);
          limits.push_back(1 + (i + streams[i].at) % 9);  // 1 .. 9 nodes
        }
        if (active.empty()) break;
        drafts.assign(active.size(), {});
        pool.Propose(active, starts, limits, drafts);
        for (size_t k = 0; k < active.size(); ++k) {
          const size_t i = which[k];
          ASSERT_FALSE(drafts[k].error);
          const DraftTree& want = sequential[i]->Propose(starts[k], limits[k]);
          ASSERT_EQ(drafts[k].tree->tokens, want.tokens);
          ASSERT_EQ(drafts[k].tree->parents, want.parents);
          ASSERT_LE(want.size(), limits[k]);
          if (shape == DraftShape::kChain) {
            ASSERT_TRUE(want.IsLinear());
          }
          ++checked;
          Advance(*drafts[k].tree, batched[i].get(), &streams[i]);
          Advance(want, sequential[i].get(), &expected_streams[i]);
        }
      }
      EXPECT_GT(checked, n);
      std::vector<Session*> all;
      for (auto& s : batched) all.push_back(s.get());
      std::vector<uint32_t> all_starts(n, 1);
      std::vector<BatchDraft> out(n);
      EXPECT_THROW(pool.Propose(all, all_starts, std::vector<size_t>(n - 1, 4), out), Error);
    }
  }
}

// A fallback drafter that fails on one start token.
class FailingDrafter : public Drafter {
 public:
  static constexpr uint32_t kPoison = 7;
  std::string_view name() const override { return "failing"; }
  bool Propose(uint32_t start_token, size_t, DraftTree* out) override {
    if (start_token == kPoison)
      throw Error(ErrorCode::kInternal, "poisoned start token");
    out->Reset(start_token, DraftSource::kOther);
    return false;
  }
};

TEST(DraftPool, ErrorsStayWithTheirSession) {
  std::mt19937 rng(5);
  const std::vector<Text> docs = test_util::RandomTexts(rng, 50, 30, 20, 50);
  const test_util::BuiltIndex built(docs, 50, "batch_err.sam");
  const auto index = StaticIndex::Create(&built.view(), {});
  FailingDrafter failing;
  constexpr size_t kSessions = 40;
  std::vector<std::unique_ptr<Session>> sessions;
  std::vector<Session*> pointers;
  std::vector<uint32_t> starts;
  for (size_t i = 0; i < kSessions; ++i) {
    SessionOptions o;
    o.max_dynamic_bytes = 1 << 20;
    o.fallback = &failing;
    o.paper.l_threshold = 1000;  // always fall back
    sessions.push_back(std::make_unique<Session>(o));
    sessions.back()->AttachIndex(index);
    sessions.back()->Prefill(docs[i]);
    pointers.push_back(sessions.back().get());
    starts.push_back(i % 3 == 0 ? FailingDrafter::kPoison : 1);
  }
  DraftPool pool(4);
  std::vector<BatchDraft> drafts(kSessions);
  for (int round = 0; round < 3; ++round) {
    pool.Propose(pointers, starts, drafts);
    for (size_t i = 0; i < kSessions; ++i) {
      if (i % 3 == 0) {
        ASSERT_TRUE(drafts[i].error) << i;
        EXPECT_EQ(drafts[i].tree, nullptr);
        try {
          std::rethrow_exception(drafts[i].error);
        } catch (const Error& e) {
          EXPECT_EQ(e.code(), ErrorCode::kInternal);
        }
      } else {
        EXPECT_FALSE(drafts[i].error) << i;
        ASSERT_NE(drafts[i].tree, nullptr);
        EXPECT_EQ(drafts[i].tree->tokens.at(0), 1u);
      }
    }
  }
  // Mismatched sizes and null sessions are refused before drafting.
  std::vector<BatchDraft> short_out(kSessions - 1);
  EXPECT_THROW(pool.Propose(pointers, starts, short_out), Error);
  pointers[5] = nullptr;
  EXPECT_THROW(pool.Propose(pointers, starts, drafts), Error);
}

// Two threads calling one pool, each with its own sessions: the calls run
// one after the other and each gets its own sessions' drafts.
TEST(DraftPool, ConcurrentCallsOnOnePool) {
  std::mt19937 rng(12);
  const std::vector<Text> docs = test_util::RandomTexts(rng, 100, 30, 40, 50);
  const test_util::BuiltIndex built(docs, 50, "batch_conc.sam");
  const auto index = StaticIndex::Create(&built.view(), {});
  DraftPool pool(3);
  constexpr size_t kSessions = 20;
  auto run = [&](uint32_t seed, std::vector<std::vector<uint32_t>>* got) {
    std::mt19937 local(seed);
    std::vector<Stream> streams = MakeStreams(local, docs, kSessions);
    auto sessions = MakeSessions(streams, index, Policy::kTree);
    std::vector<Session*> pointers;
    for (auto& s : sessions) pointers.push_back(s.get());
    std::vector<uint32_t> starts(kSessions);
    std::vector<BatchDraft> drafts(kSessions);
    for (int step = 0; step < 30; ++step) {
      for (size_t i = 0; i < kSessions; ++i)
        starts[i] = streams[i].output[std::min(streams[i].at, streams[i].output.size() - 1)];
      pool.Propose(pointers, starts, drafts);
      for (size_t i = 0; i < kSessions; ++i) {
        if (drafts[i].error) std::rethrow_exception(drafts[i].error);
        got->push_back(drafts[i].tree->tokens);
        if (streams[i].at + 1 < streams[i].output.size())
          Advance(*drafts[i].tree, sessions[i].get(), &streams[i]);
      }
    }
  };
  std::vector<std::vector<uint32_t>> want_a, want_b, got_a, got_b;
  run(1, &want_a);
  run(2, &want_b);
  std::thread a([&] { run(1, &got_a); });
  std::thread b([&] { run(2, &got_b); });
  a.join();
  b.join();
  EXPECT_EQ(got_a, want_a);
  EXPECT_EQ(got_b, want_b);
}

}  // namespace
}  // namespace sam::runtime
