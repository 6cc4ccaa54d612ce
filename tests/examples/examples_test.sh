#!/usr/bin/env bash
# The examples (examples/) against an independent oracle: each prints the MAT of greedy drafting
# along a reference continuation, which must equal sam-replay's MAT (and step count) for the same
# prompt and output under the default policy, sam-cal.
#
#   examples_test.sh WORK SAM_BUILD SAM_INSPECT SAM_REPLAY PROGRAM...
#
# WORK: a scratch folder (recreated). Each PROGRAM is a command line in one word with ':' for
# spaces (e.g. "/usr/bin/python3:examples/python/draft.py"); it is run as PROGRAM INDEX REFERENCE.
# The index is built from a random ids corpus; the references are three prompt/continuation
# pairs: one that follows a corpus document, one of random tokens, one that repeats itself.
set -euo pipefail
work=$1 build=$2 inspect=$3 replay=$4
shift 4
rm -rf "$work" && mkdir -p "$work"
cd "$work"

# 400 documents of ids below 50, lengths 1-150, from a fixed seed.
awk 'BEGIN { srand(11); for (d = 0; d < 400; ++d) { n = 1 + int(rand() * 150); s = "[";
       for (i = 0; i < n; ++i) s = s (i ? "," : "") int(rand() * 50); print s "]" } }' > docs.jsonl
"$build" -q --vocab-size 50 --corpus ids=docs.jsonl -o index.sam > /dev/null
bos=$("$inspect" --json index.sam | sed -n 's/^  "bos_id": \([0-9]*\),$/\1/p')

# reference NAME PROMPT CONTINUATION: the examples' two-line file and sam-replay's ids trace.
reference() {
  local p="${bos:+$bos }$2"
  printf '%s\n%s\n' "$p" "$3" > "$1.txt"
  printf '{"id":"%s","prompt_ids":[%s],"output_ids":[%s]}\n' "$1" "${p// /,}" "${3// /,}" > "$1.jsonl"
}
doc=$(awk 'length($0) > 300 { gsub(/[][]/, ""); gsub(/,/, " "); print; exit }' docs.jsonl)
read -ra t <<< "$doc"
reference follows "${t[*]:0:20}" "${t[*]:20} 3 1 4 1 5 9 2 6 5 3 5 8 9 7 9 3 2 3 8 4 6 2 6 4 3 3 8 3 2 7 9 5"
reference random "7 7 7" "$(awk 'BEGIN { srand(5); for (i = 0; i < 80; ++i) printf "%s%d", (i ? " " : ""), int(rand() * 50) }')"
reference repeats "1 2 3" "$(for i in 1 2 3 4 5 6; do printf '11 12 13 14 15 16 17 18 19 20 21 %d ' "$i"; done | sed 's/ $//')"

status=0
for name in follows random repeats; do
  expected=$("$replay" --index index.sam --traces "$name.jsonl" --policy sam-cal --json | python3 -c '
import json, sys
p = json.load(sys.stdin)["policies"][0]
print("MAT %.3f (%d tokens in %d steps)" % (p["mat"], p["tokens"], p["steps"]))')
  for program in "$@"; do
    got=$(${program//:/ } index.sam "$name.txt") || { echo "FAIL: ${program//:/ } ($name) exited $?"; status=1; continue; }
    if [[ $got == "$expected" ]]; then
      echo "ok: ${program##*/} ($name): $got"
    else
      echo "FAIL: ${program//:/ } ($name): '$got', sam-replay: '$expected'"
      status=1
    fi
  done
done
exit $status
