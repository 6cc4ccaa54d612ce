#!/usr/bin/env bash
# Builds everything and runs the whole test suite (CTest). Tests that need
# ../shared/data skip with a message when it is absent (SAM_DATA_DIR overrides).
set -euo pipefail
cd "$(dirname "$0")/.."
tools/build.sh
dir=${SAM_BUILD_DIR:-build}
ctest --test-dir "$dir" --output-on-failure -j "$(nproc)"
