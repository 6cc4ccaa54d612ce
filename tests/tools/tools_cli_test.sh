#!/usr/bin/env bash
# Command-line behaviour shared by every program in tools/ (tools/cli.h):
#   - --help exits 0 and shows examples and defaults; --version prints the program and version;
#   - every usage error exits 2 and every message starts with the program's name;
#   - an output is never a device, FIFO, directory, symbolic link or one of the inputs, and its
#     directory is checked before any work;
#   - outputs are written atomically: an error or SIGINT/SIGTERM/SIGHUP while writing leaves
#     neither a temporary file nor a partial output (SAM_TEST_PAUSE_WRITING stops the program at
#     its first temporary file, so the signal lands in the write stage every time);
#   - bench-random-model refuses to replace a checkpoint without --force.
# Programs built without libtorch (sam-generate, bench-generate, bench-forward) or without
# benchmarks are skipped with a note.
#
#   tools_cli_test.sh BIN_DIR
set -u
# The tools default --data-dir to $SAM_DATA_DIR; these checks give every input themselves.
unset SAM_DATA_DIR
bin=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0
FAIL() { echo "FAIL: $*"; fail=1; }
have() { [[ -x "$bin/$1" ]] || { echo "note: $1 not built, its checks are skipped"; return 1; }; }

# expect CODE PATTERN -- program args...: exit status CODE, output (stdout + stderr) matching
# PATTERN; for a failure (CODE != 0), every stderr line starts with "<program>: " or continues
# the message above it (indented).
expect() {
  local code=$1 pattern=$2; shift 3
  local prog; prog=$(basename "$1")
  local rc
  "$@" >"$tmp/out" 2>"$tmp/err" </dev/null; rc=$?
  if [[ $rc -ne $code ]] || ! cat "$tmp/out" "$tmp/err" | grep -q -- "$pattern"; then
    FAIL "'$*' exited $rc (want $code, output matching '$pattern'): $(cat "$tmp/out" "$tmp/err")"
    return
  fi
  if [[ $code -ne 0 ]] && grep -v -q -e "^$prog: " -e "^ " "$tmp/err"; then
    FAIL "'$*': a message does not start with '$prog: ': $(grep -v -e "^$prog: " -e "^ " "$tmp/err")"
    return
  fi
  if [[ $code -ne 0 ]] && ! head -n 1 "$tmp/err" | grep -q "^$prog: "; then
    FAIL "'$*': the first message line does not start with '$prog: '"
    return
  fi
  echo "ok: $* -> $rc"
}

# same_drafts A.json B.json: two sam-replay --json outputs with the same drafts (timings, sizes
# and index paths left out), and policies in them.
same_drafts() {
  python3 - "$1" "$2" <<'PY'
import json, re, sys
def strip(x):
    if isinstance(x, dict):
        return {k: strip(v) for k, v in x.items() if not re.search(r"_us|seconds|_ms|bytes|index", k)}
    return [strip(v) for v in x] if isinstance(x, list) else x
a, b = (strip(json.load(open(p))) for p in sys.argv[1:])
sys.exit(0 if a == b and a.get("policies") else 1)
PY
}

build=$bin/sam-build inspect=$bin/sam-inspect replay=$bin/sam-replay gen=$bin/sam-generate
rnd=$bin/bench-random-model traces=$bin/sam-traces

# ---------------------------------------------------------------- --help of every program
programs=(sam-build sam-inspect sam-replay sam-traces sam-generate bench-build bench-step bench-batch
          bench-generate bench-forward bench-draft-trees bench-random-model)
for p in "${programs[@]}"; do
  have "$p" || continue
  expect 0 "Examples:" -- "$bin/$p" --help
  # Defaults: "(default ...)" in a description or CLI11's "TYPE=value" after the option.
  grep -q -i -E -e "default" -e "^ +-[^ ]+ [A-Z][^ ]*=" "$tmp/out" || FAIL "$p --help shows no defaults"
  # Every example line names the program and only flags its --help lists.
  while read -r flag; do
    grep -q -- "$flag\b" "$tmp/out" || FAIL "$p --help: example flag $flag is not documented"
  done < <(sed -n '/^Examples:/,/^$/p' "$tmp/out" | grep -o -- '--[a-z][a-z-]*' | sort -u)
  sed -n '/^Examples:/,/^$/p' "$tmp/out" | grep -q "^  $p" || FAIL "$p --help: no example runs $p"
done
# --version: "<program> <project version>" on stdout, exit 0, for every program.
version=$(sed -n 's/^#define SAM_VERSION_STRING "\(.*\)"$/\1/p' "$(dirname "$0")/../../runtime/include/sam/sam.h")
[[ -n $version ]] || FAIL "no SAM_VERSION_STRING in sam.h"
for p in "${programs[@]}"; do
  have "$p" || continue
  expect 0 "^$p $version\$" -- "$bin/$p" --version
  [[ $(cat "$tmp/out") == "$p $version" ]] || FAIL "$p --version printed '$(cat "$tmp/out")'"
done

# ---------------------------------------------------------------- usage errors: exit 2
for p in "${programs[@]}"; do
  have "$p" && expect 2 "" -- "$bin/$p" --no-such-flag  # some report a required flag first
done
printf '[1,2,3]\n[2,3,4]\n' > "$tmp/ok.jsonl"
ids=(--vocab-size 10 --corpus ids="$tmp/ok.jsonl")
expect 2 "unknown corpus kind 'bogus' (valid: alpaca, python18k, gsm8k, hagrid, jsonl, text, ids, cache)" -- "$build" -o "$tmp/a.sam" --corpus bogus=x
expect 2 "unknown preset 'bogus'" -- "$build" -o "$tmp/a.sam" --data-dir "$tmp" --preset bogus
expect 2 "preset needs --data-dir" -- "$build" -o "$tmp/a.sam" --preset default
expect 2 "nokind" -- "$build" -o "$tmp/a.sam" --corpus nokind="$tmp/ok.jsonl" --tokenizer x
expect 2 "KIND=PATH" -- "$build" -o "$tmp/a.sam" --corpus nokind
expect 2 "template" -- "$build" -o "$tmp/a.sam" --template bogus "${ids[@]}"
expect 2 "text-split" -- "$build" -o "$tmp/a.sam" --text-split bogus "${ids[@]}"
expect 2 "no corpus" -- "$build" -o "$tmp/a.sam"
expect 2 "absurd" -- "$build" -o "$tmp/a.sam" --threads 100000 "${ids[@]}"
expect 2 "output" -- "$build" "${ids[@]}"
expect 2 "traces" -- "$replay" --index x.sam
# CLI11 would read a negative number into an unsigned option (wrapped) and NaN
# into a floating-point one past its range check (tools/cli.cc GuardNumbers).
expect 2 "Value -3 is not an unsigned number" -- "$replay" --index x.sam --tree-width -3
expect 2 "Value -3 is not an unsigned number" -- "$replay" --index x.sam --draft-size -3
# And an empty value (a script's unset variable) into any number as 0: every numeric flag
# refuses it.
expect 2 "draft-size: Value '' is empty, not a number" -- "$replay" --index x.sam --draft-size ""
# The option table checks the ranges; tuning parameters are --experimental NAME=VALUE,
# parsed as strictly (a negative, NaN or empty value would mean "never" or "no limit").
expect 2 "tree-width: tree_width: '0' is outside \\[1, 64\\]" -- "$replay" --index x.sam --traces x.jsonl --tree-width 0
expect 2 "draft-size: draft_size: '5000' is outside \\[1, 4096\\]" -- "$replay" --index x.sam --traces x.jsonl --draft-size 5000
expect 2 "backoff_count: '-3' is not an unsigned integer" -- "$replay" --index x.sam --traces x.jsonl --experimental backoff_count=-3
expect 2 "min_path_probability: 'nan' is not a finite number" -- "$replay" --index x.sam --traces x.jsonl --experimental min_path_probability=nan
expect 2 "backoff_count: '' is empty, not a number" -- "$replay" --index x.sam --traces x.jsonl --experimental backoff_count=
expect 2 "unknown experimental option 'max_width'" -- "$replay" --index x.sam --traces x.jsonl --experimental max_width=3
expect 2 "is not NAME=VALUE" -- "$replay" --index x.sam --traces x.jsonl --experimental backoff_count
expect 0 "backoff_count INT (default 8" -- "$replay" --help-experimental
expect 2 "threads: Value ' ' is empty, not a number" -- "$build" -o "$tmp/a.sam" --threads " " "${ids[@]}"
# No index-open option changes drafts: --child-records is the one record option.
expect 2 "not expected: 8 --subtree-nodes" -- "$replay" --index x.sam --traces x.jsonl --child-records \
  --subtree-nodes 8
expect 2 "threads: Value -1 is not an unsigned number" -- "$build" -o "$tmp/a.sam" --threads -1 "${ids[@]}"
expect 2 "out" -- "$traces" --data "$tmp"
expect 2 "template" -- "$traces" --data "$tmp" --out "$tmp/t.jsonl" --template bogus
expect 2 "" -- "$inspect"
if have bench-build; then expect 2 "data-dir" -- "$bin/bench-build"; fi
if have bench-step; then
  expect 2 "index" -- "$bin/bench-step"
  expect 2 "policies" -- "$bin/bench-step" --index x.sam --policies bogus
  expect 2 "load" -- "$bin/bench-step" --index x.sam --load bogus
  expect 2 "steps" -- "$bin/bench-step" --index x.sam --steps abc
  expect 2 "backoff_count: 'abc' is not an unsigned integer" -- "$bin/bench-step" --index x.sam --experimental backoff_count=abc
  expect 2 "tree-width" -- "$bin/bench-step" --index x.sam --tree-width 0
  expect 2 "Value 0 not in range 1 to 64" -- "$bin/bench-step" --index x.sam --tree-width 8,0
  expect 2 "calibrated_width: '0' is outside" -- "$bin/bench-step" --index x.sam --experimental calibrated_width=8,0
  expect 2 "Value 0 not in range 1 to 4096" -- "$bin/bench-step" --index x.sam --draft 24,0
  expect 2 "max_static_lookups: 'x' is not an unsigned integer" -- "$bin/bench-step" --index x.sam --experimental max_static_lookups=1,x
  expect 2 "one value" -- "$bin/bench-step" --index x.sam --experimental backoff_count=1,2
  expect 2 "flush-mib" -- "$bin/bench-step" --index x.sam --flush-mib 5000
  # A default build has no phase marks: --phases says which build has them.
  expect 2 "SAM_PHASE_TIMING=ON" -- "$bin/bench-step" --index x.sam --phases
  expect 2 "not expected: 8 --subtree-nodes" -- "$bin/bench-step" --index x.sam --record-min-count 2 \
    --subtree-nodes 8
  expect 2 "Value -5 is not an unsigned number" -- "$bin/bench-step" --index x.sam --contexts 1024,-5
  expect 2 "contexts: Value '' is empty" -- "$bin/bench-step" --index x.sam --contexts ""
  expect 2 "max_static_lookups: '' is empty" -- "$bin/bench-step" --index x.sam --experimental max_static_lookups=
fi
if have bench-batch; then
  expect 2 "index" -- "$bin/bench-batch" --traces x.jsonl
  expect 2 "policy" -- "$bin/bench-batch" --index x.sam --traces x.jsonl --policy bogus
  expect 2 "runs" -- "$bin/bench-batch" --index x.sam --traces x.jsonl --runs 0
  expect 2 "sessions" -- "$bin/bench-batch" --index x.sam --traces x.jsonl --sessions abc
  expect 2 "dynamic-mib" -- "$bin/bench-batch" --index x.sam --traces x.jsonl --dynamic-mib 99999999
fi
if have bench-generate; then
  expect 2 "tokenizer" -- "$bin/bench-generate"
  expect 2 "policy" -- "$bin/bench-generate" --tokenizer x --data-dir "$tmp" --policy bogus
  expect 2 "must start at 1" -- "$bin/bench-generate" --tokenizer x --curve-only --curve-tokens 2,4
  expect 2 "increase" -- "$bin/bench-generate" --tokenizer x --curve-only --curve-tokens 1,8,4
  expect 2 "data-dir" -- "$bin/bench-generate" --tokenizer x
  expect 2 "does not exist" -- "$bin/bench-generate" --tokenizer x --curve-only --cost-curve-out "$tmp/no/c.csv"
  echo keep > "$tmp/an-index.sam"
  expect 2 "is the input" -- "$bin/bench-generate" --tokenizer x --curve-only --index "$tmp/an-index.sam" --cost-curve-out "$tmp/an-index.sam"
  [[ "$(cat "$tmp/an-index.sam")" == keep ]] || FAIL "--cost-curve-out overwrote an --index"
fi
if have bench-forward; then
  expect 2 "layers" -- "$bin/bench-forward" --layers abc
  grep -q stoll "$tmp/err" && FAIL "bench-forward --layers abc mentions stoll"
  expect 2 "repeats" -- "$bin/bench-forward" --repeats 0
  expect 2 "dtype" -- "$bin/bench-forward" --dtype fp8
fi
if have bench-draft-trees; then
  expect 2 "budgets" -- "$bin/bench-draft-trees" --budgets abc
  expect 2 "budgets" -- "$bin/bench-draft-trees" --budgets 0
  expect 2 "tv" -- "$bin/bench-draft-trees" --tv 1.5
  expect 2 "tv" -- "$bin/bench-draft-trees" --tv 0.1x
  expect 2 "temperatures" -- "$bin/bench-draft-trees" --temperatures 0
fi
if have sam-generate; then
  base=(--model "$tmp/none" --tokenizer x --prompt hi)
  expect 2 "draft-mode" -- "$gen" "${base[@]}" --draft-mode beam
  expect 2 "draft-model" -- "$gen" "${base[@]}" --policy model
  expect 2 "dtype" -- "$gen" "${base[@]}" --dtype fp8
  expect 2 "device" -- "$gen" "${base[@]}" --device tpu
  expect 2 "device" -- "$gen" "${base[@]}" --device cuda:x
  expect 2 "not supported on cpu" -- "$gen" "${base[@]}" --dtype fp16
  expect 2 "policy" -- "$gen" "${base[@]}" --policy bogus
  expect 2 "--model" -- "$gen" --tokenizer x --prompt hi
  expect 2 "not expected: --force" -- "$gen" "${base[@]}" --force
  # --cost-curve: parsed (errors name the file and line, exit 1) before the model is looked at,
  # and only with sam-cal.
  printf 'tokens,cost\n1,10\n8,x\n' > "$tmp/bad-curve.csv"
  printf '# ok\n1,10\n8,12\n' > "$tmp/curve.csv"
  expect 1 "bad-curve.csv: line 3: field 'cost'" -- "$gen" "${base[@]}" --policy sam-cal --cost-curve "$tmp/bad-curve.csv"
  expect 1 "cost curve" -- "$gen" "${base[@]}" --policy sam-cal --cost-curve "$tmp/no-curve.csv"
  expect 2 "use it with --policy sam-cal" -- "$gen" "${base[@]}" --policy sam --cost-curve "$tmp/curve.csv"
  expect 1 "$tmp/none does not exist" -- "$gen" "${base[@]}" --policy sam-cal --cost-curve "$tmp/curve.csv"
  expect 1 "$tmp/none does not exist" -- "$gen" "${base[@]}" --cost-curve "$tmp/curve.csv"  # sam-cal, the default
fi

# ---------------------------------------------------------------- sam-build -o safety
sum() { sha256sum "$1" | cut -d' ' -f1; }
# A character device (/dev/null's numbers) stays a device.
if mknod -m 666 "$tmp/node" c 1 3 2>/dev/null; then
  expect 2 "not a regular file" -- "$build" -q -o "$tmp/node" "${ids[@]}"
  [[ -c "$tmp/node" ]] || FAIL "the device node was replaced"
else
  echo "note: mknod not permitted, device-node check skipped"
fi
mkfifo "$tmp/fifo"
expect 2 "not a regular file" -- "$build" -q -o "$tmp/fifo" "${ids[@]}"
[[ -p "$tmp/fifo" ]] || FAIL "the FIFO was replaced"
mkdir "$tmp/dir"
expect 2 "is a directory" -- "$build" -q -o "$tmp/dir" "${ids[@]}"
# A symbolic link is neither followed nor replaced.
echo keep > "$tmp/target"
ln -s "$tmp/target" "$tmp/link.sam"
expect 2 "symbolic link" -- "$build" -q -o "$tmp/link.sam" "${ids[@]}"
[[ -L "$tmp/link.sam" && "$(cat "$tmp/target")" == keep ]] || FAIL "the link or its target changed"
ln -s "$tmp/nowhere.sam" "$tmp/dangling.sam"
expect 2 "symbolic link" -- "$build" -q -o "$tmp/dangling.sam" "${ids[@]}"
[[ -e "$tmp/nowhere.sam" ]] && FAIL "a dangling link's target was created"
# The output is one of the inputs: the corpus (by name, and by a hard link), the tokenizer.
before=$(sum "$tmp/ok.jsonl")
expect 2 "is the input" -- "$build" -q -o "$tmp/ok.jsonl" "${ids[@]}"
ln "$tmp/ok.jsonl" "$tmp/hard.sam"
expect 2 "is the input" -- "$build" -q -o "$tmp/hard.sam" "${ids[@]}"
[[ "$(sum "$tmp/ok.jsonl")" == "$before" ]] || FAIL "the corpus was overwritten"
echo "not really a model" > "$tmp/tok.model"
echo "some text" > "$tmp/doc.txt"
before=$(sum "$tmp/tok.model")
expect 2 "is the input" -- "$build" -q -o "$tmp/tok.model" --tokenizer "$tmp/tok.model" --corpus text="$tmp/doc.txt"
[[ "$(sum "$tmp/tok.model")" == "$before" ]] || FAIL "the tokenizer was overwritten"
# The output directory is checked before the build: a missing corpus would fail the build with
# another message, so naming the directory proves the order.
expect 2 "directory $tmp/nonexistent does not exist" -- "$build" -o "$tmp/nonexistent/x.sam" --vocab-size 10 --corpus ids="$tmp/missing.jsonl"
grep -q "missing.jsonl" "$tmp/err" && FAIL "the build started before the output directory was checked"
expect 2 "not a directory" -- "$build" -o "$tmp/ok.jsonl/x.sam" "${ids[@]}"
# A regular existing output is replaced; nothing else is left in the folder.
echo old > "$tmp/replace.sam"
expect 0 "wrote" -- "$build" -q -o "$tmp/replace.sam" "${ids[@]}"
expect 0 "documents 2" -- "$inspect" --verify "$tmp/replace.sam"
ls "$tmp" | grep -q -e '\.tmp-' -e '\.probe-' && FAIL "temporary files left: $(ls "$tmp")"

# ---------------------------------------------------------------- signals while writing
# run_paused OUT -- program args...: starts the program with the pause hook, waits until it
# stops at its temporary file (printing the path), and leaves its pid in $pid.
run_paused() {
  local out=$1; shift 2
  SAM_TEST_PAUSE_WRITING=1 "$@" >/dev/null 2>"$tmp/paused.err" </dev/null &
  pid=$!
  for _ in $(seq 600); do  # bounded wait (60 s): not a timing assertion
    grep -q "test hook: paused writing" "$tmp/paused.err" && return 0
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
  done
  FAIL "$* did not reach the write stage: $(cat "$tmp/paused.err")"
  kill -KILL "$pid" 2>/dev/null
  return 1
}
# check_killed SIGNAL OUT: the program died of SIGNAL, leaving neither OUT nor OUT.tmp-*.
check_killed() {
  local sig=$1 out=$2 rc
  { wait "$pid"; } 2>/dev/null; rc=$?
  local want=$((128 + $(kill -l "$sig")))
  [[ $rc -eq $want ]] || FAIL "after SIG$sig the program exited $rc (want $want)"
  [[ -e "$out" ]] && FAIL "SIG$sig left the output $out"
  ls "$(dirname "$out")" | grep -q "$(basename "$out")\.tmp-" &&
    FAIL "SIG$sig left a temporary file: $(ls "$(dirname "$out")")"
  echo "ok: SIG$sig while writing $(basename "$out") left nothing"
}
set -m  # background jobs keep SIGINT (without job control bash makes them ignore it)
for sig in TERM INT HUP; do
  out=$tmp/sig-$sig.sam
  if run_paused "$out" -- "$build" -q -o "$out" "${ids[@]}"; then
    temp=$(sed -n 's/.*paused writing //p' "$tmp/paused.err")
    [[ "$temp" == "$out.tmp-$pid" && -f "$temp" ]] || FAIL "the hook did not stop at $out.tmp-$pid: $temp"
    kill -s "$sig" "$pid"
    check_killed "$sig" "$out"
  fi
done

# ---------------------------------------------------------------- sam-traces
expect 1 "cannot open" -- "$traces" --data "$tmp/nodata" --out "$tmp/t.jsonl"
[[ -e "$tmp/t.jsonl" ]] && FAIL "sam-traces with a bad --data left $tmp/t.jsonl"
mkdir -p "$tmp/data/gsm8k" "$tmp/data/humaneval"
echo '{"question": "1+1?", "answer": "2"}' > "$tmp/data/gsm8k/test.jsonl"
echo '{"prompt": "def f():", "canonical_solution": ' > "$tmp/data/humaneval/HumanEval.jsonl"
echo old > "$tmp/t.jsonl"
expect 1 "HumanEval.jsonl: line 1" -- "$traces" --data "$tmp/data" --out "$tmp/t.jsonl"
[[ "$(cat "$tmp/t.jsonl")" == old ]] || FAIL "a failed sam-traces run changed the existing output"
echo '{"prompt": "def f():", "canonical_solution": " return 1", "task_id": "h/0"}' > "$tmp/data/humaneval/HumanEval.jsonl"
expect 0 "wrote 2 traces" -- "$traces" --data "$tmp/data" --out "$tmp/t.jsonl"
[[ $(wc -l < "$tmp/t.jsonl") -eq 2 ]] || FAIL "sam-traces wrote $(wc -l < "$tmp/t.jsonl") lines, want 2"
expect 2 "is the input" -- "$traces" --data "$tmp/data" --out "$tmp/data/gsm8k/test.jsonl"
expect 2 "not a regular file" -- "$traces" --data "$tmp/data" --out "$tmp/fifo"
if run_paused "$tmp/t2.jsonl" -- "$traces" --data "$tmp/data" --out "$tmp/t2.jsonl"; then
  kill -s TERM "$pid"
  check_killed TERM "$tmp/t2.jsonl"
fi
ls "$tmp" | grep -q -e '\.tmp-' && FAIL "temporary files left: $(ls "$tmp")"

# ---------------------------------------------------------------- sam-replay outputs
# --save-cache and --report are never an input: not an index, nor a shard of a shard set.
"$build" -q -o "$tmp/sh0.sam" --shard 0/2 "${ids[@]}" >/dev/null &&
  "$build" -q -o "$tmp/sh1.sam" --shard 1/2 "${ids[@]}" >/dev/null &&
  "$build" -q -o "$tmp/set.samset" --write-samset "$tmp/sh0.sam" "$tmp/sh1.sam" >/dev/null ||
  FAIL "could not build the shard set"
echo '{"prompt_ids": [1, 2], "output_ids": [2, 3, 1, 2, 3]}' > "$tmp/ids-traces.jsonl"
cache=(--traces "$tmp/ids-traces.jsonl" --policy sam-cal --cross-request)
expect 0 "MAT" -- "$replay" --index "$tmp/replace.sam" "${cache[@]}" --save-cache "$tmp/c.samc"
before=$(sum "$tmp/replace.sam")
expect 2 "is the input" -- "$replay" --index "$tmp/replace.sam" "${cache[@]}" --save-cache "$tmp/replace.sam"
[[ "$(sum "$tmp/replace.sam")" == "$before" ]] || FAIL "--save-cache overwrote the index"
before=$(sum "$tmp/sh1.sam")
expect 2 "is the input" -- "$replay" --index "$tmp/set.samset" "${cache[@]}" --save-cache "$tmp/sh1.sam"
[[ "$(sum "$tmp/sh1.sam")" == "$before" ]] || FAIL "--save-cache overwrote a shard of the set"
cp "$tmp/replace.sam" "$tmp/dir/index.html"
expect 2 "is the input" -- "$replay" --index "$tmp/dir/index.html" --traces "$tmp/ids-traces.jsonl" --report "$tmp/dir"
# Chains and the SGLang NGRAM baseline: their flags' usage errors, and a run of each.
expect 2 "needs --shape chain" -- "$replay" --traces "$tmp/ids-traces.jsonl" --experimental chain_min_path_probability=0.1
expect 2 "chain_calibrated_width needs --shape chain" -- "$replay" --traces "$tmp/ids-traces.jsonl" --experimental chain_calibrated_width=2
expect 2 "chain_max_static_lookups needs --shape chain" -- "$replay" --traces "$tmp/ids-traces.jsonl" --experimental chain_max_static_lookups=4
expect 2 "unknown draft shape 'path'" -- "$replay" --traces "$tmp/ids-traces.jsonl" --shape path
expect 2 "needs an --index" -- "$replay" --traces "$tmp/ids-traces.jsonl" --policy sglang-ngram --sglang-corpus-budget 3
expect 0 "sglang-ngram" -- "$replay" --index "$tmp/replace.sam" --traces "$tmp/ids-traces.jsonl" --policy sglang-ngram --sglang-corpus-budget 3 --sglang-match prob --shape chain

# ---------------------------------------------------------------- accelerator sections
# A file without them (as format 1.0 files are): sam-inspect says so, --upgrade adds them in place
# (and only once), the result verifies, and the drafts are those of the file without them.
expect 0 "wrote" -- "$build" -q --no-accelerators -o "$tmp/plain.sam" "${ids[@]}"
expect 0 "accelerators: none" -- "$inspect" "$tmp/plain.sam"
cp "$tmp/plain.sam" "$tmp/upgraded.sam"
expect 0 "added the accelerator sections" -- "$build" --upgrade "$tmp/upgraded.sam"
expect 0 "accelerators: 0 hubs" -- "$inspect" --verify "$tmp/upgraded.sam"
grep -q "verify: OK" "$tmp/out" || FAIL "the upgraded file does not verify: $(cat "$tmp/out")"
python3 - "$tmp/plain.sam" "$tmp/upgraded.sam" "$inspect" <<'PY' || FAIL "sam-inspect --json: wrong accelerators field"
import json, subprocess, sys
plain, upgraded, inspect = sys.argv[1:]
field = lambda p: json.loads(subprocess.run([inspect, "--json", p], capture_output=True, check=True).stdout)["accelerators"]
a, b = field(plain), field(upgraded)
sys.exit(0 if a is None and b["min_degree"] == 32 and b["top_k"] == 8 and b["filter_bits_per_edge"] == 10 else 1)
PY
expect 0 "already has the accelerator sections; unchanged" -- "$build" --upgrade "$tmp/upgraded.sam"
expect 0 "accelerators: 0 hubs" -- "$inspect" "$tmp/replace.sam"
ls "$tmp" | grep -q "upgraded.sam.tmp" && FAIL "--upgrade left a temporary file: $(ls "$tmp")"
expect 2 "needs the index files" -- "$build" --upgrade
expect 2 "is a shard set" -- "$build" --upgrade "$tmp/x.samset"
expect 2 "takes no corpora and no -o" -- "$build" --upgrade "$tmp/upgraded.sam" -o "$tmp/y.sam"
expect 2 "exclude each other" -- "$build" --upgrade --write-samset -o "$tmp/y.samset" "$tmp/upgraded.sam"
expect 1 "doc.txt" -- "$build" --upgrade "$tmp/doc.txt"
for f in plain upgraded; do
  "$replay" --index "$tmp/$f.sam" --traces "$tmp/ids-traces.jsonl" --json > "$tmp/$f.json" \
    2> "$tmp/$f.err" || FAIL "sam-replay on $f.sam: $(cat "$tmp/$f.err")"
done
# The file without the sections is prepared at open, with a note naming the command that adds them.
grep -q "has no accelerator sections.*sam-build --upgrade $tmp/plain.sam" "$tmp/plain.err" \
  || FAIL "no note on a file without accelerator sections: $(cat "$tmp/plain.err")"
if [[ -s $tmp/upgraded.err ]]; then FAIL "a note on an upgraded file: $(cat "$tmp/upgraded.err")"; fi
same_drafts "$tmp/plain.json" "$tmp/upgraded.json" || FAIL "drafts differ between a file and its upgrade"

# Child records (RECS): written by --child-records or added by --upgrade --child-records; the file
# verifies, sam-inspect reports them, and the drafts are those of the file without them.
expect 0 "wrote" -- "$build" -q --child-records -o "$tmp/records.sam" "${ids[@]}"
expect 0 "child records: [0-9][0-9]* slots" -- "$inspect" --verify "$tmp/records.sam"
grep -q "verify: OK" "$tmp/out" || FAIL "a file with child records does not verify: $(cat "$tmp/out")"
expect 0 "child records: none" -- "$inspect" "$tmp/upgraded.sam"
cp "$tmp/upgraded.sam" "$tmp/rec-upgraded.sam"
expect 0 "added the accelerator sections and child records" -- "$build" --upgrade --child-records "$tmp/rec-upgraded.sam"
expect 0 "already has the accelerator sections and child records; unchanged" -- "$build" --upgrade --child-records "$tmp/rec-upgraded.sam"
python3 - "$tmp/records.sam" "$tmp/rec-upgraded.sam" "$inspect" <<'PY' || FAIL "--upgrade --child-records differs from a build with --child-records"
import json, subprocess, sys
a, b, inspect = sys.argv[1:]
field = lambda p: json.loads(subprocess.run([inspect, "--json", p], capture_output=True, check=True).stdout)["child_records"]
sys.exit(0 if field(a) is not None and field(a) == field(b) and field(a)["min_count"] == 2 else 1)
PY
# A corpus without repeated strings (no clones): a section without records, no warning.
echo "[1, 2, 3, 4]" > "$tmp/once.jsonl"
expect 0 "RECS raw" -- "$build" --child-records -o "$tmp/once.sam" --vocab-size 10 --corpus ids="$tmp/once.jsonl"
grep -q "warning" "$tmp/err" && FAIL "a warning on a build without clones: $(cat "$tmp/err")"
expect 0 "child records: 0 slots" -- "$inspect" --verify "$tmp/once.sam"
grep -q "verify: OK" "$tmp/out" || FAIL "a file without clones and with RECS does not verify: $(cat "$tmp/out")"
expect 2 "needs the accelerator sections" -- "$build" -q --child-records --no-accelerators -o "$tmp/no.sam" "${ids[@]}"
[[ -e $tmp/no.sam ]] && FAIL "a refused build left $tmp/no.sam"
"$replay" --index "$tmp/records.sam" --traces "$tmp/ids-traces.jsonl" --json > "$tmp/records.json" \
  2> "$tmp/records.err" || FAIL "sam-replay on records.sam: $(cat "$tmp/records.err")"
same_drafts "$tmp/plain.json" "$tmp/records.json" || FAIL "drafts differ between a file and the same with child records"

# Clone labels (CLAB): a file with the other accelerator sections but without them (a golden file
# written before them) says so, --upgrade adds them (once), the result verifies, and the drafts are
# those of the file without them.
golden=$(cd "$(dirname "$0")/../format/golden" && pwd)
cp "$golden/special.sam" "$tmp/unlabelled.sam"
expect 0 "clone labels: none (sam-build --upgrade" -- "$inspect" "$tmp/unlabelled.sam"
cp "$tmp/unlabelled.sam" "$tmp/labelled.sam"
expect 0 "added the accelerator sections" -- "$build" --upgrade "$tmp/labelled.sam"
expect 0 "clone labels" -- "$inspect" --verify "$tmp/labelled.sam"
grep -q "clone labels: none" "$tmp/out" && FAIL "no clone labels after --upgrade: $(cat "$tmp/out")"
grep -q "verify: OK" "$tmp/out" || FAIL "the upgraded file does not verify: $(cat "$tmp/out")"
expect 0 "already has the accelerator sections; unchanged" -- "$build" --upgrade "$tmp/labelled.sam"
python3 - "$tmp/unlabelled.sam" "$tmp/labelled.sam" "$inspect" <<'PY' || FAIL "sam-inspect --json: wrong clone_labels field"
import json, subprocess, sys
a, b, inspect = sys.argv[1:]
field = lambda p: json.loads(subprocess.run([inspect, "--json", p], capture_output=True, check=True).stdout)["clone_labels"]
sys.exit(0 if field(a) is False and field(b) is True else 1)
PY
for f in unlabelled labelled; do
  "$replay" --index "$tmp/$f.sam" --traces "$tmp/ids-traces.jsonl" --json > "$tmp/$f.json" \
    2> "$tmp/$f.err" || FAIL "sam-replay on $f.sam: $(cat "$tmp/$f.err")"
done
same_drafts "$tmp/unlabelled.json" "$tmp/labelled.json" || FAIL "drafts differ between a file and the same with clone labels"

# ---------------------------------------------------------------- bench-random-model
model=$tmp/model
if have bench-random-model; then
  expect 0 "random model" -- "$rnd" --out "$model" --vocab 100 --hidden 32 --layers 1
  before=$(sum "$model/model.safetensors")
  expect 2 "add --force" -- "$rnd" --out "$model" --vocab 100 --hidden 32 --layers 1 --seed 2
  [[ "$(sum "$model/model.safetensors")" == "$before" ]] || FAIL "bench-random-model overwrote a checkpoint without --force"
  expect 0 "random model" -- "$rnd" --out "$model" --vocab 100 --hidden 32 --layers 1 --seed 2 --force
  [[ "$(sum "$model/model.safetensors")" != "$before" ]] || FAIL "--force did not replace the weights"
  ls "$model" | grep -q tmp && FAIL "temporary files left in the model: $(ls "$model")"
  expect 2 "not a directory" -- "$rnd" --out "$tmp/ok.jsonl" --vocab 100
  expect 2 "give --vocab or --tokenizer" -- "$rnd" --out "$tmp/novocab"
fi

# ---------------------------------------------------------------- sam-generate, no tokenizer needed
if have sam-generate && have bench-random-model; then
  expect 2 "make-random-model" -- "$gen" --make-random-model "$tmp/gone" --random-vocab 100
  expect 1 "is not a directory" -- "$gen" --model "$model/config.json" --tokenizer x --prompt hi
  expect 1 "does not exist" -- "$gen" --model "$tmp/nowhere" --tokenizer x --prompt hi
  expect 2 "is a directory" -- "$gen" --model "$model" --tokenizer x --prompt-file "$tmp/dir"
fi

[[ $fail -eq 0 ]] && echo "all tools CLI checks passed"
exit $fail
