// The oracle shared by the runtime tests for child records: a state's
// heaviest transitions by enumeration.
#ifndef SAM_TESTS_RUNTIME_HEAVIEST_CHILDREN_H_
#define SAM_TESTS_RUNTIME_HEAVIEST_CHILDREN_H_

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

}  // namespace sam::runtime::test_util

#endif  // SAM_TESTS_RUNTIME_HEAVIEST_CHILDREN_H_
