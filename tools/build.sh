#!/usr/bin/env bash
# Configures and builds the project into ${SAM_BUILD_DIR:-build} (Release).
#   tools/build.sh [CMAKE_OPTION...] [-- TARGET...]
# Options (-DSAM_WITH_TORCH=OFF, ...) configure the folder (again, when it exists); targets
# build only those (default: everything the configuration enables).
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${SAM_BUILD_DIR:-build}
gen=(); command -v ninja >/dev/null && gen=(-G Ninja)
options=() targets=()
while [[ $# -gt 0 ]]; do
  if [[ $1 == -- ]]; then shift; targets=("$@"); break; fi
  options+=("$1"); shift
done
if [[ ! -f "$dir/CMakeCache.txt" ]]; then
  cmake -S . -B "$dir" "${gen[@]}" -DCMAKE_BUILD_TYPE=Release "${options[@]}"
elif ((${#options[@]})); then
  cmake -S . -B "$dir" "${options[@]}"
fi
cmake --build "$dir" -j "$(nproc)" ${targets[@]:+--target "${targets[@]}"}
