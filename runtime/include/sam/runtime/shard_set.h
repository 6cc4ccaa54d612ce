// Shard sets in the runtime: the shards of one index (format/shard_set.h),
// used by a session as one index over the union of their documents.
//
//   auto shards = sam::runtime::OpenShardSet("corpus.samset");   // one StaticIndex a shard
//   sam::runtime::Session session(options);
//   session.AttachShardSet(shards);
//
// Documents never cross a shard, so for any context:
//  - the longest match over the set is the longest over its shards;
//  - a linear draft continues the first occurrence of that match in document
//    order, which lies in the lowest shard that has it (the session's "ties go
//    to the lowest index" rule);
//  - a string's occurrence count is the sum of its counts in the shards, so a
//    count-weighted tree grows over the children of every shard that matches
//    as long, their counts summed by token (MergedStaticTreeBuilder): the very
//    tree the single index over all the documents gives; kCalibrated's
//    merged trie takes a node's static children the same way (Session).
// Cost: matching advances one cursor a shard (per-step cost grows linearly
// with the number of shards); a merged tree scans every transition of the
// matched states in each tied shard (no hub tables).
#ifndef SAM_RUNTIME_SHARD_SET_H_
#define SAM_RUNTIME_SHARD_SET_H_

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "sam/export.h"
#include "sam/format/index.h"
#include "sam/runtime/draft.h"
#include "sam/runtime/static_index.h"
#include "sam/runtime/static_match.h"

namespace sam::runtime {

// A shard's hub tables keep at least this many heaviest children (top_k),
// so that kCalibrated can sum a node's children over the tied shards from
// their lists (Session::AttachShardSet) instead of enumerating a common
// state's thousands of transitions; about 1.5 bytes per token more than 8.
inline constexpr size_t kShardTopK = 32;
// `options` with top_k raised to kShardTopK: what a shard's StaticIndex uses.
inline StaticIndex::Options ShardIndexOptions(StaticIndex::Options options = {}) {
  if (options.top_k < kShardTopK) options.top_k = kShardTopK;
  return options;
}

// Opens the manifest and every shard (format::ShardSet::Open with `options`:
// a missing, corrupted or foreign shard is refused by name) and prepares one
// StaticIndex per shard (ShardIndexOptions(index_options)), in shard order.
// The files stay mapped while the StaticIndexes live.
SAM_API std::vector<std::shared_ptr<const StaticIndex>> OpenShardSet(
    const std::string& path, const format::OpenOptions& options = {},
    const StaticIndex::Options& index_options = {});

// The state a shard's match is in.
struct SAM_API ShardMatch {
  const format::IndexView* view = nullptr;
  uint64_t state = format::kRoot;
};

// StaticTreeBuilder over several shards that match the same string: a
// node's weight is the product along its path of (sum over shards of
// Count(child)) / (sum over shards of Count(parent)); otherwise the same
// best-first rules, budgets and tie-breaking (static_match.h), so the tree
// equals the single-index tree of the union of the shards' documents.
class SAM_API MergedStaticTreeBuilder {
 public:
  void Build(std::span<const ShardMatch> matches, const StaticTreeOptions& options,
             DraftTree* tree, std::vector<double>* weights_out = nullptr);

 private:
  struct Candidate {
    double weight;
    int32_t parent;
    uint32_t token;
    uint32_t pairs_begin, pairs_end;  // its shard states: pairs_[begin, end)
    float share;  // its count ratio under its parent: its accept estimate
  };
  struct Child {
    uint32_t token;
    const format::IndexView* view;
    uint64_t target;
    uint64_t count;
  };
  std::vector<ShardMatch> pairs_;
  std::vector<std::pair<uint32_t, uint32_t>> node_pairs_;
  std::vector<Candidate> heap_, children_;
  std::vector<Child> gathered_;
  std::vector<uint32_t> width_;
};

}  // namespace sam::runtime

#endif  // SAM_RUNTIME_SHARD_SET_H_
