// Shard sets in the runtime: opening one, and count-weighted trees whose
// counts are summed across the shards.
#include "sam/runtime/shard_set.h"

#include <algorithm>

#include "best_first_tree.h"
#include "sam/format/shard_set.h"

namespace sam::runtime {

std::vector<std::shared_ptr<const StaticIndex>> OpenShardSet(
    const std::string& path, const format::OpenOptions& options,
    const StaticIndex::Options& index_options) {
  const format::ShardSet set = format::ShardSet::Open(path, options);
  std::vector<std::shared_ptr<const StaticIndex>> shards;
  for (const format::IndexFile& f : set.shards())
    shards.push_back(StaticIndex::Create(f.shared_view(), ShardIndexOptions(index_options)));
  return shards;
}

void MergedStaticTreeBuilder::Build(std::span<const ShardMatch> matches,
                                    const StaticTreeOptions& options, DraftTree* tree,
                                    std::vector<double>* weights_out) {
  heap_.clear();
  pairs_.clear();
  node_pairs_.clear();
  width_.assign(options.max_depth + 2, 0);
  width_[0] = 1;
  if (weights_out) weights_out->assign(tree->size(), 1.0);
  if (tree->size() != 1) return;
  for (const ShardMatch& m : matches)
    if (m.view != nullptr && m.state != format::kRoot) pairs_.push_back(m);
  if (pairs_.empty()) return;
  tree->accept_estimates.assign(1, 1.0f);
  node_pairs_.emplace_back(0, static_cast<uint32_t>(pairs_.size()));

  // Pushes the (at most max_width) heaviest children of `node`, their counts
  // summed by token over the node's shard states, onto the heap.
  auto expand = [&](int32_t node, double weight) {
    const size_t depth = tree->depths[node] + 1;
    if (depth > options.max_depth) return;
    const auto [begin, end] = node_pairs_[node];
    uint64_t total_count = 0;
    gathered_.clear();
    for (uint32_t k = begin; k < end; ++k) {
      const ShardMatch m = pairs_[k];
      total_count += m.view->Count(m.state);
      m.view->ForEachChild(m.state, [&](uint32_t token, uint64_t target) {
        gathered_.push_back(Child{token, m.view, target, m.view->Count(target)});
      });
    }
    const double total = static_cast<double>(total_count);
    if (total <= 0) return;
    // Stable: a token's shard states stay in shard order.
    std::stable_sort(gathered_.begin(), gathered_.end(),
                     [](const Child& a, const Child& b) { return a.token < b.token; });
    children_.clear();
    for (size_t i = 0; i < gathered_.size();) {
      size_t j = i;
      uint64_t count = 0;
      for (; j < gathered_.size() && gathered_[j].token == gathered_[i].token; ++j)
        count += gathered_[j].count;
      // As StaticTreeBuilder: a child's share is clamped to 1 (corrupt counts).
      const double c = static_cast<double>(count);
      const double share = c < total ? c / total : 1.0;
      children_.push_back(Candidate{weight * share, node, gathered_[i].token,
                                    static_cast<uint32_t>(i), static_cast<uint32_t>(j),
                                    static_cast<float>(share)});
      i = j;
    }
    // A kept candidate's shard states move to pairs_, where its node finds them.
    internal::PushHeaviest(children_, options.max_width, heap_, [&](Candidate& c) {
      const uint32_t first = static_cast<uint32_t>(pairs_.size());
      for (uint32_t g = c.pairs_begin; g < c.pairs_end; ++g)
        pairs_.push_back(ShardMatch{gathered_[g].view, gathered_[g].target});
      c.pairs_begin = first;
      c.pairs_end = static_cast<uint32_t>(pairs_.size());
    });
  };

  expand(0, 1.0);
  internal::GrowBestFirst(
      tree, options, heap_, width_, weights_out,
      [&](int, const Candidate& c) { node_pairs_.emplace_back(c.pairs_begin, c.pairs_end); },
      expand);
}

}  // namespace sam::runtime
