#!/usr/bin/env bash
# The main job: install dependencies, build, index the corpora and show the index.
#   SAM_DATA_DIR=../shared/data tools/quickstart.sh     (or --data-dir DIR)
# Without a data folder it runs a self-contained demo: it trains a small
# SentencePiece model on this repository's documentation and indexes that.
set -euo pipefail
cd "$(dirname "$0")/.."
data=${SAM_DATA_DIR:-}
[[ ${1:-} == --data-dir ]] && data=$2
tools/install_deps.sh
tools/build.sh
bin=${SAM_BUILD_DIR:-build}/bin
mkdir -p out
if [[ -n "$data" && -f "$data/tokenizer/llama-32k.model" ]]; then
  echo "== building the index of $data (Alpaca, CodeAlpaca, GSM8K train, ...)"
  "$bin/sam-build" --data-dir "$data" --preset default -o out/default.sam
  echo "== what is in it"
  "$bin/sam-inspect" --verify --top 10 out/default.sam
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
