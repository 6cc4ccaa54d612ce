#!/usr/bin/env bash
# Builds everything and runs the whole test suite (CTest), then the
# concurrency tests again under ThreadSanitizer. Tests that need
# ../shared/data skip with a message when it is absent (SAM_DATA_DIR overrides).
set -euo pipefail
cd "$(dirname "$0")/.."
tools/build.sh
dir=${SAM_BUILD_DIR:-build}
ctest --test-dir "$dir" --output-on-failure -j "$(nproc)"

# ThreadSanitizer: the tests labelled `tsan` (many sessions over one index).
tsan=${dir}-tsan
gen=(); command -v ninja >/dev/null && gen=(-G Ninja)
[[ -f "$tsan/CMakeCache.txt" ]] ||
  cmake -S . -B "$tsan" "${gen[@]}" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DSAM_SANITIZE_THREAD=ON \
        -DSAM_WITH_TORCH=OFF -DSAM_BUILD_BENCHMARKS=OFF -DSAM_BUILD_TOOLS=OFF >/dev/null
cmake --build "$tsan" -j "$(nproc)" --target runtime_concurrency_test
TSAN_OPTIONS=halt_on_error=1 ctest --test-dir "$tsan" -L tsan --output-on-failure
