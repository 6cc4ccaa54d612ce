"""Python overhead per propose + commit against the C++ session (docs/python.md).

    build/bin/python_reference_session fixture DIR [DOCUMENTS GENERATION]
    PYTHONPATH=build/python /usr/bin/python3 tools/bench/bench_python.py DIR build/bin/python_reference_session

Replays DIR/reference.json's generation (the commits of a greedy replay) over
DIR/index.sam (prepared) through samdecoding and through the C++ session, and
prints the median ns per step (propose + commit) of each over the
repetitions, per policy, with the least in parentheses (on a busy machine the
least is the steadier figure). Columns: C++; Python with list ids; the same
reading draft.tokens and draft.parents each step; Python with uint32 numpy
ids; the overhead (Python with list ids minus C++). Then, for N = 1, 8, 64
and 256 sessions (each at a different point of the generation), the time of
one propose per session from Python: a loop of session.propose against one
samdecoding.propose_batch call (a pool over all cores, the GIL released).
Last, the drafting cost of one vLLM engine step through the adapter
(samdecoding.vllm.SamProposer.propose over an InputBatch of 64 and 256
rows, each row a request at a different point of the generation that
advances by one greedy step's ids per engine step): median and least ms per
step over the steps, per policy and drafting threads. A benchmark, not a
test: it asserts nothing.
"""
import json
import os
import statistics
import subprocess
import sys
import time
import warnings

import numpy as np

import samdecoding as sd

# The fixture's small index has no accelerator sections; computing them at open is what the
# note is about, and costs nothing here.
warnings.filterwarnings("ignore", message=".*has no accelerator sections")


def commits_of(session, prompt, generation):
    """The commits of a greedy replay of generation (the same rule as the C++ side)."""
    session.prefill(prompt)
    commits, i = [], 0
    while i + 1 < len(generation):
        draft = session.propose(generation[i])
        tokens, parents = draft.tokens.tolist(), draft.parents.tolist()
        path, node = [generation[i]], 0
        for token in generation[i + 1:]:
            child = next((k for k in range(len(tokens))
                          if parents[k] == node and tokens[k] == token), -1)
            if child < 0:
                break
            node = child
            path.append(token)
        session.commit(path)
        commits.append(path)
        i += len(path)
    return commits


def python_median(index, policy, prompt, generation, reps, as_numpy, touch_arrays):
    session = sd.Session(policy=policy, draft_size=16,
                         recycling_vocab_size=index.vocab_size if policy == "sam-rec" else 0)
    session.attach(index)
    commits = commits_of(session, prompt, generation)
    if as_numpy:
        commits = [np.array(c, dtype=np.uint32) for c in commits]
    per_step = []
    for _ in range(reps):
        session.reset()
        session.prefill(prompt)
        propose, commit = session.propose, session.commit
        t0 = time.perf_counter_ns()
        if touch_arrays:
            for c in commits:
                d = propose(c[0])
                d.tokens
                d.parents
                commit(c)
        else:
            for c in commits:
                propose(c[0])
                commit(c)
        per_step.append((time.perf_counter_ns() - t0) / len(commits))
    return (statistics.median(per_step), min(per_step)), len(commits)


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    folder, reference = sys.argv[1], sys.argv[2]
    with open(os.path.join(folder, "reference.json")) as f:
        ref = json.load(f)
    prompt, generation = ref["prompt"], ref["generation"]
    index = sd.Index.open(os.path.join(folder, "index.sam"))
    reps = 21
    print("%-9s %6s %13s %13s %15s %13s %13s" % ("policy", "steps", "C++ ns", "Python ns",
                                                 "+tokens,parents", "numpy ids", "overhead ns"))

    def cell(pair):
        return "%5.0f (%5.0f)" % pair

    for policy in ("sam", "sam-tree", "sam-cal"):
        cpp = json.loads(subprocess.check_output([reference, "bench", folder, policy, str(reps)]))
        c = (cpp["median_ns_per_step"], cpp["min_ns_per_step"])
        py, steps = python_median(index, policy, prompt, generation, reps, False, False)
        py_arrays, _ = python_median(index, policy, prompt, generation, reps, False, True)
        py_numpy, _ = python_median(index, policy, prompt, generation, reps, True, False)
        print("%-9s %6d %13s %13s %15s %13s %13s" % (
            policy, steps, cell(c), cell(py), cell(py_arrays), cell(py_numpy),
            cell((py[0] - c[0], py[1] - c[1]))))

    batch_table(index, prompt, generation, reps)
    vllm_table(os.path.join(folder, "index.sam"), index, prompt, generation)


def batch_table(index, prompt, generation, reps):
    """propose for N sessions: a Python loop against propose_batch."""
    ref_session = sd.Session(policy="sam", draft_size=16)
    ref_session.attach(index)
    commits = commits_of(ref_session, prompt, generation)
    print("\n%-6s %16s %16s %16s %8s" % ("N", "loop us/call", "batch us/call", "batch us/session",
                                          "speedup"))
    pool = sd.DraftPool()
    for n in (1, 8, 64, 256):
        sessions, starts = [], []
        for i in range(n):
            s = sd.Session(policy="sam", draft_size=16)
            s.attach(index)
            s.prefill(prompt)
            upto = (i * 7) % len(commits)
            for c in commits[:upto]:
                s.propose(c[0])
                s.commit(c)
            sessions.append(s)
            starts.append(commits[upto][0])
        loop, batch = [], []
        for _ in range(reps):
            t0 = time.perf_counter_ns()
            for s, start in zip(sessions, starts):
                s.propose(start)
            t1 = time.perf_counter_ns()
            pool.propose(sessions, starts)
            t2 = time.perf_counter_ns()
            loop.append((t1 - t0) / 1e3)
            batch.append((t2 - t1) / 1e3)
        lm, bm = statistics.median(loop), statistics.median(batch)
        print("%-6d %16.1f %16.1f %16.2f %7.2fx" % (n, lm, bm, bm / n, lm / bm))
    print("(pool threads: %d)" % pool.threads)


def vllm_table(path, index, prompt, generation, steps=24, k=8):
    """SamProposer.propose per engine step for N rows (as vLLM calls it)."""
    import types

    import samdecoding.vllm

    ref_session = sd.Session(policy="sam", draft_size=16)
    ref_session.attach(index)
    commits = commits_of(ref_session, prompt, generation)
    max_len = len(prompt) + len(generation) + 64
    config = types.SimpleNamespace(
        speculative_config=types.SimpleNamespace(num_speculative_tokens=k),
        model_config=types.SimpleNamespace(max_model_len=max_len))
    print("\nvLLM adapter, one engine step (propose for every row), K = %d:" % k)
    print("%-6s %-8s %8s %16s %16s" % ("rows", "policy", "threads", "ms/step median",
                                        "ms/step least"))
    for rows in (64, 256):
        for policy in ("sam", "sam-cal"):
            for threads in (1, 0):
                proposer_class = type("BenchProposer", (samdecoding.vllm.SamProposer,),
                                      {"index_path": path, "policy": policy,
                                       "threads": threads or None})
                proposer = proposer_class(config)
                token_ids = np.zeros((rows, max_len), dtype=np.int32)
                counts = np.zeros(rows, dtype=np.int32)
                cursor = []
                for i in range(rows):
                    upto = (i * 7) % (len(commits) - steps - 1)
                    ids = list(prompt) + [t for c in commits[:upto] for t in c] + \
                        [commits[upto][0]]
                    token_ids[i, :len(ids)] = ids
                    counts[i] = len(ids)
                    cursor.append(upto)
                sampled = [[int(token_ids[i, counts[i] - 1])] for i in range(rows)]
                proposer.propose(sampled, counts, token_ids)  # first sight: prefills
                times = []
                for _ in range(steps):
                    for i in range(rows):
                        # The ids verified this step: the rest of this commit
                        # (the start was appended before) and the next start.
                        c, nxt = commits[cursor[i]], commits[cursor[i] + 1]
                        new = list(c[1:]) + [nxt[0]]
                        token_ids[i, counts[i]:counts[i] + len(new)] = new
                        counts[i] += len(new)
                        sampled[i] = new
                        cursor[i] += 1
                    t0 = time.perf_counter_ns()
                    proposer.propose(sampled, counts, token_ids)
                    times.append((time.perf_counter_ns() - t0) / 1e6)
                print("%-6d %-8s %8d %16.3f %16.3f" % (rows, policy, proposer._draft_pool.threads,
                                                      statistics.median(times), min(times)))


if __name__ == "__main__":
    main()
