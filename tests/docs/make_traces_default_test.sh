#!/usr/bin/env bash
# The dev traces the docs measure are the ones `sam-traces` writes by default: the template its
# --help shows as the default is the one tools/bench/report.sh renders the traces of
# docs/performance.md with, and the one docs/performance.md names.
#
#   make_traces_default_test.sh SAM_TRACES SOURCE_DIR
set -uo pipefail
traces=$1 source=$2
default=$("$traces" --help | sed -nE 's/.*--template TEXT=([a-z]+).*/\1/p')
report=$(grep -oE 'sam-traces"? [^|]*--template [a-z]+' "$source/tools/bench/report.sh" |
         sed -nE 's/.*--template ([a-z]+)$/\1/p' | sort -u)
docs=$(grep -oE 'sam-traces --template [a-z]+' "$source/docs/performance.md" |
       sed -nE 's/.*--template ([a-z]+)$/\1/p' | sort -u)
echo "sam-traces default: ${default:-?}; report.sh: ${report:-?}; docs/performance.md: ${docs:-?}"
if [[ -z $default || $default != "$report" || $default != "$docs" ]]; then
  echo "FAIL: sam-traces' default template differs from what report.sh and the docs measure"
  exit 1
fi
