#!/usr/bin/env bash
# What the cross-request response cache buys, on the dev traces (GSM8K test and
# HumanEval, rendered by `sam-traces`), against two shipped indexes:
#   covered    the default preset (Alpaca, CodeAlpaca, GSM8K train): the index
#              already holds the traffic's domain (GSM8K train answers);
#   uncovered  the same corpora without GSM8K train: a general chat and code
#              index serving traffic it was not built for.
# For each, sam-cal (and the paper rule `sam`) are replayed without a cache,
# with --cross-request (one tenant per category), and with the cache also
# compiling its tenants (--cache-compile); sam-cal's three configurations are
# then compared at equal tokens verified per step (each interpolated along a
# sweep of the tuning min_path_probability) at each configuration's default.
# Prints figures; asserts nothing (the tests are runtime_response_cache_test
# and the replay tests).
#
#   tools/bench/bench_cache.sh [--data DIR] [--work DIR] [--limit N] [--bin DIR]
#     --data   corpora folder (default: $SAM_DATA_DIR, else ../shared/data)
#     --work   folder for the two indexes and the traces (default: a new
#              temporary folder, removed at the end; an existing folder is
#              reused: indexes already there are not rebuilt)
#     --limit  at most N traces per category (default: all)
#     --bin    the tools' folder (default: $SAM_BUILD_DIR/bin, else build/bin)
set -euo pipefail
cd "$(dirname "$0")/../.."
data=${SAM_DATA_DIR:-../shared/data}
work=""
limit=""
bin=${SAM_BUILD_DIR:-build}/bin
usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; }
while [[ $# -gt 0 ]]; do
  case $1 in
    --data) data=${2:?--data needs a folder}; shift 2 ;;
    --work) work=${2:?--work needs a folder}; shift 2 ;;
    --limit) limit=${2:?--limit needs a number}; shift 2 ;;
    --bin) bin=${2:?--bin needs a folder}; shift 2 ;;
    -h|--help) usage; exit 0 ;;
    *) echo "bench_cache.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
if [[ -n "$limit" && ! "$limit" =~ ^[1-9][0-9]*$ ]]; then
  echo "bench_cache.sh: --limit must be a positive whole number, not '$limit'" >&2; exit 2
fi
tok=$data/tokenizer/llama-32k.model
for f in "$tok" "$data/alpaca/alpaca_data.json" "$data/gsm8k/train.jsonl" \
         "$data/gsm8k/test.jsonl" "$data/humaneval/HumanEval.jsonl"; do
  [[ -f $f ]] || { echo "bench_cache.sh: $f: not found (--data or SAM_DATA_DIR)" >&2; exit 1; }
done
for t in sam-build sam-replay sam-traces; do
  [[ -x $bin/$t ]] || { echo "bench_cache.sh: $bin/$t: not built (tools/build.sh)" >&2; exit 1; }
done
if [[ -z "$work" ]]; then
  work=$(mktemp -d)
  trap 'rm -rf "$work"' EXIT
fi
mkdir -p "$work"

code=()
for f in "$data"/code_alpaca/*.json; do [[ -f $f ]] && code+=(--corpus "alpaca=$f"); done
if [[ ! -f $work/covered.sam ]]; then
  echo "== building the covered index (default preset)" >&2
  "$bin/sam-build" -q --data-dir "$data" --preset default -o "$work/covered.sam"
fi
if [[ ! -f $work/uncovered.sam ]]; then
  echo "== building the uncovered index (default preset without GSM8K train)" >&2
  "$bin/sam-build" -q --tokenizer "$tok" --corpus "alpaca=$data/alpaca/alpaca_data.json" \
    "${code[@]}" -o "$work/uncovered.sam"
fi
"$bin/sam-traces" --data "$data" --template raw --out "$work/traces.jsonl" \
  ${limit:+--limit "$limit"} >&2

# One replay: INDEX NAME [extra flags...] -> $work/NAME.json
replay() {
  local index=$1 name=$2
  shift 2
  "$bin/sam-replay" --index "$work/$index.sam" --tokenizer "$tok" --traces "$work/traces.jsonl" \
    --json "$@" > "$work/$name.json"
}
cache=(--cross-request --tenant-field category)
compiled=("${cache[@]}" --cache-compile)
for index in covered uncovered; do
  echo "== replaying on the $index index" >&2
  replay "$index" "$index-plain" --policy sam-cal --policy sam
  replay "$index" "$index-cache" --policy sam-cal --policy sam "${cache[@]}"
  replay "$index" "$index-compiled" --policy sam-cal --policy sam "${compiled[@]}"
  for p in 0.01 0.006 0.004 0.0025; do
    replay "$index" "$index-plain-$p" --policy sam-cal --experimental "min_path_probability=$p"
  done
  for p in 0.02 0.025 0.03 0.035 0.045; do
    replay "$index" "$index-cache-$p" --policy sam-cal --experimental "min_path_probability=$p" "${cache[@]}"
  done
  for p in 0.02 0.03 0.04 0.05 0.07; do
    replay "$index" "$index-compiled-$p" --policy sam-cal --experimental "min_path_probability=$p" "${compiled[@]}"
  done
done

python3 - "$work" <<'EOF'
import json, sys
work = sys.argv[1]
SWEEPS = {"plain": ("0.01", "0.006", "0.004", "0.0025"),
          "cache": ("0.02", "0.025", "0.03", "0.035", "0.045"),
          "compiled": ("0.02", "0.03", "0.04", "0.05", "0.07")}
LABELS = {"plain": "no cache", "cache": "cache", "compiled": "cache, compiled"}


def load(name):
    with open(f"{work}/{name}.json") as f:
        return {p["name"]: p for p in json.load(f)["policies"]}


def point(p):
    return p["tokens_per_step"], p["mat"]


def curve(index, kind):
    return sorted([point(load(f"{index}-{kind}")["sam-cal"])] +
                  [point(load(f"{index}-{kind}-{p}")["sam-cal"]) for p in SWEEPS[kind]])


def at(points, tokens):
    for (t0, m0), (t1, m1) in zip(points, points[1:]):
        if t0 <= tokens <= t1 and t1 > t0:
            return m0 + (m1 - m0) * (tokens - t0) / (t1 - t0)
    return None


print("Cross-request response cache (sam-replay --cross-request --tenant-field category;")
print("compiled: --cache-compile). MAT @ tokens verified per step, gain over no cache.")
print(f"{'index':<10} {'policy':<8} {'no cache':>15} {'cache':>15} {'gain':>7} "
      f"{'cache, compiled':>16} {'gain':>7}")
for index in ("covered", "uncovered"):
    runs = {kind: load(f"{index}-{kind}") for kind in ("plain", "cache", "compiled")}
    for name in ("sam-cal", "sam"):
        a, b, c = (runs[k][name] for k in ("plain", "cache", "compiled"))
        print(f"{index:<10} {name:<8} {a['mat']:6.3f} @ {a['tokens_per_step']:5.2f} "
              f"{b['mat']:6.3f} @ {b['tokens_per_step']:5.2f} {100 * (b['mat'] / a['mat'] - 1):+6.1f}% "
              f"{c['mat']:7.3f} @ {c['tokens_per_step']:5.2f} {100 * (c['mat'] / a['mat'] - 1):+6.1f}%")
    for kind in ("plain", "cache", "compiled"):
        cats = "  ".join(f"{cat} {v['mat']:.3f}"
                         for cat, v in sorted(runs[kind]["sam-cal"]["by_category"].items()))
        print(f"{'':<10} sam-cal by category, {LABELS[kind]}: {cats}")

print()
print("sam-cal at equal tokens per step (linear between two points of a min_path_probability")
print("sweep of each configuration)")
for index in ("covered", "uncovered"):
    curves = {kind: curve(index, kind) for kind in ("plain", "cache", "compiled")}
    for label, kind in (("no cache's default", "plain"), ("the cache's default", "cache"),
                        ("the compiled cache's default", "compiled")):
        tokens = point(load(f"{index}-{kind}")["sam-cal"])[0]
        values = {k: at(curves[k], tokens) for k in curves}
        base = values["plain"]
        parts = []
        for k in ("plain", "cache", "compiled"):
            v = values[k]
            if v is None:
                parts.append(f"{LABELS[k]} outside the sweep")
            elif k == "plain":
                parts.append(f"{LABELS[k]} {v:.3f}")
            elif base is None:
                parts.append(f"{LABELS[k]} {v:.3f}")
            else:
                parts.append(f"{LABELS[k]} {v:.3f} ({100 * (v / base - 1):+.1f}%)")
        print(f"{index:<10} at {label:<28} {tokens:5.2f} tokens per step: " + ", ".join(parts))
EOF
