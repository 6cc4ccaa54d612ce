// The marks behind phase_timing.h: SAM_PHASE_START() where a timed call
// begins, SAM_PHASE_END(p) where phase p ends (and the next begins). They
// compile to nothing unless SAM_PHASE_TIMING is defined (CMake option
// SAM_PHASE_TIMING), so the hot path of an ordinary build is untouched.
#ifndef SAM_RUNTIME_SRC_PHASE_MARKS_H_
#define SAM_RUNTIME_SRC_PHASE_MARKS_H_

#include <array>
#include <cstdint>
#include <vector>

#include "sam/runtime/phase_timing.h"

#if defined(__x86_64__) || defined(__i386__)
#include <x86intrin.h>
#else
#include <chrono>
#endif

namespace sam::runtime::internal {

inline uint64_t PhaseClock() {
#if defined(__x86_64__) || defined(__i386__)
  return __rdtsc();
#else
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                   std::chrono::steady_clock::now().time_since_epoch())
                                   .count());
#endif
}

struct PhaseRecorder {
  std::array<std::vector<uint32_t>, kNumPhases> times;
  uint64_t last = 0;
  void Start() { last = PhaseClock(); }
  void End(Phase p) {
    const uint64_t now = PhaseClock();
    const uint64_t d = now - last;
    times[p].push_back(d > UINT32_MAX ? UINT32_MAX : static_cast<uint32_t>(d));
    last = now;
  }
};
inline thread_local PhaseRecorder phase_recorder;

}  // namespace sam::runtime::internal

#ifdef SAM_PHASE_TIMING
#define SAM_PHASE_START() ::sam::runtime::internal::phase_recorder.Start()
#define SAM_PHASE_END(p) ::sam::runtime::internal::phase_recorder.End(::sam::runtime::p)
#else
#define SAM_PHASE_START() ((void)0)
#define SAM_PHASE_END(p) ((void)0)
#endif

#endif  // SAM_RUNTIME_SRC_PHASE_MARKS_H_
