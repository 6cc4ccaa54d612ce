#!/usr/bin/env bash
# Resident memory of one process, then of two of the same command running at
# once: what a second process that opens the same index adds. Samples
# /proc/PID/smaps_rollup every 0.2 s and prints, of the samples taken while
# every process was alive, the one of largest total Rss (their memory at its
# fullest: after preparation, during the work). Rss counts every page a
# process maps; Pss shares each page among the processes that map it (a page
# of the index file mapped by two counts half in each); Private_Dirty is what
# a process wrote for itself (preparation, sessions). Prints figures in kB; asserts nothing. The command
# should run for a few seconds at least (sam-replay over the dev traces does).
#
#   tools/bench/memory.sh -- COMMAND [ARGS...]
# Output: lines "one PID rss pss private_dirty" and, twice, "two PID rss pss private_dirty".
set -euo pipefail
usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; }
case ${1:-} in
  -h|--help) usage; exit 0 ;;
  --) shift ;;
  *) echo "memory.sh: the command goes after -- (see --help)" >&2; exit 2 ;;
esac
[[ $# -gt 0 ]] || { echo "memory.sh: no command after --" >&2; exit 2; }

# One sample of a process: "rss pss private_dirty" in kB, nothing once it has exited.
sample() {
  awk '/^Rss:/ {r = $2} /^Pss:/ {p = $2} /^Private_Dirty:/ {d = $2} END {if (r != "") print r, p, d}' \
    "/proc/$1/smaps_rollup" 2>/dev/null || true
}

# Samples the given processes until the first exits; prints "LABEL PID rss pss dirty" per
# process, from the complete sample (every process alive) whose total Rss was largest: their
# memory at its fullest, before any has begun to exit (a process that exits unmaps its pages,
# and the other's Pss then counts them whole).
watch() {
  local label=$1; shift
  local best=() now pid s total best_total=-1
  while :; do
    now=() total=0
    for pid in "$@"; do
      s=$(sample "$pid")
      [[ -n $s ]] || { printf '%s\n' "${best[@]}"; return; }
      now+=("$label $pid $s")
      total=$((total + ${s%% *}))
    done
    if ((total > best_total)); then best=("${now[@]}") best_total=$total; fi
    sleep 0.2
  done
}

# exec: $! is the command's own process, not a shell waiting for it.
(exec "$@" > /dev/null) & a=$!
watch one "$a"
wait "$a"
(exec "$@" > /dev/null) & a=$!
(exec "$@" > /dev/null) & b=$!
watch two "$a" "$b"
wait "$a" "$b"
