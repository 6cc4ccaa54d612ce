// Policy::kCalibrated against a naive oracle. The session ranks a merged
// candidate trie lazily (static children looked up only when they can still
// rank, cached top children, cursors moved along the accepted nodes' known
// states). The oracle below builds the trie eagerly instead: the dynamic
// continuation, and under every node with a static state the max_width
// heaviest children found by enumerating all of its transitions and, when its
// state occurs fewer than backoff_count times, the backoff children (the
// max_width heaviest of its suffix link's transitions that it lacks, with the
// state and length of that shorter context), down to
// where no node can reach min_path_probability; then it ranks the nodes
// greedily (the best node whose parent is ranked, until the budget is full),
// with its own copy of the acceptance estimates, fed with the same
// acceptances. Both must give the same drafts at every step, over random
// streams, one or two indexes, with and without shared hub tables.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <memory>
#include <optional>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "sam/runtime/draft.h"
#include "sam/runtime/replay.h"
#include "sam/runtime/session.h"
#include "sam/runtime/static_index.h"
#include "sam/runtime/static_match.h"
#include "heaviest_children.h"
#include "test_index.h"

namespace sam::runtime {
namespace {

using test_util::BuiltIndex;
using test_util::RandomTexts;
using test_util::Text;

// The estimates as docs/runtime.md defines them: cells by feature buckets,
// (hits + 4 prior) / (trials + 4); static cells for children and for backoff
// children apart, the latter with half the prior.
class OracleCalibrator {
 public:
  static constexpr size_t kL = 11, kC = 8, kR = 10, kK = 8;
  OracleCalibrator() {
    prior_.assign(kL * kL + 2 * kR * kC * kL + kL * kK, 0.0);
    for (size_t l = 0; l < kL; ++l)
      for (size_t d = 0; d < kL; ++d)
        prior_[l * kL + d] = std::min(0.85, 0.35 + 0.05 * static_cast<double>(l + d));
    for (size_t b = 0; b < 2; ++b)
      for (size_t r = 0; r < kR; ++r)
        for (size_t c = 0; c < kC; ++c)
          for (size_t l = 0; l < kL; ++l)
            prior_[kL * kL + b * kR * kC * kL + (r * kC + c) * kL + l] =
                (b == 0 ? 0.8 : 0.4) * (static_cast<double>(r) + 0.5) / kR;
    hits_.assign(prior_.size(), 0.0);
    trials_.assign(prior_.size(), 0.0);
  }
  static size_t LengthBucket(uint64_t x) {
    const uint64_t upper[] = {1, 2, 3, 4, 6, 8, 12, 16, 24, 32};
    size_t b = 0;
    while (b < 10 && x > upper[b]) ++b;
    return b;
  }
  static size_t CountBucket(uint64_t c) {  // 1, 2, 3-4, 5-8, 9-16, 17-128, 129-1024, 1025+
    const uint64_t upper[] = {1, 2, 4, 8, 16, 128, 1024};
    size_t b = 0;
    while (b < 7 && c > upper[b]) ++b;
    return b;
  }
  int Dynamic(uint64_t len, size_t depth) const {
    return static_cast<int>(LengthBucket(len) * kL + LengthBucket(depth));
  }
  int Static(uint64_t child, uint64_t parent, uint64_t len, bool backoff = false) const {
    const size_t r = child >= parent ? kR - 1 : static_cast<size_t>(
                                                    static_cast<double>(child) / parent * kR);
    return static_cast<int>(kL * kL + (backoff ? kR * kC * kL : 0) +
                            (r * kC + CountBucket(parent)) * kL + LengthBucket(len));
  }
  double P(int cell) const {
    return (hits_[cell] + 4.0 * prior_[cell]) / (trials_[cell] + 4.0);
  }
  // The largest estimate of a static child of a state of `parent` occurrences
  // and match length `len` (any ratio), and of a backoff child of a state of
  // match length `len` (its shorter context: any count and ratio, a length
  // bucket no greater), by enumeration.
  double StaticBound(uint64_t parent, uint64_t len) const {
    double best = 0;
    for (size_t r = 0; r < kR; ++r)
      best = std::max(best, P(static_cast<int>(kL * kL + (r * kC + CountBucket(parent)) * kL +
                                               LengthBucket(len))));
    return best;
  }
  double BackoffBound(uint64_t len) const {
    double best = 0;
    for (size_t r = 0; r < kR; ++r)
      for (size_t c = 0; c < kC; ++c)
        for (size_t l = 0; l <= LengthBucket(len); ++l)
          best = std::max(best, P(static_cast<int>(kL * kL + kR * kC * kL + (r * kC + c) * kL + l)));
    return best;
  }
  void Observe(int cell, bool hit) {
    trials_[cell] += 1;
    hits_[cell] += hit;
  }

 private:
  std::vector<double> prior_, hits_, trials_;
};

struct ONode {
  uint32_t token;
  int parent;
  size_t depth;
  double prob = 0, path = 0;
  std::array<int, 2> cells{-1, -1};
  std::vector<uint64_t> states{};  // per index (kNoState: none)
  std::vector<uint64_t> counts{};
  std::vector<uint64_t> lens{};    // match length of each state
  bool backoff = false;          // offered as a backoff child
  int rank = -1;
};

class Oracle {
 public:
  Oracle(std::vector<const format::IndexView*> views, const SessionOptions& sel)
      : views_(std::move(views)), sel_(sel) {
    for (const auto* v : views_) cursors_.emplace_back(v);
  }
  void Prefill(const Text& t) {
    for (auto& c : cursors_)
      for (uint32_t x : t) c.Advance(x);
  }
  const StaticCursor& cursor(size_t i) const { return cursors_[i]; }

  // The root (the peeked matches) and the dynamic chain, offered whole.
  void Start(uint32_t start, const DynamicSam& dyn_sam) {
    const size_t budget = sel_.draft_size;
    nodes_.clear();
    nodes_.push_back(ONode{.token = start, .parent = -1, .depth = 0});
    nodes_[0].prob = nodes_[0].path = 1;
    nodes_[0].states.assign(views_.size(), format::kNoState);
    nodes_[0].counts.assign(views_.size(), 0);
    nodes_[0].lens.assign(views_.size(), 0);
    peeked_.clear();
    for (size_t i = 0; i < views_.size(); ++i) {
      peeked_.push_back(cursors_[i].Peek(start));
      if (peeked_[i].len > 0) {
        nodes_[0].states[i] = peeked_[i].state;
        nodes_[0].counts[i] = views_[i]->Count(peeked_[i].state);
        nodes_[0].lens[i] = peeked_[i].len;
      }
    }
    const DynamicSam::Match dyn = dyn_sam.Lookup(start);
    if (dyn.len > 0) {
      std::vector<uint32_t> chain(budget - 1);
      const size_t n = dyn_sam.Continuation(dyn, budget - 1, sel_.tuning.dynamic_link_fallback,
                                            chain.data());
      int node = 0;
      for (size_t j = 0; j < n; ++j) {
        node = Child(node, chain[j]);
        Offer(node, 0, cal.Dynamic(dyn.len, j + 1));
      }
    }
  }

  DraftTree Propose(uint32_t start, const DynamicSam& dyn_sam) {
    const size_t budget = sel_.draft_size;
    Start(start, dyn_sam);
    // Eager static expansion, parents first (nodes_ grows while scanned).
    for (size_t x = 0; x < nodes_.size(); ++x) {
      nodes_[x].path = x == 0 ? 1.0 : nodes_[nodes_[x].parent].path * nodes_[x].prob;
      // A node below min_path (or deeper than any ranked node can be) never
      // ranks, nor do its descendants.
      if (nodes_[x].path < sel_.tuning.min_path_probability || nodes_[x].depth + 1 >= budget ||
          nodes_[x].depth >= 64)
        continue;
      for (size_t i = 0; i < views_.size(); ++i) {
        const uint64_t v = nodes_[x].states[i];
        const uint64_t total = nodes_[x].counts[i];
        if (v == format::kNoState || total == 0) continue;
        const uint64_t len = nodes_[x].lens[i];
        for (const auto& c : Heaviest(*views_[i], v)) {
          const int child = Child(static_cast<int>(x), c.token);
          nodes_[child].states[i] = c.target;
          nodes_[child].counts[i] = c.count;
          nodes_[child].lens[i] = len + 1;
          Offer(child, 1, cal.Static(c.count, total, len));
        }
        // Backoff: the shorter context's heaviest children that v's lack.
        const uint64_t u = views_[i]->Link(v);
        if (total >= sel_.tuning.backoff_count || u == format::kRoot) continue;
        const uint64_t u_total = views_[i]->Count(u), u_len = views_[i]->Len(u);
        for (const auto& c : Heaviest(*views_[i], u)) {
          const int child = Child(static_cast<int>(x), c.token);
          if (nodes_[child].states[i] != format::kNoState) continue;
          nodes_[child].states[i] = c.target;
          nodes_[child].counts[i] = c.count;
          nodes_[child].lens[i] = u_len + 1;
          nodes_[child].backoff = true;
          Offer(child, 1, cal.Static(c.count, u_total, u_len, true));
        }
      }
    }
    // Greedy ranking.
    std::vector<int> ranked = {0};
    nodes_[0].rank = 0;
    while (ranked.size() < budget) {
      int best = -1;
      for (size_t x = 1; x < nodes_.size(); ++x) {
        const ONode& n = nodes_[x];
        if (n.rank >= 0 || nodes_[n.parent].rank < 0 || n.path < sel_.tuning.min_path_probability)
          continue;
        if (best < 0 || Before(n, nodes_[best])) best = static_cast<int>(x);
      }
      if (best < 0) break;
      nodes_[best].rank = static_cast<int>(ranked.size());
      ranked.push_back(best);
    }
    return Output(start, ranked);
  }

  // With experimental::Tuning::max_static_lookups = limit > 0 the ranking is
  // lazy by definition: at most `limit` lookups of branching states (a static
  // expansion of a state that occurs more than once, or a backoff), made in
  // best-first order. This is that process written plainly, as
  // docs/runtime.md describes it: every candidate is rescanned at every
  // step; a ranked node's static expansion competes at its path probability
  // times the largest estimate any of its static children could get, its
  // backoff expansion likewise; a node about to rank first has its parent's
  // static children, then its parent's backoff children (when they could give
  // it a state), offered. None of the session's shortcuts (queue, eager
  // expansion of states that occur once, the lazily offered dynamic chain,
  // skipping expansions once the lookups are spent).
  DraftTree ProposeLimited(uint32_t start, const DynamicSam& dyn_sam, size_t limit) {
    const size_t budget = sel_.draft_size;
    const double min_path = sel_.tuning.min_path_probability;
    Start(start, dyn_sam);
    size_t lookups = 0;
    std::vector<char> expanded, backed_off;
    auto grow = [&] {
      expanded.resize(nodes_.size(), 0);
      backed_off.resize(nodes_.size(), 0);
    };
    auto backs_off = [&](int x, size_t i) {
      return nodes_[x].states[i] != format::kNoState && nodes_[x].counts[i] > 0 &&
             nodes_[x].counts[i] < sel_.tuning.backoff_count;
    };
    auto expand = [&](int x) {
      grow();
      expanded[x] = 1;
      if (nodes_[x].depth >= 64) return;
      for (size_t i = 0; i < views_.size(); ++i) {
        const uint64_t v = nodes_[x].states[i], total = nodes_[x].counts[i];
        if (v == format::kNoState || total == 0) continue;
        const uint64_t len = nodes_[x].lens[i];
        if (total > 1 && ++lookups > limit) continue;
        for (const auto& c : Heaviest(*views_[i], v)) {
          const int child = Child(x, c.token);
          nodes_[child].states[i] = c.target;
          nodes_[child].counts[i] = c.count;
          nodes_[child].lens[i] = len + 1;
          Offer(child, 1, cal.Static(c.count, total, len));
        }
      }
      grow();
    };
    auto back_off = [&](int x) {
      grow();
      if (!expanded[x]) expand(x);
      backed_off[x] = 1;
      if (nodes_[x].depth >= 64) return;
      for (size_t i = 0; i < views_.size(); ++i) {
        if (!backs_off(x, i) || lookups >= limit) continue;
        const format::IndexView& view = *views_[i];
        const uint64_t u = view.Link(nodes_[x].states[i]);
        const uint64_t u_len = view.Len(u);
        if (u_len == 0 || u == format::kRoot || view.Count(u) == 0) continue;
        ++lookups;
        const uint64_t u_total = view.Count(u);
        for (const auto& c : Heaviest(view, u)) {
          const int child = Child(x, c.token);
          if (nodes_[child].states[i] != format::kNoState) continue;  // x's own child
          nodes_[child].states[i] = c.target;
          nodes_[child].counts[i] = c.count;
          nodes_[child].lens[i] = u_len + 1;
          nodes_[child].backoff = true;
          Offer(child, 1, cal.Static(c.count, u_total, u_len, true));
        }
      }
      grow();
    };
    auto static_bound = [&](int x) {
      double b = 0;
      if (nodes_[x].depth >= 64) return b;
      for (size_t i = 0; i < views_.size(); ++i)
        if (nodes_[x].states[i] != format::kNoState && nodes_[x].counts[i] > 0)
          b = std::max(b, cal.StaticBound(nodes_[x].counts[i], nodes_[x].lens[i]));
      return b;
    };
    auto backoff_bound = [&](int x) {
      double b = 0;
      if (nodes_[x].depth >= 64) return b;
      for (size_t i = 0; i < views_.size(); ++i)
        if (backs_off(x, i)) b = std::max(b, cal.BackoffBound(nodes_[x].lens[i]));
      return b;
    };
    // A candidate: a node to rank, or an expansion of a ranked node.
    struct Entry {
      double key;
      int node;
      bool expand, backoff;
      size_t depth;
      int parent_rank;  // of an expansion: its node's own rank
      uint32_t token;
    };
    auto before = [](const Entry& a, const Entry& b) {
      if (a.key != b.key) return a.key > b.key;
      if (a.expand != b.expand) return a.expand;
      if (a.depth != b.depth) return a.depth < b.depth;
      if (a.parent_rank != b.parent_rank) return a.parent_rank < b.parent_rank;
      if (a.token != b.token) return a.token < b.token;
      if (a.node != b.node) return a.node < b.node;
      return !a.backoff && b.backoff;
    };
    std::vector<int> ranked = {0};
    nodes_[0].rank = 0;
    grow();
    while (ranked.size() < budget) {
      grow();
      std::optional<Entry> best;
      auto consider = [&](const Entry& e) {
        if (e.key >= min_path && (!best || before(e, *best))) best = e;
      };
      for (size_t x = 0; x < nodes_.size(); ++x) {
        const ONode& n = nodes_[x];
        const int xi = static_cast<int>(x);
        if (n.rank >= 0) {
          if (!expanded[x]) consider({n.path * static_bound(xi), xi, true, false, n.depth, n.rank, n.token});
          if (!backed_off[x])
            consider({n.path * backoff_bound(xi), xi, true, true, n.depth, n.rank, n.token});
        } else if (nodes_[n.parent].rank >= 0) {
          consider({nodes_[n.parent].path * n.prob, xi, false, false, n.depth,
                    nodes_[n.parent].rank, n.token});
        }
      }
      if (!best) break;
      const int x = best->node;
      if (best->expand) {
        if (best->backoff) back_off(x);
        else expand(x);
        continue;
      }
      const int parent = nodes_[x].parent;
      if (!expanded[parent]) expand(parent);
      bool reaches = false;
      for (size_t i = 0; i < views_.size(); ++i)
        reaches |= backs_off(parent, i) && nodes_[x].states[i] == format::kNoState;
      if (!backed_off[parent] && reaches) back_off(parent);
      nodes_[x].rank = static_cast<int>(ranked.size());
      nodes_[x].path = nodes_[parent].path * nodes_[x].prob;
      ranked.push_back(x);
    }
    return Output(start, ranked);
  }

  // The tree of the ranked nodes (rank r: tree node r); cells kept for Commit.
  DraftTree Output(uint32_t start, const std::vector<int>& ranked) {
    DraftTree t;
    t.Reset(start, DraftSource::kNone);
    tree_cells_.assign(1, {-1, -1});
    if (ranked.size() > 1) t.accept_estimates.assign(1, 1.0f);
    for (size_t r = 1; r < ranked.size(); ++r) {
      backoff_drafted += nodes_[ranked[r]].backoff;
      t.Add(nodes_[nodes_[ranked[r]].parent].rank, nodes_[ranked[r]].token);
      t.accept_estimates.push_back(static_cast<float>(nodes_[ranked[r]].prob));
      tree_cells_.push_back(nodes_[ranked[r]].cells);
    }
    return t;
  }

  // After the session's Commit of `tokens` for the draft `t`.
  void Commit(const DraftTree& t, const Text& tokens) {
    std::vector<char> on(t.size(), 0);
    on[0] = 1;
    int node = 0;
    for (size_t k = 1; k < tokens.size(); ++k) {
      node = t.Child(node, tokens[k]);
      if (node < 0) break;
      on[node] = 1;
    }
    if (t.size() > 1)
      for (size_t i = 1; i < t.size(); ++i) {
        if (!on[t.parents[i]]) continue;
        for (int cell : tree_cells_[i])
          if (cell >= 0) cal.Observe(cell, on[i] != 0);
      }
    for (auto& c : cursors_)
      for (uint32_t x : tokens) c.Advance(x);
  }

  OracleCalibrator cal;
  size_t backoff_drafted = 0;  // drafted nodes offered as backoff children

 private:
  // The max_width heaviest transitions of v (count descending, then token).
  std::vector<StaticIndex::Child> Heaviest(const format::IndexView& view, uint64_t v) const {
    return test_util::HeaviestChildren(view, v, sel_.tuning.calibrated_width);
  }
  bool Before(const ONode& a, const ONode& b) const {
    if (a.path != b.path) return a.path > b.path;
    if (a.depth != b.depth) return a.depth < b.depth;
    const int pa = nodes_[a.parent].rank, pb = nodes_[b.parent].rank;
    if (pa != pb) return pa < pb;
    return a.token < b.token;
  }
  int Child(int parent, uint32_t token) {
    for (size_t x = 1; x < nodes_.size(); ++x)
      if (nodes_[x].parent == parent && nodes_[x].token == token) return static_cast<int>(x);
    ONode n{.token = token, .parent = parent, .depth = nodes_[parent].depth + 1};
    n.states.assign(views_.size(), format::kNoState);
    n.counts.assign(views_.size(), 0);
    n.lens.assign(views_.size(), 0);
    nodes_.push_back(std::move(n));
    return static_cast<int>(nodes_.size() - 1);
  }
  void Offer(int node, int slot, int cell) {
    ONode& n = nodes_[node];
    const double p = cal.P(cell);
    if (n.cells[slot] < 0 || p > cal.P(n.cells[slot]) ||
        (p == cal.P(n.cells[slot]) && cell < n.cells[slot]))
      n.cells[slot] = cell;
    n.prob = std::max(n.prob, p);
  }

  std::vector<const format::IndexView*> views_;
  SessionOptions sel_;
  std::vector<StaticCursor> cursors_;
  std::vector<StaticMatch> peeked_;
  std::vector<ONode> nodes_;
  std::vector<std::array<int, 2>> tree_cells_;
};

Text Stream(std::mt19937& rng, const std::vector<Text>& docs, size_t n, uint32_t vocab) {
  return test_util::CopiedStream(rng, docs, n, vocab, 3, 12);
}

// How the session holds its indexes: bare views, shared StaticIndexes with
// small hubs, shared StaticIndexes with child records and no hubs (computed
// at open), or the same child records read from the file's RECS section.
enum class Shared { kNone, kHubs, kRecords, kFileRecords };

void CompareWithOracle(uint32_t seed, size_t num_indexes, Shared shared, size_t draft_size,
                       size_t max_width, size_t limit = 0) {
  std::mt19937 rng(seed);
  const uint32_t vocab = 6 + seed % 5;
  std::vector<std::vector<Text>> docs;
  std::vector<std::unique_ptr<BuiltIndex>> built;
  for (size_t i = 0; i < num_indexes; ++i) {
    docs.push_back(RandomTexts(rng, 20 + rng() % 20, 10, 40, vocab));
    // Repeated phrases give states of several children and longer matches.
    for (size_t k = 0; k < 10; ++k) docs[i].push_back(docs[i][rng() % docs[i].size()]);
    automaton::IndexInfo info;
    if (shared == Shared::kFileRecords)  // no hubs: every branching state's lookup is a record's
      info.accelerators = format::AcceleratorParams{.min_degree = 1000,
                                                    .top_k = static_cast<uint32_t>(max_width),
                                                    .filter_bits_per_edge = 10,
                                                    .record_min_count = 2};
    built.push_back(std::make_unique<BuiltIndex>(
        docs[i], vocab, "cal_oracle_" + std::to_string(seed) + "_" + std::to_string(i) + ".sam",
        info));
  }
  SessionOptions o;
  o.max_dynamic_bytes = 1 << 20;
  o.policy = Policy::kCalibrated;
  o.draft_size = draft_size;
  o.tuning.calibrated_width = max_width;
  o.tuning.max_static_lookups = limit;  // 0: the exact ranking
  Session s(o);
  std::vector<const format::IndexView*> views;
  for (size_t i = 0; i < num_indexes; ++i) {
    views.push_back(&built[i]->view());
    if (shared == Shared::kHubs) {
      StaticIndex::Options h;
      h.min_degree = 3;  // small states become hubs too
      h.top_k = 4;       // below max_width 8: those use the session's own lookup
      s.AttachIndex(StaticIndex::Create(&built[i]->view(), h));
    } else if (shared == Shared::kRecords) {
      StaticIndex::Options h;
      h.min_degree = 1000;     // no hubs: every branching state's lookup is a record's
      h.record_min_count = 2;  // every clone
      const auto index = StaticIndex::Create(&built[i]->view(), h);
      EXPECT_GT(index->record_bytes(), 0u);
      s.AttachIndex(index);
    } else if (shared == Shared::kFileRecords) {
      StaticIndex::Options h;  // the file's parameters, no record_min_count: the file's records
      h.min_degree = 1000;
      h.top_k = max_width;
      const auto index = StaticIndex::Create(&built[i]->view(), h);
      EXPECT_TRUE(index->records_from_file());
      EXPECT_TRUE(index->accelerators_from_file());
      EXPECT_GT(index->record_bytes(), 0u);
      s.AttachIndex(index);
    } else {
      s.AttachIndex(&built[i]->view());
    }
  }
  Oracle oracle(views, o);
  const Text prompt = Stream(rng, docs[0], 30, vocab);
  s.Prefill(prompt);
  oracle.Prefill(prompt);
  const Text gen = Stream(rng, docs[rng() % num_indexes], 1500, vocab);
  size_t steps = 0, accepted_total = 0, branching = 0;
  for (size_t i = 0; i + 1 < gen.size();) {
    const DraftTree expected = limit == 0 ? oracle.Propose(gen[i], s.dynamic_sam())
                                          : oracle.ProposeLimited(gen[i], s.dynamic_sam(), limit);
    const DraftTree& got = s.Propose(gen[i]);
    ASSERT_EQ(got.tokens, expected.tokens) << "seed " << seed << " step " << steps << " limit "
                                           << limit;
    ASSERT_EQ(got.parents, expected.parents) << "seed " << seed << " step " << steps;
    // Each node's estimate: its best offer's calibrated probability.
    ASSERT_EQ(got.accept_estimates.size(), expected.accept_estimates.size()) << steps;
    for (size_t k = 0; k < got.accept_estimates.size(); ++k)
      ASSERT_NEAR(got.accept_estimates[k], expected.accept_estimates[k], 1e-6)
          << "seed " << seed << " step " << steps << " node " << k;
    branching += !got.IsLinear();
    const size_t accepted =
        AcceptedLength(got, std::span<const uint32_t>(gen).subspan(i + 1));
    accepted_total += accepted;
    const Text commit(gen.begin() + i, gen.begin() + i + accepted + 1);
    oracle.Commit(expected, commit);
    s.Commit(commit);
    for (size_t k = 0; k < num_indexes; ++k) {
      ASSERT_EQ(s.cursor(k).match().state, oracle.cursor(k).match().state) << steps;
      ASSERT_EQ(s.cursor(k).match().len, oracle.cursor(k).match().len) << steps;
    }
    i += accepted + 1;
    ++steps;
  }
  // The streams exercise what they are meant to: accepted drafts, branching trees.
  EXPECT_GT(accepted_total, steps / 4) << seed;
  EXPECT_GT(branching, steps / 10) << seed;
  EXPECT_GT(oracle.backoff_drafted, limit == 0 ? steps / 10 : steps / 50) << seed;
}

TEST(CalibratedPolicy, LazyRankingMatchesEagerOracle) {
  for (uint32_t seed = 1; seed <= 6; ++seed) CompareWithOracle(seed, 1, Shared::kNone, 40, 8);
}

TEST(CalibratedPolicy, LazyRankingMatchesEagerOracleWithHubsAndTwoIndexes) {
  for (uint32_t seed = 11; seed <= 14; ++seed) CompareWithOracle(seed, 2, Shared::kHubs, 40, 8);
  for (uint32_t seed = 21; seed <= 23; ++seed) CompareWithOracle(seed, 1, Shared::kHubs, 16, 3);
}

// Child records (StaticIndex::Options::record_min_count) answer the lookups
// of branching states: the same drafts as the oracle's own enumeration.
TEST(CalibratedPolicy, LazyRankingMatchesEagerOracleWithChildRecords) {
  for (uint32_t seed = 51; seed <= 53; ++seed) CompareWithOracle(seed, 2, Shared::kRecords, 40, 8);
  for (uint32_t seed = 61; seed <= 62; ++seed) CompareWithOracle(seed, 1, Shared::kRecords, 16, 3);
}

// The same records read from the index file's RECS section (sam-build
// --child-records): the same drafts again.
TEST(CalibratedPolicy, LazyRankingMatchesEagerOracleWithChildRecordsFromTheFile) {
  for (uint32_t seed = 51; seed <= 53; ++seed)
    CompareWithOracle(seed, 2, Shared::kFileRecords, 40, 8);
  for (uint32_t seed = 61; seed <= 62; ++seed)
    CompareWithOracle(seed, 1, Shared::kFileRecords, 16, 3);
  CompareWithOracle(76, 1, Shared::kFileRecords, 24, 8, 2);
}

// Two indexes without hub tables: a node's backoff children in one index and
// its own children in the other (the offers' order differs from the oracle's).
TEST(CalibratedPolicy, LazyRankingMatchesEagerOracleWithTwoIndexes) {
  for (uint32_t seed = 11; seed <= 14; ++seed) CompareWithOracle(seed, 2, Shared::kNone, 40, 8);
}

// max_static_lookups: the session's lazy ranking with its shortcuts against
// the limited ranking written plainly (Oracle::ProposeLimited).
TEST(CalibratedPolicy, LookupLimitMatchesPlainLimitedRanking) {
  for (const size_t limit : {size_t{1}, size_t{2}, size_t{3}, size_t{8}}) {
    for (uint32_t seed = 71; seed <= 73; ++seed)
      CompareWithOracle(seed, 1, Shared::kNone, 40, 8, limit);
    CompareWithOracle(74, 2, Shared::kHubs, 40, 8, limit);
    CompareWithOracle(75, 1, Shared::kRecords, 16, 3, limit);
    CompareWithOracle(76, 1, Shared::kRecords, 24, 8, limit);
  }
}

// Large budgets and wide trees: the best-first queue holds hundreds of
// entries and moves them to the middle of a larger buffer as it fills at
// either end (MergedScratch::Recentre), in the same order.
TEST(CalibratedPolicy, LargeBudgetsAndWideTrees) {
  for (uint32_t seed = 81; seed <= 82; ++seed) CompareWithOracle(seed, 1, Shared::kNone, 256, 16);
  CompareWithOracle(83, 2, Shared::kRecords, 128, 16);
}

TEST(CalibratedPolicy, SmallBudgetsAndNarrowTrees) {
  for (uint32_t seed = 31; seed <= 34; ++seed) CompareWithOracle(seed, 1, Shared::kNone, 6, 2);
  for (uint32_t seed = 41; seed <= 43; ++seed) CompareWithOracle(seed, 2, Shared::kNone, 12, 1);
}

// max_static_lookups = k: at most k branching states offer their static
// children in a step. Without them a node has at most two children (the
// dynamic chain's and, for a state that occurs once, the text's), so at most
// k draft nodes have three or more; no limit (0) and a limit never reached
// draft the same.
TEST(CalibratedPolicy, StaticLookupLimitBoundsBranchingNodes) {
  std::mt19937 rng(7);
  const uint32_t vocab = 4;  // few tokens: bushy trees
  std::vector<Text> docs = RandomTexts(rng, 40, 20, 40, vocab);
  BuiltIndex built(docs, vocab, "cal_limit.sam");
  const Text prompt = Stream(rng, docs, 30, vocab);
  const Text gen = Stream(rng, docs, 600, vocab);
  std::vector<std::unique_ptr<Session>> sessions;
  for (size_t limit : {size_t{0}, size_t{1000}, size_t{1}, size_t{3}}) {
    SessionOptions o;
    o.max_dynamic_bytes = 1 << 20;
    o.policy = Policy::kCalibrated;
    o.tuning.max_static_lookups = limit;
    sessions.push_back(std::make_unique<Session>(o));
    sessions.back()->AttachIndex(&built.view());
    sessions.back()->Prefill(prompt);
  }
  size_t limited_smaller = 0;
  for (size_t i = 0; i + 1 < gen.size(); ++i) {
    // Every session commits one token a step: their states stay comparable.
    std::vector<DraftTree> trees;
    for (auto& s : sessions) trees.push_back(s->Propose(gen[i]));
    EXPECT_EQ(trees[0].tokens, trees[1].tokens) << i;
    EXPECT_EQ(trees[0].parents, trees[1].parents) << i;
    for (size_t k = 2; k < trees.size(); ++k) {
      const size_t limit = k == 2 ? 1 : 3;
      std::vector<size_t> children(trees[k].size(), 0);
      for (size_t n = 1; n < trees[k].size(); ++n) ++children[trees[k].parents[n]];
      const size_t branching =
          std::count_if(children.begin(), children.end(), [](size_t c) { return c >= 3; });
      EXPECT_LE(branching, limit) << "step " << i << " limit " << limit;
    }
    limited_smaller += trees[2].size() < trees[0].size();
    for (auto& s : sessions) s->Commit(Text{gen[i]});
  }
  EXPECT_GT(limited_smaller, 0u);  // the limit was reached
}

}  // namespace
}  // namespace sam::runtime
