// sam_propose_batch gives the drafts of sam_session_propose on each session
// in turn; bad arguments are refused before anything is drafted.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "sam/automaton/builder.h"
#include "sam/runtime/replay.h"  // AcceptedLength
#include "sam/sam.h"

namespace {

constexpr uint32_t kVocab = 40;
using Text = std::vector<uint32_t>;

struct Stream {
  Text prompt, output;
  size_t at = 0;
};

std::vector<uint32_t> Tokens(const sam_draft& d) { return {d.tokens, d.tokens + d.count}; }

// Commits what the stream accepts of draft d.
void Advance(const sam_draft& d, sam_session* session, Stream* s) {
  sam::runtime::DraftTree tree;
  tree.tokens.assign(d.tokens, d.tokens + d.count);
  tree.parents.assign(d.parents, d.parents + d.count);
  tree.depths.assign(d.depths, d.depths + d.count);
  const std::span<const uint32_t> out(s->output);
  const size_t a = sam::runtime::AcceptedLength(tree, out.subspan(s->at + 1));
  ASSERT_EQ(sam_session_commit(session, &s->output[s->at], a + 1), SAM_OK) << sam_last_error();
  s->at += a + 1;
}

TEST(CapiBatch, SameDraftsAsSessionPropose) {
  std::mt19937 rng(3);
  std::vector<Text> docs(120);
  for (Text& d : docs) {
    d.resize(30 + rng() % 40);
    for (auto& t : d) t = 2 + rng() % (kVocab - 2);
  }
  const std::string path =
      testing::TempDir() + "capi_batch_" + std::to_string(::getpid()) + ".sam";
  sam::automaton::BuildIndexFile(docs, kVocab, path);
  sam_index* index = nullptr;
  ASSERT_EQ(sam_index_open(path.c_str(), nullptr, 0, &index), SAM_OK) << sam_last_error();
  std::remove(path.c_str());  // stays mapped

  constexpr size_t kSessions = 33;
  std::vector<Stream> streams(kSessions);
  for (Stream& s : streams) {
    s.prompt = docs[rng() % docs.size()];
    for (int piece = 0; piece < 5; ++piece) {
      const Text& d = docs[rng() % docs.size()];
      const size_t from = rng() % (d.size() / 2);
      s.output.insert(s.output.end(), d.begin() + from, d.begin() + from + 10);
    }
  }
  for (int policy : {SAM_POLICY_PAPER, SAM_POLICY_TREE, SAM_POLICY_CALIBRATED}) {
    std::vector<Stream> batched_streams = streams, single_streams = streams;
    std::vector<sam_session*> batched(kSessions), single(kSessions);
    for (size_t i = 0; i < kSessions; ++i) {
      sam_session_config o;
      sam_session_config_init(&o);
      o.policy = policy;
      for (sam_session** s : {&batched[i], &single[i]}) {
        ASSERT_EQ(sam_session_new(&o, s), SAM_OK) << sam_last_error();
        ASSERT_EQ(sam_session_attach_index(*s, index), SAM_OK);
        ASSERT_EQ(sam_session_prefill(*s, streams[i].prompt.data(), streams[i].prompt.size()),
                  SAM_OK);
      }
    }
    sam_draft_pool* pool = nullptr;
    ASSERT_EQ(sam_draft_pool_new(3, &pool), SAM_OK) << sam_last_error();
    EXPECT_EQ(sam_draft_pool_num_threads(pool), 3u);
    std::vector<sam_draft> drafts(kSessions);
    std::vector<int> statuses(kSessions, -1);
    std::vector<uint32_t> starts(kSessions);
    // Every stream has at least 50 tokens: 40 steps stay inside them.
    for (int step = 0; step < 40; ++step) {
      bool any = false;
      for (size_t i = 0; i < kSessions; ++i) {
        const Stream& s = batched_streams[i];
        starts[i] = s.output[std::min(s.at, s.output.size() - 1)];
      }
      ASSERT_EQ(sam_propose_batch(pool, batched.data(), starts.data(), nullptr, kSessions, drafts.data(),
                                  statuses.data()),
                SAM_OK)
          << sam_last_error();
      for (size_t i = 0; i < kSessions; ++i) {
        ASSERT_EQ(statuses[i], SAM_OK);
        sam_draft want;
        ASSERT_EQ(sam_session_propose(single[i], starts[i], 0, &want), SAM_OK);
        ASSERT_EQ(Tokens(drafts[i]), Tokens(want)) << "session " << i << ", step " << step;
        ASSERT_EQ(drafts[i].source, want.source);
        // The batch's draft is the session's proposal, as sam_session_propose's is: the
        // verification calls see it (the same argmax gives the same result on both).
        std::vector<uint32_t> argmax(drafts[i].count);
        for (size_t j = 0; j < argmax.size(); ++j) argmax[j] = (drafts[i].tokens[j] * 7 + j) % 11;
        sam_verify_result got, expected;
        ASSERT_EQ(sam_session_verify_greedy(batched[i], argmax.data(), argmax.size(), &got), SAM_OK)
            << sam_last_error();
        ASSERT_EQ(sam_session_verify_greedy(single[i], argmax.data(), argmax.size(), &expected),
                  SAM_OK)
            << sam_last_error();
        EXPECT_EQ(got.accepted_count, expected.accepted_count);
        EXPECT_EQ(got.bonus_token, expected.bonus_token);
        if (batched_streams[i].at + 1 >= batched_streams[i].output.size()) continue;
        any = true;
        Advance(drafts[i], batched[i], &batched_streams[i]);
        Advance(want, single[i], &single_streams[i]);
      }
      if (!any) break;
    }
    // Bad arguments: nothing drafted.
    EXPECT_EQ(sam_propose_batch(nullptr, batched.data(), starts.data(), nullptr, kSessions, drafts.data(),
                                statuses.data()),
              SAM_ERR_INVALID_ARGUMENT);
    EXPECT_EQ(sam_propose_batch(pool, batched.data(), starts.data(), nullptr, kSessions, drafts.data(),
                                nullptr),
              SAM_ERR_INVALID_ARGUMENT);
    sam_session* with_null[2] = {batched[0], nullptr};
    EXPECT_EQ(sam_propose_batch(pool, with_null, starts.data(), nullptr, 2, drafts.data(), statuses.data()),
              SAM_ERR_INVALID_ARGUMENT);
    EXPECT_NE(std::string(sam_last_error()).find("session 1 is NULL"), std::string::npos);
    EXPECT_EQ(sam_propose_batch(pool, nullptr, nullptr, nullptr, 0, nullptr, nullptr), SAM_OK);
    sam_draft_pool_free(pool);
    for (size_t i = 0; i < kSessions; ++i) {
      sam_session_free(batched[i]);
      sam_session_free(single[i]);
    }
  }
  sam_index_close(index);
}

}  // namespace
