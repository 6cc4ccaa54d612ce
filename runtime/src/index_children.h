// Internal: enumerating and ranking the children of a static-index state.
#ifndef SAM_RUNTIME_SRC_INDEX_CHILDREN_H_
#define SAM_RUNTIME_SRC_INDEX_CHILDREN_H_

#include <algorithm>
#include <cstdint>
#include <utility>

#include "sam/format/index.h"
#include "sam/runtime/static_index.h"

namespace sam::runtime::internal {

// v's explicit edge range, clamped so that a corrupt degree vector never
// sends a read outside the edge section.
inline std::pair<uint64_t, uint64_t> ExplicitEdges(const format::IndexView& view, uint64_t v) {
  auto [lo, hi] = view.EdgeRange(v);
  hi = std::min(hi, view.num_edges());
  return {std::min(lo, hi), hi};
}

// Starts loading what enumerating and weighing the targets of edges
// [lo, hi) reads: their labels (IndexView::PrefetchLabels) and their
// occurrence counts, so that the cache misses of all the children overlap.
inline void PrefetchChildren(const format::IndexView& view, uint64_t lo, uint64_t hi) {
  view.PrefetchLabels(lo, hi);
  const uint64_t n = view.num_tokens();
  const uint64_t prefix_counts = view.prefix_counts().size();
  for (uint64_t e = lo; e < hi; ++e) {
    const uint64_t t = view.edges().Get(e);
    if (t == format::kRoot || t >= view.num_states()) continue;
    if (t > n) view.clone_counts().Prefetch(t - n - 1);
    else if (t <= prefix_counts) view.prefix_counts().Prefetch(t - 1);
  }
}

// Calls f(token, target) for the outgoing transitions of a non-root state v
// whose explicit transitions are edges [lo, hi): the implicit one first, then
// the explicit ones in token order. Document-end transitions do not exist in
// the index; corrupt targets are skipped.
template <typename F>
void ForEachChildOf(const format::IndexView& view, uint64_t v, uint64_t lo, uint64_t hi,
                    F&& f) {
  if (v < view.num_tokens()) {
    const uint32_t t = view.Token(v + 1);
    if (t < view.separator()) f(t, v + 1);
  }
  const uint64_t num_states = view.num_states();
  PrefetchChildren(view, lo, hi);
  for (; lo < hi; ++lo) {
    const uint64_t target = view.edges().Get(lo);
    if (target == format::kRoot || target >= num_states) continue;  // corrupt: skip
    const uint32_t label = view.LastToken(target);
    if (label >= view.separator()) continue;
    f(label, target);
  }
}

// The same over v's own edge range (at most vocab_size() explicit transitions).
template <typename F>
void ForEachChildOf(const format::IndexView& view, uint64_t v, F&& f) {
  const auto [lo, hi] = ExplicitEdges(view, v);
  ForEachChildOf(view, v, lo, hi, f);
}

// Writes the (at most k) heaviest children of v, whose explicit transitions
// are edges [lo, hi), into out[0..), heaviest first (count descending, then
// token ascending), by insertion; returns how many.
inline uint32_t TopChildrenOf(const format::IndexView& view, uint64_t v, uint64_t lo,
                              uint64_t hi, uint32_t k, StaticIndex::Child* out) {
  uint32_t size = 0;
  ForEachChildOf(view, v, lo, hi, [&](uint32_t token, uint64_t target) {
    const uint64_t count = view.Count(target);
    uint32_t pos = size;
    while (pos > 0 && (out[pos - 1].count < count ||
                       (out[pos - 1].count == count && out[pos - 1].token > token)))
      --pos;
    if (pos >= k) return;
    const uint32_t last = std::min(size, k - 1);
    for (uint32_t i = last; i > pos; --i) out[i] = out[i - 1];
    out[pos] = StaticIndex::Child{token, target, count};
    if (size < k) ++size;
  });
  return size;
}

// The same over v's own edge range.
inline uint32_t TopChildrenOf(const format::IndexView& view, uint64_t v, uint32_t k,
                              StaticIndex::Child* out) {
  const auto [lo, hi] = ExplicitEdges(view, v);
  return TopChildrenOf(view, v, lo, hi, k, out);
}

}  // namespace sam::runtime::internal

#endif  // SAM_RUNTIME_SRC_INDEX_CHILDREN_H_
