#!/usr/bin/env python3
"""The transformers adapter (samdecoding.hf) inside real transformers.

    hf_live_check.py --device cuda --tokenizer llama-32k.model --index kit.sam --data DIR

A random Llama (transformers' LlamaForCausalLM from a config: nothing is
downloaded) generates greedily from GSM8K test questions twice: plain
model.generate, and samdecoding.hf.generate with SAM drafts. The outputs must
be identical (exit 1 otherwise). Prints tokens/s of both and the mean
accepted tokens per step. Without transformers (this project's development
machine) it says so and exits 0: that check runs on the GPU machine, whose
image has transformers (tools/gpu_kit/run.sh).
"""
import argparse
import json
import os
import sys
import time


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--tokenizer", required=True)
    ap.add_argument("--index", required=True)
    ap.add_argument("--data", required=True, help="folder with gsm8k/test.jsonl")
    ap.add_argument("--build", default="build")
    ap.add_argument("--prompts", type=int, default=4)
    ap.add_argument("--max-new-tokens", type=int, default=96)
    args = ap.parse_args()
    try:
        import torch
        import transformers
    except ImportError as e:
        print("transformers adapter live check: skipped (%s)" % e)
        return 0
    import sentencepiece

    import samdecoding.hf

    sp = sentencepiece.SentencePieceProcessor(model_file=args.tokenizer)
    torch.manual_seed(0)
    config = transformers.LlamaConfig(vocab_size=sp.get_piece_size(), hidden_size=256,
                                      intermediate_size=688, num_hidden_layers=2,
                                      num_attention_heads=4, num_key_value_heads=4,
                                      max_position_embeddings=2048)
    model = transformers.LlamaForCausalLM(config).to(args.device).eval()
    questions = [json.loads(line)["question"]
                 for line in open(os.path.join(args.data, "gsm8k", "test.jsonl"))][:args.prompts]
    plain_s = sam_s = 0.0
    new_tokens = 0
    for q in questions:
        ids = torch.tensor([[sp.bos_id()] + sp.encode(q)], device=args.device)
        kw = dict(do_sample=False, max_new_tokens=args.max_new_tokens, pad_token_id=0)
        t0 = time.perf_counter()
        plain = model.generate(ids, **kw)
        t1 = time.perf_counter()
        sam = samdecoding.hf.generate(model, ids, args.index, policy="sam", num_output_tokens=10,
                                      **kw)
        t2 = time.perf_counter()
        if plain[0].tolist() != sam[0].tolist():
            print("MISMATCH for %r:\n plain %s\n sam   %s" % (q[:60], plain[0].tolist(),
                                                             sam[0].tolist()))
            return 1
        plain_s += t1 - t0
        sam_s += t2 - t1
        new_tokens += plain.shape[1] - ids.shape[1]
    print("transformers %s: %d prompts, %d new tokens identical to plain greedy; tokens/s plain "
          "%.1f, with SAM drafts %.1f" % (transformers.__version__, len(questions), new_tokens,
                                          new_tokens / plain_s, new_tokens / sam_s))
    return 0


if __name__ == "__main__":
    sys.exit(main())
