#!/usr/bin/env bash
# Installs the Debian 12 packages a purpose needs (only those missing):
#   tools/install_deps.sh build   the build of the libraries and tools, and the main job
#                                 (tools/quickstart.sh: index the corpora, replay the traces)
#   tools/install_deps.sh test    the above, and what the test stages need (tools/run_tests.sh,
#                                 docs/testing.md): GoogleTest, libtorch, the Python package,
#                                 clang and libFuzzer, valgrind, a local Slurm
# Without an argument: test (CI).
set -euo pipefail
purpose=${1:-test}
case $purpose in build|test) ;; *) echo "install_deps.sh: unknown purpose '$purpose' (build, test)" >&2; exit 2 ;; esac

# The build and the main job: compilers, the libraries' dependencies, spm_train for the demo.
build=(cmake ninja-build g++ pkg-config
       libsentencepiece-dev sentencepiece libzstd-dev libxxhash-dev
       libcli11-dev libsimdjson-dev nlohmann-json3-dev
       libpcre2-dev libicu-dev)  # the tokenizer.json backend: pre-tokenizer regexes, normalizers
# The test stages: GoogleTest and benchmarks; the libtorch backend (sam-generate) and its tests;
# the samdecoding package (pybind11) and its tests, whose transformers adapter's interface test
# drives it with tensors (python3-torch).
tests=(libgtest-dev libbenchmark-dev
       libtorch-dev libopenblas0-pthread
       python3 pybind11-dev python3-dev python3-numpy python3-torch
       python3-venv python3-pip python3-setuptools python3-wheel  # python_pip_install (offline)
       python3-sentencepiece)  # samdecoding.Tokenizer's oracle for SentencePiece models
# The fuzz stage: clang and libFuzzer (gcc's ASan, UBSan and TSan runtimes come with g++).
tests+=(clang-14 libfuzzer-14-dev libclang-rt-14-dev)
# tools/bench/bench_step_ir.sh: instructions per drafting step under callgrind.
tests+=(valgrind)
# The slurm stage: a local single-node Slurm with munge (tools/slurm/local_test.sh).
tests+=(slurmctld slurmd slurm-client munge)
# The tokenizer.json comparison test fetches Hugging Face's tokenizers (a Node addon) and model
# tokenizers with npm (docs/testing.md); a Node.js that already brings npm is kept.
command -v npm >/dev/null 2>&1 || tests+=(nodejs npm)

pkgs=("${build[@]}")
[[ $purpose == test ]] && pkgs+=("${tests[@]}")
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "installing ($purpose): ${missing[*]}" >&2
  SUDO=; [[ $(id -u) -ne 0 ]] && SUDO=sudo
  $SUDO apt-get update -q
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
fi
