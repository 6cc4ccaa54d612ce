#!/usr/bin/env bash
# sam-traces on a GSM8K file whose second record has a number where a string belongs:
# the message names the file, the line and the field (it used to be nlohmann's bare type_error),
# and the exit status is 1.
set -u
traces=$1
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
mkdir -p "$dir/gsm8k" "$dir/humaneval"
printf '%s\n' '{"question": "q1", "answer": "a1"}' '{"question": 7, "answer": "a2"}' \
  > "$dir/gsm8k/test.jsonl"
: > "$dir/humaneval/HumanEval.jsonl"
out=$("$traces" --data "$dir" --out "$dir/t.jsonl" 2>&1)
status=$?
expected="$dir/gsm8k/test.jsonl: line 2: field 'question': is a number, expected a string"
if [[ $status -ne 1 ]]; then
  echo "FAIL: exit status $status, expected 1; output: $out"
  exit 1
fi
if [[ $out != *"$expected"* ]]; then
  echo "FAIL: output lacks [$expected]: $out"
  exit 1
fi
echo "ok: $out"
