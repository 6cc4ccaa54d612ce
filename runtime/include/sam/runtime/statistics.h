// Per-drafter observability: steps, drafted and accepted tokens, acceptance
// by draft position and by match length, and drafting time. SourceStatistics
// is the one per-source statistics type of the project: sessions
// (Session::statistics()), offline replay (replay.h), the generation loop
// (sam/torch/generate.h) and the tools (sam-replay, sam-generate, bench_step,
// bench_generate) all count with it, so MAT means the same everywhere.
//
//   const sam::runtime::SessionStatistics& s = session.statistics();
//   const auto& st = s.source(sam::runtime::DraftSource::kStatic);
//   double mat = st.Mat();   // mean tokens per step: accepted draft tokens + 1 (the bonus)
#ifndef SAM_RUNTIME_STATISTICS_H_
#define SAM_RUNTIME_STATISTICS_H_

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>

#include "sam/export.h"
#include "sam/runtime/draft.h"

namespace sam::runtime {

inline constexpr size_t kTrackedDepths = 64;      // depths 1..64 (deeper ones fold into 64)
inline constexpr size_t kMatchLengthBuckets = 33;  // lengths 0..31, then 32 and longer
inline constexpr size_t kNumDraftSources = 10;     // DraftSource values

inline size_t MatchLengthBucket(uint64_t len) {
  return len < kMatchLengthBuckets - 1 ? static_cast<size_t>(len) : kMatchLengthBuckets - 1;
}

struct SAM_API SourceStatistics {
  uint64_t steps = 0;            // steps (verified drafts) counted here
  uint64_t draft_tokens = 0;     // draft nodes proposed, start token excluded
  uint64_t accepted_tokens = 0;  // draft tokens accepted, bonus excluded
  uint64_t propose_ns = 0;       // time spent proposing these drafts (sessions with timing)
  // proposed_at_depth[d]: steps whose draft had a node at depth d + 1;
  // accepted_at_depth[d]: steps whose accepted path reached depth d + 1.
  std::array<uint64_t, kTrackedDepths> proposed_at_depth{};
  std::array<uint64_t, kTrackedDepths> accepted_at_depth{};
  // By match length of the matched state (MatchLengthBucket of DraftTree::match_len).
  std::array<uint64_t, kMatchLengthBuckets> steps_by_match_length{};
  std::array<uint64_t, kMatchLengthBuckets> accepted_by_match_length{};

  // Counts one step: `tree` was verified and `accepted` of its draft tokens
  // (the depth of the accepted path) were accepted.
  void Record(const DraftTree& tree, size_t accepted);
  // MAT, the mean accepted tokens per step with the bonus token counted:
  // the mean over steps of (accepted draft tokens + 1), i.e.
  // (accepted_tokens + steps) / steps. Plain decoding scores 1; 0 without steps.
  double Mat() const {
    return steps ? static_cast<double>(accepted_tokens + steps) / static_cast<double>(steps) : 0.0;
  }
  // Tokens the steps produced: accepted draft tokens plus one bonus token each.
  uint64_t Tokens() const { return accepted_tokens + steps; }
  // Tree nodes verified per step, start token included (1 for plain decoding).
  double TokensPerStep() const {
    return steps ? static_cast<double>(draft_tokens + steps) / static_cast<double>(steps) : 0.0;
  }
  void Merge(const SourceStatistics& other);
  // The counts since `earlier`, an earlier copy of these statistics (each count minus its
  // value there).
  void Subtract(const SourceStatistics& earlier);
};

struct SAM_API SessionStatistics {
  std::array<SourceStatistics, kNumDraftSources> by_source{};  // by DraftTree::source
  uint64_t steps = 0;             // Commit calls that followed a Propose
  uint64_t committed_tokens = 0;  // tokens committed (prefill excluded)
  uint64_t prefill_tokens = 0;
  uint64_t commit_ns = 0;         // time spent in Commit (automata updates)
  uint64_t prefill_ns = 0;

  const SourceStatistics& source(DraftSource s) const {
    return by_source[static_cast<size_t>(s)];
  }
  SourceStatistics& source(DraftSource s) { return by_source[static_cast<size_t>(s)]; }
  // All sources together.
  SourceStatistics Total() const;
  void Merge(const SessionStatistics& other);
  // The counts since `earlier`, an earlier copy of these statistics.
  void Subtract(const SessionStatistics& earlier);
  // A JSON object: "steps", "committed_tokens", "prefill_tokens", "commit_ns", "prefill_ns",
  // "total" (all sources together) and "sources" (the non-empty sources by name). Each source
  // object has "steps", "draft_tokens", "accepted_tokens", "mat", "propose_ns", the arrays
  // (trailing zeros left out) and "mat_by_depth": accepted_at_depth[d] / steps, the share of
  // steps whose accepted path reached depth d + 1, so that mat = 1 + the sum of mat_by_depth.
  std::string ToJson() const;
};

}  // namespace sam::runtime

#endif  // SAM_RUNTIME_STATISTICS_H_
