// Oracles shared by the runtime tests for child and subtree records: a
// state's heaviest transitions by enumeration, and the walk that
// StaticIndex::Options::subtree_nodes defines, written plainly.
#ifndef SAM_TESTS_RUNTIME_SUBTREE_WALK_H_
#define SAM_TESTS_RUNTIME_SUBTREE_WALK_H_

#include <algorithm>
#include <cstdint>
#include <vector>

#include "sam/format/index.h"
#include "sam/runtime/static_index.h"

namespace sam::runtime::test_util {

// Every transition of v, heaviest first (count descending, then token), at
// most `width` of them.
inline std::vector<StaticIndex::Child> HeaviestChildren(const format::IndexView& view, uint64_t v,
                                                        size_t width = SIZE_MAX) {
  std::vector<StaticIndex::Child> all;
  view.ForEachChild(v, [&](uint32_t token, uint64_t target) {
    all.push_back({token, target, view.Count(target)});
  });
  std::sort(all.begin(), all.end(), [](const auto& a, const auto& b) {
    return a.count != b.count ? a.count > b.count : a.token < b.token;
  });
  all.resize(std::min(all.size(), width));
  return all;
}

// A subtree entry of v's record: the tokens from v to it, its state and
// count, and its parent's place in the record (the parent's child index,
// or the number of children plus its own entry index).
struct SubtreeEntry {
  std::vector<uint32_t> path;
  uint64_t target, count;
  uint32_t parent_place;
};

// The subtree entries of v's record, in order: a best-first walk from v
// (weight count / Count(v); ties: shallower first, then first pushed) of
// `nodes` nodes below v, a state with a record (a clone that occurs at least
// record_min_count times) pushing its top_k heaviest transitions, a position
// that occurs once the token after it; kept: the walked nodes at depth 2 or
// more whose parent is a child of v or kept.
inline std::vector<SubtreeEntry> SubtreeWalk(const format::IndexView& view, uint64_t v,
                                             size_t nodes, size_t top_k,
                                             uint64_t record_min_count) {
  struct W {
    double p;
    size_t depth, seq;
    std::vector<uint32_t> path;
    uint64_t target, count;
    int parent_place;  // -1: its parent is not kept (depth 1: -2 - its child index)
  };
  std::vector<W> open;
  size_t seq = 0;
  const double total = static_cast<double>(view.Count(v));
  auto push_children = [&](const std::vector<uint32_t>& path, uint64_t state, int place) {
    int j = 0;
    for (const auto& c : HeaviestChildren(view, state, top_k)) {
      std::vector<uint32_t> child_path = path;
      child_path.push_back(c.token);
      const int parent_place = path.empty() ? -2 - j++ : place;
      open.push_back(W{static_cast<double>(c.count) / total, child_path.size(), seq++, child_path,
                       c.target, c.count, parent_place});
    }
  };
  push_children({}, v, -1);
  const size_t size = open.size();  // v's children in its record
  std::vector<SubtreeEntry> kept;
  for (size_t taken = 0; taken < nodes && !open.empty(); ++taken) {
    auto best = std::min_element(open.begin(), open.end(), [](const W& a, const W& b) {
      if (a.p != b.p) return a.p > b.p;
      if (a.depth != b.depth) return a.depth < b.depth;
      return a.seq < b.seq;
    });
    const W w = *best;
    open.erase(best);
    int place = -1;
    if (w.depth == 1) {
      place = -2 - w.parent_place;
    } else if (w.parent_place >= 0) {
      place = static_cast<int>(size + kept.size());
      kept.push_back({w.path, w.target, w.count, static_cast<uint32_t>(w.parent_place)});
    }
    if (view.IsClone(w.target) && view.Count(w.target) >= record_min_count) {
      push_children(w.path, w.target, place);
    } else if (w.count == 1 && !view.IsClone(w.target) && w.target < view.num_tokens() &&
               view.Token(w.target + 1) < view.separator()) {
      std::vector<uint32_t> path = w.path;
      path.push_back(view.Token(w.target + 1));
      open.push_back(W{w.p, path.size(), seq++, path, w.target + 1, 1, -1});
    }
  }
  return kept;
}

}  // namespace sam::runtime::test_util

#endif  // SAM_TESTS_RUNTIME_SUBTREE_WALK_H_
