#!/usr/bin/env bash
# Safety of the tools' files beyond -o itself (tools_cli_test.sh covers -o):
#   - the files a --max-memory build derives from -o (shards OUT.K.sam, manifest OUT.samset, OUT.sam)
#     are checked like -o before any work;
#   - rebuilding a shard set is atomic: an error or a signal leaves the previous set usable, and the
#     error cleanup removes only what the build created;
#   - opening never blocks: every file kind a tool reads, given as a FIFO without a writer, is
#     refused at once (each run is bounded by `timeout`: a hang fails the check instead of the suite);
#   - empty flag values and flag conflicts are usage errors (exit 2).
#
#   tools_safety_test.sh BIN_DIR [DATA_DIR]
set -u
# The tools default --data-dir to $SAM_DATA_DIR; these checks give every input themselves.
unset SAM_DATA_DIR
bin=$1 data=${2:-}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0
FAIL() { echo "FAIL: $*"; fail=1; }
build=$bin/sam-build inspect=$bin/sam-inspect replay=$bin/sam-replay gen=$bin/sam-generate

# expect CODE PATTERN -- program args...: exit status CODE (within 20 s) and output matching PATTERN.
expect() {
  local code=$1 pattern=$2; shift 3
  local rc
  timeout 20 "$@" >"$tmp/out" 2>"$tmp/err" </dev/null; rc=$?
  if [[ $rc -eq 124 ]]; then FAIL "'$*' did not finish in 20 s (blocked?)"; return; fi
  if [[ $rc -ne $code ]] || ! cat "$tmp/out" "$tmp/err" | grep -q -- "$pattern"; then
    FAIL "'$*' exited $rc (want $code, output matching '$pattern'): $(cat "$tmp/out" "$tmp/err")"
    return
  fi
  echo "ok: $* -> $rc"
}
sum() { sha256sum "$1" | cut -d' ' -f1; }
sums() { for f in "$@"; do sum "$f"; done; }

corpus() {  # corpus SEED FILE: ~6000 documents of ids below 30 (6 shards at --max-memory 14M)
  python3 -c "
import random, sys
random.seed(int(sys.argv[1]))
for i in range(6000): print([random.randrange(30) for _ in range(random.randrange(1, 150))])
" "$1" > "$2"
}
corpus 3 "$tmp/many.jsonl"
corpus 4 "$tmp/other.jsonl"
mm=(--max-memory 14M --vocab-size 30)
asan=0
grep -q __asan_init "$build" && asan=1  # budgets follow the RSS, which ASan's quarantine keeps high

# ---------------------------------------------------------------- derived outputs (--max-memory)
# The corpus named like a shard of the output: refused before any work, untouched.
cp "$tmp/many.jsonl" "$tmp/f.1.sam"
before=$(sum "$tmp/f.1.sam")
expect 2 "f.1.sam is the input" -- "$build" -q "${mm[@]}" -o "$tmp/f.sam" --corpus ids="$tmp/f.1.sam"
[[ "$(sum "$tmp/f.1.sam")" == "$before" ]] || FAIL "a shard replaced the corpus"
[[ -e "$tmp/f.0.sam" ]] && FAIL "shard 0 was written before the check"
cp "$tmp/many.jsonl" "$tmp/g.0.sam"
expect 2 "g.0.sam is the input" -- "$build" -q "${mm[@]}" -o "$tmp/g.samset" --corpus ids="$tmp/g.0.sam"
# A directory, a FIFO, a symbolic link where a shard or the manifest goes: refused, kept.
mkdir "$tmp/d.1.sam"
expect 2 "d.1.sam is a directory" -- "$build" -q "${mm[@]}" -o "$tmp/d.sam" --corpus ids="$tmp/many.jsonl"
[[ -d "$tmp/d.1.sam" ]] || FAIL "the directory d.1.sam was removed"
[[ -e "$tmp/d.0.sam" ]] && FAIL "shard 0 was written before the check"
mkfifo "$tmp/p.samset"
expect 2 "p.samset exists and is not a regular file" -- "$build" -q "${mm[@]}" -o "$tmp/p.sam" --corpus ids="$tmp/many.jsonl"
[[ -p "$tmp/p.samset" ]] || FAIL "the FIFO p.samset was replaced"
echo keep > "$tmp/target"
ln -s "$tmp/target" "$tmp/l.3.sam"
expect 2 "l.3.sam is a symbolic link" -- "$build" -q "${mm[@]}" -o "$tmp/l.sam" --corpus ids="$tmp/many.jsonl"
[[ -L "$tmp/l.3.sam" && "$(cat "$tmp/target")" == keep ]] || FAIL "the link l.3.sam or its target changed"
# -o X.samset that fits one file writes X.sam: checked too.
printf '[1,2,3]\n' > "$tmp/small.jsonl"
ln -s "$tmp/target" "$tmp/one.sam"
expect 2 "one.sam is a symbolic link" -- "$build" -q --max-memory 4G --vocab-size 30 -o "$tmp/one.samset" --corpus ids="$tmp/small.jsonl"

# ---------------------------------------------------------------- atomic shard-set rebuilds
if [[ $asan -eq 1 ]]; then
  echo "skip: --max-memory shard sets under AddressSanitizer"
else
  expect 0 "shard set: " -- "$build" -q "${mm[@]}" -o "$tmp/v.samset" --corpus ids="$tmp/many.jsonl"
  shards=("$tmp"/v.[0-9]*.sam)
  [[ ${#shards[@]} -ge 3 ]] || FAIL "want at least 3 shards, got ${#shards[@]}"
  old=$(sums "$tmp/v.samset" "${shards[@]}")
  # A rebuild that fails after writing shards (a bad record in its second corpus, read after the
  # first was built into shards): the old set is intact.
  { head -n 100 "$tmp/many.jsonl"; echo '[1, "x"]'; } > "$tmp/bad-end.jsonl"
  expect 1 "bad-end.jsonl" -- "$build" -q "${mm[@]}" -o "$tmp/v.samset" --corpus ids="$tmp/other.jsonl" --corpus ids="$tmp/bad-end.jsonl"
  [[ "$(sums "$tmp/v.samset" "${shards[@]}")" == "$old" ]] || FAIL "a failed rebuild changed the old set"
  expect 0 "verify: OK" -- "$inspect" --verify "$tmp/v.samset"
  ls "$tmp" | grep -q -e '\.new-' -e '\.tmp-' && FAIL "a failed rebuild left files: $(ls "$tmp")"
  # A signal after a new shard is complete (the hook pauses at the 3rd temporary file: shard 0's
  # write file, shard 0 itself under its temporary name, then shard 1's write file).
  set -m
  SAM_TEST_PAUSE_WRITING=3 "$build" -q "${mm[@]}" -o "$tmp/v.samset" --corpus ids="$tmp/other.jsonl" \
    >/dev/null 2>"$tmp/paused.err" </dev/null &
  pid=$!
  for _ in $(seq 600); do  # bounded wait (60 s): not a timing assertion
    grep -q "test hook: paused writing" "$tmp/paused.err" && break
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
  done
  grep -q "paused writing $tmp/v.1.sam" "$tmp/paused.err" ||
    FAIL "the hook did not pause at shard 1: $(cat "$tmp/paused.err")"
  kill -s TERM "$pid"
  { wait "$pid"; } 2>/dev/null
  set +m
  [[ "$(sums "$tmp/v.samset" "${shards[@]}")" == "$old" ]] || FAIL "a signalled rebuild changed the old set"
  expect 0 "verify: OK" -- "$inspect" --verify "$tmp/v.samset"
  ls "$tmp" | grep -q -e '\.new-' -e '\.tmp-' && FAIL "a signalled rebuild left files: $(ls "$tmp")"
  # A rebuild that succeeds replaces the set as a whole.
  expect 0 "shard set: " -- "$build" -q "${mm[@]}" -o "$tmp/v.samset" --corpus ids="$tmp/other.jsonl"
  expect 0 "verify: OK" -- "$inspect" --verify "$tmp/v.samset"
  [[ "$(sums "$tmp/v.samset" "${shards[@]}")" != "$old" ]] || FAIL "the rebuild did not replace the set"
fi

# ---------------------------------------------------------------- manifests naming a file twice
# reseal MANIFEST PYTHON-EXPR: rewrites the manifest's JSON (as `m`) and its sha256 line.
reseal() {
  python3 - "$1" "$2" <<'PY'
import hashlib, json, sys
path, expr = sys.argv[1], sys.argv[2]
text = open(path).read()
m = json.loads(text[:text.rindex("sha256 ")])
exec(expr)
m["tokens"] = sum(s["tokens"] for s in m["shards"])
m["documents"] = sum(s["documents"] for s in m["shards"])
body = json.dumps(m, indent=1) + "\n"
open(path, "w").write(body + "sha256 " + hashlib.sha256(body.encode()).hexdigest() + "\n")
PY
}
expect 0 "wrote" -- "$build" -q -o "$tmp/r0.sam" --shard 0/2 --vocab-size 30 --corpus ids="$tmp/many.jsonl"
expect 0 "wrote" -- "$build" -q -o "$tmp/r1.sam" --shard 1/2 --vocab-size 30 --corpus ids="$tmp/many.jsonl"
expect 0 "wrote" -- "$build" -q -o "$tmp/r.samset" --write-samset "$tmp/r0.sam" "$tmp/r1.sam"
cp "$tmp/r.samset" "$tmp/twice.samset"
reseal "$tmp/twice.samset" 'm["shards"] = [m["shards"][0]] * 500'
expect 1 "shard file 'r0.sam' is listed twice" -- "$inspect" "$tmp/twice.samset"
echo '{"prompt_ids": [1, 2], "output_ids": [2, 3, 1, 2, 3]}' > "$tmp/traces.jsonl"
expect 1 "listed twice" -- "$replay" --index "$tmp/twice.samset" --traces "$tmp/traces.jsonl"
# The same file under another name (a hard link).
ln "$tmp/r0.sam" "$tmp/r0-again.sam"
cp "$tmp/r.samset" "$tmp/linked.samset"
reseal "$tmp/linked.samset" 'm["shards"] = [m["shards"][0], dict(m["shards"][0], file="r0-again.sam")]'
expect 1 "the same file as shard 0" -- "$inspect" "$tmp/linked.samset"
cp "$tmp/r.samset" "$tmp/many.samset"
reseal "$tmp/many.samset" 'm["shards"] = [dict(m["shards"][0], file="s%d.sam" % i) for i in range(5000)]'
expect 1 "lists 5000 shards, more than the 4096" -- "$inspect" "$tmp/many.samset"
# A shard that is a directory, or larger than the manifest says: said so.
mkdir "$tmp/dirset" && cp "$tmp/r.samset" "$tmp/r0.sam" "$tmp/dirset/" && mkdir "$tmp/dirset/r1.sam"
expect 1 "r1.sam: shard 1 of 2 of .*: is a directory" -- "$inspect" "$tmp/dirset/r.samset"
expect 1 "is a directory" -- "$inspect" --verify "$tmp/dirset/r.samset"
grep -q "checksum" "$tmp/err" && FAIL "a directory shard is reported as a checksum mismatch"
rmdir "$tmp/dirset/r1.sam" && cp "$tmp/r1.sam" "$tmp/dirset/" && echo extra >> "$tmp/dirset/r1.sam"
expect 1 "more than the manifest's" -- "$inspect" "$tmp/dirset/r.samset"
grep -q "truncated" "$tmp/err" && FAIL "a longer shard is reported as truncated"

# ---------------------------------------------------------------- opening never blocks
mkfifo "$tmp/fifo.sam" "$tmp/fifo.samc" "$tmp/fifo.csv" "$tmp/fifo.jsonl"
printf '[1,2,3]\n[2,3,4]\n' > "$tmp/ok.jsonl"
expect 0 "wrote" -- "$build" -q -o "$tmp/ok.sam" --vocab-size 10 --corpus ids="$tmp/ok.jsonl"
echo '{"prompt_ids": [1, 2], "output_ids": [2, 3, 1, 2, 3]}' > "$tmp/traces.jsonl"
expect 1 "fifo.sam.*not a regular file\|fifo.sam.*FIFO" -- "$inspect" "$tmp/fifo.sam"
expect 1 "fifo.samc.*not a regular file\|fifo.samc.*FIFO" -- "$inspect" "$tmp/fifo.samc"
expect 1 "fifo.sam.*not a regular file\|fifo.sam.*FIFO" -- "$replay" --index "$tmp/fifo.sam" --traces "$tmp/traces.jsonl"
expect 1 "fifo.samc.*not a regular file" -- "$replay" --index "$tmp/ok.sam" --traces "$tmp/traces.jsonl" \
  --policy sam-cal --cross-request --load-cache "$tmp/fifo.samc"
expect 1 "fifo.csv.*not a regular file" -- "$replay" --index "$tmp/ok.sam" --traces "$tmp/traces.jsonl" \
  --policy sam-cal --cost-curve "$tmp/fifo.csv"
# A response cache of another vocabulary (ids up to 40000, saved by a replay without an index): a
# replay over an index of vocabulary 10 refuses to load it, naming the file, response, id and
# vocabulary; sam-inspect shows its largest id.
echo '{"prompt_ids": [1, 2], "output_ids": [2, 3, 40000, 2, 3]}' > "$tmp/wide.jsonl"
expect 0 "" -- "$replay" --traces "$tmp/wide.jsonl" --policy sam --cross-request --save-cache "$tmp/wide.samc"
expect 1 "wide.samc: response 1 (tenant '') holds id 40000, at or above the vocabulary size 10" -- \
  "$replay" --index "$tmp/ok.sam" --traces "$tmp/traces.jsonl" --policy sam-cal --cross-request \
  --load-cache "$tmp/wide.samc"
expect 0 "largest id: 40000" -- "$inspect" "$tmp/wide.samc"
expect 0 '"max_id": 40000' -- "$inspect" --json "$tmp/wide.samc"
# A shard set whose shard is a FIFO.
if [[ $asan -eq 0 ]]; then
  cp "$tmp/v.samset" "$tmp/w.samset"
  for f in "$tmp"/v.[0-9]*.sam; do cp "$f" "$tmp/w.${f#$tmp/v.}"; done
  rm "$tmp/w.1.sam" && mkfifo "$tmp/w.1.sam"
  sed -i 's/"v\./"w./' "$tmp/w.samset" 2>/dev/null
  # (The manifest's checksum now differs: what matters is that nothing blocks.)
  expect 1 "" -- "$inspect" --verify "$tmp/w.samset"
fi
if [[ -n "$data" && -f "$data/tokenizer/llama-32k.model" ]]; then
  expect 1 "fifo.samc.*not a regular file" -- "$build" -q -o "$tmp/c.sam" --tokenizer "$data/tokenizer/llama-32k.model" \
    --corpus cache="$tmp/fifo.samc"
fi
if [[ -x "$gen" ]]; then
  mkdir -p "$tmp/model"
  mkfifo "$tmp/model/config.json"
  expect 1 "config.json.*not a regular file" -- "$gen" --model "$tmp/model" --tokenizer x --prompt hi --max-new-tokens 1
  # A config.json or model.safetensors that is a directory is said to be one.
  mkdir -p "$tmp/dirmodel/config.json"
  expect 1 "config.json: model config is a directory" -- "$gen" --model "$tmp/dirmodel" --tokenizer x --prompt hi --max-new-tokens 1
else
  echo "note: sam-generate not built, its FIFO checks are skipped"
fi

# ---------------------------------------------------------------- empty values, flag conflicts: exit 2
ids=(--vocab-size 10 --corpus ids="$tmp/ok.jsonl")
expect 2 "max-memory: empty value" -- "$build" -q --max-memory "" -o "$tmp/e.sam" "${ids[@]}"
expect 2 "shard: empty value" -- "$build" -q --shard "" -o "$tmp/e.sam" "${ids[@]}"
expect 2 "report: empty value" -- "$replay" --index "$tmp/ok.sam" --traces "$tmp/traces.jsonl" --report ""
[[ -e "$tmp/e.sam" ]] && FAIL "a build with an empty flag value wrote its output"
expect 2 "need --vocab-size" -- "$build" -q -o "$tmp/e.sam" --corpus ids="$tmp/ok.jsonl"
expect 2 "below the smallest bound" -- "$build" -q --max-memory 1 -o "$tmp/e.sam" "${ids[@]}"
if [[ -n "$data" && -f "$data/tokenizer/llama-32k.model" ]]; then
  expect 2 "--vocab-size 100 differs from the tokenizer's 32000" -- "$build" -q -o "$tmp/e.sam" \
    --vocab-size 100 --tokenizer "$data/tokenizer/llama-32k.model" --corpus ids="$tmp/ok.jsonl"
fi

# ---------------------------------------------------------------- small --max-memory bounds
# The capacity error's hint is a bound that works when given (it once asked for more each time),
# and a build whose measured peak RSS exceeds the bound says so. Not under AddressSanitizer, whose
# quarantine keeps the resident memory that the bounds follow high.
if [[ $asan -eq 1 ]]; then
  echo "skip: small --max-memory bounds under AddressSanitizer"
elif [[ -n "$data" && -f "$data/tokenizer/llama-32k.model" && -f "$data/gsm8k/test.jsonl" ]]; then
  small=(-q --tokenizer "$data/tokenizer/llama-32k.model" --corpus gsm8k="$data/gsm8k/test.jsonl")
  expect 1 "too small.*give at least [0-9]*M" -- "$build" "${small[@]}" --max-memory 1M -o "$tmp/m.sam"
  hint=$(grep -o "give at least [0-9]*M" "$tmp/err" | grep -o "[0-9]*M")
  if [[ -n "$hint" ]]; then
    expect 0 "wrote" -- "$build" "${small[@]}" --max-memory "$hint" -o "$tmp/m.sam"
    for bound in "$hint" 20M; do
      "$build" "${small[@]}" --max-memory "$bound" -o "$tmp/m.sam" >"$tmp/out" 2>"$tmp/err"
      peak=$(grep -o "^peak RSS [0-9.]* MiB" "$tmp/out" | grep -o "[0-9.]*")
      mib=${bound%M}
      if awk -v p="$peak" -v b="$mib" 'BEGIN { exit !(p > b) }'; then
        grep -q "warning: the peak RSS, .* exceeded --max-memory" "$tmp/err" ||
          FAIL "--max-memory $bound: peak RSS $peak MiB went past the bound without a warning"
      else
        grep -q "exceeded --max-memory" "$tmp/err" && FAIL "--max-memory $bound: a warning within the bound"
      fi
      echo "ok: --max-memory $bound: peak RSS $peak MiB, warned: $(grep -c exceeded "$tmp/err")"
    done
  fi
else
  echo "note: no tokenizer or gsm8k data, the --max-memory hint checks are skipped"
fi
if [[ -x "$gen" ]]; then
  expect 2 "sdsat-tokens: '1,,2' has an empty item" -- "$gen" --model "$tmp/model" --tokenizer x --prompt hi --sdsat-tokens 1,,2
  # An endless prompt stream stops at a bound (a prompt must fit the model's context).
  expect 0 "random model" -- "$bin/bench-random-model" --out "$tmp/rnd" --vocab 100 --hidden 32 --layers 1
  # A config.json whose layer count the checkpoint lacks is refused before per-layer state.
  cp -r "$tmp/rnd" "$tmp/rnd-layers"
  python3 - "$tmp/rnd-layers/config.json" <<'PY'
import json, sys
c = json.load(open(sys.argv[1])); c["num_hidden_layers"] = 10**7; json.dump(c, open(sys.argv[1], "w"))
PY
  if [[ -n "$data" && -f "$data/tokenizer/llama-32k.model" ]]; then
    expect 1 "model.layers.9999999.input_layernorm.weight' is missing" -- "$gen" --model "$tmp/rnd-layers" \
      --tokenizer "$data/tokenizer/llama-32k.model" --prompt hi --max-new-tokens 1
    expect 2 "prompt too long" -- "$gen" --model "$tmp/rnd" --tokenizer "$data/tokenizer/llama-32k.model" --prompt-file /dev/zero
  fi
fi

# ---------------------------------------------------------------- messages name the file, line and field
printf '{"prompt_ids": [1], "output_ids": [2, 3], "category": 7}\n' > "$tmp/cat.jsonl"
expect 1 "cat.jsonl: line 1: field 'category'.*must be a string" -- "$replay" --index "$tmp/ok.sam" --traces "$tmp/cat.jsonl"
printf '{"prompt_ids": [1], "output_ids": [2, 3]}\n[1e400]\n' > "$tmp/big.jsonl"
expect 1 "big.jsonl: line 2: invalid JSON" -- "$replay" --index "$tmp/ok.sam" --traces "$tmp/big.jsonl"

[[ $fail -eq 0 ]] && echo "all tools safety checks passed"
exit $fail
