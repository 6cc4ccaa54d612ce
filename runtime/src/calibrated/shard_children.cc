#include "calibrated/shard_children.h"

#include <algorithm>
#include <functional>

namespace sam::runtime::calibrated {

namespace {

bool Heavier(const ShardChildren::MergedChild& a, const ShardChildren::MergedChild& b) {
  return a.count != b.count ? a.count > b.count : a.token < b.token;
}

// Moves the `keep` heaviest of v to its front, heaviest first (the rest in
// no order): an insertion sort bounded at `keep`, cheaper than a heap for
// the few dozen candidates of a merge, most of which are rejected by one
// comparison with the keep-th.
void KeepHeaviest(std::vector<ShardChildren::MergedChild>& v, size_t keep) {
  if (keep == 0) return;
  size_t k = 0;  // v[0, k) holds the heaviest so far, in order
  for (size_t i = 0; i < v.size(); ++i) {
    const ShardChildren::MergedChild x = v[i];
    size_t j;
    if (k < keep) {
      j = k++;  // == i: nothing was rejected yet
    } else if (Heavier(x, v[keep - 1])) {
      v[i] = v[keep - 1];  // the evicted one takes x's place
      j = keep - 1;
    } else {
      continue;
    }
    for (; j > 0 && Heavier(x, v[j - 1]); --j) v[j] = v[j - 1];
    v[j] = x;
  }
}

}  // namespace

void ShardChildren::Merge(std::span<const internal::StaticSource> sources, size_t width) {
  merged.clear();
  targets.clear();
  if (width == 0 || FindMerged(width)) return;
  if (!FromLists(sources, width)) {
    merged.clear();
    targets.clear();
    FromAllChildren(sources, width);
  }
  StoreMerged(width);
}

bool ShardChildren::FromLists(std::span<const internal::StaticSource> sources, size_t width) {
  const size_t n = shard_states.size();
  merged.clear();
  targets.clear();
  lists.clear();
  uint64_t threshold = 0;   // a token in no list sums to at most this
  uint32_t last_token = 0;  // ... and is above this when it reaches it
  for (ShardState& e : shard_states) {
    const format::IndexView& view = sources[e.cursor].view();
    e.list_begin = static_cast<uint32_t>(lists.size());
    std::span<const StaticIndex::Child> top;
    const StaticIndex* hubs = sources[e.cursor].index.get();
    if (!view.IsClone(e.state) && e.count == 1) {
      e.complete = true;
      if (e.state < view.num_tokens() && view.Token(e.state + 1) < view.separator())
        lists.push_back({view.Token(e.state + 1), e.state + 1, 1});
    } else {
      if (hubs->TopChildren(e.state, &top)) {
        e.complete = top.size() < hubs->options().top_k;  // a hub's list: never scanned
      } else {
        // Its child record when it has one that holds the long list (a
        // shard's top_k is kShardTopK): the list's children without the
        // scan; else its children, read in place or through LongList.
        if (hubs->options().top_k >= kLongChildren) {
          top = hubs->RecordChildren(e.state, &record_children);
          top = top.first(std::min(top.size(), kLongChildren));
        }
        e.complete = top.size() < kLongChildren;
      }
      if (top.empty()) {
        const auto [lo, hi] = view.EdgeRange(e.state);
        if (hi - lo < TopChildrenCache::kMinDegree) {
          AppendChildren(view, e.state, lo, hi);
          e.complete = true;
        } else {
          top = LongList(view, e.state);
          e.complete = top.size() < kLongChildren;
        }
      }
      lists.insert(lists.end(), top.begin(), top.end());  // copied: slots get reused
    }
    e.list_size = static_cast<uint32_t>(lists.size() - e.list_begin);
    if (!e.complete && e.list_size > 0) {
      threshold += lists.back().count;
      last_token = std::max(last_token, lists.back().token);
    }
  }
  // Candidates: the tokens of every list, with their sums over the
  // lists that hold them (a lower bound) and, adding the last count of
  // the other incomplete lists, an upper bound. A token's row is found
  // through a small open-addressing table (rows need no order: the result
  // is sorted by a total order at the end).
  size_t slots = 16;
  while (slots < 2 * lists.size()) slots *= 2;
  if (row_of.size() < slots) {
    row_of.assign(slots, RowSlot{});
    generation = 0;
  }
  if (++generation == 0) {  // (wrapped: stale stamps could match)
    std::fill(row_of.begin(), row_of.end(), RowSlot{});
    generation = 1;
  }
  const uint64_t mask = slots - 1;
  // Every list complete (threshold 0, as when the shard states are not
  // hubs): every candidate's sum is exact, and no bounds are needed.
  const bool bounded = threshold != 0;
  upper.clear();
  // One pass over the lists: a token's first entry opens its row (its
  // target in every shard state, none until its list says), every entry
  // fills its shard's cell and adds its count.
  for (size_t e = 0; e < n; ++e) {
    const ShardState& s = shard_states[e];
    const uint64_t last = !s.complete && s.list_size > 0 ? lists[s.list_begin + s.list_size - 1].count : 0;
    for (uint32_t k = s.list_begin; k < s.list_begin + s.list_size; ++k) {
      const StaticIndex::Child& c = lists[k];
      uint64_t i = (c.token * 0x9E3779B97F4A7C15ull) >> 40 & mask;
      while (row_of[i].generation == generation && row_of[i].token != c.token) i = (i + 1) & mask;
      if (row_of[i].generation != generation) {
        row_of[i] = RowSlot{c.token, generation, static_cast<uint32_t>(merged.size())};
        NewRow(c.token);
        if (bounded) upper.push_back(threshold);
      }
      const uint32_t row = row_of[i].row;
      targets[row * n + e] = {c.target, c.count};
      merged[row].count += c.count;
      if (bounded) upper[row] += c.count - last;
    }
  }
  // The width-th largest lower bound: a candidate whose upper bound is
  // below it cannot be among the heaviest; the others get exact sums
  // (a transition lookup in each incomplete shard whose list lacks them).
  if (bounded) {
    uint64_t cut = 0;
    if (merged.size() >= width) {
      lower.clear();
      for (const MergedChild& c : merged) lower.push_back(c.count);
      std::nth_element(lower.begin(), lower.begin() + (width - 1), lower.end(),
                       std::greater<uint64_t>());
      cut = lower[width - 1];
    }
    for (MergedChild& c : merged) {
      if (upper[c.row] < cut || upper[c.row] == c.count) continue;
      for (size_t e = 0; e < n; ++e) {
        const ShardState& s = shard_states[e];
        if (s.complete || targets[c.row * n + e].target != format::kNoState) continue;
        const format::IndexView& view = sources[s.cursor].view();
        const uint64_t t = sources[s.cursor].index->Next(s.state, c.token);
        if (t == format::kNoState) continue;
        const uint64_t count = view.Count(t);
        targets[c.row * n + e] = {t, count};
        c.count += count;
      }
    }
  }
  // Only the width heaviest are kept (Heavier is a total order: tokens differ).
  const size_t top = std::min(merged.size(), width);
  KeepHeaviest(merged, top);
  // A token in no list ranks after the width-th candidate when that one
  // sums to more than the threshold, or to as much with a token no
  // greater than last_token (such a token sums to the threshold only by
  // equalling every incomplete list's last count, and then comes after
  // its last token).
  if (threshold == 0 ||
      (merged.size() >= width &&
       (merged[width - 1].count > threshold ||
        (merged[width - 1].count == threshold && merged[width - 1].token <= last_token)))) {
    if (merged.size() > width) merged.resize(width);
    return true;
  }
  return false;
}

// A state of few transitions (fewer than TopChildrenCache::kMinDegree,
// usually a handful: a cache entry would rarely be met again): all its
// children, in token order, a complete list (no sort: only an incomplete
// list's order matters, for its last count).
void ShardChildren::AppendChildren(const format::IndexView& view, uint64_t state, uint64_t lo,
                                   uint64_t hi) {
  view.ForEachChild(state, lo, hi, [&](uint32_t token, uint64_t target) {
    lists.push_back({token, target, view.Count(target)});
  });
}

void ShardChildren::FromAllChildren(std::span<const internal::StaticSource> sources,
                                    size_t width) {
  const size_t n = shard_states.size();
  // Every transition of every shard state.
  gathered.clear();
  for (size_t e = 0; e < n; ++e) {
    const format::IndexView& view = sources[shard_states[e].cursor].view();
    view.ForEachChild(shard_states[e].state, [&](uint32_t token, uint64_t target) {
      gathered.push_back({token, static_cast<uint32_t>(e), target, view.Count(target)});
    });
  }
  std::sort(gathered.begin(), gathered.end(),
            [](const Gathered& a, const Gathered& b) {
              return a.token != b.token ? a.token < b.token : a.shard < b.shard;
            });
  for (size_t k = 0; k < gathered.size(); ++k) {
    const Gathered& g = gathered[k];
    if (k == 0 || g.token != gathered[k - 1].token) NewRow(g.token);
    MergedChild& c = merged.back();
    targets[c.row * n + g.shard] = {g.target, g.count};
    c.count += g.count;
  }
  const size_t keep = std::min(width, merged.size());
  KeepHeaviest(merged, keep);
  merged.resize(keep);
}

}  // namespace sam::runtime::calibrated
