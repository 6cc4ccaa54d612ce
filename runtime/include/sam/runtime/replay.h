// Offline evaluation of drafters on recorded greedy outputs (DESIGN.md section 6).
//
//   std::vector<sam::runtime::ReplayTrace> traces = ...;   // prompt ids (BOS first), output ids
//   sam::runtime::Session session(options);
//   session.AttachIndex(&index.view());
//   sam::runtime::ReplayReport r = sam::runtime::Replay(session, traces);
//   std::printf("MAT %.3f\n", r.total.Mat());   // statistics.h: one MAT formula
//
// Greedy verification against a recorded greedy output is exact: at each step
// the drafter proposes a tree rooted at the start token (the first output token
// is the first start token), the accepted length is the depth of the deepest
// node whose root path equals the next output tokens, and the output token
// after the accepted ones (the bonus) becomes the next start. A step thus
// yields accepted + 1 tokens; the last start token's step yields 1 (its bonus
// lies beyond the trace), so MAT (SourceStatistics::Mat(): the mean over
// steps of accepted + 1) = output tokens / steps, and plain decoding scores
// exactly 1.00.
#ifndef SAM_RUNTIME_REPLAY_H_
#define SAM_RUNTIME_REPLAY_H_

#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <span>
#include <string>
#include <vector>

#include "sam/export.h"
#include "sam/runtime/budget.h"
#include "sam/runtime/draft.h"
#include "sam/runtime/drafter.h"
#include "sam/runtime/statistics.h"

namespace sam::runtime {

struct SAM_API ReplayTrace {
  std::string id;
  std::string category;
  std::vector<uint32_t> prompt;  // as the model saw it (BOS first)
  std::vector<uint32_t> output;  // the recorded greedy output
  std::string tenant;            // tenant key for a cross-request cache ("" by default)
};

// Depth of the deepest node of `tree` whose root path (excluding the root)
// equals a prefix of `next`.
SAM_API size_t AcceptedLength(const DraftTree& tree, std::span<const uint32_t> next);

struct SAM_API ReplayReport {
  SourceStatistics total;  // MAT: total.Mat(); tokens verified per step: total.TokensPerStep()
  std::map<std::string, SourceStatistics> by_category;
  // By the source of each step's draft (kNone when the tree is the start token alone).
  std::array<SourceStatistics, kNumDraftSources> by_source{};
  std::vector<uint32_t> propose_ns;  // one per step
  std::vector<uint32_t> commit_ns;   // one per step
  // steps_by_size[n]: steps whose draft had n nodes (start token included), so
  // that any verification cost curve can be applied afterwards
  // (ProjectedSpeedup, budget.h).
  std::vector<uint64_t> steps_by_size;
  // Share of steps that carried a draft (a tree with more than the root).
  double DraftShare() const;
  // Tokens produced / the steps' verification cost in units of t(1): the
  // speed-up over plain decoding projected for `curve` (drafting excluded).
  double ProjectedSpeedup(const CostCurve& curve) const;
};

// Replays every trace through `drafter` (Reset, Prefill, then Propose/Commit
// per step with trees of at most max_nodes nodes) and accumulates the report.
SAM_API ReplayReport Replay(Drafter& drafter, std::span<const ReplayTrace> traces,
                            size_t max_nodes = 1 << 16);

// Cross-request replay: before_trace runs before each trace's Reset (e.g. to
// select its tenant), after_trace after its last Commit (e.g. to add its output
// to a response cache), so traces are replayed in order as a server would have
// seen them. Either may be empty.
struct SAM_API ReplayHooks {
  std::function<void(const ReplayTrace&)> before_trace;
  std::function<void(const ReplayTrace&)> after_trace;
};
SAM_API ReplayReport Replay(Drafter& drafter, std::span<const ReplayTrace> traces,
                            size_t max_nodes, const ReplayHooks& hooks);

}  // namespace sam::runtime

#endif  // SAM_RUNTIME_REPLAY_H_
