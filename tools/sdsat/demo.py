#!/usr/bin/env python3
"""SDSAT on CPU in minutes: train a tiny Llama from scratch on a language whose
next tokens are predictable, fine-tune it with adaptive tokens
(finetune.py), and show that

  1. the adaptive-token drafts are accepted: mean accepted tokens per
     iteration of the two-pass scheme well above 1;
  2. plain behaviour is kept: greedy output on standard tokens is the same
     before and after fine-tuning for at least --min-same of the prompts, and
     the plain loss moves by at most --max-loss-change;
  3. SDSAT's output equals plain greedy decoding of the fine-tuned model.

With the C++ generator (sam-generate: --sam-generate PATH, $SAM_GENERATE, or
build/bin/sam-generate), the same checkpoint is also decoded by both C++
schemes (--policy sdsat --sdsat-scheme one-pass / two-pass, KV cache on):
their outputs must equal plain greedy decoding (--no-spec), and tokens per
forward pass and decode wall time are reported for both.

    demo.py --work DIR [--quick] [--sam-generate PATH]

Exit status 0 when all three hold, 1 otherwise. --quick (CI) trains fewer
steps and checks the same properties with looser thresholds.
"""
import argparse
import json
import os
import random
import subprocess
import sys
import time

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import sdsat_model as sm  # noqa: E402

VOCAB = 48
ADAPTIVE = VOCAB - 1  # never in the data


def make_language(seed, n_sequences, length):
    """Phrases of 5-9 ids; each phrase is followed by one of two others (3:1). The
    language (phrases, successors) is fixed; `seed` draws the sequences."""
    rng = random.Random(1)
    phrases = [[rng.randrange(2, ADAPTIVE) for _ in range(rng.randrange(5, 10))] for _ in range(14)]
    follow = [rng.sample(range(len(phrases)), 2) for _ in phrases]
    rng = random.Random(seed)
    seqs = []
    for _ in range(n_sequences):
        p, out = rng.randrange(len(phrases)), [1]
        while len(out) < length:
            out.extend(phrases[p])
            p = follow[p][0] if rng.random() < 0.75 else follow[p][1]
        seqs.append(out[:length])
    return seqs


def run_finetune(args_list):
    cmd = [sys.executable, os.path.join(HERE, "finetune.py")] + args_list
    print("demo.py: " + " ".join(cmd), flush=True)
    subprocess.run(cmd, check=True)


def default_generator():
    path = os.path.join(HERE, "..", "..", "build", "bin", "sam-generate")
    return os.path.normpath(path) if os.access(path, os.X_OK) else ""


def run_cpp_schemes(binary, checkpoint, prompts, new_tokens):
    """Greedy decoding of every prompt by sam-generate: plain (--no-spec) and SDSAT's two
    schemes (adaptive ids from config.json). Returns the figures and the mismatches."""
    runs = {"plain": ["--no-spec"],
            "one-pass": ["--policy", "sdsat", "--sdsat-scheme", "one-pass"],
            "two-pass": ["--policy", "sdsat", "--sdsat-scheme", "two-pass"]}
    totals = {name: {"tokens": 0, "passes": 0, "steps": 0, "seconds": 0.0, "accepted": 0}
              for name in runs}
    outputs = {name: [] for name in runs}
    for prompt in prompts:
        for name, flags in runs.items():
            cmd = [binary, "--model", checkpoint, "--prompt-ids", ",".join(map(str, prompt)),
                   "--max-new-tokens", str(new_tokens), "--json"] + flags
            done = subprocess.run(cmd, capture_output=True, text=True)
            if done.returncode != 0:
                raise SystemExit("demo.py: %s failed (exit %d): %s"
                                 % (" ".join(cmd), done.returncode, done.stderr.strip()))
            j = json.loads(done.stdout)
            outputs[name].append(j["output_ids"])
            t = totals[name]
            t["tokens"] += j["new_tokens"]
            t["passes"] += j["forward_passes"]
            t["steps"] += j["steps"]
            t["seconds"] += j["prefill_seconds"] + j["decode_seconds"]
            t["accepted"] += sum(s["accepted_tokens"] for s in j["by_source"].values())
    report = {}
    for name, t in totals.items():
        report[name] = {"tokens_per_forward_pass": round(t["tokens"] / t["passes"], 3),
                        "forward_passes": t["passes"],
                        "accepted_drafts": t["accepted"],
                        "seconds": round(t["seconds"], 3)}
    mismatches = ["%s prompt %d" % (name, i) for name in ("one-pass", "two-pass")
                  for i, out in enumerate(outputs[name]) if out != outputs["plain"][i]]
    return {"report": report, "mismatches": mismatches}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--work", required=True, help="folder for the data and the checkpoints")
    ap.add_argument("--quick", action="store_true", help="the short CI version")
    ap.add_argument("--block-length", type=int, default=4)
    ap.add_argument("--prompts", type=int, default=12)
    ap.add_argument("--new-tokens", type=int, default=40)
    ap.add_argument("--sam-generate", default=os.environ.get("SAM_GENERATE") or default_generator(),
                    help="the sam-generate binary for the C++ schemes (default: $SAM_GENERATE, "
                         "else build/bin/sam-generate when built; none: skip them)")
    args = ap.parse_args()
    os.makedirs(args.work, exist_ok=True)
    pre_steps, sat_steps = (300, 300) if args.quick else (900, 900)
    min_mat = 1.5 if args.quick else 2.0
    min_tpp = 1.3 if args.quick else 1.8  # C++ schemes: tokens per target forward pass
    min_same = 0.5 if args.quick else 0.8
    max_loss_change = 0.25 if args.quick else 0.1
    torch.set_num_threads(1)

    data = os.path.join(args.work, "train.jsonl")
    with open(data, "w") as f:
        for s in make_language(1, 400, 96):
            f.write(json.dumps({"ids": s}) + "\n")
    config = {"vocab_size": VOCAB, "hidden_size": 64, "intermediate_size": 172,
              "num_hidden_layers": 2, "num_attention_heads": 4, "max_position_embeddings": 512}
    base, sat = os.path.join(args.work, "base"), os.path.join(args.work, "sdsat")
    t0 = time.time()
    run_finetune(["--from-scratch", json.dumps(config), "--out", base, "--data", data,
                  "--sat-fraction", "0", "--steps", str(pre_steps), "--lr", "3e-3", "--batch", "16",
                  "--seq-len", "48", "--log-every", "100", "--threads", "1"])
    run_finetune(["--model", base, "--out", sat, "--data", data, "--adaptive-ids", str(ADAPTIVE),
                  "--block-length", str(args.block_length), "--sat-fraction", "0.5",
                  "--steps", str(sat_steps), "--lr", "2e-3", "--batch", "16", "--seq-len", "48",
                  "--log-every", "100", "--threads", "1"])
    train_s = time.time() - t0

    before, after = sm.Llama.load(base), sm.Llama.load(sat)
    with open(os.path.join(sat, "config.json")) as f:
        ids = json.load(f)["sdsat_tokens"]
    prompts = [s[:16] for s in make_language(99, args.prompts, 16)]
    same = exact = 0
    accepted, passes, emitted = [], 0, 0
    t_plain = t_sdsat = 0.0
    for prompt in prompts:
        a = sm.greedy(before, prompt, args.new_tokens)
        t = time.time()
        b = sm.greedy(after, prompt, args.new_tokens)
        t_plain += time.time() - t
        same += a == b
        t = time.time()
        out, p, acc = sm.sdsat_greedy(after, prompt, args.new_tokens, ids)
        t_sdsat += time.time() - t
        exact += out == b
        accepted.extend(acc)
        passes += p
        emitted += len(out)
    # Mean tokens per iteration: t, the accepted drafts and the bonus/correction.
    mat = sum(a + 2 for a in accepted) / len(accepted)
    held = [s[:48] for s in make_language(7, 32, 48)]
    with torch.no_grad():
        loss = [float(sm.sat_loss(m, [sm.sat_sequence(s, [], ids) for s in held])[1])
                for m in (before, after)]
    result = {
        "train_seconds": round(train_s, 1),
        "two_pass": {"tokens_per_iteration": round(mat, 3),
                     "tokens_per_forward_pass": round(emitted / passes, 3),
                     "accepted_drafts_per_iteration": round(sum(accepted) / len(accepted), 3),
                     "seconds": round(t_sdsat, 2)},
        "plain": {"tokens_per_forward_pass": 1.0, "seconds": round(t_plain, 2)},
        "greedy_same_before_after": "%d/%d" % (same, len(prompts)),
        "sdsat_equals_plain_greedy": "%d/%d" % (exact, len(prompts)),
        "plain_loss_before_after": [round(x, 4) for x in loss],
    }
    ok = True
    if args.sam_generate:
        cpp = run_cpp_schemes(args.sam_generate, sat, prompts, args.new_tokens)
        result["cpp"] = cpp["report"]
        if cpp["mismatches"]:
            print("demo.py: FAIL: C++ SDSAT output differs from C++ plain greedy decoding: %s"
                  % ", ".join(cpp["mismatches"]), file=sys.stderr)
            ok = False
        for scheme in ("one-pass", "two-pass"):
            tpp = cpp["report"][scheme]["tokens_per_forward_pass"]
            if tpp < min_tpp:
                print("demo.py: FAIL: C++ %s: %.2f tokens per forward pass < %.2f" % (scheme, tpp, min_tpp),
                      file=sys.stderr)
                ok = False
    else:
        result["cpp"] = "skipped: no sam-generate (build with torch, or pass --sam-generate)"
    print("demo.py: " + json.dumps(result))
    if exact != len(prompts):
        print("demo.py: FAIL: SDSAT output differs from plain greedy decoding", file=sys.stderr)
        ok = False
    if mat < min_mat:
        print("demo.py: FAIL: %.2f tokens per iteration < %.2f" % (mat, min_mat), file=sys.stderr)
        ok = False
    if same < min_same * len(prompts):
        print("demo.py: FAIL: greedy output changed for %d of %d prompts" % (len(prompts) - same, len(prompts)),
              file=sys.stderr)
        ok = False
    if abs(loss[1] - loss[0]) > max_loss_change:
        print("demo.py: FAIL: plain loss moved from %.4f to %.4f" % tuple(loss), file=sys.stderr)
        ok = False
    print("demo.py: %s" % ("OK" if ok else "FAILED"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
