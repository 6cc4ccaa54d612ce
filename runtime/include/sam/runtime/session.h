// A drafting session: the per-request state of SAM-Decoding.
//
//   auto general = sam::format::IndexFile::Open("general.sam");   // shared, read-only
//   sam::runtime::SessionOptions options;                          // paper rule, 40 tokens
//   sam::runtime::Session session(options);
//   session.AttachIndex(general.shared_view());   // keeps the file mapped
//   // or, sharing precomputed hub tables between sessions (static_index.h):
//   //   auto shared = sam::runtime::StaticIndex::Create(general.shared_view());  // once
//   //   session.AttachIndex(shared);
//   session.Prefill(prompt_ids);                     // BOS first, like the index documents
//   uint32_t start = first_token_from_prefill;
//   while (!done) {
//     const sam::runtime::DraftTree& tree = session.Propose(start);
//     size_t a = verify(tree);                        // accepted nodes along one path
//     session.Commit(accepted_path_tokens);           // start + the a accepted tokens
//     start = bonus_token;                            // the model's token after them
//   }
//   session.Reset();                                  // next request; memory is kept
//
// A session owns a dynamic suffix automaton over prompt + committed tokens
// (memory reserved at construction, bounded by max_dynamic_bytes), one
// matching cursor per attached static index, a selection policy
// (selection.h) and statistics. Propose(start) peeks: the start token is only
// added to the automata when it is committed.
//
// Lifetime and threads: an index attached as a shared_ptr (a view from
// IndexFile::shared_view(), or a StaticIndex) stays alive as long as the
// session; one attached as a raw view pointer (&file.view()) is borrowed and
// must outlive the session (moving its IndexFile, e.g. into a growing
// vector, does not invalidate it; destroying it does). The fallback drafter
// is borrowed and must outlive the session. A session is used by one thread
// at a time; any number of sessions (in any threads) may share one IndexView.
// Reset() forgets everything about the request (text, cursors, the fallback's
// per-request state) but keeps statistics and the learned acceptance
// estimates of Policy::kCalibrated, which are not tied to a request
// (ResetStatistics() clears the statistics, ResetCalibration() the estimates).
#ifndef SAM_RUNTIME_SESSION_H_
#define SAM_RUNTIME_SESSION_H_

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string_view>
#include <vector>

#include "sam/export.h"
#include "sam/format/index.h"
#include "sam/runtime/draft.h"
#include "sam/runtime/drafter.h"
#include "sam/runtime/dynamic_sam.h"
#include "sam/runtime/options.h"
#include "sam/runtime/response_cache.h"
#include "sam/runtime/selection.h"
#include "sam/runtime/shard_set.h"
#include "sam/runtime/static_index.h"
#include "sam/runtime/static_match.h"
#include "sam/runtime/statistics.h"

namespace sam::runtime {

namespace internal {
struct StaticSource;
struct StepContext;
class DraftPolicy;
}  // namespace internal

class SAM_API Session : public Drafter {
 public:
  // Throws sam::Error (kInvalidArgument) for an unusable option
  // (ValidateSessionOptions, options.h).
  explicit Session(const SessionOptions& options = {});
  ~Session() override;
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;

  std::string_view name() const override { return "sam"; }

  // Adds a static index (e.g. a general and a domain one); its cursor is
  // brought up to date with the current window. The session shares the view
  // (IndexFile::shared_view()): the file stays mapped while it lives.
  void AttachIndex(std::shared_ptr<const format::IndexView> view);
  // Same with a borrowed view, which must outlive the session.
  void AttachIndex(const format::IndexView* view);
  // Same, with a shared StaticIndex (static_index.h), which tree-drafting
  // policies (kTree, kCalibrated) read instead of scanning hub states
  // themselves; the session keeps a reference to it.
  void AttachIndex(std::shared_ptr<const StaticIndex> index);
  // Attaches the shards of one shard set (shard_set.h: OpenShardSet), in shard
  // order, as one index over the union of their documents: one cursor a shard
  // (num_indexes() counts them); the longest match is the longest over the
  // shards, a linear draft comes from the lowest shard with it, and kTree
  // trees sum the children's counts of every shard that matches as long
  // (MergedStaticTreeBuilder), and kCalibrated offers a node's static
  // children as the single index would (counts summed by token over the
  // shards that have the node's string, the set's match length, one lookup
  // a node against max_static_lookups): its drafts equal the single index's.
  // Throws sam::Error (kInvalidArgument) for no shard or a null one; then
  // nothing is attached. Every Attach* refuses (kInvalidArgument) an index
  // whose vocabulary size differs from the indexes attached before.
  void AttachShardSet(std::span<const std::shared_ptr<const StaticIndex>> shards);
  size_t num_indexes() const;
  // Replaces the fallback drafter (may be null). It is not reset or prefilled.
  void SetFallback(Drafter* fallback);
  // Drafts also from the earlier responses cached under `tenant` in `cache`
  // (response_cache.h), a source of its own (DraftSource::kCache): the paper
  // rule treats its match like the dynamic one (max of the two lengths, the
  // longer one drafts), kCalibrated offers its continuation
  // with its own calibration cells. Call again to change the tenant (e.g. per
  // request, before Prefill); null detaches. The session shares the cache,
  // which other sessions and threads may read and fill meanwhile.
  void AttachCache(std::shared_ptr<ResponseCache> cache, std::string_view tenant);
  const ResponseCache* cache() const { return cache_.get(); }
  // Adds the current request's text (committed output, after the prompt when
  // options.cache_prompts) to the attached cache under the session's tenant,
  // as one response; call when the request is finished, before Reset. Only
  // the text still in the dynamic window is added. Returns ResponseCache::
  // Insert's result (false without a cache or text).
  bool CacheRequest();
  // The same, with or without the prompt whatever options.cache_prompts says.
  bool CacheRequest(bool include_prompt);

  // Ids: with an index or shard set attached, Prefill, Propose and Commit
  // refuse an id at or above its vocabulary size (kInvalidArgument naming the
  // id and its position; nothing changes): ids of another tokenizer would
  // draft nothing silently. Without one, any id is taken.
  //
  // Starts a request with its prompt ids: extends the dynamic automaton by
  // all of them; a static cursor matches only the last
  // kPrefillMatchWindow of a longer prompt unless that match fills the window
  // (the same state and length as matching every token; PrefillCursor).
  void Prefill(std::span<const uint32_t> prompt) override;
  static constexpr size_t kPrefillMatchWindow = 1024;
  // Proposes a draft rooted at start_token. The reference stays valid until
  // the next call on the session.
  const DraftTree& Propose(uint32_t start_token);
  // Propose with at most max_nodes nodes, the start included (at least 1):
  // a tree of at most max_nodes nodes, or with SessionOptions::shape
  // kChain a chain of at most max_nodes nodes cut from the policy's whole
  // tree (draft_size nodes), which the statistics and calibration then
  // count. For a verifier with a per-step limit (vLLM's
  // num_speculative_tokens + 1).
  const DraftTree& Propose(uint32_t start_token, size_t max_nodes);
  // Drafter interface: Propose(start_token, max_nodes) copied to *out.
  bool Propose(uint32_t start_token, size_t max_nodes, DraftTree* out) override;
  // Commits the tokens that joined the verified context: the start token of
  // the last proposal followed by the accepted draft tokens. Updates the
  // statistics of the last proposal (acceptance = the longest root path of
  // that draft matching `tokens`). Any ids of the vocabulary may be committed.
  void Commit(std::span<const uint32_t> tokens) override;
  // Forwards model feedback to the fallback drafter.
  void ObserveTopK(std::span<const uint32_t> tokens, std::span<const uint32_t> topk,
                   size_t k) override;
  void Reset() override;

  const SessionStatistics& statistics() const { return stats_; }
  // Starts the statistics (and the measured rate a cost_curve weighs) from
  // zero; drafting is unaffected.
  void ResetStatistics();
  // Forgets what the policy has learned across requests (Policy::kCalibrated's
  // acceptance estimates): the next drafts are those of a new session's.
  // Statistics are kept.
  void ResetCalibration();

  // Inspection (tests, tools).
  const SessionOptions& options() const { return options_; }
  const DynamicSam& dynamic_sam() const { return dynamic_; }
  const StaticCursor& cursor(size_t i) const;
  // Match lengths of the last Propose (dynamic; best static, its index; the
  // response cache, 0 for policies that ignore it).
  uint32_t last_dynamic_length() const { return last_dyn_len_; }
  uint32_t last_static_length() const { return last_static_len_; }
  uint32_t last_cache_length() const { return last_cache_len_; }
  // The last Propose's tree before it was shaped (SessionOptions::shape).
  const DraftTree& last_tree() const { return tree_; }

 private:
  // group: the cursor index of the first shard of its shard set (SIZE_MAX:
  // an index of its own).
  // Throws kInvalidArgument when `view`'s vocabulary differs from the attached indexes'.
  void CheckVocabulary(const format::IndexView& view) const;
  // The attached indexes' vocabulary size; 2^32 (any id) when none is attached.
  uint64_t VocabularyLimit() const;
  [[noreturn]] void ThrowOutOfVocabulary(const char* function, const std::string& what,
                                         uint32_t id) const;
  // Throws kInvalidArgument naming the first id at or above VocabularyLimit().
  void CheckIds(std::span<const uint32_t> ids, const char* function) const;
  void AttachCursor(StaticCursor cursor, std::shared_ptr<const StaticIndex> index,
                    size_t group = SIZE_MAX);
  void ProposeInto(uint32_t start_token, size_t max_nodes, DraftTree* tree);
  // What the last proposal drafts in the options' shape: tree_, or its
  // chain (shaped_) of at most max_nodes nodes.
  const DraftTree& Shaped(size_t max_nodes);
  void PeekSources(uint32_t start_token, internal::StepContext* step);
  void PrefetchPeekedChildren(const internal::StaticSource& s) const;
  // SessionOptions::cost_curve: the measured rate a calibrated tree's size
  // is chosen against (tokens per t(1) over the session's steps).
  double MeasuredRate() const;
  // Statistics and calibration of the pending proposal; returns how many of
  // its nodes `tokens` accepted (the longest matching root path).
  size_t RecordAcceptance(std::span<const uint32_t> tokens);

  SessionOptions options_;
  DynamicSam dynamic_;
  // The static sources (an attached index, or a shard of a shard set): each
  // with its cursor, StaticIndex (a Bare() one for a bare view), shard set
  // and last peek.
  std::vector<internal::StaticSource> sources_;
  // Moves cursor c over a prompt. The match
  // after the prompt is the longest suffix of the text that occurs in the
  // index. When it is shorter than kPrefillMatchWindow tokens, it is a
  // suffix of the prompt's last kPrefillMatchWindow tokens, and matching
  // those alone, from the root, finds the same state and length: a long
  // prompt reads that many tokens' transitions instead of all of them (a
  // 128K-token prompt's prefill was mostly these cache misses, and evicted
  // the caches the first steps then read). A match as long as the window may
  // be longer in the whole text: then every token is matched, as before.
  static void PrefillCursor(StaticCursor& c, std::span<const uint32_t> tokens);
  // The drafting policy (options_.policy; runtime/src/policy.h).
  std::unique_ptr<internal::DraftPolicy> policy_;
  DraftTree tree_;
  ChainShaper chain_shaper_;  // SessionOptions::shape kChain: tree_'s chain, shaped_
  DraftTree shaped_;
  std::vector<uint8_t> on_path_;  // the accepted path of tree_, for calibration
  bool pending_ = false;  // a proposal awaits its Commit
  size_t num_peeked_ = 0;  // sources peeked by that proposal (the first n)
  uint64_t pending_ns_ = 0;
  uint32_t last_dyn_len_ = 0;
  uint32_t last_static_len_ = 0;
  // The response cache: cursor, the last proposal's match and continuation.
  std::shared_ptr<ResponseCache> cache_;
  ResponseCache::Cursor cache_cursor_;
  std::vector<uint32_t> cache_draft_;
  uint32_t last_cache_len_ = 0;
  size_t cache_draft_count_ = 0;
  // The cache tenant's compiled index (ResponseCache::CompileOptions), which
  // kCalibrated drafts from as one more static unit with its own cells, and
  // its cursor (fed like the others; re-matched when the index changes).
  ResponseCache::Compiled cache_compiled_;
  StaticCursor cache_static_;
  void SyncCompiledCache();
  uint64_t output_begin_ = 0;  // dynamic_.total_extended() after the last Prefill
  double rate_tokens_ = 0.0, rate_cost_ = 0.0;  // MeasuredRate(); cleared with the statistics
  SessionStatistics stats_;
};

}  // namespace sam::runtime

#endif  // SAM_RUNTIME_SESSION_H_
