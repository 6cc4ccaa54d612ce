#include "sam/runtime/statistics.h"

#include <algorithm>
#include <sstream>

namespace sam::runtime {

void SourceStatistics::Record(const DraftTree& tree, size_t accepted) {
  size_t max_depth = 0;
  for (uint16_t d : tree.depths) max_depth = std::max<size_t>(max_depth, d);
  ++steps;
  draft_tokens += tree.size() > 0 ? tree.size() - 1 : 0;
  accepted_tokens += accepted;
  for (size_t d = 0; d < std::min(max_depth, kTrackedDepths); ++d) ++proposed_at_depth[d];
  for (size_t d = 0; d < std::min(accepted, kTrackedDepths); ++d) ++accepted_at_depth[d];
  const size_t bucket = MatchLengthBucket(tree.match_len);
  ++steps_by_match_length[bucket];
  accepted_by_match_length[bucket] += accepted;
}

void SourceStatistics::Merge(const SourceStatistics& o) {
  steps += o.steps;
  draft_tokens += o.draft_tokens;
  accepted_tokens += o.accepted_tokens;
  propose_ns += o.propose_ns;
  for (size_t i = 0; i < kTrackedDepths; ++i) {
    proposed_at_depth[i] += o.proposed_at_depth[i];
    accepted_at_depth[i] += o.accepted_at_depth[i];
  }
  for (size_t i = 0; i < kMatchLengthBuckets; ++i) {
    steps_by_match_length[i] += o.steps_by_match_length[i];
    accepted_by_match_length[i] += o.accepted_by_match_length[i];
  }
}

void SourceStatistics::Subtract(const SourceStatistics& o) {
  steps -= o.steps;
  draft_tokens -= o.draft_tokens;
  accepted_tokens -= o.accepted_tokens;
  propose_ns -= o.propose_ns;
  for (size_t i = 0; i < kTrackedDepths; ++i) {
    proposed_at_depth[i] -= o.proposed_at_depth[i];
    accepted_at_depth[i] -= o.accepted_at_depth[i];
  }
  for (size_t i = 0; i < kMatchLengthBuckets; ++i) {
    steps_by_match_length[i] -= o.steps_by_match_length[i];
    accepted_by_match_length[i] -= o.accepted_by_match_length[i];
  }
}

SourceStatistics SessionStatistics::Total() const {
  SourceStatistics total;
  for (const SourceStatistics& s : by_source) total.Merge(s);
  return total;
}

void SessionStatistics::Merge(const SessionStatistics& o) {
  for (size_t i = 0; i < kNumDraftSources; ++i) by_source[i].Merge(o.by_source[i]);
  steps += o.steps;
  committed_tokens += o.committed_tokens;
  prefill_tokens += o.prefill_tokens;
  commit_ns += o.commit_ns;
  prefill_ns += o.prefill_ns;
}

void SessionStatistics::Subtract(const SessionStatistics& o) {
  for (size_t i = 0; i < kNumDraftSources; ++i) by_source[i].Subtract(o.by_source[i]);
  steps -= o.steps;
  committed_tokens -= o.committed_tokens;
  prefill_tokens -= o.prefill_tokens;
  commit_ns -= o.commit_ns;
  prefill_ns -= o.prefill_ns;
}

namespace {

template <size_t N>
void WriteArray(std::ostringstream& out, const std::array<uint64_t, N>& a) {
  size_t last = N;
  while (last > 0 && a[last - 1] == 0) --last;  // trailing zeros say nothing
  out << '[';
  for (size_t i = 0; i < last; ++i) out << (i ? "," : "") << a[i];
  out << ']';
}

// One source's object of ToJson().
void WriteSource(std::ostringstream& out, const SourceStatistics& s) {
  out << "{\"steps\":" << s.steps << ",\"draft_tokens\":" << s.draft_tokens
      << ",\"accepted_tokens\":" << s.accepted_tokens << ",\"mat\":" << s.Mat()
      << ",\"propose_ns\":" << s.propose_ns << ",\"proposed_at_depth\":";
  WriteArray(out, s.proposed_at_depth);
  out << ",\"accepted_at_depth\":";
  WriteArray(out, s.accepted_at_depth);
  out << ",\"mat_by_depth\":[";
  for (size_t d = 0; d < kTrackedDepths && s.accepted_at_depth[d] > 0; ++d)
    out << (d ? "," : "")
        << static_cast<double>(s.accepted_at_depth[d]) / static_cast<double>(s.steps);
  out << "],\"steps_by_match_length\":";
  WriteArray(out, s.steps_by_match_length);
  out << ",\"accepted_by_match_length\":";
  WriteArray(out, s.accepted_by_match_length);
  out << '}';
}

}  // namespace

std::string SessionStatistics::ToJson() const {
  std::ostringstream out;
  out.precision(17);  // doubles round-trip
  out << "{\"steps\":" << steps << ",\"committed_tokens\":" << committed_tokens
      << ",\"prefill_tokens\":" << prefill_tokens << ",\"commit_ns\":" << commit_ns
      << ",\"prefill_ns\":" << prefill_ns << ",\"total\":";
  WriteSource(out, Total());
  out << ",\"sources\":{";
  bool first = true;
  for (size_t i = 0; i < kNumDraftSources; ++i) {
    const SourceStatistics& s = by_source[i];
    if (s.steps == 0) continue;
    out << (first ? "" : ",") << '"' << DraftSourceName(static_cast<DraftSource>(i)) << "\":";
    WriteSource(out, s);
    first = false;
  }
  out << "}}";
  return out.str();
}

}  // namespace sam::runtime
