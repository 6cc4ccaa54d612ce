// Internal: enumerating and ranking the children of a static-index state.
#ifndef SAM_RUNTIME_SRC_INDEX_CHILDREN_H_
#define SAM_RUNTIME_SRC_INDEX_CHILDREN_H_

#include <algorithm>
#include <cstdint>
#include <utility>

#include "sam/format/index.h"
#include "sam/runtime/static_index.h"

namespace sam::runtime::internal {

// Writes the (at most k) heaviest children of v, whose explicit transitions
// are edges [lo, hi), into out[0..), heaviest first (count descending, then
// token ascending), by insertion; returns how many.
inline uint32_t TopChildrenOf(const format::IndexView& view, uint64_t v, uint64_t lo,
                              uint64_t hi, uint32_t k, StaticIndex::Child* out) {
  uint32_t size = 0;
  view.ForEachChild(v, lo, hi, [&](uint32_t token, uint64_t target) {
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
  const auto [lo, hi] = view.EdgeRange(v);  // bounded even on a corrupt file
  return TopChildrenOf(view, v, lo, hi, k, out);
}

}  // namespace sam::runtime::internal

#endif  // SAM_RUNTIME_SRC_INDEX_CHILDREN_H_
