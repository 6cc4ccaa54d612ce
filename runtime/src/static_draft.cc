#include <algorithm>
#include <bit>

#include "best_first_tree.h"
#include "index_children.h"
#include "sam/runtime/static_match.h"

namespace sam::runtime {

size_t StaticContinuation(const format::IndexView& view, uint64_t state, size_t want,
                          uint32_t* out) {
  if (state == format::kRoot) return 0;
  const uint64_t end = view.MinEndpos(state);
  if (end == 0) return 0;
  // Local copies: stores through `out` could otherwise alias the view's fields.
  const format::PackedView text = view.text();
  const uint32_t separator = view.separator();
  // MinEndpos is at most num_tokens(): the copy stops within the text.
  const uint64_t stop = want < view.num_tokens() - end ? end + want : view.num_tokens();
  size_t count = 0;
  for (uint64_t p = end + 1; p <= stop; ++p) {
    const uint32_t t = static_cast<uint32_t>(text.Get(p - 1));
    if (t >= separator) break;  // document end (or a corrupt id): stop, never pad
    out[count++] = t;
  }
  return count;
}

TopChildrenCache::TopChildrenCache(size_t entries)
    : entries_(std::bit_ceil(std::max<size_t>(entries, 2))),
      shift_(64 - std::countr_zero(entries_)) {}

std::span<const StaticIndex::Child> TopChildrenCache::Get(const format::IndexView& view,
                                                          uint64_t state) {
  if (table_.empty()) table_.resize(entries_);
  const uint64_t h = (state ^ reinterpret_cast<uintptr_t>(&view)) * 0x9E3779B97F4A7C15ull;
  Entry& e = table_[h >> shift_];
  if (e.view != &view || e.state != state) {
    e.view = &view;
    e.state = state;
    e.size = internal::TopChildrenOf(view, state, kChildren, e.children.data());
  }
  return std::span<const StaticIndex::Child>(e.children.data(), e.size);
}

void TopChildrenCache::Clear() {
  for (Entry& e : table_) e.view = nullptr;
}

void StaticTreeBuilder::Build(const format::IndexView& view, uint64_t state,
                              const StaticTreeOptions& options, DraftTree* tree,
                              std::vector<double>* weights_out) {
  // The shared hub table answers for hubs of its own view only (a Bare()
  // index has none: the builder's cache does).
  const StaticIndex* hubs = options.hubs != nullptr && options.hubs->prepared() &&
                                    &options.hubs->view() == &view
                                ? options.hubs
                                : nullptr;
  heap_.clear();
  node_state_.assign(tree->size(), format::kRoot);
  node_state_[0] = state;
  width_.assign(options.max_depth + 2, 0);
  width_[0] = 1;
  if (weights_out) weights_out->assign(tree->size(), 1.0);
  if (state == format::kRoot || tree->size() != 1) return;
  tree->accept_estimates.assign(1, 1.0f);

  // Pushes the (at most max_width) heaviest children of `node` onto the heap.
  auto expand = [&](int32_t node, double weight) {
    const uint64_t v = node_state_[node];
    const size_t depth = tree->depths[node] + 1;
    if (depth > options.max_depth) return;
    const double total = static_cast<double>(view.Count(v));
    if (total <= 0) return;
    // The heaviest children of a hub: from the shared table, else from this
    // builder's cache (a hub's thousands of transitions are scanned once, not
    // at every step); of a clone with a child record (StaticIndex::Options::
    // record_min_count): from the record; other states are scanned.
    children_.clear();
    std::span<const StaticIndex::Child> top;
    bool ranked = false;
    if (hubs != nullptr && options.max_width <= hubs->options().top_k) {
      ranked = hubs->TopChildren(v, &top);
      if (!ranked) {  // the state's child record, if it has one
        top = hubs->RecordChildren(v, &records_);
        ranked = !top.empty();
      }
    } else if (options.max_width <= kCachedChildren) {
      const auto [lo, hi] = view.EdgeRange(v);
      if (hi - lo >= TopChildrenCache::kMinDegree) {
        top = cache_.Get(view, v);
        ranked = true;
      }
    }
    // A child occurs at most as often as its parent; clamping keeps the
    // weights of a corrupt index in [0, 1] (never inf or NaN).
    auto share = [&](uint64_t count) {
      const double c = static_cast<double>(count);
      return c < total ? c / total : 1.0;
    };
    auto candidate = [&](uint64_t target, uint32_t token, double s) {
      return Candidate{weight * s, node, target, token, static_cast<float>(s)};
    };
    if (ranked) {
      for (const StaticIndex::Child& c : top)
        children_.push_back(candidate(c.target, c.token, share(c.count)));
    } else {
      view.ForEachChild(v, [&](uint32_t token, uint64_t target) {
        children_.push_back(candidate(target, token, share(view.Count(target))));
      });
    }
    internal::PushHeaviest(children_, options.max_width, heap_, [](Candidate&) {});
  };

  expand(0, 1.0);
  internal::GrowBestFirst(
      tree, options, heap_, width_, weights_out,
      [&](int, const Candidate& c) { node_state_.push_back(c.state); }, expand);
}

}  // namespace sam::runtime
