#!/usr/bin/env bash
# Downloads the corpora, the evaluation set and the tokenizer into DEST_DIR, laid out as
# corpora/README.md describes, and checks every file listed in corpora/SHA256SUMS.
#
#   corpora/fetch.sh DEST_DIR
#
# Needs curl, sha256sum and gzip; python3 with pyarrow (or pandas) to turn the
# python_code_instructions_18k parquet file into JSONL. Files are downloaded to NAME.part and
# renamed only once complete and checked, so an interrupted or corrupted download never sits
# under its final name. Files already present are checked, not downloaded again. Exits non-zero
# on a failed download or a checksum mismatch. The data is for research use under the licences
# in corpora/README.md (Alpaca and CodeAlpaca: non-commercial); never commit it.
set -euo pipefail

usage() {
  echo "usage: $0 DEST_DIR" >&2
  exit 2
}
[[ $# -eq 1 ]] || usage
dest=$1
script_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
sums_file="$script_dir/SHA256SUMS"

for tool in curl sha256sum gzip; do
  command -v "$tool" > /dev/null || { echo "error: $tool is required" >&2; exit 1; }
done
[[ -r $sums_file ]] || { echo "error: cannot read $sums_file" >&2; exit 1; }
mkdir -p "$dest"

unchecked=()

die() {
  echo "error: $*" >&2
  exit 1
}

# The expected sha256 of layout path $1, or nothing when SHA256SUMS has no entry for it.
expected_sha256() {
  awk -v path="$1" '$2 == path { print $1 }' "$sums_file"
}

# Checks file $1 (currently stored as $2) against the SHA256SUMS entry for layout path $1.
# Returns 0 when it matches, 1 when there is no entry; exits on a mismatch after deleting $2
# when $3 is "delete".
verify() {
  local rel=$1 file=$2 mode=${3:-keep} expected actual
  expected=$(expected_sha256 "$rel")
  [[ -n $expected ]] || return 1
  actual=$(sha256sum "$file" | awk '{ print $1 }')
  if [[ $actual != "$expected" ]]; then
    [[ $mode == delete ]] && rm -f "$file"
    die "$rel: sha256 mismatch (expected $expected, got $actual); upstream may have changed"
  fi
  return 0
}

# Moves the checked temporary file $2 to layout path $1 and reports it.
install_checked() {
  local rel=$1 part=$2
  if verify "$rel" "$part" delete; then
    echo "ok        $rel"
  else
    echo "unchecked $rel (no checksum in SHA256SUMS)"
    unchecked+=("$rel")
  fi
  mv -f "$part" "$dest/$rel"
}

# True (after checking it) when layout path $1 is already present.
already_present() {
  local rel=$1
  [[ -f $dest/$rel ]] || return 1
  if verify "$rel" "$dest/$rel"; then
    echo "present   $rel"
  else
    echo "present   $rel (unchecked: no checksum in SHA256SUMS)"
    unchecked+=("$rel")
  fi
  return 0
}

download() {
  local url=$1 out=$2
  curl --fail --location --silent --show-error --retry 3 --output "$out" "$url" ||
    { rm -f "$out"; die "download failed: $url"; }
}

# fetch URL LAYOUT_PATH: downloads URL to LAYOUT_PATH under DEST_DIR.
fetch() {
  local url=$1 rel=$2
  already_present "$rel" && return 0
  mkdir -p "$(dirname "$dest/$rel")"
  download "$url" "$dest/$rel.part"
  install_checked "$rel" "$dest/$rel.part"
}

# fetch_gz URL LAYOUT_PATH: as fetch, for a gzip-compressed URL stored uncompressed.
fetch_gz() {
  local url=$1 rel=$2
  already_present "$rel" && return 0
  mkdir -p "$(dirname "$dest/$rel")"
  download "$url" "$dest/$rel.gz.part"
  gzip --decompress --stdout "$dest/$rel.gz.part" > "$dest/$rel.part" ||
    { rm -f "$dest/$rel.gz.part" "$dest/$rel.part"; die "cannot decompress $url"; }
  rm -f "$dest/$rel.gz.part"
  install_checked "$rel" "$dest/$rel.part"
}

github=https://raw.githubusercontent.com
huggingface=https://huggingface.co/datasets

# Stanford Alpaca (CC BY-NC 4.0 data).
fetch "$github/tatsu-lab/stanford_alpaca/main/alpaca_data.json" alpaca/alpaca_data.json
fetch "$github/tatsu-lab/stanford_alpaca/main/DATA_LICENSE" alpaca/DATA_LICENSE.stanford_alpaca

# CodeAlpaca (CC BY-NC 4.0 data).
fetch "$github/sahil280114/codealpaca/master/data/code_alpaca_2k.json" \
  code_alpaca/code_alpaca_2k.json
fetch "$github/sahil280114/codealpaca/master/data/new_codealpaca.json" \
  code_alpaca/new_codealpaca.json
fetch "$github/sahil280114/codealpaca/master/DATA_LICENSE" code_alpaca/DATA_LICENSE.codealpaca

# GSM8K (MIT).
fetch "$github/openai/grade-school-math/master/grade_school_math/data/train.jsonl" \
  gsm8k/train.jsonl
fetch "$github/openai/grade-school-math/master/grade_school_math/data/test.jsonl" \
  gsm8k/test.jsonl
fetch "$github/openai/grade-school-math/master/LICENSE" gsm8k/LICENSE

# HumanEval (MIT), shipped gzip-compressed upstream.
fetch_gz "$github/openai/human-eval/master/data/HumanEval.jsonl.gz" humaneval/HumanEval.jsonl
fetch "$github/openai/human-eval/master/LICENSE" humaneval/LICENSE

# The 32K LLaMA SentencePiece model as shipped by llama2.c (the model is Meta's; llama2.c's
# MIT licence covers its code).
fetch "$github/karpathy/llama2.c/master/tokenizer.model" tokenizer/llama-32k.model
fetch "$github/karpathy/llama2.c/master/LICENSE" tokenizer/LICENSE.llama2c

# HAGRID (Apache-2.0): JSONL upstream, read with --kind hagrid.
fetch "$huggingface/miracl/hagrid/resolve/main/hagrid-v1.0-en/train.jsonl" hagrid/train.jsonl

# python_code_instructions_18k_alpaca: parquet upstream, converted to JSONL for --kind python18k.
fetch "$huggingface/iamtarun/python_code_instructions_18k_alpaca/resolve/main/data/train-00000-of-00001-8b6e212f3e1ece96.parquet" \
  python18k/train.parquet
if [[ -f $dest/python18k/train.jsonl ]]; then
  echo "present   python18k/train.jsonl (unchecked)"
elif command -v python3 > /dev/null &&
  { python3 -c 'import pyarrow' 2> /dev/null || python3 -c 'import pandas' 2> /dev/null; }; then
  python3 - "$dest/python18k/train.parquet" "$dest/python18k/train.jsonl.part" << 'EOF' ||
import json
import sys

source, target = sys.argv[1], sys.argv[2]
try:
    import pyarrow.parquet as pq
    rows = pq.read_table(source).to_pylist()
except ImportError:
    import pandas
    rows = pandas.read_parquet(source).to_dict(orient="records")
with open(target, "w", encoding="utf-8") as out:
    for row in rows:
        out.write(json.dumps(row, ensure_ascii=False) + "\n")
EOF
    { rm -f "$dest/python18k/train.jsonl.part"; die "cannot convert python18k/train.parquet"; }
  mv -f "$dest/python18k/train.jsonl.part" "$dest/python18k/train.jsonl"
  echo "unchecked python18k/train.jsonl (converted from train.parquet)"
  unchecked+=(python18k/train.jsonl)
else
  echo "warning: python18k/train.parquet not converted to JSONL: needs python3 with pyarrow or" \
    "pandas (or convert it by hand to one JSON object per line)" >&2
fi

if [[ ${#unchecked[@]} -gt 0 ]]; then
  echo "note: no checksum known for: ${unchecked[*]} (downloaded as they are upstream today)"
fi
echo "done: $dest"
