#include "sam/runtime/replay.h"

#include <algorithm>
#include <chrono>
#include <cmath>

namespace sam::runtime {

size_t AcceptedLength(const DraftTree& tree, std::span<const uint32_t> next) {
  int node = 0;
  size_t depth = 0;
  while (depth < next.size() && (node = tree.Child(node, next[depth])) >= 0) ++depth;
  return depth;
}

double ReplayReport::DraftShare() const {
  const uint64_t none = by_source[static_cast<size_t>(DraftSource::kNone)].steps;
  return total.steps ? 1.0 - static_cast<double>(none) / total.steps : 0.0;
}

double ReplayReport::ProjectedSpeedup(const CostCurve& curve) const {
  return runtime::ProjectedSpeedup(steps_by_size, total.Tokens(), curve);
}

ReplayReport Replay(Drafter& drafter, std::span<const ReplayTrace> traces, size_t max_nodes) {
  return Replay(drafter, traces, max_nodes, ReplayHooks{});
}

ReplayReport Replay(Drafter& drafter, std::span<const ReplayTrace> traces, size_t max_nodes,
                    const ReplayHooks& hooks) {
  using Clock = std::chrono::steady_clock;
  auto ns_since = [](Clock::time_point t0) {
    auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - t0).count();
    return static_cast<uint32_t>(std::min<int64_t>(ns, UINT32_MAX));
  };
  ReplayReport report;
  DraftTree tree;
  for (const ReplayTrace& trace : traces) {
    if (hooks.before_trace) hooks.before_trace(trace);
    drafter.Reset();
    drafter.Prefill(trace.prompt);
    SourceStatistics& category = report.by_category[trace.category];
    const std::span<const uint32_t> output(trace.output);
    size_t i = 0;
    while (i < output.size()) {
      auto t0 = Clock::now();
      drafter.Propose(output[i], max_nodes, &tree);
      if (tree.size() == 0 || tree.tokens[0] != output[i])  // a drafter that broke the contract
        tree.Reset(output[i], DraftSource::kNone);
      report.propose_ns.push_back(ns_since(t0));
      const size_t accepted = AcceptedLength(tree, output.subspan(i + 1));
      t0 = Clock::now();
      drafter.Commit(output.subspan(i, accepted + 1));
      report.commit_ns.push_back(ns_since(t0));

      const DraftSource source = tree.size() > 1 ? tree.source : DraftSource::kNone;
      report.total.Record(tree, accepted);
      if (report.steps_by_size.size() <= tree.size()) report.steps_by_size.resize(tree.size() + 1);
      ++report.steps_by_size[tree.size()];
      category.Record(tree, accepted);
      report.by_source[static_cast<size_t>(source)].Record(tree, accepted);
      i += accepted + 1;
    }
    if (hooks.after_trace) hooks.after_trace(trace);
  }
  return report;
}

}  // namespace sam::runtime
