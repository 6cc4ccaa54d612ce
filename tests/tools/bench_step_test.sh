#!/usr/bin/env bash
# bench-step on a small index of ids it builds itself (its timings are figures, never
# asserted): --prewarm proposes every step once more before its timed proposal, which must
# leave the drafts alone (every row's MAT as without it, for every policy, and the figures of
# two plain runs of one seed agree on MAT too); --memory-latency prints four positive
# latencies and does not change the streams either. Lists of settings (--draft,
# --tree-width, --experimental calibrated_width=... and max_static_lookups=...) with --interleave give one row per policy and
# setting, labelled with what varies, each drafting as a run of that setting alone
# (its MAT equal to that run's; of the same stream, whose length follows the largest size).
#
#   bench_step_test.sh BIN_DIR
set -euo pipefail
bin=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
source "$(dirname "$0")/phrase_index.sh"
phrase_index "$bin" "$tmp/ids.sam" 2
run() {
  "$bin/bench-step" --index "$tmp/ids.sam" --contexts 256,2048 --steps 200 --runs 2 \
    --policies sam,sam-cal,sam-tree,pld --experimental max_static_lookups=3 --record-min-count 2 "$@"
}
# context, policy and MAT of every row (the columns: context policy p50 p99 cold MAT ...).
mats() { awk '$1 ~ /^[0-9]+$/ && NF >= 8 { print $1, $2, $6 }'; }
run >"$tmp/plain"
run --prewarm --memory-latency >"$tmp/warm"
cat "$tmp/warm"
mats <"$tmp/plain" >"$tmp/plain.mat"
mats <"$tmp/warm" >"$tmp/warm.mat"
[[ $(wc -l <"$tmp/plain.mat") -eq 8 ]] || { echo "FAIL: want 8 rows:"; cat "$tmp/plain"; exit 1; }
diff "$tmp/plain.mat" "$tmp/warm.mat" ||
  { echo "FAIL: --prewarm or --memory-latency changed the drafts (MAT above)"; exit 1; }
grep -q "^prewarmed: " "$tmp/warm" || { echo "FAIL: no 'prewarmed:' line"; exit 1; }
python3 - "$(grep '^memory latency' "$tmp/warm")" <<'PY'
import re, sys
m = re.fullmatch(r"memory latency \(ns per dependent load\): 1 MiB ([\d.]+), 4 MiB ([\d.]+), "
                 r"16 MiB ([\d.]+), 256 MiB ([\d.]+)", sys.argv[1])
assert m, sys.argv[1]
assert all(float(x) > 0 for x in m.groups()), sys.argv[1]
PY
grep -q "memory latency" "$tmp/plain" && { echo "FAIL: the latency line without --memory-latency"; exit 1; }

# Rows of lists, interleaved, against each setting run alone.
lists() {
  "$bin/bench-step" --index "$tmp/ids.sam" --contexts 2048 --steps 200 --runs 2 \
    --record-min-count 2 "$@"
}
lists --policies sam,sam-cal,sam-tree,pld --draft 24,12 --tree-width 8,3 \
  --experimental calibrated_width=8,3 --experimental max_static_lookups=1,0 --interleave >"$tmp/lists"
cat "$tmp/lists"
grep -q "^index .*24,12-node drafts, 2 warm runs (interleaved across the rows)" "$tmp/lists" ||
  { echo "FAIL: the header does not name the sizes and the interleaving"; exit 1; }
mats <"$tmp/lists" >"$tmp/lists.mat"
# sam and pld: one row per size; sam-tree: per size and width; sam-cal: per size, width, limit.
[[ $(wc -l <"$tmp/lists.mat") -eq 16 ]] || { echo "FAIL: want 16 rows"; exit 1; }
while read -r ctx label mat; do
  IFS=/ read -r policy d w l <<<"$label"
  # Alone: this policy, width and limit; both sizes still (the rows share one
  # stream, long enough for the largest size), this row's size picked.
  flags=(--policies "$policy" --draft 24,12)
  if [[ -n "$w" && $policy == sam-tree ]]; then flags+=(--tree-width "${w#w}"); fi
  if [[ -n "$w" && $policy == sam-cal ]]; then flags+=(--experimental "calibrated_width=${w#w}"); fi
  if [[ -n "$l" ]]; then flags+=(--experimental "max_static_lookups=${l#L}"); fi
  alone=$(lists "${flags[@]}" | mats | awk -v row="$policy/$d" '$2 == row { print $3 }')
  [[ "$alone" == "$mat" ]] ||
    { echo "FAIL: row $label: MAT $mat interleaved, $alone alone (${flags[*]})"; exit 1; }
done <"$tmp/lists.mat"
for label in sam/d24 sam-tree/d12/w3 sam-cal/d24/w8/L0 sam-cal/d12/w3/L1 pld/d12; do
  grep -q "^ *2048 $label " "$tmp/lists" || { echo "FAIL: no row $label"; exit 1; }
done
echo ok
