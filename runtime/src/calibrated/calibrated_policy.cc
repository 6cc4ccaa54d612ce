#include "calibrated/calibrated_policy.h"

#include <algorithm>
#include <limits>

#include "index_children.h"
#include "phase_marks.h"
#include "sam/runtime/budget.h"

namespace sam::runtime::calibrated {

void CalibratedPolicy::Propose(const internal::StepContext& step, DraftTree* tree) {
  budget_ = std::min(step.max_nodes, sel_.draft_size);
  if (budget_ < 2) return;
  step_ = &step;
  src_ = step.sources;
  trie_.Reset(step.start_token, src_.size());
  trie_.min_key = sel_.tuning.min_path_probability;
  SetUpUnits();
  SetRootStates();
  OfferEagerSources();
  PrefetchRootBackoff();
  lookups_left_ = sel_.tuning.max_static_lookups != 0 ? sel_.tuning.max_static_lookups : SIZE_MAX;
  // Child records followed from record to record (one index): a node's
  // record, its own (known from its parent's) or looked up by its state
  // (kNoRecord: none, or records unusable at this width).
  records_ = src_.size() == 1 && src_[0].has_records() &&
                     sel_.tuning.calibrated_width <= src_[0].index->options().top_k
                 ? src_[0].index.get()
                 : nullptr;
  SAM_PHASE_END(kCalSetup);
  RankBestFirst();
  Output(tree);
}

// The static sources as units: a shard set is one index over the union of
// its documents, matching as long as its longest shard; only the shards that
// match that long (tied) have the match's string, so only they hold the
// root's state (and their counts add up to its count). The response cache's
// compiled index, when there is one, is the last unit.
void CalibratedPolicy::SetUpUnits() {
  unit_begin_.clear();
  unit_len_.clear();
  for (size_t i = 0; i < src_.size(); ++i) {
    if (i == 0 || src_[i].group != src_[i - 1].group) {
      unit_begin_.push_back(i);
      unit_len_.push_back(0);
    }
    unit_len_.back() = std::max(unit_len_.back(), src_[i].peeked.len);
  }
  unit_begin_.push_back(src_.size());
  num_units_ = unit_begin_.size() - 1;  // loops read it once, not the vector
  cache_unit_index_ = step_->cache_unit ? num_units_ - 1 : SIZE_MAX;
}

void CalibratedPolicy::SetRootStates() {
  for (size_t u = 0; u < num_units_; ++u) {
    if (unit_len_[u] == 0) continue;
    for (size_t i = unit_begin_[u]; i < unit_begin_[u + 1]; ++i) {
      if (src_[i].peeked.len != unit_len_[u]) continue;
      trie_.State(0, i) = src_[i].peeked.state;
      trie_.StateLen(0, i) = static_cast<uint32_t>(src_[i].peeked.len);
      const uint32_t record = src_[i].peeked_record;
      if (record != StaticIndex::kNoRecord) {  // its count is in its record (prefetched)
        trie_.StateCount(0, i) = src_[i].index->Head(record).count;
        trie_.states[i].record = record;  // node 0's
      } else {
        trie_.StateCount(0, i) = src_[i].view().Count(src_[i].peeked.state);
      }
    }
  }
}

void CalibratedPolicy::OfferEagerSources() {
  const internal::StepContext& step = *step_;
  // The dynamic continuation (with the suffix-link fallback): a chain, offered
  // one node at a time as its nodes rank (Rank), which is the same as
  // offering it whole now but creates only the nodes that can rank.
  dyn_chain_ = 0;
  if (step.dyn.len > 0) {
    chain_.resize(budget_ - 1);
    dyn_chain_ = step.dynamic->Continuation(step.dyn, budget_ - 1, sel_.tuning.dynamic_link_fallback,
                                            chain_.data());
  }
  dyn_tip_ = 0;
  // The fallback drafter's tree, on the same scale (cells: depth and sibling
  // rank; or depth and the drafter's own probability q(node | parent) when it
  // gives one, as a draft model does).
  fallback_source_ = DraftSource::kOther;
  if (step.fallback != nullptr && step.fallback->Propose(step.start_token, budget_, &fallback_tree_)) {
    const DraftTree& t = fallback_tree_;
    if (t.source != DraftSource::kNone) fallback_source_ = t.source;
    const bool has_q = t.draft_probs.size() == t.size();
    tree_index_.assign(t.size(), 0);
    for (size_t k = 1; k < t.size(); ++k) {
      int cell;
      if (has_q) {
        cell = calibrator_.ModelCell(t.depths[k], t.draft_probs[k]);
      } else {
        size_t rank = 0;
        for (size_t j = 1; j < k; ++j) rank += t.parents[j] == t.parents[k];
        cell = calibrator_.FallbackCell(t.depths[k], rank);
      }
      tree_index_[k] = trie_.OfferChild(calibrator_, tree_index_[t.parents[k]], t.tokens[k], 2,
                                        cell, kFromFallback);
    }
  }
  // The response cache's continuation: a chain with its own cells (slot 3).
  if (step.cache_len > 0) {
    int32_t node = 0;
    for (size_t j = 0; j < std::min(step.cache_draft.size(), budget_ - 1); ++j) {
      node = trie_.OfferChild(calibrator_, node, step.cache_draft[j], 3,
                              calibrator_.CacheCell(step.cache_len, j + 1), kFromCache);
    }
  }
}

// The root's backoff (a state that occurs fewer than backoff_count times)
// reads its suffix link's length, count and children: their loads start now
// that the link, prefetched at the peek, has had the dynamic lookup's time to
// arrive, so that they overlap the root's own expansion.
void CalibratedPolicy::PrefetchRootBackoff() const {
  for (size_t i = 0; i < src_.size(); ++i) {
    const CandidateTrie::IndexState& r = trie_.states[i];  // node 0's, index i
    if (r.state == format::kNoState || r.count == 0 || r.count >= sel_.tuning.backoff_count) continue;
    const format::IndexView& view = src_[i].view();
    if (const StaticIndex* shared = src_[i].index.get(); shared->has_records()) {
      // With child records the link's record holds all of it: found through
      // the root's record (known from the peek) or a position's link record.
      if (r.record != StaticIndex::kNoRecord) {
        shared->PrefetchRecordAt(shared->Head(r.record).link_record);
        continue;
      }
      if (!view.IsClone(r.state)) {
        shared->PrefetchRecordAt(shared->PositionLinkRecord(r.state));
        continue;
      }
    }
    const uint64_t w = view.Link(r.state);
    if (w == format::kRoot) continue;
    view.PrefetchLink(w);  // its link, and a clone's length
    view.PrefetchCount(w);
    if (w < view.num_tokens()) view.PrefetchToken(w + 1);
    src_[i].index->PrefetchHubBit(w);
    src_[i].index->PrefetchRecord(w);
  }
}

// Offers a child of unit u, which occurs `count` times under a state (or a
// shard set's states) of `total` occurrences and match length `len`, with the
// cells of u's family, in its slot, for its source. A child occurs at most as
// often as its parent; clamping keeps the ratios of a corrupt index in [0, 1].
CalibratedPolicy::StaticOffers CalibratedPolicy::StaticOffersFor(uint64_t total, uint64_t len,
                                                                 bool backoff, size_t u) const {
  const size_t family = FamilyOf(u);
  return StaticOffers{total, calibrator_.StaticCellBase(total, len, backoff, family),
                      family == 0 ? 1 : 3, family == 0 ? kFromStatic : kFromCache};
}

int CalibratedPolicy::StaticCell(uint64_t count, const StaticOffers& o) {
  const double ratio =
      count < o.total ? static_cast<double>(count) / static_cast<double>(o.total) : 1.0;
  return o.base + Calibrator::RatioOffset(ratio);
}

void CalibratedPolicy::OfferStatic(int32_t child, uint64_t count, const StaticOffers& o) {
  trie_.Offer(calibrator_, child, o.slot, StaticCell(count, o), o.source);
}

// The child of `node` with `token` (found among its children from `first`
// on, CandidateTrie::FindAmong, or added), offered as above;
// OfferStaticChild looks among all of them.
int32_t CalibratedPolicy::OfferStaticAmong(int32_t node, int32_t first, uint32_t token,
                                           uint64_t count, const StaticOffers& o) {
  return trie_.OfferChildAmong(calibrator_, node, first, token, o.slot, StaticCell(count, o),
                               o.source);
}

int32_t CalibratedPolicy::OfferStaticChild(int32_t node, uint32_t token, uint64_t count,
                                           const StaticOffers& o) {
  return OfferStaticAmong(node, trie_.nodes[node].first_child, token, count, o);
}

// ---- The lazy static source.

// The max_width heaviest children of state v of source i, which occurs
// `count` times (count descending, then token ascending), as
// StaticTreeBuilder expands them.
std::span<const StaticIndex::Child> CalibratedPolicy::TopChildren(size_t i, uint64_t v,
                                                                  uint64_t count) {
  const format::IndexView& view = src_[i].view();
  const size_t width = sel_.tuning.calibrated_width;
  if (width == 0) return {};
  // A state that occurs once continues as its one occurrence does: one
  // child, the next text position (the implicit transition), which occurs
  // once too; no edge lookup, one read of the text.
  if (!view.IsClone(v) && count == 1) {
    if (v >= view.num_tokens()) return {};
    const uint32_t token = view.Token(v + 1);
    if (token >= view.separator()) return {};
    children_.assign(1, StaticIndex::Child{token, v + 1, 1});
    return children_;
  }
  const StaticIndex* hubs = src_[i].index.get();
  std::span<const StaticIndex::Child> top;
  if (width <= hubs->options().top_k) {
    // The state's child record (Options::record_min_count), else a hub's
    // table (a hub's record holds its table's children). The record
    // first: its offset was prefetched when the state was offered, the
    // hub bit was not.
    top = hubs->RecordChildren(v, &children_);
    if (!top.empty()) return top.first(std::min(width, top.size()));
    if (hubs->TopChildren(v, &top)) return top.first(std::min(width, top.size()));
  }
  const auto [lo, hi] = view.EdgeRange(v);
  if (width <= TopChildrenCache::kChildren && hi - lo >= TopChildrenCache::kMinDegree) {
    const std::span<const StaticIndex::Child> cached = top_cache_.Get(view, v);
    return cached.first(std::min(width, cached.size()));
  }
  children_.resize(width);
  const uint32_t n =
      internal::TopChildrenOf(view, v, lo, hi, static_cast<uint32_t>(width), children_.data());
  return std::span<const StaticIndex::Child>(children_.data(), n);
}

// A static child (state `target` of source i, `count` occurrences) was just
// offered: the first of its own lookup's dependent cache misses (or, for a
// state that occurs once, the text it continues with) starts now, overlapping
// the rest of the step. Past max_static_lookups a branching state offers no
// children and no backoff children: nothing is prefetched for lookups that
// will not be made.
void CalibratedPolicy::PrefetchChild(size_t i, uint64_t target, uint64_t count,
                                     uint32_t record) const {
  const format::IndexView& view = src_[i].view();
  if (count <= 1) view.PrefetchToken(target + 1);
  if (LookupsSpent()) return;  // neither its lookup nor its backoff will be made
  const StaticIndex* shared = src_[i].index.get();
  if (record != StaticIndex::kNoRecord) {
    // Its record, known from its parent's: its children, and the head
    // that leads to its suffix link's record if it backs off.
    shared->PrefetchRecordAt(record);
    return;
  }
  if (count > 1) {
    view.PrefetchEdgeRange(target);
    if (shared->has_records()) shared->PrefetchRecord(target);
  }
  // A rare string backs off to its suffix link's state if it ranks:
  // its link (and a clone's length) start loading too, or with records a
  // position's suffix link's record.
  if (count < sel_.tuning.backoff_count) {
    if (shared->has_records() && !view.IsClone(target))
      shared->PrefetchPositionLinkRecord(target);
    else
      view.PrefetchLink(target);
  }
}

uint32_t CalibratedPolicy::RecordOf(const CandidateTrie::IndexState& s) const {
  return s.record != StaticIndex::kNoRecord ? s.record : records_->RecordOf(s.state);
}

// The record of the suffix link of a node's state, kNoRecord when it has
// none or is not known without reading the link (a rare clone's).
uint32_t CalibratedPolicy::LinkRecordOf(const CandidateTrie::IndexState& s) const {
  if (!src_[0].view().IsClone(s.state)) return records_->PositionLinkRecord(s.state);
  const uint32_t r = RecordOf(s);
  return r != StaticIndex::kNoRecord ? records_->Head(r).link_record : StaticIndex::kNoRecord;
}

// ---- Expansions.

// Offers the static children of `node` from every unit with a state there
// (a shard set's as one index's: counts summed over its shards).
void CalibratedPolicy::Expand(int32_t node) {
  trie_.nodes[node].expanded = true;
  if (trie_.nodes[node].depth >= kMaxStaticDepth) return;
  for (size_t u = 0; u < num_units_; ++u) {
    const size_t begin = unit_begin_[u];
    if (unit_begin_[u + 1] - begin == 1) {  // a unit of one source: its state, if any
      const CandidateTrie::IndexState& s = trie_.states[node * trie_.num_indexes + begin];
      if (s.state != format::kNoState && s.count != 0) ExpandSource(node, begin, u);
    } else {
      ExpandUnit(node, u);
    }
  }
}

// A shard set's unit: the shards with a state at `node` (usually one: the
// one that has the node's string), as one index.
void CalibratedPolicy::ExpandUnit(int32_t node, size_t u) {
  uint64_t total = 0;
  size_t with_state = 0, only = 0;
  for (size_t i = unit_begin_[u]; i < unit_begin_[u + 1]; ++i) {
    const uint64_t count = trie_.StateCount(node, i);
    if (trie_.State(node, i) == format::kNoState || count == 0) continue;
    total += count;
    ++with_state;
    only = i;
  }
  if (with_state == 0) return;
  if (with_state == 1) return ExpandSource(node, only, u);
  // Past max_static_lookups, a branching state offers no children: the
  // bound on a step's cache misses (states that occur once are free).
  if (total > 1) {
    if (lookups_left_ == 0) return;
    --lookups_left_;
  }
  // The match length of the node in this unit (its shards with a state
  // all have it; below a backoff child, a shorter one).
  const uint64_t match_len = trie_.StateLen(node, only);
  const StaticOffers offers = StaticOffersFor(total, match_len, false, u);
  shards_.shard_states.clear();
  for (size_t i = unit_begin_[u]; i < unit_begin_[u + 1]; ++i)
    if (trie_.State(node, i) != format::kNoState && trie_.StateCount(node, i) > 0)
      shards_.shard_states.push_back(
          {i, trie_.State(node, i), trie_.StateCount(node, i), 0, 0, false});
  shards_.Merge(src_, sel_.tuning.calibrated_width);
  const size_t n = shards_.shard_states.size();
  for (const ShardChildren::MergedChild& c : shards_.merged) {
    const int32_t child = OfferStaticChild(node, c.token, c.count, offers);
    for (size_t e = 0; e < n; ++e) {
      const auto [target, count] = shards_.targets[c.row * n + e];
      if (target == format::kNoState) continue;
      const size_t i = shards_.shard_states[e].cursor;
      trie_.states[child * trie_.num_indexes + i] =
          CandidateTrie::IndexState{target, count, static_cast<uint32_t>(match_len + 1)};
      PrefetchChild(i, target, count);
    }
  }
}

// The static children of `node` in source i of unit u, the unit's only
// source with a state there (an index of its own, or the one shard with the
// node's string). With child records (records_: one index), from its own
// record.
__attribute__((always_inline)) inline void CalibratedPolicy::ExpandSource(int32_t node, size_t i,
                                                                        size_t u) {
  const CandidateTrie::IndexState s = trie_.states[node * trie_.num_indexes + i];
  if (s.count > 1) {
    if (lookups_left_ == 0) return;
    --lookups_left_;
  }
  const format::IndexView& view = src_[i].view();
  const StaticOffers offers = StaticOffersFor(s.count, s.len, false, u);
  if (s.count == 1 && !view.IsClone(s.state)) {
    // TopChildren's first case, inline: the text after the one occurrence
    // (known from the parent's record when it came from one).
    if (s.state >= view.num_tokens()) return;
    const uint32_t token = s.record != StaticIndex::kNoRecord ? s.record : view.Token(s.state + 1);
    if (token >= view.separator()) return;
    const int32_t child = OfferStaticChild(node, token, 1, offers);
    trie_.states[child * trie_.num_indexes + i] =
        CandidateTrie::IndexState{s.state + 1, 1, s.len + 1u};
    PrefetchChild(i, s.state + 1, 1);
    // Its backoff, if it ranks, starts from its suffix link's record.
    if (records_ != nullptr && s.count < sel_.tuning.backoff_count && !LookupsSpent())
      records_->PrefetchRecordAt(records_->PositionLinkRecord(s.state));
    return;
  }
  if (const uint32_t r = records_ != nullptr ? RecordOf(s) : StaticIndex::kNoRecord;
      r != StaticIndex::kNoRecord) {
    ExpandFromRecord(node, s, r, offers);
    return;
  }
  const int32_t first = trie_.nodes[node].first_child;
  for (const StaticIndex::Child& c : TopChildren(i, s.state, s.count)) {
    const int32_t child = OfferStaticAmong(node, first, c.token, c.count, offers);
    trie_.states[child * trie_.num_indexes + i] =
        CandidateTrie::IndexState{c.target, c.count, s.len + 1u};
    PrefetchChild(i, c.target, c.count);
  }
}

// Its record's children (TopChildren's record case; one index), each with its
// own record; a rare state's suffix link's record starts loading for its
// backoff.
void CalibratedPolicy::ExpandFromRecord(int32_t node, const CandidateTrie::IndexState& s,
                                        uint32_t r, const StaticOffers& offers) {
  const StaticIndex::RecordHead head = records_->Head(r);
  if (s.count < sel_.tuning.backoff_count && !LookupsSpent()) records_->PrefetchRecordAt(head.link_record);
  const StaticIndex::RecordEntry* e = records_->Entries(r);
  const uint32_t k = std::min<uint32_t>(head.size(), static_cast<uint32_t>(sel_.tuning.calibrated_width));
  // One state's children have distinct tokens: each is compared with the
  // node's earlier children only.
  const int32_t first = trie_.nodes[node].first_child;
  for (uint32_t j = 0; j < k; ++j) {
    if (!records_->EntryOk(e[j], head)) continue;  // (a damaged file's record)
    const int32_t child = OfferStaticAmong(node, first, e[j].token, e[j].count, offers);
    trie_.states[child] =
        CandidateTrie::IndexState{e[j].target, e[j].count, s.len + 1u, e[j].record};
    PrefetchChild(0, e[j].target, e[j].count, e[j].record_of_target());
  }
}

// Backoff by unit: a unit (an index, or a shard set as one index) backs off
// at `node` when the node's string occurs there fewer than backoff_count
// times (its shards' counts summed).
__attribute__((always_inline)) inline uint64_t CalibratedPolicy::UnitCount(int32_t node, size_t u,
                                                                         uint64_t* len) const {
  if (unit_begin_[u + 1] - unit_begin_[u] == 1) {  // a unit of one source
    const CandidateTrie::IndexState& s = trie_.states[node * trie_.num_indexes + unit_begin_[u]];
    if (s.state == format::kNoState) return 0;
    *len = s.len;
    return s.count;
  }
  uint64_t total = 0;
  for (size_t i = unit_begin_[u]; i < unit_begin_[u + 1]; ++i) {
    if (trie_.states[node * trie_.num_indexes + i].state == format::kNoState) continue;
    total += trie_.states[node * trie_.num_indexes + i].count;
    *len = trie_.states[node * trie_.num_indexes + i].len;
  }
  return total;
}

bool CalibratedPolicy::UnitHasState(int32_t node, size_t u) const {
  for (size_t i = unit_begin_[u]; i < unit_begin_[u + 1]; ++i)
    if (trie_.states[node * trie_.num_indexes + i].state != format::kNoState) return true;
  return false;
}

bool CalibratedPolicy::UnitBacksOff(int32_t node, size_t u) const {
  uint64_t len = 0;
  const uint64_t total = UnitCount(node, u, &len);
  return total > 0 && total < sel_.tuning.backoff_count;
}

// The longest suffix of `node`'s string that occurs in shard i (its state
// and length): the node's own state there, or, where the string does not
// occur, one transfer from its parent's, memoised. (For a backoff child,
// whose string is u*c rather than sc, the transfer from the parent gives the
// same where u*c does not occur: a suffix of sc longer than u*c shares s's
// occurrences, so it occurs only where sc, hence u*c, does.)
StaticMatch CalibratedPolicy::MatchIn(int32_t node, size_t i) {
  if (trie_.State(node, i) != format::kNoState)
    return StaticMatch{trie_.State(node, i), trie_.StateLen(node, i)};
  if (node == 0) return src_[i].peeked;
  trie_.GrowMatches();
  const size_t at = static_cast<size_t>(node) * trie_.num_indexes + i;
  if (trie_.match_known[at] == trie_.match_step) return trie_.matches[at];
  const StaticMatch from = MatchIn(trie_.nodes[node].parent, i);
  const StaticMatch r = Transfer(*src_[i].index, from, trie_.nodes[node].token);
  trie_.matches[at] = r;
  trie_.match_known[at] = trie_.match_step;
  return r;
}

// experimental::Tuning::backoff_count: the backoff children of `node` in unit u
// (Calibrator: their own cells): the heaviest children of the node's shorter
// context u* that the node's own heaviest children do not include. The
// node's string s occurs fewer than backoff_count times in the unit; u* is
// the longest proper suffix of s that occurs more often than s (in one index,
// the suffix link of s's state). Over a shard set it is the union's: in a
// shard that has s, that shard's suffix link; in one that does not, the
// longest suffix of s occurring there at all; the children of u* are summed
// over the shards where it occurs. A child's state is u*'s transition, a
// shorter match than the longest one (Commit does not move cursors there).
// Counts as a lookup.
void CalibratedPolicy::OfferBackoff(int32_t node, size_t u) {
  // A shorter context occurs more often than s (its end positions are a
  // strict superset): a branching state, so past the limit nothing is read.
  if (LookupsSpent()) return;
  if (records_ != nullptr) {
    // One index with child records: its suffix link's record, when known
    // without reading the link, holds u*'s length, count and children.
    const CandidateTrie::IndexState s = trie_.states[node];
    if (const uint32_t lr = LinkRecordOf(s); lr != StaticIndex::kNoRecord)
      return BackoffFromRecord(node, s, lr);
  }
  uint64_t slen = 0;
  UnitCount(node, u, &slen);
  const uint64_t lstar = ShorterContext(node, u);
  if (lstar == 0) return;  // the empty context
  uint64_t total = 0;
  for (const ShardChildren::ShardState& e : shards_.shard_states) total += e.count;
  if (total == 0) return;
  --lookups_left_;
  if (lstar >= slen) return;  // corrupt: a link must shorten the match
  const StaticOffers offers = StaticOffersFor(total, lstar, true, u);
  const size_t n = shards_.shard_states.size();
  if (n == 1) {  // u* in one source (one index, or one shard): its own top children
    const ShardChildren::ShardState e = shards_.shard_states[0];
    const int32_t first = trie_.nodes[node].first_child;  // the children it may share
    for (const StaticIndex::Child& c : TopChildren(e.cursor, e.state, e.count)) {
      const int32_t child = trie_.ChildAmong(node, first, c.token);
      if (UnitHasState(child, u)) continue;  // s's child too
      trie_.states[child * trie_.num_indexes + e.cursor] =
          CandidateTrie::IndexState{c.target, c.count, static_cast<uint32_t>(lstar + 1)};
      if (c.count > 1 && !LookupsSpent()) src_[e.cursor].view().PrefetchEdgeRange(c.target);
      OfferStatic(child, c.count, offers);
    }
    return;
  }
  // The children summed over the shards (in shards_.merged, heaviest first),
  // with their target and count in every shard state (shards_.targets,
  // row `row`).
  shards_.Merge(src_, sel_.tuning.calibrated_width);
  for (const ShardChildren::MergedChild& c : shards_.merged) {
    const int32_t child = trie_.Child(node, c.token);
    if (UnitHasState(child, u)) continue;  // s's child too
    for (size_t e = 0; e < n; ++e) {
      const auto [target, count] = shards_.targets[c.row * n + e];
      if (target == format::kNoState) continue;
      const size_t i = shards_.shard_states[e].cursor;
      trie_.states[child * trie_.num_indexes + i] =
          CandidateTrie::IndexState{target, count, static_cast<uint32_t>(lstar + 1)};
      if (count > 1 && !LookupsSpent()) src_[i].view().PrefetchEdgeRange(target);
    }
    OfferStatic(child, c.count, offers);
  }
}

// The length of u*, the shorter context of `node`'s string in unit u (see
// OfferBackoff), with its state in every source that has it in
// shards_.shard_states.
uint64_t CalibratedPolicy::ShorterContext(int32_t node, size_t u) {
  uint64_t lstar = 0;
  for (size_t i = unit_begin_[u]; i < unit_begin_[u + 1]; ++i) {
    const format::IndexView& view = src_[i].view();
    const uint64_t v = trie_.State(node, i);
    const uint64_t l = v != format::kNoState ? view.Len(view.Link(v)) : MatchIn(node, i).len;
    lstar = std::max(lstar, l);
  }
  shards_.shard_states.clear();
  if (lstar == 0) return 0;
  for (size_t i = unit_begin_[u]; i < unit_begin_[u + 1]; ++i) {
    const format::IndexView& view = src_[i].view();
    uint64_t w = format::kNoState;
    if (const uint64_t v = trie_.State(node, i); v != format::kNoState) {
      // s occurs here, so does u*: in the suffix link's state when that is
      // u*'s length (the shard that set it; one index), else in s's own
      // state (a longer suffix than the link's shares s's occurrences).
      w = view.Len(view.Link(v)) == lstar ? view.Link(v) : v;
    } else {
      const StaticMatch f = MatchIn(node, i);
      if (f.len == lstar) w = f.state;
    }
    if (w == format::kNoState || w == format::kRoot) continue;
    shards_.shard_states.push_back({i, w, view.Count(w), 0, 0, false});
  }
  return lstar;
}

// The backoff children of `node` (one index with child records) from its
// suffix link's record: its length, count and children in one place (a
// clone's: the root has no record).
void CalibratedPolicy::BackoffFromRecord(int32_t node, const CandidateTrie::IndexState& s,
                                         uint32_t lr) {
  const StaticIndex::RecordHead head = records_->Head(lr);
  const uint64_t lstar = head.len, total = head.count;
  if (lstar == 0 || total == 0) return;
  --lookups_left_;
  if (lstar >= s.len) return;  // corrupt: a link must shorten the match
  const StaticOffers offers = StaticOffersFor(total, lstar, true, 0);
  const StaticIndex::RecordEntry* e = records_->Entries(lr);
  const uint32_t k = std::min<uint32_t>(head.size(), static_cast<uint32_t>(sel_.tuning.calibrated_width));
  const int32_t first = trie_.nodes[node].first_child;  // the children it may share
  for (uint32_t j = 0; j < k; ++j) {
    if (!records_->EntryOk(e[j], head)) continue;  // (a damaged file's record)
    const int32_t child = trie_.ChildAmong(node, first, e[j].token);
    CandidateTrie::IndexState& cs = trie_.states[child];
    if (cs.state != format::kNoState) continue;  // s's child too
    cs = CandidateTrie::IndexState{e[j].target, e[j].count, static_cast<uint32_t>(lstar + 1),
                                   e[j].record};
    if (e[j].count > 1 && !LookupsSpent()) records_->PrefetchRecordAt(e[j].record);
    OfferStatic(child, e[j].count, offers);
  }
}

// Offers the backoff children of `node` (after its own static children).
void CalibratedPolicy::BackOff(int32_t node) {
  if (!trie_.nodes[node].expanded) Expand(node);
  trie_.nodes[node].backed_off = true;
  if (trie_.nodes[node].depth >= kMaxStaticDepth) return;
  for (size_t u = 0; u < num_units_; ++u)
    if (UnitBacksOff(node, u)) OfferBackoff(node, u);
}

// Whether the backoff children of `parent` may offer `child` (give it a
// state and a cell): it lacks a state in a unit where `parent` backs off.
bool CalibratedPolicy::BackoffReaches(int32_t parent, int32_t child) const {
  for (size_t u = 0; u < num_units_; ++u) {
    if (UnitBacksOff(parent, u) && !UnitHasState(child, u)) return true;
  }
  return false;
}

// ---- The best-first ranking.

// Upper bounds on the estimate of any static child of `node` and of any of
// its backoff children (0: none), in one pass over the units. Past
// max_static_lookups a unit whose state branches offers no children.
CalibratedPolicy::Bounds CalibratedPolicy::BoundsOf(int32_t node) const {
  Bounds b;
  if (trie_.nodes[node].depth >= kMaxStaticDepth) return b;
  const bool spent = LookupsSpent();
  if (src_.size() == 1) {
    // The loop below over one unit of one source, unrolled: it runs for every
    // ranked node, and the loop cost the usual deployment about 470
    // instructions a step (3%).
    const CandidateTrie::IndexState& s = trie_.states[node];
    if (s.state == format::kNoState || s.count == 0) return b;
    b.max_count = s.count;
    const double static_bound = calibrator_.StaticBound(s.count, s.len, 0);
    const double backoff_bound = calibrator_.BackoffBound(s.len, 0);
    const bool no_lookup = spent && s.count > 1;
    b.static_children = no_lookup ? 0.0 : static_bound;
    b.backoff_children = !spent && s.count < sel_.tuning.backoff_count ? backoff_bound : 0.0;
    return b;
  }
  for (size_t u = 0; u < num_units_; ++u) {
    uint64_t len = 0;
    const uint64_t total = UnitCount(node, u, &len);
    if (total == 0) continue;
    b.max_count = std::max(b.max_count, total);
    // Both bounds read, then selected: whether lookups are spent, and the
    // count, are data (early exits on them mispredicted about five times a
    // step in callgrind's branch simulation).
    const size_t family = FamilyOf(u);
    const double static_bound = calibrator_.StaticBound(total, len, family);
    const double backoff_bound = calibrator_.BackoffBound(len, family);
    const bool no_lookup = spent && total > 1;
    b.static_children = std::max(b.static_children, no_lookup ? 0.0 : static_bound);
    b.backoff_children =
        std::max(b.backoff_children, !spent && total < sel_.tuning.backoff_count ? backoff_bound : 0.0);
  }
  return b;
}

// Queues the node's expansion (of its static children, or of its backoff
// children) at its path probability times `bound`; false when there is none
// (bound 0). Below min_path_probability the entry would never be popped: the
// node is then expanded only if one of its children comes to rank.
bool CalibratedPolicy::QueueExpansion(int32_t node, double bound, bool backoff) {
  if (!(bound > 0.0)) return false;
  const MergedNode& r = trie_.nodes[node];
  if (r.path * bound >= sel_.tuning.min_path_probability)
    trie_.Push(QueueEntry{r.path * bound, OrderAtEqualKeys(true, r.depth, r.rank, r.token, backoff),
                          node, true, backoff});
  return true;
}

// Ranks `node` (its parent ranked and expanded), queues its children.
void CalibratedPolicy::Rank(int32_t node) {
  {
    MergedNode& r = trie_.nodes[node];
    r.rank = static_cast<int32_t>(trie_.ranked.size());
    r.path = r.parent < 0 ? 1.0 : trie_.nodes[r.parent].path * r.prob;
  }
  trie_.ranked.push_back(node);
  if (node == dyn_tip_ && trie_.nodes[node].depth < dyn_chain_) {
    const uint16_t depth = trie_.nodes[node].depth;
    dyn_tip_ = trie_.OfferChild(calibrator_, node, chain_[depth], 0,
                                calibrator_.DynamicCell(step_->dyn.len, depth + 1u), kFromDynamic);
  }
  const MergedNode& n = trie_.nodes[node];
  for (int32_t c = n.first_child; c >= 0; c = trie_.nodes[c].next_sibling) trie_.Enqueue(c);
  const Bounds b = BoundsOf(node);
  if (b.max_count == 1 && b.static_children > 0.0 &&
      trie_.nodes[node].path * b.static_children >= sel_.tuning.min_path_probability) {
    // Its strings occur once: its one static child (the text after that
    // occurrence) needs no lookup, and is offered now rather than through
    // a queued expansion. The ranking is the same: the expansion would have
    // come before anything its child ranks after.
    Expand(node);
  } else if (!QueueExpansion(node, b.static_children, false)) {
    trie_.nodes[node].expanded = true;
  }
  // The backoff children: an expansion of their own, usually later (their
  // estimates are lower), so that most of their lookups are never made.
  if (!QueueExpansion(node, b.backoff_children, true)) trie_.nodes[node].backed_off = true;
}

// At most `budget_` nodes (root included), best first.
void CalibratedPolicy::RankBestFirst() {
#ifdef SAM_PHASE_TIMING
  phase_nodes_ = 2;
#endif
  Rank(0);
  while (!trie_.QueueEmpty() && trie_.ranked.size() < budget_) {
    PhaseMark();
    const QueueEntry e = trie_.Pop();
    if (e.key < sel_.tuning.min_path_probability) break;  // nothing left reaches it
    if (e.expand) {
      if (e.backoff) {
        if (LookupsSpent()) trie_.nodes[e.node].backed_off = true;  // nothing to offer
        if (!trie_.nodes[e.node].backed_off) BackOff(e.node);
      } else if (!trie_.nodes[e.node].expanded) {
        Expand(e.node);
      }
      continue;
    }
    if (trie_.nodes[e.node].rank >= 0 || e.key < trie_.nodes[e.node].queued) continue;  // stale
    // Its parent's static offers come first: they may give it a state (and
    // a cell). They cannot raise its estimate: the parent's expansion entry,
    // which bounds them, would have come first.
    const int32_t parent = trie_.nodes[e.node].parent;
    if (!trie_.nodes[parent].expanded) {
      Expand(parent);
      if (trie_.nodes[e.node].queued > e.key) continue;  // defensive: re-queued higher
    }
    // Likewise its parent's backoff children, when they may give it a state.
    if (!trie_.nodes[parent].backed_off && LookupsSpent()) {
      trie_.nodes[parent].backed_off = true;  // nothing to offer
    } else if (!trie_.nodes[parent].backed_off && BackoffReaches(parent, e.node)) {
      BackOff(parent);
      if (trie_.nodes[e.node].queued > e.key) continue;  // defensive: re-queued higher
    }
    Rank(e.node);
  }
}

// The ranking's phases (SAM_PHASE_TIMING): 2, 4 and 8 nodes ranked.
void CalibratedPolicy::PhaseMark() {
#ifdef SAM_PHASE_TIMING
  if (trie_.ranked.size() < phase_nodes_ || phase_nodes_ > 8) return;
  if (phase_nodes_ == 2) SAM_PHASE_END(kCalRankTo2);
  else if (phase_nodes_ == 4) SAM_PHASE_END(kCalRankTo4);
  else SAM_PHASE_END(kCalRankTo8);
  phase_nodes_ *= 2;
#endif
}

// Selection: how many of the ranked nodes to draft. Any prefix of the ranking
// is a tree (a parent ranks before its children): every ranked node (at most
// budget - 1, each at or above min_path_probability), or with a cost curve
// the prefix that pays for its verification (ChooseTreeSize).
void CalibratedPolicy::Output(DraftTree* tree) {
  PhaseMark();
  SAM_PHASE_END(kCalRankRest);
  size_t keep = trie_.ranked.size() - 1;
  if (!sel_.cost_curve.empty()) keep = CostAwareKeep(keep);
  if (keep == 0) return;

  // Tree node r is the node of rank r (a parent ranks first, so the tree is
  // what DraftTree::Add would build; depths stay far below kMaxDepth).
  // (Appended, not resized and then written: the vectors keep their
  // capacity, and a resize would first fill the new elements with zeros.)
  node_cells_.assign(1, std::array<int, 4>{-1, -1, -1, -1});
  // Each node's estimate: its best offer's P(accepted | parent accepted).
  tree->accept_estimates.assign(1, 1.0f);
  uint8_t sources = 0;
  for (size_t r = 1; r <= keep; ++r) {
    const MergedNode& n = trie_.nodes[trie_.ranked[r]];
    tree->tokens.push_back(n.token);
    tree->parents.push_back(trie_.nodes[n.parent].rank);
    tree->depths.push_back(n.depth);
    tree->accept_estimates.push_back(static_cast<float>(n.prob));
    node_cells_.push_back(n.cells);
    sources |= n.sources;
  }
  trie_.ranked.resize(keep + 1);
  trie_.valid = true;
  switch (sources) {
    case kFromDynamic: tree->source = DraftSource::kDynamic; break;
    case kFromStatic: tree->source = DraftSource::kStatic; break;
    case kFromFallback: tree->source = fallback_source_; break;
    case kFromCache: tree->source = DraftSource::kCache; break;
    case 0: tree->source = DraftSource::kNone; break;
    default: tree->source = DraftSource::kMerged; break;
  }
  tree->match_len = std::max(step_->dyn.len, step_->static_len);
  SAM_PHASE_END(kCalOutput);
}

// SessionOptions::cost_curve: how many of the `keep` best-ranked nodes
// after the root to draft, chosen against the measured rate (tokens per t(1)
// over the session's steps).
size_t CalibratedPolicy::CostAwareKeep(size_t keep) {
  ranked_paths_.clear();
  for (size_t r = 1; r <= keep; ++r) ranked_paths_.push_back(trie_.nodes[trie_.ranked[r]].path);
  return ChooseTreeSize(ranked_paths_, sel_.cost_curve, step_->measured_rate) - 1;
}

void CalibratedPolicy::Observe(const DraftTree& tree, const internal::ObservedPath& path) {
  for (size_t i = 1; i < tree.size(); ++i) {
    if (!path.Trial(tree, i)) continue;
    for (int cell : node_cells_[i])
      if (cell >= 0) calibrator_.Observe(cell, path.on_path[i] != 0);
  }
}

size_t CalibratedPolicy::FollowKnown(size_t i, std::span<const uint32_t> tokens,
                                     size_t /*accepted*/, const DraftTree& tree,
                                     internal::StaticSource& source) {
  if (!trie_.valid || i >= trie_.num_indexes) return 1;
  size_t k = 1;
  int node = 0;
  for (; k < tokens.size(); ++k) {
    const int child = tree.Child(node, tokens[k]);
    if (child < 0) break;
    const CandidateTrie::IndexState& known =
        trie_.states[static_cast<size_t>(trie_.ranked[child]) * trie_.num_indexes + i];
    // A backoff child's state is a shorter match than the longest one.
    if (known.state == format::kNoState || known.len != source.peeked.len + k) break;
    source.cursor.Set(StaticMatch{known.state, source.peeked.len + k}, known.record);
    node = child;
  }
  return k;
}

}  // namespace sam::runtime::calibrated

namespace sam::runtime::internal {

std::unique_ptr<DraftPolicy> MakeCalibratedPolicy(const SessionOptions& options) {
  return std::make_unique<calibrated::CalibratedPolicy>(options);
}

}  // namespace sam::runtime::internal
