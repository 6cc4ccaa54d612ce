// Per-drafter observability: drafts, accepted tokens, acceptance by draft
// position and by match length, and drafting time.
//
//   const sam::runtime::SessionStatistics& s = session.statistics();
//   const auto& st = s.source(sam::runtime::DraftSource::kStatic);
//   double mat = 1.0 + st.MeanAccepted();   // mean accepted tokens per step, bonus included
#ifndef SAM_RUNTIME_STATISTICS_H_
#define SAM_RUNTIME_STATISTICS_H_

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>

#include "sam/runtime/draft.h"

namespace sam::runtime {

inline constexpr size_t kTrackedDepths = 64;      // depths 1..64 (deeper ones fold into 64)
inline constexpr size_t kMatchLengthBuckets = 33;  // lengths 0..31, then 32 and longer
inline constexpr size_t kNumDraftSources = 7;     // DraftSource values

inline size_t MatchLengthBucket(uint64_t len) {
  return len < kMatchLengthBuckets - 1 ? static_cast<size_t>(len) : kMatchLengthBuckets - 1;
}

struct SourceStatistics {
  uint64_t drafts = 0;           // steps whose draft came from this source
  uint64_t draft_nodes = 0;      // nodes proposed, start token excluded
  uint64_t accepted_tokens = 0;  // draft tokens accepted, bonus excluded
  uint64_t propose_ns = 0;       // time spent proposing these drafts
  // proposed_at_depth[d]: drafts with a node at depth d + 1;
  // accepted_at_depth[d]: drafts whose accepted path reached depth d + 1.
  std::array<uint64_t, kTrackedDepths> proposed_at_depth{};
  std::array<uint64_t, kTrackedDepths> accepted_at_depth{};
  // By match length of the matched state (MatchLengthBucket).
  std::array<uint64_t, kMatchLengthBuckets> drafts_by_match_length{};
  std::array<uint64_t, kMatchLengthBuckets> accepted_by_match_length{};

  // Accepted draft tokens per draft (0 when none).
  double MeanAccepted() const;
  void Merge(const SourceStatistics& other);
};

struct SessionStatistics {
  std::array<SourceStatistics, kNumDraftSources> by_source{};
  uint64_t steps = 0;             // Commit calls that followed a Propose
  uint64_t committed_tokens = 0;  // tokens committed (prefill excluded)
  uint64_t prefill_tokens = 0;
  uint64_t commit_ns = 0;         // time spent in Commit (automata updates)
  uint64_t prefill_ns = 0;

  const SourceStatistics& source(DraftSource s) const {
    return by_source[static_cast<size_t>(s)];
  }
  SourceStatistics& source(DraftSource s) { return by_source[static_cast<size_t>(s)]; }
  void Merge(const SessionStatistics& other);
  // A JSON object with the non-empty sources (for logs and tools).
  std::string ToJson() const;
};

}  // namespace sam::runtime

#endif  // SAM_RUNTIME_STATISTICS_H_
