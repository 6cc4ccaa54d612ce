// Test oracle: two static automata are the same, state by state.
#ifndef SAM_TESTS_COMMON_SAME_AUTOMATON_H_
#define SAM_TESTS_COMMON_SAME_AUTOMATON_H_

#include <gtest/gtest.h>

#include <cstdint>
#include <utility>
#include <vector>

#include "sam/format/index.h"

namespace sam::testing {

// The text, then per state its length, count, link, first end position and
// children (token and target). Fatal failures: call through ASSERT_NO_FATAL_FAILURE
// or check HasFatalFailure() when the caller goes on.
inline void ExpectSameAutomaton(const format::IndexView& x, const format::IndexView& y) {
  ASSERT_EQ(x.num_tokens(), y.num_tokens());
  for (uint64_t p = 1; p <= x.num_tokens(); ++p) ASSERT_EQ(x.Token(p), y.Token(p)) << p;
  ASSERT_EQ(x.num_states(), y.num_states());
  for (uint64_t v = 0; v < x.num_states(); ++v) {
    ASSERT_EQ(x.Len(v), y.Len(v)) << v;
    ASSERT_EQ(x.Count(v), y.Count(v)) << v;
    if (v != format::kRoot) {
      ASSERT_EQ(x.Link(v), y.Link(v)) << v;
      ASSERT_EQ(x.MinEndpos(v), y.MinEndpos(v)) << v;
    }
    std::vector<std::pair<uint32_t, uint64_t>> cx, cy;
    x.ForEachChild(v, [&](uint32_t t, uint64_t w) { cx.emplace_back(t, w); });
    y.ForEachChild(v, [&](uint32_t t, uint64_t w) { cy.emplace_back(t, w); });
    ASSERT_EQ(cx, cy) << v;
  }
}

}  // namespace sam::testing

#endif  // SAM_TESTS_COMMON_SAME_AUTOMATON_H_
