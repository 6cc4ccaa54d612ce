#include "sam/runtime/chain.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "sam/error.h"

namespace sam::runtime {

std::string_view DraftShapeName(DraftShape shape) {
  return shape == DraftShape::kChain ? "chain" : "tree";
}

DraftShape FindDraftShape(std::string_view name) {
  if (name == "tree") return DraftShape::kTree;
  if (name == "chain") return DraftShape::kChain;
  throw Error(ErrorCode::kInvalidArgument,
              "unknown draft shape '" + std::string(name) + "' (valid: tree, chain)");
}

void ChainShaper::Shape(const DraftTree& tree, const ChainOptions& options, DraftTree* chain) {
  const size_t n = tree.size();
  if (n == 0) {  // not a tree (no root): nothing to shape
    *chain = tree;
    path_.clear();
    return;
  }
  const bool estimated = tree.accept_estimates.size() == n;
  const bool has_q = !estimated && tree.draft_probs.size() == n;
  path_probability_.assign(n, 1.0);
  expected_.assign(n, 0.0);
  allowed_.assign(n, 1);
  has_child_.assign(n, 0);
  const bool costed = options.cost_curve != nullptr && !options.cost_curve->empty();
  // The value of a chain ending at a node of `depth` that yields `expected`
  // accepted tokens: E itself, or with a cost curve E's gain over its cost.
  auto value = [&](double expected, size_t depth) {
    if (!costed) return expected;
    const double cost = options.cost_curve->Relative(depth + 1);
    return options.rate > 0.0 ? 1.0 + expected - options.rate * cost : (1.0 + expected) / cost;
  };
  size_t best = 0;
  double best_value = value(0.0, 0);
  for (size_t i = 1; i < n; ++i) {
    const size_t parent = static_cast<size_t>(tree.parents[i]);
    double e;
    if (estimated) e = tree.accept_estimates[i];
    else if (has_q) e = tree.draft_probs[i];
    else e = has_child_[parent] ? 0.0 : 1.0;  // the first child only
    has_child_[parent] = 1;
    if (!(e > 0.0)) e = 0.0;  // NaN too
    e = std::min(e, 1.0);
    path_probability_[i] = path_probability_[parent] * e;
    expected_[i] = expected_[parent] + path_probability_[i];
    allowed_[i] = allowed_[parent] && tree.depths[i] <= options.max_tokens &&
                  path_probability_[i] >= options.min_path_probability;
    if (!allowed_[i]) continue;
    const double v = value(expected_[i], tree.depths[i]);
    if (v > best_value || (v == best_value && tree.depths[i] < tree.depths[best])) {
      best = i;
      best_value = v;
    }
  }
  path_.clear();
  for (int32_t v = static_cast<int32_t>(best); v > 0; v = tree.parents[v]) path_.push_back(v);
  path_.push_back(0);
  std::reverse(path_.begin(), path_.end());

  chain->Reset(tree.tokens[0], tree.source);
  chain->match_len = tree.match_len;
  const bool copy_q = tree.draft_probs.size() == n;
  if (estimated) chain->accept_estimates.push_back(1.0f);
  if (copy_q) chain->draft_probs.push_back(tree.draft_probs[0]);
  for (size_t k = 1; k < path_.size(); ++k) {
    chain->Add(static_cast<int>(k - 1), tree.tokens[path_[k]]);
    if (estimated) chain->accept_estimates.push_back(tree.accept_estimates[path_[k]]);
    if (copy_q) chain->draft_probs.push_back(tree.draft_probs[path_[k]]);
  }
}

}  // namespace sam::runtime
