// Sessions: incremental vs rebuilt, multi-index, selection decisions,
// draft shapes, statistics, fallback drafters.
#include "sam/runtime/session.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <random>
#include <stdexcept>
#include <tuple>
#include <type_traits>
#include <string>
#include <vector>

#include "sam/error.h"
#include "sam/format/index.h"
#include "sam/runtime/options.h"
#include "sam/runtime/recycling.h"
#include "sam/runtime/replay.h"
#include "test_index.h"
#include "thrown.h"

namespace sam::runtime {
namespace {

using test_util::BuiltIndex;
using test_util::RandomTexts;
using test_util::Text;

// Brute force: the length of the longest suffix of `text` that occurs inside
// one of `docs` (static matches never cross a document end).
uint64_t LongestSuffixInDocs(const std::vector<Text>& docs, const Text& text) {
  uint64_t best = 0;
  for (const Text& d : docs)
    for (size_t end = 1; end <= d.size(); ++end) {
      uint64_t len = 0;
      while (len < end && len < text.size() && d[end - 1 - len] == text[text.size() - 1 - len])
        ++len;
      best = std::max(best, len);
    }
  return best;
}

bool SameTree(const DraftTree& a, const DraftTree& b) {
  return a.tokens == b.tokens && a.parents == b.parents && a.source == b.source &&
         a.match_len == b.match_len;
}

// ---------------------------------------------------------------- selection

TEST(Selection, PaperRuleDecisions) {
  PaperOptions o;  // l_bias auto, l_threshold 5
  // With a fallback: bias 5.
  EXPECT_EQ(ChoosePaper(5, 0, true, o), Choice::kDynamic);
  EXPECT_EQ(ChoosePaper(4, 9, true, o), Choice::kFallback);   // l_s' = 4 < 5
  EXPECT_EQ(ChoosePaper(4, 10, true, o), Choice::kStatic);    // l_s' = 5 > 4
  EXPECT_EQ(ChoosePaper(5, 10, true, o), Choice::kDynamic);   // tie goes to dynamic
  EXPECT_EQ(ChoosePaper(0, 0, true, o), Choice::kFallback);
  EXPECT_EQ(ChoosePaper(7, 20, true, o), Choice::kStatic);
  // Without a fallback: bias 0 and any match drafts.
  EXPECT_EQ(ChoosePaper(1, 0, false, o), Choice::kDynamic);
  EXPECT_EQ(ChoosePaper(1, 2, false, o), Choice::kStatic);
  EXPECT_EQ(ChoosePaper(2, 2, false, o), Choice::kDynamic);
  EXPECT_EQ(ChoosePaper(0, 0, false, o), Choice::kNone);
  // Explicit bias.
  o.l_bias = 2;
  EXPECT_EQ(ChoosePaper(3, 6, false, o), Choice::kStatic);
  EXPECT_EQ(ChoosePaper(4, 6, false, o), Choice::kDynamic);
  o.l_threshold = 8;
  EXPECT_EQ(ChoosePaper(7, 9, true, o), Choice::kFallback);
}

TEST(Selection, AdaptiveLength) {
  SessionOptions o;
  EXPECT_EQ(LinearDraftSize(1, o), 40u);
  o.tuning.adaptive_length = true;
  EXPECT_EQ(LinearDraftSize(1, o), 5u);
  EXPECT_EQ(LinearDraftSize(3, o), 13u);
  EXPECT_EQ(LinearDraftSize(100, o), 40u);
}

// ---------------------------------------------------------------- sessions

// Dynamic-only session over a constructed text: the draft copies what
// followed the first occurrence, climbing links when it is short.
TEST(Session, DynamicDraftCopiesFirstOccurrence) {
  SessionOptions o;
  o.max_dynamic_bytes = 1 << 20;
  o.policy = Policy::kDynamicOnly;
  o.draft_size = 5;
  Session s(o);
  s.Prefill(Text{1, 2, 3, 4, 5, 6, 9, 2, 3});
  const DraftTree& t = s.Propose(4);  // "2 3 4" matched at 2..4
  EXPECT_EQ(t.source, DraftSource::kDynamic);
  EXPECT_EQ(t.match_len, 3u);
  EXPECT_EQ(t.tokens, (Text{4, 5, 6, 9, 2}));
  EXPECT_TRUE(t.IsLinear());
  // Peek: nothing was committed.
  EXPECT_EQ(s.dynamic_sam().size(), 9u);
  s.Commit(Text{4, 5});
  EXPECT_EQ(s.dynamic_sam().size(), 11u);
  EXPECT_EQ(s.statistics().source(DraftSource::kDynamic).accepted_tokens, 1u);
  // No match at all: root only.
  const DraftTree& none = s.Propose(77);
  EXPECT_EQ(none.size(), 1u);
  EXPECT_EQ(none.source, DraftSource::kNone);
}

TEST(Session, StaticDraftStopsAtDocumentEnd) {
  BuiltIndex index({{10, 11, 12, 13}, {11, 12, 20, 21, 22, 23, 24}}, 30, "docend.sam");
  SessionOptions o;
  o.max_dynamic_bytes = 1 << 20;
  o.policy = Policy::kStaticOnly;
  Session s(o);
  s.AttachIndex(&index.file.view());
  s.Prefill(Text{10, 11});
  const DraftTree& t = s.Propose(12);  // "10 11 12" in document 1
  EXPECT_EQ(t.source, DraftSource::kStatic);
  EXPECT_EQ(t.match_len, 3u);
  EXPECT_EQ(t.tokens, (Text{12, 13}));  // stops at the end of document 1, no padding
}

// With an index attached, an id at or above its vocabulary size is refused by Prefill, Propose
// and Commit (an id of another tokenizer would draft nothing, silently), naming the id; the
// refused call changes nothing: the session drafts on as one that never got it (the oracle).
TEST(Session, OutOfVocabularyIdsAreRefused) {
  BuiltIndex index({{1, 2, 3, 4, 5, 6, 7, 8, 20, 21}, {9, 3, 4, 5, 29}}, 30, "oov.sam");
  for (const NamedPolicy& named : NamedPolicies()) {
    SCOPED_TRACE(named.name);
    SessionOptions o;
    o.max_dynamic_bytes = 1 << 20;
    o.policy = named.policy;
    RecyclingDrafter recycling(30), oracle_recycling(30);
    SessionOptions oracle_options = o;
    if (named.recycling_fallback) {
      o.fallback = &recycling;
      oracle_options.fallback = &oracle_recycling;
    }
    Session s(o), oracle(oracle_options);
    s.AttachIndex(&index.file.view());
    oracle.AttachIndex(&index.file.view());
    auto refused = [](auto&& call, const std::string& expected) {
      const sam::Error e = sam::testing::Thrown(call);
      EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
      EXPECT_NE(std::string(e.what()).find(expected), std::string::npos) << e.what();
    };
    refused([&] { s.Prefill(Text{1, 2, 30}); },
            "Session::Prefill: ids[2] = 30 is outside the vocabulary of the attached indexes (30 ids");
    s.Prefill(Text{1, 2, 29});
    oracle.Prefill(Text{1, 2, 29});
    refused([&] { s.Propose(30); }, "Session::Propose: start token 30 is outside the vocabulary");
    refused([&] { s.Propose(0xFFFFFFFFu, 4); }, "start token 4294967295");
    for (int step = 0; step < 3; ++step) {
      const DraftTree& expected = oracle.Propose(3);
      const DraftTree& got = s.Propose(3);
      EXPECT_EQ(got.tokens, expected.tokens);
      EXPECT_EQ(got.parents, expected.parents);
      refused([&] { s.Commit(Text{3, 4, 1000}); }, "Session::Commit: ids[2] = 1000");
      s.Commit(Text{3, 4});
      oracle.Commit(Text{3, 4});
    }
    EXPECT_EQ(s.dynamic_sam().size(), oracle.dynamic_sam().size());
    EXPECT_EQ(s.statistics().Total().accepted_tokens, oracle.statistics().Total().accepted_tokens);
  }
  // Without an index no vocabulary is known: the dynamic automaton takes any id.
  SessionOptions o;
  o.max_dynamic_bytes = 1 << 20;
  o.policy = Policy::kDynamicOnly;
  Session free_ids(o);
  free_ids.Prefill(Text{100000, 7, 100001});
  EXPECT_EQ(free_ids.Propose(7).tokens, (Text{7, 100001}));
}

TEST(Session, PaperRulePicksLongerMatch) {
  BuiltIndex index({{1, 2, 3, 4, 5, 6, 7, 8, 20, 21}}, 30, "paper.sam");
  SessionOptions o;
  o.policy = Policy::kPaper;
  o.max_dynamic_bytes = 1 << 20;
  Session s(o);  // paper rule, no fallback: bias 0
  s.AttachIndex(&index.file.view());
  s.Prefill(Text{9, 1, 2, 3, 4, 5, 6, 7, 25, 6, 7});  // dynamic "6 7 8"? no: "6 7" then 8 absent
  const DraftTree& t = s.Propose(8);
  // static: "5 6 7 8"? The context ends "25 6 7"; with 8: "6 7 8" (len 3) in the corpus;
  // dynamic: "8" never occurred -> 0. Static wins.
  EXPECT_EQ(t.source, DraftSource::kStatic);
  EXPECT_EQ(t.match_len, 3u);
  EXPECT_EQ(t.tokens, (Text{8, 20, 21}));
  s.Commit(Text{8, 20});
  // Now "25" follows "7" in the dynamic text; "6 7 25"... start 25 after "8 20":
  const DraftTree& u = s.Propose(6);  // dynamic "6" (len 1, twice); static "20 6"? no -> "6" len 1
  EXPECT_EQ(u.source, DraftSource::kDynamic);  // tie -> dynamic
  EXPECT_EQ(u.tokens[1], 7u);
}

TEST(Session, IncrementalEqualsRebuilt) {
  std::mt19937 rng(21);
  const std::vector<Text> docs = RandomTexts(rng, 30, 20, 40, 12);
  BuiltIndex index(docs, 12, "incr.sam");
  for (Policy p : {Policy::kPaper, Policy::kTree, Policy::kStaticOnly, Policy::kDynamicOnly}) {
    SessionOptions o;
    o.max_dynamic_bytes = 1 << 20;
    o.policy = p;
    Session inc(o);
    inc.AttachIndex(&index.file.view());
    Text prompt(30), gen(200);
    for (auto& t : prompt) t = rng() % 12;
    for (auto& t : gen) t = rng() % 12;
    inc.Prefill(prompt);
    Text context = prompt;
    size_t i = 0;
    while (i < gen.size()) {
      const DraftTree inc_tree = inc.Propose(gen[i]);
      Session fresh(o);
      fresh.AttachIndex(&index.file.view());
      fresh.Prefill(context);
      ASSERT_TRUE(SameTree(inc_tree, fresh.Propose(gen[i]))) << PolicyName(p) << " step " << i;
      size_t a = AcceptedLength(inc_tree, std::span<const uint32_t>(gen).subspan(i + 1));
      Text commit(gen.begin() + i, gen.begin() + i + a + 1);
      inc.Commit(commit);
      context.insert(context.end(), commit.begin(), commit.end());
      i += a + 1;
    }
  }
}

// Streams that mostly copy corpus text accept long static drafts, over which
// Commit moves the drafting cursor in one climb: every cursor equals a
// cursor advanced token by token.
TEST(Session, CursorsEqualTokenByTokenAfterAcceptedStaticDrafts) {
  std::mt19937 rng(23);
  const std::vector<Text> docs = RandomTexts(rng, 30, 30, 40, 9);
  BuiltIndex index(docs, 9, "jump.sam");
  BuiltIndex other({docs[3], docs[7]}, 9, "jump2.sam");
  for (Policy p : {Policy::kPaper, Policy::kStaticOnly}) {
    SessionOptions o;
    o.max_dynamic_bytes = 1 << 20;
    o.policy = p;
    Session s(o);
    s.AttachIndex(&index.file.view());
    s.AttachIndex(&other.file.view());
    StaticCursor ref0(&index.file.view()), ref1(&other.file.view());
    // Generation: corpus fragments with a changed token now and then.
    Text gen;
    while (gen.size() < 600) {
      const Text& d = docs[rng() % docs.size()];
      const size_t from = rng() % d.size();
      for (size_t j = from; j < d.size() && j < from + 25; ++j)
        gen.push_back(rng() % 10 == 0 ? rng() % 9 : d[j]);
    }
    Text prompt(gen.begin(), gen.begin() + 20);
    s.Prefill(prompt);
    for (uint32_t t : prompt) ref0.Advance(t), ref1.Advance(t);
    size_t i = prompt.size(), accepted_static = 0;
    while (i + 1 < gen.size()) {
      const DraftTree tree = s.Propose(gen[i]);
      const size_t a = AcceptedLength(tree, std::span<const uint32_t>(gen).subspan(i + 1));
      if (tree.source == DraftSource::kStatic) accepted_static += a;
      Text commit(gen.begin() + i, gen.begin() + i + a + 1);
      s.Commit(commit);
      for (uint32_t t : commit) ref0.Advance(t), ref1.Advance(t);
      ASSERT_EQ(s.cursor(0).match().state, ref0.match().state) << PolicyName(p) << " at " << i;
      ASSERT_EQ(s.cursor(0).match().len, ref0.match().len);
      ASSERT_EQ(s.cursor(1).match().state, ref1.match().state);
      ASSERT_EQ(s.cursor(1).match().len, ref1.match().len);
      i += a + 1;
    }
    EXPECT_GT(accepted_static, 100u) << PolicyName(p);
  }
}

// Prefill matches a long prompt's last Session::kPrefillMatchWindow tokens
// only, unless that match fills the window. Checked against the brute-force
// longest suffix in the documents and a cursor advanced token by token, with
// a bare view and with child records (TransferByRecords), for prompts whose
// match is short, exactly the window, longer than it, and one that crosses
// from one Prefill into the next.
TEST(Session, LongPromptMatchesAsTokenByToken) {
  std::mt19937 rng(41);
  std::vector<Text> docs = RandomTexts(rng, 20, 300, 100, 9);
  const Text long_doc = RandomTexts(rng, 1, 3000, 1, 9)[0];
  docs.push_back(long_doc);
  BuiltIndex index(docs, 9, "prefill.sam");
  constexpr size_t kWindow = Session::kPrefillMatchWindow;
  static_assert(kWindow < 1500, "the cases below need a document longer than the window");
  auto random_text = [&](size_t n) { return RandomTexts(rng, 1, n, 1, 9)[0]; };
  auto concat = [](Text a, const Text& b) {
    a.insert(a.end(), b.begin(), b.end());
    return a;
  };
  auto doc_part = [&](size_t from, size_t n) {
    return Text(long_doc.begin() + from, long_doc.begin() + from + n);
  };
  // Each case: prompts given to Prefill one after another.
  const std::vector<std::vector<Text>> cases = {
      {random_text(5000)},                                        // short match
      {concat(random_text(2000), doc_part(100, kWindow - 1))},    // one short of the window
      {concat(random_text(2000), doc_part(100, kWindow))},        // exactly the window
      {concat(random_text(2000), doc_part(100, 1500))},           // longer: every token
      {concat(random_text(1500), doc_part(0, 600)), doc_part(600, 1200)},  // across prompts
      {random_text(300), random_text(kWindow + 1)},               // after an earlier prompt
  };
  const auto records = StaticIndex::Create(&index.file.view(),
                                           StaticIndex::Options{.min_degree = 4,
                                                                .record_min_count = 2});
  ASSERT_TRUE(records->has_records());
  for (size_t c = 0; c < cases.size(); ++c) {
    for (bool with_records : {false, true}) {
      SessionOptions o;
      o.max_dynamic_bytes = 8 << 20;
      Session s(o);
      if (with_records) s.AttachIndex(records);
      else s.AttachIndex(&index.file.view());
      StaticCursor ref(&index.file.view());
      Text text;
      for (const Text& prompt : cases[c]) {
        s.Prefill(prompt);
        for (uint32_t t : prompt) ref.Advance(t);
        text.insert(text.end(), prompt.begin(), prompt.end());
      }
      const uint64_t expected = LongestSuffixInDocs(docs, text);
      SCOPED_TRACE("case " + std::to_string(c) + (with_records ? " with records" : ""));
      EXPECT_EQ(s.cursor(0).match().len, expected);
      EXPECT_EQ(ref.match().len, expected);
      EXPECT_EQ(s.cursor(0).match().state, ref.match().state);
      // The session goes on from there as the cursor does.
      const Text more = concat(doc_part(2000, 40), random_text(20));
      for (size_t i = 0; i + 1 < more.size(); ++i) {
        s.Propose(more[i]);
        const uint32_t step[] = {more[i]};
        s.Commit(step);
        ref.Advance(more[i]);
        ASSERT_EQ(s.cursor(0).match().state, ref.match().state) << "at " << i;
        ASSERT_EQ(s.cursor(0).match().len, ref.match().len);
      }
    }
  }
}

TEST(Session, MultipleIndexesUseTheLongestStaticMatch) {
  BuiltIndex general({{1, 2, 3, 4, 5}}, 20, "general.sam");
  BuiltIndex domain({{7, 8, 2, 3, 9, 10, 11}}, 20, "domain.sam");
  SessionOptions o;
  o.max_dynamic_bytes = 1 << 20;
  o.policy = Policy::kStaticOnly;
  Session s(o);
  s.AttachIndex(&general.file.view());
  s.AttachIndex(&domain.file.view());
  EXPECT_EQ(s.num_indexes(), 2u);
  s.Prefill(Text{1, 2});
  EXPECT_EQ(s.Propose(3).tokens, (Text{3, 4, 5}));  // general: "1 2 3" (len 3)
  s.Reset();
  s.Prefill(Text{8, 2});
  EXPECT_EQ(s.Propose(3).tokens, (Text{3, 9, 10, 11}));  // domain: "8 2 3"
  // Attaching after prefill catches the cursor up with the context.
  Session late(o);
  late.Prefill(Text{8, 2});
  late.AttachIndex(&domain.file.view());
  EXPECT_EQ(late.Propose(3).tokens, (Text{3, 9, 10, 11}));
}

// Commit reuses the match that Propose peeked, except for a cursor attached
// in between, which must advance on the start token itself.
TEST(Session, AttachBetweenProposeAndCommit) {
  BuiltIndex index({{1, 2, 3, 4, 5}}, 20, "attach_mid.sam");
  SessionOptions o;
  o.max_dynamic_bytes = 1 << 20;
  o.policy = Policy::kStaticOnly;
  Session s(o);
  s.Prefill(Text{1, 2});
  s.Propose(3);
  s.AttachIndex(&index.file.view());
  s.Commit(Text{3});
  EXPECT_EQ(s.cursor(0).match().len, 3u);  // "1 2 3"
  EXPECT_EQ(s.Propose(4).tokens, (Text{4, 5}));
}

TEST(Session, TreePolicyShapes) {
  // "1 2" is followed by 3 (three times) and by 4 (once).
  BuiltIndex index({{1, 2, 3, 5}, {1, 2, 3, 6}, {1, 2, 3, 5}, {1, 2, 4, 7}}, 10, "tree.sam");
  SessionOptions o;
  o.max_dynamic_bytes = 1 << 20;
  o.policy = Policy::kTree;
  Session s(o);
  s.AttachIndex(&index.file.view());
  s.Prefill(Text{1});
  const DraftTree& t = s.Propose(2);  // static match "1 2" (len 2): 1 + 4*2 = 9 nodes max
  EXPECT_EQ(t.source, DraftSource::kStatic);
  EXPECT_LE(t.size(), 9u);
  ASSERT_GE(t.size(), 3u);
  EXPECT_EQ(t.tokens[1], 3u);  // heaviest child first
  EXPECT_EQ(t.tokens[2], 5u);  // then "3 5" (weight 2/4) before "4" (1/4)
}

// kTree: at most tree.width (8) nodes per depth and min(tree.nodes (60),
// 1 + 4 l) nodes in all, on a corpus whose common states have many children.
TEST(Session, TreePolicyBoundsWidthAndSize) {
  std::mt19937 rng(5);
  std::vector<Text> docs(300);
  for (auto& d : docs) {
    d.resize(10 + rng() % 30);
    for (auto& t : d) t = rng() % 3 == 0 ? rng() % 4 : rng() % 40;  // a few very common tokens
  }
  BuiltIndex index(docs, 40, "treebound.sam");
  for (bool shared : {false, true}) {
    SessionOptions o;
    o.max_dynamic_bytes = 1 << 20;
    o.policy = Policy::kTree;
    Session s(o);
    if (shared) s.AttachIndex(StaticIndex::Create(&index.file.view(), {.min_degree = 4}));
    else s.AttachIndex(&index.file.view());
    Text prompt(20);
    for (auto& t : prompt) t = rng() % 40;
    s.Prefill(prompt);
    Text text = prompt;  // what the session has seen, then the start token
    size_t trees = 0;
    for (int step = 0; step < 400; ++step) {
      const uint32_t start = rng() % 3 == 0 ? rng() % 4 : rng() % 40;
      const DraftTree& t = s.Propose(start);
      text.push_back(start);
      if (t.source == DraftSource::kStatic) {
        ++trees;
        std::vector<size_t> per_depth(t.size() + 1, 0);
        for (uint16_t d : t.depths) ++per_depth[d];
        for (size_t d = 1; d < per_depth.size(); ++d) ASSERT_LE(per_depth[d], 8u) << "depth " << d;
        EXPECT_LE(t.size(), std::min<size_t>(60, 1 + 4 * size_t{t.match_len}));
        EXPECT_EQ(t.match_len, LongestSuffixInDocs(docs, text)) << "step " << step;
      }
      s.Commit(Text{start});
    }
    EXPECT_GT(trees, 50u);
  }
}

TEST(Session, ResetForgetsRequestState) {
  SessionOptions o;
  o.max_dynamic_bytes = 1 << 20;
  o.policy = Policy::kDynamicOnly;
  Session s(o);
  s.Prefill(Text{1, 2, 3, 4});
  EXPECT_GT(s.Propose(2).size(), 1u);
  s.Reset();
  s.Prefill(Text{5, 6});
  EXPECT_EQ(s.Propose(2).size(), 1u);  // nothing from the previous request
}

// A fallback drafter that always proposes the same chain.
class FixedDrafter : public Drafter {
 public:
  std::string_view name() const override { return "fixed"; }
  bool Propose(uint32_t start, size_t max_nodes, DraftTree* out) override {
    out->Reset(start, DraftSource::kRecycling);
    for (uint32_t t = 100; t < 103 && out->size() < max_nodes; ++t) out->Add(out->size() - 1, t);
    return true;
  }
  void Commit(std::span<const uint32_t> tokens) override { committed += tokens.size(); }
  void Prefill(std::span<const uint32_t> p) override { prefilled += p.size(); }
  size_t committed = 0, prefilled = 0;
};

TEST(Session, FallbackDrafterBelowThreshold) {
  FixedDrafter fallback;
  SessionOptions o;
  o.policy = Policy::kPaper;  // the paper rule's threshold decides the fallback
  o.max_dynamic_bytes = 1 << 20;
  o.fallback = &fallback;
  Session s(o);
  s.Prefill(Text{1, 2, 3});
  EXPECT_EQ(fallback.prefilled, 3u);
  const DraftTree& t = s.Propose(2);  // dynamic len 1 < threshold 5
  EXPECT_EQ(t.source, DraftSource::kRecycling);
  EXPECT_EQ(t.tokens, (Text{2, 100, 101, 102}));
  s.Commit(Text{2, 100});
  EXPECT_EQ(fallback.committed, 2u);
  EXPECT_EQ(s.statistics().source(DraftSource::kRecycling).accepted_tokens, 1u);
}

TEST(Session, CalibratedTreeIsWithinBudgetAndMergesSources) {
  BuiltIndex index({{1, 2, 3, 5, 6}, {1, 2, 3, 6, 6}, {1, 2, 4, 7, 7}}, 10, "cal.sam");
  SessionOptions o;
  o.max_dynamic_bytes = 1 << 20;
  o.policy = Policy::kCalibrated;
  o.draft_size = 6;
  Session s(o);
  s.AttachIndex(&index.file.view());
  s.Prefill(Text{1, 2, 8, 8, 1});
  const DraftTree& t = s.Propose(2);  // dynamic "1 2" -> 8; static "1 2" -> 3 / 4
  EXPECT_LE(t.size(), 6u);
  EXPECT_EQ(t.source, DraftSource::kMerged);
  bool has8 = false, has3 = false;
  for (size_t i = 1; i < t.size(); ++i) {
    EXPECT_LT(t.parents[i], static_cast<int32_t>(i));
    if (t.depths[i] == 1) {
      has8 |= t.tokens[i] == 8;
      has3 |= t.tokens[i] == 3;
    }
  }
  EXPECT_TRUE(has8 && has3);
  s.Commit(Text{2, 8});
  EXPECT_EQ(s.statistics().steps, 1u);
  EXPECT_EQ(s.statistics().source(DraftSource::kMerged).accepted_tokens, 1u);
}

// A fallback drafter proposing two children of the start token, the first
// (token 100) with draft probability q_first, the second (101) with q_second;
// without probabilities when both are negative (a deterministic drafter).
class TwoChildDrafter : public Drafter {
 public:
  TwoChildDrafter(float q_first, float q_second) : q_{q_first, q_second} {}
  std::string_view name() const override { return "two"; }
  bool Propose(uint32_t start, size_t, DraftTree* out) override {
    out->Reset(start, DraftSource::kModel);
    out->Add(0, 100);
    out->Add(0, 101);
    if (q_[0] >= 0) out->draft_probs = {1.0f, q_[0], q_[1]};
    return true;
  }
  void Commit(std::span<const uint32_t>) override {}
  void Prefill(std::span<const uint32_t>) override {}

 private:
  float q_[2];
};

// sam-cal ranks a draft model's candidates by the model's own probability
// (cells by depth and q), a deterministic fallback's by sibling order (cells
// by depth and rank): with a budget of one drafted node, the kept child shows
// which feature the estimate used.
TEST(Session, CalibratedRanksModelCandidatesByDraftProbability) {
  for (const auto& [q_first, q_second, expected] :
       {std::tuple{0.05f, 0.9f, 101u}, std::tuple{0.9f, 0.05f, 100u}, std::tuple{-1.0f, -1.0f, 100u}}) {
    TwoChildDrafter fallback(q_first, q_second);
    SessionOptions o;
    o.max_dynamic_bytes = 1 << 20;
    o.policy = Policy::kCalibrated;
    o.draft_size = 2;
    o.fallback = &fallback;
    Session s(o);
    s.Prefill(Text{7, 8, 9});
    const DraftTree& t = s.Propose(3);
    ASSERT_EQ(t.size(), 2u) << q_first;
    EXPECT_EQ(t.tokens[1], expected) << q_first << " " << q_second;
    EXPECT_EQ(t.source, DraftSource::kModel);
  }
}

TEST(Session, StatisticsByDepthAndMatchLength) {
  SessionOptions o;
  o.max_dynamic_bytes = 1 << 20;
  o.policy = Policy::kDynamicOnly;
  o.draft_size = 4;
  Session s(o);
  s.Prefill(Text{1, 2, 3, 4, 5, 1, 2});
  s.Propose(3);               // "1 2 3": draft 3 4 5 1
  s.Commit(Text{3, 4, 5});    // two accepted
  const SourceStatistics& d = s.statistics().source(DraftSource::kDynamic);
  EXPECT_EQ(d.steps, 1u);
  EXPECT_EQ(d.draft_tokens, 3u);
  EXPECT_EQ(d.accepted_tokens, 2u);
  EXPECT_EQ(d.proposed_at_depth[2], 1u);
  EXPECT_EQ(d.accepted_at_depth[1], 1u);
  EXPECT_EQ(d.accepted_at_depth[2], 0u);
  EXPECT_EQ(d.steps_by_match_length[3], 1u);
  EXPECT_EQ(d.accepted_by_match_length[3], 2u);
  EXPECT_NE(s.statistics().ToJson().find("\"dynamic\""), std::string::npos);
  s.ResetStatistics();
  EXPECT_EQ(s.statistics().steps, 0u);
}

// ---------------------------------------------------------------- option table

// Every field a row of the option tables sets, as text, to compare two options.
std::string Fields(const SessionOptions& o) {
  std::string out = std::string(PolicyName(o.policy)) + " " + std::to_string(o.draft_size) + " " +
                    std::string(DraftShapeName(o.shape)) + " " + std::to_string(o.cost_curve.empty()) +
                    " " + std::to_string(o.max_dynamic_bytes) + " " +
                    std::to_string(o.collect_timing) + " " + std::to_string(o.cache_prompts) + " " +
                    (o.paper.l_bias ? std::to_string(*o.paper.l_bias) : "auto") + " " +
                    std::to_string(o.paper.l_threshold) + " " + std::to_string(o.tree.nodes) + " " +
                    std::to_string(o.tree.width);
  const experimental::Tuning& t = o.tuning;
  out += " " + std::to_string(t.adaptive_length) + " " + std::to_string(t.length_per_match) + " " +
         std::to_string(t.dynamic_link_fallback) + " " + std::to_string(t.min_path_probability) +
         " " + std::to_string(t.max_static_lookups) + " " + std::to_string(t.backoff_count) + " " +
         std::to_string(t.calibrated_width) + " " + std::to_string(t.chain_min_path_probability) +
         " " + std::to_string(t.chain_calibrated_width) + " " +
         std::to_string(t.chain_max_static_lookups);
  return out;
}

// The tables' defaults (what help texts, Python's docstring and the tools show) are the
// structs' own: setting each option to its default text changes nothing.
TEST(OptionTable, DefaultsAreTheStructsDefaults) {
  const std::string defaults = Fields(SessionOptions{});
  for (const OptionSpec& spec : SessionOptionSpecs()) {
    SessionOptions o;
    if (spec.default_text.empty()) continue;  // cost_curve: none
    SetSessionOption(&o, spec.name, spec.default_text);
    EXPECT_EQ(Fields(o), defaults) << spec.name;
  }
  for (const OptionSpec& spec : ExperimentalOptionSpecs()) {
    SessionOptions o;
    SetExperimentalOption(&o, spec.name, spec.default_text);
    EXPECT_EQ(Fields(o), defaults) << spec.name;
  }
  EXPECT_EQ(SessionOptionSpecs().size(), 11u);
  EXPECT_EQ(ExperimentalOptionSpecs().size(), 10u);
}

// Each row sets its own field and no other, and refuses what its field cannot hold.
TEST(OptionTable, EachOptionSetsItsField) {
  SessionOptions o;
  SetSessionOption(&o, "policy", "sam-tree");
  SetSessionOption(&o, "draft_size", "24");
  SetSessionOption(&o, "shape", "chain");
  SetSessionOption(&o, "max_dynamic_bytes", "1048576");
  SetSessionOption(&o, "collect_timing", "true");
  SetSessionOption(&o, "cache_prompts", "1");
  SetSessionOption(&o, "l_bias", "3");
  SetSessionOption(&o, "l_threshold", "7");
  SetSessionOption(&o, "tree_nodes", "30");
  SetSessionOption(&o, "tree_width", "2");
  SetExperimentalAssignment(&o, "adaptive_length=true");
  SetExperimentalAssignment(&o, "length_per_match=6");
  SetExperimentalAssignment(&o, "dynamic_link_fallback=false");
  SetExperimentalAssignment(&o, "min_path_probability=0.25");
  SetExperimentalAssignment(&o, "max_static_lookups=0");
  SetExperimentalAssignment(&o, "backoff_count=3");
  SetExperimentalAssignment(&o, "calibrated_width=5");
  SetExperimentalAssignment(&o, "chain_min_path_probability=0.5");
  SetExperimentalAssignment(&o, "chain_calibrated_width=2");
  SetExperimentalAssignment(&o, "chain_max_static_lookups=9");
  EXPECT_EQ(Fields(o),
            "sam-tree 24 chain 1 1048576 1 1 3 7 30 2 1 6 0 0.250000 0 3 5 0.500000 2 9");
  SetSessionOption(&o, "l_bias", "auto");
  EXPECT_FALSE(o.paper.l_bias.has_value());
  SetSessionOption(&o, "l_bias", "-1");
  EXPECT_FALSE(o.paper.l_bias.has_value());
  EXPECT_NO_THROW(Session{o});

  auto refused = [](const char* name, const char* value, const char* message) {
    SessionOptions x;
    try {
      if (FindOptionSpec(SessionOptionSpecs(), name)) SetSessionOption(&x, name, value);
      else SetExperimentalOption(&x, name, value);
      ADD_FAILURE() << name << "=" << value << " was accepted";
    } catch (const sam::Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
      EXPECT_NE(std::string(e.what()).find(message), std::string::npos) << e.what();
    }
    EXPECT_EQ(Fields(x), Fields(SessionOptions{})) << name;  // nothing half-set
  };
  refused("draft_size", "0", "draft_size: '0' is outside [1, 4096]");
  refused("draft_size", "4097", "outside [1, 4096]");
  refused("draft_size", "-1", "is not an unsigned integer");
  refused("draft_size", "18446744073709551616", "outside");
  refused("draft_size", "12x", "is not an unsigned integer");
  refused("draft_size", " ", "is empty");
  refused("tree_width", "65", "tree_width: '65' is outside [1, 64]");
  refused("policy", "nope", "unknown policy 'nope'");
  refused("shape", "path", "unknown draft shape 'path'");
  refused("collect_timing", "yes", "is not a bool");
  refused("min_path_probability", "nan", "is not a finite number");
  refused("min_path_probability", "1.5", "outside [0, 1]");
  refused("calibrated_width", "0", "outside [1, 64]");
  refused("chain_calibrated_width", "65", "outside [1, 64]");
  refused("l_bias", "-2", "outside [-1,");
  EXPECT_THROW(SetSessionOption(&o, "max_width", "3"), sam::Error);  // not an option
  EXPECT_THROW(SetExperimentalAssignment(&o, "backoff_count"), sam::Error);
  EXPECT_NE(OptionHelp(SessionOptionSpecs()).find("draft_size INT (default 40; [1, 4096])"),
            std::string::npos);
}

// ---------------------------------------------------------------- policy names

// The one naming scheme: the table is the oracle, and its names are the ones
// the tools' docs use (README, docs/runtime.md).
TEST(PolicyNames, EveryNameRoundTrips) {
  std::vector<std::string> names;
  for (const NamedPolicy& p : NamedPolicies()) {
    names.emplace_back(p.name);
    const NamedPolicy& found = FindPolicy(p.name);
    EXPECT_EQ(&found, &p) << p.name;
    EXPECT_EQ(found.policy, p.policy);
    EXPECT_EQ(found.recycling_fallback, p.recycling_fallback);
    EXPECT_FALSE(p.description.empty()) << p.name;
    if (!p.recycling_fallback) {
      EXPECT_EQ(PolicyName(p.policy), p.name);
    }
    EXPECT_NE(PolicyHelp().find(std::string(p.name) + " "), std::string::npos) << p.name;
  }
  EXPECT_EQ(names, (std::vector<std::string>{"sam", "static", "dynamic", "sam-tree", "sam-rec",
                                             "sam-cal"}));
  // Every Policy has exactly one name without a fallback, and it maps back.
  for (Policy policy : {Policy::kPaper, Policy::kStaticOnly, Policy::kDynamicOnly, Policy::kTree,
                        Policy::kCalibrated}) {
    size_t plain = 0;
    for (const NamedPolicy& p : NamedPolicies()) plain += p.policy == policy && !p.recycling_fallback;
    EXPECT_EQ(plain, 1u) << static_cast<int>(policy);
    EXPECT_EQ(FindPolicy(PolicyName(policy)).policy, policy);
  }
  EXPECT_EQ(FindPolicy("sam-rec").policy, Policy::kPaper);
  EXPECT_TRUE(FindPolicy("sam-rec").recycling_fallback);
}

TEST(PolicyNames, UnknownNameListsEveryValidName) {
  // Old names of the second scheme and near misses are all unknown now.
  for (const char* bad : {"paper", "calibrated", "tree", "bogus", "", "SAM", "sam-"}) {
    try {
      FindPolicy(bad);
      ADD_FAILURE() << "'" << bad << "' was accepted";
    } catch (const sam::Error& e) {
      const std::string message = e.what();
      EXPECT_NE(message.find("'" + std::string(bad) + "'"), std::string::npos) << message;
      for (const NamedPolicy& p : NamedPolicies())
        EXPECT_NE(message.find(std::string(p.name)), std::string::npos) << message;
    }
  }
  std::string list;
  for (const NamedPolicy& p : NamedPolicies()) list += (list.empty() ? "" : ", ") + std::string(p.name);
  EXPECT_EQ(PolicyNameList(), list);
}

// ---------------------------------------------------------------- limits

TEST(SessionLimits, DraftSizeAtAndBeyondTheMaximum) {
  SessionOptions o;
  o.max_dynamic_bytes = 16 << 20;
  o.policy = Policy::kDynamicOnly;
  o.draft_size = kMaxDraftSize;  // at the limit: accepted, and drafts reach it
  Session s(o);
  Text prompt;
  for (size_t i = 0; i < 2 * kMaxDraftSize + 10; ++i) prompt.push_back(1 + i % 5);  // period 5
  s.Prefill(prompt);
  const DraftTree& t = s.Propose(1 + prompt.size() % 5);
  EXPECT_EQ(t.size(), kMaxDraftSize);
  EXPECT_EQ(t.depths.back(), kMaxDraftSize - 1);
  for (size_t bad : {size_t{0}, kMaxDraftSize + 1, size_t{1} << 40}) {
    o.draft_size = bad;
    try {
      Session refused(o);
      ADD_FAILURE() << "draft_size " << bad << " was accepted";
    } catch (const sam::Error& e) {
      EXPECT_NE(std::string(e.what()).find("draft_size"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(std::to_string(kMaxDraftSize)), std::string::npos);
    }
  }
  o.draft_size = 40;
  o.tree.nodes = kMaxDraftSize;
  EXPECT_NO_THROW(Session{o});
  o.tree.nodes = kMaxDraftSize + 1;
  EXPECT_THROW(Session{o}, sam::Error);
  o.tree.nodes = kMaxDraftSize;
  o.tree.width = 0;
  EXPECT_THROW(Session{o}, sam::Error);
  o.tree.width = kMaxWidth + 1;
  EXPECT_THROW(Session{o}, sam::Error);
  o.tree.width = 1;
  o.tuning.calibrated_width = 0;
  EXPECT_THROW(Session{o}, sam::Error);
  o.tuning.calibrated_width = kMaxWidth + 1;
  EXPECT_THROW(Session{o}, sam::Error);
  o.tuning.calibrated_width = 1;
  for (double p : {0.0, 0.5, 1.0}) {
    o.tuning.min_path_probability = p;
    EXPECT_NO_THROW(Session{o}) << p;
  }
  for (double p : {-0.01, 1.5, std::nan(""), std::numeric_limits<double>::infinity()}) {
    o.tuning.min_path_probability = p;
    try {
      Session refused(o);
      ADD_FAILURE() << "min_path_probability " << p << " was accepted";
    } catch (const sam::Error& e) {
      EXPECT_NE(std::string(e.what()).find("min_path_probability"), std::string::npos);
    }
  }
}

// ---------------------------------------------------------------- lifetime

// The old reproducer: sessions, a StaticIndex and a cursor take &file.view()
// of an IndexFile in a std::vector, which then grows (moving the file). The
// view keeps its address, and drafting afterwards gives exactly a fresh
// session's drafts (run under ASan, a dangling view would be a
// use-after-free).
TEST(IndexLifetime, VectorGrowthKeepsBorrowedViewsValid) {
  static_assert(std::is_nothrow_move_constructible_v<format::IndexFile>);
  std::mt19937 rng(41);
  const std::vector<Text> docs = RandomTexts(rng, 40, 20, 40, 10);
  BuiltIndex built(docs, 10, "growth.sam");
  BuiltIndex other(RandomTexts(rng, 5, 10, 10, 10), 10, "growth_other.sam");

  std::vector<format::IndexFile> files;
  files.push_back(format::IndexFile::Open(built.path));
  const format::IndexView* before = &files[0].view();
  const auto hubs = StaticIndex::Create(&files[0].view(), StaticIndex::Options{.min_degree = 2});
  StaticCursor cursor(&files[0].view());
  const std::vector<Policy> policies = {Policy::kPaper, Policy::kTree, Policy::kCalibrated};
  std::vector<std::unique_ptr<Session>> sessions;
  for (Policy p : policies) {
    SessionOptions o;
    o.max_dynamic_bytes = 1 << 20;
    o.policy = p;
    sessions.push_back(std::make_unique<Session>(o));
    sessions.back()->AttachIndex(&files[0].view());
    sessions.push_back(std::make_unique<Session>(o));
    sessions.back()->AttachIndex(hubs);
  }
  const size_t capacity = files.capacity();
  while (files.capacity() == capacity) files.push_back(format::IndexFile::Open(other.path));
  ASSERT_EQ(&files[0].view(), before);  // the view did not move with the file
  ASSERT_EQ(&hubs->view(), before);

  // Drafting now equals drafting over the same file opened afresh.
  const format::IndexFile fresh_file = format::IndexFile::Open(built.path);
  Text prompt(30), gen(150);
  for (auto& t : prompt) t = rng() % 10;
  for (auto& t : gen) t = docs[0][rng() % docs[0].size()];
  StaticCursor fresh_cursor(&fresh_file.view());
  for (uint32_t t : prompt) {
    cursor.Advance(t);
    fresh_cursor.Advance(t);
    ASSERT_EQ(cursor.match().state, fresh_cursor.match().state);
    ASSERT_EQ(cursor.match().len, fresh_cursor.match().len);
  }
  for (size_t k = 0; k < sessions.size(); ++k) {
    Session& s = *sessions[k];
    Session fresh(s.options());
    fresh.AttachIndex(&fresh_file.view());
    s.Prefill(prompt);
    fresh.Prefill(prompt);
    size_t drafted = 0;
    for (size_t i = 0; i < gen.size();) {
      const DraftTree& a = s.Propose(gen[i]);
      const DraftTree& b = fresh.Propose(gen[i]);
      ASSERT_TRUE(SameTree(a, b)) << PolicyName(policies[k / 2]) << " session " << k << " step " << i;
      drafted += a.size() > 1;
      const size_t accepted = AcceptedLength(a, std::span<const uint32_t>(gen).subspan(i + 1));
      const Text commit(gen.begin() + i, gen.begin() + i + accepted + 1);
      s.Commit(commit);
      fresh.Commit(commit);
      i += accepted + 1;
    }
    EXPECT_GT(drafted, 0u) << k;
  }
}

// A view from shared_view() (and a StaticIndex made from one) keeps the file
// mapped after the IndexFile is gone: the session drafts as a fresh one does.
TEST(IndexLifetime, SharedViewsOutliveTheFile) {
  std::mt19937 rng(43);
  const std::vector<Text> docs = RandomTexts(rng, 30, 20, 40, 10);
  BuiltIndex built(docs, 10, "shared_view.sam");
  SessionOptions o;
  o.max_dynamic_bytes = 1 << 20;
  o.policy = Policy::kCalibrated;
  Session by_view(o), by_hubs(o);
  std::weak_ptr<const format::IndexView> weak;
  {
    format::IndexFile file = format::IndexFile::Open(built.path);
    const format::IndexFile moved = std::move(file);  // the view stays where it was
    by_view.AttachIndex(moved.shared_view());
    by_hubs.AttachIndex(StaticIndex::Create(moved.shared_view()));
    weak = moved.shared_view();
    EXPECT_EQ(file.view().num_states(), 1u);  // a moved-from file: an empty index
  }
  EXPECT_FALSE(weak.expired());  // the sessions keep it
  Session fresh(o);
  fresh.AttachIndex(&built.view());
  Text prompt(20);
  for (auto& t : prompt) t = rng() % 10;
  for (Session* s : {&by_view, &by_hubs, &fresh}) s->Prefill(prompt);
  for (size_t i = 0; i < 100; ++i) {
    const uint32_t start = docs[1][i % docs[1].size()];
    const DraftTree expected = fresh.Propose(start);
    ASSERT_TRUE(SameTree(by_view.Propose(start), expected)) << i;
    ASSERT_TRUE(SameTree(by_hubs.Propose(start), expected)) << i;
    for (Session* s : {&by_view, &by_hubs, &fresh}) s->Commit(Text{start});
  }
}

}  // namespace
}  // namespace sam::runtime
