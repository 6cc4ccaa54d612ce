#!/usr/bin/env bash
# One default policy everywhere: the C++ library, the C API, the Python package and its engine
# adapters, and every tool that drafts with one policy agree (README, "Choosing a policy").
#
#   defaults_test.sh PROBE INDEX PYTHON PYTHONPATH -- TOOL...
#
# PROBE prints the native bindings' defaults (defaults_probe.cc); INDEX is any index (the
# adapters open one); PYTHON and PYTHONPATH run the samdecoding checks ("-": skipped);
# each TOOL's --help must name the same default for its --policy flag.
set -uo pipefail
probe=$1 index=$2 python=$3 pythonpath=$4
shift 4
[[ ${1:-} == -- ]] && shift
[[ $python == - ]] && python=""
found=$("$probe") || { echo "FAIL: $probe exited $?"; exit 1; }
if [[ -n $python ]]; then
  found+=$'\n'$(PYTHONPATH=$pythonpath "$python" - "$index" <<'PY'
import inspect, sys, types
import samdecoding as sd
import samdecoding.hf, samdecoding.sglang, samdecoding.vllm
index = sys.argv[1]
print("python:Session", sd.Session().policy)
print("python:hf.generate", inspect.signature(samdecoding.hf.generate).parameters["policy"].default)
print("python:hf.SamCandidateGenerator",
      inspect.signature(samdecoding.hf.SamCandidateGenerator).parameters["policy"].default)
config = types.SimpleNamespace(
    speculative_config=types.SimpleNamespace(method="custom_class",
                                             model="samdecoding.vllm.SamProposer",
                                             num_speculative_tokens=4),
    model_config=types.SimpleNamespace(max_model_len=4096))
print("python:vllm.SamProposer",
      type("P", (samdecoding.vllm.SamProposer,), {"index_path": index})(config)._pool.options["policy"])
print("python:sglang.SamCorpus",
      samdecoding.sglang.SamCorpus(4, index=index)._pool.options["policy"])
PY
) || { echo "FAIL: the Python checks exited $?"; exit 1; }
fi
for tool in "$@"; do
  # CLI11 shows the option as "--policy TEXT=NAME"; a help text may say "(default NAME".
  # (Usage examples in the help also name policies: only the option's own line counts.)
  line=$("$tool" --help | grep -E -- '--polic(y|ies) TEXT' | head -1)
  name=$(sed -nE 's/.*--polic(y|ies) TEXT( \.\.\.)?=\[?([a-z-]+).*/\3/p; s/.*\(default ([a-z-]+).*/\1/p' <<< "$line" | head -1)
  found+=$'\n'"tool:${tool##*/} ${name:-?}"
done
echo "$found"
policies=$(awk '{print $2}' <<< "$found" | sort -u)
if [[ $(wc -l <<< "$policies") -ne 1 || $policies == "?" ]]; then
  echo "FAIL: the defaults disagree (above)"
  exit 1
fi
echo "defaults_test: every binding defaults to $policies"
