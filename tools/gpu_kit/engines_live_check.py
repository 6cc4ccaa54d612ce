#!/usr/bin/env python3
"""The engine adapters inside the real engines (vLLM, SGLang, transformers).

    engines_live_check.py --index kit.sam --native build/python/samdecoding/_native*.so \\
        --out DIR [--device cuda] [--engines vllm,sglang,transformers]

Prints which of vLLM, SGLang and transformers this Python has, with their
versions, then for each one present: installs samdecoding (pip, offline,
into DIR/site: a distribution with its entry points, which SGLang's plugin
loader reads) from the module already built, writes a random Llama (32000
ids, the kit index's vocabulary; no tokenizer: the engines take token ids),
and generates greedily from the same prompts twice, once plainly and once
with the adapter. Each engine's run is its own subprocess (the engines start
worker processes and hold the GPU). A check passes when the outputs are
identical and the drafter had drafts accepted; prints one line per engine
and a JSON line with every figure; exits 1 when a present engine fails.
"""
import argparse
import glob
import importlib.metadata
import json
import os
import subprocess
import sys
import time

ENGINES = {"vllm": "vllm", "sglang": "sglang", "transformers": "transformers"}
# Prompts with repetition: a random model's greedy output loops soon, and
# the request's own text (the dynamic automaton) drafts those loops.
PROMPTS = [[1] + [(7 * i + 13 * j) % 31000 + 100 for j in range(12)] * 3 for i in range(4)]


def versions():
    found = {}
    for name, dist in list(ENGINES.items()) + [("torch", "torch")]:
        try:
            found[name] = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            found[name] = None
    return found


def install(native, out):
    """samdecoding into out/site with its dist-info (entry points)."""
    site = os.path.join(out, "site")
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env = dict(os.environ, SAM_NATIVE_MODULE=os.path.abspath(native))
    subprocess.check_call([sys.executable, "-m", "pip", "install", "--quiet", "--no-index",
                           "--no-deps", "--no-build-isolation", "--target", site,
                           os.path.join(root, "python")], env=env)
    return site


def dtype_kw(transformers, dtype):
    """from_pretrained's dtype argument: dtype= from transformers 4.56 on
    (torch_dtype= is deprecated there), torch_dtype= before."""
    major, minor = (int(x) for x in transformers.__version__.split(".")[:2])
    return {"dtype": dtype} if (major, minor) >= (4, 56) else {"torch_dtype": dtype}


def random_model(folder, device):
    import torch
    import transformers

    if os.path.exists(os.path.join(folder, "config.json")):
        return folder
    torch.manual_seed(0)
    config = transformers.LlamaConfig(vocab_size=32000, hidden_size=256, intermediate_size=688,
                                      num_hidden_layers=2, num_attention_heads=4,
                                      num_key_value_heads=4, max_position_embeddings=2048,
                                      bos_token_id=1, eos_token_id=2)
    transformers.LlamaForCausalLM(config).to(torch.float16).save_pretrained(folder)
    return folder


def run_transformers(args):
    import torch
    import transformers

    import samdecoding.hf

    model = transformers.LlamaForCausalLM.from_pretrained(args.model,
                                                          **dtype_kw(transformers, torch.float32))
    model = model.to(args.device).eval()
    plain, sam = [], []
    generator = samdecoding.hf.SamCandidateGenerator(args.index, num_output_tokens=8,
                                                     policy=args.policy)
    for prompt in PROMPTS:
        ids = torch.tensor([prompt], device=args.device)
        kw = dict(do_sample=False, max_new_tokens=args.max_new_tokens, pad_token_id=0)
        plain.append(model.generate(ids, **kw)[0, len(prompt):].tolist())
        sam.append(samdecoding.hf.generate(model, ids, args.index, candidate_generator=generator,
                                           **kw)[0, len(prompt):].tolist())
    total = generator.metrics()["total"]
    return plain, sam, sum(v["accepted"] for v in total.values())


def run_vllm(args, speculative):
    from vllm import LLM, SamplingParams

    kw = {}
    if speculative:
        kw["speculative_config"] = {"method": "custom_class",
                                    "model": "samdecoding.vllm.SamProposer",
                                    "num_speculative_tokens": 8}
    llm = LLM(model=args.model, skip_tokenizer_init=True, enforce_eager=True, dtype="float16",
              gpu_memory_utilization=0.3, max_model_len=1024, seed=0, **kw)
    params = SamplingParams(temperature=0.0, max_tokens=args.max_new_tokens, detokenize=False)
    outs = llm.generate([{"prompt_token_ids": p} for p in PROMPTS], params)
    accepted = None
    try:  # vLLM's own speculative-decoding counters
        accepted = sum(getattr(m, "value", 0) for m in llm.get_metrics()
                       if "spec_decode" in m.name and "accepted" in m.name)
    except Exception as e:  # noqa: BLE001 (an older vLLM without get_metrics)
        print("vLLM metrics unavailable: %s" % e, file=sys.stderr)
    return [list(o.outputs[0].token_ids) for o in outs], accepted


def run_sglang(args, speculative):
    import sglang as sgl

    kw = {}
    if speculative:
        kw = dict(speculative_algorithm="SAM", speculative_num_draft_tokens=8)
    engine = sgl.Engine(model_path=args.model, skip_tokenizer_init=True, dtype="float16",
                        mem_fraction_static=0.3, disable_cuda_graph=True, random_seed=0, **kw)
    try:
        outs = engine.generate(input_ids=PROMPTS, sampling_params={
            "temperature": 0.0, "max_new_tokens": args.max_new_tokens})
    finally:
        engine.shutdown()
    ids = [o["output_ids"] for o in outs]
    # Verify steps against tokens: each step yields one id plus the accepted ones.
    steps = sum(o["meta_info"].get("spec_verify_ct", 0) for o in outs)
    accepted = sum(len(i) for i in ids) - steps if speculative and steps else None
    return ids, accepted


def child(args):
    """One engine run (--run ENGINE:plain|sam); prints a JSON line."""
    engine, mode = args.run.split(":")
    t0 = time.perf_counter()
    if engine == "transformers":
        plain, sam, accepted = run_transformers(args)
        result = {"plain": plain, "sam": sam, "accepted": accepted}
    elif engine == "vllm":
        ids, accepted = run_vllm(args, mode == "sam")
        result = {mode: ids, "accepted": accepted}
    else:
        ids, accepted = run_sglang(args, mode == "sam")
        result = {mode: ids, "accepted": accepted}
    result["seconds"] = time.perf_counter() - t0
    print("RESULT " + json.dumps(result))


def run_child(args, run, env):
    cmd = [sys.executable, os.path.abspath(__file__), "--run", run, "--model", args.model,
           "--index", args.index, "--policy", args.policy, "--device", args.device,
           "--max-new-tokens", str(args.max_new_tokens)]
    log = os.path.join(args.out, "engine_%s.log" % run.replace(":", "_"))
    with open(log, "w") as f:
        code = subprocess.call(cmd, stdout=f, stderr=f, env=env,
                               timeout=args.timeout)
    lines = [line for line in open(log) if line.startswith("RESULT ")]
    if code != 0 or not lines:
        raise RuntimeError("%s failed (exit %d): see %s" % (run, code, log))
    return json.loads(lines[-1][7:])


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--index", required=True)
    ap.add_argument("--native", help="the built samdecoding/_native*.so (a glob is fine)")
    ap.add_argument("--out", default="/tmp/gpu_kit_out")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--engines", default="vllm,sglang,transformers")
    ap.add_argument("--policy", default="sam-cal")
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--timeout", type=int, default=240, help="seconds per engine run")
    ap.add_argument("--model", help=argparse.SUPPRESS)
    ap.add_argument("--run", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.run:
        return child(args)
    found = versions()
    print("engines: " + ", ".join("%s %s" % (k, v or "absent") for k, v in found.items()))
    report = {"bench": "engines", "versions": found, "results": {}}
    wanted = [e for e in args.engines.split(",") if found.get(e)]
    if not wanted:
        print("JSON " + json.dumps(report))
        return 0
    os.makedirs(args.out, exist_ok=True)
    natives = glob.glob(args.native or "")
    if len(natives) != 1:
        print("engines_live_check: --native must name one built module, got %r" % args.native)
        return 2
    site = install(natives[0], args.out)
    args.model = random_model(os.path.join(args.out, "random-llama"), args.device)
    env = dict(os.environ, SAM_INDEX=os.path.abspath(args.index), SAM_POLICY=args.policy,
               SGLANG_PLUGINS="samdecoding",
               PYTHONPATH=site + os.pathsep + os.environ.get("PYTHONPATH", ""))
    failed = False
    for engine in wanted:
        try:
            if engine == "transformers":
                r = run_child(args, "transformers:both", env)
                plain, sam, accepted = r["plain"], r["sam"], r["accepted"]
            else:
                plain = run_child(args, engine + ":plain", env)["plain"]
                r = run_child(args, engine + ":sam", env)
                sam, accepted = r["sam"], r["accepted"]
            same = plain == sam
            ok = same and bool(accepted)
            line = "%s %s: outputs %s plain decoding (%d prompts, %d ids), %s drafted ids accepted" % (
                engine, found[engine], "identical to" if same else "DIFFER from", len(plain),
                sum(len(p) for p in plain), accepted)
            report["results"][engine] = {"identical": same, "accepted": accepted, "ok": ok}
        except Exception as e:  # noqa: BLE001 (report every engine)
            ok, line = False, "%s %s: FAILED: %s" % (engine, found[engine], e)
            report["results"][engine] = {"ok": False, "error": str(e)}
        failed |= not ok
        print(("PASS " if ok else "FAIL ") + line)
    print("JSON " + json.dumps(report))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
