"""Interface tests of the engine adapters (samdecoding.vllm, .sglang, .hf).

None of the engines can be installed here. Each test is a small driver that
replays the call sequence the engine documents for its plug-in (requests
arriving and leaving a running batch, chunked prefill, rows condensed, the
verified tokens fed back), with a "model" that answers from recorded
generations, and checks every draft against the C++ session's
(reference_session.cc writes the oracle: reference.json "engines").

Run by CTest like test_samdecoding.py (SAM_PYTHON_FIXTURE).
"""
import json
import os
import re
import sys
import types
import unittest

import numpy as np

import samdecoding as sd
import samdecoding.hf
import samdecoding.sglang
import samdecoding.vllm

try:
    import torch
except ImportError:  # the drivers use numpy then
    torch = None

FIXTURE = os.environ["SAM_PYTHON_FIXTURE"]
INDEX = os.path.join(FIXTURE, "index.sam")
with open(os.path.join(FIXTURE, "reference.json")) as f:
    ENG = json.load(f)["engines"]
REQUESTS = ENG["requests"]
K = ENG["chain_tokens"]
D = ENG["tree_nodes"]
POLICIES = ("sam", "sam-cal")


def accepted_prefix(draft, generation, pos):
    """How many leading draft ids the model (the recorded generation from
    position pos on) accepts."""
    k = 0
    while k < len(draft) and pos + k < len(generation) and draft[k] == generation[pos + k]:
        k += 1
    return k


def first_child_chain(step, limit):
    """The recorded tree's first-child chain (node 1, its first child, ...),
    at most `limit` ids."""
    chain, node = [], 0
    for i in range(1, len(step["tokens"])):
        if step["parents"][i] == node and len(chain) < limit:
            chain.append(step["tokens"][i])
            node = i
    return chain


def best_chain(step, limit):
    """Brute force over the root paths of the tree a chain was cut from
    (reference.json: the C++ session's last_tree()): the path of at most
    `limit` ids whose expected accepted tokens, the sum over its nodes of
    the product of accept_estimates (clamped to [0, 1]) down to each, is the
    largest; ties go to the shallower path, then to the first in node order.
    A tree without estimates (the paper rule's linear drafts) gives its
    first-child chain."""
    tokens, parents, depths, estimates = (step["tokens"], step["parents"], step["depths"],
                                          step["estimates"])
    if not estimates:
        return first_child_chain(step, limit)

    def root_path(v):
        path = []
        while v > 0:
            path.append(v)
            v = parents[v]
        return path[::-1]

    best, best_expected = 0, 0.0
    for v in range(1, len(tokens)):
        if depths[v] > limit:
            continue
        probability, expected = 1.0, 0.0
        for u in root_path(v):
            probability *= min(max(estimates[u], 0.0), 1.0)
            expected += probability
        if expected > best_expected or (expected == best_expected and depths[v] < depths[best]):
            best, best_expected = v, expected
    return [tokens[u] for u in root_path(best)]


class HandDrivenSession:
    """The oracle of one request: a chain session driven by hand as
    docs/python.md says (prefill the prompt, then commit what was verified
    and propose from the last id, at most limit + 1 nodes)."""

    def __init__(self, index, policy, context, shape="chain"):
        self.session = sd.Session(policy=policy, shape=shape)
        self.session.attach(index)
        self.session.prefill(context[:-1])
        self.taken = len(context) - 1

    def chain(self, context, limit):
        if len(context) - 1 > self.taken:
            self.session.commit(context[self.taken:len(context) - 1])
            self.taken = len(context) - 1
        draft = self.session.propose(context[-1], max_nodes=max(limit, 0) + 1)
        tokens, parents = draft.tokens.tolist(), draft.parents.tolist()
        chain, node = [], 0  # a tree's first-child chain; a chain's ids
        for i in range(1, len(tokens)):
            if parents[i] == node:
                chain.append(tokens[i])
                node = i
        return chain


class ReferenceChainsTest(unittest.TestCase):
    """The oracle itself: the C++ chain session's chains (max_nodes K + 1)
    are the best root paths of the trees they were cut from, and for
    sam-cal these differ from the first-child chains often enough for the
    engine tests to tell them apart."""

    def test_chains_are_the_best_root_paths(self):
        for mode in ("chain", "chain_bare"):
            for policy in POLICIES:
                differ = steps = 0
                for r, request_steps in enumerate(ENG[mode][policy]):
                    for n, step in enumerate(request_steps):
                        where = "%s %s request %d step %d" % (mode, policy, r, n)
                        self.assertEqual(step["chain"], best_chain(step, K), where)
                        differ += step["chain"] != first_child_chain(step, K)
                        steps += 1
                if policy == "sam":  # linear drafts: the chain is the draft's first K ids
                    self.assertEqual(differ, 0)
                else:
                    self.assertGreater(differ, steps // 20, "%s: best vs first-child" % mode)


class VllmCustomProposerTest(unittest.TestCase):
    """vLLM V1, replayed as merged (vllm-project/vllm):
    create_custom_proposer (vllm/v1/spec_decode/custom_class_proposer.py,
    commit f7490e78) constructs user_class(vllm_config); every step,
    GPUModelRunner.sample_tokens (vllm/v1/worker/gpu_model_runner.py, commit
    000fc94b) runs bookkeeping (the sampled ids appended to the InputBatch;
    [] for a row in chunked prefill) and then, when the batch fits the
    drafter (max seq_len + K <= max_model_len), propose_draft_token_ids
    calls propose(sampled_token_ids, input_batch.num_tokens_no_spec,
    input_batch.token_ids_cpu, slot_mappings=...); otherwise the step drafts
    nothing and propose is not called. The scheduler removes finished
    requests, admits new ones into the freed rows, condenses the batch and
    may reorder it (swap_states)."""

    MAX_NUM_REQS = 4

    def vllm_config(self, max_model_len):
        return types.SimpleNamespace(
            speculative_config=types.SimpleNamespace(method="custom_class",
                                                     model="samdecoding.vllm.SamProposer",
                                                     num_speculative_tokens=K),
            model_config=types.SimpleNamespace(max_model_len=max_model_len))

    def proposer_class(self, **attributes):
        """What create_custom_proposer resolves: a class, configured like a
        user's subclass; the test then constructs it as vLLM does."""
        attributes.setdefault("index_path", INDEX)
        return type("TestProposer", (sd.vllm.SamProposer,), attributes)

    def prompt(self, requests, j):
        """Request j's prompt: REQUESTS[requests[j]]'s, or, where requests[j]
        is a pair (r, first), that prompt after the id `first`."""
        if isinstance(requests[j], tuple):
            r, first = requests[j]
            return [first] + REQUESTS[r]["prompt"]
        return REQUESTS[requests[j]]["prompt"]

    def run_engine(self, user_class, policy, requests, max_model_len, rng=None,
                   prefill_chunks=None, cpp_reference=None, shape="chain"):
        """Serves `requests` (indices into REQUESTS) through the proposer.
        rng: random swap_states and admission order; prefill_chunks[j]: the
        steps request j's prefill takes. Checks every draft against a
        hand-driven session per request (and, given, the C++ reference)."""
        index = sd.Index.open(INDEX)
        proposer = user_class(self.vllm_config(max_model_len))  # as vLLM constructs it
        batch = fake_vllm_input_batch()(self.MAX_NUM_REQS, max_model_len)
        prefill_chunks = prefill_chunks or {}
        waiting = list(range(len(requests)))
        state = {}  # request j -> its progress
        finished = []
        calls = skipped = 0
        drafted = accepted = 0
        for step in range(100000):
            # The scheduler: finished requests leave, new ones take the
            # removed rows first, then the batch is condensed.
            for j in finished:
                batch.remove_request(j)
            finished = []
            while waiting and batch.num_reqs < self.MAX_NUM_REQS:
                j = waiting.pop(rng.randrange(len(waiting)) if rng else 0)
                batch.add_request(j, self.prompt(requests, j))
                state[j] = {"chunks": prefill_chunks.get(j, 1), "pos": 0, "draft": [],
                            "oracle": None, "step": 0, "unseen": [0, 0]}
            batch.condense()
            if batch.num_reqs == 0:
                break
            if rng is not None and batch.num_reqs > 1 and rng.random() < 0.5:
                i1, i2 = rng.sample(range(batch.num_reqs), 2)
                batch.swap_states(i1, i2)
            # The forward pass, sampling and bookkeeping.
            sampled = []
            for row, j in enumerate(batch.req_ids):
                st, gen = state[j], self.generation(requests, j)
                if st["chunks"] > 1:  # a prefill chunk: its sample is discarded
                    st["chunks"] -= 1
                    sampled.append([])
                    continue
                if st["pos"] == 0:
                    st["chunks"] = 0
                    new = gen[:1]  # the prefill's last chunk samples the first id
                else:
                    k = accepted_prefix(st["draft"], gen, st["pos"])
                    # The proposer learns of this verification when it
                    # next sees the row's tokens.
                    new = gen[st["pos"]:st["pos"] + k + 1]
                    st["unseen"][0] += len(st["draft"])
                    st["unseen"][1] += min(k, len(new) - 1)  # the end cuts the bonus id
                st["draft"] = []
                st["pos"] += len(new)
                batch.append_sampled(row, new)
                sampled.append(list(new))
                if st["pos"] >= len(gen):
                    finished.append(j)
            seq_lens = batch.num_tokens_no_spec[:batch.num_reqs]
            if int(seq_lens.max()) + K > max_model_len:  # _input_fits_in_drafter
                skipped += 1
                continue
            calls += 1
            for j in batch.req_ids:
                drafted += state[j]["unseen"][0]
                accepted += state[j]["unseen"][1]
                state[j]["unseen"] = [0, 0]
            drafts = proposer.propose(sampled, batch.num_tokens_no_spec,
                                      batch.token_ids_cpu, slot_mappings=None)
            self.assertEqual(len(drafts), batch.num_reqs)
            for row, j in enumerate(batch.req_ids):
                st = state[j]
                if not sampled[row]:
                    self.assertEqual(drafts[row], [], "a row without a sample gets no draft")
                    continue
                context = batch.token_ids_cpu[row, :batch.num_tokens_no_spec[row]].tolist()
                if st["oracle"] is None:
                    st["oracle"] = HandDrivenSession(index, policy, context, shape)
                where = "%s request %d step %d" % (policy, j, st["step"])
                limit = min(K, max_model_len - len(context))
                self.assertEqual(drafts[row], st["oracle"].chain(context, limit), where)
                if cpp_reference is not None and j not in finished:
                    reference = cpp_reference[requests[j]][st["step"]]
                    self.assertEqual(drafts[row], reference["chain"], where)
                    self.assertEqual(drafts[row], best_chain(reference, limit), where)
                st["draft"] = drafts[row]
                st["step"] += 1
            self.assertLessEqual(proposer.num_requests, batch.num_reqs)
        self.assertEqual(batch.num_reqs, 0)
        proposer.propose([], batch.num_tokens_no_spec, batch.token_ids_cpu)
        self.assertEqual(proposer.num_requests, 0, "every request left: no session is held")
        return proposer, calls, skipped, drafted, accepted

    def generation(self, requests, j):
        r = requests[j][0] if isinstance(requests[j], tuple) else requests[j]
        return REQUESTS[r]["generation"]

    def test_drafts_equal_the_cpp_sessions(self):
        """Six requests in four rows, one prefilled in three chunks, in
        order, nothing skipped: each draft equals the C++ session's."""
        for policy in POLICIES:
            with self.subTest(policy=policy):
                user_class = self.proposer_class(policy=policy,
                                                 reuse_sessions=(policy == "sam"))
                self.run_engine(user_class, policy, list(range(len(REQUESTS))), 4096,
                                prefill_chunks={1: 3}, cpp_reference=ENG["chain"][policy])

    def test_tree_shape_gives_first_child_chains(self):
        """session_options {"shape": "tree"}: each row gets the first-child
        chain of a tree of at most K + 1 nodes."""
        user_class = self.proposer_class(policy="sam-cal", session_options={"shape": "tree"},
                                         reuse_sessions=False)
        self.run_engine(user_class, "sam-cal", list(range(len(REQUESTS))), 4096, shape="tree")

    def test_rows_move_and_steps_are_skipped(self):
        """Fourteen requests in four rows, admitted in random order, rows
        swapped at random, prefills in chunks, and max_model_len so tight
        that the runner skips propose whenever a long request nears it. For
        the paper rule some requests have the same prompt (and generation):
        which of them a session serves does not change its drafts. sam-cal's
        sessions learn from their own steps, so there each prompt starts
        with its own id."""
        import random

        longest = max(len(r["prompt"]) + len(r["generation"]) for r in REQUESTS) + 1
        for policy in POLICIES:
            for seed in range(3):
                with self.subTest(policy=policy, seed=seed):
                    rng = random.Random(seed)
                    requests = [rng.randrange(len(REQUESTS)) for _ in range(13)] + [5]
                    if policy == "sam-cal":
                        requests = [(r, 1 + j) for j, r in enumerate(requests)]
                    chunks = {j: rng.randint(1, 3) for j in range(len(requests))}
                    user_class = self.proposer_class(policy=policy, reuse_sessions=False)
                    proposer, calls, skipped, drafted, accepted = self.run_engine(
                        user_class, policy, requests, longest + K - 3, rng=rng,
                        prefill_chunks=chunks)
                    self.assertGreater(skipped, 0, "some steps skipped propose")
                    self.assertGreater(calls, skipped)
                    self.assertGreater(accepted, 0)
                    # The adapter's metrics count what the engine was handed
                    # and accepted, as far as the proposer saw it (not a
                    # request's last step). Requests with the same tokens
                    # may trade sessions, and then their counts.
                    total = proposer.metrics()["total"]
                    self.assertEqual(proposer.metrics()["finished_requests"], len(requests))
                    self.assertEqual(proposer.metrics()["requests"], {})
                    if policy == "sam-cal":
                        self.assertEqual(sum(v["accepted"] for v in total.values()), accepted)
                        self.assertEqual(sum(v["drafted"] for v in total.values()), drafted)
                    for row in total.values():
                        self.assertAlmostEqual(row["mat"],
                                               (row["accepted"] + row["steps"]) / row["steps"])

    def serve_alone(self, proposer, r, max_model_len=4096):
        """Request r alone in row 0 until it finishes, then it leaves; returns
        the tokens accepted from its drafts."""
        batch = fake_vllm_input_batch()(1, max_model_len)
        prompt, gen = REQUESTS[r]["prompt"], REQUESTS[r]["generation"]
        batch.add_request("r", prompt)
        batch.append_sampled(0, gen[:1])
        pos, accepted, sampled = 1, 0, [gen[0]]
        while pos < len(gen):
            draft = proposer.propose([sampled], batch.num_tokens_no_spec,
                                     batch.token_ids_cpu)[0]
            k = accepted_prefix(draft, gen, pos)
            sampled = gen[pos:pos + k + 1]
            batch.append_sampled(0, sampled)
            pos += len(sampled)
            accepted += k
        batch.remove_request("r")
        batch.condense()
        proposer.propose([], batch.num_tokens_no_spec, batch.token_ids_cpu)  # it left
        return accepted

    def test_response_cache(self):
        """response_cache: a request that leaves adds its output to the cache
        (under cache_tenant), and the same request again drafts from it."""
        for compile in (False, True):
            cache = sd.ResponseCache(1 << 20, compile=compile, compile_min_tokens=16)
            proposer = self.proposer_class(policy="sam-cal", response_cache=cache,
                                           cache_tenant="t")(self.vllm_config(4096))
            cold = self.serve_alone(proposer, 0)
            self.assertEqual(cache.num_responses, 1)
            self.assertEqual(cache.tenants(), ["t"])
            out = cache.responses("t")[0]
            gen = REQUESTS[0]["generation"]
            self.assertEqual(out, gen[:len(out)])  # what the session committed of it
            self.assertGreater(len(out), len(gen) // 2)
            warm = self.serve_alone(proposer, 0)
            self.assertGreater(warm, cold)
            if compile:
                self.assertGreater(cache.num_compiles, 0)
        # A bound in MiB (here through SAM_CACHE_MIB) makes a compiling cache.
        os.environ["SAM_CACHE_MIB"] = "4"
        try:
            proposer = self.proposer_class()(self.vllm_config(4096))
            self.assertEqual(proposer._pool.cache.max_bytes, 4 << 20)
        finally:
            del os.environ["SAM_CACHE_MIB"]
        self.assertIsNone(self.proposer_class()(self.vllm_config(4096))._pool.cache)
        with self.assertRaises(sd.Error):
            self.proposer_class(response_cache=-1)(self.vllm_config(4096))

    def test_environment_configuration(self):
        """The documented configuration: the class vLLM imports from
        speculative_config.model, configured by the environment."""
        import importlib

        config = self.vllm_config(4096)
        module, name = config.speculative_config.model.rsplit(".", 1)
        user_class = getattr(importlib.import_module(module), name)
        os.environ.update(SAM_INDEX=INDEX, SAM_POLICY="sam-tree", SAM_OPTIONS='{"tree_width": 4}',
                          SAM_THREADS="2")
        try:
            with self.assertLogs("samdecoding.vllm", "INFO") as logs:
                proposer = user_class(config)
            self.assertEqual(proposer._pool.options["policy"], "sam-tree")
            self.assertEqual(proposer._pool.options["tree_width"], 4)
            # A chain cut from the policy's whole tree (its own draft_size).
            self.assertEqual(proposer._pool.options["shape"], "chain")
            self.assertNotIn("draft_size", proposer._pool.options)
            self.assertEqual(proposer._draft_pool.threads, 2)
            self.assertIn("SAM-Decoding drafter active", logs.output[0])
            self.assertIn(INDEX, logs.output[0])
            self.assertIn("policy sam-tree", logs.output[0])
        finally:
            for key in ("SAM_INDEX", "SAM_POLICY", "SAM_OPTIONS", "SAM_THREADS"):
                del os.environ[key]

    def test_spawned_worker(self):
        """vLLM builds the proposer in its worker processes (spawned): the
        class from speculative_config.model, configured by the environment the
        worker inherits, drafts there what it drafts here."""
        import multiprocessing

        config = self.vllm_config(4096)
        environ = {"SAM_INDEX": INDEX, "SAM_POLICY": "sam-cal"}
        os.environ.update(environ)
        try:
            context = multiprocessing.get_context("spawn")
            receiver, sender = context.Pipe(duplex=False)
            process = context.Process(target=_vllm_worker, args=(config, sender))
            process.start()
            sender.close()
            spawned = receiver.recv() if receiver.poll(120) else None
            process.join(60)
            here = self.serve_alone(sd.vllm.SamProposer(config), 0)
        finally:
            for key in environ:
                del os.environ[key]
        self.assertEqual(spawned, here)
        self.assertGreater(here, 0)

    def test_example_program(self):
        """examples/engines/vllm_serve.py, with vLLM and the model played by a recording
        (tests/python/fake_vllm: its LLM builds SamProposer as create_custom_proposer does and
        calls propose after each step's bookkeeping): the recorded greedy text comes out and
        the proposer's drafts were accepted."""
        request = REQUESTS[0]
        run = run_engine_example("vllm_serve.py", FAKE_VLLM, ["the recorded prompt", str(K)],
                                 SAM_INDEX=INDEX)
        self.assertEqual(run.returncode, 0, run.stderr)
        self.assertEqual(run.stdout.strip(), " ".join(map(str, request["generation"][:200])))
        counts = re.search(r"(\d+) draft tokens, (\d+) accepted", run.stderr)
        self.assertIsNotNone(counts, run.stderr)
        self.assertGreater(int(counts.group(2)), 0, run.stderr)

    def test_errors(self):
        with self.assertRaises(sd.Error):  # no index anywhere
            sd.vllm.SamProposer(self.vllm_config(4096))
        with self.assertRaises(sd.Error):  # a bad option is refused at construction
            self.proposer_class(session_options={"no_such_option": 1})(self.vllm_config(4096))
        with self.assertRaises(ValueError):
            self.proposer_class()(None)
        os.environ["SAM_THREADS"] = "many"
        try:
            with self.assertRaisesRegex(ValueError, "SAM_THREADS"):
                self.proposer_class()(self.vllm_config(4096))
        finally:
            del os.environ["SAM_THREADS"]


def _vllm_worker(vllm_config, pipe):
    """A spawned vLLM worker: create_custom_proposer's import and construction
    (vllm/v1/spec_decode/custom_class_proposer.py), then request 0 served
    alone; sends the ids accepted from its drafts."""
    import importlib

    module, name = vllm_config.speculative_config.model.rsplit(".", 1)
    proposer = getattr(importlib.import_module(module), name)(vllm_config)
    pipe.send(VllmCustomProposerTest().serve_alone(proposer, 0))
    pipe.close()


FAKE_SGLANG = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fake_sglang")
FAKE_TRANSFORMERS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fake_transformers")
FAKE_VLLM = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fake_vllm")


def run_engine_example(name, fake_path, args, **environ):
    """examples/engines/NAME with the engine played by the stand-in package
    at fake_path and the model by a recording of REQUESTS[0] (recording.json
    in a temporary model folder, the example's first argument, then args);
    returns the finished process."""
    import subprocess
    import tempfile
    request = REQUESTS[0]
    example = os.path.join(os.path.dirname(__file__), "..", "..", "examples", "engines", name)
    with tempfile.TemporaryDirectory() as d:
        with open(os.path.join(d, "recording.json"), "w") as f:
            json.dump({"prompt_text": "the recorded prompt", "prompt": request["prompt"],
                       "generation": request["generation"]}, f)
        env = dict(os.environ, **environ)
        env["PYTHONPATH"] = os.pathsep.join([fake_path, env.get("PYTHONPATH", "")])
        return subprocess.run([sys.executable, example, d, *args], capture_output=True,
                              text=True, env=env)


def fake_vllm_input_batch():
    """tests/python/fake_vllm's InputBatch (vLLM's, as the custom proposer sees it)."""
    import importlib.util
    spec = importlib.util.spec_from_file_location(
        "fake_vllm_input_batch",
        os.path.join(FAKE_VLLM, "vllm", "v1", "worker", "gpu_input_batch.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.InputBatch


def recorded_transformers():
    """tests/python/fake_transformers: a recording standing in for transformers and a model."""
    import importlib.util
    spec = importlib.util.spec_from_file_location(
        "fake_transformers", os.path.join(FAKE_TRANSFORMERS, "transformers", "__init__.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def installed_plugin():
    """The samdecoding `sglang.plugins` entry point of the installed
    distribution, or None (a build tree on PYTHONPATH has none)."""
    from importlib.metadata import entry_points

    return next((ep for ep in entry_points(group="sglang.plugins")
                 if ep.value == "samdecoding.sglang:register"), None)


class SglangPluginTest(unittest.TestCase):
    """SGLang as merged: the plugin is loaded through the installed
    distribution's entry points inside a scheduler process started with the
    "spawn" method, registers SAM (is_ngram() true), and its SamWorker (today's
    NGRAMWorker, overlap scheduling or not) drafts each request's tree from its
    id and whole token list; tests/python/fake_sglang mirrors the SGLang
    modules involved (cited there). Every tree must equal the C++ session's."""

    def setUp(self):
        if FAKE_SGLANG not in sys.path:
            sys.path.insert(0, FAKE_SGLANG)  # spawned children inherit sys.path

    def server_args(self, algorithm, overlap):
        return types.SimpleNamespace(
            speculative_algorithm=algorithm, disable_overlap_schedule=not overlap,
            speculative_num_draft_tokens=D, speculative_ngram_max_trie_depth=18,
            speculative_ngram_min_bfs_breadth=1, speculative_ngram_max_bfs_breadth=10,
            speculative_ngram_match_type="BFS", speculative_ngram_capacity=1000000)

    def spawn(self, server_args, environ):
        """run_scheduler_process in a process started with "spawn"; returns
        what it sends, or None if it died."""
        from sglang import _spawn_scheduler

        saved = {key: os.environ.get(key) for key in environ}
        os.environ.update(environ)
        try:
            return _spawn_scheduler(server_args, REQUESTS, 3)
        finally:
            for key, value in saved.items():
                if value is None:
                    os.environ.pop(key, None)
                else:
                    os.environ[key] = value

    def check_trees(self, result, policy):
        ref = ENG["tree"][policy]
        steps = {}
        for entry in result["log"]:
            r = int(entry["rid"].split("-")[1])
            gen = REQUESTS[r]["generation"]
            if entry["pos"] >= len(gen):
                continue  # the round a finished request runs in overlap mode
            step = steps.get(r, 0)
            expected = ref[r][step]
            n = len(expected["tokens"])
            where = "%s request %d step %d" % (policy, r, step)
            self.assertEqual(entry["tokens"][:n], expected["tokens"], where)
            self.assertEqual(entry["parents"][:n], expected["parents"], where)
            self.assertTrue(all(t == 0 for t in entry["tokens"][n:]), where)  # padding
            self.assertTrue(all(p == 0 for p in entry["parents"][n:]), where)
            self.assertEqual(entry["accepted"], expected["accepted"], where)
            steps[r] = step + 1
        for r in range(len(REQUESTS)):
            self.assertEqual(steps.get(r, 0), len(ref[r]), "request %d: every step" % r)

    def test_plugin_in_a_spawned_scheduler(self):
        if installed_plugin() is None:
            if os.environ.get("SAM_REQUIRE_INSTALLED"):
                self.fail("samdecoding's sglang.plugins entry point is not installed")
            self.skipTest("samdecoding is not installed as a distribution here (the "
                          "python_pip_install test runs this against the installed one)")
        environ = {"SAM_INDEX": INDEX, "SAM_POLICY": "sam", "SGLANG_PLUGINS": "samdecoding"}
        for overlap in (True, False):
            with self.subTest(overlap=overlap):
                result = self.spawn(self.server_args("SAM", overlap), environ)
                self.assertIsNotNone(result, "the scheduler process failed")
                self.assertEqual(result["class"], "SamWorker")
                self.assertTrue(result["is_ngram"])
                self.check_trees(result, "sam")
                # Requests that left the batch were erased (erase_match_state);
                # the last batch's stay until the next decode round.
                self.assertEqual(result["live_sessions"], len(result["last_batch"]))
                self.assertEqual(result["metrics"]["finished_requests"],
                                 len(REQUESTS) - len(result["last_batch"]))
                total = result["metrics"]["total"]
                self.assertGreater(sum(v["accepted"] for v in total.values()), 0)
        # SGLANG_PLUGINS names the plugins allowed: without samdecoding, SAM
        # is unknown and the scheduler fails.
        environ["SGLANG_PLUGINS"] = "another"
        self.assertIsNone(self.spawn(self.server_args("SAM", True), environ))

    def test_example_program(self):
        """examples/engines/sglang_serve.py with tests/python/fake_sglang's Engine (the model
        a recording): the plugin, loaded from the installed distribution's entry point in the
        spawned scheduler, drafts with SAM and the recorded greedy text comes out."""
        if installed_plugin() is None:
            if os.environ.get("SAM_REQUIRE_INSTALLED"):
                self.fail("samdecoding's sglang.plugins entry point is not installed")
            self.skipTest("samdecoding is not installed as a distribution here (the "
                          "python_pip_install test runs this against the installed one)")
        request = REQUESTS[0]
        run = run_engine_example("sglang_serve.py", FAKE_SGLANG, ["the recorded prompt", str(D)],
                                 SAM_INDEX=INDEX, SGLANG_PLUGINS="samdecoding")
        self.assertEqual(run.returncode, 0, run.stderr)
        self.assertEqual(run.stdout.strip(), " ".join(map(str, request["generation"][:200])))

    def test_worker_in_process(self):
        """SamWorker over the NGRAMWorker, both policies (sam-cal with a fresh
        session per request, as the C++ reference), overlap or not."""
        from sglang.srt.managers.scheduler import run_scheduler_process
        from sglang.srt.speculative.ngram_worker import NGRAMWorker

        class Pipe:
            def send(self, value):
                self.value = value

            def close(self):
                pass

        for policy in POLICIES:
            for overlap in (True, False):
                with self.subTest(policy=policy, overlap=overlap):
                    worker = sd.sglang.worker_class(NGRAMWorker, index=INDEX, policy=policy,
                                                    reuse_sessions=(policy == "sam"))
                    pipe = Pipe()
                    run_scheduler_process(self.server_args("NGRAM", overlap), REQUESTS, 3, pipe,
                                          worker_class=worker)
                    self.check_trees(pipe.value, policy)

    def test_register(self):
        """register() (in this process): SAM resolves to an NGRAM-like
        algorithm whose worker is a SamWorker over NGRAMWorker; a second call
        is a no-op; NGRAM's server settings are filled in."""
        from sglang.srt.speculative.ngram_worker import NGRAMWorker
        from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

        sd.sglang.register()
        sd.sglang.register()
        spec = SpeculativeAlgorithm.from_string("sam")
        self.assertTrue(spec.is_ngram())
        self.assertFalse(spec.has_draft_kv())
        args = types.SimpleNamespace(speculative_num_draft_tokens=None, speculative_eagle_topk=None,
                                     speculative_ngram_max_bfs_breadth=10, enable_mixed_chunk=True,
                                     disable_overlap_schedule=False)
        spec.handle_server_args(args)
        self.assertEqual((args.speculative_num_draft_tokens, args.speculative_eagle_topk,
                          args.enable_mixed_chunk), (16, 10, False))
        worker = spec.create_worker(args)  # overlap scheduling is supported
        self.assertTrue(issubclass(worker, NGRAMWorker))
        self.assertEqual(worker.__name__, "SamWorker")

    def test_tail(self):
        parts = ([1, 2, 3], [4, 5], [6])
        for taken in range(6):
            pending, start = sd.sglang._tail(parts, taken)
            self.assertEqual(pending, [1, 2, 3, 4, 5][taken:])
            self.assertEqual(start, 6)
        self.assertEqual(sd.sglang._tail(([1, 2], [], []), 0), ([1], 2))
        with self.assertRaises(ValueError):
            sd.sglang._tail(([1], [], []), 1)


class HfCandidateGeneratorTest(unittest.TestCase):
    """transformers' assisted decoding: get_candidates(input_ids) ->
    (input_ids + draft, None); one forward pass; the longest matching prefix
    plus the model's next token are appended; update_candidate_strategy."""

    @unittest.skipIf(torch is None, "python3-torch is not installed (the driver needs tensors)")
    def test_drafts_equal_hand_driven_sessions(self):
        """transformers' _assisted_decoding (generation/utils.py, commit
        1097d4b3): the first get_candidates gets the bare prompt; after each
        forward pass the matched ids and the model's next id are appended and
        update_candidate_strategy(input_ids, scores, n_matches) gets n_matches
        as a 0-d tensor."""
        index = sd.Index.open(INDEX)
        for policy in POLICIES:
            with self.subTest(policy=policy):
                generator = sd.hf.SamCandidateGenerator(INDEX, num_output_tokens=K, policy=policy)
                accepted = 0
                for r, request in enumerate(REQUESTS):  # one generator, sequences one by one
                    prompt, gen = request["prompt"], request["generation"]
                    if policy == "sam-cal":  # fresh estimates per request, as the oracle
                        generator = sd.hf.SamCandidateGenerator(INDEX, num_output_tokens=K,
                                                                policy=policy)
                    input_ids = torch.tensor([prompt], dtype=torch.long)
                    oracle = HandDrivenSession(index, policy, prompt)
                    reference = ENG["chain_bare"][policy][r]  # the C++ session's chains
                    step = 0
                    while input_ids.shape[1] - len(prompt) < len(gen):
                        pos = input_ids.shape[1] - len(prompt)
                        candidates, logits = generator.get_candidates(input_ids)
                        self.assertIsNone(logits)
                        draft = candidates[0, input_ids.shape[1]:].tolist()
                        self.assertEqual(candidates[0, :input_ids.shape[1]].tolist(),
                                         input_ids[0].tolist())
                        where = "%s request %d step %d" % (policy, r, step)
                        self.assertEqual(draft, oracle.chain(input_ids[0].tolist(), K), where)
                        if step < len(reference):
                            self.assertEqual(draft, reference[step]["chain"], where)
                            self.assertEqual(draft, best_chain(reference[step], K), where)
                        n_matches = accepted_prefix(draft, gen, pos)
                        if input_ids.shape[1] + n_matches + 1 - len(prompt) < len(gen):
                            accepted += n_matches  # a later call shows the generator
                        valid = torch.tensor([gen[pos:pos + n_matches + 1]], dtype=torch.long)
                        input_ids = torch.cat((input_ids, valid), dim=-1)
                        generator.update_candidate_strategy(input_ids, None,
                                                            torch.tensor(n_matches))
                        step += 1
                    self.assertGreater(step, 1)
                if policy == "sam":  # one generator served every request
                    total = generator.metrics()["total"]
                    self.assertEqual(sum(v["accepted"] for v in total.values()), accepted)
                    self.assertGreater(accepted, 0)

    @unittest.skipIf(torch is None, "python3-torch is not installed (the driver needs tensors)")
    def test_generate_hands_the_generator_to_transformers(self):
        request = REQUESTS[0]
        prompt, gen = request["prompt"], request["generation"]

        model = recorded_transformers().RecordedModel(prompt, gen)
        out = sd.hf.generate(model, torch.tensor([prompt]), INDEX, num_output_tokens=K,
                             max_new_tokens=30)
        self.assertEqual(out[0].tolist(), prompt + gen[:30])
        self.assertTrue(any(model.drafted), "SAM drafted at least once")
        self.assertTrue(all(n <= K for n in model.drafted))
        self.assertNotIn("_get_candidate_generator", vars(model), "the override is undone")


    @unittest.skipIf(torch is None, "python3-torch is not installed (the driver needs tensors)")
    def test_example_program(self):
        """examples/engines/hf_generate.py, with transformers and the model played by a
        recording (tests/python/fake_transformers): it prints the recorded greedy generation
        and the drafts' acceptance, as samdecoding.hf.generate gives them in process."""
        request = REQUESTS[0]
        prompt, gen = request["prompt"], request["generation"]
        run = run_engine_example("hf_generate.py", FAKE_TRANSFORMERS,
                                 [INDEX, "the recorded prompt", str(K)])
        self.assertEqual(run.returncode, 0, run.stderr)
        text, counts = run.stdout.splitlines()
        self.assertEqual(text, " ".join(map(str, gen[:200])))
        model = recorded_transformers().RecordedModel(prompt, gen)
        generator = sd.hf.SamCandidateGenerator(INDEX, num_output_tokens=K, policy="sam-cal")
        sd.hf.generate(model, torch.tensor([prompt]), INDEX, candidate_generator=generator,
                       max_new_tokens=200)
        total = generator.metrics()["total"]
        steps = sum(v["steps"] for v in total.values())
        accepted = sum(v["accepted"] for v in total.values())
        self.assertGreater(accepted, 0)
        self.assertEqual(counts, "drafted steps %d, accepted %d" % (steps, accepted))


class OutOfVocabularyTest(unittest.TestCase):
    """Each adapter's entry point refuses ids outside the index's vocabulary (ids of another
    tokenizer) with samdecoding.Error naming the id, in the prompt and as the sampled id."""

    def setUp(self):
        self.vocab = sd.Index.open(INDEX).vocab_size
        self.prompt = list(REQUESTS[0]["prompt"])

    def contexts(self):
        yield "start token %d" % self.vocab, self.prompt + [self.vocab]
        yield r"ids\[1\] = %d" % (self.vocab + 5), [self.prompt[0], self.vocab + 5] + self.prompt[1:]

    def test_vllm_propose(self):
        config = types.SimpleNamespace(
            speculative_config=types.SimpleNamespace(method="custom_class",
                                                     model="samdecoding.vllm.SamProposer",
                                                     num_speculative_tokens=K),
            model_config=types.SimpleNamespace(max_model_len=256))
        for message, context in self.contexts():
            proposer = type("P", (sd.vllm.SamProposer,), {"index_path": INDEX})(config)
            buffer = np.zeros((4, 256), dtype=np.int32)
            buffer[0, :len(context)] = context
            with self.assertRaisesRegex(sd.Error, message + " is outside the vocabulary"):
                proposer.propose([[context[-1]]], np.array([len(context), 0, 0, 0]), buffer)

    def test_sglang_draft(self):
        for message, context in self.contexts():
            corpus = sd.sglang.SamCorpus(D, index=INDEX)
            with self.assertRaisesRegex(sd.Error, message + " is outside the vocabulary"):
                corpus.draft(["r0"], [context[:-1]], [[context[-1]]], [[]])

    @unittest.skipIf(torch is None, "python3-torch is not installed (the driver needs tensors)")
    def test_hf_get_candidates(self):
        for message, context in self.contexts():
            generator = sd.hf.SamCandidateGenerator(INDEX, num_output_tokens=K)
            with self.assertRaisesRegex(sd.Error, message + " is outside the vocabulary"):
                generator.get_candidates(torch.tensor([context], dtype=torch.long))


class TokenizerCheckTest(unittest.TestCase):
    """The adapters' tokenizer argument (and SAM_TOKENIZER): a path or a samdecoding.Tokenizer,
    whose fingerprint the index must record; the fixture index is built from ids, so the
    model's tokenizer is refused at start-up by each adapter."""

    def test_each_adapter_refuses_an_index_of_another_tokenizer(self):
        model = os.path.join(os.environ.get("SAM_DATA_DIR", ""), "tokenizer", "llama-32k.model")
        if not os.path.exists(model):
            self.skipTest("no %s (the shared data folder)" % model)
        config = types.SimpleNamespace(
            speculative_config=types.SimpleNamespace(method="custom_class",
                                                     model="samdecoding.vllm.SamProposer",
                                                     num_speculative_tokens=K),
            model_config=types.SimpleNamespace(max_model_len=256))
        for tokenizer in (model, sd.Tokenizer(model)):
            starts = {
                "vllm": lambda: type("P", (sd.vllm.SamProposer,),
                                     {"index_path": INDEX, "tokenizer_path": tokenizer})(config),
                "sglang": lambda: sd.sglang.SamCorpus(D, index=INDEX, tokenizer=tokenizer),
                "hf": lambda: sd.hf.SamCandidateGenerator(INDEX, num_output_tokens=K,
                                                          tokenizer=tokenizer),
                "hf, an open Index": lambda: sd.hf.SamCandidateGenerator(
                    sd.Index.open(INDEX), num_output_tokens=K, tokenizer=tokenizer),
            }
            for name, start in starts.items():
                with self.subTest(adapter=name, tokenizer=type(tokenizer).__name__):
                    with self.assertRaises(sd.Error) as e:
                        start()
                    self.assertEqual(e.exception.code, "tokenizer-mismatch")


class DocsTest(unittest.TestCase):
    """docs/embedding.md's engine examples compile, and what they name exists."""

    def test_engine_examples(self):
        import importlib
        import re

        with open(os.path.join(os.environ["SAM_DOCS_DIR"], "embedding.md")) as f:
            text = f.read()
        section = text[text.index("## Serving engines"):text.index("## Not there")]
        blocks = re.findall(r"```python\n(.*?)```", section, re.S)
        self.assertEqual(len(blocks), 3)
        for block in blocks:
            compile(block, "embedding.md", "exec")
        for dotted in re.findall(r"samdecoding\.[a-z]+\.[A-Za-z_]+", section):
            module, name = dotted.rsplit(".", 1)
            self.assertTrue(hasattr(importlib.import_module(module), name), dotted)


if __name__ == "__main__":
    unittest.main()
