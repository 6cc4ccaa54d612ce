#!/usr/bin/env bash
# Builds a small index of ids with repeats, so that the policies draft: 200
# documents drawn from 300 short phrases of ids 1..59 (vocabulary 64).
# Sourced by the tests that run bench-step on it:
#   phrase_index BIN_DIR OUT.sam SEED
phrase_index() {
  local bin=$1 out=$2 seed=$3
  python3 - "$seed" >"$out.jsonl" <<'PY'
import random, sys
random.seed(int(sys.argv[1]))
phrases = [[random.randrange(1, 60) for _ in range(random.randrange(3, 9))] for _ in range(300)]
for _ in range(200):
    doc = []
    for _ in range(random.randrange(20, 60)):
        doc += random.choice(phrases)
    print(doc)
PY
  "$bin/sam-build" -q --vocab-size 64 --corpus ids="$out.jsonl" -o "$out" >/dev/null
}
