// Policy::kStaticOnly and Policy::kDynamicOnly: linear drafts from one kind
// of source, the static sources (the longest match) or the request's own
// text, whenever it matches.
#include <algorithm>

#include "linear_drafts.h"
#include "policy.h"

namespace sam::runtime::internal {

namespace {

class LinearPolicy : public LinearStaticDraftPolicy {
 public:
  explicit LinearPolicy(const SessionOptions& options)
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
                        sel_.tuning.dynamic_link_fallback, tree);
    }
  }

 private:
  SessionOptions sel_;
  bool from_static_;
};

}  // namespace

std::unique_ptr<DraftPolicy> MakeLinearPolicy(const SessionOptions& options) {
  return std::make_unique<LinearPolicy>(options);
}

}  // namespace sam::runtime::internal
