// A static index prepared for drafting, shared by any number of sessions.
//
//   auto file = sam::format::IndexFile::Open("general.sam");
//   std::shared_ptr<const sam::runtime::StaticIndex> index =
//       sam::runtime::StaticIndex::Create(&file.view());    // once per index file
//   sam::runtime::Session a(options), b(options);           // any threads
//   a.AttachIndex(index);
//   b.AttachIndex(index);
//
// What it adds to the bare IndexView, for every "hub" state (one with at
// least min_degree explicit transitions: the short, common matches such as a
// space, "the" or "=", whose transitions number in the thousands):
//  - its top-K children (by occurrence count, then smaller token), which
//    count-weighted trees (Policy::kTree, Policy::kCalibrated) need at almost
//    every step. Without the table each session finds them by scanning all
//    the transitions the first time it meets a hub (milliseconds for a fresh
//    session on a 6.8M-token index); with it every session reads them in O(1).
//  - its transition labels in one contiguous sorted array, so that Next() on
//    a hub is a binary search over 4-byte labels instead of one over edge
//    targets whose labels are read from the text (two cache misses a probe).
//    Matching mostly climbs through hubs, so this is most of the cursor's
//    cost.
//
// Cost: Create() visits every state once (O(states + edges); about 0.7 s for
// the 6.8M-token index: 9.2M states, 17.8K hubs of >= 32 transitions holding
// 1.6M edges) and keeps one bit per state, and per hub about 28 + 24 top_k
// bytes plus 4 bytes per transition (memory_bytes(): about 12 MiB there).
//
// Lifetime and threads: immutable after Create(), so any number of threads
// may use one concurrently. It borrows the view, which must outlive it (and
// every session it is attached to); sessions hold it by shared_ptr.
#ifndef SAM_RUNTIME_STATIC_INDEX_H_
#define SAM_RUNTIME_STATIC_INDEX_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "sam/format/index.h"

namespace sam::runtime {

class StaticIndex {
 public:
  struct Options {
    uint64_t min_degree = 32;  // explicit transitions that make a state a hub
    size_t top_k = 8;          // children kept per hub (trees use at most max_width)
  };
  // One child of a hub: the transition token, its target and the target's count.
  struct Child {
    uint32_t token;
    uint64_t target;
    uint64_t count;
  };

  // Builds the hub table of `view` (borrowed). Throws std::invalid_argument
  // for a null view or top_k == 0.
  static std::shared_ptr<const StaticIndex> Create(const format::IndexView* view,
                                                   const Options& options);
  static std::shared_ptr<const StaticIndex> Create(const format::IndexView* view) {
    return Create(view, Options{});
  }

  const format::IndexView& view() const { return *view_; }
  const Options& options() const { return options_; }
  // True when `state` is a hub; then *children receives its (at most top_k)
  // heaviest children, heaviest first (count descending, then token ascending;
  // document-end transitions excluded).
  bool TopChildren(uint64_t state, std::span<const Child>* children) const;
  // Same result as view().Next(v, c), faster on hubs.
  uint64_t Next(uint64_t v, uint32_t c) const {
    if (v >= hub_bits_.size() * 64 || !(hub_bits_[v >> 6] >> (v & 63) & 1))
      return view_->Next(v, c);
    return HubNext(v, c);
  }
  size_t num_hubs() const { return num_hubs_; }
  size_t memory_bytes() const;

 private:
  StaticIndex() = default;
  uint32_t HubOf(uint64_t state) const;  // requires a hub
  uint64_t HubNext(uint64_t v, uint32_t c) const;

  const format::IndexView* view_ = nullptr;
  Options options_;
  size_t num_hubs_ = 0;
  // Open addressing: keys_[i] = state + 1 (0: empty) of hub h =
  // hub_of_slot_[i], whose children are children_[h * top_k, + sizes_[h]).
  std::vector<uint64_t> keys_;
  std::vector<uint32_t> hub_of_slot_;
  std::vector<uint8_t> sizes_;
  std::vector<Child> children_;
  std::vector<uint64_t> hub_bits_;  // bit v: state v is a hub
  // Hub h's explicit transitions: targets edges()[edge_begin_[h], +degree),
  // labels labels_[label_begin_[h], label_begin_[h + 1]).
  std::vector<uint64_t> edge_begin_;
  std::vector<uint64_t> label_begin_;
  std::vector<uint32_t> labels_;
  uint64_t mask_ = 0;
};

}  // namespace sam::runtime

#endif  // SAM_RUNTIME_STATIC_INDEX_H_
