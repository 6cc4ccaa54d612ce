#!/usr/bin/env bash
# The libFuzzer stage (docs/testing.md): builds fuzz_loader and fuzz_session
# with clang (ASan + UBSan + coverage) into ${SAM_FUZZ_BUILD_DIR:-build-fuzz}
# and runs each from its committed seed corpus for SAM_FUZZ_SECONDS (60).
# Fails on any crash, sanitizer report, hang (an input running longer than
# SAM_FUZZ_TIMEOUT seconds, 10) or out-of-memory; the offending input is
# saved under BUILD_DIR/fuzz-artifacts/ and the command that reproduces it
# is printed.
#
#   tools/ci/fuzz.sh                          # both fuzzers, 60 s each
#   SAM_FUZZ_SECONDS=600 tools/ci/fuzz.sh fuzz_session
#   SAM_FUZZ_SEED=0 tools/ci/fuzz.sh          # 0: a random seed (the default is 1)
set -euo pipefail
cd "$(dirname "$0")/../.."
dir=${SAM_FUZZ_BUILD_DIR:-build-fuzz}
seconds=${SAM_FUZZ_SECONDS:-60}
timeout=${SAM_FUZZ_TIMEOUT:-10}
seed=${SAM_FUZZ_SEED:-1}
targets=("$@")
((${#targets[@]})) || targets=(fuzz_loader fuzz_session)

cxx=${SAM_FUZZ_CXX:-$(command -v clang++-14 || command -v clang++ || true)}
cc=${SAM_FUZZ_CC:-$(command -v clang-14 || command -v clang || true)}
if [[ -z $cxx || -z $cc ]]; then
  echo "fuzz.sh: clang is not installed (tools/install_deps.sh installs clang-14 and libfuzzer-14-dev)" >&2
  exit 1
fi
gen=(); command -v ninja >/dev/null && gen=(-G Ninja)
[[ -f "$dir/CMakeCache.txt" ]] ||
  cmake -S . -B "$dir" "${gen[@]}" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
        -DCMAKE_CXX_COMPILER="$cxx" -DCMAKE_C_COMPILER="$cc" -DSAM_BUILD_FUZZERS=ON \
        -DSAM_WITH_TORCH=OFF -DSAM_BUILD_BENCHMARKS=OFF -DSAM_BUILD_TOOLS=OFF >/dev/null
cmake --build "$dir" -j "${SAM_JOBS:-$(nproc)}" --target "${targets[@]}"

artifacts=$dir/fuzz-artifacts
mkdir -p "$artifacts"
status=0
for t in "${targets[@]}"; do
  seeds=tests/fuzz/corpus_${t#fuzz_}
  # New inputs go to a scratch directory, so every run starts from the
  # committed corpus alone.
  work=$dir/fuzz-work/$t
  rm -rf "$work" && mkdir -p "$work"
  log=$dir/fuzz-$t.log
  echo "== $t: $seconds s from $seeds (seed $seed, timeout $timeout s), log $log"
  rc=0
  "$dir/bin/$t" "$work" "$seeds" -dict=tests/fuzz/index.dict \
      -max_total_time="$seconds" -timeout="$timeout" -seed="$seed" -rss_limit_mb=2048 \
      -artifact_prefix="$artifacts/$t-" -print_final_stats=1 >"$log" 2>&1 || rc=$?
  grep -E '^(INFO: seed corpus|#[0-9]+[[:space:]]+(INITED|DONE))|^stat::(number_of_executed_units|average_exec_per_sec|new_units_added|peak_rss_mb)' "$log" || true
  if ((rc != 0)); then
    status=1
    echo "fuzz.sh: $t FAILED (exit $rc); the end of its log:" >&2
    tail -n 60 "$log" >&2
    for a in $(grep -oE "Test unit written to [^ ]+" "$log" | awk '{print $5}'); do
      echo "fuzz.sh: reproduce with: $dir/bin/$t $a   (or ${dir%-fuzz}-asan/bin/${t}_replay $a)" >&2
    done
  fi
done
exit $status
