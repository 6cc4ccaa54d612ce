#include "sam/runtime/tree_draft.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <string>

#include "sam/error.h"

namespace sam::runtime {
namespace {

[[noreturn]] void Fail(const std::string& message) {
  throw Error(ErrorCode::kInvalidArgument, message);
}

constexpr TreeMode kModes[] = {TreeMode::kChain, TreeMode::kTree, TreeMode::kRsdC, TreeMode::kRsdS,
                               TreeMode::kSpecInfer};

// Gumbel(0, 1) from a uniform strictly inside (0, 1).
double Gumbel(Rng& rng) {
  const double u = (static_cast<double>(rng.Next() >> 11) + 0.5) * 0x1.0p-53;
  return -std::log(-std::log(u));
}

// log(1 - exp(a)) for a <= 0, accurate near 0 and for very negative a.
double Log1mExp(double a) {
  if (a >= 0) return -std::numeric_limits<double>::infinity();
  return a > -0.693147 ? std::log(-std::expm1(a)) : std::log1p(-std::exp(a));
}

// Stochastic beam search's truncation (Kool et al. 2019, appendix B): the key
// of a child with perturbed score g, given the maximum z of its siblings' g,
// conditioned to have maximum `parent_key`: -log(exp(-T) - exp(-z) + exp(-g)),
// computed stably.
double TruncatedKey(double parent_key, double g, double z) {
  const double v = parent_key - g + Log1mExp(g - z);
  return parent_key - std::max(v, 0.0) - std::log1p(std::exp(-std::abs(v)));
}

class Builder {
 public:
  Builder(const TreeDraftOptions& options, size_t max_nodes, TreeExpander& expander, Rng& rng,
          TreeDraft* out)
      : o_(options), max_nodes_(max_nodes), expander_(expander), rng_(rng), out_(out),
        vocab_(expander.vocab_size()) {
    if (vocab_ == 0) Fail("BuildTreeDraft: the expander has an empty vocabulary");
  }

  void Run(uint32_t start) {
    DraftTree& tree = out_->tree;
    tree.Reset(start, DraftSource::kModel);
    out_->vocab = vocab_;
    out_->rows.clear();
    work_row_.assign(1, -1);
    if (max_nodes_ >= 2) {
      switch (o_.mode) {
        case TreeMode::kChain: Chain(); break;
        case TreeMode::kTree: BestFirst(); break;
        case TreeMode::kRsdC:
        case TreeMode::kSpecInfer: Levels(); break;
        case TreeMode::kRsdS: Beams(); break;
      }
    }
    if (o_.mode != TreeMode::kTree) {  // the work tree is the draft
      out_->build_ids.resize(tree.size());
      std::iota(out_->build_ids.begin(), out_->build_ids.end(), 0);
      work_row_.resize(tree.size(), -1);
      out_->row_of_node = work_row_;
    }
    out_->verify_mode = VerifyModeOf(o_);
    tree.draft_probs.assign(tree.size(), 1.0f);
    for (size_t i = 1; i < tree.size(); ++i) {
      const int32_t r = out_->row_of_node[tree.parents[i]];
      tree.draft_probs[i] = out_->rows[static_cast<size_t>(r) * vocab_ + tree.tokens[i]];
    }
  }

 private:
  static DraftMode VerifyModeOf(const TreeDraftOptions& o) {
    switch (o.mode) {
      case TreeMode::kRsdC:
      case TreeMode::kRsdS: return DraftMode::kWithoutReplacement;
      case TreeMode::kSpecInfer: return DraftMode::kWithReplacement;
      case TreeMode::kChain: return o.greedy ? DraftMode::kDeterministic : DraftMode::kWithReplacement;
      case TreeMode::kTree: return DraftMode::kDeterministic;
    }
    return DraftMode::kDeterministic;
  }

  bool Full() const { return out_->tree.size() >= max_nodes_; }

  std::span<const float> Row(int32_t node) const {
    const int32_t r = work_row_[node];
    return {out_->rows.data() + static_cast<size_t>(r) * vocab_, vocab_};
  }

  // One expander call for `nodes`; their rows are normalised and kept.
  void Expand(std::span<const int32_t> nodes) {
    const DraftTree& tree = out_->tree;
    work_row_.resize(tree.size(), -1);
    const size_t first = out_->rows.size() / vocab_;
    out_->rows.resize((first + nodes.size()) * vocab_);
    std::span<float> rows(out_->rows.data() + first * vocab_, nodes.size() * vocab_);
    std::fill(rows.begin(), rows.end(), 0.0f);
    expander_.Expand(tree, nodes, rows);
    for (size_t j = 0; j < nodes.size(); ++j) {
      std::span<float> row = rows.subspan(j * vocab_, vocab_);
      double sum = 0;
      for (size_t v = 0; v < vocab_; ++v) {
        if (!(row[v] >= 0) || !std::isfinite(row[v]))
          Fail("BuildTreeDraft: the drafter's row for node " + std::to_string(nodes[j]) +
               " has weight " + std::to_string(row[v]) + " at token " + std::to_string(v) +
               "; expected a finite value >= 0");
        sum += row[v];
      }
      if (!(sum > 0))
        Fail("BuildTreeDraft: the drafter's row for node " + std::to_string(nodes[j]) +
             " has no positive weight");
      for (float& w : row) w = static_cast<float>(w / sum);
      work_row_[nodes[j]] = static_cast<int32_t>(first + j);
    }
  }

  uint32_t Argmax(std::span<const float> row) const {
    return static_cast<uint32_t>(std::max_element(row.begin(), row.end()) - row.begin());
  }

  void Chain() {
    DraftTree& tree = out_->tree;
    int32_t node = 0;
    for (size_t d = 0; d < o_.depth && !Full(); ++d) {
      Expand(std::span<const int32_t>(&node, 1));
      const std::span<const float> row = Row(node);
      node = tree.Add(node, o_.greedy ? Argmax(row) : SampleToken(row, rng_));
    }
  }

  // kRsdC and kSpecInfer: b_l children under every node of level l-1.
  void Levels() {
    DraftTree& tree = out_->tree;
    std::vector<int32_t> level{0}, next;
    std::vector<uint32_t> picked;
    for (size_t l = 0; l < o_.branching.size() && !Full() && !level.empty(); ++l) {
      Expand(level);
      next.clear();
      for (const int32_t node : level) {
        const std::span<const float> row = Row(node);
        if (o_.mode == TreeMode::kRsdC) {
          GumbelTopK(row, o_.branching[l], rng_, &picked);
        } else {
          picked.resize(o_.branching[l]);
          for (uint32_t& t : picked) t = SampleToken(row, rng_);
        }
        for (const uint32_t t : picked) {
          if (Full()) break;
          next.push_back(tree.Add(node, t));
        }
      }
      level.swap(next);
    }
  }

  // kRsdS: stochastic beam search with truncated-Gumbel keys.
  void Beams() {
    DraftTree& tree = out_->tree;
    struct Beam {
      int32_t node;
      double key, log_prob;
    };
    struct Candidate {
      double key;
      double log_prob;
      uint32_t beam, token;
    };
    std::vector<Beam> beams{{0, 0.0, 0.0}}, next;
    std::vector<int32_t> nodes;
    std::vector<Candidate> candidates;
    std::vector<double> perturbed;
    std::vector<uint32_t> order;
    for (size_t l = 0; l < o_.depth && !Full() && !beams.empty(); ++l) {
      nodes.clear();
      for (const Beam& b : beams) nodes.push_back(b.node);
      Expand(nodes);
      candidates.clear();
      for (uint32_t bi = 0; bi < beams.size(); ++bi) {
        const Beam& b = beams[bi];
        const std::span<const float> row = Row(b.node);
        perturbed.assign(vocab_, -std::numeric_limits<double>::infinity());
        double z = -std::numeric_limits<double>::infinity();
        for (size_t v = 0; v < vocab_; ++v) {
          if (row[v] <= 0) continue;
          perturbed[v] = b.log_prob + std::log(double{row[v]}) + Gumbel(rng_);
          z = std::max(z, perturbed[v]);
        }
        // The truncation is increasing in the perturbed score within a beam, and at most W
        // children survive in all: only this beam's W best scores can be among them.
        order.clear();
        for (size_t v = 0; v < vocab_; ++v)
          if (row[v] > 0) order.push_back(static_cast<uint32_t>(v));
        const size_t best = std::min(o_.width, order.size());
        std::partial_sort(order.begin(), order.begin() + best, order.end(),
                          [&](uint32_t x, uint32_t y) { return perturbed[x] > perturbed[y]; });
        for (size_t c = 0; c < best; ++c) {
          const uint32_t v = order[c];
          candidates.push_back({TruncatedKey(b.key, perturbed[v], z),
                                b.log_prob + std::log(double{row[v]}), bi, v});
        }
      }
      const size_t keep = std::min({o_.width, max_nodes_ - tree.size(), candidates.size()});
      auto larger = [](const Candidate& a, const Candidate& b) { return a.key > b.key; };
      std::partial_sort(candidates.begin(), candidates.begin() + keep, candidates.end(), larger);
      candidates.resize(keep);
      // Siblings together, parents in beam (node) order, each parent's children in key order.
      std::stable_sort(candidates.begin(), candidates.end(),
                       [](const Candidate& a, const Candidate& b) { return a.beam < b.beam; });
      next.clear();
      for (const Candidate& c : candidates)
        next.push_back({tree.Add(beams[c.beam].node, c.token), c.key, c.log_prob});
      beams.swap(next);
    }
  }

  // kTree: expand the `width` most probable nodes per level, `width` children
  // each, then keep the max_nodes most probable candidates.
  void BestFirst() {
    DraftTree& work = out_->tree;
    std::vector<double> prob{1.0};
    std::vector<int32_t> level{0}, frontier;
    std::vector<uint32_t> order(vocab_);
    const size_t children = std::min(o_.width, vocab_);
    const size_t depth = std::min(o_.depth, max_nodes_ - 1);
    for (size_t d = 0; d < depth && !level.empty(); ++d) {
      frontier = level;
      const size_t expand = std::min(o_.width, frontier.size());
      std::partial_sort(frontier.begin(), frontier.begin() + expand, frontier.end(),
                        [&](int32_t a, int32_t b) { return prob[a] > prob[b] || (prob[a] == prob[b] && a < b); });
      frontier.resize(expand);
      std::sort(frontier.begin(), frontier.end());  // Expand wants increasing node order
      Expand(frontier);
      level.clear();
      for (const int32_t node : frontier) {
        const std::span<const float> row = Row(node);
        std::iota(order.begin(), order.end(), 0u);
        std::partial_sort(order.begin(), order.begin() + children, order.end(),
                          [&](uint32_t a, uint32_t b) { return row[a] > row[b] || (row[a] == row[b] && a < b); });
        for (size_t c = 0; c < children && row[order[c]] > 0; ++c) {
          level.push_back(work.Add(node, order[c]));
          prob.push_back(prob[node] * row[order[c]]);
        }
      }
    }
    // The most probable max_nodes candidates; ties favour shallower, then earlier nodes, so that
    // a parent always precedes a child of equal probability.
    std::vector<int32_t> kept(work.size());
    std::iota(kept.begin(), kept.end(), 0);
    const size_t n = std::min(max_nodes_, kept.size());
    std::partial_sort(kept.begin(), kept.begin() + n, kept.end(), [&](int32_t a, int32_t b) {
      if (prob[a] != prob[b]) return prob[a] > prob[b];
      if (work.depths[a] != work.depths[b]) return work.depths[a] < work.depths[b];
      return a < b;
    });
    kept.resize(n);
    std::sort(kept.begin(), kept.end());
    std::vector<int32_t> index_of(work.size(), -1);
    DraftTree tree;
    tree.Reset(work.tokens[0], DraftSource::kModel);
    index_of[0] = 0;
    for (size_t k = 1; k < kept.size(); ++k) {
      const int32_t parent = index_of[work.parents[kept[k]]];
      if (parent < 0) Fail("BuildTreeDraft: internal error: a kept node's parent was dropped");
      index_of[kept[k]] = tree.Add(parent, work.tokens[kept[k]]);
    }
    work_row_.resize(work.size(), -1);
    out_->build_ids = kept;
    out_->row_of_node.resize(kept.size());
    for (size_t k = 0; k < kept.size(); ++k) out_->row_of_node[k] = work_row_[kept[k]];
    out_->tree = std::move(tree);
  }

  const TreeDraftOptions& o_;
  size_t max_nodes_;
  TreeExpander& expander_;
  Rng& rng_;
  TreeDraft* out_;
  size_t vocab_;
  std::vector<int32_t> work_row_;  // per node of the work tree: its row, or -1
};

}  // namespace

std::string_view TreeModeName(TreeMode mode) {
  switch (mode) {
    case TreeMode::kChain: return "chain";
    case TreeMode::kTree: return "tree";
    case TreeMode::kRsdC: return "rsd-c";
    case TreeMode::kRsdS: return "rsd-s";
    case TreeMode::kSpecInfer: return "specinfer";
  }
  return "unknown";
}

std::optional<TreeMode> TreeModeFromName(std::string_view name) {
  for (const TreeMode m : kModes)
    if (TreeModeName(m) == name) return m;
  return std::nullopt;
}

std::string TreeModeNameList() {
  std::string out;
  for (const TreeMode m : kModes) {
    if (!out.empty()) out += ", ";
    out += TreeModeName(m);
  }
  return out;
}

size_t TreeDraftOptions::Depth() const {
  return mode == TreeMode::kRsdC || mode == TreeMode::kSpecInfer ? branching.size() : depth;
}

size_t TreeDraftOptions::MaxNodes() const {
  switch (mode) {
    case TreeMode::kChain: return 1 + depth;
    case TreeMode::kRsdS: return 1 + width * depth;
    case TreeMode::kTree: return depth == 0 ? 1 : 1 + width + (depth - 1) * width * width;
    case TreeMode::kRsdC:
    case TreeMode::kSpecInfer: {
      size_t total = 1, level = 1;
      for (const size_t b : branching) {
        level = std::min<size_t>(level * b, size_t{1} << 20);
        total = std::min<size_t>(total + level, size_t{1} << 20);
      }
      return total;
    }
  }
  return 1;
}

void TreeDraftOptions::Validate() const {
  const bool levels = mode == TreeMode::kRsdC || mode == TreeMode::kSpecInfer;
  if (levels) {
    if (branching.empty())
      Fail("tree mode " + std::string(TreeModeName(mode)) + " needs branching factors b_1..b_L");
    for (const size_t b : branching)
      if (b == 0) Fail("tree mode " + std::string(TreeModeName(mode)) + ": a branching factor is 0");
  } else if (depth == 0) {
    Fail("tree mode " + std::string(TreeModeName(mode)) + ": depth must be at least 1");
  }
  if ((mode == TreeMode::kRsdS || mode == TreeMode::kTree) && width == 0)
    Fail("tree mode " + std::string(TreeModeName(mode)) + ": width must be at least 1");
  if (Depth() >= DraftTree::kMaxDepth)
    Fail("tree depth " + std::to_string(Depth()) + " exceeds the draft tree limit");
}

std::span<const float> TreeDraft::ProposalRow(int32_t node) const {
  if (node < 0 || static_cast<size_t>(node) >= row_of_node.size() || row_of_node[node] < 0)
    return {};
  return {rows.data() + static_cast<size_t>(row_of_node[node]) * vocab, vocab};
}

void BuildTreeDraft(const TreeDraftOptions& options, uint32_t start_token, size_t max_nodes,
                    TreeExpander& expander, Rng& rng, TreeDraft* out) {
  options.Validate();
  if (max_nodes == 0) Fail("BuildTreeDraft: max_nodes must be at least 1 (the root)");
  Builder(options, max_nodes, expander, rng, out).Run(start_token);
}

void GumbelTopK(std::span<const float> weights, size_t k, Rng& rng, std::vector<uint32_t>* out) {
  std::vector<std::pair<double, uint32_t>> keys;
  keys.reserve(weights.size());
  for (size_t v = 0; v < weights.size(); ++v)
    if (weights[v] > 0)
      keys.emplace_back(std::log(double{weights[v]}) + Gumbel(rng), static_cast<uint32_t>(v));
  const size_t n = std::min(k, keys.size());
  std::partial_sort(keys.begin(), keys.begin() + n, keys.end(),
                    [](const auto& a, const auto& b) { return a.first > b.first; });
  out->resize(n);
  for (size_t i = 0; i < n; ++i) (*out)[i] = keys[i].second;
}

}  // namespace sam::runtime
