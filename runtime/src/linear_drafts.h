// Internal: chains (linear drafts) from one source, shared by the policies
// that draft them (paper_policy.cc, linear_policy.cc, tree_policy.cc).
#ifndef SAM_RUNTIME_SRC_LINEAR_DRAFTS_H_
#define SAM_RUNTIME_SRC_LINEAR_DRAFTS_H_

#include <cstddef>
#include <cstdint>
#include <span>

#include "sam/runtime/draft.h"
#include "sam/runtime/drafter.h"
#include "sam/runtime/dynamic_sam.h"
#include "policy.h"
#include "static_source.h"

namespace sam::runtime::internal {

// Each appends to `tree` (a tree of the start token alone) a chain of at most
// size - 1 tokens under the root, with the tree's source and match length; a
// chain of no token leaves the tree as it was.

// The dynamic automaton's continuation of match m (link_fallback:
// experimental::Tuning::dynamic_link_fallback).
void DraftDynamicChain(const DynamicSam& dynamic, DynamicSam::Match m, size_t size,
                       bool link_fallback, DraftTree* tree);
// The text after the first occurrence of source's peeked match. Returns
// whether it drafted (a chain of at least one token).
bool DraftStaticChain(const StaticSource& source, size_t size, DraftTree* tree);
// Moves the cursor of the source that drafted a static chain over its
// `accepted` tokens (the text after its match's first occurrence) in one
// climb; returns 1 + accepted, the tokens matched with the start token.
size_t FollowStaticChain(size_t accepted, StaticSource& source);
// The response cache's continuation `draft` of a match of length len.
void DraftCacheChain(std::span<const uint32_t> draft, uint32_t len, size_t size,
                     DraftTree* tree);
// The fallback drafter's tree of at most `size` nodes (kOther when it names
// no source); the start token alone when it proposes nothing.
void DraftFromFallback(Drafter& fallback, uint32_t start_token, size_t size, DraftTree* tree);

// A policy whose proposals may be a linear static draft (the paper rule,
// static-only): Commit moves the drafting source's cursor over the accepted
// tokens (the corpus text after its match) in one climb.
class LinearStaticDraftPolicy : public DraftPolicy {
 public:
  void Forget() override { linear_source_ = SIZE_MAX; }
  size_t FollowKnown(size_t i, std::span<const uint32_t> /*tokens*/, size_t accepted,
                     const DraftTree& /*tree*/, StaticSource& source) override {
    return i == linear_source_ && accepted > 0 ? FollowStaticChain(accepted, source) : 1;
  }

 protected:
  size_t linear_source_ = SIZE_MAX;  // the last proposal's linear static draft's
};

}  // namespace sam::runtime::internal

#endif  // SAM_RUNTIME_SRC_LINEAR_DRAFTS_H_
