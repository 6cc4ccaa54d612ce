// Order statistics of a sample (timings in reports and benchmarks): the one
// Percentile and Median of the project.
#ifndef SAM_RUNTIME_PERCENTILE_H_
#define SAM_RUNTIME_PERCENTILE_H_

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <vector>

namespace sam::runtime {

// Percentile (0..100) of a sample by nearest rank: the smallest value with at
// least `percent`% of the sample at or below it (the minimum for 0); 0 for an
// empty sample. T: any arithmetic type (double for a braced list).
template <typename T = double>
double Percentile(std::vector<T> values, double percent) {
  if (values.empty()) return 0.0;
  size_t rank = static_cast<size_t>(std::ceil(percent / 100.0 * static_cast<double>(values.size())));
  rank = std::clamp<size_t>(rank, 1, values.size()) - 1;
  std::nth_element(values.begin(), values.begin() + static_cast<std::ptrdiff_t>(rank), values.end());
  return static_cast<double>(values[rank]);
}

// The 50th percentile by nearest rank (for an even size, the lower middle value).
template <typename T = double>
double Median(std::vector<T> values) {
  return Percentile(std::move(values), 50);
}

}  // namespace sam::runtime

#endif  // SAM_RUNTIME_PERCENTILE_H_
