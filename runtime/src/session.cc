#include "sam/runtime/session.h"

#include <algorithm>
#include <array>
#include <bit>
#include <chrono>
#include <functional>
#include <limits>
#include <string>

#include "phase_marks.h"
#include "sam/error.h"
#include "policy.h"
#include "static_source.h"

namespace sam::runtime {

namespace {

uint64_t NowNs() {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                   std::chrono::steady_clock::now().time_since_epoch())
                                   .count());
}

}  // namespace

namespace {

// SessionOptions::max_dynamic_bytes, 0 meaning the default; checked before
// anything is reserved.
size_t DynamicBytes(size_t bytes) {
  if (bytes == 0) return SessionOptions{}.max_dynamic_bytes;
  const size_t least = DynamicSam::BytesForCapacity(kMinDynamicWindowTokens);
  if (bytes < least)
    throw Error(ErrorCode::kInvalidArgument,
                "SessionOptions: max_dynamic_bytes " + std::to_string(bytes) +
                    " holds no useful window: give 0 (the default, " +
                    std::to_string(SessionOptions{}.max_dynamic_bytes) + ") or at least " +
                    std::to_string(least) + " (a window of " +
                    std::to_string(kMinDynamicWindowTokens) + " tokens)");
  return bytes;
}

}  // namespace

Session::Session(const SessionOptions& options)
    : options_(options),
      dynamic_(DynamicSam::CapacityForBytes(DynamicBytes(options.max_dynamic_bytes))) {
  ValidateSessionOptions(options_);
  tree_.Reset(0, DraftSource::kNone);
  policy_ = internal::MakePolicy(options_);
}

Session::~Session() = default;

void Session::AttachCursor(StaticCursor cursor, std::shared_ptr<const StaticIndex> index,
                           size_t group) {
  CheckVocabulary(*cursor.view());
  if (cache_) cache_->RequireVocabulary(cursor.view()->vocab_size());
  if (cache_) cache_cursor_.set_vocab_limit(cursor.view()->vocab_size());  // ids the model knows
  for (size_t p = 1; p <= dynamic_.size(); ++p) cursor.Advance(dynamic_.Token(p));
  internal::StaticSource source;
  source.group = group == SIZE_MAX ? sources_.size() : group;
  source.cursor = cursor;
  source.index = std::move(index);
  sources_.push_back(std::move(source));
}

size_t Session::num_indexes() const { return sources_.size(); }

const StaticCursor& Session::cursor(size_t i) const { return sources_[i].cursor; }

void Session::CheckVocabulary(const format::IndexView& view) const {
  if (!sources_.empty() && sources_[0].cursor.view()->vocab_size() != view.vocab_size())
    throw Error(ErrorCode::kInvalidArgument,
                "Session::AttachIndex: an index of vocabulary size " +
                    std::to_string(view.vocab_size()) + " beside one of " +
                    std::to_string(sources_[0].cursor.view()->vocab_size()) +
                    " (one session drafts for one vocabulary)");
}

void Session::AttachShardSet(std::span<const std::shared_ptr<const StaticIndex>> shards) {
  if (shards.empty())
    throw Error(ErrorCode::kInvalidArgument, "Session::AttachShardSet: no shard");
  for (const auto& shard : shards) {
    if (shard == nullptr)
      throw Error(ErrorCode::kInvalidArgument, "Session::AttachShardSet: null StaticIndex");
    CheckVocabulary(shard->view());  // before anything is attached
  }
  const size_t group = sources_.size();
  for (const auto& shard : shards) AttachCursor(StaticCursor(shard.get()), shard, group);
}

void Session::AttachIndex(const format::IndexView* view) {
  if (view == nullptr)
    throw Error(ErrorCode::kInvalidArgument, "Session::AttachIndex: null index view");
  std::shared_ptr<const StaticIndex> bare = StaticIndex::Bare(view);
  AttachCursor(StaticCursor(bare.get()), bare);
}

void Session::AttachIndex(std::shared_ptr<const format::IndexView> view) {
  if (view == nullptr)
    throw Error(ErrorCode::kInvalidArgument, "Session::AttachIndex: null index view");
  std::shared_ptr<const StaticIndex> bare = StaticIndex::Bare(std::move(view));
  AttachCursor(StaticCursor(bare.get()), bare);
}

void Session::AttachIndex(std::shared_ptr<const StaticIndex> index) {
  if (index == nullptr)
    throw Error(ErrorCode::kInvalidArgument, "Session::AttachIndex: null StaticIndex");
  AttachCursor(StaticCursor(index.get()), index);
}

void Session::SetFallback(Drafter* fallback) { options_.fallback = fallback; }

void Session::AttachCache(std::shared_ptr<ResponseCache> cache, std::string_view tenant) {
  // Before any change: a cache holding ids the indexes do not know is refused.
  if (cache != nullptr && !sources_.empty())
    cache->RequireVocabulary(sources_[0].cursor.view()->vocab_size());
  if (cache_compiled_.index) policy_->ForgetViews();  // its view may be freed (above)
  cache_compiled_ = ResponseCache::Compiled{};
  cache_static_ = StaticCursor();
  if (cache == nullptr) {
    cache_.reset();
    cache_cursor_ = ResponseCache::Cursor();
    return;
  }
  ResponseCache::Cursor cursor = cache->OpenCursor(tenant);
  // Bring it up to date with the window's last tokens (all a cursor keeps).
  const size_t n = dynamic_.size();
  const size_t from = n > ResponseCache::kRematchTokens ? n - ResponseCache::kRematchTokens : 0;
  std::vector<uint32_t> recent;
  for (size_t p = from + 1; p <= n; ++p) recent.push_back(dynamic_.Token(p));
  cursor.Advance(recent);
  if (!sources_.empty()) cursor.set_vocab_limit(sources_[0].cursor.view()->vocab_size());
  cache_draft_.resize(options_.draft_size);
  cache_ = std::move(cache);
  cache_cursor_ = std::move(cursor);
}

void Session::SyncCompiledCache() {
  ResponseCache::Compiled now = cache_cursor_.compiled();
  if (now.index == cache_compiled_.index) return;
  // The old index may be freed now and the new one take its address: the
  // top-children cache (keyed by view address) forgets both.
  policy_->ForgetViews();
  cache_compiled_ = std::move(now);
  cache_static_ =
      cache_compiled_.index ? StaticCursor(cache_compiled_.index.get()) : StaticCursor();
  if (cache_compiled_.index == nullptr) return;
  // Matched over the window's last tokens, as the cache's own cursor is.
  const size_t n = dynamic_.size();
  const size_t from = n > ResponseCache::kRematchTokens ? n - ResponseCache::kRematchTokens : 0;
  for (size_t p = from + 1; p <= n; ++p) cache_static_.Advance(dynamic_.Token(p));
}

bool Session::CacheRequest() { return CacheRequest(options_.cache_prompts); }

bool Session::CacheRequest(bool include_prompt) {
  if (cache_ == nullptr) return false;
  const uint64_t begin = include_prompt ? 0 : output_begin_;
  const uint64_t first = std::max(begin, dynamic_.window_offset());
  std::vector<uint32_t> text;
  for (uint64_t t = first; t < dynamic_.total_extended(); ++t)
    text.push_back(dynamic_.Token(static_cast<size_t>(t - dynamic_.window_offset() + 1)));
  return cache_->Insert(cache_cursor_.tenant(), text);
}

void Session::Reset() {
  dynamic_.Reset();
  cache_cursor_.Reset();
  cache_static_.Reset();
  output_begin_ = 0;
  for (internal::StaticSource& s : sources_) s.cursor.Reset();
  if (options_.fallback) options_.fallback->Reset();
  pending_ = false;
  tree_.Reset(0, DraftSource::kNone);
}

void Session::ResetStatistics() {
  stats_ = SessionStatistics{};
  rate_tokens_ = rate_cost_ = 0.0;
}

void Session::ResetCalibration() { policy_->ClearLearned(); }

void Session::PrefillCursor(StaticCursor& c, std::span<const uint32_t> tokens) {
  if (tokens.size() > kPrefillMatchWindow) {
    const StaticMatch before = c.match();
    const uint32_t before_record = c.record();
    c.Reset();
    for (uint32_t t : tokens.last(kPrefillMatchWindow)) c.Advance(t);
    if (c.match().len < kPrefillMatchWindow) return;  // the whole text's match
    c.Set(before, before_record);  // it may be longer than the window: match every token
  }
  for (uint32_t t : tokens) c.Advance(t);
}

uint64_t Session::VocabularyLimit() const {
  // No index: no vocabulary is known, and the dynamic automaton takes any id.
  return sources_.empty() ? uint64_t{1} << 32 : sources_[0].cursor.view()->vocab_size();
}

void Session::ThrowOutOfVocabulary(const char* function, const std::string& what,
                                   uint32_t id) const {
  throw Error(ErrorCode::kInvalidArgument,
              std::string("Session::") + function + ": " + what + " " + std::to_string(id) +
                  " is outside the vocabulary of the attached indexes (" +
                  std::to_string(VocabularyLimit()) + " ids; ids of another tokenizer?)");
}

void Session::CheckIds(std::span<const uint32_t> ids, const char* function) const {
  const uint64_t limit = VocabularyLimit();
  for (size_t i = 0; i < ids.size(); ++i)
    if (ids[i] >= limit) ThrowOutOfVocabulary(function, "ids[" + std::to_string(i) + "] =", ids[i]);
}

void Session::Prefill(std::span<const uint32_t> prompt) {
  CheckIds(prompt, "Prefill");
  const uint64_t t0 = options_.collect_timing ? NowNs() : 0;
  dynamic_.Extend(prompt);
  for (internal::StaticSource& s : sources_) PrefillCursor(s.cursor, prompt);
  if (options_.fallback) options_.fallback->Prefill(prompt);
  if (cache_) cache_cursor_.Advance(prompt);
  if (cache_compiled_.index) PrefillCursor(cache_static_, prompt);
  output_begin_ = dynamic_.total_extended();
  pending_ = false;
  stats_.prefill_tokens += prompt.size();
  if (options_.collect_timing) stats_.prefill_ns += NowNs() - t0;
}

const DraftTree& Session::Propose(uint32_t start_token) {
  return Propose(start_token, std::numeric_limits<size_t>::max());
}

const DraftTree& Session::Propose(uint32_t start_token, size_t max_nodes) {
  if (start_token >= VocabularyLimit()) ThrowOutOfVocabulary("Propose", "start token", start_token);
  max_nodes = std::max<size_t>(max_nodes, 1);
  // max_nodes bounds what is verified: a chain of max_nodes is cut from the
  // policy's whole tree.
  const bool chain = options_.shape == DraftShape::kChain;
  ProposeInto(start_token, chain ? std::numeric_limits<size_t>::max() : max_nodes, &tree_);
  return Shaped(max_nodes);
}

bool Session::Propose(uint32_t start_token, size_t max_nodes, DraftTree* out) {
  *out = Propose(start_token, max_nodes);
  return out->size() > 1;
}

const DraftTree& Session::Shaped(size_t max_nodes) {
  const SessionOptions& sel = options_;
  if (sel.shape == DraftShape::kTree) return tree_;
  ChainOptions chain;
  chain.max_tokens = std::min(sel.draft_size, max_nodes) - 1;
  chain.min_path_probability = sel.tuning.chain_min_path_probability;
  if (!sel.cost_curve.empty()) {
    chain.cost_curve = &sel.cost_curve;
    chain.rate = MeasuredRate();
  }
  chain_shaper_.Shape(tree_, chain, &shaped_);
  return shaped_;
}

// The calibrated policy reads the matched state's count, then its children
// (the text after it, a hub table or a child record): those first cache
// misses start at the peek, together, and overlap the dynamic automaton's
// lookup rather than following each other. A rare state also backs off to its
// suffix link (the policy prefetches the link's state once the link is in).
void Session::PrefetchPeekedChildren(const internal::StaticSource& s) const {
  const uint64_t v = s.peeked.state;
  const format::IndexView& view = s.view();
  if (s.peeked_record != StaticIndex::kNoRecord) {
    // Its record, known from the peek: its count, children and suffix
    // link's record.
    s.index->PrefetchRecordAt(s.peeked_record);
    return;
  }
  view.PrefetchCount(v);
  view.PrefetchToken(v + 1);
  if (options_.tuning.backoff_count > 0) view.PrefetchLink(v);
  const StaticIndex& index = *s.index;
  index.PrefetchHubBit(v);
  index.PrefetchRecord(v);
  if (index.has_records() && !view.IsClone(v)) index.PrefetchPositionLinkRecord(v);
}

void Session::ProposeInto(uint32_t start_token, size_t max_nodes, DraftTree* tree) {
  const uint64_t t0 = options_.collect_timing ? NowNs() : 0;
  tree->Reset(start_token, DraftSource::kNone);
  policy_->Forget();
  internal::StepContext step;
  step.start_token = start_token;
  step.max_nodes = max_nodes;
  step.fallback = options_.fallback;
  SAM_PHASE_START();
  // The dynamic automaton's lookup below probes its hash table first: that
  // line starts loading now, overlapping the static peek.
  dynamic_.PrefetchLookup(start_token);
  PeekSources(start_token, &step);
  SAM_PHASE_END(kPeek);
  step.dyn = dynamic_.Lookup(start_token);
  step.dynamic = &dynamic_;
  if (step.dyn.len > 0) dynamic_.PrefetchMatch(step.dyn);
  SAM_PHASE_END(kDynamicLookup);
  num_peeked_ = sources_.size();
  last_dyn_len_ = step.dyn.len;
  last_static_len_ = step.static_len;
  // The response cache's match and continuation (at most draft_size - 1
  // tokens), for the policies that use it.
  last_cache_len_ = 0;
  cache_draft_count_ = 0;
  if (cache_ && policy_->uses_cache())
    last_cache_len_ = cache_cursor_.Peek(start_token, cache_draft_.size() - 1,
                                         options_.tuning.dynamic_link_fallback,
                                         cache_draft_.data(), &cache_draft_count_);
  step.cache_len = last_cache_len_;
  step.cache_draft = std::span<const uint32_t>(cache_draft_.data(), cache_draft_count_);
  if (!options_.cost_curve.empty()) step.measured_rate = MeasuredRate();
  // The response cache's compiled index: one more source (the last) for
  // this proposal only.
  if (cache_ && policy_->uses_compiled_cache() && cache_->compile_options().enabled)
    SyncCompiledCache();  // else none
  step.cache_unit = policy_->uses_compiled_cache() && cache_compiled_.index != nullptr;
  if (step.cache_unit) {
    internal::StaticSource unit;
    unit.cursor = cache_static_;
    unit.index = cache_compiled_.index;
    unit.group = sources_.size();
    unit.peeked = cache_static_.Peek(start_token);
    sources_.push_back(std::move(unit));
  }
  struct RemoveCacheUnit {
    std::vector<internal::StaticSource>* sources;
    bool on;
    ~RemoveCacheUnit() {
      if (on) sources->pop_back();
    }
  } remove_cache_unit{&sources_, step.cache_unit};
  step.sources = sources_;
  policy_->Propose(step, tree);
  pending_ = true;
  pending_ns_ = options_.collect_timing ? NowNs() - t0 : 0;
}

// Peeks every static source with the start token; the longest match.
void Session::PeekSources(uint32_t start_token, internal::StepContext* step) {
  for (size_t i = 0; i < sources_.size(); ++i) {
    internal::StaticSource& s = sources_[i];
    s.peeked = s.cursor.Peek(start_token, &s.peeked_record);
    if (s.peeked.len > step->best_len) {
      step->best_len = s.peeked.len;
      step->best = i;
    }
    if (policy_->prefetches_children() && s.peeked.len > 0) PrefetchPeekedChildren(s);
  }
  step->static_len = static_cast<uint32_t>(std::min<uint64_t>(step->best_len, UINT32_MAX));
}

double Session::MeasuredRate() const {
  // Tokens per t(1) over the steps so far, starting from plain decoding's 1
  // (worth kPriorSteps steps), so that the first steps draft like a session
  // that has not yet seen speculation pay.
  constexpr double kPriorSteps = 4.0;
  return (rate_tokens_ + kPriorSteps) / (rate_cost_ + kPriorSteps);
}

size_t Session::RecordAcceptance(std::span<const uint32_t> tokens) {
  const DraftTree& t = tree_;
  // The accepted path; its nodes are marked only for calibration.
  const bool calibrating = policy_->Observes(t.size());
  if (calibrating) {
    on_path_.assign(t.size(), 0);
    on_path_[0] = 1;
  }
  int node = 0;
  size_t accepted = 0;
  for (size_t k = 1; k < tokens.size(); ++k) {
    const int child = t.Child(node, tokens[k]);
    if (child < 0) break;
    node = child;
    if (calibrating) on_path_[node] = 1;
    ++accepted;
  }
  // The statistics count what was verified: the tree, or its chain.
  const bool chain = options_.shape == DraftShape::kChain;
  const DraftTree& verified = chain ? shaped_ : t;
  size_t verified_accepted = accepted;
  if (chain) {  // the chain's nodes that `tokens` match
    verified_accepted = 0;
    while (verified_accepted + 1 < std::min(shaped_.size(), tokens.size()) &&
           shaped_.tokens[verified_accepted + 1] == tokens[verified_accepted + 1])
      ++verified_accepted;
  }
  SourceStatistics& s = stats_.source(verified.source);
  s.Record(verified, verified_accepted);
  if (!options_.cost_curve.empty()) {
    rate_tokens_ += static_cast<double>(verified_accepted + 1);
    rate_cost_ += options_.cost_curve.Relative(verified.size());
  }
  s.propose_ns += pending_ns_;
  ++stats_.steps;

  // Calibration: every node whose parent was accepted was a trial. A chain
  // verified only its own nodes: the other children of its last accepted
  // node (`node`) were not tried (one of them may be the model's next token).
  if (calibrating) {
    internal::ObservedPath path{on_path_};
    if (chain) {
      const std::vector<int32_t>& chain_nodes = chain_shaper_.path();
      const size_t next_depth = static_cast<size_t>(t.depths[node]) + 1;
      path.untried_parent = node;
      path.tried_child = next_depth < chain_nodes.size() ? chain_nodes[next_depth] : -1;
    }
    policy_->Observe(t, path);
  }
  return accepted;
}

void Session::Commit(std::span<const uint32_t> tokens) {
  CheckIds(tokens, "Commit");
  const uint64_t t0 = options_.collect_timing ? NowNs() : 0;
  // The proposal peeked every cursor with its start token: reuse that match.
  const bool peeked = pending_ && !tokens.empty() && tokens[0] == tree_.tokens[0];
  SAM_PHASE_START();
  const size_t accepted = peeked ? RecordAcceptance(tokens) : 0;
  SAM_PHASE_END(kCommitAccept);
  pending_ = false;
  for (size_t i = 0; i < sources_.size(); ++i) {
    internal::StaticSource& s = sources_[i];
    size_t k = 0;
    if (peeked && i < num_peeked_) {  // not if attached since
      s.cursor.Set(s.peeked, s.peeked_record);
      // Further along what the proposal already knows (a linear static
      // draft's text, a calibrated tree's states).
      k = policy_->FollowKnown(i, tokens, accepted, tree_, s);
    }
    for (; k < tokens.size(); ++k) s.cursor.Advance(tokens[k]);
    // The next proposal starts with a Peek from here: its first cache misses
    // overlap the dynamic automaton's update below. (A second stage at the
    // end of Commit, the suffix link's record itself, cost the paper rule
    // 10-40%: its read of the first stage's line stalls a short Commit.)
    s.cursor.Prefetch();
  }
  SAM_PHASE_END(kCommitCursors);
  dynamic_.Extend(tokens);
  dynamic_.Prefetch();  // the next Lookup's (and Extend's) first read
  if (options_.fallback) options_.fallback->Commit(tokens);
  if (cache_) cache_cursor_.Advance(tokens);
  if (cache_compiled_.index)
    for (uint32_t t : tokens) cache_static_.Advance(t);
  stats_.committed_tokens += tokens.size();
  if (options_.collect_timing) stats_.commit_ns += NowNs() - t0;
  SAM_PHASE_END(kCommitUpdate);
}

void Session::ObserveTopK(std::span<const uint32_t> tokens, std::span<const uint32_t> topk,
                          size_t k) {
  if (options_.fallback) options_.fallback->ObserveTopK(tokens, topk, k);
}

}  // namespace sam::runtime
