#include "sam/runtime/phase_timing.h"

#include <array>

#include "phase_marks.h"

namespace sam::runtime {

bool PhaseTimingEnabled() {
#ifdef SAM_PHASE_TIMING
  return true;
#else
  return false;
#endif
}

std::string_view PhaseName(size_t phase) {
  static constexpr std::array<std::string_view, kNumPhases> kNames = {
      "peek",        "dyn-lookup",  "cal:setup",   "cal:rank->2",    "cal:rank->4", "cal:rank->8",
      "cal:rank-rest", "cal:output", "commit:accept", "commit:cursors", "commit:update"};
  return phase < kNumPhases ? kNames[phase] : std::string_view("?");
}

const std::vector<uint32_t>& PhaseTimes(size_t phase) {
  static const std::vector<uint32_t> kNone;
  return phase < kNumPhases ? internal::phase_recorder.times[phase] : kNone;
}

void ClearPhaseTimes() {
  for (std::vector<uint32_t>& t : internal::phase_recorder.times) t.clear();
}

}  // namespace sam::runtime
