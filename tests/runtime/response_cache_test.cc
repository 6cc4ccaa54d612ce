// ResponseCache against brute force over the retained responses: match
// lengths, drafts, the byte bound and its formula, eviction order and tenant
// isolation.
#include "sam/runtime/response_cache.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <cmath>
#include <optional>
#include <memory>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "sam/error.h"
#include "sam/format/blob_file.h"
#include "sam/format/response_cache_file.h"
#include "same_automaton.h"
#include "temp_dir.h"
#include "sam/automaton/builder.h"
#include "sam/runtime/replay.h"
#include "sam/runtime/session.h"

namespace sam::runtime {
namespace {

using Tokens = std::vector<uint32_t>;

// Longest suffix of context occurring inside one response (brute force).
uint32_t BruteMatch(const std::vector<Tokens>& responses, const Tokens& context) {
  auto occurs = [&](size_t len) {
    const auto first = context.end() - static_cast<ptrdiff_t>(len);
    for (const Tokens& r : responses)
      if (std::search(r.begin(), r.end(), first, context.end()) != r.end()) return true;
    return false;
  };
  uint32_t best = 0;
  for (size_t len = 1; len <= context.size() && occurs(len); ++len) best = static_cast<uint32_t>(len);
  return best;
}

// Tokens after the first occurrence (oldest response, then earliest end) of
// the context's suffix of length len, up to the response's end and `want`.
Tokens BruteDraft(const std::vector<Tokens>& responses, const Tokens& context, size_t len,
                  size_t want) {
  if (len == 0) return {};
  const auto first = context.end() - static_cast<ptrdiff_t>(len);
  for (const Tokens& r : responses) {
    auto it = std::search(r.begin(), r.end(), first, context.end());
    if (it == r.end()) continue;
    const auto begin = it + static_cast<ptrdiff_t>(len);
    return Tokens(begin, begin + static_cast<ptrdiff_t>(
                                     std::min<size_t>(want, static_cast<size_t>(r.end() - begin))));
  }
  return {};
}

// True when some suffix (length >= 1) of context followed by draft occurs in one response.
bool FollowsSomeSuffix(const std::vector<Tokens>& responses, const Tokens& context,
                       const Tokens& draft) {
  for (size_t k = 1; k <= context.size(); ++k) {
    Tokens needle(context.end() - static_cast<ptrdiff_t>(k), context.end());
    needle.insert(needle.end(), draft.begin(), draft.end());
    for (const Tokens& r : responses)
      if (std::search(r.begin(), r.end(), needle.begin(), needle.end()) != r.end()) return true;
  }
  return false;
}

size_t FormulaBytes(const ResponseCache& cache) {
  size_t bytes = 0;
  for (const std::string& key : cache.Tenants()) {
    const auto responses = cache.Responses(key);
    size_t used = 0;
    for (const Tokens& r : responses) used += r.size() + 1;
    EXPECT_GE(cache.Capacity(key), used) << key;
    bytes += ResponseCache::kBytesPerTenant + key.size() +
             DynamicSam::BytesForCapacity(cache.Capacity(key)) +
             ResponseCache::kBytesPerResponse * responses.size();
  }
  return bytes;
}

Tokens Random(std::mt19937& rng, size_t n, uint32_t alphabet) {
  Tokens t(n);
  for (uint32_t& x : t) x = rng() % alphabet;
  return t;
}

// A context: a random piece of a random response (any tenant) with random
// tokens around it, so that long matches, short matches and none all occur.
Tokens RandomContext(std::mt19937& rng, const std::vector<Tokens>& pool, uint32_t alphabet) {
  Tokens c = Random(rng, rng() % 4, alphabet);
  if (!pool.empty() && rng() % 4 != 0) {
    const Tokens& r = pool[rng() % pool.size()];
    size_t a = rng() % r.size(), b = a + rng() % (r.size() - a + 1);
    c.insert(c.end(), r.begin() + static_cast<ptrdiff_t>(a), r.begin() + static_cast<ptrdiff_t>(b));
  }
  if (rng() % 3 == 0) c.push_back(rng() % alphabet);
  return c;
}

TEST(ResponseCacheTest, MatchesAndDraftsEqualBruteForceUnderEviction) {
  for (uint32_t seed = 1; seed <= 12; ++seed) {
    std::mt19937 rng(seed);
    const uint32_t alphabet = 2 + seed % 5;
    // A few KiB: enough for tens of responses, so eviction runs often.
    ResponseCache cache(12000 + 2000 * (seed % 4));
    const std::vector<std::string> keys = {"a", "bb", ""};
    std::vector<std::pair<std::string, Tokens>> accepted;  // inserts that returned true
    for (int step = 0; step < 120; ++step) {
      const std::string& key = keys[rng() % keys.size()];
      const Tokens r = Random(rng, 1 + rng() % 30, alphabet);
      if (cache.Insert(key, r)) accepted.emplace_back(key, r);
      ASSERT_LE(cache.bytes(), cache.max_bytes());
      ASSERT_EQ(cache.bytes(), FormulaBytes(cache));

      // Retained = a suffix of the accepted inserts (oldest first eviction),
      // per tenant in insertion order.
      const size_t retained = cache.num_responses();
      ASSERT_LE(retained, accepted.size());
      ASSERT_EQ(cache.num_evicted(), accepted.size() - retained);
      std::map<std::string, std::vector<Tokens>> expect;
      for (size_t i = accepted.size() - retained; i < accepted.size(); ++i)
        expect[accepted[i].first].push_back(accepted[i].second);
      for (const std::string& k : keys)
        ASSERT_EQ(cache.Responses(k), expect[k]) << "key " << k << " seed " << seed << " step " << step;

      std::vector<Tokens> pool;
      for (const auto& [k, r2] : accepted) pool.push_back(r2);
      for (int q = 0; q < 6; ++q) {
        const std::string& qk = keys[rng() % keys.size()];
        const Tokens context = RandomContext(rng, pool, alphabet);
        const size_t want = 1 + rng() % 12;
        Tokens out(want);
        size_t n = 0;
        const uint32_t len = cache.Draft(qk, context, want, false, out.data(), &n);
        ASSERT_EQ(len, BruteMatch(expect[qk], context));
        out.resize(n);
        ASSERT_EQ(out, BruteDraft(expect[qk], context, len, want));
        Tokens climbed(want);
        size_t m = 0;
        ASSERT_EQ(cache.Draft(qk, context, want, true, climbed.data(), &m), len);
        climbed.resize(m);
        ASSERT_GE(m, n);
        if (m > 0) {
          ASSERT_TRUE(FollowsSomeSuffix(expect[qk], context, climbed));
        }
      }
    }
  }
}

TEST(ResponseCacheTest, CursorEqualsDraftWhileTheCacheChanges) {
  std::mt19937 rng(7);
  ResponseCache cache(20000);
  ResponseCache::Cursor cursor = cache.OpenCursor("t");
  Tokens fed;
  std::vector<Tokens> pool;
  for (int step = 0; step < 400; ++step) {
    if (rng() % 5 == 0) {
      Tokens r = Random(rng, 1 + rng() % 20, 4);
      pool.push_back(r);
      cache.Insert(rng() % 3 ? "t" : "u", r);
    }
    if (rng() % 40 == 0) {
      cursor.Reset();
      fed.clear();
    }
    const uint32_t token = rng() % 4;
    Tokens out(8), expect(8);
    size_t n = 0, m = 0;
    const uint32_t len = cursor.Peek(token, 8, true, out.data(), &n);
    Tokens context = fed;
    context.push_back(token);
    // Fed contexts stay below kRematchTokens, so the cursor is exact.
    ASSERT_EQ(len, cache.Draft("t", context, 8, true, expect.data(), &m));
    out.resize(n);
    expect.resize(m);
    ASSERT_EQ(out, expect);
    const Tokens commit = {token};
    cursor.Advance(commit);
    fed.push_back(token);
    if (fed.size() > 200) {
      cursor.Reset();
      fed.clear();
    }
    Tokens none(1);
    size_t z = 0;
    ASSERT_EQ(cursor.length(), cache.Draft("t", fed, 0, false, none.data(), &z));
  }
}

TEST(ResponseCacheTest, TenantTextNeverDraftsForAnotherTenant) {
  // Both tenants share prefixes; their continuations conflict. Tenant A's
  // continuations use ids >= 1000, B's ids < 1000.
  ResponseCache cache(size_t{1} << 20);
  std::mt19937 rng(3);
  std::vector<Tokens> a_texts, b_texts;
  for (int i = 0; i < 50; ++i) {
    Tokens prefix = Random(rng, 6, 5);
    Tokens a = prefix, b = prefix;
    for (int k = 0; k < 10; ++k) a.push_back(1000 + rng() % 5), b.push_back(rng() % 5);
    ASSERT_TRUE(cache.Insert("A", a));
    ASSERT_TRUE(cache.Insert("B", b));
    a_texts.push_back(a);
    b_texts.push_back(b);
  }
  ResponseCache::Cursor b_cursor = cache.OpenCursor("B");
  ResponseCache::Cursor nobody = cache.OpenCursor("C");
  for (const Tokens& a : a_texts) {
    // B's queries made of A's text: any match is B's own, drafts hold no A id.
    for (size_t cut = 1; cut <= a.size(); ++cut) {
      const Tokens context(a.begin(), a.begin() + static_cast<ptrdiff_t>(cut));
      Tokens out(40);
      size_t n = 0;
      const uint32_t len = cache.Draft("B", context, 40, true, out.data(), &n);
      EXPECT_EQ(len, BruteMatch(b_texts, context));
      for (size_t k = 0; k < n; ++k) EXPECT_LT(out[k], 1000u);
      EXPECT_EQ(cache.Draft("C", context, 40, true, out.data(), &n), 0u);
      EXPECT_EQ(n, 0u);
    }
    b_cursor.Reset();
    b_cursor.Advance(std::span<const uint32_t>(a).first(a.size() - 1));
    Tokens out(40);
    size_t n = 0;
    b_cursor.Peek(a.back(), 40, true, out.data(), &n);
    for (size_t k = 0; k < n; ++k) EXPECT_LT(out[k], 1000u);
    nobody.Advance(a);
    EXPECT_EQ(nobody.Peek(a[0], 40, true, out.data(), &n), 0u);
  }
}

TEST(ResponseCacheTest, EvictsOldestFirstAcrossTenants) {
  // Sized for about three 100-token responses of two tenants.
  const size_t one = ResponseCache::kBytesPerTenant + 1 + DynamicSam::BytesForCapacity(101) +
                     ResponseCache::kBytesPerResponse;
  ResponseCache cache(2 * one + DynamicSam::BytesForCapacity(202) -
                      DynamicSam::BytesForCapacity(101) + ResponseCache::kBytesPerResponse);
  Tokens a1(100, 1), b1(100, 2), a2(100, 3), b2(100, 4), a3(100, 6);
  ASSERT_TRUE(cache.Insert("A", a1));
  ASSERT_TRUE(cache.Insert("B", b1));
  ASSERT_TRUE(cache.Insert("A", a2));
  EXPECT_EQ(cache.num_evicted(), 0u);
  ASSERT_TRUE(cache.Insert("B", b2));  // evicts a1, the oldest
  EXPECT_EQ(cache.Responses("A"), std::vector<Tokens>{a2});
  EXPECT_EQ(cache.Responses("B"), (std::vector<Tokens>{b1, b2}));
  ASSERT_TRUE(cache.Insert("A", a3));  // then b1
  EXPECT_EQ(cache.Responses("B"), std::vector<Tokens>{b2});
  EXPECT_EQ(cache.Responses("A"), (std::vector<Tokens>{a2, a3}));
  EXPECT_EQ(cache.num_evicted(), 2u);
  EXPECT_LE(cache.bytes(), cache.max_bytes());
  EXPECT_EQ(cache.bytes(), FormulaBytes(cache));
  // A tenant whose last response is evicted disappears; a2 (older than b2) goes first.
  ASSERT_TRUE(cache.Insert("A", Tokens(250, 9)));
  EXPECT_EQ(cache.Tenants(), std::vector<std::string>{"A"});
  EXPECT_EQ(cache.Responses("A"), (std::vector<Tokens>{a3, Tokens(250, 9)}));
  EXPECT_EQ(cache.num_evicted(), 4u);
}

TEST(ResponseCacheTest, RefusesWhatItCannotHold) {
  ResponseCache cache(4096);
  EXPECT_FALSE(cache.Insert("t", Tokens{}));
  EXPECT_FALSE(cache.Insert("t", Tokens(10000, 1)));  // too large for the bound alone
  EXPECT_EQ(cache.num_responses(), 0u);
  EXPECT_EQ(cache.bytes(), 0u);
  try {
    cache.Insert("t", Tokens{1, ResponseCache::kSeparator, 2});
    ADD_FAILURE() << "the separator was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
  }
  try {
    ResponseCache zero(0);
    ADD_FAILURE() << "a zero bound was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
  }
  // A query holding the separator never matches across it.
  ASSERT_TRUE(cache.Insert("t", Tokens{1, 2, 3}));
  ASSERT_TRUE(cache.Insert("t", Tokens{4, 5, 6}));
  Tokens out(4);
  size_t n = 0;
  EXPECT_EQ(cache.Draft("t", Tokens{3, ResponseCache::kSeparator, 4}, 4, false, out.data(), &n), 1u);
  EXPECT_EQ(cache.Draft("t", Tokens{2, 3}, 4, false, out.data(), &n), 2u);
  EXPECT_EQ(n, 0u);  // the draft stops at the response's end
  cache.Clear();
  EXPECT_EQ(cache.bytes(), 0u);
  EXPECT_EQ(cache.Draft("t", Tokens{1, 2}, 4, false, out.data(), &n), 0u);
}

// An index of `responses` built in memory by the indexer's builder (the
// oracle of a compiled tenant), with the largest id's vocabulary.
struct OracleIndex {
  std::vector<uint8_t> bytes;
  std::optional<format::IndexFile> file;
};
std::unique_ptr<OracleIndex> BuildOracle(const std::vector<Tokens>& responses) {
  uint32_t max_id = 0;
  for (const Tokens& r : responses)
    for (uint32_t t : r) max_id = std::max(max_id, t);
  automaton::SuffixAutomatonBuilder b(max_id + 1);
  for (const Tokens& r : responses) b.AddDocument(r);
  auto o = std::make_unique<OracleIndex>();
  b.WriteToMemory({}, &o->bytes, "oracle");
  o->file.emplace(format::IndexFile::FromBuffer(o->bytes.data(), o->bytes.size(), "oracle"));
  return o;
}

// CompileOptions without eviction: a tenant is compiled once it holds
// min_tokens tokens and again when its new tokens reach growth times the
// tokens compiled last (a model of the rule counts the compiles); each
// compiled index is the same automaton as an index of the responses it
// holds (its first `responses` ones), so it never holds another tenant's.
// With CompileOptions::background the same, once WaitForCompiles() returns
// after each insert; and a Clear() while compiles are queued leaves no
// compiled index behind.
class ResponseCacheCompileModes : public ::testing::TestWithParam<bool> {};
INSTANTIATE_TEST_SUITE_P(SyncAndBackground, ResponseCacheCompileModes, ::testing::Bool(),
                         [](const auto& info) { return info.param ? "background" : "sync"; });

TEST_P(ResponseCacheCompileModes, CompiledIndexEqualsAnIndexOfTheTenantsResponses) {
  std::mt19937 rng(21);
  ResponseCache::CompileOptions compile;
  compile.enabled = true;
  compile.min_tokens = 60;
  compile.growth = 0.5;
  compile.background = GetParam();
  ResponseCache cache(size_t{16} << 20, compile);
  EXPECT_EQ(cache.compile_options().min_tokens, 60u);
  const std::string keys[2] = {"A", "B"};
  std::map<std::string, std::vector<Tokens>> inserted;
  struct Model {
    size_t used = 0, since = 0, compiled = 0;
  };
  std::map<std::string, Model> model;
  uint64_t compiles = 0;
  for (int i = 0; i < 120; ++i) {
    const int k = static_cast<int>(rng() % 2);
    Tokens r = Random(rng, 3 + rng() % 25, 5);
    for (uint32_t& t : r) t += 100 * static_cast<uint32_t>(k);  // A: 0..4, B: 100..104
    ASSERT_TRUE(cache.Insert(keys[k], r));
    cache.WaitForCompiles();
    inserted[keys[k]].push_back(r);
    Model& m = model[keys[k]];
    m.used += r.size() + 1;
    m.since += r.size() + 1;
    if (m.used >= compile.min_tokens &&
        (m.compiled == 0 || static_cast<double>(m.since) >= compile.growth * m.compiled)) {
      ++compiles;
      m.since = 0;
      m.compiled = m.used;
    }
    ASSERT_EQ(cache.num_compiles(), compiles) << "insert " << i;
    ASSERT_EQ(cache.bytes(), FormulaBytes(cache) + cache.compiled_bytes());
    ASSERT_LE(cache.compiled_bytes(), cache.max_bytes() / 4);
    for (const std::string& key : keys) {
      const ResponseCache::Compiled c = cache.CompiledIndex(key);
      if (model[key].compiled == 0) {
        ASSERT_EQ(c.index, nullptr) << key;
        continue;
      }
      ASSERT_NE(c.index, nullptr) << key;
      const std::vector<Tokens> held(inserted[key].begin(),
                                     inserted[key].begin() + static_cast<ptrdiff_t>(c.responses));
      size_t tokens = 0;
      for (const Tokens& h : held) tokens += h.size() + 1;
      ASSERT_EQ(tokens, model[key].compiled) << key;
      const auto oracle = BuildOracle(held);
      ASSERT_NO_FATAL_FAILURE(
          sam::testing::ExpectSameAutomaton(c.index->view(), oracle->file->view()));
    }
  }
  EXPECT_GT(compiles, 4u);
  // A cursor sees its tenant's compiled index; Clear forgets them all.
  ResponseCache::Cursor cursor = cache.OpenCursor("A");
  EXPECT_EQ(cursor.compiled().index, cache.CompiledIndex("A").index);
  cache.Clear();
  EXPECT_EQ(cache.compiled_bytes(), 0u);
  EXPECT_EQ(cache.bytes(), 0u);
  EXPECT_EQ(cache.CompiledIndex("A").index, nullptr);
  EXPECT_EQ(cursor.compiled().index, nullptr);
  // Compiles queued (or running) when Clear() comes publish nothing.
  for (int round = 0; round < 20; ++round) {
    for (int i = 0; i < 8; ++i) ASSERT_TRUE(cache.Insert("A", Random(rng, 30, 5)));
    cache.Clear();
    cache.WaitForCompiles();
    ASSERT_EQ(cache.compiled_bytes(), 0u);
    ASSERT_EQ(cache.CompiledIndex("A").index, nullptr);
  }
}

// Under eviction the two budgets hold after every insert (the automata's
// part, the compiled part, their sum within max_bytes), a tenant that loses
// all its responses loses its compiled index, and compiles keep happening.
TEST_P(ResponseCacheCompileModes, BudgetsHoldUnderEviction) {
  std::mt19937 rng(22);
  ResponseCache::CompileOptions compile;
  compile.enabled = true;
  compile.min_tokens = 30;
  compile.growth = 0.25;
  compile.max_bytes = 200 << 10;
  compile.background = GetParam();
  const size_t max_bytes = size_t{600} << 10;
  ResponseCache cache(max_bytes, compile);
  for (int i = 0; i < 600; ++i) {
    const std::string key = std::string(1, static_cast<char>('0' + rng() % 5));
    ASSERT_TRUE(cache.Insert(key, Random(rng, 1 + rng() % 120, 7)));
    cache.WaitForCompiles();
    ASSERT_LE(cache.bytes(), max_bytes);
    ASSERT_LE(cache.compiled_bytes(), compile.max_bytes);
    ASSERT_EQ(cache.bytes(), FormulaBytes(cache) + cache.compiled_bytes());
    ASSERT_LE(FormulaBytes(cache), max_bytes - compile.max_bytes);
    size_t compiled = 0;
    for (int t = 0; t < 5; ++t) {
      const std::string k(1, static_cast<char>('0' + t));
      const ResponseCache::Compiled c = cache.CompiledIndex(k);
      const auto tenants = cache.Tenants();
      if (std::find(tenants.begin(), tenants.end(), k) == tenants.end()) {
        ASSERT_EQ(c.index, nullptr) << k;
      }
      compiled += c.bytes;
    }
    ASSERT_EQ(compiled, cache.compiled_bytes());
  }
  EXPECT_GT(cache.num_evicted(), 0u);
  EXPECT_GT(cache.num_compiles(), 20u);
}

TEST(ResponseCacheCompileTest, RefusesBadOptions) {
  ResponseCache::CompileOptions c;
  c.enabled = true;
  c.max_bytes = 1000;
  EXPECT_THROW(ResponseCache(1000, c), Error);  // the budget must be below the bound
  c.max_bytes = 0;
  EXPECT_THROW(ResponseCache(3, c), Error);  // a quarter of 3 is 0
  c.growth = 0.0;
  EXPECT_THROW(ResponseCache(1 << 20, c), Error);
  c.growth = std::nan("");
  EXPECT_THROW(ResponseCache(1 << 20, c), Error);
  c.enabled = false;  // not checked when off
  EXPECT_NO_THROW(ResponseCache(1 << 20, c));
}

// A compile happens exactly when the compiled index fits the compile budget,
// whatever the largest id (the index's vocabulary): with a budget of exactly
// the bytes an unbounded cache's compile took, the index is compiled; one byte
// less, it is not. An id near 2^31 (a vocabulary of 2^31 ids, whose root table
// alone is over a gigabyte) is refused under a 1 GiB budget without building
// (building it would take gigabytes of working memory), and the tenant still
// drafts from its automaton.
TEST(ResponseCacheCompileTest, CompilesExactlyWhatFitsItsBudgetWhateverTheLargestId) {
  std::mt19937 rng(31);
  auto compiles = [](const Tokens& response, size_t budget) {
    ResponseCache::CompileOptions compile;
    compile.enabled = true;
    compile.min_tokens = 16;
    compile.max_bytes = budget;
    ResponseCache cache(budget + (size_t{1} << 20), compile);
    EXPECT_TRUE(cache.Insert("A", response));
    EXPECT_EQ(cache.num_compiles() == 1, cache.CompiledIndex("A").index != nullptr);
    // Compiled or not, the tenant drafts its response's continuation.
    uint32_t out[4];
    size_t count = 0;
    const Tokens context(response.begin(), response.begin() + 3);
    EXPECT_EQ(cache.Draft("A", context, 4, false, out, &count), 3u);
    EXPECT_EQ(Tokens(out, out + count), Tokens(response.begin() + 3, response.begin() + 7));
    return cache.compiled_bytes();
  };
  for (const uint32_t largest : {40u, 5000u, 300000u, 3000000u}) {
    for (const size_t length : {20u, 300u}) {
      Tokens response = Random(rng, length, 40);
      response[rng() % length] = largest;
      const size_t bytes = compiles(response, size_t{1} << 30);
      ASSERT_GT(bytes, 0u) << largest << " " << length;
      EXPECT_EQ(compiles(response, bytes), bytes) << largest << " " << length;
      EXPECT_EQ(compiles(response, bytes - 1), 0u) << largest << " " << length;
    }
  }
  Tokens response = Random(rng, 20, 40);
  response[7] = (1u << 31) - 2;
  EXPECT_EQ(compiles(response, size_t{1} << 30), 0u);
}

// A session drafts from its tenant's compiled index as from the same index
// attached to it: with fresh estimates (family 1's priors are family 0's),
// the first proposal of a calibrated session on a compiling cache equals that
// of a session whose cache does not compile but which has the compiled index
// attached, for random prompts; and the compiled index changes drafts.
TEST(ResponseCacheCompileTest, SessionDraftsFromTheCompiledIndexAsFromAnAttachedOne) {
  std::mt19937 rng(23);
  ResponseCache::CompileOptions compile;
  compile.enabled = true;
  compile.min_tokens = 16;
  auto compiling = std::make_shared<ResponseCache>(size_t{8} << 20, compile);
  auto plain = std::make_shared<ResponseCache>(size_t{8} << 20);
  std::vector<Tokens> pool;
  // Repeated phrases with varied continuations: counts matter.
  std::vector<Tokens> phrases;
  for (int i = 0; i < 6; ++i) phrases.push_back(Random(rng, 3 + rng() % 4, 9));
  for (int i = 0; i < 80; ++i) {
    Tokens r;
    for (int k = 0; k < 4; ++k) {
      const Tokens& p = phrases[rng() % phrases.size()];
      r.insert(r.end(), p.begin(), p.end());
      r.push_back(rng() % 9);
    }
    compiling->Insert("t", r);
    plain->Insert("t", r);
    pool.push_back(r);
  }
  const ResponseCache::Compiled c = compiling->CompiledIndex("t");
  ASSERT_NE(c.index, nullptr);
  SessionOptions o;
  o.policy = Policy::kCalibrated;
  o.draft_size = 24;
  o.max_dynamic_bytes = 1 << 16;
  size_t differ = 0;
  for (int trial = 0; trial < 200; ++trial) {
    const Tokens prompt = RandomContext(rng, pool, 9);
    const uint32_t start = rng() % 9;
    Session a(o), b(o), without(o);
    a.AttachCache(compiling, "t");
    b.AttachCache(plain, "t");
    b.AttachIndex(c.index);
    without.AttachCache(plain, "t");
    for (Session* s : {&a, &b, &without}) s->Prefill(prompt);
    const DraftTree ta = a.Propose(start);
    const DraftTree tb = b.Propose(start);
    const DraftTree tw = without.Propose(start);
    ASSERT_EQ(ta.tokens, tb.tokens) << "trial " << trial;
    ASSERT_EQ(ta.parents, tb.parents) << "trial " << trial;
    differ += ta.tokens != tw.tokens || ta.parents != tw.parents;
  }
  EXPECT_GT(differ, 50u);
}

// Drives one request through a session as a greedy verifier would, with the
// recorded output as the model's; returns the accepted draft tokens per step.
std::vector<size_t> RunRequest(Session& session, const Tokens& prompt, const Tokens& output) {
  session.Reset();
  session.Prefill(prompt);
  std::vector<size_t> accepted;
  for (size_t i = 0; i < output.size();) {
    const DraftTree& tree = session.Propose(output[i]);
    const size_t a = AcceptedLength(tree, std::span<const uint32_t>(output).subspan(i + 1));
    session.Commit(std::span<const uint32_t>(output).subspan(i, a + 1));
    accepted.push_back(a);
    i += a + 1;
  }
  return accepted;
}

TEST(SessionCacheTest, CacheRequestAddsOutputOrPromptAndOutput) {
  for (bool with_prompt : {false, true}) {
    auto cache = std::make_shared<ResponseCache>(size_t{1} << 20);
    SessionOptions o;
    o.cache_prompts = with_prompt;
    Session session(o);
    session.AttachCache(cache, "t");
    const Tokens prompt = {1, 2, 3}, output = {4, 5, 6, 7};
    RunRequest(session, prompt, output);
    ASSERT_TRUE(session.CacheRequest());
    Tokens expect = output;
    if (with_prompt) expect.insert(expect.begin(), prompt.begin(), prompt.end());
    EXPECT_EQ(cache->Responses("t"), std::vector<Tokens>{expect});
  }
}

TEST(SessionCacheTest, PaperRuleDraftsTheCachedContinuation) {
  // Outputs of distinct random tokens: the request's own automaton never
  // matches, so a second request with a cached identical output drafts the
  // rest of it from the cache at every step.
  std::mt19937 rng(5);
  auto cache = std::make_shared<ResponseCache>(size_t{1} << 20);
  SessionOptions o;  // the paper rule, 40 nodes, no fallback: any match drafts
  o.policy = Policy::kPaper;
  Session session(o);
  session.AttachCache(cache, "t");
  Tokens prompt = {1, 2}, output;
  for (uint32_t k = 0; k < 150; ++k) output.push_back(1000 + k * 7 + rng() % 7);
  const std::vector<size_t> cold = RunRequest(session, prompt, output);
  for (size_t a : cold) EXPECT_EQ(a, 0u);
  ASSERT_TRUE(session.CacheRequest());
  const std::vector<size_t> warm = RunRequest(session, prompt, output);
  size_t i = 0;
  for (size_t a : warm) {
    EXPECT_EQ(a, std::min<size_t>(39, output.size() - i - 1)) << "at " << i;
    i += a + 1;
  }
  EXPECT_GT(session.statistics().source(DraftSource::kCache).steps, 0u);
  EXPECT_NE(session.statistics().ToJson().find("\"cache\""), std::string::npos);
  // Another tenant sees nothing of it.
  session.AttachCache(cache, "other");
  for (size_t a : RunRequest(session, prompt, output)) EXPECT_EQ(a, 0u);
}

TEST(SessionCacheTest, DraftsEqualTheCacheLookupAndStayInTheTenant) {
  // Random small-alphabet requests; tenant A's outputs end with ids >= 1000.
  std::mt19937 rng(11);
  auto cache = std::make_shared<ResponseCache>(size_t{1} << 20);
  for (int i = 0; i < 30; ++i) {
    Tokens a = Random(rng, 20, 4), b = a;
    for (int k = 0; k < 10; ++k) a.push_back(1000 + rng() % 4), b.push_back(rng() % 4);
    cache->Insert("A", a);
    cache->Insert("B", b);
  }
  for (Policy policy : {Policy::kPaper, Policy::kCalibrated}) {
    SessionOptions o;
    o.policy = policy;
    o.draft_size = 16;
    Session session(o);
    session.AttachCache(cache, "B");
    for (int r = 0; r < 20; ++r) {
      const Tokens prompt = Random(rng, 5, 4), output = Random(rng, 60, 4);
      session.Reset();
      session.Prefill(prompt);
      Tokens context = prompt;
      for (size_t i = 0; i < output.size();) {
        const DraftTree& tree = session.Propose(output[i]);
        for (uint32_t t : tree.tokens) ASSERT_LT(t, 1000u);
        context.push_back(output[i]);
        Tokens expect(15);
        size_t n = 0;
        ASSERT_EQ(session.last_cache_length(),
                  cache->Draft("B", context, 15, true, expect.data(), &n));
        if (policy == Policy::kPaper && tree.source == DraftSource::kCache) {
          expect.resize(n);
          const Tokens drafted(tree.tokens.begin() + 1, tree.tokens.end());
          ASSERT_EQ(drafted, expect);
        }
        const size_t a = AcceptedLength(tree, std::span<const uint32_t>(output).subspan(i + 1));
        session.Commit(std::span<const uint32_t>(output).subspan(i, a + 1));
        context.insert(context.end(), output.begin() + static_cast<ptrdiff_t>(i) + 1,
                       output.begin() + static_cast<ptrdiff_t>(i + a + 1));
        i += a + 1;
      }
    }
    EXPECT_GT(session.statistics().source(DraftSource::kCache).steps +
                  session.statistics().source(DraftSource::kMerged).steps,
              0u);
  }
}

std::vector<uint8_t> ReadBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(in), {});
}
void WriteBytes(const std::string& path, const std::vector<uint8_t>& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
}

// Loading `path` into an empty cache fails with `code`, names the file, and
// inserts nothing.
void ExpectLoadFails(const std::string& path, const format::Sha256Digest& tokenizer,
                     ErrorCode code) {
  ResponseCache cache(size_t{1} << 20);
  try {
    cache.Load(path, tokenizer);
    ADD_FAILURE() << "loaded " << path;
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), code) << e.what();
    EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
  }
  EXPECT_EQ(cache.num_responses(), 0u);
}

TEST(ResponseCacheFileTest, RoundTripKeepsResponsesTenantsAndOrder) {
  testing::TempDir dir("sam_cache_test");
  const std::string path = (dir.path() / "c.samc").string();
  format::Sha256Digest tok{};
  tok[0] = 7;
  std::mt19937 rng(9);
  ResponseCache cache(30000);
  const std::vector<std::string> keys = {"a", "bb", ""};
  for (int i = 0; i < 200; ++i)
    cache.Insert(keys[rng() % 3], Random(rng, 1 + rng() % 40, 5));
  ASSERT_GT(cache.num_evicted(), 0u);
  cache.Save(path, tok);
  ResponseCache loaded(30000);
  loaded.Load(path, tok);
  EXPECT_EQ(loaded.Tenants(), cache.Tenants());
  for (const std::string& k : keys) EXPECT_EQ(loaded.Responses(k), cache.Responses(k)) << k;
  EXPECT_EQ(loaded.num_responses(), cache.num_responses());
  // A smaller bound keeps the newest: a suffix of the saved order.
  ResponseCache small(12000);
  small.Load(path, tok);
  EXPECT_LT(small.num_responses(), cache.num_responses());
  for (const std::string& k : keys) {
    const auto all = cache.Responses(k), kept = small.Responses(k);
    ASSERT_LE(kept.size(), all.size());
    EXPECT_TRUE(std::equal(kept.begin(), kept.end(), all.end() - static_cast<ptrdiff_t>(kept.size())));
  }
  // Saving again gives the same bytes.
  const std::string again = (dir.path() / "again.samc").string();
  loaded.Save(again, tok);
  EXPECT_EQ(ReadBytes(again), ReadBytes(path));
}

TEST(ResponseCacheFileTest, RefusesDamagedFilesAndAnotherTokenizer) {
  testing::TempDir dir("sam_cache_test");
  const std::string path = (dir.path() / "c.samc").string();
  format::Sha256Digest tok{}, other{};
  tok[0] = 1;
  other[0] = 2;
  ResponseCache cache(size_t{1} << 20);
  cache.Insert("t", Tokens{1, 2, 3, 4});
  cache.Insert("u", Tokens{5, 6});
  cache.Save(path, tok);
  const std::vector<uint8_t> good = ReadBytes(path);
  ExpectLoadFails(path, other, ErrorCode::kTokenizerMismatch);
  ExpectLoadFails((dir.path() / "missing.samc").string(), tok, ErrorCode::kIo);

  const std::string bad = (dir.path() / "bad.samc").string();
  for (size_t cut : {size_t{0}, size_t{20}, good.size() - 1}) {
    WriteBytes(bad, std::vector<uint8_t>(good.begin(), good.begin() + static_cast<ptrdiff_t>(cut)));
    ExpectLoadFails(bad, tok, ErrorCode::kTruncated);
  }
  for (size_t at = format::kBlobHeaderSize; at < good.size(); at += 3) {  // every payload region
    std::vector<uint8_t> flipped = good;
    flipped[at] ^= 0x10;
    WriteBytes(bad, flipped);
    ExpectLoadFails(bad, tok, ErrorCode::kChecksumMismatch);
  }
  std::vector<uint8_t> magic = good;
  magic[0] = 'X';
  WriteBytes(bad, magic);
  ExpectLoadFails(bad, tok, ErrorCode::kBadMagic);
  std::vector<uint8_t> newer = good;
  newer[12] = 2;  // version 2
  WriteBytes(bad, newer);
  ExpectLoadFails(bad, tok, ErrorCode::kUnsupportedVersion);

  // Valid checksums over impossible contents (written as blob files).
  auto payload_of = [&](uint64_t n, std::vector<uint32_t> words) {
    std::vector<uint8_t> p(tok.begin(), tok.end());
    for (int i = 0; i < 8; ++i) p.push_back(static_cast<uint8_t>(n >> (8 * i)));
    for (uint32_t w : words)
      for (int i = 0; i < 4; ++i) p.push_back(static_cast<uint8_t>(w >> (8 * i)));
    return p;
  };
  const std::vector<std::vector<uint8_t>> impossible = {
      payload_of(1, {0, 1000000}),                             // length past the payload
      payload_of(2, {0, 1, 5}),                                // a response missing
      payload_of(1, {0, 2, 5, ResponseCache::kSeparator}),     // the separator
      payload_of(1, {0, 0}),                                   // an empty response
      payload_of(1, {99, 1, 5}),                               // key past the payload
      payload_of(0, {7}),                                      // trailing bytes
  };
  for (const auto& p : impossible) {
    format::WriteBlobFile(bad, format::kResponseCacheMagic, 1, p);
    ExpectLoadFails(bad, tok, ErrorCode::kCorruptStructure);
  }
  // Responses are numbered from 1 in these messages, as sam-build's cache
  // corpora number them (the reader is shared by Load, sam-inspect and
  // sam-build): the first response is "response 1", the second "response 2".
  const std::vector<std::pair<std::vector<uint8_t>, std::string>> numbered = {
      {payload_of(1, {0, 1000000}), "response 1 has an impossible length"},
      {payload_of(2, {0, 1, 5, 0, 2, 6, ResponseCache::kSeparator}),
       "response 2 holds the separator"},
  };
  for (const auto& [p, message] : numbered) {
    format::WriteBlobFile(bad, format::kResponseCacheMagic, 1, p);
    try {
      format::ReadResponseCacheFile(bad);
      ADD_FAILURE() << "read " << message;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(message), std::string::npos) << e.what();
    }
  }
}


// A cache file holds no vocabulary: the cache learns it from the sessions
// drafting from it. A loaded response with an id at or above that vocabulary
// is refused, whichever comes first (the load or the attach), naming the
// file, the response (from 1), the id and the vocabulary; once known, a file
// of another vocabulary is refused with nothing inserted, and a compile is
// never sized by an out-of-vocabulary id inserted before.
TEST(ResponseCacheFileTest, IdsAtOrAboveTheSessionsVocabularyAreRefused) {
  testing::TempDir dir("sam_cache_test");
  const std::string path = (dir.path() / "c.samc").string();
  const format::Sha256Digest tok{};
  const Tokens good = {1, 2, 3, 4, 5};
  const Tokens foreign = {2, 4294967294u, 40000, 5};
  {
    ResponseCache cache(1 << 20);
    cache.Insert("a", good);
    cache.Insert("a", foreign);
    cache.Save(path, tok);
  }
  const auto oracle = BuildOracle({Tokens{7, 8, 9, 31}});  // vocabulary 32
  ASSERT_EQ(oracle->file->view().vocab_size(), 32u);
  const auto index = StaticIndex::Create(&oracle->file->view(), {});
  auto expect_message = [&](const Error& e) {
    const std::string m = e.what();
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument) << m;
    EXPECT_NE(m.find(path), std::string::npos) << m;
    EXPECT_NE(m.find("response 2"), std::string::npos) << m;
    EXPECT_NE(m.find("4294967294"), std::string::npos) << m;
    EXPECT_NE(m.find("32"), std::string::npos) << m;
  };
  // Loaded first: attaching the cache, or an index after it, is refused.
  for (const bool index_first : {true, false}) {
    auto cache = std::make_shared<ResponseCache>(1 << 20);
    cache->Load(path, tok);
    Session s{SessionOptions{}};
    try {
      if (index_first) {
        s.AttachIndex(index);
        s.AttachCache(cache, "a");
      } else {
        s.AttachCache(cache, "a");
        s.AttachIndex(index);
      }
      ADD_FAILURE() << "attached a cache holding id 4294967294 to a vocabulary of 32";
    } catch (const Error& e) {
      expect_message(e);
    }
  }
  // Vocabulary known first: the load is refused and inserts nothing.
  {
    auto cache = std::make_shared<ResponseCache>(1 << 20);
    Session s{SessionOptions{}};
    s.AttachIndex(index);
    s.AttachCache(cache, "a");
    try {
      cache->Load(path, tok);
      ADD_FAILURE() << "loaded id 4294967294 into a cache of vocabulary 32";
    } catch (const Error& e) {
      expect_message(e);
    }
    EXPECT_EQ(cache->num_responses(), 0u);
    // Inserting such a response does not cache it; an in-vocabulary one does.
    EXPECT_FALSE(cache->Insert("a", foreign));
    EXPECT_TRUE(cache->Insert("a", good));
  }
  // A compile after the vocabulary is known ignores an out-of-vocabulary id
  // inserted before (an id the sessions never draft): the compiled index has
  // the vocabulary of the ids below it, not the stray id's.
  {
    ResponseCache::CompileOptions compile;
    compile.enabled = true;
    compile.min_tokens = 12;
    auto cache = std::make_shared<ResponseCache>(size_t{64} << 20, compile);
    ASSERT_TRUE(cache->Insert("t", Tokens{3, 4, 5, 6, 2000000000u, 7, 8, 9}));
    ASSERT_EQ(cache->num_compiles(), 0u);  // below min_tokens
    Session s{SessionOptions{}};
    s.AttachIndex(index);
    s.AttachCache(cache, "t");
    ASSERT_TRUE(cache->Insert("t", Tokens{11, 12, 13, 14}));
    const ResponseCache::Compiled c = cache->CompiledIndex("t");
    ASSERT_NE(c.index, nullptr);
    EXPECT_EQ(c.index->view().vocab_size(), 15u);
    EXPECT_EQ(c.responses, 2u);
  }
}

}  // namespace
}  // namespace sam::runtime
