// Tests of the prompt lookup decoding drafter against a brute-force oracle:
// a direct transcription of Spec-Bench's find_candidate_pred_tokens.
#include "sam/runtime/pld.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <stdexcept>
#include <vector>

#include "sam/error.h"
#include "sam/runtime/verify.h"  // Rng

namespace sam::runtime {
namespace {

// for ngram_size in max..1: for every window idx in order: if it equals the
// last ngram_size tokens, start = idx + n, end = start + num_pred, and
// end <= L and start < L - n: return text[start, end).
std::vector<uint32_t> Oracle(const std::vector<uint32_t>& text, size_t max_ngram, size_t num_pred) {
  const size_t length = text.size();
  for (size_t n = max_ngram; n >= 1; --n) {
    if (n > length) continue;
    for (size_t idx = 0; idx + n <= length; ++idx) {
      if (!std::equal(text.begin() + idx, text.begin() + idx + n, text.end() - n)) continue;
      const size_t start = idx + n, end = start + num_pred;
      if (end <= length && start + n < length)
        return std::vector<uint32_t>(text.begin() + start, text.begin() + end);
    }
  }
  return {};
}

std::vector<uint32_t> DraftTokens(const DraftTree& tree) {
  EXPECT_TRUE(tree.IsLinear());
  return std::vector<uint32_t>(tree.tokens.begin() + 1, tree.tokens.end());
}

TEST(PldDrafter, MatchesTheOracleOnRandomSequences) {
  Rng rng(7);
  DraftTree tree;
  size_t drafts = 0;
  for (int trial = 0; trial < 300; ++trial) {
    const size_t max_ngram = 1 + rng.Next() % 4;
    const size_t num_pred = 1 + rng.Next() % 12;
    const uint32_t vocab = 2 + rng.Next() % 6;  // small: many repeats
    PldDrafter pld(max_ngram, num_pred);
    std::vector<uint32_t> history(rng.Next() % 30);
    for (auto& t : history) t = rng.Next() % vocab;
    pld.Prefill(history);
    for (int step = 0; step < 40; ++step) {
      const uint32_t start = rng.Next() % vocab;
      const size_t max_nodes = 1 + rng.Next() % 16;
      std::vector<uint32_t> text = history;
      text.push_back(start);
      std::vector<uint32_t> expected = Oracle(text, max_ngram, num_pred);
      if (expected.size() > max_nodes - 1) expected.resize(max_nodes - 1);
      const bool proposed = pld.Propose(start, max_nodes, &tree);
      ASSERT_EQ(DraftTokens(tree), expected) << "trial " << trial << " step " << step;
      ASSERT_EQ(proposed, !expected.empty());
      ASSERT_EQ(tree.tokens[0], start);
      ASSERT_EQ(tree.source, DraftSource::kPld);
      drafts += proposed;
      // Commit the start token plus a random prefix of the draft (or of
      // random tokens), as a generation loop would.
      std::vector<uint32_t> committed{start};
      const size_t accepted = rng.Next() % 4;
      for (size_t j = 0; j < accepted; ++j)
        committed.push_back(j < expected.size() && rng.Uniform() < 0.7 ? expected[j]
                                                                       : rng.Next() % vocab);
      pld.Commit(committed);
      history.insert(history.end(), committed.begin(), committed.end());
      ASSERT_TRUE(
          std::equal(history.begin(), history.end(), pld.history().begin(), pld.history().end()));
    }
  }
  EXPECT_GT(drafts, 1000u);  // the oracle comparison covered real drafts
}

TEST(PldDrafter, DefaultsAreSpecBenchs) {
  PldDrafter pld;  // n-gram sizes 3..1, 10 tokens
  // "1 2 3 4 ... 13" then "1 2": the trigram "x 1 2" is absent, the bigram
  // "1 2" occurs at 0 and is followed by 10 tokens.
  std::vector<uint32_t> prompt;
  for (uint32_t t = 1; t <= 13; ++t) prompt.push_back(t);
  prompt.push_back(1);
  pld.Prefill(prompt);
  DraftTree tree;
  ASSERT_TRUE(pld.Propose(2, 41, &tree));
  EXPECT_EQ(DraftTokens(tree), (std::vector<uint32_t>{3, 4, 5, 6, 7, 8, 9, 10, 11, 12}));
  EXPECT_EQ(tree.match_len, 2u);
  // Fewer than 10 following tokens: no draft at that occurrence.
  PldDrafter short_history;
  short_history.Prefill(std::vector<uint32_t>{1, 2, 3, 4, 5, 1});
  EXPECT_FALSE(short_history.Propose(2, 41, &tree));
  EXPECT_EQ(tree.size(), 1u);
}

TEST(PldDrafter, ResetForgetsTheHistory) {
  PldDrafter pld(3, 2);
  pld.Prefill(std::vector<uint32_t>{5, 6, 7, 5});
  DraftTree tree;
  EXPECT_TRUE(pld.Propose(6, 10, &tree));
  pld.Reset();
  EXPECT_TRUE(pld.history().empty());
  EXPECT_FALSE(pld.Propose(6, 10, &tree));
  pld.Prefill(std::vector<uint32_t>{1, 1});
  EXPECT_FALSE(pld.Propose(6, 10, &tree));
}

TEST(PldDrafter, RejectsZeroSizes) {
  EXPECT_THROW(PldDrafter(0, 10), sam::Error);
  EXPECT_THROW(PldDrafter(3, 0), sam::Error);
}

}  // namespace
}  // namespace sam::runtime
