// Policy::kStaticOnly and Policy::kDynamicOnly: linear drafts from one kind
// of source, the static sources (the longest match) or the request's own
// text, whenever it matches.
#include <algorithm>

#include "linear_drafts.h"
#include "policy.h"

namespace sam::runtime::internal {

namespace {

class LinearPolicy : public DraftPolicy {
 public:
  explicit LinearPolicy(const SelectionOptions& options)
      : sel_(options), from_static_(options.policy == Policy::kStaticOnly) {}

  void Propose(const StepContext& step, DraftTree* tree) override {
    if (from_static_) {
      if (step.best_len > 0 &&
          DraftStaticChain(step.sources[step.best],
                           std::min(step.max_nodes, LinearDraftSize(step.static_len, sel_)), tree))
        linear_source_ = step.best;
    } else if (step.dyn.len > 0) {
      DraftDynamicChain(*step.dynamic, step.dyn,
                        std::min(step.max_nodes, LinearDraftSize(step.dyn.len, sel_)),
                        sel_.dynamic_link_fallback, tree);
    }
  }
  void Forget() override { linear_source_ = SIZE_MAX; }
  // Accepted tokens of a linear static draft are the corpus text after the
  // drafting source's match: its cursor jumps over them in one climb.
  size_t FollowKnown(size_t i, std::span<const uint32_t> /*tokens*/, size_t accepted,
                     const DraftTree& /*tree*/, StaticSource& source) override {
    return i == linear_source_ && accepted > 0 ? FollowStaticChain(accepted, source) : 1;
  }

 private:
  SelectionOptions sel_;
  bool from_static_;
  size_t linear_source_ = SIZE_MAX;  // the last proposal's linear static draft's
};

}  // namespace

std::unique_ptr<DraftPolicy> MakeLinearPolicy(const SelectionOptions& options) {
  return std::make_unique<LinearPolicy>(options);
}

}  // namespace sam::runtime::internal
