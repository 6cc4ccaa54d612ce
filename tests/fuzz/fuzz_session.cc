// libFuzzer target for the runtime over a fuzzed index. The input is an
// index file in compact form (compact.h: without its alignment padding, a
// few KB), expanded and re-sealed (reseal.h: checksums recomputed, as a
// hostile file would have them) so that mutations reach the structure. If it
// opens (plain open, no verify: what a server does), sessions with several
// policies draft over it, attached both as a bare IndexView and as a
// prepared StaticIndex, fed a token stream derived from the input (random
// ids, stretches of the index's own text so that matches go deep, separators
// and out-of-vocabulary ids). Every step must finish (libFuzzer's -timeout
// reports a hang), never read out of bounds (ASan), and return a well-formed
// draft tree. Open may refuse the file, and a step may report an error (an
// exception).
//
//   tools/fuzz.sh fuzz_session     (builds build-fuzz/ with clang; docs/testing.md)
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <memory>
#include <vector>

#include "sam/format/index.h"
#include "sam/runtime/session.h"
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

void Drive(const sam::format::IndexView& view,
           const std::shared_ptr<const sam::runtime::StaticIndex>& prepared,
           sam::runtime::Policy policy, uint64_t seed) {
  Rng rng{seed};
  sam::runtime::SessionOptions o;
  o.max_dynamic_bytes = size_t{1} << 20;
  o.selection.policy = policy;
  o.selection.draft_size = 1 + rng.Below(48);
  o.selection.adaptive_length = rng.Below(2);
  sam::runtime::Session session(o);
  if (prepared) {
    session.AttachIndex(prepared);
  } else {
    session.AttachIndex(&view);
  }
  std::vector<uint32_t> buf;
  for (int request = 0; request < 2; ++request) {
    buf.clear();
    AppendTokens(rng, view, rng.Below(64), &buf);
    session.Prefill(buf);
    uint32_t start = buf.empty() ? 0 : buf.back();
    for (int step = 0; step < 48; ++step) {
      const sam::runtime::DraftTree& tree = session.Propose(start);
      CheckTree(tree, start,
                policy == sam::runtime::Policy::kTree
                    ? std::max(o.selection.draft_size, o.selection.max_tree_nodes)
                    : o.selection.draft_size);
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
      session.Commit(buf);
      std::vector<uint32_t> next;
      AppendTokens(rng, view, 1, &next);
      start = next.empty() || rng.Below(4) == 0 ? RandomToken(rng, view) : next[0];
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
    const auto prepared = sam::runtime::StaticIndex::Create(&view, so);
    const sam::runtime::Policy policies[] = {sam::runtime::Policy::kPaper,
                                             sam::runtime::Policy::kTree,
                                             sam::runtime::Policy::kCalibrated};
    uint64_t k = 0;
    for (sam::runtime::Policy policy : policies) {
      for (bool use_prepared : {false, true}) {
        try {
          Drive(view, use_prepared ? prepared : nullptr, policy, seed + ++k);
        } catch (const std::exception&) {
        }
      }
    }
  } catch (const std::exception&) {
  }
  return 0;
}
