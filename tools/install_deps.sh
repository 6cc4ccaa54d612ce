#!/usr/bin/env bash
# Installs the build and test dependencies from Debian 12 packages.
set -euo pipefail
pkgs=(cmake ninja-build g++ pkg-config python3
      libsentencepiece-dev sentencepiece libzstd-dev libxxhash-dev
      libcli11-dev libgtest-dev libbenchmark-dev libsimdjson-dev nlohmann-json3-dev
      libpcre2-dev libicu-dev  # the tokenizer.json backend: pre-tokenizer regexes, normalizers
      libtorch-dev libopenblas0-pthread
      pybind11-dev python3-dev python3-numpy
      python3-torch)  # the transformers adapter's interface test drives it with tensors
# CI stages (tools/run_tests.sh, docs/testing.md): clang and libFuzzer for the
# fuzz stage (gcc's ASan, UBSan and TSan runtimes come with g++).
pkgs+=(clang-14 libfuzzer-14-dev libclang-rt-14-dev)
# tools/bench_step_ir.sh: instructions per drafting step under callgrind.
pkgs+=(valgrind)
# The slurm stage: a local single-node Slurm with munge (tools/slurm/local_test.sh).
pkgs+=(slurmctld slurmd slurm-client munge)
# The tokenizer.json comparison test fetches Hugging Face's tokenizers (a Node addon) and model
# tokenizers with npm (docs/testing.md); a Node.js that already brings npm is kept.
command -v npm >/dev/null 2>&1 || pkgs+=(nodejs npm)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "installing: ${missing[*]}" >&2
  SUDO=; [[ $(id -u) -ne 0 ]] && SUDO=sudo
  $SUDO apt-get update -q
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
fi
