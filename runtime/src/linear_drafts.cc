#include "linear_drafts.h"

#include <algorithm>

#include "sam/runtime/static_match.h"

namespace sam::runtime::internal {

namespace {

// Parents and depths of tokens [base, size) hanging as a chain under node base - 1.
void ChainLinks(size_t base, DraftTree* tree) {
  const size_t size = tree->tokens.size();
  const uint16_t depth = tree->depths[base - 1];
  tree->parents.resize(size);
  tree->depths.resize(size);
  for (size_t k = base; k < size; ++k) {
    tree->parents[k] = static_cast<int32_t>(k - 1);
    tree->depths[k] = static_cast<uint16_t>(depth + 1 + (k - base));
  }
}

}  // namespace

void DraftDynamicChain(const DynamicSam& dynamic, DynamicSam::Match m, size_t size,
                       bool link_fallback, DraftTree* tree) {
  if (size < 2) return;
  // The continuation is copied straight into the tree (after its root).
  const size_t base = tree->size();
  tree->tokens.resize(base + size - 1);
  const size_t n = dynamic.Continuation(m, size - 1, link_fallback, tree->tokens.data() + base);
  tree->tokens.resize(base + n);
  if (n == 0) return;  // nothing to draft: the tree stays the start token alone
  ChainLinks(base, tree);
  tree->source = DraftSource::kDynamic;
  tree->match_len = m.len;
}

bool DraftStaticChain(const StaticSource& source, size_t size, DraftTree* tree) {
  if (size < 2) return false;
  const StaticMatch m = source.peeked;
  const size_t base = tree->size();
  tree->tokens.resize(base + size - 1);
  const size_t n = StaticContinuation(source.view(), m.state, size - 1, tree->tokens.data() + base);
  tree->tokens.resize(base + n);
  if (n == 0) return false;
  ChainLinks(base, tree);
  tree->source = DraftSource::kStatic;
  tree->match_len = static_cast<uint32_t>(std::min<uint64_t>(m.len, UINT32_MAX));
  return true;
}

size_t FollowStaticChain(size_t accepted, StaticSource& source) {
  source.cursor.Set(AdvanceAlongFirstOccurrence(source.view(), source.peeked, accepted));
  return 1 + accepted;
}

void DraftCacheChain(std::span<const uint32_t> draft, uint32_t len, size_t size,
                     DraftTree* tree) {
  const size_t n = std::min(draft.size(), size > 0 ? size - 1 : 0);
  if (n == 0) return;
  const size_t base = tree->size();
  tree->tokens.insert(tree->tokens.end(), draft.begin(), draft.begin() + n);
  ChainLinks(base, tree);
  tree->source = DraftSource::kCache;
  tree->match_len = len;
}

void DraftFromFallback(Drafter& fallback, uint32_t start_token, size_t size, DraftTree* tree) {
  if (!fallback.Propose(start_token, size, tree) || tree->size() <= 1) {
    tree->Reset(start_token, DraftSource::kNone);
    return;
  }
  if (tree->source == DraftSource::kNone) tree->source = DraftSource::kOther;
}

}  // namespace sam::runtime::internal
