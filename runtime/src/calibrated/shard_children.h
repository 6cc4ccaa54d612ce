// The static children of a candidate node over the shards of a shard set
// that have a state there, summed by token as one index over the shards'
// documents would give them (Policy::kCalibrated's expansion and backoff of a
// shard set), with the scratch and the caches that make it cheap.
#ifndef SAM_RUNTIME_SRC_CALIBRATED_SHARD_CHILDREN_H_
#define SAM_RUNTIME_SRC_CALIBRATED_SHARD_CHILDREN_H_

#include <array>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "index_children.h"
#include "sam/format/index.h"
#include "sam/runtime/static_index.h"
#include "sam/runtime/static_match.h"
#include "static_source.h"

namespace sam::runtime::calibrated {

struct ShardChildren {
  // The max_width (`width`) heaviest children of a node over the shards that
  // have a state there (shard_states, two or more; `cursor` indexes
  // `sources`), their counts summed by token, in the same order: what one
  // index over the shards' documents gives. Into merged, with each child's
  // target and its count in each shard (kNoState, 0: none) in targets.
  //
  // A threshold algorithm over each shard's own heaviest children (hub
  // table or child record: a list of 32, or fewer when they are all; for
  // any other state all its children, AppendChildren, or LongList's 32 for
  // one of many transitions):
  // every token in some list whose upper bound can reach the top gets its
  // exact sum (a transition lookup in the incomplete shards whose list
  // lacks it); a token in no list sums to at most the incomplete lists'
  // last counts (the threshold). When the width-th best candidate
  // exceeds it (or equals it with a small enough token), the candidates'
  // top is the top; otherwise (ties, wider trees) every transition of the
  // shards' states is enumerated, as MergedStaticTreeBuilder does. Results
  // are cached by shard states (FindMerged).
  void Merge(std::span<const internal::StaticSource> sources, size_t width);

  struct ShardState {
    size_t cursor;
    uint64_t state;
    uint64_t count;
    uint32_t list_begin, list_size;  // its heaviest children: lists[begin, + size)
    bool complete;                   // ... and they are all of its children
  };
  struct MergedChild {
    uint32_t token;
    uint64_t count;  // summed over the shards
    uint32_t row;    // its target in shard state e: targets[row * shard_states.size() + e]
  };
  struct ShardTarget {
    uint64_t target = format::kNoState;
    uint64_t count = 0;
  };
  struct Gathered {
    uint32_t token;
    uint32_t shard;  // index into shard_states
    uint64_t target, count;
  };
  std::vector<ShardState> shard_states;
  std::vector<StaticIndex::Child> lists;
  std::vector<MergedChild> merged;
  std::vector<ShardTarget> targets;  // rows x shard_states.size()
  std::vector<Gathered> gathered;
  std::vector<uint64_t> upper, lower;  // candidates' bounds (merged_children)
  // FromLists' rows by token: open addressing, an entry current when its
  // generation is this call's (so that nothing is cleared between calls).
  struct RowSlot {
    uint32_t token = 0, generation = 0, row = 0;
  };
  std::vector<RowSlot> row_of;
  uint32_t generation = 0;
  // The longest list a shard state contributes (its kLongChildren heaviest
  // children, count descending, then token ascending), and shorter only
  // when it holds all of them.
  static constexpr size_t kLongChildren = 32;
  std::vector<StaticIndex::Child> record_children;  // a shard state's child record
  // The lists of shard states of many transitions (TopChildrenCache::
  // kMinDegree or more) that are not hubs, as in a shard attached without
  // hub tables: direct-mapped, kLongEntries entries of about 790 bytes,
  // allocated when first needed, so that their thousands of transitions are
  // scanned once a session rather than at every merge.
  static constexpr size_t kLongEntries = 1024;
  struct LongEntry {
    const format::IndexView* view = nullptr;
    uint64_t state = 0;
    uint32_t size = 0;
    std::array<StaticIndex::Child, kLongChildren> children;
  };
  std::vector<LongEntry> long_lists;
  std::span<const StaticIndex::Child> LongList(const format::IndexView& view, uint64_t state) {
    if (long_lists.empty()) long_lists.resize(kLongEntries);
    const uint64_t h = (state ^ reinterpret_cast<uintptr_t>(&view)) * 0x9E3779B97F4A7C15ull;
    LongEntry& e = long_lists[h >> (64 - std::countr_zero(kLongEntries))];
    if (e.view != &view || e.state != state) {
      e.view = &view;
      e.state = state;
      e.size = internal::TopChildrenOf(view, state, kLongChildren, e.children.data());
    }
    return std::span<const StaticIndex::Child>(e.children.data(), e.size);
  }
  // The merged top children of recent shard-set nodes (a common short
  // match's states recur from step to step, and their lookup may have to
  // enumerate thousands of transitions in each tied shard): direct-mapped by
  // the shard states, for at most kMergedShards tied shards and
  // TopChildrenCache::kChildren children (kMergedEntries entries of about
  // 1.4 KiB, allocated when first needed).
  static constexpr size_t kMergedShards = 8, kMergedEntries = 512;
  static constexpr size_t kMergedChildren = TopChildrenCache::kChildren;
  struct MergedEntry {
    uint64_t hash = 0;
    uint8_t shards = 0, size = 0, width = 0;  // shards == 0: empty
    std::array<uint32_t, kMergedShards> cursors;
    std::array<uint64_t, kMergedShards> states;
    std::array<uint32_t, kMergedChildren> tokens;
    std::array<uint64_t, kMergedChildren> counts;
    std::array<ShardTarget, kMergedChildren * kMergedShards> targets;
  };
  std::vector<MergedEntry> merged_cache;
  uint64_t MergedHash(size_t width) const {
    uint64_t h = width;
    for (const ShardState& e : shard_states)
      h = (h ^ (e.state * 0x9E3779B97F4A7C15ull + e.cursor)) * 0xD6E8FEB86659FD93ull;
    return h ^ (h >> 29);
  }
  MergedEntry* MergedSlot(uint64_t hash) {
    if (merged_cache.empty()) merged_cache.resize(kMergedEntries);
    return &merged_cache[hash & (kMergedEntries - 1)];
  }
  // Fills merged / targets from the cache; false on a miss.
  bool FindMerged(size_t width) {
    if (shard_states.size() > kMergedShards || width > kMergedChildren) return false;
    const uint64_t hash = MergedHash(width);
    const MergedEntry& c = *MergedSlot(hash);
    const size_t n = shard_states.size();
    if (c.hash != hash || c.shards != n || c.width != width) return false;
    for (size_t e = 0; e < n; ++e)
      if (c.cursors[e] != shard_states[e].cursor || c.states[e] != shard_states[e].state)
        return false;
    merged.clear();
    targets.resize(c.size * n);
    for (uint32_t k = 0; k < c.size; ++k) {
      merged.push_back({c.tokens[k], c.counts[k], k});
      for (size_t e = 0; e < n; ++e) {
        targets[k * n + e] = c.targets[k * kMergedShards + e];
      }
    }
    return true;
  }
  void StoreMerged(size_t width) {
    const size_t n = shard_states.size();
    if (n > kMergedShards || width > kMergedChildren || merged.size() > kMergedChildren) return;
    const uint64_t hash = MergedHash(width);
    MergedEntry& c = *MergedSlot(hash);
    c.hash = hash;
    c.shards = static_cast<uint8_t>(n);
    c.width = static_cast<uint8_t>(width);
    c.size = static_cast<uint8_t>(merged.size());
    for (size_t e = 0; e < n; ++e) {
      c.cursors[e] = static_cast<uint32_t>(shard_states[e].cursor);
      c.states[e] = shard_states[e].state;
    }
    for (size_t k = 0; k < merged.size(); ++k) {
      c.tokens[k] = merged[k].token;
      c.counts[k] = merged[k].count;
      for (size_t e = 0; e < n; ++e) {
        c.targets[k * kMergedShards + e] = targets[merged[k].row * n + e];
      }
    }
  }

 private:
  // From the shards' lists of their heaviest children: the hub table's
  // or the child record's (top_k: kShardTopK for a shard set's shards), or
  // all of a state's children. False when they cannot decide.
  bool FromLists(std::span<const internal::StaticSource> sources, size_t width);
  // Appends the children of `state`, whose explicit transitions are edges
  // [lo, hi), to `lists` (see shard_children.cc).
  void AppendChildren(const format::IndexView& view, uint64_t state, uint64_t lo, uint64_t hi);
  // Every transition of every shard state, summed by token; the width heaviest.
  void FromAllChildren(std::span<const internal::StaticSource> sources, size_t width);
  // Opens the next row of merged and targets for `token`: no count yet, no
  // target in any shard state.
  void NewRow(uint32_t token) {
    merged.push_back({token, 0, static_cast<uint32_t>(merged.size())});
    targets.resize(targets.size() + shard_states.size());
  }
};

}  // namespace sam::runtime::calibrated

#endif  // SAM_RUNTIME_SRC_CALIBRATED_SHARD_CHILDREN_H_
