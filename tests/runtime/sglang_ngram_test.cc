// SGLang's NGRAM drafting (sglang_ngram.h) against a naive oracle: n-grams
// in a map, the corpus as plain documents searched by brute force, the trees
// compared as sets of root paths.
#include "sam/runtime/sglang_ngram.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <deque>
#include <map>
#include <memory>
#include <queue>
#include <random>
#include <set>
#include <span>
#include <vector>

#include "sam/error.h"
#include "sam/runtime/replay.h"
#include "test_index.h"

namespace sam::runtime {
namespace {

using test_util::BuiltIndex;
using test_util::RandomTexts;
using test_util::Text;

using Path = std::vector<uint32_t>;

// The corpus as documents: a string's occurrences, counted and located by
// scanning (never across a document's end).
struct NaiveCorpus {
  std::vector<Text> docs;
  // End positions of s, as (document, offset of its last token), in text order.
  std::vector<std::pair<size_t, size_t>> Ends(const Path& s) const {
    std::vector<std::pair<size_t, size_t>> ends;
    for (size_t d = 0; d < docs.size(); ++d)
      for (size_t e = s.size(); e <= docs[d].size(); ++e)
        if (std::equal(s.begin(), s.end(), docs[d].begin() + (e - s.size())))
          ends.emplace_back(d, e - 1);
    return ends;
  }
  // The tokens that follow s somewhere, with their counts and last ends.
  struct Child {
    uint32_t token;
    size_t count;
    std::pair<size_t, size_t> last;
  };
  std::vector<Child> Children(const Path& s) const {
    std::map<uint32_t, Child> by_token;
    for (const auto& [d, e] : Ends(s)) {
      if (e + 1 >= docs[d].size()) continue;
      Child& c = by_token[docs[d][e + 1]];
      c.token = docs[d][e + 1];
      ++c.count;
      c.last = std::max(c.last, std::make_pair(d, e + 1));
    }
    std::vector<Child> out;
    for (const auto& [t, c] : by_token) out.push_back(c);
    return out;
  }
};

// The oracle: the trie as a map from n-gram to (frequency, last touch); the
// corpus as documents. Nodes are strings (the trie's paths; for the corpus,
// a string stands for its automaton state: the same continuations).
class Oracle {
 public:
  Oracle(const SglangNgramOptions& o, const NaiveCorpus* corpus) : o_(o), corpus_(corpus) {}

  void Insert(std::span<const uint32_t> window) {
    for (size_t i = 0; i < window.size(); ++i)
      for (size_t k = i; k < std::min(window.size(), i + o_.max_trie_depth); ++k) {
        auto& e = ngrams_[Path(window.begin() + i, window.begin() + k + 1)];
        ++e.first;
        e.second = ++clock_;
      }
  }
  uint32_t Frequency(const Path& g) const {
    const auto it = ngrams_.find(g);
    return it == ngrams_.end() ? 0 : it->second.first;
  }

  // The draft's root paths for `text` (prompt + output, the start token last).
  std::set<Path> Draft(const Text& text, size_t max_nodes) const {
    const size_t nodes = std::min(o_.draft_token_num, max_nodes);
    const size_t total = nodes - 1;
    const size_t sam = corpus_ != nullptr ? std::min(o_.external_sam_budget, total) : 0;
    const Text context(text.end() - std::min(text.size(), o_.max_trie_depth), text.end());
    std::set<Path> tree = Build(context, total - sam, false);
    if (sam > 0) {
      // The corpus tree's paths join by root path, shortest first, while
      // the tree has room (it always has: the shares add up to the total).
      std::set<Path> extra = Build(context, sam, true);
      std::vector<Path> order(extra.begin(), extra.end());
      std::stable_sort(order.begin(), order.end(),
                       [](const Path& a, const Path& b) { return a.size() < b.size(); });
      for (const Path& p : order)
        if (tree.size() < nodes - 1 || tree.count(p)) tree.insert(p);
    }
    return tree;
  }

 private:
  struct Child {
    uint32_t token;
    Path node;     // the child's string
    double freq;   // frequency or count
    double order;  // recency: larger is more recent
  };
  std::vector<Child> Children(const Path& s, bool corpus) const {
    std::vector<Child> out;
    if (corpus) {
      for (const auto& c : corpus_->Children(s)) {
        Path n = s;
        n.push_back(c.token);
        out.push_back({c.token, n, static_cast<double>(c.count),
                       static_cast<double>(c.last.first) * 1e6 + static_cast<double>(c.last.second)});
      }
    } else {
      for (const auto& [g, e] : ngrams_)
        if (g.size() == s.size() + 1 && std::equal(s.begin(), s.end(), g.begin()))
          out.push_back({g.back(), g, static_cast<double>(e.first), static_cast<double>(e.second)});
    }
    return out;
  }
  bool Exists(const Path& s, bool corpus) const {
    return corpus ? !corpus_->Ends(s).empty() : ngrams_.count(s) > 0;
  }
  // Anchors: suffixes of the context that exist and have children, longest
  // first. For the corpus: the longest existing suffix, then for each
  // shorter length whose occurrences differ from the next longer one's (a
  // new automaton state), that state at its own longest length.
  std::vector<std::pair<Path, size_t>> Anchors(const Text& context, bool corpus) const {
    std::vector<std::pair<Path, size_t>> anchors;
    size_t previous_count = 0;
    for (size_t d = context.size(); d >= 1; --d) {
      const Path s(context.end() - d, context.end());
      if (!Exists(s, corpus)) continue;
      if (corpus) {
        const size_t count = corpus_->Ends(s).size();
        if (count == previous_count) continue;  // the same state as the longer suffix
        previous_count = count;
      }
      if (!Children(s, corpus).empty()) anchors.emplace_back(s, d);
    }
    return anchors;
  }

  std::set<Path> Build(const Text& context, size_t budget, bool corpus) const {
    std::set<Path> tree;
    const auto anchors = Anchors(context, corpus);
    auto add = [&](const Path& p) {
      tree.insert(p);
      return p;
    };
    auto room = [&] { return tree.size() < budget; };
    if (o_.match == SglangNgramOptions::Match::kBfs) {
      const double depth = std::max<double>(1, static_cast<double>(o_.max_trie_depth) - 1);
      const double scale = static_cast<double>(o_.max_bfs_breadth - o_.min_bfs_breadth) / depth;
      for (const auto& [anchor, d] : anchors) {
        std::queue<std::tuple<Path, double, Path>> queue;  // draft path, breadth, node
        queue.push({Path{}, (depth - static_cast<double>(d)) * scale + o_.min_bfs_breadth, anchor});
        while (!queue.empty() && room()) {
          auto [path, breadth, node] = queue.front();
          queue.pop();
          auto children = Children(node, corpus);
          std::sort(children.begin(), children.end(), [](const Child& a, const Child& b) {
            return a.order != b.order ? a.order > b.order : a.token < b.token;
          });
          const size_t take = std::max(1, static_cast<int>(breadth));
          for (size_t i = 0; i < take && i < children.size() && room(); ++i) {
            Path p = path;
            p.push_back(children[i].token);
            add(p);
            queue.push({p, breadth - scale, children[i].node});
          }
        }
      }
    } else {
      struct Item {
        double prob;
        long order;
        Path path, node;
      };
      auto worse = [](const Item& a, const Item& b) {
        return a.prob != b.prob ? a.prob < b.prob : a.order > b.order;
      };
      std::priority_queue<Item, std::vector<Item>, decltype(worse)> heap(worse);
      long offered = 0;
      auto offer = [&](const Path& path, const Path& node, double prob) {
        auto children = Children(node, corpus);
        std::sort(children.begin(), children.end(), [](const Child& a, const Child& b) {
          return a.freq != b.freq ? a.freq > b.freq : a.token < b.token;
        });
        children.resize(std::min(children.size(), o_.max_bfs_breadth));
        double sum = 0;
        for (const Child& c : children) sum += c.freq;
        for (const Child& c : children) {
          Path p = path;
          p.push_back(c.token);
          heap.push({c.freq / sum * prob, offered++, p, c.node});
        }
      };
      for (const auto& [anchor, d] : anchors) {
        offer({}, anchor, 1.0);
        while (!heap.empty() && room()) {
          const Item item = heap.top();
          heap.pop();
          add(item.path);
          offer(item.path, item.node, item.prob);
        }
      }
    }
    return tree;
  }

  SglangNgramOptions o_;
  const NaiveCorpus* corpus_;
  std::map<Path, std::pair<uint32_t, uint64_t>> ngrams_;
  uint64_t clock_ = 0;
};

std::set<Path> RootPaths(const DraftTree& t) {
  std::set<Path> paths;
  for (size_t v = 1; v < t.size(); ++v) {
    Path p;
    for (int u = static_cast<int>(v); u > 0; u = t.parents[u]) p.push_back(t.tokens[u]);
    std::reverse(p.begin(), p.end());
    paths.insert(p);
  }
  return paths;
}

Text Stream(std::mt19937& rng, const std::vector<Text>& docs, size_t n, uint32_t vocab) {
  return test_util::CopiedStream(rng, docs, n, vocab, 4, 10);
}

TEST(SglangNgram, MatchesTheNaiveOracle) {
  std::mt19937 rng(9);
  size_t drafted = 0, accepted = 0, with_corpus = 0;
  for (int trial = 0; trial < 40; ++trial) {
    const uint32_t vocab = 4 + rng() % 5;
    NaiveCorpus naive;
    naive.docs = RandomTexts(rng, 6 + rng() % 6, 5, 25, vocab);
    BuiltIndex index(naive.docs, vocab, "sglang_ngram_" + std::to_string(trial) + ".sam");
    auto corpus = SglangCorpus::Create(
        std::shared_ptr<const format::IndexView>(&index.view(), [](const format::IndexView*) {}));
    SglangNgramOptions o;
    o.match = trial % 2 ? SglangNgramOptions::Match::kProb : SglangNgramOptions::Match::kBfs;
    o.draft_token_num = 2 + rng() % 14;
    o.min_bfs_breadth = 1 + rng() % 2;
    o.max_bfs_breadth = o.min_bfs_breadth + rng() % 4;
    o.max_trie_depth = 2 + rng() % 6;
    o.external_sam_budget = trial % 3 == 0 ? 0 : rng() % o.draft_token_num;
    o.shared_trie = trial % 4 == 1;
    SglangNgramDrafter drafter(o, trial % 5 == 4 ? nullptr : corpus);
    Oracle oracle(o, trial % 5 == 4 ? nullptr : &naive);
    for (int request = 0; request < 3; ++request) {
      if (request > 0 && !o.shared_trie) oracle = Oracle(o, trial % 5 == 4 ? nullptr : &naive);
      drafter.Reset();
      const Text prompt = Stream(rng, naive.docs, 5 + rng() % 10, vocab);
      const Text output = Stream(rng, naive.docs, 60, vocab);
      drafter.Prefill(prompt);
      Text text = prompt;  // prompt + the output so far (the oracle's view)
      bool verified = false;
      for (size_t i = 0; i + 1 < output.size();) {
        text.push_back(output[i]);
        if (verified)
          oracle.Insert(std::span<const uint32_t>(text).last(std::min(text.size(), o.max_trie_depth)));
        const size_t max_nodes = rng() % 4 == 0 ? 1 + rng() % 8 : SIZE_MAX;
        DraftTree tree;
        drafter.Propose(output[i], max_nodes, &tree);
        const std::set<Path> expected = oracle.Draft(text, max_nodes);
        ASSERT_EQ(RootPaths(tree), expected) << "trial " << trial << " step at " << i;
        ASSERT_EQ(tree.size(), expected.size() + 1);
        ASSERT_LE(tree.size(), std::min(o.draft_token_num, max_nodes));
        drafted += tree.size() > 1;
        with_corpus += o.external_sam_budget > 0 && tree.size() > 1;
        const size_t a = AcceptedLength(tree, std::span<const uint32_t>(output).subspan(i + 1));
        accepted += a;
        drafter.Commit(std::span<const uint32_t>(output).subspan(i, a + 1));
        text.insert(text.end(), output.begin() + i + 1, output.begin() + i + a + 1);
        verified = true;
        i += a + 1;
      }
    }
  }
  EXPECT_GT(drafted, 1000u);
  EXPECT_GT(accepted, 500u);
  EXPECT_GT(with_corpus, 300u);
}

TEST(SglangNgram, InsertsEverySuffixOfTheWindow) {
  SglangNgramOptions o;
  o.max_trie_depth = 3;
  SglangNgramDrafter drafter(o);
  const Text window = {1, 2, 1, 2, 3};
  drafter.Insert(window);
  drafter.Insert(window);
  // Each start position, cut to 3 tokens; counted on every prefix.
  EXPECT_EQ(drafter.Frequency(Text{1}), 4u);
  EXPECT_EQ(drafter.Frequency(Text{1, 2}), 4u);
  EXPECT_EQ(drafter.Frequency(Text{1, 2, 1}), 2u);
  EXPECT_EQ(drafter.Frequency(Text{1, 2, 3}), 2u);
  EXPECT_EQ(drafter.Frequency(Text{2, 1, 2}), 2u);
  EXPECT_EQ(drafter.Frequency(Text{2, 1, 2, 3}), 0u);  // beyond the depth
  EXPECT_EQ(drafter.Frequency(Text{3}), 2u);
  // The prompt is not inserted; a request's first proposal has nothing to draft from.
  SglangNgramDrafter fresh(o);
  fresh.Prefill(Text{1, 2, 1, 2, 1, 2});
  DraftTree t;
  EXPECT_FALSE(fresh.Propose(1, 100, &t));
  EXPECT_EQ(fresh.Frequency(Text{1}), 0u);
}

TEST(SglangNgram, RefusesWhatSglangRefuses) {
  SglangNgramOptions o;
  o.max_trie_depth = 1;
  EXPECT_THROW(SglangNgramDrafter{o}, Error);
  o = {};
  o.min_bfs_breadth = 0;
  EXPECT_THROW(SglangNgramDrafter{o}, Error);
  o = {};
  o.min_bfs_breadth = 11;
  EXPECT_THROW(SglangNgramDrafter{o}, Error);
  EXPECT_THROW(SglangCorpus::Create(nullptr), Error);
}

}  // namespace
}  // namespace sam::runtime
