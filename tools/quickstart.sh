#!/usr/bin/env bash
# The main job: install the build's packages, build the tools, index the corpora, check the
# index and replay the dev traces against it with the default policy.
#   SAM_DATA_DIR=../shared/data tools/quickstart.sh     (or --data-dir DIR)
# Without a data folder it runs a self-contained demo: it trains a small
# SentencePiece model on this repository's documentation and indexes that.
# It installs and builds only what it runs (no tests, no libtorch, no Python package):
# tools/run_tests.sh builds the rest in the same build folder.
set -euo pipefail
cd "$(dirname "$0")/.."
data=${SAM_DATA_DIR:-}
[[ ${1:-} == --data-dir ]] && data=$2
tools/install_deps.sh build
tools/build.sh -DSAM_BUILD_TESTS=OFF -DSAM_WITH_TORCH=OFF -DSAM_BUILD_PYTHON=OFF \
  -DSAM_BUILD_BENCHMARKS=OFF -- sam-build sam-inspect sam-replay sam-traces
bin=${SAM_BUILD_DIR:-build}/bin
mkdir -p out
if [[ -n "$data" && -f "$data/tokenizer/llama-32k.model" ]]; then
  echo "== building the index of $data (Alpaca, CodeAlpaca, GSM8K train, ...)"
  "$bin/sam-build" --data-dir "$data" --preset default -o out/default.sam
  echo "== what is in it"
  "$bin/sam-inspect" --verify --top 10 out/default.sam
  echo "== drafting GSM8K test and HumanEval reference answers with it (sam-replay, default policy)"
  "$bin/sam-traces" --data "$data" --out out/traces.jsonl
  "$bin/sam-replay" --index out/default.sam --tokenizer "$data/tokenizer/llama-32k.model" \
    --traces out/traces.jsonl --policy sam-cal --report out/report
else
  echo "no data folder given (SAM_DATA_DIR or --data-dir; see corpora/README.md and"
  echo "corpora/fetch.sh to download the corpora): running the self-contained demo"
  cat README.md format/FORMAT.md corpora/README.md > out/demo.txt
  spm_train --input=out/demo.txt --model_prefix=out/demo --vocab_size=600 --model_type=bpe \
    --character_coverage=1.0 --byte_fallback=true --minloglevel=2 >/dev/null 2>&1
  "$bin/sam-build" --tokenizer out/demo.model --corpus text=out/demo.txt \
    --text-split blank-line -o out/demo.sam
  "$bin/sam-inspect" --verify --top 10 out/demo.sam
fi
