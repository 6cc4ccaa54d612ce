#!/usr/bin/env bash
# Builds everything and runs the whole test suite, in five stages
# (docs/testing.md):
#   main  the Release build (tools/build.sh) and every CTest test
#   asan  the non-torch suite built with AddressSanitizer + UndefinedBehaviorSanitizer
#   tsan  the concurrency tests (label `tsan`) built with ThreadSanitizer
#   fuzz  fuzz_loader and fuzz_session, SAM_FUZZ_SECONDS (60) each (tools/ci/fuzz.sh)
#   slurm a distributed build as a 4-task job array on a local single-node Slurm
#         (tools/slurm/local_test.sh; skipped without slurm-wlm and munge, or root)
# SAM_STAGES picks stages (default "main asan tsan fuzz slurm"), e.g.
#   SAM_STAGES=main tools/run_tests.sh
# Build folders: ${SAM_BUILD_DIR:-build}, then -asan, -tsan, -fuzz appended.
# Tests that need ../shared/data skip with a message when it is absent
# (SAM_DATA_DIR overrides). Prints each stage's wall time at the end.
# First it installs the test stages' packages that are missing (tools/install_deps.sh test).
set -euo pipefail
cd "$(dirname "$0")/../.."
tools/install_deps.sh test
dir=${SAM_BUILD_DIR:-build}
stages=${SAM_STAGES:-main asan tsan fuzz slurm}
jobs=${SAM_JOBS:-$(nproc)}
gen=(); command -v ninja >/dev/null && gen=(-G Ninja)
for s in $stages; do
  case $s in main|asan|tsan|fuzz|slurm) ;; *) echo "run_tests.sh: unknown stage '$s' in SAM_STAGES (main asan tsan fuzz slurm)" >&2; exit 2;; esac
done

stage_main() {
  # Everything, tests included (a folder that tools/quickstart.sh configured for the main job
  # alone is configured again).
  tools/build.sh -DSAM_BUILD_TESTS=ON -DSAM_WITH_TORCH=ON -DSAM_BUILD_PYTHON=ON \
    -DSAM_BUILD_BENCHMARKS=ON
  ctest --test-dir "$dir" --output-on-failure -j "$jobs"
}

# AddressSanitizer + UBSan (UBSan findings are fatal): every test of a build
# without torch (libtorch is not built with ASan).
stage_asan() {
  local b=${dir}-asan
  [[ -f "$b/CMakeCache.txt" ]] ||
    cmake -S . -B "$b" "${gen[@]}" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DSAM_SANITIZE_ADDRESS=ON \
          -DSAM_WITH_TORCH=OFF -DSAM_BUILD_BENCHMARKS=OFF >/dev/null
  cmake --build "$b" -j "$jobs"
  ASAN_OPTIONS=detect_leaks=1:strict_string_checks=1 \
  UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
    ctest --test-dir "$b" --output-on-failure -j "$jobs"
}

# ThreadSanitizer: the tests labelled `tsan` (many sessions over one index).
stage_tsan() {
  local b=${dir}-tsan
  [[ -f "$b/CMakeCache.txt" ]] ||
    cmake -S . -B "$b" "${gen[@]}" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DSAM_SANITIZE_THREAD=ON \
          -DSAM_WITH_TORCH=OFF -DSAM_BUILD_BENCHMARKS=OFF -DSAM_BUILD_TOOLS=OFF >/dev/null
  cmake --build "$b" -j "$jobs" --target runtime_concurrency_test runtime_batch_test \
    runtime_response_cache_concurrency_test
  TSAN_OPTIONS=halt_on_error=1 ctest --test-dir "$b" -L tsan --output-on-failure
}

# libFuzzer (clang): fails on any crash, hang or sanitizer report.
stage_fuzz() {
  SAM_FUZZ_BUILD_DIR=${dir}-fuzz SAM_JOBS=$jobs tools/ci/fuzz.sh
}

# Slurm (the daemons are started and stopped by the script): sam-build of the
# main build, as job array tasks and a join step.
stage_slurm() {
  [[ -x $dir/bin/sam-build && -x $dir/bin/sam-inspect ]] || tools/build.sh
  local rc=0
  bash tools/slurm/local_test.sh "$dir/bin/sam-build" "$dir/bin/sam-inspect" || rc=$?
  if ((rc == 77)); then
    # CI installs Slurm and runs as root (tools/install_deps.sh): a skip there is a failure.
    if [[ ${CI:-} == true ]]; then echo "slurm stage: skipped, which CI does not allow"; return 1; fi
    echo "(slurm stage skipped)"; return 0
  fi
  return $rc
}

summary=()
current=
report() {
  local rc=$?
  [[ -n $current ]] && summary+=("$current FAILED after $((SECONDS - start)) s")
  if ((${#summary[@]})); then
    echo "=== stage wall times:"
    printf '  %s\n' "${summary[@]}"
  fi
  return $rc
}
trap report EXIT
for s in $stages; do
  echo "=== stage $s"
  current=$s start=$SECONDS
  "stage_$s"
  summary+=("$s $((SECONDS - start)) s")
  current=
done
echo "=== all stages passed"
