#!/usr/bin/env bash
# tools/bench_cache.sh end to end on a few traces: both indexes built from the
# corpora, every replay run, and the table printed with each row it promises
# (figures in range: MAT >= 1, tokens per step > 0). Bad flags exit 2.
# Needs the corpora (SAM_DATA_DIR): skipped (exit 77) without them.
set -euo pipefail
bin=$1
data=${SAM_DATA_DIR:-}
script=$(dirname "$0")/../../tools/bench_cache.sh
for flag in "--limit 0" "--limit x" "--frobnicate"; do
  status=0
  # shellcheck disable=SC2086
  "$script" --bin "$bin" $flag >/dev/null 2>&1 || status=$?
  [[ $status -eq 2 ]] || { echo "FAIL: '$flag' exited $status, not 2"; exit 1; }
done
if [[ -z "$data" || ! -f "$data/tokenizer/llama-32k.model" ]]; then
  echo "SKIP: no corpora (SAM_DATA_DIR=$data): tools/bench_cache.sh needs ../shared/data"
  exit 77
fi
status=0
"$script" --bin "$bin" --data "$data" --limit 25 >"${TMPDIR:-/tmp}/bench_cache_test.$$" 2>&1 \
  || status=$?
out=$(cat "${TMPDIR:-/tmp}/bench_cache_test.$$")
rm -f "${TMPDIR:-/tmp}/bench_cache_test.$$"
[[ $status -eq 0 ]] || { echo "$out"; echo "FAIL: bench_cache.sh exited $status"; exit 1; }
echo "$out"
python3 - "$out" <<'PY'
import re, sys
out = sys.argv[1]
rows = re.findall(r"^(covered|uncovered)\s+(sam-cal|sam)\s+([\d.]+) @\s*([\d.]+)\s+([\d.]+) @\s*([\d.]+)",
                  out, re.M)
assert len(rows) == 4, f"expected 4 policy rows, got {rows}"
for index, policy, m0, t0, m1, t1 in rows:
    assert float(m0) >= 1 and float(m1) >= 1, (index, policy)
    assert float(t0) > 0 and float(t1) > 0, (index, policy)
equal = re.findall(r"^(covered|uncovered)\s+at (the cache's|no cache's) default", out, re.M)
assert len(equal) == 4, f"expected 4 equal-token rows, got {equal}"
print("OK")
PY
