// Readers (cursors, Draft, compiled indexes) of one ResponseCache in several threads while a
// writer adds responses and evicts: no data race (labelled `tsan` for
// ThreadSanitizer builds), and no tenant ever sees another tenant's text.
#include <gtest/gtest.h>

#include <atomic>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "sam/runtime/response_cache.h"
#include "sam/runtime/session.h"

namespace sam::runtime {
namespace {

// Tenant x's responses use ids 0..7, tenant y's ids 1000..1007.
uint32_t Id(int tenant, uint32_t r) { return tenant == 0 ? r % 8 : 1000 + r % 8; }

// A session of `policy` with small drafts and a 1 MiB dynamic automaton.
SessionOptions SmallOptions(Policy policy) {
  SessionOptions o;
  o.max_dynamic_bytes = 1 << 20;
  o.policy = policy;
  o.draft_size = 16;
  return o;
}

// One random request of `tenant` through `session` (prompt 5, output 40 ids
// of 3), accepting the drafted chain's matching prefix; `seen` sees each tree.
template <typename F>
void RunRequest(Session& session, int tenant, std::mt19937& rng, F&& seen) {
  std::vector<uint32_t> prompt(5), output(40);
  for (uint32_t& t : prompt) t = Id(tenant, rng() % 3);
  for (uint32_t& t : output) t = Id(tenant, rng() % 3);
  session.Reset();
  session.Prefill(prompt);
  for (size_t i = 0; i < output.size();) {
    const DraftTree& tree = session.Propose(output[i]);
    seen(tree);
    size_t a = 0;
    while (a + 1 < tree.size() && i + a + 1 < output.size() &&
           tree.parents[a + 1] == static_cast<int32_t>(a) &&
           tree.tokens[a + 1] == output[i + a + 1])
      ++a;
    session.Commit(std::span<const uint32_t>(output).subspan(i, a + 1));
    i += a + 1;
  }
}

// Plain, and compiling on the cache's own thread (Clear() then also meets
// compiles in flight).
class ReadersWhileWriting : public ::testing::TestWithParam<bool> {};
INSTANTIATE_TEST_SUITE_P(PlainAndCompiling, ReadersWhileWriting, ::testing::Bool(),
                         [](const auto& info) { return info.param ? "compiling" : "plain"; });

TEST_P(ReadersWhileWriting, CursorsAndDrafts) {
  ResponseCache::CompileOptions compile;
  compile.enabled = GetParam();
  compile.background = true;
  compile.min_tokens = 64;
  // Small: the writer evicts all the time (compiling: a quarter of it for the
  // compiled indexes, each about 45 KiB here).
  ResponseCache cache(GetParam() ? 1 << 20 : 64 << 10, compile);
  const std::string keys[2] = {"x", "y"};
  std::atomic<bool> done{false};
  std::atomic<int> foreign{0};
  std::atomic<uint64_t> drafted{0};

  std::thread writer([&] {
    std::mt19937 rng(1);
    for (int i = 0; i < 3000; ++i) {
      const int tenant = static_cast<int>(rng() % 2);
      std::vector<uint32_t> r(1 + rng() % 60);
      for (uint32_t& t : r) t = Id(tenant, rng() % 3);
      cache.Insert(keys[tenant], r);
      if (i % 500 == 499) cache.Clear();
    }
    done = true;
  });
  std::vector<std::thread> readers;
  for (int k = 0; k < 4; ++k) {
    readers.emplace_back([&, k] {
      std::mt19937 rng(100 + k);
      const int tenant = k % 2;
      ResponseCache::Cursor cursor = cache.OpenCursor(keys[tenant]);
      std::vector<uint32_t> out(32), context;
      while (!done) {
        const uint32_t token = Id(tenant, rng() % 3);
        size_t n = 0;
        cursor.Peek(token, 32, true, out.data(), &n);
        for (size_t i = 0; i < n; ++i)
          if (out[i] / 1000 != static_cast<uint32_t>(tenant)) ++foreign;
        drafted += n;
        const uint32_t one[1] = {token};
        cursor.Advance(one);
        context.push_back(token);
        if (context.size() > 40) context.erase(context.begin());
        cache.Draft(keys[tenant], context, 32, false, out.data(), &n);
        for (size_t i = 0; i < n; ++i)
          if (out[i] / 1000 != static_cast<uint32_t>(tenant)) ++foreign;
        if (rng() % 100 == 0) cursor.Reset();
        if (const ResponseCache::Compiled c = cursor.compiled(); c.index != nullptr) {
          const format::IndexView& view = c.index->view();
          const uint64_t p = 1 + rng() % view.num_tokens();
          if (view.Token(p) < view.separator() && view.Token(p) / 1000 != static_cast<uint32_t>(tenant))
            ++foreign;
        }
        (void)cache.bytes();
      }
    });
  }
  writer.join();
  for (std::thread& t : readers) t.join();
  cache.WaitForCompiles();
  EXPECT_EQ(foreign.load(), 0);
  EXPECT_GT(drafted.load(), 0u);  // the readers did draft
  if (GetParam()) {
    EXPECT_GT(cache.num_compiles(), 0u);
  }
  EXPECT_LE(cache.bytes(), cache.max_bytes());
}

// Sessions in several threads share one cache and add their finished
// requests to it (Session::CacheRequest) while the others draft from it.
TEST(ResponseCacheConcurrencyTest, SessionsAddWhileOthersDraft) {
  auto cache = std::make_shared<ResponseCache>(256 << 10);
  std::atomic<int> foreign{0};
  std::atomic<uint64_t> from_cache{0};
  std::vector<std::thread> threads;
  for (int k = 0; k < 4; ++k) {
    threads.emplace_back([&, k] {
      const int tenant = k % 2;
      Session session(SmallOptions(k < 2 ? Policy::kPaper : Policy::kCalibrated));
      session.AttachCache(cache, tenant == 0 ? "x" : "y");
      std::mt19937 rng(10 + k);
      for (int request = 0; request < 60; ++request) {
        RunRequest(session, tenant, rng, [&](const DraftTree& tree) {
          for (uint32_t t : tree.tokens)
            if (t / 1000 != static_cast<uint32_t>(tenant)) ++foreign;
          if (tree.source == DraftSource::kCache) ++from_cache;
        });
        session.CacheRequest();
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(foreign.load(), 0);
  EXPECT_GT(from_cache.load(), 0u);
  EXPECT_LE(cache->bytes(), cache->max_bytes());
}

// With compiled tenants (CompileOptions): calibrated sessions draft from the
// compiled indexes, which inserts recompile and evictions drop, while other
// sessions insert; a small bound keeps both happening.
// Both ways of compiling: on the inserting thread, and on the cache's own.
class CompiledIndexesWhileWriting : public ::testing::TestWithParam<bool> {};
INSTANTIATE_TEST_SUITE_P(SyncAndBackground, CompiledIndexesWhileWriting, ::testing::Bool(),
                         [](const auto& info) { return info.param ? "background" : "sync"; });

TEST_P(CompiledIndexesWhileWriting, SessionsDraftAndInsert) {
  ResponseCache::CompileOptions compile;
  compile.enabled = true;
  compile.min_tokens = 64;
  compile.growth = 0.25;
  compile.background = GetParam();
  auto cache = std::make_shared<ResponseCache>(size_t{512} << 10, compile);
  std::atomic<int> foreign{0};
  std::atomic<uint64_t> compiled_seen{0};
  std::vector<std::thread> threads;
  for (int k = 0; k < 4; ++k) {
    threads.emplace_back([&, k] {
      const int tenant = k % 2;
      Session session(SmallOptions(Policy::kCalibrated));
      session.AttachCache(cache, tenant == 0 ? "x" : "y");
      std::mt19937 rng(20 + k);
      for (int request = 0; request < 60; ++request) {
        RunRequest(session, tenant, rng, [&](const DraftTree& tree) {
          for (uint32_t t : tree.tokens)
            if (t / 1000 != static_cast<uint32_t>(tenant)) ++foreign;
        });
        const ResponseCache::Compiled c = cache->CompiledIndex(tenant == 0 ? "x" : "y");
        if (c.index != nullptr) {
          ++compiled_seen;
          const format::IndexView& view = c.index->view();
          for (uint64_t p = 1; p <= view.num_tokens(); ++p)
            if (view.Token(p) < view.separator() &&
                view.Token(p) / 1000 != static_cast<uint32_t>(tenant))
              ++foreign;
        }
        session.CacheRequest();
      }
    });
  }
  for (std::thread& t : threads) t.join();
  cache->WaitForCompiles();
  EXPECT_EQ(foreign.load(), 0);
  EXPECT_GT(compiled_seen.load(), 0u);
  EXPECT_GT(cache->num_compiles(), 0u);
  EXPECT_LE(cache->bytes(), cache->max_bytes());
}

}  // namespace
}  // namespace sam::runtime
