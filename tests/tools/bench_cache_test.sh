#!/usr/bin/env bash
# tools/bench/bench_cache.sh end to end on a few traces: both indexes built from the
# corpora, every replay run, and the table printed with each row it promises
# (figures in range: MAT >= 1, tokens per step > 0). Bad flags exit 2.
# Needs the corpora (SAM_DATA_DIR): skipped (exit 77) without them.
set -euo pipefail
bin=$1
data=${SAM_DATA_DIR:-}
script=$(dirname "$0")/../../tools/bench/bench_cache.sh
for flag in "--limit 0" "--limit x" "--frobnicate"; do
  status=0
  # shellcheck disable=SC2086
  "$script" --bin "$bin" $flag >/dev/null 2>&1 || status=$?
  [[ $status -eq 2 ]] || { echo "FAIL: '$flag' exited $status, not 2"; exit 1; }
done
if [[ -z "$data" || ! -f "$data/tokenizer/llama-32k.model" ]]; then
  echo "SKIP: no corpora (SAM_DATA_DIR=$data): tools/bench/bench_cache.sh needs ../shared/data"
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
num = r"([\d.]+) @\s*([\d.]+)"
rows = re.findall(r"^(covered|uncovered)\s+(sam-cal|sam)\s+" + num + r"\s+" + num +
                  r"\s+[-+][\d.]+%\s+" + num, out, re.M)
assert len(rows) == 4, f"expected 4 policy rows, got {rows}"
for index, policy, *figures in rows:
    for mat, tokens in zip(figures[0::2], figures[1::2]):
        assert float(mat) >= 1 and float(tokens) > 0, (index, policy, figures)
equal = re.findall(r"^(covered|uncovered)\s+at (no cache's|the cache's|the compiled cache's) "
                   r"default", out, re.M)
assert len(equal) == 6, f"expected 6 equal-token rows, got {equal}"
print("OK")
PY
