#include "sam/runtime/session.h"

#include <algorithm>
#include <array>
#include <chrono>
#include <limits>
#include <string>

#include "sam/error.h"

namespace sam::runtime {

namespace {

uint64_t NowNs() {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                   std::chrono::steady_clock::now().time_since_epoch())
                                   .count());
}

// 1, 2, 3, 4, 5-6, 7-8, 9-12, 13-16, 17-24, 25-32, 33+ -> 0..10 (0 -> 0).
size_t LengthBucket(uint64_t x) {
  static constexpr uint64_t kUpper[] = {1, 2, 3, 4, 6, 8, 12, 16, 24, 32};
  for (size_t i = 0; i < std::size(kUpper); ++i)
    if (x <= kUpper[i]) return i;
  return std::size(kUpper);
}
constexpr size_t kLengthBuckets = 11;

// 1, 2, 3-4, 5-8, ..., 513+ -> 0..7.
size_t CountBucket(uint64_t count) {
  size_t b = 0;
  for (uint64_t upper = 1; b < 7 && count > upper; upper *= (b < 5 ? 2 : 8)) ++b;
  return b;
}
constexpr size_t kCountBuckets = 8;
constexpr size_t kRatioBuckets = 10;
constexpr size_t kRankBuckets = 8;

}  // namespace

// Running estimates of P(node accepted | its parent accepted), one Beta-like
// cell per feature combination, shrunk towards a prior mean. This is what
// lets Policy::kCalibrated compare a dynamic continuation, count-weighted
// static branches and fallback branches on one scale (expected accepted
// tokens = sum of path probabilities), and learn which of them deserve the
// node budget on the current workload.
class Session::Calibrator {
 public:
  static constexpr double kPriorWeight = 4.0;

  Calibrator() {
    const size_t dynamic = kLengthBuckets * kLengthBuckets;
    const size_t fixed_static = kRatioBuckets * kCountBuckets * kLengthBuckets;
    const size_t fallback = kLengthBuckets * kRankBuckets;
    static_base_ = dynamic;
    fallback_base_ = dynamic + fixed_static;
    prior_.resize(dynamic + fixed_static + fallback);
    for (size_t l = 0; l < kLengthBuckets; ++l)
      for (size_t d = 0; d < kLengthBuckets; ++d)
        prior_[l * kLengthBuckets + d] = std::min(0.85, 0.35 + 0.05 * static_cast<double>(l + d));
    for (size_t r = 0; r < kRatioBuckets; ++r)
      for (size_t c = 0; c < kCountBuckets; ++c)
        for (size_t l = 0; l < kLengthBuckets; ++l)
          prior_[static_base_ + (r * kCountBuckets + c) * kLengthBuckets + l] =
              0.8 * (static_cast<double>(r) + 0.5) / kRatioBuckets;
    for (size_t d = 0; d < kLengthBuckets; ++d)
      for (size_t k = 0; k < kRankBuckets; ++k)
        prior_[fallback_base_ + d * kRankBuckets + k] = 0.3 / static_cast<double>(k + 1);
    Clear();
  }

  void Clear() {
    hits_.assign(prior_.size(), 0.0);
    trials_.assign(prior_.size(), 0.0);
  }

  int DynamicCell(uint64_t match_len, size_t depth) const {
    return static_cast<int>(LengthBucket(match_len) * kLengthBuckets + LengthBucket(depth));
  }
  int StaticCell(double ratio, uint64_t parent_count, uint64_t match_len) const {
    // ratio is in [0, 1] (a child's weight never exceeds its parent's); the
    // comparisons keep anything else, NaN included, away from the conversion.
    const size_t r = !(ratio > 0.0) ? 0
                     : ratio < 1.0  ? static_cast<size_t>(ratio * kRatioBuckets)
                                    : kRatioBuckets - 1;
    return static_cast<int>(static_base_ +
                            (r * kCountBuckets + CountBucket(parent_count)) * kLengthBuckets +
                            LengthBucket(match_len));
  }
  int FallbackCell(size_t depth, size_t rank) const {
    return static_cast<int>(fallback_base_ + LengthBucket(depth) * kRankBuckets +
                            std::min(rank, kRankBuckets - 1));
  }
  double Probability(int cell) const {
    return (hits_[cell] + kPriorWeight * prior_[cell]) / (trials_[cell] + kPriorWeight);
  }
  void Observe(int cell, bool accepted) {
    trials_[cell] += 1.0;
    if (accepted) hits_[cell] += 1.0;
  }

 private:
  size_t static_base_ = 0;
  size_t fallback_base_ = 0;
  std::vector<double> prior_, hits_, trials_;
};

namespace {

// Candidate nodes of a merged tree (kCalibrated), before selection.
struct MergedNode {
  uint32_t token;
  int32_t parent;
  uint16_t depth;
  double prob;   // P(accepted | parent accepted)
  double path;   // product of prob along the path
  std::array<int, 3> cells;  // dynamic, static, fallback calibration cells (-1: none)
  uint8_t sources;           // bit per contributing source
};

constexpr uint8_t kFromDynamic = 1, kFromStatic = 2, kFromFallback = 4;

}  // namespace

// Scratch for kCalibrated, kept across steps so that proposing does not
// allocate once warm.
struct Session::MergedScratch {
  std::vector<MergedNode> nodes;
  std::vector<int32_t> order;
  std::vector<int32_t> tree_index;
};

namespace {

int32_t FindOrAddChild(std::vector<MergedNode>& nodes, int32_t parent, uint32_t token) {
  // Children of a parent are few (<= max width + 2): a scan is cheapest.
  for (size_t i = static_cast<size_t>(parent) + 1; i < nodes.size(); ++i)
    if (nodes[i].parent == parent && nodes[i].token == token) return static_cast<int32_t>(i);
  nodes.push_back(MergedNode{token, parent, static_cast<uint16_t>(nodes[parent].depth + 1), 0.0,
                             0.0, {-1, -1, -1}, 0});
  return static_cast<int32_t>(nodes.size() - 1);
}

}  // namespace

Session::Session(const SessionOptions& options)
    : options_(options),
      dynamic_(DynamicSam::CapacityForBytes(options.max_dynamic_bytes)),
      calibrator_(std::make_unique<Calibrator>()) {
  const SelectionOptions& sel = options_.selection;
  if (sel.draft_size < 1 || sel.draft_size > kMaxDraftSize)
    throw Error(ErrorCode::kInvalidArgument,
                "SessionOptions: selection.draft_size must be in 1.." +
                    std::to_string(kMaxDraftSize) + ", got " + std::to_string(sel.draft_size));
  if (sel.max_tree_nodes > kMaxDraftSize)
    throw Error(ErrorCode::kInvalidArgument,
                "SessionOptions: selection.max_tree_nodes must be at most " +
                    std::to_string(kMaxDraftSize) + ", got " +
                    std::to_string(sel.max_tree_nodes));
  tree_.Reset(0, DraftSource::kNone);
  node_cells_.reserve(256);
  merged_ = std::make_unique<MergedScratch>();
}

Session::~Session() = default;

void Session::AttachCursor(StaticCursor cursor, std::shared_ptr<const StaticIndex> index,
                           size_t group) {
  for (size_t p = 1; p <= dynamic_.size(); ++p) cursor.Advance(dynamic_.Token(p));
  group_.push_back(group == SIZE_MAX ? cursors_.size() : group);
  cursors_.push_back(cursor);
  shared_.push_back(std::move(index));
  peeked_.resize(cursors_.size());
}

void Session::AttachShardSet(std::span<const std::shared_ptr<const StaticIndex>> shards) {
  if (shards.empty())
    throw Error(ErrorCode::kInvalidArgument, "Session::AttachShardSet: no shard");
  for (const auto& shard : shards)
    if (shard == nullptr)
      throw Error(ErrorCode::kInvalidArgument, "Session::AttachShardSet: null StaticIndex");
  const size_t group = cursors_.size();
  for (const auto& shard : shards) AttachCursor(StaticCursor(shard.get()), shard, group);
}

void Session::AttachIndex(const format::IndexView* view) {
  if (view == nullptr)
    throw Error(ErrorCode::kInvalidArgument, "Session::AttachIndex: null index view");
  AttachCursor(StaticCursor(view), nullptr);
}

void Session::AttachIndex(std::shared_ptr<const format::IndexView> view) {
  if (view == nullptr)
    throw Error(ErrorCode::kInvalidArgument, "Session::AttachIndex: null index view");
  owned_views_.reserve(owned_views_.size() + 1);  // no throw after attaching
  AttachCursor(StaticCursor(view.get()), nullptr);
  owned_views_.push_back(std::move(view));
}

void Session::AttachIndex(std::shared_ptr<const StaticIndex> index) {
  if (index == nullptr)
    throw Error(ErrorCode::kInvalidArgument, "Session::AttachIndex: null StaticIndex");
  AttachCursor(StaticCursor(index.get()), index);
}

void Session::SetFallback(Drafter* fallback) { options_.fallback = fallback; }

void Session::Reset() {
  dynamic_.Reset();
  for (StaticCursor& c : cursors_) c.Reset();
  if (options_.fallback) options_.fallback->Reset();
  pending_ = false;
  tree_.Reset(0, DraftSource::kNone);
}

void Session::ResetStatistics() {
  stats_ = SessionStatistics{};
  calibrator_->Clear();
}

void Session::Prefill(std::span<const uint32_t> prompt) {
  const uint64_t t0 = options_.collect_timing ? NowNs() : 0;
  dynamic_.Extend(prompt);
  for (StaticCursor& c : cursors_)
    for (uint32_t t : prompt) c.Advance(t);
  if (options_.fallback) options_.fallback->Prefill(prompt);
  pending_ = false;
  stats_.prefill_tokens += prompt.size();
  if (options_.collect_timing) stats_.prefill_ns += NowNs() - t0;
}

const DraftTree& Session::Propose(uint32_t start_token) {
  ProposeInto(start_token, std::numeric_limits<size_t>::max(), &tree_);
  return tree_;
}

bool Session::Propose(uint32_t start_token, size_t max_nodes, DraftTree* out) {
  ProposeInto(start_token, std::max<size_t>(max_nodes, 1), &tree_);
  *out = tree_;
  return tree_.size() > 1;
}

void Session::ProposeInto(uint32_t start_token, size_t max_nodes, DraftTree* tree) {
  const uint64_t t0 = options_.collect_timing ? NowNs() : 0;
  const SelectionOptions& sel = options_.selection;
  tree->Reset(start_token, DraftSource::kNone);
  node_cells_.clear();
  linear_static_cursor_ = SIZE_MAX;

  const DynamicSam::Match dyn = dynamic_.Lookup(start_token);
  size_t best = 0;
  uint64_t best_len = 0;
  for (size_t i = 0; i < cursors_.size(); ++i) {
    peeked_[i] = cursors_[i].Peek(start_token);
    if (peeked_[i].len > best_len) {
      best_len = peeked_[i].len;
      best = i;
    }
  }
  num_peeked_ = cursors_.size();
  last_dyn_len_ = dyn.len;
  last_static_len_ = static_cast<uint32_t>(std::min<uint64_t>(best_len, UINT32_MAX));

  auto linear_size = [&](uint32_t len) { return std::min(max_nodes, LinearDraftSize(len, sel)); };
  switch (sel.policy) {
    case Policy::kPaper:
      switch (ChoosePaper(dyn.len, last_static_len_, options_.fallback != nullptr, sel)) {
        case Choice::kDynamic: ProposeLinearDynamic(dyn, linear_size(dyn.len), tree); break;
        case Choice::kStatic:
          ProposeLinearStatic(best, peeked_[best], linear_size(last_static_len_), tree);
          break;
        case Choice::kFallback: ProposeFallback(start_token, max_nodes, tree); break;
        case Choice::kNone: break;
      }
      break;
    case Policy::kStaticOnly:
      if (best_len > 0) ProposeLinearStatic(best, peeked_[best], linear_size(last_static_len_), tree);
      break;
    case Policy::kDynamicOnly:
      if (dyn.len > 0) ProposeLinearDynamic(dyn, linear_size(dyn.len), tree);
      break;
    case Policy::kTree: {
      auto tree_size = [&](uint64_t len) {
        return std::min({max_nodes, sel.max_tree_nodes, 1 + size_t{sel.length_per_match} * len});
      };
      if (best_len > dyn.len) {
        StaticTreeOptions opts;
        opts.max_nodes = tree_size(best_len);
        opts.max_width = sel.max_width;
        opts.hubs = shared_[best].get();
        // Shards of best's shard set that match as long: counts summed.
        shard_matches_.clear();
        for (size_t i = best; i < cursors_.size(); ++i)
          if (group_[i] == group_[best] && peeked_[i].len == best_len)
            shard_matches_.push_back(ShardMatch{cursors_[i].view(), peeked_[i].state});
        if (shard_matches_.size() > 1)
          merged_tree_builder_.Build(shard_matches_, opts, tree);
        else
          tree_builder_.Build(*cursors_[best].view(), peeked_[best].state, opts, tree);
        if (tree->size() > 1) {
          tree->source = DraftSource::kStatic;
          tree->match_len = last_static_len_;
        }
      } else if (dyn.len > 0) {
        ProposeLinearDynamic(dyn, tree_size(dyn.len), tree);
      }
      break;
    }
    case Policy::kCalibrated: ProposeCalibrated(start_token, dyn, max_nodes, tree); break;
  }
  pending_ = true;
  pending_ns_ = options_.collect_timing ? NowNs() - t0 : 0;
}

void Session::ChainLinks(size_t base, DraftTree* tree) {
  // Parents and depths of tokens [base, size) hanging as a chain under node base - 1.
  const size_t size = tree->tokens.size();
  const uint16_t depth = tree->depths[base - 1];
  tree->parents.resize(size);
  tree->depths.resize(size);
  for (size_t k = base; k < size; ++k) {
    tree->parents[k] = static_cast<int32_t>(k - 1);
    tree->depths[k] = static_cast<uint16_t>(depth + 1 + (k - base));
  }
}

void Session::ProposeLinearDynamic(DynamicSam::Match m, size_t size, DraftTree* tree) {
  if (size < 2) return;
  // The continuation is copied straight into the tree (after its root).
  const size_t base = tree->size();
  tree->tokens.resize(base + size - 1);
  const size_t n = dynamic_.Continuation(m, size - 1, options_.selection.dynamic_link_fallback,
                                         tree->tokens.data() + base);
  tree->tokens.resize(base + n);
  if (n == 0) return;  // nothing to draft: the tree stays the start token alone
  ChainLinks(base, tree);
  tree->source = DraftSource::kDynamic;
  tree->match_len = m.len;
}

void Session::ProposeLinearStatic(size_t index, StaticMatch m, size_t size, DraftTree* tree) {
  if (size < 2) return;
  const size_t base = tree->size();
  tree->tokens.resize(base + size - 1);
  const size_t n =
      StaticContinuation(*cursors_[index].view(), m.state, size - 1, tree->tokens.data() + base);
  tree->tokens.resize(base + n);
  if (n == 0) return;
  ChainLinks(base, tree);
  tree->source = DraftSource::kStatic;
  tree->match_len = static_cast<uint32_t>(std::min<uint64_t>(m.len, UINT32_MAX));
  if (tree == &tree_) linear_static_cursor_ = index;
}

void Session::ProposeFallback(uint32_t start_token, size_t max_nodes, DraftTree* tree) {
  const size_t size = std::min(max_nodes, options_.selection.draft_size);
  if (!options_.fallback->Propose(start_token, size, tree) || tree->size() <= 1) {
    tree->Reset(start_token, DraftSource::kNone);
    return;
  }
  if (tree->source == DraftSource::kNone) tree->source = DraftSource::kOther;
}

// Policy::kCalibrated: gather candidate nodes from every drafter into one trie,
// give each node its calibrated conditional acceptance probability, and keep
// the max_nodes - 1 nodes of highest path probability. The expected number of
// accepted tokens of a tree is the sum of its nodes' path probabilities, so
// this maximises the estimate for the budget; since a child's path
// probability never exceeds its parent's, the kept set is a tree.
void Session::ProposeCalibrated(uint32_t start_token, DynamicSam::Match dyn, size_t max_nodes,
                                DraftTree* tree) {
  const SelectionOptions& sel = options_.selection;
  const size_t budget = std::min(max_nodes, sel.draft_size);
  if (budget < 2) return;
  std::vector<MergedNode>& nodes = merged_->nodes;
  nodes.clear();
  nodes.push_back(MergedNode{start_token, -1, 0, 1.0, 1.0, {-1, -1, -1}, 0});
  auto offer = [&](int32_t node, int slot, int cell, uint8_t source) {
    MergedNode& m = nodes[node];
    const double p = calibrator_->Probability(cell);
    if (m.cells[slot] < 0 || p > calibrator_->Probability(m.cells[slot])) m.cells[slot] = cell;
    m.prob = std::max(m.prob, p);
    m.sources |= source;
  };

  // The dynamic continuation (with the suffix-link fallback).
  if (dyn.len > 0) {
    chain_.resize(budget - 1);
    const size_t n = dynamic_.Continuation(dyn, budget - 1, sel.dynamic_link_fallback,
                                           chain_.data());
    int32_t parent = 0;
    for (size_t j = 0; j < n; ++j) {
      parent = FindOrAddChild(nodes, parent, chain_[j]);
      offer(parent, 0, calibrator_->DynamicCell(dyn.len, j + 1), kFromDynamic);
    }
  }
  // Count-weighted trees of every static index that matches.
  StaticTreeOptions opts;
  opts.max_nodes = budget;
  opts.max_width = sel.max_width;
  for (size_t i = 0; i < cursors_.size(); ++i) {
    if (peeked_[i].len == 0) continue;
    const format::IndexView& view = *cursors_[i].view();
    opts.hubs = shared_[i].get();
    scratch_tree_.Reset(start_token, DraftSource::kStatic);
    tree_builder_.Build(view, peeked_[i].state, opts, &scratch_tree_, &weights_);
    const std::vector<uint64_t>& states = tree_builder_.node_states();
    merged_->tree_index.assign(scratch_tree_.size(), 0);
    for (size_t k = 1; k < scratch_tree_.size(); ++k) {
      const int32_t parent = scratch_tree_.parents[k];
      const int32_t node =
          FindOrAddChild(nodes, merged_->tree_index[parent], scratch_tree_.tokens[k]);
      merged_->tree_index[k] = node;
      const double ratio = weights_[parent] > 0 ? weights_[k] / weights_[parent] : 0.0;
      offer(node, 1,
            calibrator_->StaticCell(ratio, view.Count(states[parent]),
                                    peeked_[i].len + scratch_tree_.depths[k] - 1),
            kFromStatic);
    }
  }
  // The fallback drafter's tree, on the same scale.
  DraftSource fallback_source = DraftSource::kOther;
  if (options_.fallback != nullptr &&
      options_.fallback->Propose(start_token, budget, &scratch_tree_)) {
    if (scratch_tree_.source != DraftSource::kNone) fallback_source = scratch_tree_.source;
    merged_->tree_index.assign(scratch_tree_.size(), 0);
    for (size_t k = 1; k < scratch_tree_.size(); ++k) {
      const int32_t parent = scratch_tree_.parents[k];
      size_t rank = 0;
      for (size_t j = 1; j < k; ++j) rank += scratch_tree_.parents[j] == parent;
      const int32_t node =
          FindOrAddChild(nodes, merged_->tree_index[parent], scratch_tree_.tokens[k]);
      merged_->tree_index[k] = node;
      offer(node, 2, calibrator_->FallbackCell(scratch_tree_.depths[k], rank), kFromFallback);
    }
  }
  if (nodes.size() == 1) return;

  // Path probabilities (parents precede children), then the best nodes.
  for (size_t i = 1; i < nodes.size(); ++i) nodes[i].path = nodes[nodes[i].parent].path * nodes[i].prob;
  std::vector<int32_t>& order = merged_->order;
  order.clear();
  for (size_t i = 1; i < nodes.size(); ++i)
    if (nodes[i].path >= sel.min_path_probability) order.push_back(static_cast<int32_t>(i));
  const size_t keep = std::min(order.size(), budget - 1);
  auto better = [&](int32_t a, int32_t b) {
    if (nodes[a].path != nodes[b].path) return nodes[a].path > nodes[b].path;
    if (nodes[a].depth != nodes[b].depth) return nodes[a].depth < nodes[b].depth;
    return a < b;
  };
  std::partial_sort(order.begin(), order.begin() + keep, order.end(), better);
  std::vector<int32_t>& tree_index = merged_->tree_index;
  tree_index.assign(nodes.size(), -1);
  tree_index[0] = 0;
  node_cells_.assign(1, {-1, -1, -1});
  uint8_t sources = 0;
  for (size_t r = 0; r < keep; ++r) {
    const MergedNode& m = nodes[order[r]];
    const int32_t parent = tree_index[m.parent];
    if (parent < 0) continue;  // cannot happen (ancestors rank first); be safe
    tree_index[order[r]] = tree->Add(parent, m.token);
    node_cells_.push_back(m.cells);
    sources |= m.sources;
  }
  switch (sources) {
    case kFromDynamic: tree->source = DraftSource::kDynamic; break;
    case kFromStatic: tree->source = DraftSource::kStatic; break;
    case kFromFallback: tree->source = fallback_source; break;
    case 0: tree->source = DraftSource::kNone; break;
    default: tree->source = DraftSource::kMerged; break;
  }
  tree->match_len = std::max(dyn.len, last_static_len_);
}

size_t Session::RecordAcceptance(std::span<const uint32_t> tokens) {
  const DraftTree& t = tree_;
  // The accepted path; its nodes are marked only for calibration.
  const bool calibrating = node_cells_.size() == t.size();
  if (calibrating) {
    on_path_.assign(t.size(), 0);
    on_path_[0] = 1;
  }
  int node = 0;
  size_t accepted = 0;
  for (size_t k = 1; k < tokens.size(); ++k) {
    node = t.Child(node, tokens[k]);
    if (node < 0) break;
    if (calibrating) on_path_[node] = 1;
    ++accepted;
  }
  SourceStatistics& s = stats_.source(t.source);
  s.Record(t, accepted);
  s.propose_ns += pending_ns_;
  ++stats_.steps;

  // Calibration: every node whose parent was accepted was a trial.
  if (calibrating) {
    for (size_t i = 1; i < t.size(); ++i) {
      if (!on_path_[t.parents[i]]) continue;
      for (int cell : node_cells_[i])
        if (cell >= 0) calibrator_->Observe(cell, on_path_[i] != 0);
    }
  }
  return accepted;
}

void Session::Commit(std::span<const uint32_t> tokens) {
  const uint64_t t0 = options_.collect_timing ? NowNs() : 0;
  // The proposal peeked every cursor with its start token: reuse that match.
  const bool peeked = pending_ && !tokens.empty() && tokens[0] == tree_.tokens[0];
  const size_t accepted = peeked ? RecordAcceptance(tokens) : 0;
  pending_ = false;
  dynamic_.Extend(tokens);
  // Accepted tokens of a linear static draft are the corpus text after the
  // drafting cursor's match: that cursor jumps over them in one climb.
  const size_t along = linear_static_cursor_ < num_peeked_ ? accepted : 0;
  for (size_t i = 0; i < cursors_.size(); ++i) {
    StaticCursor& c = cursors_[i];
    size_t k = 0;
    if (peeked && i < num_peeked_) c.Set(peeked_[i]), k = 1;  // not if attached since
    if (i == linear_static_cursor_ && along > 0) {
      c.Set(AdvanceAlongFirstOccurrence(*c.view(), peeked_[i], along));
      k = 1 + along;
    }
    for (; k < tokens.size(); ++k) c.Advance(tokens[k]);
  }
  linear_static_cursor_ = SIZE_MAX;
  if (options_.fallback) options_.fallback->Commit(tokens);
  stats_.committed_tokens += tokens.size();
  if (options_.collect_timing) stats_.commit_ns += NowNs() - t0;
}

void Session::ObserveTopK(std::span<const uint32_t> tokens, std::span<const uint32_t> topk,
                          size_t k) {
  if (options_.fallback) options_.fallback->ObserveTopK(tokens, topk, k);
}

}  // namespace sam::runtime
