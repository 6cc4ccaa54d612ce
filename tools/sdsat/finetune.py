#!/usr/bin/env python3
"""SDSAT fine-tuning: teach a Llama checkpoint to draft with adaptive tokens.

Training sequences put a block of k adaptive tokens S_1..S_k after random
anchor positions p of a text; S_j (rotary position p + j) is trained to
predict x_{p+j+1}, standard tokens keep the ordinary next-token loss, and
standard tokens never attend to adaptive tokens, so the model's behaviour on
ordinary text is preserved (docs/sdsat.md). Reads and writes Hugging Face
checkpoints (config.json + model.safetensors); the written config.json lists
the adaptive ids as "sdsat_tokens", which sam-generate reads.

Examples:
  # fine-tune an existing checkpoint with one adaptive id repeated 4 times
  tools/sdsat/finetune.py --model ckpt --out ckpt-sdsat --data train.jsonl \\
      --adaptive-ids 32011 --block-length 4 --steps 2000 --lr 2e-4
  # train a small model from scratch first (plain next-token loss only)
  tools/sdsat/finetune.py --from-scratch '{"vocab_size": 64, "hidden_size": 64,
      "intermediate_size": 172, "num_hidden_layers": 2, "num_attention_heads": 4}' \\
      --out tiny --data train.jsonl --sat-fraction 0 --steps 800 --lr 3e-3

Data: JSONL with one {"ids": [...]} per line, or text with whitespace-separated
ids per line (tokenize text with the model's tokenizer first).
Exit status: 0 done, 1 unreadable input or checkpoint, 2 bad flags.
"""
import argparse
import json
import os
import random
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import sdsat_model as sm  # noqa: E402


def usage_error(message):
    print("finetune.py: " + message, file=sys.stderr)
    sys.exit(2)


def read_sequences(path):
    seqs = []
    try:
        with open(path) as f:
            for number, line in enumerate(f, 1):
                line = line.strip()
                if not line:
                    continue
                try:
                    ids = json.loads(line)["ids"] if line.startswith("{") else [int(x) for x in line.split()]
                except (ValueError, KeyError, TypeError) as e:
                    raise sm.CheckpointError("%s:%d: not a JSON {\"ids\": [...]} or a line of ids (%s)"
                                             % (path, number, e))
                seqs.append([int(x) for x in ids])
    except OSError as e:
        raise sm.CheckpointError("%s: %s" % (path, e.strerror or e))
    if not seqs:
        raise sm.CheckpointError("%s: no sequences" % path)
    return seqs


def windows(seqs, length, rng):
    """A random window of `length` ids from a random sequence long enough."""
    long_enough = [s for s in seqs if len(s) >= length]
    if not long_enough:
        raise sm.CheckpointError("no sequence has %d ids (--seq-len)" % length)
    s = rng.choice(long_enough)
    start = rng.randrange(len(s) - length + 1)
    return s[start:start + length]


def evaluate(model, seqs, args, rng, batches=4):
    """Held-out plain loss and per-j adaptive accuracy."""
    model.eval()
    k = len(args.adaptive_ids)
    plain, hits, counts = [], [0] * k, [0] * k
    with torch.no_grad():
        for _ in range(batches):
            batch = [windows(seqs, args.seq_len, rng) for _ in range(args.batch)]
            _, std, _ = sm.sat_loss(model, [sm.sat_sequence(b, [], args.adaptive_ids) for b in batch])
            plain.append(float(std))
            for b in batch:
                anchors = rng.sample(range(args.seq_len - 1), min(args.anchors, args.seq_len - 1))
                ids, pos, labels, allowed, kind = sm.sat_sequence(b, anchors, args.adaptive_ids)
                pred = model(ids[None], pos[None], allowed[None])[0].argmax(-1)
                j = 0
                for i in range(len(ids)):
                    if kind[i]:
                        if labels[i] >= 0:
                            hits[j] += int(pred[i] == labels[i])
                            counts[j] += 1
                        j = (j + 1) % k
    model.train()
    return sum(plain) / len(plain), [h / c if c else 0.0 for h, c in zip(hits, counts)]


def main(argv=None):
    ap = argparse.ArgumentParser(
        prog="finetune.py", description=__doc__.split("\n\n")[0],
        epilog="\n\n".join(__doc__.split("\n\n")[1:]), formatter_class=argparse.RawDescriptionHelpFormatter)
    src = ap.add_mutually_exclusive_group(required=True)
    src.add_argument("--model", help="checkpoint folder to fine-tune (config.json + model.safetensors)")
    src.add_argument("--from-scratch", metavar="CONFIG_JSON",
                     help="a Llama config (JSON text or file) to train from random weights")
    ap.add_argument("--out", required=True, help="output checkpoint folder")
    ap.add_argument("--data", required=True, help="training ids (JSONL {\"ids\": [...]} or id lines)")
    ap.add_argument("--adaptive-ids", default=None,
                    help="adaptive token id(s), comma-separated: one id is repeated --block-length "
                         "times (default: the last id of the vocabulary)")
    ap.add_argument("--block-length", type=int, default=4, help="adaptive tokens per block, k (default 4)")
    ap.add_argument("--sat-fraction", type=float, default=0.5,
                    help="share of training sequences with adaptive blocks (default 0.5; 0: plain training)")
    ap.add_argument("--anchors", type=int, default=4, help="adaptive blocks per SAT sequence (default 4)")
    ap.add_argument("--sat-weight", type=float, default=1.0, help="weight of the adaptive loss (default 1)")
    ap.add_argument("--lr", type=float, default=3e-4, help="AdamW learning rate (default 3e-4)")
    ap.add_argument("--steps", type=int, default=500, help="optimizer steps (default 500)")
    ap.add_argument("--batch", type=int, default=16, help="sequences per step (default 16)")
    ap.add_argument("--seq-len", type=int, default=64, help="standard tokens per sequence (default 64)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    ap.add_argument("--log-every", type=int, default=100)
    args = ap.parse_args(argv)
    for name in ("block_length", "anchors", "steps", "batch", "seq_len"):
        if getattr(args, name) < 1:
            usage_error("--%s must be at least 1" % name.replace("_", "-"))
    if not 0.0 <= args.sat_fraction <= 1.0:
        usage_error("--sat-fraction must be in [0, 1]")
    if args.lr <= 0:
        usage_error("--lr must be positive")
    if args.threads:
        torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    rng = random.Random(args.seed)
    try:
        if args.model:
            model = sm.Llama.load(args.model)
        else:
            text = args.from_scratch
            if os.path.exists(text):
                text = open(text).read()
            try:
                config = sm.LlamaConfig(**json.loads(text))
            except (ValueError, KeyError, TypeError) as e:
                usage_error("--from-scratch: not a Llama config (%s)" % e)
            model = sm.Llama(config).init_random(args.seed)
        vocab = model.config.vocab_size
        if args.adaptive_ids is None:
            ids = [vocab - 1]
        else:
            try:
                ids = [int(x) for x in args.adaptive_ids.split(",")]
            except ValueError:
                usage_error("--adaptive-ids: not a list of integers: %r" % args.adaptive_ids)
        if len(ids) == 1:
            ids = ids * args.block_length
        elif len(ids) != args.block_length:
            usage_error("--adaptive-ids: %d ids for --block-length %d (give one id or k ids)"
                        % (len(ids), args.block_length))
        bad = [i for i in ids if not 0 <= i < vocab]
        if bad:
            usage_error("--adaptive-ids: %s outside the vocabulary [0, %d)" % (bad, vocab))
        args.adaptive_ids = ids
        seqs = read_sequences(args.data)
        if any(t in set(ids) for s in seqs[:1000] for t in s):
            print("finetune.py: note: the data contains adaptive ids %s as ordinary tokens" % sorted(set(ids)),
                  file=sys.stderr)
        for s in seqs:
            bad = [t for t in s if not 0 <= t < vocab]
            if bad:
                raise sm.CheckpointError("%s: id %d outside the vocabulary [0, %d)" % (args.data, bad[0], vocab))
        held_out = seqs[:max(1, len(seqs) // 20)]
        train = seqs[len(held_out):] or seqs
        optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.0)
        before = evaluate(model, held_out, args, random.Random(1))
        print("finetune.py: before: plain loss %.4f, adaptive accuracy by j %s" %
              (before[0], [round(a, 3) for a in before[1]]), flush=True)
        start = time.time()
        for step in range(1, args.steps + 1):
            n_sat = sum(rng.random() < args.sat_fraction for _ in range(args.batch))
            losses = []
            for count, with_blocks in ((n_sat, True), (args.batch - n_sat, False)):
                if count == 0:
                    continue
                batch = []
                for _ in range(count):
                    w = windows(train, args.seq_len, rng)
                    anchors = rng.sample(range(args.seq_len - 1), min(args.anchors, args.seq_len - 1)) \
                        if with_blocks else []
                    batch.append(sm.sat_sequence(w, anchors, ids))
                total, std, ada = sm.sat_loss(model, batch, args.sat_weight)
                losses.append((total * count / args.batch, std, ada, with_blocks))
            optimizer.zero_grad()
            sum(l[0] for l in losses).backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            if step % args.log_every == 0 or step == args.steps:
                std = [float(l[1]) for l in losses]
                ada = [float(l[2]) for l in losses if l[3]]
                print("finetune.py: step %d/%d  standard loss %.4f  adaptive loss %s  (%.0f s)" %
                      (step, args.steps, sum(std) / len(std), "%.4f" % ada[0] if ada else "-",
                       time.time() - start), flush=True)
        after = evaluate(model, held_out, args, random.Random(1))
        print("finetune.py: after: plain loss %.4f, adaptive accuracy by j %s" %
              (after[0], [round(a, 3) for a in after[1]]), flush=True)
        if args.sat_fraction > 0:
            model.config.extra["sdsat_tokens"] = ids
        model.save(args.out, metadata={"format": "pt", "sdsat_block_length": len(ids)})
        print("finetune.py: wrote %s" % args.out)
        return 0
    except sm.CheckpointError as e:
        print("finetune.py: %s" % e, file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
