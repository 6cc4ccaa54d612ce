#!/usr/bin/env python3
"""Writes the golden test's committed inputs (corpus.jsonl, traces.jsonl) into a folder.

Token ids, no tokenizer: a vocabulary of 512 (ids 2..499; 1 is BOS), documents made of
phrases drawn with Zipf-like weights (so that states recur with many counts: hubs, child
records, rare states that back off), and traces whose outputs copy spans of the corpus
(long static matches), of their own prompt (dynamic matches) and of earlier traces'
outputs (the cross-request cache), with phrases in between. Run once; the inputs are
committed, and regenerating them changes the goldens.

    make_inputs.py OUT_DIR
"""
import json
import random
import sys

BOS = 1
rng = random.Random(33)
phrases = [[rng.randrange(2, 500) for _ in range(rng.randrange(2, 9))] for _ in range(260)]
weights = [1.0 / (k + 1) for k in range(len(phrases))]


def phrase():
    return rng.choices(phrases, weights)[0]


def text(words):
    out = []
    while len(out) < words:
        out += phrase()
        if rng.random() < 0.15:
            out.append(rng.randrange(2, 500))  # a token no phrase continues with
    return out


docs = [[BOS] + text(rng.randrange(15, 90)) for _ in range(180)]
traces = []
outputs = []
for t in range(48):
    prompt = [BOS] + text(rng.randrange(10, 70))
    output = []
    while len(output) < rng.randrange(40, 140):
        r = rng.random()
        if r < 0.3:
            d = rng.choice(docs)
            a = rng.randrange(1, len(d))
            output += d[a:a + rng.randrange(4, 30)]
        elif r < 0.5:
            a = rng.randrange(0, len(prompt))
            output += prompt[a:a + rng.randrange(3, 20)]
        elif r < 0.65 and outputs:
            o = rng.choice(outputs)
            a = rng.randrange(0, len(o))
            output += o[a:a + rng.randrange(5, 40)]
        else:
            output += text(rng.randrange(3, 15))
    outputs.append(output)
    traces.append({"id": "t%02d" % t, "category": "ab"[t % 3 == 0],
                   "prompt_ids": prompt, "output_ids": output})

out_dir = sys.argv[1]
with open(out_dir + "/corpus.jsonl", "w") as f:
    for d in docs:
        f.write(json.dumps(d, separators=(",", ":")) + "\n")
with open(out_dir + "/traces.jsonl", "w") as f:
    for t in traces:
        f.write(json.dumps(t, separators=(",", ":")) + "\n")
