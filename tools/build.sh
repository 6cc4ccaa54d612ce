#!/usr/bin/env bash
# Configures and builds the project into ${SAM_BUILD_DIR:-build} (Release).
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${SAM_BUILD_DIR:-build}
gen=(); command -v ninja >/dev/null && gen=(-G Ninja)
if [[ ! -f "$dir/CMakeCache.txt" ]]; then
  cmake -S . -B "$dir" "${gen[@]}" -DCMAKE_BUILD_TYPE=Release "$@"
fi
cmake --build "$dir" -j "$(nproc)"
