// Policy::kPaper: the paper's selection rule (Hu et al. 2024) over linear
// drafts. l_s' = l_static - l_bias; if max(l_own, l_s') >= l_threshold, a
// linear draft from the request's own text when l_own >= l_s', else from the
// static source with the longest match; otherwise the fallback drafter.
// l_own is the longer of the dynamic automaton's match and the response
// cache's, and the longer one drafts: the cache is treated like the dynamic
// automaton.
#include <algorithm>

#include "linear_drafts.h"
#include "policy.h"

namespace sam::runtime::internal {

namespace {

class PaperPolicy : public LinearStaticDraftPolicy {
 public:
  explicit PaperPolicy(const SessionOptions& options) : sel_(options) { uses_cache_ = true; }

  void Propose(const StepContext& step, DraftTree* tree) override {
    const bool cache_wins = step.cache_len > step.dyn.len;
    const uint32_t own_len = std::max(step.dyn.len, step.cache_len);
    auto linear_size = [&](uint32_t len) {
      return std::min(step.max_nodes, LinearDraftSize(len, sel_));
    };
    switch (ChoosePaper(own_len, step.static_len, step.fallback != nullptr, sel_.paper)) {
      case Choice::kDynamic:
        if (cache_wins) {
          DraftCacheChain(step.cache_draft, step.cache_len, linear_size(own_len), tree);
        } else {
          DraftDynamicChain(*step.dynamic, step.dyn, linear_size(step.dyn.len),
                            sel_.tuning.dynamic_link_fallback, tree);
        }
        break;
      case Choice::kStatic:
        if (DraftStaticChain(step.sources[step.best], linear_size(step.static_len), tree))
          linear_source_ = step.best;
        break;
      case Choice::kFallback:
        DraftFromFallback(*step.fallback, step.start_token,
                          std::min(step.max_nodes, sel_.draft_size), tree);
        break;
      case Choice::kNone: break;
    }
  }

 private:
  SessionOptions sel_;
};

}  // namespace

std::unique_ptr<DraftPolicy> MakePaperPolicy(const SessionOptions& options) {
  return std::make_unique<PaperPolicy>(options);
}

}  // namespace sam::runtime::internal
