// Internal: enumerating and ranking the children of a static-index state
// (the ranking the hub tables store: format::TopChildren).
#ifndef SAM_RUNTIME_SRC_INDEX_CHILDREN_H_
#define SAM_RUNTIME_SRC_INDEX_CHILDREN_H_

#include <cstdint>

#include "sam/format/accelerators.h"
#include "sam/format/index.h"
#include "sam/runtime/static_index.h"

namespace sam::runtime::internal {

// Writes the (at most k) heaviest children of v, whose explicit transitions
// are edges [lo, hi), into out[0..), heaviest first (count descending, then
// token ascending); returns how many.
inline uint32_t TopChildrenOf(const format::IndexView& view, uint64_t v, uint64_t lo,
                              uint64_t hi, uint32_t k, StaticIndex::Child* out) {
  return format::TopChildren(view, v, lo, hi, k, out);
}

// The same over v's own edge range.
inline uint32_t TopChildrenOf(const format::IndexView& view, uint64_t v, uint32_t k,
                              StaticIndex::Child* out) {
  const auto [lo, hi] = view.EdgeRange(v);  // bounded even on a corrupt file
  return TopChildrenOf(view, v, lo, hi, k, out);
}

}  // namespace sam::runtime::internal

#endif  // SAM_RUNTIME_SRC_INDEX_CHILDREN_H_
