#!/usr/bin/env bash
# Prepares the GPU kit on this (Debian 12) machine: the .deb files of the C++
# dependencies that the lent GPU machine lacks (it has python3 with CUDA
# PyTorch, cmake, ninja and a compiler, but no apt and no network), the
# tokenizer and the GSM8K files the run needs (read from the data folder,
# never committed: they travel as a carried, git-ignored folder).
#
#   tools/gpu_kit/prepare.sh [DATA_DIR]     # default ../shared/data
#
# Writes .gpukit/ (ignored by git): debs/*.deb, data/tokenizer/llama-32k.model,
# data/gsm8k/{train,test}.jsonl. Then, with the device tool:
#   run(command="bash tools/gpu_kit/run.sh", carry=[".gpukit"], timeout_s=600)
# docs/generation.md ("GPU kit") says what the run measures.
set -euo pipefail
cd "$(dirname "$0")/../.."
data=${1:-../shared/data}
kit=.gpukit
for f in tokenizer/llama-32k.model gsm8k/train.jsonl gsm8k/test.jsonl; do
  [[ -r $data/$f ]] || { echo "prepare.sh: $data/$f is missing (give the data folder)" >&2; exit 1; }
done
# The build's dependencies that are not part of an image with PyTorch, CMake
# and a compiler (pkg-config included: the build finds zstd and xxhash with it).
debs=(libsentencepiece-dev libsentencepiece0 libzstd-dev libzstd1 libxxhash-dev libxxhash0
      libsimdjson-dev libsimdjson14 nlohmann-json3-dev libcli11-dev
      libpcre2-dev libpcre2-8-0 libicu-dev libicu72  # the tokenizer.json backend
      libgtest-dev libgmock-dev googletest pkgconf pkgconf-bin libpkgconf3 pkg-config)
rm -rf "$kit.tmp" && mkdir -p "$kit.tmp/debs" "$kit.tmp/data/tokenizer" "$kit.tmp/data/gsm8k"
(cd "$kit.tmp/debs" && apt-get download "${debs[@]}" >/dev/null)
cp "$data/tokenizer/llama-32k.model" "$kit.tmp/data/tokenizer/"
cp "$data/gsm8k/train.jsonl" "$data/gsm8k/test.jsonl" "$kit.tmp/data/gsm8k/"
rm -rf "$kit" && mv "$kit.tmp" "$kit"
grep -qx '/.gpukit/' .git/info/exclude 2>/dev/null || echo '/.gpukit/' >> .git/info/exclude
echo "prepare.sh: $(ls "$kit/debs" | wc -l) packages, $(du -sh "$kit" | cut -f1) in $kit/"
echo "next: device run(command=\"bash tools/gpu_kit/run.sh\", carry=[\".gpukit\"], timeout_s=600)"
