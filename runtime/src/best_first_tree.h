// Internal: the best-first growth of a count-weighted draft tree, which
// StaticTreeBuilder (one index) and MergedStaticTreeBuilder (a shard set's
// counts summed) share. A candidate is a child not yet in the tree, with its
// path weight (the product of the count ratios from the root), its parent
// node, its token and its own count ratio (`share`, its accept estimate).
#ifndef SAM_RUNTIME_SRC_BEST_FIRST_TREE_H_
#define SAM_RUNTIME_SRC_BEST_FIRST_TREE_H_

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "sam/runtime/draft.h"
#include "sam/runtime/static_match.h"

namespace sam::runtime::internal {

// The heap's order: the candidate of highest path weight on top.
template <typename Candidate>
bool LighterCandidate(const Candidate& a, const Candidate& b) {
  return a.weight < b.weight;
}

// Pushes the max_width heaviest of a node's `children` (weight descending,
// then token ascending) onto `heap`, each through `prepare(candidate&)`
// first (a builder's own bookkeeping). `children` is reordered.
template <typename Candidate, typename Prepare>
void PushHeaviest(std::vector<Candidate>& children, size_t max_width, std::vector<Candidate>& heap,
                  Prepare prepare) {
  const size_t keep = std::min(children.size(), max_width);
  std::partial_sort(children.begin(), children.begin() + keep, children.end(),
                    [](const Candidate& a, const Candidate& b) {
                      return a.weight > b.weight || (a.weight == b.weight && a.token < b.token);
                    });
  for (size_t i = 0; i < keep; ++i) {
    Candidate c = children[i];
    prepare(c);
    heap.push_back(c);
    std::push_heap(heap.begin(), heap.end(), LighterCandidate<Candidate>);
  }
}

// Grows `tree` from the candidates on `heap` (the root's, pushed by the
// caller): the heaviest first, skipped when its depth already holds
// options.max_width nodes (`width` counts them, one entry per depth up to
// options.max_depth + 1), until options.max_nodes. Each node added takes its
// candidate's share as its accept estimate and its weight in weights_out
// (when given); then added(node, candidate) records what the builder keeps
// per node, and expand(node, weight) pushes the node's own children while the
// tree has room.
template <typename Candidate, typename Added, typename Expand>
void GrowBestFirst(DraftTree* tree, const StaticTreeOptions& options, std::vector<Candidate>& heap,
                   std::vector<uint32_t>& width, std::vector<double>* weights_out, Added added,
                   Expand expand) {
  while (tree->size() < options.max_nodes && !heap.empty()) {
    std::pop_heap(heap.begin(), heap.end(), LighterCandidate<Candidate>);
    const Candidate c = heap.back();
    heap.pop_back();
    const size_t depth = tree->depths[c.parent] + 1;
    if (width[depth] >= options.max_width) continue;
    ++width[depth];
    const int node = tree->Add(c.parent, c.token);
    tree->accept_estimates.push_back(c.share);
    added(node, c);
    if (weights_out) weights_out->push_back(c.weight);
    if (tree->size() < options.max_nodes) expand(node, c.weight);  // else nothing more is added
  }
}

}  // namespace sam::runtime::internal

#endif  // SAM_RUNTIME_SRC_BEST_FIRST_TREE_H_
