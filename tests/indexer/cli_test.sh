#!/usr/bin/env bash
# Command-line behaviour of sam-build and sam-inspect on bad input: clear
# messages naming the file, non-zero exits, nothing half-written.
set -u
# The tools default --data-dir to $SAM_DATA_DIR; these checks give every input themselves.
unset SAM_DATA_DIR
build=$1 inspect=$2 data=${3:-}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
source "$(dirname "${BASH_SOURCE[0]}")/../common/expect.sh"
expect 0 "Examples" -- "$build" --help
expect 0 "verify" -- "$inspect" --help
expect 2 "output" -- "$build" --corpus gsm8k=x
expect 2 "" -- "$build" -o "$tmp/a.sam" --threads notanumber
expect 2 "absurd" -- "$build" -o "$tmp/a.sam" --threads 100000 --corpus ids=x
expect 2 "KIND=PATH" -- "$build" -o "$tmp/a.sam" --corpus nokind
expect 2 "no corpus" -- "$build" -o "$tmp/a.sam"
expect 1 "missing.jsonl" -- "$build" -o "$tmp/a.sam" --vocab-size 10 --corpus ids="$tmp/missing.jsonl"
expect 2 "needs a .cache. corpus" -- "$build" -o "$tmp/a.sam" --vocab-size 10 --corpus ids=x --cache-tenant t
expect 1 "cache corpora need --tokenizer" -- "$build" -o "$tmp/a.sam" --vocab-size 10 --corpus cache="$tmp/x.samc"
printf '[1,2,3]\n' > "$tmp/not-a-cache.samc"
if [[ -n "$data" && -f "$data/tokenizer/llama-32k.model" ]]; then
  expect 1 "not-a-cache.samc" -- "$build" -q -o "$tmp/a.sam" --tokenizer "$data/tokenizer/llama-32k.model" \
    --corpus cache="$tmp/not-a-cache.samc"
  [[ -e "$tmp/a.sam" ]] && { echo "FAIL: output left behind after a bad cache file"; fail=1; }
fi
printf '[1,2,3]\n[4, "x"]\n' > "$tmp/bad.jsonl"
expect 1 "bad.jsonl" -- "$build" -q -o "$tmp/bad.sam" --vocab-size 10 --corpus ids="$tmp/bad.jsonl"
[[ -e "$tmp/bad.sam" ]] && { echo "FAIL: half-written output left behind"; fail=1; }
ls "$tmp" | grep -q tmp- && { echo "FAIL: temporary file left behind"; fail=1; }
printf '[1,2,3]\n[2,3,4]\n' > "$tmp/ok.jsonl"
expect 0 "wrote" -- "$build" -q -o "$tmp/ok.sam" --vocab-size 10 --corpus ids="$tmp/ok.jsonl"
expect 0 "documents 2" -- "$inspect" --verify "$tmp/ok.sam"
expect 0 '"format_version"' -- "$inspect" --json "$tmp/ok.sam"
# The 64-bit paths on a small corpus (the library tests compare them with the narrow build).
expect 0 "wrote" -- "$build" -q --wide-ids -o "$tmp/wide.sam" --vocab-size 10 --corpus ids="$tmp/ok.jsonl"
expect 0 "verify: OK" -- "$inspect" --verify "$tmp/wide.sam"
expect 0 "wrote" -- "$build" -q --min-width 40 -o "$tmp/w40.sam" --vocab-size 10 --corpus ids="$tmp/ok.jsonl"
expect 0 "state 40, position 40, clone length 40, count 40" -- "$inspect" --verify "$tmp/w40.sam"
expect 0 "verify: OK" -- "$inspect" --verify "$tmp/w40.sam"
# Memory-bounded builds: shards and a manifest, which sam-inspect reads and verifies.
python3 -c "
import random
random.seed(3)
for i in range(6000): print([random.randrange(30) for _ in range(random.randrange(1, 150))])
" > "$tmp/many.jsonl"
expect 2 "positive size" -- "$build" -q --max-memory 12Q -o "$tmp/m.sam" --vocab-size 30 --corpus ids="$tmp/many.jsonl"
expect 1 "too small" -- "$build" -q --max-memory 1M -o "$tmp/m.sam" --vocab-size 30 --corpus ids="$tmp/many.jsonl"
# (Budgets are planned from the process's RSS, which AddressSanitizer's quarantine keeps high.)
if grep -q __asan_init "$build"; then
  echo "skip: --max-memory shard sets under AddressSanitizer"
else
  expect 0 "shard set: " -- "$build" -q --max-memory 14M -o "$tmp/m.sam" --vocab-size 30 --corpus ids="$tmp/many.jsonl"
  expect 0 "verify: OK (manifest checksum" -- "$inspect" --verify "$tmp/m.samset"
  expect 0 '"kind": "shard set"' -- "$inspect" --json "$tmp/m.samset"
  cp "$tmp/ok.sam" "$tmp/m.1.sam"
  expect 1 "m.1.sam: shard 1 of" -- "$inspect" "$tmp/m.samset"
  rm "$tmp/m.1.sam"
  expect 1 "m.1.sam: shard 1 of .*: missing" -- "$inspect" "$tmp/m.samset"
fi
expect 0 "wrote $tmp/big.sam" -- "$build" -q --max-memory 4G -o "$tmp/big.sam" --vocab-size 30 --corpus ids="$tmp/many.jsonl"
# Partitioned builds: --shard I/N, then --write-samset.
expect 2 "expects I/N" -- "$build" -q --shard 3 -o "$tmp/s.sam" --vocab-size 30 --corpus ids="$tmp/many.jsonl"
expect 2 "0 <= I < N" -- "$build" -q --shard 3/3 -o "$tmp/s.sam" --vocab-size 30 --corpus ids="$tmp/many.jsonl"
expect 0 "wrote" -- "$build" -q --shard 0/2 -o "$tmp/s.0.sam" --vocab-size 30 --corpus ids="$tmp/many.jsonl"
expect 0 "wrote" -- "$build" -q --shard 1/2 -o "$tmp/s.1.sam" --vocab-size 30 --corpus ids="$tmp/many.jsonl"
expect 1 "missing" -- "$build" --write-samset -o "$tmp/s.samset" "$tmp/s.1.sam"
expect 0 "wrote $tmp/s.samset (2 shards)" -- "$build" --write-samset -o "$tmp/s.samset" "$tmp/s.1.sam" "$tmp/s.0.sam"
expect 0 "documents 6000" -- "$inspect" --verify "$tmp/s.samset"
expect 2 "above 57" -- "$build" -q --min-width 58 -o "$tmp/w58.sam" --vocab-size 10 --corpus ids="$tmp/ok.jsonl"
head -c 300 "$tmp/ok.sam" > "$tmp/trunc.sam"
expect 1 "truncated" -- "$inspect" "$tmp/trunc.sam"
: > "$tmp/empty.sam"
expect 1 "empty" -- "$inspect" "$tmp/empty.sam"
echo "hello" > "$tmp/text.sam"
expect 1 "not a SAM index" -- "$inspect" "$tmp/text.sam"
expect 1 "cannot" -- "$inspect" "$tmp/nonexistent.sam"
python3 - "$tmp/ok.sam" "$tmp/flip.sam" <<'PY' 2>/dev/null || cp "$tmp/ok.sam" "$tmp/flip.sam"
import sys
b = bytearray(open(sys.argv[1], 'rb').read()); b[8192 + 3] ^= 0xFF; open(sys.argv[2], 'wb').write(b)
PY
expect 1 "checksum" -- "$inspect" --verify "$tmp/flip.sam"
# Streams as corpora: a pipe (process substitution) is read once; skipping every record says why.
expect 0 "documents 2" -- "$build" -q -o "$tmp/pipe.sam" --vocab-size 10 --corpus ids=<(cat "$tmp/ok.jsonl")
printf '[1,99]\n[-1]\n' > "$tmp/allbad.jsonl"
expect 1 "skipped 2 of 2 records (bad value: 2), e.g. $tmp/allbad.jsonl: line 1" -- "$build" -q -o "$tmp/allbad.sam" --skip-bad --vocab-size 10 --corpus ids="$tmp/allbad.jsonl"
expect 1 "is a directory" -- "$build" -q -o "$tmp/dir.sam" --vocab-size 10 --corpus ids="$tmp"
if [[ -n "$data" && -f "$data/tokenizer/llama-32k.model" ]]; then
  # --preset default on a folder laid out as fetch.sh lays it out, without the optional HAGRID.
  lay=$tmp/layout
  mkdir -p "$lay/alpaca" "$lay/code_alpaca" "$lay/gsm8k" "$lay/python18k"
  echo '[{"instruction": "a", "output": "b"}]' > "$lay/alpaca/alpaca_data.json"
  echo '[{"instruction": "c", "output": "d"}]' > "$lay/code_alpaca/code_alpaca_2k.json"
  echo '{"question": "q", "answer": "a"}' > "$lay/gsm8k/train.jsonl"
  echo '{"instruction": "i", "input": "", "output": "o", "prompt": "p"}' > "$lay/python18k/train.jsonl"
  expect 0 '"kind": "python18k"' -- "$build" -q --json --data-dir "$lay" --preset default --tokenizer "$data/tokenizer/llama-32k.model" -o "$tmp/preset.sam"
  expect 0 "note: preset 'default': optional hagrid/train.jsonl not found" -- "$build" -q --data-dir "$lay" --preset default --tokenizer "$data/tokenizer/llama-32k.model" -o "$tmp/preset.sam"
  rm "$lay/gsm8k/train.jsonl"
  expect 1 "needs gsm8k/train.jsonl, missing" -- "$build" -q --data-dir "$lay" --preset default --tokenizer "$data/tokenizer/llama-32k.model" -o "$tmp/preset2.sam"
  expect 1 "not a SentencePiece model" -- "$build" -o "$tmp/t.sam" --tokenizer "$data/gsm8k/test.jsonl" --corpus gsm8k="$data/gsm8k/test.jsonl"
  # --max-memory holds with the accelerator sections, child records (--child-records) included:
  # every shard's peak RSS (the kernel's VmHWM, which sam-build prints per shard) stays within
  # the bound. The sections are computed after a shard's construction, from the pages of the
  # file just written.
  if grep -q __asan_init "$build"; then
    echo "skip: the --max-memory bound under AddressSanitizer"
  else
    bound=165  # MiB
    for records in "" --child-records; do
      bounded=$("$build" --data-dir "$data" --preset default --max-memory ${bound}M $records -o "$tmp/bounded.sam" 2>&1)
      status=$?
      peaks=$(grep -E '^  bounded\.[0-9]+\.sam .*peak RSS' <<<"$bounded" | sed -E 's/.*peak RSS +([0-9.]+) MiB.*/\1/')
      if [[ $status -ne 0 || $(wc -l <<<"$peaks") -lt 2 ]]; then
        echo "FAIL: the bounded build of the default preset $records (exit $status) did not write a shard set:"
        echo "$bounded" | tail -5
        fail=1
      elif grep -q "exceeded --max-memory" <<<"$bounded" || awk -v bound=$bound '$1 > bound { bad = 1 } END { exit !bad }' <<<"$peaks"; then
        echo "FAIL: a shard's peak RSS exceeded --max-memory ${bound}M $records:"
        grep -E "peak RSS|exceeded" <<<"$bounded"
        fail=1
      fi
      rm -f "$tmp"/bounded.*
    done
  fi
fi
[[ $fail -eq 0 ]] && echo "all CLI checks passed"
exit $fail
