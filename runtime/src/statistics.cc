#include "sam/runtime/statistics.h"

#include <sstream>

namespace sam::runtime {

double SourceStatistics::MeanAccepted() const {
  return drafts == 0 ? 0.0 : static_cast<double>(accepted_tokens) / static_cast<double>(drafts);
}

void SourceStatistics::Merge(const SourceStatistics& o) {
  drafts += o.drafts;
  draft_nodes += o.draft_nodes;
  accepted_tokens += o.accepted_tokens;
  propose_ns += o.propose_ns;
  for (size_t i = 0; i < kTrackedDepths; ++i) {
    proposed_at_depth[i] += o.proposed_at_depth[i];
    accepted_at_depth[i] += o.accepted_at_depth[i];
  }
  for (size_t i = 0; i < kMatchLengthBuckets; ++i) {
    drafts_by_match_length[i] += o.drafts_by_match_length[i];
    accepted_by_match_length[i] += o.accepted_by_match_length[i];
  }
}

void SessionStatistics::Merge(const SessionStatistics& o) {
  for (size_t i = 0; i < kNumDraftSources; ++i) by_source[i].Merge(o.by_source[i]);
  steps += o.steps;
  committed_tokens += o.committed_tokens;
  prefill_tokens += o.prefill_tokens;
  commit_ns += o.commit_ns;
  prefill_ns += o.prefill_ns;
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

}  // namespace

std::string SessionStatistics::ToJson() const {
  std::ostringstream out;
  out << "{\"steps\":" << steps << ",\"committed_tokens\":" << committed_tokens
      << ",\"prefill_tokens\":" << prefill_tokens << ",\"commit_ns\":" << commit_ns
      << ",\"prefill_ns\":" << prefill_ns << ",\"sources\":{";
  bool first = true;
  for (size_t i = 0; i < kNumDraftSources; ++i) {
    const SourceStatistics& s = by_source[i];
    if (s.drafts == 0) continue;
    out << (first ? "" : ",") << '"' << DraftSourceName(static_cast<DraftSource>(i))
        << "\":{\"drafts\":" << s.drafts << ",\"draft_nodes\":" << s.draft_nodes
        << ",\"accepted_tokens\":" << s.accepted_tokens << ",\"propose_ns\":" << s.propose_ns
        << ",\"proposed_at_depth\":";
    WriteArray(out, s.proposed_at_depth);
    out << ",\"accepted_at_depth\":";
    WriteArray(out, s.accepted_at_depth);
    out << ",\"drafts_by_match_length\":";
    WriteArray(out, s.drafts_by_match_length);
    out << ",\"accepted_by_match_length\":";
    WriteArray(out, s.accepted_by_match_length);
    out << '}';
    first = false;
  }
  out << "}}";
  return out.str();
}

}  // namespace sam::runtime
