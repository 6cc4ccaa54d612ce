#!/usr/bin/env bash
# sam-build, sam-inspect and sam-replay with a Hugging Face tokenizer.json: a tiny byte-level
# BPE written here (no network, no data beyond GSM8K test) is accepted as a file and as a
# folder, its fingerprint ignores formatting and changes with the merges, an index built with
# one tokenizer is refused with another, and malformed or unsupported files are refused with
# the file and the component named.
#
#   hf_cli_test.sh SAM_BUILD SAM_INSPECT SAM_REPLAY DATA_DIR
set -u
build=$1 inspect=$2 replay=$3 data=$4
[[ -f $data/gsm8k/test.jsonl ]] || { echo "SKIP: no $data/gsm8k/test.jsonl"; exit 77; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
source "$(dirname "${BASH_SOURCE[0]}")/../common/expect.sh"

# tiny.json: the 256 byte-level characters, a few merges, two special tokens; variants of it.
python3 - "$tmp" <<'EOF'
import copy, json, sys
tmp = sys.argv[1]
printable = list(range(ord('!'), ord('~') + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
alphabet, n = {}, 0
for b in range(256):
    if b in printable:
        alphabet[b] = chr(b)
    else:
        alphabet[b] = chr(256 + n); n += 1
vocab = {alphabet[b]: b for b in range(256)}
merges = []
for a, b in [("t", "h"), ("th", "e"), ("\u0120", "the"), ("a", "n"), ("an", "d"), ("\u0120", "and"),
             ("i", "s"), ("\u0120", "is"), ("1", "2"), ("\u0120", "\u0120")]:
    vocab[a + b] = len(vocab)
    merges.append(a + " " + b)
regex = ("(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*"
         "|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+")
tok = {
    "version": "1.0",
    "added_tokens": [
        {"id": len(vocab), "content": "<|begin|>", "single_word": False, "lstrip": False,
         "rstrip": False, "normalized": False, "special": True},
        {"id": len(vocab) + 1, "content": "<|end|>", "single_word": False, "lstrip": False,
         "rstrip": False, "normalized": False, "special": True}],
    "normalizer": None,
    "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
        {"type": "Split", "pattern": {"Regex": regex}, "behavior": "Isolated", "invert": False},
        {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False}]},
    "post_processor": None,
    "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
    "model": {"type": "BPE", "dropout": None, "unk_token": None, "fuse_unk": False,
              "byte_fallback": False, "ignore_merges": True, "vocab": vocab, "merges": merges},
}
def write(name, t, indent=None):
    with open(f"{tmp}/{name}", "w") as f:
        json.dump(t, f, indent=indent, ensure_ascii=False)
write("tiny.json", tok)
write("reformatted.json", tok, indent=4)
other = copy.deepcopy(tok); other["model"]["merges"] = other["model"]["merges"][:-1]
write("other.json", other)
wordpiece = copy.deepcopy(tok); wordpiece["model"]["type"] = "WordPiece"
write("wordpiece.json", wordpiece)
metaspace = copy.deepcopy(tok); metaspace["pre_tokenizer"] = {"type": "Metaspace", "replacement": "\u2581"}
write("metaspace.json", metaspace)
badmerge = copy.deepcopy(tok); badmerge["model"]["merges"].append("q zz")
write("badmerge.json", badmerge)
with open(f"{tmp}/tiny.json") as f:
    text = f.read()
with open(f"{tmp}/truncated.json", "w") as f:
    f.write(text[: len(text) // 2])
EOF
mkdir -p "$tmp/folder" "$tmp/empty-folder"
cp "$tmp/tiny.json" "$tmp/folder/tokenizer.json"
printf '{"bos_token": "<|begin|>", "eos_token": "<|end|>"}\n' > "$tmp/folder/tokenizer_config.json"
corpus=(--corpus gsm8k="$data/gsm8k/test.jsonl")

sha() { "$inspect" --json "$1" | python3 -c 'import json,sys; print(json.load(sys.stdin)["tokenizer_sha256"])'; }
expect 0 "wrote" -- "$build" -q -o "$tmp/file.sam" --tokenizer "$tmp/tiny.json" "${corpus[@]}"
expect 0 "wrote" -- "$build" -q -o "$tmp/folder.sam" --tokenizer "$tmp/folder" "${corpus[@]}"
expect 0 "wrote" -- "$build" -q -o "$tmp/reformatted.sam" --tokenizer "$tmp/reformatted.json" "${corpus[@]}"
expect 0 "wrote" -- "$build" -q -o "$tmp/other.sam" --tokenizer "$tmp/other.json" "${corpus[@]}"
expect 0 "(tokenizer.json)" -- "$inspect" "$tmp/folder.sam"
expect 0 "BOS 266" -- "$inspect" "$tmp/folder.sam"
[[ $(sha "$tmp/file.sam") == $(sha "$tmp/folder.sam") ]] || { echo "FAIL: file and folder fingerprints differ"; fail=1; }
[[ $(sha "$tmp/file.sam") == $(sha "$tmp/reformatted.sam") ]] || { echo "FAIL: reformatting changed the fingerprint"; fail=1; }
[[ $(sha "$tmp/file.sam") != $(sha "$tmp/other.sam") ]] || { echo "FAIL: other merges, same fingerprint"; fail=1; }

# An index built with one tokenizer is refused with another.
printf '{"id": "a", "category": "c", "prompt": "the cat and the dog", "output": " is 12 and the end"}\n' > "$tmp/traces.jsonl"
expect 0 "" -- "$replay" --index "$tmp/file.sam" --tokenizer "$tmp/reformatted.json" --traces "$tmp/traces.jsonl"
expect 1 "tokenizer-mismatch" -- "$replay" --index "$tmp/file.sam" --tokenizer "$tmp/other.json" --traces "$tmp/traces.jsonl"

# Malformed and unsupported files: exit 1, the file and the component named, nothing written.
expect 1 "truncated.json: not a valid tokenizer.json" -- "$build" -q -o "$tmp/bad.sam" --tokenizer "$tmp/truncated.json" "${corpus[@]}"
expect 1 'wordpiece.json: model type "WordPiece" is not supported' -- "$build" -q -o "$tmp/bad.sam" --tokenizer "$tmp/wordpiece.json" "${corpus[@]}"
expect 1 'metaspace.json: pre_tokenizer "Metaspace" is not supported' -- "$build" -q -o "$tmp/bad.sam" --tokenizer "$tmp/metaspace.json" "${corpus[@]}"
expect 1 "badmerge.json: model.merges.*missing from model.vocab" -- "$build" -q -o "$tmp/bad.sam" --tokenizer "$tmp/badmerge.json" "${corpus[@]}"
expect 1 "empty-folder: is a directory without tokenizer.json" -- "$build" -q -o "$tmp/bad.sam" --tokenizer "$tmp/empty-folder" "${corpus[@]}"
[[ -e "$tmp/bad.sam" ]] && { echo "FAIL: output written despite a bad tokenizer"; fail=1; }
exit $fail
