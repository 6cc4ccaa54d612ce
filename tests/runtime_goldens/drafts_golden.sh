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
# Configurations: one index; a 3-shard set of the same documents; two indexes; cross-request
# replay (response cache, and with its compiled index); a tighter setting of the sizes and
# limits; no lookup limit. Child records never change drafts: each configuration but the
# compiled cache's runs again with them computed at open (sam-replay --child-records), and the
# single index and the shard set also over files built with them (sam-build --child-records,
# the RECS section); that output must equal the one without, byte for byte (no golden of its
# own; --regenerate checks it too).
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
build --child-records -o "$tmp/one_rec.sam"
for i in 0 1 2; do build --child-records --shard "$i/3" -o "$tmp/r.$i.sam"; done
"$bin/sam-build" --write-samset -o "$tmp/r.samset" "$tmp/r.0.sam" "$tmp/r.1.sam" "$tmp/r.2.sam" \
  >/dev/null
# NAME|FLAGS: compared with golden/NAME.json; NAME|FLAGS|records: also run with
# --child-records, and NAME|FLAGS|records|FILE_FLAGS also with FILE_FLAGS (indexes built with
# child records) instead of FLAGS, each compared with NAME's output.
configs=(
  "single|--index $tmp/one.sam|records|--index $tmp/one_rec.sam"
  "shard_set|--index $tmp/s.samset|records|--index $tmp/r.samset"
  "two_indexes|--index $tmp/s.0.sam --index $tmp/s.1.sam|records"
  "cross_request|--index $tmp/one.sam --cross-request --tenant-field category|records"
  "cross_request_compiled|--index $tmp/one.sam --cross-request --cache-compile --tenant-field category"
  "tight|--index $tmp/one.sam --draft-size 24 --tree-width 3 --experimental calibrated_width=3 --experimental max_static_lookups=2 --experimental backoff_count=3 --experimental min_path_probability=0.05|records"
  "unlimited|--index $tmp/s.samset --experimental max_static_lookups=0 --experimental min_path_probability=0|records"
)
# sam-replay's --json for every policy, timings left out, in $tmp/$1.json.
replay() {
  local name=$1; shift
  "$bin/sam-replay" --traces "$here/traces.jsonl" "$@" --json >"$tmp/$name.raw"
  # Timings vary run to run; everything else is a function of the drafts.
  python3 - "$tmp/$name.raw" >"$tmp/$name.json" <<'PY'
import json, sys
out = json.load(open(sys.argv[1]))
for p in out["policies"]:
    for key in [k for k in p if k.startswith(("propose_us", "commit_us", "step_us"))]:
        del p[key]
print(json.dumps(out["policies"], indent=1, sort_keys=True))
PY
}
status=0
for entry in "${configs[@]}"; do
  IFS='|' read -r name options records file_options <<<"$entry"
  read -r -a flags <<<"$options"
  replay "$name" "${flags[@]}"
  if [[ $regenerate == --regenerate ]]; then
    cp "$tmp/$name.json" "$here/golden/$name.json"
    echo "wrote golden/$name.json"
  elif ! diff -u "$here/golden/$name.json" "$tmp/$name.json" >"$tmp/$name.diff"; then
    echo "FAIL: $name: the drafts moved (sam-replay $options):"
    head -40 "$tmp/$name.diff"
    status=1
  else
    echo "ok: $name"
  fi
  if [[ $records == records ]]; then
    replay "$name.records" "${flags[@]}" --child-records
    if ! grep -q '"name": "sam-cal"' "$tmp/$name.json"; then
      echo "FAIL: $name: no sam-cal in sam-replay's output"
      status=1
    elif ! diff -u "$tmp/$name.json" "$tmp/$name.records.json" >"$tmp/$name.records.diff"; then
      echo "FAIL: $name: --child-records changed the drafts (sam-replay $options):"
      head -40 "$tmp/$name.records.diff"
      status=1
    else
      echo "ok: $name with --child-records: the same"
    fi
  fi
  if [[ -n $file_options ]]; then
    read -r -a file_flags <<<"$file_options"
    replay "$name.file_records" "${file_flags[@]}"
    if ! diff -u "$tmp/$name.json" "$tmp/$name.file_records.json" >"$tmp/$name.file.diff"; then
      echo "FAIL: $name: indexes built with --child-records changed the drafts ($file_options):"
      head -40 "$tmp/$name.file.diff"
      status=1
    else
      echo "ok: $name over indexes built with --child-records: the same"
    fi
  fi
done
exit $status
