#include "sam/runtime/static_index.h"

#include <algorithm>
#include <stdexcept>

#include "index_children.h"

namespace sam::runtime {

namespace {

inline uint64_t HashState(uint64_t state, uint64_t mask) {
  uint64_t x = state * 0x9E3779B97F4A7C15ull;
  x ^= x >> 29;
  return x & mask;
}

}  // namespace

std::shared_ptr<const StaticIndex> StaticIndex::Create(const format::IndexView* view,
                                                       const Options& options) {
  if (view == nullptr) throw std::invalid_argument("StaticIndex::Create: null index view");
  if (options.top_k == 0 || options.top_k > 255)
    throw std::invalid_argument("StaticIndex::Create: top_k must be in 1..255");
  std::shared_ptr<StaticIndex> index(new StaticIndex());
  index->view_ = view;
  index->options_ = options;
  const uint64_t min_degree = std::max<uint64_t>(options.min_degree, 1);

  // Hubs: consecutive states' explicit edge ranges are adjacent, so one pass
  // over the states finds them. (The root has its own table and is no hub.)
  std::vector<uint64_t> hubs;
  for (uint64_t v = 1; v < view->num_states(); ++v) {
    const auto [lo, hi] = internal::ExplicitEdges(*view, v);
    if (hi - lo >= min_degree) hubs.push_back(v);
  }
  index->num_hubs_ = hubs.size();
  uint64_t slots = 16;
  while (slots < 2 * hubs.size()) slots *= 2;
  index->mask_ = slots - 1;
  index->hub_bits_.assign((view->num_states() + 63) / 64, 0);
  index->edge_begin_.reserve(hubs.size());
  index->label_begin_.reserve(hubs.size() + 1);
  index->label_begin_.push_back(0);
  for (uint64_t v : hubs) {
    index->hub_bits_[v >> 6] |= uint64_t{1} << (v & 63);
    const auto [lo, hi] = internal::ExplicitEdges(*view, v);
    index->edge_begin_.push_back(lo);
    for (uint64_t e = lo; e < hi; ++e) {
      // The label IndexView::Next compares: kNoToken for a corrupt target.
      const uint64_t t = view->edges().Get(e);
      index->labels_.push_back(t == format::kRoot || t >= view->num_states() ? format::kNoToken
                                                                             : view->LastToken(t));
    }
    index->label_begin_.push_back(index->labels_.size());
  }
  index->keys_.assign(slots, 0);
  index->hub_of_slot_.assign(slots, 0);
  index->sizes_.assign(hubs.size(), 0);
  index->children_.resize(hubs.size() * options.top_k);
  for (uint32_t h = 0; h < hubs.size(); ++h) {
    uint64_t i = HashState(hubs[h], index->mask_);
    while (index->keys_[i] != 0) i = (i + 1) & index->mask_;
    index->keys_[i] = hubs[h] + 1;
    index->hub_of_slot_[i] = h;
    index->sizes_[h] = static_cast<uint8_t>(internal::TopChildrenOf(
        *view, hubs[h], static_cast<uint32_t>(options.top_k), &index->children_[h * options.top_k]));
  }
  return index;
}

uint32_t StaticIndex::HubOf(uint64_t state) const {
  uint64_t i = HashState(state, mask_);
  while (keys_[i] != state + 1) i = (i + 1) & mask_;
  return hub_of_slot_[i];
}

bool StaticIndex::TopChildren(uint64_t state, std::span<const Child>* children) const {
  if (state >= hub_bits_.size() * 64 || !(hub_bits_[state >> 6] >> (state & 63) & 1))
    return false;
  const uint32_t h = HubOf(state);
  *children = std::span<const Child>(&children_[h * options_.top_k], sizes_[h]);
  return true;
}

uint64_t StaticIndex::HubNext(uint64_t v, uint32_t c) const {
  // As IndexView::Next: out-of-vocabulary tokens, then the implicit v -> v+1.
  const format::IndexView& view = *view_;
  if (c >= view.vocab_size()) return format::kNoState;
  if (v < view.num_tokens() && view.Token(v + 1) == c) return v + 1;
  const uint32_t h = HubOf(v);
  const uint32_t* begin = labels_.data() + label_begin_[h];
  const uint32_t* end = labels_.data() + label_begin_[h + 1];
  const uint32_t* it = std::lower_bound(begin, end, c);
  if (it == end || *it != c) return format::kNoState;
  return view.edges().Get(edge_begin_[h] + static_cast<uint64_t>(it - begin));
}

size_t StaticIndex::memory_bytes() const {
  return sizeof(*this) + keys_.capacity() * sizeof(uint64_t) +
         hub_bits_.capacity() * sizeof(uint64_t) + edge_begin_.capacity() * sizeof(uint64_t) +
         label_begin_.capacity() * sizeof(uint64_t) + labels_.capacity() * sizeof(uint32_t) +
         hub_of_slot_.capacity() * sizeof(uint32_t) + sizes_.capacity() +
         children_.capacity() * sizeof(Child);
}

}  // namespace sam::runtime
