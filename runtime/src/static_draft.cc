#include <algorithm>

#include "sam/runtime/static_match.h"

namespace sam::runtime {

size_t StaticContinuation(const format::IndexView& view, uint64_t state, size_t want,
                          uint32_t* out) {
  if (state == format::kRoot) return 0;
  const uint64_t end = view.MinEndpos(state);
  if (end == 0) return 0;
  const uint64_t n = view.num_tokens();
  size_t count = 0;
  for (uint64_t p = end + 1; count < want && p <= n; ++p) {
    const uint32_t t = view.Token(p);
    if (t >= view.separator()) break;  // document end (or a corrupt id): stop, never pad
    out[count++] = t;
  }
  return count;
}

namespace {

// v's explicit edge range, clamped so that a corrupt degree vector never
// sends a read outside the edge section.
std::pair<uint64_t, uint64_t> ExplicitEdges(const format::IndexView& view, uint64_t v) {
  auto [lo, hi] = view.EdgeRange(v);
  hi = std::min(hi, view.num_edges());
  return {std::min(lo, hi), hi};
}

// Calls f(token, target) for the outgoing transitions of a non-root state v:
// the implicit one first, then the explicit ones in token order.
// Document-end transitions do not exist in the index.
template <typename F>
void ForEachChildOf(const format::IndexView& view, uint64_t v, F&& f) {
  if (v < view.num_tokens()) {
    const uint32_t t = view.Token(v + 1);
    if (t < view.separator()) f(t, v + 1);
  }
  auto [lo, hi] = ExplicitEdges(view, v);
  const uint64_t num_states = view.num_states();
  for (; lo < hi; ++lo) {
    const uint64_t target = view.edges().Get(lo);
    if (target == format::kRoot || target >= num_states) continue;  // corrupt: skip
    const uint32_t label = view.LastToken(target);
    if (label >= view.separator()) continue;
    f(label, target);
  }
}

}  // namespace

const StaticTreeBuilder::CachedChildren& StaticTreeBuilder::TopChildren(
    const format::IndexView& view, uint64_t state) {
  if (cache_.empty()) cache_.resize(kCacheEntries);
  const uint64_t h = (state ^ reinterpret_cast<uintptr_t>(&view)) * 0x9E3779B97F4A7C15ull;
  CachedChildren& e = cache_[h >> 51 & (kCacheEntries - 1)];
  if (e.view == &view && e.state == state) return e;
  e.view = &view;
  e.state = state;
  e.size = 0;
  // Keep the kCachedChildren heaviest (count, then smaller token) by insertion.
  ForEachChildOf(view, state, [&](uint32_t token, uint64_t target) {
    const uint64_t count = view.Count(target);
    uint32_t pos = e.size;
    while (pos > 0 && (e.count[pos - 1] < count ||
                       (e.count[pos - 1] == count && e.token[pos - 1] > token)))
      --pos;
    if (pos >= kCachedChildren) return;
    const uint32_t last = std::min<uint32_t>(e.size, kCachedChildren - 1);
    for (uint32_t i = last; i > pos; --i) {
      e.count[i] = e.count[i - 1];
      e.token[i] = e.token[i - 1];
      e.target[i] = e.target[i - 1];
    }
    e.count[pos] = count;
    e.token[pos] = token;
    e.target[pos] = target;
    if (e.size < kCachedChildren) ++e.size;
  });
  return e;
}

void StaticTreeBuilder::Build(const format::IndexView& view, uint64_t state,
                              const StaticTreeOptions& options, DraftTree* tree,
                              std::vector<double>* weights_out) {
  auto heavier = [](const Candidate& a, const Candidate& b) { return a.weight < b.weight; };
  heap_.clear();
  node_state_.assign(tree->size(), format::kRoot);
  node_state_[0] = state;
  width_.assign(options.max_depth + 2, 0);
  width_[0] = 1;
  if (weights_out) weights_out->assign(tree->size(), 1.0);
  if (state == format::kRoot || tree->size() != 1) return;

  // Pushes the (at most max_width) heaviest children of `node` onto the heap.
  auto expand = [&](int32_t node, double weight) {
    const uint64_t v = node_state_[node];
    const size_t depth = tree->depths[node] + 1;
    if (depth > options.max_depth) return;
    const double total = static_cast<double>(view.Count(v));
    if (total <= 0) return;
    children_.clear();
    auto [lo, hi] = ExplicitEdges(view, v);
    if (hi - lo >= kCacheMinDegree && options.max_width <= kCachedChildren) {
      const CachedChildren& top = TopChildren(view, v);
      for (uint32_t i = 0; i < top.size; ++i)
        children_.push_back(Candidate{weight * static_cast<double>(top.count[i]) / total, node,
                                      top.target[i], top.token[i]});
    } else {
      ForEachChildOf(view, v, [&](uint32_t token, uint64_t target) {
        children_.push_back(Candidate{weight * static_cast<double>(view.Count(target)) / total,
                                      node, target, token});
      });
    }
    const size_t keep = std::min(children_.size(), options.max_width);
    std::partial_sort(children_.begin(), children_.begin() + keep, children_.end(),
                      [](const Candidate& a, const Candidate& b) {
                        return a.weight > b.weight ||
                               (a.weight == b.weight && a.token < b.token);
                      });
    for (size_t i = 0; i < keep; ++i) {
      heap_.push_back(children_[i]);
      std::push_heap(heap_.begin(), heap_.end(), heavier);
    }
  };

  expand(0, 1.0);
  while (tree->size() < options.max_nodes && !heap_.empty()) {
    std::pop_heap(heap_.begin(), heap_.end(), heavier);
    const Candidate c = heap_.back();
    heap_.pop_back();
    const size_t depth = tree->depths[c.parent] + 1;
    if (width_[depth] >= options.max_width) continue;
    ++width_[depth];
    const int node = tree->Add(c.parent, c.token);
    node_state_.push_back(c.state);
    if (weights_out) weights_out->push_back(c.weight);
    expand(node, c.weight);
  }
}

}  // namespace sam::runtime
