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


class VllmCustomProposerTest(unittest.TestCase):
    """vLLM V1: CustomClassProposer(vllm_config) then, every engine step,
    propose(sampled_token_ids, num_tokens_no_spec, token_ids_cpu) over the
    persistent batch (rows; a finished request's row is freed and the batch
    condensed by moving the last rows into the holes)."""

    ROWS = 3
    MAX_LEN = 512

    def config(self):
        return types.SimpleNamespace(
            speculative_config=types.SimpleNamespace(num_speculative_tokens=K,
                                                     custom_proposer_backend=
                                                     "samdecoding.vllm.SamProposer"))

    def run_engine(self, proposer, policy, by_req_id=False):
        ref = ENG["chain"][policy]
        if torch is not None:
            token_ids = torch.zeros((self.ROWS, self.MAX_LEN), dtype=torch.int32)
            tokens_np = token_ids.numpy()
        else:
            token_ids = tokens_np = np.zeros((self.ROWS, self.MAX_LEN), dtype=np.int32)
        num_tokens = np.zeros(self.ROWS, dtype=np.int32)
        rows = [None] * self.ROWS  # request index per row
        state = {}  # request -> {"pos": generated so far, "step": drafts checked, "draft": []}
        waiting = list(range(len(REQUESTS)))
        chunked = {1}  # request 1 is prefilled in two chunks (a step without a sample)
        finished_last_step = []
        steps = 0
        while waiting or any(r is not None for r in rows):
            steps += 1
            self.assertLess(steps, 10000)
            # The scheduler: requests that finished leave; condense; admit.
            for r in finished_last_step:
                rows[rows.index(r)] = None
            finished_last_step = []
            for hole in range(self.ROWS):
                if rows[hole] is None:
                    last = max((i for i in range(self.ROWS) if rows[i] is not None), default=-1)
                    if last > hole:
                        rows[hole], rows[last] = rows[last], None
                        tokens_np[hole] = tokens_np[last]
                        num_tokens[hole] = num_tokens[last]
            sampled = [[] for _ in range(self.ROWS)]
            for i in range(self.ROWS):
                if rows[i] is None and waiting:
                    r = waiting.pop(0)
                    rows[i] = r
                    prompt = REQUESTS[r]["prompt"]
                    if r in chunked:  # first chunk: no sample this step
                        chunked.discard(r)
                        half = len(prompt) // 2
                        tokens_np[i, :half] = prompt[:half]
                        num_tokens[i] = half
                        state[r] = None
                        continue
                    tokens_np[i, :len(prompt)] = prompt
                    state[r] = {"pos": 0, "step": 0, "draft": []}
                    # The prefill samples the first token.
                    first = REQUESTS[r]["generation"][0]
                    tokens_np[i, len(prompt)] = first
                    num_tokens[i] = len(prompt) + 1
                    state[r]["pos"] = 1
                    sampled[i] = [first]
                elif rows[i] is not None:
                    r = rows[i]
                    prompt, gen = REQUESTS[r]["prompt"], REQUESTS[r]["generation"]
                    if state[r] is None:  # the second prefill chunk
                        tokens_np[i, :len(prompt)] = prompt
                        tokens_np[i, len(prompt)] = gen[0]
                        num_tokens[i] = len(prompt) + 1
                        state[r] = {"pos": 1, "step": 0, "draft": []}
                        sampled[i] = [gen[0]]
                        continue
                    st = state[r]
                    # Verify the last draft against the "model".
                    k = accepted_prefix(st["draft"], gen, st["pos"])
                    new = gen[st["pos"]:st["pos"] + k + 1]
                    n = int(num_tokens[i])
                    tokens_np[i, n:n + len(new)] = new
                    num_tokens[i] = n + len(new)
                    st["pos"] += len(new)
                    sampled[i] = list(new)
            live = [i for i in range(self.ROWS) if rows[i] is not None]
            n_rows = max(live) + 1 if live else 0
            kwargs = {}
            if by_req_id:
                kwargs["req_ids"] = ["req-%d" % rows[i] for i in range(n_rows)]
            drafts = proposer.propose(sampled[:n_rows], num_tokens[:n_rows], token_ids[:n_rows],
                                      **kwargs)
            self.assertEqual(len(drafts), n_rows)
            for i in range(n_rows):
                r = rows[i]
                if not sampled[i]:
                    self.assertEqual(drafts[i], [], "a row without a sample gets no draft")
                    continue
                st = state[r]
                gen = REQUESTS[r]["generation"]
                if st["pos"] >= len(gen):  # finished: vLLM drafts before it knows
                    finished_last_step.append(r)
                    continue
                where = "%s request %d step %d" % (policy, r, st["step"])
                self.assertEqual(drafts[i], ref[r][st["step"]]["chain"], where)
                self.assertLessEqual(len(drafts[i]), K)
                st["draft"] = drafts[i]
                st["step"] += 1
            self.assertLessEqual(proposer.num_requests, n_rows)
        for r in range(len(REQUESTS)):
            self.assertEqual(state[r]["step"], len(ref[r]), "request %d: every step drafted" % r)
        return steps

    def test_drafts_equal_the_cpp_sessions(self):
        for policy in POLICIES:
            for by_req_id in (False, True):
                with self.subTest(policy=policy, by_req_id=by_req_id):
                    # sam-cal learns across steps: one fresh session per request,
                    # as the oracle; the paper rule is the same with reused ones.
                    proposer = sd.vllm.SamProposer(self.config(), index=INDEX, policy=policy,
                                                   reuse_sessions=(policy == "sam"))
                    self.run_engine(proposer, policy, by_req_id)
                    # Every request left the batch: no session is held.
                    proposer.propose([], np.zeros(0, np.int32), np.zeros((0, 8), np.int32))
                    self.assertEqual(proposer.num_requests, 0)

    def serve_alone(self, proposer, r):
        """Request r alone in row 0 until it finishes, then it leaves; returns
        the tokens accepted from its drafts."""
        prompt, gen = REQUESTS[r]["prompt"], REQUESTS[r]["generation"]
        tokens = list(prompt) + [gen[0]]
        pos, accepted, sampled = 1, 0, [gen[0]]
        while pos < len(gen):
            row = np.array([tokens], dtype=np.int32)
            draft = proposer.propose([sampled], np.array([len(tokens)], np.int32), row)[0]
            k = accepted_prefix(draft, gen, pos)
            sampled = gen[pos:pos + k + 1]
            tokens += sampled
            pos += len(sampled)
            accepted += k
        proposer.propose([], np.zeros(0, np.int32), np.zeros((0, 8), np.int32))  # it left
        return accepted

    def test_response_cache(self):
        """response_cache=: a request that leaves adds its output to the cache
        (under cache_tenant), and the same request again drafts from it."""
        for compile in (False, True):
            cache = sd.ResponseCache(1 << 20, compile=compile, compile_min_tokens=16)
            proposer = sd.vllm.SamProposer(self.config(), index=INDEX, policy="sam-cal",
                                           response_cache=cache, cache_tenant="t")
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
            proposer = sd.vllm.SamProposer(self.config(), index=INDEX)
            self.assertEqual(proposer._pool.cache.max_bytes, 4 << 20)
        finally:
            del os.environ["SAM_CACHE_MIB"]
        self.assertIsNone(sd.vllm.SamProposer(self.config(), index=INDEX)._pool.cache)
        with self.assertRaises(sd.Error):
            sd.vllm.SamProposer(self.config(), index=INDEX, response_cache=-1)

    def test_environment_configuration(self):
        os.environ.update(SAM_INDEX=INDEX, SAM_POLICY="sam-tree", SAM_OPTIONS='{"max_width": 4}')
        try:
            proposer = sd.vllm.SamProposer(self.config())
            self.assertEqual(proposer._pool.options["policy"], "sam-tree")
            self.assertEqual(proposer._pool.options["max_width"], 4)
            self.assertEqual(proposer._pool.options["draft_size"], K + 1)
        finally:
            for key in ("SAM_INDEX", "SAM_POLICY", "SAM_OPTIONS"):
                del os.environ[key]

    def test_errors(self):
        with self.assertRaises(sd.Error):  # no index anywhere
            sd.vllm.SamProposer(self.config())
        with self.assertRaises(sd.Error):  # a bad option is refused at construction
            sd.vllm.SamProposer(self.config(), index=INDEX, no_such_option=1)
        with self.assertRaises(ValueError):
            sd.vllm.SamProposer(None, index=INDEX)


class FakeNgramWorker:
    """The part of SGLang's NGRAMWorker that SamWorker builds on: the
    constructor sets draft_token_num (and makes its own cache)."""

    def __init__(self, draft_token_num):
        self.draft_token_num = draft_token_num
        self.ngram_cache = object()


def parents_from_mask(mask):
    """Each node's parent from an ancestor mask: its deepest strict ancestor."""
    depth = mask.sum(axis=1)
    parents = []
    for i in range(mask.shape[0]):
        ancestors = [j for j in range(mask.shape[0]) if mask[i, j] and j != i]
        parents.append(max(ancestors, key=lambda j: depth[j]) if ancestors else -1)
    return parents


class SglangNgramTest(unittest.TestCase):
    """SGLang: NGRAMWorker._prepare_draft_tokens(batch) gets (drafts, mask)
    for the decoding requests, verifies the trees, appends the accepted ids
    and the bonus id to each request's output_ids; requests join and finish."""

    BATCH = 3

    def run_engine(self, worker, policy):
        ref = ENG["tree"][policy]
        waiting = list(range(len(REQUESTS)))
        running, steps = [], {}
        while waiting or running:
            while len(running) < self.BATCH and waiting:
                r = waiting.pop(0)
                # Prefill (an EXTEND batch, no drafting) sampled the first token.
                running.append(types.SimpleNamespace(rid="rid-%d" % r, r=r,
                                                     origin_input_ids=REQUESTS[r]["prompt"],
                                                     output_ids=[REQUESTS[r]["generation"][0]]))
                steps[r] = 0
            batch = types.SimpleNamespace(reqs=running)
            drafts, mask = worker._prepare_draft_tokens(batch)
            self.assertEqual(drafts.dtype, np.int64)
            self.assertEqual(drafts.shape, (len(running) * D,))
            self.assertEqual(mask.shape, (len(running) * D * D,))
            drafts = drafts.reshape(len(running), D)
            mask = mask.reshape(len(running), D, D)
            still = []
            for b, req in enumerate(running):
                r, gen = req.r, REQUESTS[req.r]["generation"]
                expected = ref[r][steps[r]]
                n = len(expected["tokens"])
                where = "%s request %d step %d" % (policy, r, steps[r])
                self.assertEqual(drafts[b, :n].tolist(), expected["tokens"], where)
                parents = parents_from_mask(mask[b])
                self.assertEqual(parents[:n], expected["parents"], where)
                # Padding: leaves under the root with token 0.
                self.assertTrue(all(p == 0 for p in parents[n:]), where)
                self.assertTrue((drafts[b, n:] == 0).all(), where)
                # Verify the tree (from the mask): the longest path the model follows.
                pos, node, accepted = len(req.output_ids), 0, []
                while pos + len(accepted) < len(gen):
                    want = gen[pos + len(accepted)]
                    child = next((j for j in range(1, n) if parents[j] == node and
                                  drafts[b, j] == want), None)
                    if child is None:
                        break
                    accepted.append(want)
                    node = child
                self.assertEqual(len(accepted), expected["accepted"], where)
                end = pos + len(accepted) + 1
                req.output_ids = req.output_ids + gen[pos:end]
                steps[r] += 1
                if len(req.output_ids) < len(gen):
                    still.append(req)
                else:
                    self.assertEqual(steps[r], len(ref[r]), "request %d: every step" % r)
            running = still
        for r in range(len(REQUESTS)):
            self.assertEqual(steps[r], len(ref[r]))

    def test_drafts_equal_the_cpp_sessions(self):
        for policy in POLICIES:
            with self.subTest(policy=policy):
                worker_class = sd.sglang.worker_class(FakeNgramWorker, index=INDEX, policy=policy,
                                                      reuse_sessions=(policy == "sam"))
                worker = worker_class(D)
                self.assertIsInstance(worker.ngram_cache, sd.sglang.SamNgramCache)
                self.run_engine(worker, policy)
                worker._prepare_draft_tokens(types.SimpleNamespace(reqs=[]))
                self.assertEqual(worker.ngram_cache.num_requests, 0)

    def test_stock_worker_windows(self):
        cache = sd.sglang.SamNgramCache(draft_token_num=D, index=INDEX, policy="sam",
                                        min_bfs_breadth=1,
                                        max_bfs_breadth=10, capacity=1000, branch_length=18,
                                        min_match_window_size=1, max_match_window_size=12)
        index = sd.Index.open(INDEX)
        windows = [REQUESTS[r]["prompt"][-12:] for r in range(3)]
        drafts, mask = cache.batch_get(windows)
        drafts, mask = drafts.reshape(3, D), mask.reshape(3, D, D)
        for b, window in enumerate(windows):
            session = sd.Session(policy="sam", draft_size=D)
            session.attach(index)
            session.prefill(window[:-1])
            draft = session.propose(window[-1])
            n = len(draft)
            self.assertEqual(drafts[b, :n].tolist(), draft.tokens.tolist())
            self.assertEqual(parents_from_mask(mask[b])[:n], draft.parents.tolist())
        cache.batch_put(windows)
        cache.synchronize()
        cache.reset()


class HfCandidateGeneratorTest(unittest.TestCase):
    """transformers' assisted decoding: get_candidates(input_ids) ->
    (input_ids + draft, None); one forward pass; the longest matching prefix
    plus the model's next token are appended; update_candidate_strategy."""

    @unittest.skipIf(torch is None, "python3-torch is not installed (the driver needs tensors)")
    def test_drafts_equal_the_cpp_sessions(self):
        for policy in POLICIES:
            with self.subTest(policy=policy):
                ref = ENG["chain"][policy]
                generator = sd.hf.SamCandidateGenerator(INDEX, num_output_tokens=K, policy=policy)
                for r, request in enumerate(REQUESTS):  # one generator, sequences one by one
                    prompt, gen = request["prompt"], request["generation"]
                    if policy == "sam-cal":  # fresh estimates per request, as the oracle
                        generator = sd.hf.SamCandidateGenerator(INDEX, num_output_tokens=K,
                                                                policy=policy)
                    # The first generated token came with the prompt's pass.
                    input_ids = torch.tensor([prompt + gen[:1]], dtype=torch.long)
                    step = 0
                    while input_ids.shape[1] - len(prompt) < len(gen):
                        pos = input_ids.shape[1] - len(prompt)
                        candidates, logits = generator.get_candidates(input_ids)
                        self.assertIsNone(logits)
                        draft = candidates[0, input_ids.shape[1]:].tolist()
                        self.assertEqual(candidates[0, :input_ids.shape[1]].tolist(),
                                         input_ids[0].tolist())
                        where = "%s request %d step %d" % (policy, r, step)
                        self.assertEqual(draft, ref[r][step]["chain"], where)
                        n_matches = accepted_prefix(draft, gen, pos)
                        valid = torch.tensor([gen[pos:pos + n_matches + 1]], dtype=torch.long)
                        input_ids = torch.cat((input_ids, valid), dim=-1)
                        generator.update_candidate_strategy(input_ids, None, n_matches)
                        step += 1
                    self.assertEqual(step, len(ref[r]))

    @unittest.skipIf(torch is None, "python3-torch is not installed (the driver needs tensors)")
    def test_generate_hands_the_generator_to_transformers(self):
        request = REQUESTS[0]
        prompt, gen = request["prompt"], request["generation"]

        class FakeModel:
            """What GenerationMixin.generate does with prompt_lookup_num_tokens:
            asks self._get_candidate_generator(...) and runs assisted decoding."""

            def generate(self, inputs, prompt_lookup_num_tokens=None, max_new_tokens=20):
                config = types.SimpleNamespace(max_length=inputs.shape[1] + max_new_tokens)
                generator = self._get_candidate_generator(generation_config=config,
                                                          input_ids=inputs)
                ids = torch.cat((inputs, torch.tensor([gen[:1]])), dim=-1)
                while ids.shape[1] < config.max_length:
                    candidates, _ = generator.get_candidates(ids)
                    pos = ids.shape[1] - len(prompt)
                    draft = candidates[0, ids.shape[1]:].tolist()
                    self.drafted.append(len(draft))
                    k = accepted_prefix(draft, gen, pos)
                    ids = torch.cat((ids, torch.tensor([gen[pos:pos + k + 1]])), dim=-1)
                    generator.update_candidate_strategy(ids, None, k)
                return ids[:, :config.max_length]

            def _get_candidate_generator(self, **kwargs):
                raise AssertionError("the prompt lookup generator must not be used")

        model = FakeModel()
        model.drafted = []
        out = sd.hf.generate(model, torch.tensor([prompt]), INDEX, num_output_tokens=K,
                             max_new_tokens=30)
        self.assertEqual(out[0].tolist(), prompt + gen[:30])
        self.assertTrue(any(model.drafted), "SAM drafted at least once")
        self.assertTrue(all(n <= K for n in model.drafted))
        self.assertNotIn("_get_candidate_generator", vars(model), "the override is undone")


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
