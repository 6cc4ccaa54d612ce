// SGLang's NGRAM drafting, reimplemented as a baseline drafter: what an
// SGLang user already has, so that replays show this project's margin over it.
//
//   sam::runtime::SglangNgramOptions o;                 // SGLang's defaults
//   auto corpus = sam::runtime::SglangCorpus::Create(index.view());  // optional
//   o.external_sam_budget = 4;                          // nodes for the corpus
//   sam::runtime::SglangNgramDrafter drafter(o, corpus);
//   sam::runtime::Replay(drafter, traces);
//
// It follows sgl-project/sglang as merged on main: the C++ core under
// python/sglang/kernels/jit/csrc/ngram_corpus/ (trie.cpp at 5701d4eb,
// suffix_automaton.cpp at 93d6127a, result.cpp at f58236f2, ngram.cpp at
// 3fdc77fb: Ngram::batchMatch), its defaults (server_args.py:
// speculative_num_draft_tokens 12 for NGRAM, min/max BFS breadth 1/10,
// max trie depth 18, match type BFS) and the worker's calls
// (python/sglang/srt/speculative/ngram_worker.py, NGRAMWorker):
//  - a trie of n-grams: Insert(window) inserts every suffix of the window,
//    each cut to max_trie_depth tokens, adding 1 to the frequency of every
//    node on its path and moving it to the front of its parent's recency list;
//  - the worker never inserts the prompt at prefill; after each verification
//    it inserts the last max_trie_depth tokens of prompt + output (so the
//    prompt's tail at the first steps, and every n-gram again while it stays
//    in that window);
//  - it matches the last max_trie_depth tokens: every suffix of them that is
//    a trie node with children is an anchor, longest first;
//  - BFS: from each anchor of match length d, breadth (max_trie_depth - 1 -
//    d) * scale + min_bfs_breadth children (most recent first), scale =
//    (max - min breadth) / (max_trie_depth - 1), the breadth shrinking by
//    scale a level, breadth-first, until the tree has its nodes; PROB: a
//    best-first tree over path probabilities, each node's top max_bfs_breadth
//    children (frequency descending, then token) weighted by frequency over
//    their sum; anchors add to one tree (a token already under a parent is
//    reused, not added again);
//  - with an external corpus (its documents as a suffix automaton with
//    occurrence counts and last end positions), min(external_sam_budget,
//    nodes - 1) of the nodes are the corpus's: the trie drafts its share, the
//    corpus automaton (matched over the same last max_trie_depth tokens;
//    anchors: the match and its suffix links with children) drafts its own
//    with the same BFS (children by last occurrence) or PROB (by count)
//    rule, and the two trees merge by their root paths.
// The tree has at most draft_token_num nodes, the start token included.
// SGLang pads every draft to draft_token_num nodes with token 0 under the
// root: the padding is left out here (it is never accepted), so tokens per
// step count only real nodes.
//
// Differences, none of which changes a draft at the replay's sizes: the
// trie's capacity (10M nodes in SGLang, with LRU eviction of leaves) is
// unbounded here; equal PROB weights are taken in the order they were
// offered (SGLang's priority queue leaves that order unspecified); SGLang's
// incremental match state is a cache of the same anchors.
#ifndef SAM_RUNTIME_SGLANG_NGRAM_H_
#define SAM_RUNTIME_SGLANG_NGRAM_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "sam/export.h"
#include "sam/format/index.h"
#include "sam/runtime/drafter.h"

namespace sam::runtime {

struct SAM_API SglangNgramOptions {
  enum class Match { kBfs, kProb };
  Match match = Match::kBfs;              // --speculative-ngram-match-type
  size_t draft_token_num = 12;            // --speculative-num-draft-tokens (root included)
  size_t min_bfs_breadth = 1;             // --speculative-ngram-min-bfs-breadth
  size_t max_bfs_breadth = 10;            // --speculative-ngram-max-bfs-breadth
  size_t max_trie_depth = 18;             // --speculative-ngram-max-trie-depth
  size_t external_sam_budget = 0;         // --speculative-ngram-external-sam-budget
  // Keep the trie across requests (Reset), as SGLang's one trie per worker
  // does; false gives each request a trie of its own.
  bool shared_trie = false;
};

// An external corpus for SglangNgramDrafter: a static index's suffix
// automaton (its documents) with the last end position of every state, which
// SGLang's BFS rule ranks children by (computed here once, O(states), 8
// bytes a state). Immutable; shared by any number of drafters.
class SAM_API SglangCorpus {
 public:
  // Keeps `view` alive. Throws sam::Error (kInvalidArgument) for a null view.
  static std::shared_ptr<const SglangCorpus> Create(std::shared_ptr<const format::IndexView> view);
  const format::IndexView& view() const { return *view_; }
  // The last (largest) end position of state v's strings.
  uint64_t MaxEndpos(uint64_t v) const { return max_endpos_[v]; }

 private:
  std::shared_ptr<const format::IndexView> view_;
  std::vector<uint64_t> max_endpos_;
};

class SAM_API SglangNgramDrafter : public Drafter {
 public:
  // corpus may be null (no external corpus). Throws sam::Error
  // (kInvalidArgument) for options SGLang refuses: max_trie_depth < 2,
  // min_bfs_breadth 0 or above max_bfs_breadth, draft_token_num 0.
  explicit SglangNgramDrafter(const SglangNgramOptions& options,
                              std::shared_ptr<const SglangCorpus> corpus = nullptr);
  ~SglangNgramDrafter() override;
  std::string_view name() const override { return "sglang-ngram"; }
  void Reset() override;
  void Prefill(std::span<const uint32_t> prompt) override;
  bool Propose(uint32_t start_token, size_t max_nodes, DraftTree* out) override;
  void Commit(std::span<const uint32_t> tokens) override;

  // The trie's n-gram frequency of `ngram` (0 when absent): for tests.
  uint32_t Frequency(std::span<const uint32_t> ngram) const;
  // Inserts `tokens` as the worker does after a verification (every suffix,
  // cut to max_trie_depth): for tests.
  void Insert(std::span<const uint32_t> tokens);

 private:
  struct Trie;
  SglangNgramOptions options_;
  std::shared_ptr<const SglangCorpus> corpus_;
  std::unique_ptr<Trie> trie_;
  std::vector<uint32_t> text_;  // prompt + committed tokens
  bool verified_ = false;       // a verification awaits its insert (at the next Propose)
};

}  // namespace sam::runtime

#endif  // SAM_RUNTIME_SGLANG_NGRAM_H_
