#!/usr/bin/env python3
"""Writes docs/performance.md from the raw outputs that tools/bench/report.sh leaves in --work.

Every table is read from a benchmark's own output (sam-replay --json, sam-inspect --json, the
text tables of sam-build, bench-step and bench-batch); nothing is typed in by hand.
"""
import argparse
import datetime
import json
import os
import platform
import re
import statistics
import subprocess


# bench-step --memory-latency: ns per dependent load over random cycles of 1, 4, 16 and 256 MiB.
LATENCY = re.compile(r"(\d+) MiB ([\d.]+)")


def latency(work):
    """The memory latency line: at the start and at the end of the benchmarks."""
    found = {}
    for when in ("start", "end"):
        if not os.path.exists(os.path.join(work, f"latency_{when}.txt")):
            return []
        found[when] = LATENCY.findall(read(work, f"latency_{when}.txt"))
    parts = [f"{' / '.join(ns for _, ns in pairs)} at the {when}" for when, pairs in found.items()]
    sizes = " / ".join(mib for mib, _ in found["start"])
    return [f"memory latency, ns per dependent load over {sizes} MiB (`bench-step "
            f"--memory-latency`): {', '.join(parts)}. What a cache miss costs: step times "
            "move with it"]


def cpu_model():
    """lscpu's model name."""
    try:
        for line in subprocess.run(["lscpu"], capture_output=True, text=True).stdout.splitlines():
            if line.startswith("Model name:"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown CPU"


def machine(work):
    """One line per fact about the machine the benchmarks ran on."""
    model = cpu_model()
    mem = ""
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemTotal:"):
                mem = f"{int(line.split()[1]) / 1024 / 1024:.0f} GiB"
    system = platform.platform()
    try:
        with open("/etc/os-release") as f:
            for line in f:
                if line.startswith("PRETTY_NAME="):
                    system = line.split("=", 1)[1].strip().strip('"')
    except OSError:
        pass
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    return [f"CPU: {model}, {os.cpu_count()} cores available; memory {mem}",
            f"system: {system}, kernel {platform.release()}",
            *latency(work),
            f"load average when the report was written: {load}",
            "run: " + datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")]


def table(header, rows):
    out = ["| " + " | ".join(header) + " |",
           "|" + "|".join("---" if i == 0 else "---:" for i in range(len(header))) + "|"]
    out += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(out)


def load(work, name):
    with open(os.path.join(work, name)) as f:
        return json.load(f)


def read(work, name):
    with open(os.path.join(work, name)) as f:
        return f.read()


# sam-build's last lines: the seconds end to end and the speed, and the peak RSS.
BUILD_SPEED = re.compile(r"total ([\d.]+) \(([\d.]+)M tokens/s end to end\)")
BUILD_RSS = re.compile(r"peak RSS ([\d.]+) MiB = ([\d.]+) bytes/token")


def policies(report):
    return {p["name"]: p for p in report["policies"]}


def bench_rows(text):
    """The data rows of a bench-step or bench-batch table: lines of fields after the header."""
    rows = []
    for line in text.splitlines():
        fields = line.split()
        if fields and re.fullmatch(r"\d+", fields[0]):
            rows.append(fields)
    return rows


def median_build(w):
    """The build report of report.sh's three default builds whose end-to-end time is the
    median, and the range of their speeds (M tokens/s) as text."""
    runs = []
    for k in (1, 2, 3):
        path = os.path.join(w, f"build_run{k}.txt")
        if os.path.exists(path):
            with open(path) as f:
                text = f.read()
            m = BUILD_SPEED.search(text)
            if m:
                runs.append((float(m.group(1)), float(m.group(2)), text))
    if not runs:
        raise SystemExit(f"report.py: no build report (build_run1.txt ...) in {w}")
    runs.sort()
    speeds = sorted(r[1] for r in runs)
    spread = f"{speeds[0]:.2f}-{speeds[-1]:.2f}" if len(runs) > 1 else f"{speeds[0]:.2f}"
    return runs[len(runs) // 2][2], len(runs), spread


def index_section(w):
    """The index: its size, build and open."""
    info = load(w, "inspect.json")
    build, builds, spread = median_build(w)
    speed = BUILD_SPEED.search(build)
    rss = BUILD_RSS.search(build)
    construct = re.search(r"construct ([\d.]+)", build)
    n = info["tokens"]
    accel = sum(s["bytes"] for s in info["sections"] if s["tag"] in ("HUBS", "FILT", "CLAB"))
    doc = ["", "## Index", "",
            "`sam-build --data-dir DATA --preset default` (Alpaca, CodeAlpaca, GSM8K train; the",
            "32K LLaMA tokenizer; BOS and one separator per document included):", "",
            table(["", "measured"], [
                ["tokens, documents", f"{n:,}, {info['documents']:,}"],
                ["states / clones / transitions per token",
                 f"{info['states'] / n:.3f} / {info['clones'] / n:.3f} / {info['transitions'] / n:.3f}"],
                ["index file", f"**{info['bytes_per_token']:.2f} bytes/token** "
                               f"({info['file_bytes'] / 1e6:.1f} MB)"],
                ["of which the accelerator sections (HUBS, FILT, CLAB)",
                 f"{accel / n:.2f} bytes/token ({accel / 1e6:.1f} MB)"],
                [f"build, end to end (read, tokenize, construct, write; the median of {builds} builds)",
                 f"**{speed.group(2)}M tokens/s** ({speed.group(1)} s; {spread}M)" if speed else "?"],
                ["construction alone", f"{construct.group(1)} s" if construct else "?"],
                ["peak RSS while building", f"**{rss.group(2)} bytes/token** ({rss.group(1)} MiB)"
                 if rss else "?"],
                ["open (`IndexFile::Open`, file in the page cache)", f"{info['open_ms']:.2f} ms"],
            ])]
    rec_path = os.path.join(w, "inspect_records.json")
    if os.path.exists(rec_path):
        rec = load(w, "inspect_records.json")
        with open(os.path.join(w, "build_records.txt")) as f:
            rec_build = f.read()
        rec_speed = BUILD_SPEED.search(rec_build)
        rec_rss = BUILD_RSS.search(rec_build)
        recs = sum(s["bytes"] for s in rec["sections"] if s["tag"] == "RECS")
        doc += ["", "The same corpora with child records (`--child-records`: the RECS section, every",
                "repeated string's heaviest children in one place; docs/indexer.md):", "",
                table(["", "measured"], [
                    ["index file", f"**{rec['bytes_per_token']:.2f} bytes/token** "
                                   f"({rec['file_bytes'] / 1e6:.1f} MB)"],
                    ["of which the child records (RECS)",
                     f"{recs / n:.2f} bytes/token ({recs / 1e6:.1f} MB)"],
                    ["build, end to end", f"**{rec_speed.group(2)}M tokens/s** ({rec_speed.group(1)} s)"
                     if rec_speed else "?"],
                    ["peak RSS while building", f"**{rec_rss.group(2)} bytes/token** "
                     f"({rec_rss.group(1)} MiB)" if rec_rss else "?"],
                    ["open (`IndexFile::Open`, file in the page cache)", f"{rec['open_ms']:.2f} ms"],
                ])]
    hf_path = os.path.join(w, "build_hf.txt")
    if os.path.exists(hf_path):
        with open(hf_path) as f:
            hf = f.read()
        hf_tokens = re.search(r"tokens (\d+) \(separators", hf)
        hf_speed = BUILD_SPEED.search(hf)
        hf_rss = BUILD_RSS.search(hf)
        hf_name = re.search(r"^tokenizer (.*)$", hf, re.M)
        package = hf_name.group(1).split("node_modules/")[-1].split("/models/")[0] if hf_name else ""
        doc += ["", f"The same corpora with a Hugging Face `tokenizer.json` ({package}, "
                f"{int(hf_tokens.group(1)):,} tokens):" if hf_tokens else "", "",
                table(["", "measured"], [
                    ["build, end to end", f"**{hf_speed.group(2)}M tokens/s** ({hf_speed.group(1)} s)"
                     if hf_speed else "?"],
                    ["peak RSS while building", f"**{hf_rss.group(2)} bytes/token** "
                     f"({hf_rss.group(1)} MiB)" if hf_rss else "?"],
                ])]
    return doc


def tokenizer_section(w):
    """The tokenizer.json backend: replay on its index, and its speed against Hugging Face's."""
    doc = []
    if os.path.exists(os.path.join(w, "replay_hf.json")):
        hf = policies(load(w, "replay_hf.json"))
        sp = policies(load(w, "replay.json"))
        hf_tokens = load(w, "inspect_hf.json")["tokens"]
        sp_tokens = load(w, "inspect.json")["tokens"]
        rows = [[f"`{name}`", f"{p['mat']:.3f}", f"{sp[name]['mat']:.3f}" if name in sp else ""]
                for name, p in hf.items()]
        doc += ["", "### An index built with a `tokenizer.json`", "",
                f"The same corpora tokenized by the Llama 3 `tokenizer.json` hold {hf_tokens:,} tokens",
                f"against {sp_tokens:,} with the 32K SentencePiece model (each Llama 3 token covers",
                f"{sp_tokens / hf_tokens:.2f} times as much text). The dev traces replayed on each index,",
                "re-tokenized by its tokenizer (MAT counts tokens: a Llama 3 token is longer):", "",
                table(["policy", "MAT, Llama 3 `tokenizer.json`", "MAT, SentencePiece 32K"], rows)]
    path = os.path.join(w, "tokenizers.txt")
    if os.path.exists(path):
        rows, name, ref, texts = [], None, None, None
        for line in read(w, "tokenizers.txt").splitlines():
            if line.startswith("== "):
                name = line[3:].strip()
            elif line.startswith("reference:"):
                ref = re.search(r"([\d.]+) M tokens/s", line)
                texts = re.search(r"reference: (\d+) texts", line) or texts
            elif line.startswith("ours:") and name:
                ours = re.search(r"([\d.]+) M tokens/s", line)
                rows.append([name, ours.group(1) if ours else "?", ref.group(1) if ref else "?"])
            elif line in ("ALL EQUAL", "DIFFERENCES") and rows:
                rows[-1].append("identical" if line == "ALL EQUAL" else "**differ**")
        doc += ["", "### Tokenizer speed", "",
                "`tools/bench/bench_tokenizers.sh`: every document of Alpaca, both CodeAlpaca files,",
                "GSM8K train and test and HumanEval, plus adversarial texts"
                + (f" ({int(texts.group(1)):,} texts)" if texts else "") + ", one",
                "thread each: the `tokenizer.json` backend",
                "with its pre-token cache, as `sam-build` runs it, against Hugging Face's tokenizers",
                "(the `@anush008/tokenizers` Node addon, `encodeBatch`), and whether the ids agree.", "",
                table(["tokenizer", "ours M tokens/s", "Hugging Face M tokens/s", "ids"], rows)]
    if doc:
        doc = ["", "## Hugging Face tokenizers"] + doc
    return doc


def replay_section(w):
    """Drafting quality: MAT per policy, budget curves, projected speed-ups."""
    replay = policies(load(w, "replay.json"))
    traces = load(w, "replay.json")["traces"]
    rows = []
    for name, p in replay.items():
        cat = p["by_category"]
        rows.append([f"`{name}`", f"{p['mat']:.3f}", f"{p['tokens_per_step']:.2f}",
                     f"{cat['gsm8k']['mat']:.3f}" if "gsm8k" in cat else "",
                     f"{cat['humaneval']['mat']:.3f}" if "humaneval" in cat else "",
                     f"{p['propose_us_p50']:.2f} / {p['propose_us_p99']:.1f}"])
    doc = ["", "## Drafting quality (replay)", "",
            f"`sam-replay` over {traces:,} dev traces (`sam-traces --template raw`:",
            "GSM8K test questions with reference answers, HumanEval prompts with canonical",
            "solutions), exact greedy replay against the index above. MAT counts the bonus token,",
            "so plain decoding is 1.00; tokens verified per step include the start token. Replay is",
            "deterministic: MAT and tokens per step repeat exactly; propose times are this run's.", "",
            table(["policy", "MAT", "tokens verified / step", "MAT GSM8K", "MAT HumanEval",
                   "propose p50 / p99 us"], rows)]

    curves = policies(load(w, "curves.json"))
    sizes = [c["draft_size"] for c in next(iter(curves.values()))["budget_curve"]]
    rows = [[f"`{name}`"] + [f"{c['mat']:.3f} / {c['tokens_per_step']:.1f}" for c in p["budget_curve"]]
            for name, p in curves.items()]
    doc += ["", "### Budget curves", "",
            "MAT / tokens verified per step at each draft size (`--draft-sizes`; nodes, start token",
            "included):", "", table(["policy"] + [str(s) for s in sizes], rows)]
    cal_cpu = policies(load(w, "cal_cpu.json"))["sam-cal"]
    rows = []
    for name, p in curves.items():
        best = max(p["budget_curve"], key=lambda c: c.get("projected_speedup", 0))
        rows.append([f"`{name}`", f"{p.get('projected_speedup', 0):.2f}x",
                     f"{best.get('projected_speedup', 0):.2f}x ({best['draft_size']})",
                     f"{p['mat']:.2f}x"])
    rows.append(["**`sam-cal` sizing its trees by the curve**",
                 f"**{cal_cpu.get('projected_speedup', 0):.2f}x**", "",
                 f"(MAT {cal_cpu['mat']:.3f} at {cal_cpu['tokens_per_step']:.1f} tokens per step)"])
    doc += ["", "### Projected speed-ups", "",
            "Tokens produced over the steps' verification cost in units of one token's pass",
            "(`--cost-curve`; drafting time left out). CPU: `docs/cost-curves/cpu-llama-8x1024.csv`,",
            "a random 8-layer, hidden-1024 Llama on a CPU (docs/generation.md). On a flat curve",
            "(GPU-like, `docs/cost-curves/flat-128.csv`) the projection is the MAT itself.", "",
            table(["policy", "CPU, default size", "CPU, best size", "flat curve"], rows)]
    return doc


def cache_section(w):
    """The cross-request response cache, on the index above and on one that does not cover the
    traffic."""
    replay = policies(load(w, "replay.json"))
    cache = policies(load(w, "cache.json"))
    comp = policies(load(w, "cache_compile.json"))["sam-cal"]

    def cell(p):
        return f"{p['mat']:.3f} at {p['tokens_per_step']:.1f}"
    rows = []
    for name, p in cache.items():
        rows.append(["default", f"`{name}`", cell(replay[name]), cell(p),
                     cell(comp) if name == "sam-cal" else ""])
    names = ("uncovered_plain.json", "uncovered_cache.json", "uncovered_compiled.json")
    if all(os.path.exists(os.path.join(w, n)) for n in names):
        plain, cached, compiled = (policies(load(w, n)) for n in names)
        for name in ("sam", "sam-cal"):
            rows.append(["without GSM8K train", f"`{name}`", cell(plain[name]), cell(cached[name]),
                         cell(compiled[name]) if name == "sam-cal" else ""])
    return ["", "## Cross-request response cache", "",
            "`sam-replay --cross-request --tenant-field category`: each finished trace's output",
            "joins its category's cache before the next trace (64 MiB); `--cache-compile` also",
            "compiles each tenant's responses into an automaton that `sam-cal` expands like an",
            "index. On the default index, which holds GSM8K train, the cache adds little: what",
            "these traces repeat across requests, the index mostly holds already. On the same",
            "corpora without GSM8K train (Alpaca and CodeAlpaca: an index that does not cover the",
            "traffic) it adds more. MAT at tokens verified per step; the cache also makes",
            "`sam-cal` draft more tokens a step (`tools/bench/bench_cache.sh` compares at equal",
            "tokens per step).", "",
            table(["index", "policy", "no cache", "with the cache", "cache, compiled"], rows)]


def at(p):
    """MAT @ tokens verified per step."""
    return f"{p['mat']:.3f} @ {p['tokens_per_step']:.1f}"


def by_size(p):
    """A policy's budget curve by draft size."""
    return {c["draft_size"]: c for c in p["budget_curve"]}


def best_sglang(w, nodes):
    """sglang-ngram's tree of highest MAT at `nodes` nodes over the settings report.sh replays
    (BFS and PROB, 0, 3, 6 and 9 of 11 drafted tokens from the corpus), or None."""
    best = None
    for m in ("bfs", "prob"):
        for b in (0, 3, 6, 9):
            name = f"sglang_{m}_{b}_{nodes}_tree.json"
            if os.path.exists(os.path.join(w, name)):
                p = policies(load(w, name))["sglang-ngram"]
                if best is None or p["mat"] > best["mat"]:
                    best = p
    return best


def chain_section(w):
    """Chains beside trees, and SGLang's NGRAM drafting at its own settings."""
    if not os.path.exists(os.path.join(w, "chain_sizes.json")):
        return []
    tree = policies(load(w, "tree_sizes.json"))
    chain = policies(load(w, "chain_sizes.json"))
    doc = ["", "## Chains and SGLang's NGRAM drafting (replay)", "",
           "The same index and traces. A chain (`--shape chain`, for verifiers that take one",
           "sequence per request) is the root path of a policy's tree with the most expected",
           "accepted tokens (`sam-cal` draws its tree for the chain: docs/runtime.md, \"Chains\").",
           "MAT @ tokens verified per step, at the default draft size:", "",
           table(["policy", "tree", "chain"],
                 [[f"`{n}`", at(tree[n]), at(chain[n])] for n in tree if n in chain])]
    sizes = [c["draft_size"] for c in next(iter(tree.values()))["budget_curve"]]
    rows = []
    for n in ("sam", "sam-tree", "sam-cal", "sglang-ngram"):
        for shape, ps in (("tree", tree), ("chain", chain)):
            if n in ps:
                curve = by_size(ps[n])
                rows.append([f"`{n}`, {shape}"] + [at(curve[k]) for k in sizes])
    doc += ["", "At each draft size (`--draft-sizes`; a size bounds a tree's nodes, or a chain's nodes,",
            "cut from the policy's draft at its default size, as an engine's limit cuts it: 9 is",
            "vLLM's `num_speculative_tokens` 8 with the start token):", "",
            table(["policy, shape"] + [str(k) for k in sizes], rows)]
    cal = chain["sam-cal"]
    cal12, sam12 = by_size(cal).get(12), by_size(tree["sam"]).get(12)
    if cal12 and sam12:
        doc += ["", f"At the default draft size `sam-cal`'s chains verify {cal['tokens_per_step']:.1f} "
                f"tokens a step and reach {cal['mat'] / sam12['mat']:.3f}x the MAT of the paper rule "
                f"at 12 nodes ({cal['mat']:.3f} against {sam12['mat']:.3f}, with "
                f"{sam12['tokens_per_step']:.1f} tokens verified); cut at 12 nodes, "
                f"{cal12['mat'] / sam12['mat']:.3f}x ({cal12['mat']:.3f} with "
                f"{cal12['tokens_per_step']:.1f} verified)."]
    rows = []
    for m in ("bfs", "prob"):
        for b in (0, 3, 6, 9):
            label = f"{m.upper()}, " + ("trie alone" + (" (SGLang's defaults)" if m == "bfs" else "")
                                        if b == 0 else f"corpus {b}/11 ({b * 23 // 11}/23)")
            row = [label]
            for n in (12, 24):
                for shape in ("tree", "chain"):
                    name = os.path.join(w, f"sglang_{m}_{b}_{n}_{shape}.json")
                    if not os.path.exists(name):
                        row.append("")
                        continue
                    row.append(at(policies(load(w, os.path.basename(name)))["sglang-ngram"]))
            rows.append(row)
    for n in ("sam-cal", "sam"):
        row = [f"`{n}`"]
        for k in (12, 24):
            row += [at(by_size(tree[n])[k]), at(by_size(chain[n])[k])]
        rows.append(row)
    doc += ["", "`sglang-ngram` (SGLang's NGRAM drafting, this index as its external corpus;",
            "`--sglang-match`, `--sglang-corpus-budget`) at its 12 nodes and at 24:", "",
            table(["setting", "12 tree", "12 chain", "24 tree", "24 chain"], rows)]
    best = {n: best_sglang(w, n) for n in (12, 24)}
    if best[12] and best[24]:
        t12, t24 = by_size(tree["sam-cal"])[12], by_size(tree["sam-cal"])[24]
        doc += ["", f"SGLang's best setting here reaches {at(best[12])} at 12 nodes and "
                f"{at(best[24])} at 24; `sam-cal`'s trees are {t12['mat'] / best[12]['mat']:.2f}x "
                f"and {t24['mat'] / best[24]['mat']:.2f}x above it."]
    return doc


def step_section(w):
    """Per-step cost: against context length, where it goes, and shard sets."""
    def step_table(text):
        rows = [[r[0], f"`{r[1]}`", r[2], r[3], r[4], r[5], r[6], r[7]] for r in bench_rows(text)]
        return table(["context", "policy", "p50 us", "p99 us", "cold p99 us", "MAT", "ns/token",
                      "prefill"], rows)
    with open(os.path.join(w, "step.txt")) as f:
        step = f.read()
    doc = ["", "## Per-step cost (bench-step)", "",
            "Propose + commit of one drafting step (verification excluded), a session prefilled",
            "with a context of the traces' prompts, then their recorded outputs as the generation;",
            "40-node drafts, index read into huge pages (`--load read`), shared `StaticIndex`",
            "(its tables read from the file's accelerator sections), medians of 3 warm runs of",
            "2,000 steps. On a shared machine a cell's median moves by up to about 25% between runs.",
            "", step_table(step)]

    doc += floor_section(w)
    doc += lookups_section(w)
    doc += shard_section(w)
    return doc


def p50_p99(row):
    """A bench-step row's p50 / p99 cell."""
    return f"{row[2]} / {row[3]}"


def ratios(row, base):
    """p50 and p99 of a bench-step row over another's."""
    return (f"{float(row[2]) / float(base[2]):.1f}x / "
            f"{float(row[3]) / float(base[3]):.1f}x")


def floor_section(w):
    """The same steps prewarmed (no cache misses) and with child records, beside plain ones."""
    settings = (("step_default.txt", "plain"), ("step_prewarm.txt", "prewarmed"),
                ("step_records.txt", "child records"),
                ("step_records_prewarm.txt", "child records, prewarmed"))
    runs = {}
    for name, label in settings:
        if os.path.exists(os.path.join(w, name)):
            runs[label] = {(r[0], r[1]): r for r in bench_rows(read(w, name))}
    if len(runs) < 2:
        return []
    rows = []
    contexts = sorted({c for run in runs.values() for (c, _) in run}, key=int)
    for c in contexts:
        for label, run in runs.items():
            sam, cal = run.get((c, "sam")), run.get((c, "sam-cal"))
            if not sam or not cal:
                continue
            rows.append([c, label, p50_p99(sam), p50_p99(cal), ratios(cal, sam)])
    return ["", "### Where a step's time goes", "",
            "The paper rule and `sam-cal` interleaved in one bench-step run per setting (the same",
            "steps and settings as above): plain; prewarmed (`--prewarm`: each step proposed once",
            "untimed right before, so that the timed one finds what it reads in the CPU caches: the",
            "step without its cache misses); over the index built with child records",
            "(`--child-records`: a branching state's heaviest children in one record, mapped from",
            "the file, the same drafts); and both. The paper rule reads one run of text a step; `sam-cal`",
            "looks up to `max_static_lookups` branching states that the previous step did not",
            "read (a step starts where the last draft was rejected).", "",
            table(["context", "setting", "`sam` p50 / p99 us", "`sam-cal` p50 / p99 us",
                   "`sam-cal` / `sam`"], rows)]


def lookups_section(w):
    """sam-cal's lookup limit: MAT and tokens per step (replay), with and without backoff
    children, and the step cost at each limit against the paper rule's (bench-step)."""
    limits = (1, 2, 4, 8, 16, 0)
    if not all(os.path.exists(os.path.join(w, f"lookups_{l}_backoff{b}.json"))
               for l in limits for b in (8, 0)) or not os.path.exists(
                   os.path.join(w, "step_lookups.txt")):
        return []
    step = {(r[0], r[1]): r for r in bench_rows(read(w, "step_lookups.txt"))}
    rows = []
    for l in limits:
        with_b = policies(load(w, f"lookups_{l}_backoff8.json"))["sam-cal"]
        without = policies(load(w, f"lookups_{l}_backoff0.json"))["sam-cal"]
        name = f"**{l}** (default)" if l == 8 else ("no limit" if l == 0 else str(l))
        row = [name, f"{with_b['mat']:.3f} / {with_b['tokens_per_step']:.1f}",
               f"{without['mat']:.3f} / {without['tokens_per_step']:.1f}"]
        for c in ("1024", "131072"):
            cal, sam = step.get((c, f"sam-cal/L{l}")), step.get((c, "sam"))
            row += [p50_p99(cal), ratios(cal, sam)] if cal and sam else ["", ""]
        rows.append(row)
    sam_1k, sam_128k = step.get(("1024", "sam")), step.get(("131072", "sam"))
    paper = (f"The paper rule in the same run: {p50_p99(sam_1k)} us at 1K, "
             f"{p50_p99(sam_128k)} us at 128K." if sam_1k and sam_128k else "")
    return ["", "### The lookup limit", "",
            "`sam-cal` looks up at most `max_static_lookups` branching states a step",
            "(`--experimental max_static_lookups=N`; 0: no limit; default 8). A lookup is a chain",
            "of dependent reads in the index (the state's transitions, then their labels and",
            "counts), so each one adds about the same to a step; more lookups find more of the",
            "tokens the model accepts. MAT / tokens verified per step from `sam-replay` over the",
            "dev traces, with backoff children (the default, `backoff_count` 8) and without",
            "(`--experimental backoff_count=0`); step p50 / p99 from one `bench-step` run whose rows",
            "(every limit, and the paper rule) take turns, settings as above. " + paper, "",
            table(["lookups", "MAT / tokens, backoff", "MAT / tokens, no backoff",
                   "1K p50 / p99 us", "1K / `sam`", "128K p50 / p99 us", "128K / `sam`"], rows)]


def round_medians(w, index):
    """An index's bench-step rows in the shard-set rounds, by (context, policy): each
    row's p50 and p99 the median over the rounds (None without rounds)."""
    rounds = sorted(f for f in os.listdir(w) if re.fullmatch(rf"sets_{index}_round\d+\.txt", f))
    if not rounds:
        return None
    cells = {}
    for name in rounds:
        for r in bench_rows(read(w, name)):
            cells.setdefault((r[0], r[1]), []).append(r)
    medians = {}
    for key, rows in cells.items():
        row = list(rows[0])
        for col in (2, 3):
            row[col] = f"{statistics.median(float(r[col]) for r in rows):.2f}"
        medians[key] = row
    return medians, len(rounds)


def shard_section(w):
    """Shard sets of 2, 4 and 8 shards of the same corpus against the single file."""
    rows = []
    num_rounds = 0
    for n, records in ((2, False), (4, False), (8, False), (4, True)):
        name = f"{'r' if records else ''}shard{n}"
        got, single_got = round_medians(w, name), round_medians(w, "records" if records else "default")
        if not got or not single_got:
            continue
        (cells, num_rounds), (single, _) = got, single_got
        info = load(w, f"inspect_{name}.json")
        for key, r in cells.items():
            one = single.get(key)
            if one:
                rows.append([r[0], f"`{r[1]}`", f"{n}, child records" if records else str(n),
                             f"{info['bytes_per_token']:.2f}", p50_p99(one), p50_p99(r),
                             ratios(r, one)])
    rows.sort(key=lambda r: (int(r[0]), r[1], int(r[2].split(",")[0]), r[2]))
    if not rows:
        return []
    return ["", "### Shard sets", "",
            "The same corpus as 2, 4 and 8 shards (`sam-build --shard I/N`, joined by",
            "`--write-samset`), each shard with its own `StaticIndex`, against the single file: the",
            "same settings, the paper rule and `sam-cal` interleaved. The indexes take turns, one",
            f"bench-step run of each a round, {num_rounds} rounds, so that a set and the single file see the",
            "same phases of the machine; each cell is the median over the rounds. The 4-shard set",
            "with child records (`--child-records` on every shard) is against the single file with",
            "child records. Every set drafts exactly what the single file drafts.", "",
            table(["context", "policy", "shards", "set bytes/token", "single file p50 / p99 us",
                   "set p50 / p99 us", "set / single"], rows)]


def bounded_section(w):
    """A build under --max-memory: the shards it wrote and their peak memory."""
    path = os.path.join(w, "bounded.txt")
    if not os.path.exists(path):
        return []
    text = read(w, "bounded.txt")
    shard = re.compile(r"^\s+(\S+\.sam)\s+documents\s+(\d+)\s+tokens\s+(\d+) of\s+(\d+)\s+"
                       r"([\d.]+) bytes/token\s+([\d.]+) s\s+peak RSS\s+([\d.]+) MiB", re.M)
    bound = float(re.search(r"^bound ([\d.]+) MiB$", text, re.M).group(1))
    rows = [[m.group(1), f"{int(m.group(3)):,}", f"{int(m.group(4)):,}", m.group(5),
             m.group(7), f"{float(m.group(7)) / bound:.2f}"] for m in shard.finditer(text)]
    speed = BUILD_SPEED.search(text)
    whole = re.search(r"^file \d+ bytes = ([\d.]+) bytes/token", text, re.M)
    exceeded = "exceeded --max-memory" in text
    doc = ["", "## Memory-bounded builds", "",
           f"`sam-build --data-dir DATA --preset default --max-memory {bound:g}M`: the shards it wrote",
           "(each planned at 56 bytes/token from the memory left when it starts), each one's",
           "peak RSS (VmHWM) against the bound, accelerator sections included.", "",
           table(["shard", "tokens", "token budget", "bytes/token", "peak RSS MiB", "peak / bound"],
                 rows)]
    doc += ["", ("A shard exceeded the bound (sam-build warned)." if exceeded else
                 "Every shard stayed within the bound.") +
            (f" The set: {whole.group(1)} bytes/token." if whole else "") +
            (f" End to end {speed.group(2)}M tokens/s ({speed.group(1)} s)." if speed else "")]
    return doc


def memory_section(w):
    """Resident memory of one and two processes, with and without the accelerator sections."""
    rows = []
    for name, kind in (("memory.txt", "index file"),
                       ("memory_records.txt", "file with child records"),
                       ("memory_plain.txt", "file without accelerator sections")):
        if not os.path.exists(os.path.join(w, name)):
            continue
        mem = [line.split() for line in read(w, name).splitlines() if line.strip()]
        for label, count in (("one", "one process"), ("two", "each of two at once")):
            m = next(m for m in mem if m[0] == label)
            rows.append([kind, count] + [f"{int(kb) / 1024:.1f}" for kb in m[2:5]])
    return ["", "## Memory per process", "",
            "`sam-replay --policy sam-cal` over the dev traces (index mapped, shared `StaticIndex`),",
            "alone and then two at once (`tools/bench/memory.sh`: of the /proc/PID/smaps_rollup",
            "samples taken while every process runs, the one of largest total Rss), with the index",
            "file, with the same index built with child records (`--child-records`), and written",
            "without its accelerator sections (`--no-accelerators`, as format 1.0 files are), whose",
            "tables every process computes at open. Pss shares each page among the processes that",
            "map it: the index file's pages count half in each of two; Private_Dirty is what a",
            "process wrote for itself (the session, the traces, and computed tables).", "",
            table(["", "", "Rss MiB", "Pss MiB", "Private_Dirty MiB"], rows)]


def batch_section(w):
    """Many sessions drafted by one DraftPool call a step."""
    with open(os.path.join(w, "batch.txt")) as f:
        batch = f.read()
    rows = [[r[0], r[1], r[3], r[4], r[5], r[8]] for r in bench_rows(batch)]
    return ["", "## Many sessions (bench-batch)", "",
            "N sessions with their own streams (1K-token contexts), drafted by one",
            "`DraftPool::Propose` call a step (policy `sam-cal`, the default; all cores); core us/session is the",
            "call time x min(threads, N) / N; resident memory is each session's growth, with a",
            "64 MiB dynamic automaton reserved per session.", "",
            table(["N", "call us", "core us/session", "x one session", "seq us/session",
                   "resident MiB/session"], rows)]


README_BEGIN = "<!-- results: written by tools/bench/report.sh with docs/performance.md; edit that script, not this block -->"
README_END = "<!-- /results -->"


def readme_results(w):
    """The README's Results block: the figures its policy guide cites, from this run."""
    info = load(w, "inspect.json")
    build, _, _ = median_build(w)
    speed = BUILD_SPEED.search(build)
    replay_run = load(w, "replay.json")
    replay, traces = policies(replay_run), replay_run["traces"]
    step = {(r[0], r[1]): r for r in bench_rows(read(w, "step.txt"))}
    records_step = {}
    if os.path.exists(os.path.join(w, "step_records.txt")):
        records_step = {(r[0], r[1]): r for r in bench_rows(read(w, "step_records.txt"))}
    plain_step = {}
    if os.path.exists(os.path.join(w, "step_default.txt")):
        plain_step = {(r[0], r[1]): r for r in bench_rows(read(w, "step_default.txt"))}
    lines = [README_BEGIN, "",
             f"Figures of the last report run, on a shared {os.cpu_count()}-core {cpu_model()}",
             "(docs/performance.md has them all, with the machine; `tools/bench/report.sh`",
             "regenerates both on yours in a few minutes): the default index (Alpaca, CodeAlpaca,",
             f"GSM8K train; {info['tokens'] / 1e6:.1f}M tokens, {info['bytes_per_token']:.1f} bytes "
             "a token with its accelerator sections,",
             f"built at {speed.group(2) if speed else '?'}M tokens/s), {traces:,} traces of GSM8K "
             "test and HumanEval reference answers,", "exact greedy replay.", ""]

    def at_text(q):
        return f"{q['mat']:.3f} at {q['tokens_per_step']:.1f} tokens per step"

    def cost(name):
        r = step.get(("1024", name))
        return f"{r[2]} us" if r else ""
    rows = []
    labels = (("pld", "`pld` (prompt lookup baseline)"), ("sam", "`sam` (the paper's rule)"),
              ("sam-tree", "`sam-tree` (count-weighted trees)"), ("sam-cal", "**`sam-cal`** (default)"))
    for name, label in labels:
        if name not in replay:
            continue
        p = replay[name]
        mat, tps, c = f"{p['mat']:.3f}", f"{p['tokens_per_step']:.2f}", cost(name)
        if name == "sam-cal":
            mat, tps = f"**{mat}**", f"**{tps}**"
        elif name == "sam-tree":
            c = ""
        rows.append([label, mat, tps, c])
    best12 = best_sglang(w, 12)
    if best12:
        rows.append(["`sglang-ngram` (SGLang's NGRAM drafting, this index as its corpus, its best "
                     "setting at 12 nodes)", f"{best12['mat']:.3f}", f"{best12['tokens_per_step']:.2f}", ""])
    lines += [table(["policy", "MAT", "tokens verified / step", "step cost, 1K context (p50)"], rows)]

    facts = []
    tree = policies(load(w, "tree_sizes.json")) if os.path.exists(
        os.path.join(w, "tree_sizes.json")) else {}
    chain = policies(load(w, "chain_sizes.json")) if os.path.exists(
        os.path.join(w, "chain_sizes.json")) else {}
    if "sam-cal" in chain and "sam" in chain:
        cal9, sam9 = by_size(chain["sam-cal"]).get(9), by_size(chain["sam"]).get(9)
        if cal9 and sam9:
            facts.append(["chains of at most 8 drafted tokens (`shape=\"chain\"`, vLLM's "
                          "`num_speculative_tokens` 8)",
                          f"`sam-cal` MAT {at_text(cal9)}; the paper rule's {at_text(sam9)}"])
        sam12 = by_size(tree["sam"]).get(12) if "sam" in tree else None
        cal = chain["sam-cal"]
        if sam12:
            facts.append(["chains at the default draft size",
                          f"`sam-cal` MAT {at_text(cal)}, {cal['mat'] / sam12['mat']:.2f}x the "
                          f"paper rule's {at_text(sam12)} at 12 nodes"])
    if os.path.exists(os.path.join(w, "cal_cpu.json")) and os.path.exists(
            os.path.join(w, "curves.json")):
        cpu = policies(load(w, "cal_cpu.json"))["sam-cal"]
        curve = policies(load(w, "curves.json"))["sam-cal"]
        facts.append(["verification on a CPU (`docs/cost-curves/cpu-llama-8x1024.csv`)",
                      f"projected speed-up {cpu.get('projected_speedup', 0):.2f}x with the cost "
                      f"curve, {curve.get('projected_speedup', 0):.2f}x without"])
    if os.path.exists(os.path.join(w, "inspect_records.json")):
        rec = load(w, "inspect_records.json")
        text = (f"{rec['bytes_per_token']:.1f} bytes per token against "
                f"{info['bytes_per_token']:.1f}")
        plain, with_rec = plain_step.get(("1024", "sam-cal")), records_step.get(("1024", "sam-cal"))
        if plain and with_rec:
            text += (f"; `sam-cal` step p50 {with_rec[2]} us against {plain[2]} us at 1K "
                     "(the same drafts)")
        facts.append(["child records (`sam-build --child-records`)", text])
    got, single_got = round_medians(w, "shard4"), round_medians(w, "default")
    if got and single_got:
        r, one = got[0].get(("1024", "sam-cal")), single_got[0].get(("1024", "sam-cal"))
        if r and one:
            facts.append(["a 4-shard set (`--shard I/4`) against the single file",
                          f"`sam-cal` step p50 / p99 {ratios(r, one)} at 1K (the same drafts)"])
    if facts:
        lines += ["", table(["setting", "measured"], facts)]
    lines += ["", README_END]
    return lines


def update_readme(path, block):
    """Replaces the README's Results block (between README_BEGIN and README_END)."""
    with open(path) as f:
        text = f.read()
    begin, end = text.find(README_BEGIN), text.find(README_END)
    if begin < 0 or end < begin:
        raise SystemExit(f"report.py: {path}: no Results block ({README_BEGIN} ... {README_END})")
    text = text[:begin] + "\n".join(block) + text[end + len(README_END):]
    tmp = f"{path}.tmp-{os.getpid()}"
    with open(tmp, "w") as f:
        f.write(text)
    os.replace(tmp, path)


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--work", required=True)
    ap.add_argument("--bin", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--readme", help="also rewrite this README's Results block")
    a = ap.parse_args()
    doc = ["<!-- Generated by tools/bench/report.sh; edit that script, not this file. -->",
           "# Performance", "",
           "Every figure here comes from one run of `tools/bench/report.sh` (a few minutes), on",
           "the machine below. Regenerate them on yours with that command; the reference docs",
           "(docs/runtime.md, docs/indexer.md) say what each benchmark measures.", "",
           "**Machine.**", ""]
    doc += ["- " + line for line in machine(a.work)]
    for section in (index_section, replay_section, tokenizer_section, cache_section,
                    chain_section, step_section, memory_section, bounded_section, batch_section):
        doc += section(a.work)
    doc.append("")
    with open(a.out, "w") as f:
        f.write("\n".join(doc))
    if a.readme:
        update_readme(a.readme, readme_results(a.work))


if __name__ == "__main__":
    main()
