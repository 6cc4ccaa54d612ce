// SGLang's NGRAM drafting (sglang_ngram.h): the trie, the external corpus's
// suffix automaton, BFS and PROB trees, the budget split and the merge,
// written from the behaviour of sgl-project/sglang's ngram_corpus sources
// (files and commits in the header).
#include "sam/runtime/sglang_ngram.h"

#include <algorithm>
#include <deque>
#include <queue>
#include <string>
#include <utility>

#include "sam/error.h"

namespace sam::runtime {

namespace {

// A draft tree under construction: each node's children by token, nodes in
// order of creation (Ngram's Node::next maps).
struct BuildTree {
  std::vector<std::vector<std::pair<uint32_t, int32_t>>> next;
  size_t size() const { return next.size(); }
  void Reset() { next.assign(1, {}); }
  // The child of `parent` with `token`, or -1.
  int32_t Find(int32_t parent, uint32_t token) const {
    for (const auto& [t, n] : next[parent])
      if (t == token) return n;
    return -1;
  }
  int32_t Add(int32_t parent, uint32_t token) {
    next[parent].emplace_back(token, static_cast<int32_t>(next.size()));
    next.emplace_back();
    return next[parent].back().second;
  }
  // The child of `parent` with `token`, added when missing.
  int32_t FindOrAdd(int32_t parent, uint32_t token) {
    const int32_t found = Find(parent, token);
    return found >= 0 ? found : Add(parent, token);
  }
};

// The one child-ranking interface the BFS and PROB rules read, over the trie
// or the corpus automaton: node ids, a node's children (token, child id)
// ranked by recency or by frequency, and a child's frequency.
template <typename Source>
void BuildBfs(const Source& source, std::span<const std::pair<uint64_t, size_t>> anchors,
              const SglangNgramOptions& o, size_t draft_tokens, BuildTree* tree) {
  // Anchors of match length d start at breadth (max_trie_depth - 1 - d) *
  // scale + min_bfs_breadth, which shrinks by scale a level (never below 1).
  const double max_match_depth = std::max<double>(1.0, static_cast<double>(o.max_trie_depth) - 1);
  const double scale = static_cast<double>(o.max_bfs_breadth - o.min_bfs_breadth) / max_match_depth;
  std::vector<std::pair<uint32_t, uint64_t>> children;
  for (const auto& [anchor, depth] : anchors) {
    struct Item {
      int32_t parent;
      double breadth;
      uint64_t node;
    };
    std::deque<Item> queue;
    queue.push_back({0, (max_match_depth - static_cast<double>(depth)) * scale +
                            static_cast<double>(o.min_bfs_breadth),
                     anchor});
    while (!queue.empty() && tree->size() <= draft_tokens) {
      const Item item = queue.front();
      queue.pop_front();
      const size_t breadth = static_cast<size_t>(std::max(1, static_cast<int32_t>(item.breadth)));
      source.ByRecency(item.node, breadth, &children);
      for (size_t i = 0; i < children.size() && tree->size() <= draft_tokens; ++i) {
        const int32_t pos = tree->FindOrAdd(item.parent, children[i].first);
        queue.push_back({pos, item.breadth - scale, children[i].second});
      }
    }
  }
}

template <typename Source>
void BuildProb(const Source& source, std::span<const std::pair<uint64_t, size_t>> anchors,
               const SglangNgramOptions& o, size_t draft_tokens, BuildTree* tree) {
  struct Item {
    double prob;
    uint64_t order;  // equal probabilities: the first offered first
    int32_t parent;
    uint32_t token;
    uint64_t node;
    bool operator<(const Item& b) const {
      return prob != b.prob ? prob < b.prob : order > b.order;
    }
  };
  std::priority_queue<Item> heap;
  uint64_t offered = 0;
  std::vector<std::pair<uint32_t, uint64_t>> children;
  // A node's top max_bfs_breadth children by frequency, each weighted by its
  // frequency over their sum, times the node's own weight.
  auto offer = [&](int32_t parent, uint64_t node, double prob) {
    source.ByFrequency(node, o.max_bfs_breadth, &children);
    double sum = 0;
    for (const auto& c : children) sum += static_cast<double>(source.Frequency(c.second));
    if (sum <= 0) sum = 1;
    for (const auto& [token, child] : children)
      heap.push({static_cast<double>(source.Frequency(child)) / sum * prob, offered++, parent,
                 token, child});
  };
  for (const auto& [anchor, depth] : anchors) {
    offer(0, anchor, 1.0);
    while (!heap.empty() && tree->size() <= draft_tokens) {
      const Item item = heap.top();
      heap.pop();
      offer(tree->FindOrAdd(item.parent, item.token), item.node, item.prob);
    }
  }
}

// Appends the nodes of `from` to `to` by their root paths, breadth first,
// while `to` has fewer than `max_nodes` nodes (combineRootResults_).
void Merge(const BuildTree& from, size_t max_nodes, BuildTree* to) {
  std::deque<std::pair<int32_t, int32_t>> queue{{0, 0}};  // (from, to)
  while (!queue.empty()) {
    const auto [f, t] = queue.front();
    queue.pop_front();
    for (const auto& [token, child] : from.next[f]) {
      int32_t into = to->Find(t, token);
      if (into < 0) {
        if (to->size() >= max_nodes) return;
        into = to->Add(t, token);
      }
      queue.push_back({child, into});
    }
  }
}

}  // namespace

// ------------------------------------------------------------------ trie

struct SglangNgramDrafter::Trie {
  struct Node {
    uint32_t token = 0;
    uint32_t freq = 0;
    uint64_t touched = 0;  // the parent's recency list is by this, latest first
    std::vector<std::pair<uint32_t, int32_t>> children;  // (token, node), by creation
  };
  std::vector<Node> nodes{Node{}};
  uint64_t clock = 0;

  int32_t Find(int32_t node, uint32_t token) const {
    for (const auto& [t, n] : nodes[node].children)
      if (t == token) return n;
    return -1;
  }
  void Clear() {
    nodes.assign(1, Node{});
    clock = 0;
  }
  // Trie::insert: every suffix of `tokens`, cut to `depth` tokens, counted
  // once more on every node of its path, each node moved to the front of its
  // parent's recency list.
  void Insert(std::span<const uint32_t> tokens, size_t depth) {
    for (size_t i = 0; i < tokens.size(); ++i) {
      int32_t cursor = 0;
      for (size_t k = i; k < std::min(tokens.size(), i + depth); ++k) {
        int32_t child = Find(cursor, tokens[k]);
        if (child < 0) {
          child = static_cast<int32_t>(nodes.size());
          nodes[cursor].children.emplace_back(tokens[k], child);
          nodes.push_back(Node{tokens[k], 0, 0, {}});
        }
        ++nodes[child].freq;
        nodes[child].touched = ++clock;
        cursor = child;
      }
    }
  }
  // The anchors of `context` (its last max_trie_depth tokens): every suffix
  // that is a node with children, longest first, with its length.
  void Anchors(std::span<const uint32_t> context, size_t depth,
               std::vector<std::pair<uint64_t, size_t>>* out) const {
    out->clear();
    const size_t longest = std::min(context.size(), depth);
    for (size_t d = longest; d >= 1; --d) {
      int32_t cursor = 0;
      for (size_t k = context.size() - d; k < context.size() && cursor >= 0; ++k)
        cursor = Find(cursor, context[k]);
      if (cursor >= 0 && !nodes[cursor].children.empty()) out->emplace_back(cursor, d);
    }
  }

  // The source interface of BuildBfs / BuildProb.
  void Ranked(uint64_t node, size_t n, bool recency,
              std::vector<std::pair<uint32_t, uint64_t>>* out) const {
    out->clear();
    for (const auto& [token, child] : nodes[node].children) out->emplace_back(token, child);
    auto before = [&](const auto& a, const auto& b) {
      const Node& x = nodes[a.second];
      const Node& y = nodes[b.second];
      if (recency) return x.touched > y.touched;
      return x.freq != y.freq ? x.freq > y.freq : x.token < y.token;
    };
    const size_t keep = std::min(n, out->size());
    std::partial_sort(out->begin(), out->begin() + keep, out->end(), before);
    out->resize(keep);
  }
  void ByRecency(uint64_t node, size_t n, std::vector<std::pair<uint32_t, uint64_t>>* out) const {
    Ranked(node, n, true, out);
  }
  void ByFrequency(uint64_t node, size_t n, std::vector<std::pair<uint32_t, uint64_t>>* out) const {
    Ranked(node, n, false, out);
  }
  uint64_t Frequency(uint64_t node) const { return nodes[node].freq; }
};

// ------------------------------------------------------------------ corpus

std::shared_ptr<const SglangCorpus> SglangCorpus::Create(
    std::shared_ptr<const format::IndexView> view) {
  if (view == nullptr) throw Error(ErrorCode::kInvalidArgument, "SglangCorpus: no index");
  auto corpus = std::shared_ptr<SglangCorpus>(new SglangCorpus());
  corpus->view_ = std::move(view);
  const format::IndexView& v = *corpus->view_;
  // A state's end positions are those of the non-clone states (one a text
  // position) in its suffix-link subtree. Walking up from each position, the
  // latest first, sets every ancestor not yet set: each state once.
  corpus->max_endpos_.assign(v.num_states(), 0);
  for (uint64_t p = v.num_tokens(); p >= 1; --p) {
    for (uint64_t s = p; s != format::kRoot && corpus->max_endpos_[s] == 0; s = v.Link(s))
      corpus->max_endpos_[s] = p;
  }
  return corpus;
}

namespace {

// The corpus automaton as a BuildBfs / BuildProb source (SuffixAutomaton:
// children without the document separator, by last occurrence or by count,
// then token).
struct CorpusSource {
  const SglangCorpus& corpus;
  void Ranked(uint64_t state, size_t n, bool recency,
              std::vector<std::pair<uint32_t, uint64_t>>* out) const {
    const format::IndexView& v = corpus.view();
    out->clear();
    v.ForEachChild(state, [&](uint32_t token, uint64_t target) {
      if (token < v.separator()) out->emplace_back(token, target);
    });
    auto before = [&](const auto& a, const auto& b) {
      const uint64_t x = recency ? corpus.MaxEndpos(a.second) : v.Count(a.second);
      const uint64_t y = recency ? corpus.MaxEndpos(b.second) : v.Count(b.second);
      return x != y ? x > y : a.first < b.first;
    };
    const size_t keep = std::min(n, out->size());
    std::partial_sort(out->begin(), out->begin() + keep, out->end(), before);
    out->resize(keep);
  }
  void ByRecency(uint64_t s, size_t n, std::vector<std::pair<uint32_t, uint64_t>>* out) const {
    Ranked(s, n, true, out);
  }
  void ByFrequency(uint64_t s, size_t n, std::vector<std::pair<uint32_t, uint64_t>>* out) const {
    Ranked(s, n, false, out);
  }
  uint64_t Frequency(uint64_t s) const { return corpus.view().Count(s); }

  // SuffixAutomaton::match over the last `depth` tokens of `context`: the
  // state reached (following suffix links on a mismatch) and its suffix
  // links, those with children, longest first, each with its match length.
  void Anchors(std::span<const uint32_t> context, size_t depth,
               std::vector<std::pair<uint64_t, size_t>>* out) const {
    const format::IndexView& v = corpus.view();
    out->clear();
    uint64_t state = format::kRoot;
    uint64_t len = 0;
    for (size_t i = context.size() > depth ? context.size() - depth : 0; i < context.size(); ++i) {
      const uint32_t token = context[i];
      while (state != format::kRoot && v.Next(state, token) == format::kNoState) {
        state = v.Link(state);
        len = std::min(len, v.Len(state));
      }
      const uint64_t next = v.Next(state, token);
      if (next != format::kNoState) {
        state = next;
        ++len;
      } else {
        state = format::kRoot;
        len = 0;
      }
    }
    std::vector<std::pair<uint32_t, uint64_t>> children;
    while (state != format::kRoot && len > 0) {
      Ranked(state, 1, false, &children);
      if (!children.empty()) out->emplace_back(state, len);
      state = v.Link(state);
      len = std::min(len, v.Len(state));
    }
  }
};

}  // namespace

// ------------------------------------------------------------------ drafter

SglangNgramDrafter::SglangNgramDrafter(const SglangNgramOptions& options,
                                       std::shared_ptr<const SglangCorpus> corpus)
    : options_(options), corpus_(std::move(corpus)), trie_(std::make_unique<Trie>()) {
  auto refuse = [](const std::string& what) {
    throw Error(ErrorCode::kInvalidArgument, "SglangNgramOptions: " + what);
  };
  if (options_.max_trie_depth < 2)
    refuse("max_trie_depth must be at least 2, got " + std::to_string(options_.max_trie_depth));
  if (options_.min_bfs_breadth == 0) refuse("min_bfs_breadth must be at least 1");
  if (options_.min_bfs_breadth > options_.max_bfs_breadth)
    refuse("min_bfs_breadth " + std::to_string(options_.min_bfs_breadth) +
           " is above max_bfs_breadth " + std::to_string(options_.max_bfs_breadth));
  if (options_.draft_token_num == 0) refuse("draft_token_num must be at least 1");
}

SglangNgramDrafter::~SglangNgramDrafter() = default;

void SglangNgramDrafter::Reset() {
  text_.clear();
  verified_ = false;
  if (!options_.shared_trie) trie_->Clear();
}

void SglangNgramDrafter::Prefill(std::span<const uint32_t> prompt) {
  // The worker inserts nothing at prefill: the prompt reaches the trie only
  // through the window inserted after each verification.
  text_.assign(prompt.begin(), prompt.end());
  verified_ = false;
}

void SglangNgramDrafter::Insert(std::span<const uint32_t> tokens) {
  trie_->Insert(tokens, options_.max_trie_depth);
}

uint32_t SglangNgramDrafter::Frequency(std::span<const uint32_t> ngram) const {
  int32_t node = 0;
  for (uint32_t t : ngram) {
    node = trie_->Find(node, t);
    if (node < 0) return 0;
  }
  return ngram.empty() ? 0 : trie_->nodes[node].freq;
}

bool SglangNgramDrafter::Propose(uint32_t start_token, size_t max_nodes, DraftTree* out) {
  out->Reset(start_token, DraftSource::kOther);
  // The text as the worker sees it: prompt + output, the start token (the
  // last output token) included.
  text_.push_back(start_token);
  const size_t depth = options_.max_trie_depth;
  const std::span<const uint32_t> window =
      std::span<const uint32_t>(text_).last(std::min(text_.size(), depth));
  // The last verification's insert (_update_ngram_corpus): its output ended
  // with this start token, the bonus token.
  if (verified_) trie_->Insert(window, depth);
  verified_ = false;
  struct PopStart {  // text_ holds the committed tokens again after the proposal
    std::vector<uint32_t>* text;
    ~PopStart() { text->pop_back(); }
  } pop_start{&text_};

  const size_t nodes = std::min(options_.draft_token_num, std::max<size_t>(max_nodes, 1));
  const size_t total = nodes - 1;  // get_draft_token_num: the start token is not counted
  if (total == 0) return false;
  const size_t sam_budget = corpus_ ? std::min(options_.external_sam_budget, total) : 0;
  const size_t trie_budget = total - sam_budget;
  std::vector<std::pair<uint64_t, size_t>> anchors;
  BuildTree tree, corpus_tree;
  tree.Reset();
  trie_->Anchors(window, depth, &anchors);
  const bool bfs = options_.match == SglangNgramOptions::Match::kBfs;
  if (bfs) BuildBfs(*trie_, anchors, options_, trie_budget, &tree);
  else BuildProb(*trie_, anchors, options_, trie_budget, &tree);
  if (sam_budget > 0) {
    const CorpusSource source{*corpus_};
    source.Anchors(window, depth, &anchors);
    corpus_tree.Reset();
    if (bfs) BuildBfs(source, anchors, options_, sam_budget, &corpus_tree);
    else BuildProb(source, anchors, options_, sam_budget, &corpus_tree);
    Merge(corpus_tree, nodes, &tree);
  }
  // Breadth first, parents before children (fillResult's order).
  std::deque<std::pair<int32_t, int32_t>> queue{{0, 0}};  // (build node, tree node)
  while (!queue.empty()) {
    const auto [b, t] = queue.front();
    queue.pop_front();
    for (const auto& [token, child] : tree.next[b]) queue.push_back({child, out->Add(t, token)});
  }
  return out->size() > 1;
}

void SglangNgramDrafter::Commit(std::span<const uint32_t> tokens) {
  text_.insert(text_.end(), tokens.begin(), tokens.end());
  verified_ = true;
}

}  // namespace sam::runtime
