// libFuzzer target for the runtime over a fuzzed index. The input is an
// index file in compact form (compact.h: without its alignment padding, a
// few KB), expanded and re-sealed (reseal.h: checksums recomputed, as a
// hostile file would have them) so that mutations reach the structure. If it
// opens (plain open, no verify: what a server does), sessions with several
// policies draft over it, attached both as a bare IndexView and as a
// prepared StaticIndex, fed a token stream derived from the input (random
// ids, stretches of the index's own text so that matches go deep, separators
// and out-of-vocabulary ids, which the session refuses, changing nothing, while the stream goes
// on). The index is also attached as a shard set of
// two copies, the StaticIndex has child records half the time, the
// calibrated policy's knobs (lookup limit, backoff, width, a cost curve)
// vary with the input, and half the sessions also draft from a response
// cache (compiled or not) that holds their earlier request. Every step must
// finish (libFuzzer's -timeout reports a hang), never read out of bounds
// (ASan), and return a well-formed draft tree. Open may refuse the file, and
// a step may report an error (an exception).
//
//   tools/ci/fuzz.sh fuzz_session     (builds build-fuzz/ with clang; docs/testing.md)
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <memory>
#include <vector>

#include "sam/error.h"
#include "sam/format/index.h"
#include "sam/runtime/budget.h"
#include "sam/runtime/response_cache.h"
#include "sam/runtime/session.h"
#include "sam/runtime/shard_set.h"
#include "sam/runtime/static_index.h"
#include "compact.h"
#include "reseal.h"

namespace {

// splitmix64: the token stream is a pure function of the input bytes.
struct Rng {
  uint64_t s;
  uint64_t Next() {
    uint64_t z = (s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  uint64_t Below(uint64_t n) { return n ? Next() % n : 0; }
};

uint64_t HashBytes(const uint8_t* data, size_t size) {
  uint64_t h = 1469598103934665603ull;  // FNV-1a
  for (size_t i = 0; i < size; ++i) h = (h ^ data[i]) * 1099511628211ull;
  return h;
}

// A token: mostly in the vocabulary, sometimes the separator or beyond it.
// Runs call; true when it was refused as an invalid argument (an out-of-vocabulary id: the
// session is then unchanged and the stream goes on), false when it ran. Other errors propagate.
template <typename Call>
bool Refused(Call&& call) {
  try {
    call();
    return false;
  } catch (const sam::Error& e) {
    if (e.code() != sam::ErrorCode::kInvalidArgument) throw;
    return true;
  }
}

uint32_t RandomToken(Rng& rng, const sam::format::IndexView& v) {
  const uint64_t r = rng.Below(64);
  if (r == 0) return v.separator();
  if (r == 1) return v.vocab_size() + 1 + static_cast<uint32_t>(rng.Below(1000));
  if (r == 2) return static_cast<uint32_t>(rng.Next());
  return static_cast<uint32_t>(rng.Below(v.vocab_size() ? v.vocab_size() : 1));
}

// Appends up to n tokens: a stretch of the index text (Token is defined on
// [1, num_tokens] whatever the file holds) or random ones.
void AppendTokens(Rng& rng, const sam::format::IndexView& v, size_t n,
                  std::vector<uint32_t>* out) {
  if (v.num_tokens() > 0 && rng.Below(4) != 0) {
    uint64_t p = 1 + rng.Below(v.num_tokens());
    for (size_t i = 0; i < n && p <= v.num_tokens(); ++i, ++p) out->push_back(v.Token(p));
  } else {
    for (size_t i = 0; i < n; ++i) out->push_back(RandomToken(rng, v));
  }
}

// limit: the policy's node bound (selection.h). A malformed tree is a bug
// whatever the index holds: report it and abort (a libFuzzer crash).
void CheckTree(const sam::runtime::DraftTree& t, uint32_t start, size_t limit) {
  const char* bad = nullptr;
  if (t.size() < 1 || t.parents.size() != t.size() || t.depths.size() != t.size())
    bad = "inconsistent array sizes";
  else if (t.size() > limit)
    bad = "more nodes than the policy allows";
  else if (t.tokens[0] != start || t.parents[0] != -1 || t.depths[0] != 0)
    bad = "node 0 is not the start token";
  for (size_t i = 1; !bad && i < t.size(); ++i) {
    const int32_t p = t.parents[i];
    if (p < 0 || static_cast<size_t>(p) >= i || t.depths[i] != t.depths[p] + 1)
      bad = "a parent does not precede its child, or a depth is wrong";
  }
  if (bad) {
    std::fprintf(stderr, "fuzz_session: bad draft tree (%zu nodes, limit %zu): %s\n", t.size(),
                 limit, bad);
    std::abort();
  }
}

// How a Drive attaches the index: as a bare view, as a prepared StaticIndex,
// or as a shard set of two prepared copies (merged lookups over tied shards).
enum class Attach { kView, kPrepared, kShards };

void Drive(const sam::format::IndexView& view,
           const std::vector<std::shared_ptr<const sam::runtime::StaticIndex>>& prepared,
           Attach attach, sam::runtime::Policy policy, uint64_t seed) {
  Rng rng{seed};
  sam::runtime::SessionOptions o;
  o.max_dynamic_bytes = size_t{1} << 20;
  o.policy = policy;
  o.draft_size = 1 + rng.Below(48);
  o.tuning.adaptive_length = rng.Below(2);
  // The calibrated ranking's knobs: the lookup limit (0: none), the backoff
  // threshold (0: never), the width and the path-probability floor.
  o.tuning.max_static_lookups = rng.Below(10);
  o.tuning.backoff_count = rng.Below(4) == 0 ? 0 : 1 + rng.Below(16);
  o.tree.width = o.tuning.calibrated_width = 1 + rng.Below(12);
  o.tuning.min_path_probability = rng.Below(4) == 0 ? 0.0 : 0.015;
  o.tuning.dynamic_link_fallback = rng.Below(2);
  // Chains a quarter of the time, with sam-cal's chain tuning drawn too.
  if (rng.Below(4) == 0) {
    o.shape = sam::runtime::DraftShape::kChain;
    o.tuning.chain_calibrated_width = 1 + rng.Below(4);
    o.tuning.chain_max_static_lookups = rng.Below(20);
    o.tuning.chain_min_path_probability = rng.Below(3) == 0 ? 0.0 : 0.003;
  }
  // Cost-aware sizing (ChooseTreeSize) a quarter of the time: a curve from
  // flat (GPU-like) to steep (CPU-like).
  if (rng.Below(4) == 0) {
    const double slope = static_cast<double>(rng.Below(100)) / 25.0;
    const sam::runtime::CostPoint points[] = {{1, 1.0}, {64, 1.0 + slope * 63.0 / 64.0}};
    o.cost_curve = sam::runtime::CostCurve::FromPoints(points);
  }
  // A response cache half the time (compiled into an index once a tenant
  // holds 16 tokens): each request's text is cached for the next, so the
  // second request drafts from it too.
  std::shared_ptr<sam::runtime::ResponseCache> cache;
  if (rng.Below(2) == 0) {
    sam::runtime::ResponseCache::CompileOptions compile;
    compile.enabled = rng.Below(2) == 0;
    compile.min_tokens = 16;
    cache = std::make_shared<sam::runtime::ResponseCache>(size_t{1} << (12 + rng.Below(8)),
                                                          compile);
  }
  sam::runtime::Session session(o);
  if (cache) session.AttachCache(cache, rng.Below(2) == 0 ? "a" : "b");
  switch (attach) {
    case Attach::kView: session.AttachIndex(&view); break;
    case Attach::kPrepared: session.AttachIndex(prepared[0]); break;
    case Attach::kShards: session.AttachShardSet(prepared); break;
  }
  std::vector<uint32_t> buf;
  for (int request = 0; request < 2; ++request) {
    buf.clear();
    AppendTokens(rng, view, rng.Below(64), &buf);
    if (Refused([&] { session.Prefill(buf); })) {  // an out-of-vocabulary id in the prompt
      buf.erase(std::remove_if(buf.begin(), buf.end(),
                               [&](uint32_t t) { return t >= view.vocab_size(); }),
                buf.end());
      session.Prefill(buf);
    }
    uint32_t start = buf.empty() ? 0 : buf.back();
    for (int step = 0; step < 48; ++step) {
      const sam::runtime::DraftTree* proposed = nullptr;
      if (Refused([&] { proposed = &session.Propose(start); })) {
        start = static_cast<uint32_t>(rng.Below(view.vocab_size() ? view.vocab_size() : 1));
        continue;
      }
      const sam::runtime::DraftTree& tree = *proposed;
      CheckTree(tree, start,
                policy == sam::runtime::Policy::kTree
                    ? std::max(o.draft_size, o.tree.nodes)
                    : o.draft_size);
      if (o.shape == sam::runtime::DraftShape::kChain && !tree.IsLinear()) {
        std::fprintf(stderr, "fuzz_session: a chain session drafted a branching tree\n");
        std::abort();
      }
      // Accept a prefix of the first root path (verification agreeing with
      // the draft), or commit the start token and something else.
      buf.assign(1, start);
      if (rng.Below(3) != 0) {
        const size_t want = rng.Below(tree.size());
        int node = 0;
        for (size_t i = 1; i < tree.size() && buf.size() <= want; ++i)
          if (tree.parents[i] == node) buf.push_back(tree.tokens[node = static_cast<int>(i)]);
      } else {
        AppendTokens(rng, view, rng.Below(6), &buf);
      }
      Refused([&] { session.Commit(buf); });  // refused: nothing was committed
      std::vector<uint32_t> next;
      AppendTokens(rng, view, 1, &next);
      start = next.empty() || rng.Below(4) == 0 ? RandomToken(rng, view) : next[0];
    }
    if (cache) {
      try {
        session.CacheRequest(rng.Below(2) == 0);  // with the prompt or without
      } catch (const std::exception&) {
        // A text holding the cache's separator id is refused; drafting goes on.
      }
    }
    session.Reset();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  size_t file_size = 0;
  std::vector<uint64_t> file_bytes = sam::fuzz::Expand(data, size, &file_size);
  sam::testing::Reseal(reinterpret_cast<uint8_t*>(file_bytes.data()), file_size);
  const uint64_t seed = HashBytes(data, size);
  // Open may refuse the file, and drafting over a corrupt one may report an
  // error: both are fine. Crashes, hangs and bad trees are not.
  try {
    auto file = sam::format::IndexFile::FromBuffer(file_bytes.data(), file_size, "fuzz");
    const sam::format::IndexView& view = file.view();
    sam::runtime::StaticIndex::Options so;
    so.min_degree = 2 + seed % 8;  // small indexes have hubs too
    so.top_k = 1 + (seed >> 8) % 8;
    // Child records (of clones occurring at least 2 or 3 times) half the time.
    so.record_min_count = (seed >> 16) % 2 == 0 ? 0 : 2 + (seed >> 17) % 2;
    // Half the time, when the file holds hub tables, the parameters its
    // sections were built with: the StaticIndex then reads the file's HUBS,
    // FILT and RECS (whose contents an O(1) open leaves unchecked) instead of
    // computing its own.
    if (view.hubs().present() && (seed >> 20) % 2 == 0) {
      so.min_degree = view.hubs().min_degree;
      const uint32_t top_k =
          view.child_records().present() ? view.child_records().top_k : view.hubs().top_k;
      so.top_k = std::clamp<uint32_t>(top_k, 1, 255);
      so.filter_bits_per_edge =
          view.edge_filter().present() ? std::min<uint32_t>(view.edge_filter().bits_per_edge, 64) : 0;
      so.record_min_count = 0;
    }
    const std::vector<std::shared_ptr<const sam::runtime::StaticIndex>> prepared = {
        sam::runtime::StaticIndex::Create(&view, so)};
    // A shard set's shards keep the long list (ShardIndexOptions): two
    // copies of the index, tied everywhere, so every lookup is merged.
    const auto shard =
        sam::runtime::StaticIndex::Create(&view, sam::runtime::ShardIndexOptions(so));
    const std::vector<std::shared_ptr<const sam::runtime::StaticIndex>> shards = {shard, shard};
    const sam::runtime::Policy policies[] = {sam::runtime::Policy::kPaper,
                                             sam::runtime::Policy::kTree,
                                             sam::runtime::Policy::kCalibrated};
    uint64_t k = 0;
    for (sam::runtime::Policy policy : policies) {
      for (Attach attach : {Attach::kView, Attach::kPrepared, Attach::kShards}) {
        try {
          Drive(view, attach == Attach::kShards ? shards : prepared, attach, policy, seed + ++k);
        } catch (const std::exception&) {
        }
      }
    }
  } catch (const std::exception&) {
  }
  return 0;
}
