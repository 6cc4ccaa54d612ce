#!/usr/bin/env bash
# Instructions per drafting step (Session::ProposeInto + Session::Commit,
# everything they call) on bench-step's streams, counted by valgrind's
# callgrind. The count does not move with the machine's load, unlike
# bench-step's timings (10-30% apart between invocations on a shared
# machine), so it compares two builds, or two settings, of the same policy
# exactly. It is not a time: cache misses cost nothing in it, so a change of
# memory layout still needs bench-step (alternating builds, several rounds).
# Run one context and one policy per invocation: all steps are counted
# together. Prints figures; asserts nothing.
#
#   tools/bench/bench_step_ir.sh [--bin DIR] [--keep FILE] [--cache-sim [--ll SPEC]] -- BENCH-STEP-FLAGS...
#     --bin        the tools' folder (default: $SAM_BUILD_DIR/bin, else build/bin)
#     --keep       also keep callgrind's profile in FILE (callgrind_annotate FILE;
#                  with --cache-sim: callgrind_annotate --show=Ir,DLmr --sort=DLmr FILE)
#     --cache-sim  also simulate the caches: data reads that miss the first
#                  level (D1) and the last level (LL) per step, and which
#                  source lines they come from (--keep). Repeatable within a
#                  percent or two, not exactly: the simulated caches see
#                  addresses (the stack's move with the environment's size)
#                  and what bench-step does between steps (sorting its
#                  timings, which differ run to run). And a model: software
#                  prefetches are not simulated (a prefetched read counts as
#                  a miss), nor is the hardware prefetcher, so it says where
#                  a step's misses are, not what they cost. Add bench-step's
#                  --flush-mib to start each run cold.
#     --ll SPEC    the simulated last level, SIZE,ASSOCIATIVITY,LINE (default
#                  33554432,16,64: the 32 MiB L3 of this project's machines;
#                  valgrind's own guess on a virtual machine can be far off)
# Example (the figures in docs/runtime.md; 20-40 s):
#   tools/bench/bench_step_ir.sh -- --index chat.sam --traces dev.jsonl \
#     --tokenizer llama-32k.model --contexts 1024 --steps 1000 --runs 1 \
#     --load read --policies sam-cal --experimental max_static_lookups=3 --draft 24
set -euo pipefail
cd "$(dirname "$0")/../.."
bin=${SAM_BUILD_DIR:-build}/bin
keep=""
cache_sim=0
ll=33554432,16,64
usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; }
while [[ $# -gt 0 ]]; do
  case $1 in
    --bin) bin=${2:?--bin needs a folder}; shift 2 ;;
    --keep) keep=${2:?--keep needs a file}; shift 2 ;;
    --cache-sim) cache_sim=1; shift ;;
    --ll)
      ll=${2:-}
      if [[ ! $ll =~ ^[0-9]+,[0-9]+,[0-9]+$ ]]; then
        echo "bench_step_ir.sh: --ll needs SIZE,ASSOCIATIVITY,LINE in bytes (e.g. 33554432,16,64), not '$ll'" >&2
        exit 2
      fi
      shift 2 ;;
    -h|--help) usage; exit 0 ;;
    --) shift; break ;;
    *) echo "bench_step_ir.sh: unknown argument '$1' (bench-step's flags go after --; see --help)" >&2
       exit 2 ;;
  esac
done
if [[ $# -eq 0 ]]; then
  echo "bench_step_ir.sh: no bench-step flags after -- (at least --index FILE; see --help)" >&2
  exit 2
fi
if [[ ! -x "$bin/bench-step" ]]; then
  echo "bench_step_ir.sh: $bin/bench-step not found (build it, or give --bin DIR)" >&2
  exit 2
fi
if ! command -v valgrind >/dev/null; then
  echo "bench_step_ir.sh: valgrind not found (Debian: apt-get install valgrind)" >&2
  exit 2
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
status=0
sim=()
((cache_sim)) && sim=(--cache-sim=yes "--LL=$ll")
valgrind --tool=callgrind "${sim[@]}" --callgrind-out-file="$work/profile" \
  --toggle-collect='sam::runtime::Session::ProposeInto*' \
  --toggle-collect='sam::runtime::Session::Commit*' \
  "$bin/bench-step" "$@" >"$work/log" 2>&1 || status=$?
if [[ $status -ne 0 ]]; then
  grep -v '^==[0-9]*==' "$work/log" >&2 || true
  echo "bench_step_ir.sh: bench-step exited $status under valgrind" >&2
  exit 1
fi
echo "bench-step's output (its times ran under valgrind, 20-50x slow: ignore them):"
grep -v '^==[0-9]*==' "$work/log" | sed 's/^/  /'
[[ -n "$keep" ]] && cp "$work/profile" "$keep"
# Steps: the calls of Session::Commit recorded in the profile (callgrind
# names a function in full once, then by its number).
python3 - "$work/profile" <<'PY'
import re, sys
names, steps, totals, events, pending = {}, 0, None, [], None
for line in open(sys.argv[1], errors="replace"):
    m = re.match(r"c?fn=\((\d+)\)(?: (.*))?", line)
    if m:
        if m.group(2): names[m.group(1)] = m.group(2)
        pending = m.group(1) if line.startswith("cfn=") else None
        continue
    m = re.match(r"calls=(\d+) ", line)
    if m and pending is not None:
        if names.get(pending, "").startswith("sam::runtime::Session::Commit("):
            steps += int(m.group(1))
        pending = None
        continue
    m = re.match(r"events: (.*)", line)
    if m: events = m.group(1).split()
    m = re.match(r"(?:summary|totals): ([\d ]+)$", line)
    if m: totals = dict(zip(events, (int(x) for x in m.group(1).split())))
if not steps or not totals or "Ir" not in totals:
    sys.exit("bench_step_ir.sh: no Session::Commit calls in the profile "
             "(a policy of bench-step's sessions? pld has none)")
total = totals["Ir"]
print(f"bench_step_ir: {total:,} instructions in {steps:,} steps (Session::Commit calls): "
      f"{total // steps:,} per step")
if "DLmr" in totals:
    print(f"bench_step_ir: simulated data read misses per step: "
          f"{totals['D1mr'] / steps:.2f} first level, {totals['DLmr'] / steps:.2f} last level")
PY
