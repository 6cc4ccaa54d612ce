#!/usr/bin/env bash
# The drafts of every policy, pinned: sam-replay --json (timings left out) for every policy
# in each configuration below, over an index built here from committed token ids
# (corpus.jsonl) and committed traces (traces.jsonl), compared with the committed goldens
# (golden/CONFIG.json). A change that moves any policy's drafts fails here; when the move is
# intended, regenerate the goldens and commit them with the change that explains it:
#
#   drafts_golden.sh BIN_DIR                 # compare (CTest: drafts_golden)
#   drafts_golden.sh BIN_DIR --regenerate    # rewrite golden/*.json
#
# Configurations: one index; a 3-shard set of the same documents; two indexes; child records;
# a shard set with child records; cross-request replay (response cache, and with its compiled
# index); and a tighter setting of the sizes and limits.
set -euo pipefail
bin=$1
regenerate=${2:-}
here=$(cd "$(dirname "$0")" && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
build() { "$bin/sam-build" -q --vocab-size 512 --corpus ids="$here/corpus.jsonl" "$@" >/dev/null; }
build -o "$tmp/one.sam"
for i in 0 1 2; do build --shard "$i/3" -o "$tmp/s.$i.sam"; done
"$bin/sam-build" --write-samset -o "$tmp/s.samset" "$tmp/s.0.sam" "$tmp/s.1.sam" "$tmp/s.2.sam" \
  >/dev/null
configs=(
  "single|--index $tmp/one.sam"
  "shard_set|--index $tmp/s.samset"
  "two_indexes|--index $tmp/s.0.sam --index $tmp/s.1.sam"
  "child_records|--index $tmp/one.sam --child-records"
  "shard_set_records|--index $tmp/s.samset --child-records"
  "cross_request|--index $tmp/one.sam --cross-request --tenant-field category"
  "cross_request_compiled|--index $tmp/one.sam --cross-request --cache-compile --tenant-field category"
  "tight|--index $tmp/one.sam --draft-size 24 --tree-width 3 --experimental calibrated_width=3 --experimental max_static_lookups=2 --experimental backoff_count=3 --experimental min_path_probability=0.05"
  "unlimited|--index $tmp/s.samset --experimental max_static_lookups=0 --experimental min_path_probability=0"
)
status=0
for entry in "${configs[@]}"; do
  name=${entry%%|*}
  read -r -a flags <<<"${entry#*|}"
  "$bin/sam-replay" --traces "$here/traces.jsonl" "${flags[@]}" --json >"$tmp/$name.raw"
  # Timings vary run to run; everything else is a function of the drafts.
  python3 - "$tmp/$name.raw" >"$tmp/$name.json" <<'PY'
import json, sys
out = json.load(open(sys.argv[1]))
for p in out["policies"]:
    for key in [k for k in p if k.startswith(("propose_us", "commit_us", "step_us"))]:
        del p[key]
print(json.dumps(out["policies"], indent=1, sort_keys=True))
PY
  if [[ $regenerate == --regenerate ]]; then
    cp "$tmp/$name.json" "$here/golden/$name.json"
    echo "wrote golden/$name.json"
  elif ! diff -u "$here/golden/$name.json" "$tmp/$name.json" >"$tmp/$name.diff"; then
    echo "FAIL: $name: the drafts moved (sam-replay ${entry#*|}):"
    head -40 "$tmp/$name.diff"
    status=1
  else
    echo "ok: $name"
  fi
done
exit $status
