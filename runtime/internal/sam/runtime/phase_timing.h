// Where a drafting step's time goes: the time of each phase of Session's
// Propose and Commit, step by step. A diagnostic: recorded only by a build
// configured with -DSAM_PHASE_TIMING=ON (each mark reads the time-stamp
// counter, about 10 ns); in any other build PhaseTimingEnabled() is false and
// nothing is ever recorded.
//
//   sam::runtime::ClearPhaseTimes();
//   ... sessions propose and commit on this thread ...
//   for (size_t p = 0; p < sam::runtime::kNumPhases; ++p) {
//     const std::vector<uint32_t>& t = sam::runtime::PhaseTimes(p);  // one per step through p
//     report(sam::runtime::PhaseName(p), t);
//   }
//
// Times are in ticks of the x86 time-stamp counter (elsewhere nanoseconds):
// compare them between builds and settings on one machine, and use
// bench-step's step times for microseconds. A phase is recorded by the steps
// that pass through it: the calibrated ones (kCalSetup .. kCalOutput) only
// by Policy::kCalibrated, the ranking's by a step whose tree reached that
// many nodes (kCalRankTo8: from the 4th to the 8th node). The paper rule's
// linear draft is not a phase. Samples are kept per thread; bench-step
// --phases prints their medians.
#ifndef SAM_RUNTIME_PHASE_TIMING_H_
#define SAM_RUNTIME_PHASE_TIMING_H_

#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>


namespace sam::runtime {

enum Phase : size_t {
  kPeek = 0,        // Propose: the static cursors' peek of the start token
  kDynamicLookup,   // Propose: the dynamic automaton's lookup
  kCalSetup,        // kCalibrated: the root's states, the dynamic chain, eager sources
  kCalRankTo2,      // kCalibrated: ranking, up to the 2nd node (the root's lookup)
  kCalRankTo4,      // ... the 3rd and 4th nodes
  kCalRankTo8,      // ... the 5th to the 8th
  kCalRankRest,     // ... the rest of the ranking
  kCalOutput,       // kCalibrated: the ranked nodes written as the draft tree
  kCommitAccept,    // Commit: acceptance, statistics and calibration (Propose's phases come
                    // before it, Commit's from it on)
  kCommitCursors,   // Commit: the static cursors moved over the tokens
  kCommitUpdate,    // Commit: the dynamic automaton's update and the rest
  kNumPhases
};

// True in a build configured with -DSAM_PHASE_TIMING=ON.
bool PhaseTimingEnabled();
// A short name ("peek", "cal:rank->2", ...).
std::string_view PhaseName(size_t phase);
// This thread's samples of `phase` since the last ClearPhaseTimes (empty
// when not enabled, or for phase >= kNumPhases).
const std::vector<uint32_t>& PhaseTimes(size_t phase);
// Forgets this thread's samples.
void ClearPhaseTimes();

}  // namespace sam::runtime

#endif  // SAM_RUNTIME_PHASE_TIMING_H_
