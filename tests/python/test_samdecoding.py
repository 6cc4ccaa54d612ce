"""Tests of the samdecoding package against the C++ session (reference_session.cc).

Run by CTest with PYTHONPATH at the built package, SAM_PYTHON_FIXTURE at the
folder holding index.sam and reference.json, SAM_DOCS_DIR at docs/.
"""
import gc
import json
import os
import pathlib
import re
import threading
import unittest

import numpy as np

import samdecoding as sd

FIXTURE = os.environ["SAM_PYTHON_FIXTURE"]
INDEX = os.path.join(FIXTURE, "index.sam")
with open(os.path.join(FIXTURE, "reference.json")) as f:
    REF = json.load(f)


def new_session(policy):
    """A session as reference_session.cc creates it."""
    return sd.Session(policy=policy, draft_size=REF["draft_size"],
                      recycling_vocab_size=REF["vocab_size"] if policy == "sam-rec" else 0)


def replay(test, session, policy):
    """Replays the reference commits of `policy`; every draft must be the C++ one."""
    session.prefill(REF["prompt"])
    k = REF["top_k"]
    for n, step in enumerate(REF["policies"][policy]["steps"]):
        draft = session.propose(step["start"])
        where = "%s step %d" % (policy, n)
        test.assertEqual(draft.tokens.tolist(), step["tokens"], where)
        test.assertEqual(draft.parents.tolist(), step["parents"], where)
        test.assertEqual(draft.depths.tolist(), step["depths"], where)
        test.assertEqual(draft.source, step["source"], where)
        test.assertEqual(draft.match_len, step["match_len"], where)
        session.commit(step["commit"])
        session.observe_topk(step["commit"], np.array(step["topk"]).reshape(-1, k))


class DraftsTest(unittest.TestCase):
    def test_every_policy_every_open_mode_matches_cpp(self):
        self.assertEqual(sorted(sd.POLICIES), sorted(REF["policies"]))
        for read in (False, True):
            for prepare in (False, True, "child_records"):
                index = (sd.Index.open(INDEX, read=read, child_records=True)
                         if prepare == "child_records" else
                         sd.Index.open(INDEX, read=read, prepare=prepare))
                for policy in sd.POLICIES:
                    with self.subTest(policy=policy, read=read, prepare=prepare):
                        session = new_session(policy)
                        session.attach(index)
                        replay(self, session, policy)
                        self.assertEqual(session.stats(), REF["policies"][policy]["stats"])

    def test_shard_set_drafts_as_the_single_index(self):
        shards = sd.ShardSet.open(os.path.join(FIXTURE, "set.samset"), verify=True)
        index = sd.Index.open(INDEX)
        self.assertEqual(shards.num_shards, 3)
        self.assertEqual(shards.num_tokens, index.num_tokens)
        self.assertEqual(shards.num_documents, index.num_documents)
        self.assertEqual(shards.vocab_size, index.vocab_size)
        self.assertEqual(len(shards.shard_paths), 3)
        records = sd.ShardSet.open(os.path.join(FIXTURE, "set.samset"), child_records=True)
        for policy in ("sam", "static", "dynamic", "sam-tree", "sam-rec", "sam-cal"):
            for opened in (shards, records):
                with self.subTest(policy=policy, child_records=opened is records):
                    session = new_session(policy)
                    session.attach(opened)
                    replay(self, session, policy)
        # sam-cal's lookup limit and backoff reach the session: the set drafts as the index
        # with the same options, and the options change the drafts.
        opts = dict(policy="sam-cal", draft_size=REF["draft_size"],
                    experimental=dict(max_static_lookups=1, backoff_count=0))
        single, sharded = sd.Session(**opts), sd.Session(**opts)
        single.attach(index)
        sharded.attach(shards)
        for session in (single, sharded):
            session.prefill(REF["prompt"])
        differ = 0
        for n, step in enumerate(REF["policies"]["sam-cal"]["steps"]):
            a, b = single.propose(step["start"]), sharded.propose(step["start"])
            self.assertEqual(a.tokens.tolist(), b.tokens.tolist(), "sam-cal step %d" % n)
            self.assertEqual(a.parents.tolist(), b.parents.tolist(), "sam-cal step %d" % n)
            differ += a.tokens.tolist() != step["tokens"]
            single.commit(step["commit"])
            sharded.commit(step["commit"])
        self.assertGreater(differ, 0)
        with self.assertRaises(sd.Error):
            sd.ShardSet.open(INDEX)

    def test_reset_replays_identically(self):
        session = new_session("sam")
        session.attach(sd.Index.open(INDEX))
        replay(self, session, "sam")
        session.reset()
        session.reset_statistics()
        replay(self, session, "sam")
        self.assertEqual(session.stats(), REF["policies"]["sam"]["stats"])

    def test_statistics_and_calibration_resets_are_two_operations(self):
        # sam-cal learns across requests: a second replay after reset() drafts otherwise
        # (reset_statistics() keeps what it learned); after reset_calibration() it drafts as a
        # new session, the C++ reference's drafts exactly, and its statistics are kept.
        index = sd.Index.open(INDEX)
        learned = new_session("sam-cal")
        learned.attach(index)
        replay(self, learned, "sam-cal")
        learned.reset()
        learned.reset_statistics()
        self.assertEqual(learned.stats()["steps"], 0)
        with self.assertRaises(AssertionError):
            replay(self, learned, "sam-cal")
        fresh = new_session("sam-cal")
        fresh.attach(index)
        replay(self, fresh, "sam-cal")
        steps = fresh.stats()["steps"]
        fresh.reset()
        fresh.reset_calibration()
        self.assertEqual(fresh.stats()["steps"], steps)
        replay(self, fresh, "sam-cal")

    def test_numpy_ids_are_accepted(self):
        session = new_session("sam")
        session.attach(sd.Index.open(INDEX))
        session.prefill(np.array(REF["prompt"], dtype=np.uint32))   # read in place
        for step in REF["policies"]["sam"]["steps"][:20]:
            draft = session.propose(np.int64(step["start"]))
            self.assertEqual(draft.tokens.tolist(), step["tokens"])
            session.commit(np.array(step["commit"], dtype=np.int64))  # converted

    def test_draft_arrays_are_read_only_views(self):
        session = new_session("static")
        session.attach(sd.Index.open(INDEX))
        step = REF["policies"]["static"]["steps"][0]
        session.prefill(REF["prompt"])
        draft = session.propose(step["start"])
        self.assertEqual(len(draft), len(step["tokens"]))
        for array, dtype in ((draft.tokens, np.uint32), (draft.parents, np.int32),
                             (draft.depths, np.uint16)):
            self.assertEqual(array.dtype, dtype)
            self.assertFalse(array.flags.owndata)
            self.assertFalse(array.flags.writeable)
            self.assertIs(array.base, draft)
        # Two drafts view the same session buffer.
        self.assertTrue(np.shares_memory(draft.tokens, session.propose(step["start"]).tokens))


def naive_greedy(tokens, parents, argmax):
    """The oracle of verify_greedy: the deepest node whose every token on the
    root path is the argmax at its parent (lowest index among equals)."""
    valid, depth = [True], [0]
    for i in range(1, len(tokens)):
        p = parents[i]
        valid.append(valid[p] and tokens[i] == argmax[p])
        depth.append(depth[p] + 1)
    end = min((i for i in range(len(tokens)) if valid[i]), key=lambda i: (-depth[i], i))
    path = [end]
    while path[-1] != 0:
        path.append(parents[path[-1]])
    path.reverse()
    return path, [tokens[i] for i in path[1:]], argmax[end]


class VerifyTest(unittest.TestCase):
    def test_greedy_equals_naive_on_random_trees(self):
        rng = np.random.default_rng(7)
        for trial in range(300):
            n = int(rng.integers(1, 30))
            parents = [-1] + [int(rng.integers(0, i)) for i in range(1, n)]
            tokens = rng.integers(0, 4, n).tolist()
            argmax = rng.integers(0, 4, n).tolist()
            nodes, accepted, bonus = naive_greedy(tokens, parents, argmax)
            r = sd.verify_greedy(tokens, parents, argmax)
            self.assertEqual(r.accepted_nodes.tolist(), nodes, trial)
            self.assertEqual(r.accepted_tokens.tolist(), accepted, trial)
            self.assertEqual(r.bonus_token, bonus, trial)
            self.assertEqual(r.commit_tokens.tolist(), [tokens[0]] + accepted, trial)

    def test_session_greedy_loop_equals_plain_greedy(self):
        """A whole greedy loop through the session's verification: the emitted
        tokens are the "model's" (the generation), and the commits are the C++
        replay's."""
        index = sd.Index.open(INDEX)
        session = new_session("sam")
        session.attach(index)
        session.prefill(REF["prompt"])
        gen = REF["generation"]
        emitted, start = [gen[0]], gen[0]
        steps = REF["policies"]["sam"]["steps"]
        for step in steps:
            draft = session.propose(start)
            tokens, parents = draft.tokens.tolist(), draft.parents.tolist()
            # The model: after node i it predicts the generation's next token.
            pos = len(emitted) - 1
            depth = draft.depths.tolist()

            def on_generation(j):  # node j's root path is the generation's text
                return all(pos + depth[k] < len(gen) and tokens[k] == gen[pos + depth[k]]
                           for k in self._path(parents, j))
            argmax = [gen[pos + depth[i] + 1]
                      if pos + depth[i] + 1 < len(gen) and on_generation(i) else 0
                      for i in range(len(tokens))]
            r = session.verify_greedy(argmax)
            self.assertEqual(r.commit_tokens.tolist(), step["commit"])
            session.commit(r.commit_tokens)
            emitted.extend(r.accepted_tokens.tolist() + [r.bonus_token])
            start = r.bonus_token
            if len(emitted) >= len(gen):
                break
        self.assertEqual(emitted[:len(gen)], gen)
        with self.assertRaisesRegex(sd.Error, "no proposal to verify"):
            session.verify_greedy([0])

    @staticmethod
    def _path(parents, i):
        path = []
        while i != -1:
            path.append(i)
            i = parents[i]
        return path

    def test_sampling_is_lossless(self):
        """The first token emitted (an accepted child or the bonus) is
        distributed as the target: chi-square over 20,000 draws, 3 degrees
        of freedom, threshold 16.27 (p = 0.001)."""
        p = np.array([0.1, 0.2, 0.3, 0.4], dtype=np.float32)
        probs = np.tile(p, (3, 1))
        rng = sd.Rng(12345)
        counts = np.zeros(4)
        for _ in range(20000):
            r = sd.verify_sampling([9, 3, 1], [-1, 0, 0], probs, rng)
            first = r.accepted_tokens[0] if r.accepted_count else r.bonus_token
            counts[first] += 1
        expected = 20000 * p
        chi2 = float(((counts - expected) ** 2 / expected).sum())
        self.assertLess(chi2, 16.27, counts)

    def test_without_replacement_needs_and_uses_the_proposal(self):
        p = np.tile(np.array([0.25, 0.25, 0.25, 0.25], dtype=np.float32), (2, 1))
        with self.assertRaisesRegex(sd.Error, "needs proposal"):
            sd.verify_sampling([0, 1], [-1, 0], p, sd.Rng(1), mode="without-replacement")
        r = sd.verify_sampling([0, 1], [-1, 0], p, sd.Rng(1), mode="without-replacement",
                               proposal=p)  # q == p: the child is always accepted
        self.assertEqual(r.accepted_tokens.tolist(), [1])
        with self.assertRaisesRegex(sd.Error, "mode"):
            sd.verify_sampling([0, 1], [-1, 0], p, sd.Rng(1), mode="nucleus")

    def test_session_sampling_equals_module_sampling(self):
        index = sd.Index.open(INDEX)
        session = new_session("sam")
        session.attach(index)
        session.prefill(REF["prompt"])
        draft = session.propose(REF["generation"][0])
        probs = np.random.default_rng(3).random((len(draft), REF["vocab_size"])).astype(np.float32)
        sd.apply_sampling(probs, logits=False)
        a = session.verify_sampling(probs, sd.Rng(99))
        b = sd.verify_sampling(draft.tokens, draft.parents, probs, sd.Rng(99))
        self.assertEqual(a.commit_tokens.tolist(), b.commit_tokens.tolist())
        self.assertEqual(a.bonus_token, b.bonus_token)

    def test_apply_sampling_equals_numpy(self):
        logits = np.random.default_rng(5).normal(size=(3, 50)).astype(np.float32)
        out = logits.copy()
        sd.apply_sampling(out, temperature=0.7, top_k=10)
        for row, got in zip(logits, out):
            keep = np.argsort(-row, kind="stable")[:10]
            want = np.zeros(50)
            e = np.exp((row[keep] - row[keep].max()) / 0.7)
            want[keep] = e / e.sum()
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-7)
        with self.assertRaisesRegex(sd.Error, "float32"):
            sd.apply_sampling(np.zeros(4, dtype=np.float64))
        with self.assertRaises(sd.Error):
            sd.apply_sampling(np.zeros(4, dtype=np.float32), temperature=-1)
        counts = np.bincount([sd.sample_token([0.0, 1.0, 0.0], sd.Rng(i)) for i in range(50)],
                             minlength=3)
        self.assertEqual(counts.tolist(), [0, 50, 0])

    def test_bad_shapes(self):
        with self.assertRaisesRegex(sd.Error, "shape"):
            sd.verify_sampling([1, 2], [-1, 0], np.zeros((3, 4), np.float32), sd.Rng())
        with self.assertRaisesRegex(sd.Error, "parents\\[0\\]"):
            sd.verify_greedy([1, 2], [0, 0], [1, 2])
        with self.assertRaisesRegex(sd.Error, "one size"):
            sd.verify_greedy([1, 2], [-1], [1, 2])


class CostCurveTest(unittest.TestCase):
    def session(self, curve):
        session = sd.Session(policy="sam-cal", draft_size=REF["draft_size"], cost_curve=curve)
        session.attach(sd.Index.open(INDEX))
        session.prefill(REF["prompt"])
        return session

    def test_flat_curve_drafts_like_none_and_linear_drafts_nothing(self):
        flat = self.session([(1, 1.0), (4096, 1.0)])
        linear = self.session([(1, 1.0), (2, 2.0)])  # t(n) = n: no node pays
        drafted = 0
        for n, step in enumerate(REF["policies"]["sam-cal"]["steps"]):
            draft = flat.propose(step["start"])
            self.assertEqual(draft.tokens.tolist(), step["tokens"], "step %d" % n)
            self.assertEqual(draft.parents.tolist(), step["parents"], "step %d" % n)
            self.assertEqual(linear.propose(step["start"]).tokens.tolist(), [step["start"]])
            drafted += len(step["tokens"]) - 1
            flat.commit(step["commit"])
            linear.commit(step["commit"])
        self.assertGreater(drafted, 0)

    def test_curve_from_a_file_and_errors(self):
        path = os.path.join(FIXTURE, "curve.csv")
        with open(path, "w") as f:
            f.write("tokens,cost\n1,10\n8,12\n")
        self.session(path).propose(REF["policies"]["sam-cal"]["steps"][0]["start"])
        with open(path, "w") as f:
            f.write("tokens,cost\n1,10\n8,x\n")
        with self.assertRaisesRegex(sd.Error, "curve.csv: line 3: field 'cost'"):
            self.session(path)
        with self.assertRaisesRegex(sd.Error, "first point must be 1 token"):
            self.session([(2, 1.0)])
        with self.assertRaisesRegex(sd.Error, "cost_curve"):
            self.session([1, 2, 3])


class BatchTest(unittest.TestCase):
    """propose_batch gives each session the draft its own propose gives."""

    def test_batch_matches_the_cpp_drafts(self):
        index = sd.Index.open(INDEX)
        policies = [p for p in sd.POLICIES for _ in range(3)]   # 3 sessions per policy
        for pool in (None, sd.DraftPool(3), sd.DraftPool(1)):
            if pool is not None:
                self.assertIn(pool.threads, (1, 3))
            # Fresh sessions: Reset keeps sam-rec's Token Recycling table.
            sessions = []
            for policy in policies:
                s = new_session(policy)
                s.attach(index)
                s.prefill(REF["prompt"])
                sessions.append(s)
            for n in range(max(len(REF["policies"][p]["steps"]) for p in policies)):
                live = [i for i, p in enumerate(policies) if n < len(REF["policies"][p]["steps"])]
                steps = [REF["policies"][policies[i]]["steps"][n] for i in live]
                drafts = sd.propose_batch([sessions[i] for i in live],
                                          [st["start"] for st in steps], pool=pool)
                self.assertEqual(len(drafts), len(live))
                for i, step, draft in zip(live, steps, drafts):
                    where = "%s session %d step %d" % (policies[i], i, n)
                    self.assertIsInstance(draft, sd.Draft, where)
                    self.assertEqual(draft.tokens.tolist(), step["tokens"], where)
                    self.assertEqual(draft.parents.tolist(), step["parents"], where)
                    self.assertEqual(draft.depths.tolist(), step["depths"], where)
                    self.assertEqual(draft.source, step["source"], where)
                    sessions[i].commit(step["commit"])
                    k = REF["top_k"]
                    sessions[i].observe_topk(step["commit"], np.array(step["topk"]).reshape(-1, k))

    def test_max_nodes(self):
        """propose(start, max_nodes): a tree of at most max_nodes nodes, or a
        chain of at most that many cut from the whole tree; propose_batch's
        per-session limits draft what each session's own propose drafts."""
        index = sd.Index.open(INDEX)
        steps = REF["policies"]["sam-cal"]["steps"]

        def sessions(shape):
            out = []
            for _ in range(3):
                s = sd.Session(policy="sam-cal", shape=shape)
                s.attach(index)
                s.prefill(REF["prompt"])
                out.append(s)
            return out

        for shape in ("tree", "chain"):
            own, batched = sessions(shape), sessions(shape)
            longer = 0
            for n, step in enumerate(steps):
                limits = [1 + n % 5, 8, None]
                drafts = sd.propose_batch(batched, [step["start"]] * 3, max_nodes=limits)
                for s, limit, draft in zip(own, limits, drafts):
                    want = s.propose(step["start"], max_nodes=limit)
                    where = "%s step %d limit %s" % (shape, n, limit)
                    self.assertEqual(draft.tokens.tolist(), want.tokens.tolist(), where)
                    self.assertEqual(draft.parents.tolist(), want.parents.tolist(), where)
                    self.assertLessEqual(len(want), limit or s.draft_size, where)
                    if shape == "chain":
                        self.assertEqual(want.parents.tolist(), list(range(-1, len(want) - 1)))
                    longer += limit is None and len(want) > 8
                for s in own + batched:
                    s.commit(step["commit"])
            self.assertGreater(longer, 0, "no limit: longer drafts than 8 nodes")
            one = sd.DraftPool(2).propose(batched[:2], [steps[0]["start"]] * 2, max_nodes=2)
            self.assertTrue(all(len(d) <= 2 for d in one))
        s = own[0]
        for bad in (0, -1, "x", 2.5):
            with self.assertRaises(sd.Error, msg=repr(bad)):
                s.propose(steps[0]["start"], max_nodes=bad)
        with self.assertRaises(sd.Error):
            sd.propose_batch(own[:2], [1, 1], max_nodes=[3])
        with self.assertRaises(sd.Error):
            sd.propose_batch(own[:2], [1, 1], max_nodes=[3, 0])

    def test_bad_batches_are_refused(self):
        s = new_session("sam")
        s.attach(sd.Index.open(INDEX))
        s.prefill(REF["prompt"])
        start = REF["policies"]["sam"]["steps"][0]["start"]
        with self.assertRaises(sd.Error) as caught:
            sd.propose_batch([s, s], [start, start])
        self.assertEqual(caught.exception.code, "invalid-argument")
        with self.assertRaises(sd.Error):
            sd.propose_batch([s], [start, start])
        with self.assertRaises(sd.Error):
            sd.propose_batch([s, "not a session"], [start, start])
        self.assertEqual(sd.propose_batch([], []), [])
        # The session is usable afterwards (released after each refusal).
        self.assertEqual(sd.propose_batch([s], [start])[0].tokens.tolist(),
                         REF["policies"]["sam"]["steps"][0]["tokens"])


class HeaderTest(unittest.TestCase):
    def test_properties(self):
        index = sd.Index.open(INDEX)
        self.assertEqual(index.vocab_size, REF["vocab_size"])
        self.assertGreater(index.num_tokens, 0)
        self.assertEqual(index.num_documents, 60)
        self.assertEqual(index.bos_id, 1)
        self.assertIsNone(index.eos_id)
        self.assertIsNone(index.tokenizer_sha256)   # built from ids
        self.assertEqual(index.version[0], 1)
        self.assertEqual(index.file_size, os.path.getsize(INDEX))
        self.assertTrue(index.prepared)
        self.assertFalse(sd.Index.open(INDEX, prepare=False).prepared)  # a file without sections
        self.assertEqual(sd.Index.open(INDEX, prepare=False).prepared_bytes, 0)
        # Child records: prepared with them (even with prepare=False), and bigger.
        self.assertEqual(index.child_record_bytes, 0)
        records = sd.Index.open(INDEX, prepare=False, child_records=True)
        self.assertTrue(records.prepared)
        self.assertGreater(records.child_record_bytes, 0)
        self.assertEqual(records.prepared_bytes,
                         index.prepared_bytes + records.child_record_bytes)
        # No open option changes drafts (records' drafts: test above); an
        # unknown keyword is refused.
        with self.assertRaises(TypeError):
            sd.Index.open(INDEX, subtree_nodes=8)
        self.assertEqual(sd.Index.open(pathlib.Path(INDEX)).path, INDEX)
        index.verify()
        self.assertIsInstance(index.metadata(), dict)


class ErrorsTest(unittest.TestCase):
    def assertError(self, code, pattern, call, *args, **kwargs):
        with self.assertRaises(sd.Error) as caught:
            call(*args, **kwargs)
        self.assertEqual(caught.exception.code, code)
        self.assertRegex(str(caught.exception), pattern)

    def test_bad_path(self):
        self.assertError("io", "no/such.sam", sd.Index.open, "no/such.sam")

    def test_message_with_undecodable_file_name(self):
        name = b"no-such-\xff.sam".decode("utf-8", "surrogateescape")
        self.assertError("io", "no-such-", sd.Index.open, name)

    def test_not_an_index(self):
        self.assertError("bad-magic", "reference.json",
                         sd.Index.open, os.path.join(FIXTURE, "reference.json"))

    def test_tokenizer_mismatch(self):
        # The index was built from ids: no tokenizer matches it.
        self.assertError("tokenizer-mismatch", "tokenizer",
                         sd.Index.open, INDEX, tokenizer=os.path.join(FIXTURE, "reference.json"))
        self.assertError("io", "missing.model", sd.Index.open, INDEX, tokenizer="missing.model")

    def test_out_of_vocabulary_ids(self):
        """Ids at or above the index's vocabulary are refused by prefill, propose (alone and
        batched) and commit; the refused calls change nothing (the drafts equal an oracle
        session's that never got them)."""
        index = sd.Index.open(INDEX)
        vocab = index.vocab_size
        session, oracle = sd.Session(), sd.Session()
        for s in (session, oracle):
            s.attach(index)
        prompt = REF["prompt"]
        self.assertError("invalid-argument", r"ids\[1\] = %d is outside the vocabulary" % vocab,
                         session.prefill, [prompt[0], vocab] + prompt[1:])
        for s in (session, oracle):
            s.prefill(prompt)
        self.assertError("invalid-argument", "start token %d is outside the vocabulary" % (vocab + 1),
                         session.propose, vocab + 1)
        failed = sd.propose_batch([session], [vocab])[0]
        self.assertIsInstance(failed, sd.Error)
        self.assertEqual(failed.code, "invalid-argument")
        for step in REF["policies"]["sam-cal"]["steps"][:4]:
            self.assertEqual(session.propose(step["start"]).tokens.tolist(),
                             oracle.propose(step["start"]).tokens.tolist())
            self.assertError("invalid-argument", r"Session::Commit: ids\[1\] = %d" % (vocab + 9),
                             session.commit, [step["commit"][0], vocab + 9])
            session.commit(step["commit"])
            oracle.commit(step["commit"])
        self.assertEqual(session.stats(), oracle.stats())

    def test_bad_options(self):
        self.assertError("invalid-argument", r"unknown policy 'nope' \(valid: sam, static",
                         sd.Session, policy="nope")
        self.assertError("invalid-argument", "draft_size", sd.Session, draft_size=0)
        self.assertError("invalid-argument", "unknown option 'draftsize'", sd.Session, draftsize=4)
        self.assertError("invalid-argument", "recycling_vocab_size", sd.Session, policy="sam-rec")
        self.assertError("invalid-argument", "option 'draft_size' must be a non-negative integer",
                         sd.Session, draft_size=-4)
        self.assertError("invalid-argument", "option 'policy' must be a policy name",
                         sd.Session, policy=3)
        self.assertError("invalid-argument", "min_path_probability: 'nan' is not a finite number",
                         sd.Session, policy="sam-cal",
                         experimental={"min_path_probability": float("nan")})
        self.assertError("invalid-argument", r"min_path_probability: '1.5' is outside \[0, 1\]",
                         sd.Session, experimental={"min_path_probability": 1.5})
        self.assertError("invalid-argument", r"calibrated_width: '0' is outside \[1, 64\]",
                         sd.Session, policy="sam-cal", experimental={"calibrated_width": 0})
        self.assertError("invalid-argument", r"tree_width: '0' is outside \[1, 64\]",
                         sd.Session, policy="sam-tree", tree_width=0)
        # Tuning parameters are not options: named as options they are refused, with a hint.
        self.assertError("invalid-argument", "unknown option 'max_width'.*experimental=",
                         sd.Session, max_width=4)
        self.assertError("invalid-argument", "unknown experimental option 'nope'",
                         sd.Session, experimental={"nope": 1})
        self.assertError("invalid-argument", r"unknown draft shape 'path' \(valid: tree, chain\)",
                         sd.Session, shape="path")

    def test_chain_shape(self):
        # shape="chain": every draft is one root path of the tree the same policy drafts
        # (the sam-tree trees need no learning: a tree session next to it has them).
        index = sd.Index.open(INDEX)
        chain, tree = sd.Session(policy="sam-tree", shape="chain"), sd.Session(policy="sam-tree")
        for session in (chain, tree):
            session.attach(index)
            session.prefill(REF["prompt"])
        cut = 0
        for n, step in enumerate(REF["policies"]["sam-tree"]["steps"]):
            c, t = chain.propose(step["start"]), tree.propose(step["start"])
            parents = c.parents.tolist()
            self.assertEqual(parents, list(range(-1, len(parents) - 1)), "step %d" % n)
            node = 0  # each chain token is a child of the previous one in the tree
            for token in c.tokens.tolist()[1:]:
                node = next(i for i in range(node + 1, len(t.tokens))
                            if t.parents[i] == node and t.tokens[i] == token)
            cut += len(c.tokens) < len(t.tokens)
            for session in (chain, tree):
                session.commit(step["commit"])
        self.assertGreater(cut, 0)

    def test_tokens_out_of_range(self):
        session = sd.Session()
        self.assertError("invalid-argument", r"ids\[1\] = -1 is outside", session.prefill, [1, -1])
        self.assertError("invalid-argument", "4294967296", session.commit, [2**32])
        self.assertError("invalid-argument", "is outside", session.propose, -3)
        self.assertError("invalid-argument", "not an integer", session.commit, [1.5])
        self.assertError("invalid-argument", "sequence of integers", session.commit, "abc")
        self.assertError("invalid-argument", "shape", session.observe_topk, [1, 2], [[1, 2]])

    def test_error_class(self):
        self.assertTrue(issubclass(sd.Error, Exception))
        try:
            sd.Index.open("no/such.sam")
        except sd.Error as e:
            self.assertEqual(e.code_value, 1)


class ThreadsTest(unittest.TestCase):
    def test_many_threads_over_one_index(self):
        index = sd.Index.open(INDEX)
        failures = []

        def run(policy):
            try:
                for _ in range(3):
                    # A new session each time: reset() keeps the Token
                    # Recycling table of sam-rec, which changes its drafts.
                    session = new_session(policy)
                    session.attach(index)
                    replay(self, session, policy)
            except Exception as e:  # reported by the main thread
                failures.append("%s: %r" % (policy, e))

        threads = [threading.Thread(target=run, args=(p,)) for p in sd.POLICIES * 3]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        self.assertEqual(failures, [])


    def test_one_session_from_two_threads_is_refused_not_raced(self):
        """Overlapping calls on one session raise Error; nothing crashes."""
        session = new_session("sam")
        session.attach(sd.Index.open(INDEX))
        session.prefill(REF["prompt"])
        steps = REF["policies"]["sam"]["steps"]
        refused, other = [], []

        def run():
            for _ in range(20):
                for step in steps:
                    try:
                        session.propose(step["start"])
                        session.commit(step["commit"])
                    except sd.Error as e:
                        (refused if "used by another thread" in str(e) else other).append(e)

        threads = [threading.Thread(target=run) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        self.assertEqual(other, [])
        if refused:
            self.assertEqual(refused[0].code, "invalid-argument")


class LifetimeTest(unittest.TestCase):
    def test_free_in_any_order(self):
        steps = REF["policies"]["sam"]["steps"]
        for order in ("index_first", "session_first", "draft_last"):
            index = sd.Index.open(INDEX)
            session = new_session("sam")
            session.attach(index)
            session.prefill(REF["prompt"])
            draft = session.propose(steps[0]["start"])
            tokens = draft.tokens
            if order == "index_first":
                del index
                gc.collect()
                # The session keeps the index mapped.
                self.assertEqual(session.propose(steps[0]["start"]).tokens.tolist(),
                                 steps[0]["tokens"])
                del session, draft
            elif order == "session_first":
                del session
                gc.collect()
                # The draft keeps the session's buffer.
                self.assertEqual(draft.tokens.tolist(), steps[0]["tokens"])
                del index, draft
            else:
                del session, index
                gc.collect()
                del draft
            gc.collect()
            # An array outlives everything else.
            self.assertEqual(tokens.tolist(), steps[0]["tokens"])


class ResponseCacheTest(unittest.TestCase):
    @staticmethod
    def brute_match(responses, context):
        """Longest suffix of context inside one response (brute force)."""
        best = 0
        for n in range(1, len(context) + 1):
            suffix = context[-n:]
            if any(suffix == r[i:i + n] for r in responses for i in range(len(r) - n + 1)):
                best = n
            else:
                break
        return best

    def test_matches_equal_brute_force_and_tenants_are_isolated(self):
        rng = np.random.default_rng(3)
        cache = sd.ResponseCache(1 << 20)
        kept = {"a": [], "b": []}
        for i in range(40):
            tenant = "ab"[i % 2]
            r = [int(x) for x in rng.integers(0, 4, 12)] + ([1000] if tenant == "a" else [])
            self.assertTrue(cache.insert(tenant, r))
            kept[tenant].append(r)
        self.assertEqual(cache.responses("a"), kept["a"])
        self.assertEqual(cache.tenants(), ["a", "b"])
        self.assertLessEqual(cache.bytes, cache.max_bytes)
        for _ in range(200):
            context = [int(x) for x in rng.integers(0, 4, int(rng.integers(1, 10)))]
            length, draft = cache.draft("b", context, 8)
            self.assertEqual(length, self.brute_match(kept["b"], context))
            self.assertNotIn(1000, draft)  # tenant a's id never drafts for b
        with self.assertRaises(sd.Error):
            cache.insert("a", [1, 2**32 - 1])

    def test_sessions_draft_from_earlier_requests(self):
        cache = sd.ResponseCache(1 << 20)
        output = [100 + 3 * k for k in range(60)]

        def run(session):
            session.reset()
            session.prefill([1, 2])
            sources, i = [], 0
            while i < len(output):
                draft = session.propose(output[i])
                tokens = draft.tokens.tolist()
                a = 0
                while a + 1 < len(tokens) and i + a + 1 < len(output) and \
                        tokens[a + 1] == output[i + a + 1]:
                    a += 1
                session.commit(output[i:i + a + 1])
                sources.append(draft.source)
                i += a + 1
            return sources

        session = sd.Session(policy="sam")
        session.attach_cache(cache, "t")
        self.assertNotIn("cache", run(session))
        self.assertTrue(session.cache_request())
        self.assertEqual(cache.responses("t"), [output])
        warm = run(session)
        self.assertEqual(warm, ["cache", "cache"])  # 39 + bonus, then the other 20
        self.assertIn("cache", session.stats()["sources"])
        session.attach_cache(cache, "other")
        self.assertNotIn("cache", run(session))
        session.attach_cache(None)

    def test_compiling_cache(self):
        """compile=True: tenants are compiled (counted in bytes), and a calibrated session
        drafts differently from one over a cache that does not compile; bad options raise."""
        rng = np.random.default_rng(7)
        phrases = [[int(x) for x in rng.integers(10, 19, 4)] for _ in range(5)]
        outputs = []
        for _ in range(12):
            out = []
            for _ in range(6):
                out += phrases[int(rng.integers(0, 5))] + [int(rng.integers(10, 19))]
            outputs.append(out)
        trees = {}
        for compile in (False, True):
            cache = sd.ResponseCache(1 << 20, compile=compile, compile_min_tokens=64)
            session = sd.Session(policy="sam-cal")
            session.attach_cache(cache, "t")
            drafted = []
            for output in outputs:
                session.reset()
                session.prefill([1, 2])
                i = 0
                while i < len(output):
                    tokens = session.propose(output[i]).tokens.tolist()
                    drafted.append(tokens)
                    a = 0
                    while a + 1 < len(tokens) and i + a + 1 < len(output) and \
                            tokens[a + 1] == output[i + a + 1]:
                        a += 1
                    session.commit(output[i:i + a + 1])
                    i += a + 1
                self.assertTrue(session.cache_request())
            trees[compile] = drafted
            self.assertLessEqual(cache.bytes, cache.max_bytes)
            if compile:
                self.assertGreater(cache.num_compiles, 0)
                self.assertGreater(cache.compiled_bytes, 0)
                self.assertLessEqual(cache.compiled_bytes, cache.max_bytes // 4)
            else:
                self.assertEqual((cache.num_compiles, cache.compiled_bytes), (0, 0))
            session.attach_cache(None)
        self.assertNotEqual(trees[False], trees[True])
        # On the cache's own thread: the same compiles once waited for.
        sync = sd.ResponseCache(1 << 20, compile=True, compile_min_tokens=64)
        background = sd.ResponseCache(1 << 20, compile=True, compile_min_tokens=64,
                                      compile_background=True)
        for output in outputs:
            sync.insert("t", output)
            background.insert("t", output)
            background.wait_for_compiles()
        self.assertEqual(background.num_compiles, sync.num_compiles)
        self.assertEqual(background.compiled_bytes, sync.compiled_bytes)
        with self.assertRaises(sd.Error):
            sd.ResponseCache(1 << 20, compile=True, compile_growth=0.0)
        with self.assertRaises(sd.Error):
            sd.ResponseCache(1 << 20, compile=True, compile_bytes=1 << 20)

    def test_a_cache_of_another_vocabulary_is_refused(self):
        """A loaded cache holding an id at or above the index's vocabulary is
        refused when attached (and, once a session attached the cache, at
        load), naming the file, the response, the id and the vocabulary."""
        import tempfile
        index = sd.Index.open(INDEX)
        vocab = REF["vocab_size"]
        foreign = sd.ResponseCache(1 << 20)
        foreign.insert("t", [2, 4294967294, 40000, 5])
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "foreign.samc")
            foreign.save(path)
            loaded = sd.ResponseCache(1 << 20)
            loaded.load(path)
            session = sd.Session(policy="sam")
            session.attach(index)

            def refused(call):
                with self.assertRaises(sd.Error) as e:
                    call()
                message = str(e.exception)
                for part in (path, "response 1", "4294967294",
                             "vocabulary size %d" % vocab):
                    self.assertIn(part, message)

            refused(lambda: session.attach_cache(loaded, "t"))
            fresh = sd.ResponseCache(1 << 20)
            session.attach_cache(fresh, "t")
            refused(lambda: fresh.load(path))
            self.assertEqual(fresh.num_responses, 0)

    def test_save_and_load(self):
        import tempfile
        cache = sd.ResponseCache(1 << 20)
        cache.insert("t", [5, 6, 7])
        cache.insert("u", [8, 9])
        tok = "ab" * 32
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "c.samc")
            cache.save(path, tok)
            loaded = sd.ResponseCache(1 << 20)
            loaded.load(path, tok)
            self.assertEqual(loaded.responses("t"), [[5, 6, 7]])
            self.assertEqual(loaded.responses("u"), [[8, 9]])
            with self.assertRaises(sd.Error) as e:
                sd.ResponseCache(1 << 20).load(path, "cd" * 32)
            self.assertIn("tokenizer", e.exception.code)
            self.assertIn(path, str(e.exception))
            with open(path, "r+b") as f:
                f.seek(45)
                f.write(b"\x7f")
            with self.assertRaises(sd.Error) as e:
                sd.ResponseCache(1 << 20).load(path, tok)
            self.assertIn(path, str(e.exception))


class FilesTest(unittest.TestCase):
    """Paths with a NUL byte, writes that would destroy data, and opens that would block."""

    def setUp(self):
        import tempfile
        self.dir = tempfile.TemporaryDirectory()
        self.addCleanup(self.dir.cleanup)
        self.cache = sd.ResponseCache(1 << 20)
        self.cache.insert("t", [5, 6, 7])
        self.tok = "ab" * 32

    def path(self, name):
        return os.path.join(self.dir.name, name)

    def test_embedded_nul_is_a_value_error_like_open(self):
        import shutil
        index = self.path("idx.sam")
        shutil.copy(INDEX, index)
        before = pathlib.Path(index).read_bytes()
        for call in (lambda p: self.cache.save(p, self.tok), lambda p: self.cache.load(p, self.tok),
                     sd.Index.open, sd.ShardSet.open,
                     lambda p: sd.Session(policy="sam-cal", cost_curve=p)):
            with self.subTest(call=call):
                with self.assertRaisesRegex(ValueError, "embedded null byte"):
                    call(index + "\x00.samc")
        self.assertEqual(pathlib.Path(index).read_bytes(), before)
        with self.assertRaisesRegex(ValueError, "embedded null byte"):
            open(index + "\x00.samc")  # the behaviour followed

    def test_save_never_replaces_what_is_not_a_cache_file(self):
        import shutil
        index = self.path("idx.sam")
        shutil.copy(INDEX, index)
        before = pathlib.Path(index).read_bytes()
        fifo = self.path("fifo.samc")
        os.mkfifo(fifo)
        target = self.path("target")
        pathlib.Path(target).write_text("keep")
        link = self.path("link.samc")
        os.symlink(target, link)
        for path, why in ((index, "is not a 'SAMCACHE' file"), (fifo, "not a regular file"),
                          (link, "symbolic link"), (self.dir.name, "is a directory")):
            with self.subTest(path=path):
                with self.assertRaises(sd.Error) as e:
                    self.cache.save(path, self.tok)
                self.assertEqual(e.exception.code, "invalid-argument")
                self.assertIn(why, str(e.exception))
        self.assertEqual(pathlib.Path(index).read_bytes(), before)
        self.assertTrue(pathlib.Path(fifo).is_fifo())
        self.assertTrue(os.path.islink(link))
        self.assertEqual(pathlib.Path(target).read_text(), "keep")
        self.cache.save(self.path("ok.samc"), self.tok)
        self.cache.save(self.path("ok.samc"), self.tok)  # a cache file is replaced

    def test_opening_a_fifo_never_blocks(self):
        import signal
        fifo = self.path("fifo")
        os.mkfifo(fifo)
        def hang(signum, frame):
            raise AssertionError("opening a FIFO blocked")
        old = signal.signal(signal.SIGALRM, hang)
        signal.alarm(20)
        try:
            for name, call in (("ResponseCache.load", lambda: self.cache.load(fifo, self.tok)),
                               ("Index.open", lambda: sd.Index.open(fifo)),
                               ("ShardSet.open", lambda: sd.ShardSet.open(fifo)),
                               ("cost_curve", lambda: sd.Session(policy="sam-cal",
                                                                 cost_curve=fifo))):
                with self.subTest(call=name):
                    with self.assertRaises(sd.Error) as e:
                        call()
                    self.assertEqual(e.exception.code, "io")
                    self.assertRegex(str(e.exception), "not a regular file|is a FIFO")
        finally:
            signal.alarm(0)
            signal.signal(signal.SIGALRM, old)

    def test_cost_curve_with_a_byte_order_mark(self):
        path = self.path("curve.csv")
        with open(path, "w", encoding="utf-8-sig") as f:  # as spreadsheets save CSV
            f.write("tokens,cost\n1,10\n8,12\n")
        sd.Session(policy="sam-cal", cost_curve=path)

    def test_tenant_keys_that_are_not_utf8(self):
        cache = sd.ResponseCache(1 << 20)
        cache.insert(b"caf\xe9", [5, 6, 7])
        keys = cache.tenants()
        self.assertEqual(keys, ["caf\udce9"])  # surrogateescape, as os.fsdecode
        self.assertEqual(keys[0].encode("utf-8", "surrogateescape"), b"caf\xe9")
        # Saved and loaded back, and shown by sam-inspect --json (U+FFFD for the byte).
        path = self.path("t.samc")
        cache.save(path, self.tok)
        loaded = sd.ResponseCache(1 << 20)
        loaded.load(path, self.tok)
        self.assertEqual(loaded.tenants(), ["caf\udce9"])
        inspect = os.path.join(os.path.dirname(os.environ.get("SAM_BUILD_TOOL", "")), "sam-inspect")
        if os.path.exists(inspect):
            import subprocess
            out = subprocess.run([inspect, "--json", path], capture_output=True, text=True)
            self.assertEqual(out.returncode, 0, out.stderr)
            self.assertEqual(json.loads(out.stdout)["tenants"][0]["tenant"], "caf\ufffd")


class BoundsTest(unittest.TestCase):
    """Options that would size memory without bound are refused before anything is allocated."""

    def assertRefused(self, pattern, **options):
        with self.assertRaises(sd.Error) as e:
            sd.Session(**options)
        self.assertEqual(e.exception.code, "invalid-argument")
        self.assertRegex(str(e.exception), pattern)

    def test_widths(self):
        self.assertRefused(r"calibrated_width: '30000000' is outside \[1, 64\]",
                           policy="sam-cal", experimental={"calibrated_width": 30_000_000})
        self.assertRefused(r"tree_width: '65' is outside \[1, 64\]", policy="sam-tree",
                           tree_width=65)
        sd.Session(policy="sam-cal", experimental={"calibrated_width": 64})
        sd.Session(policy="sam-tree", tree_width=64)

    def test_recycling_vocab_size(self):
        self.assertRefused("recycling_vocab_size 268435456 is above the limit of 4194304",
                           policy="sam-rec", recycling_vocab_size=2**28)
        sd.Session(policy="sam-rec", recycling_vocab_size=32000)

    def test_max_dynamic_bytes(self):
        for small in (1, 1000):
            self.assertRefused("max_dynamic_bytes %d holds no useful window: give 0" % small,
                               max_dynamic_bytes=small)
        # 0 is the default: dynamic drafting works (the prompt's repeat is drafted).
        for bytes_ in (0, 64 << 20):
            session = sd.Session(policy="dynamic", max_dynamic_bytes=bytes_)
            session.prefill([1, 2, 3, 4, 5, 6, 7, 8, 1, 2, 3])
            self.assertEqual(session.propose(4).tokens.tolist()[:3], [4, 5, 6], bytes_)

    def test_attach_refuses_another_vocabulary(self):
        import tempfile
        with tempfile.TemporaryDirectory() as d:
            docs = os.path.join(d, "docs.jsonl")
            with open(docs, "w") as f:
                f.write("[1, 2, 3]\n")
            wide = os.path.join(d, "wide.sam")
            sam_build = os.environ.get("SAM_BUILD_TOOL", "")
            if not os.path.exists(sam_build):
                self.skipTest("sam-build not found (SAM_BUILD_TOOL)")
            import subprocess
            subprocess.run([sam_build, "-q", "--vocab-size", str(sd.Index.open(INDEX).vocab_size + 7),
                            "--corpus", "ids=" + docs, "-o", wide], check=True,
                           stdout=subprocess.DEVNULL)
            session = sd.Session()
            session.attach(sd.Index.open(INDEX))
            with self.assertRaises(sd.Error) as e:
                session.attach(sd.Index.open(wide))
            self.assertEqual(e.exception.code, "invalid-argument")
            self.assertIn("one session drafts for one vocabulary", str(e.exception))

    def test_a_file_without_accelerator_sections_warns_and_drafts_the_same(self):
        """An index written without HUBS/FILT (as format 1.0 files are) opens with a
        UserWarning naming `sam-build --upgrade`, and drafts as the same corpus with them, as
        with child records read from the file (--child-records) or computed at open."""
        import subprocess
        import tempfile
        import warnings
        sam_build = os.environ.get("SAM_BUILD_TOOL", "")
        if not os.path.exists(sam_build):
            self.skipTest("sam-build not found (SAM_BUILD_TOOL)")
        with tempfile.TemporaryDirectory() as d:
            docs = os.path.join(d, "docs.jsonl")
            with open(docs, "w") as f:
                for i in range(200):
                    f.write(str([1, 2, i % 50 + 3, 4, (i * 7) % 50 + 3, 2]) + "\n")
            paths = {}
            for name, extra in (("with", []), ("without", ["--no-accelerators"]),
                                ("records", ["--child-records"])):
                paths[name] = os.path.join(d, name + ".sam")
                subprocess.run([sam_build, "-q", "--vocab-size", "60", "--corpus", "ids=" + docs,
                                "-o", paths[name]] + extra, check=True, stdout=subprocess.DEVNULL)
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                plain = sd.Index.open(paths["with"])
            self.assertEqual([str(w.message) for w in caught], [])
            with self.assertWarns(UserWarning) as w:
                old = sd.Index.open(paths["without"])
            self.assertIn("sam-build --upgrade " + paths["without"], str(w.warning))
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                bare = sd.Index.open(paths["without"], prepare=False)  # nothing computed
            self.assertEqual([str(w.message) for w in caught], [])
            self.assertFalse(bare.prepared)
            self.assertEqual(bare.prepared_bytes, 0)
            # prepare=False takes what a file holds: its sections and child records.
            unprepared = sd.Index.open(paths["records"], prepare=False)
            self.assertTrue(unprepared.prepared)
            self.assertGreater(unprepared.child_record_bytes, 0)
            # A file with child records: a default open maps and uses them (nothing private,
            # child_records=True changes nothing); a file without them computes them on request.
            records = sd.Index.open(paths["records"])
            self.assertGreater(records.child_record_bytes, 0)
            self.assertEqual(plain.child_record_bytes, 0)
            self.assertEqual(records.prepared_bytes, plain.prepared_bytes)
            self.assertEqual(sd.Index.open(paths["records"], child_records=True).prepared_bytes,
                             plain.prepared_bytes)
            computed = sd.Index.open(paths["with"], child_records=True)
            self.assertEqual(computed.child_record_bytes, records.child_record_bytes)
            self.assertGreater(computed.prepared_bytes, plain.prepared_bytes)
            stream = [1, 2, 5, 4, 38, 2, 1, 2, 7, 4, 52, 2, 1, 2, 5, 4]
            drafts = []
            for index in (plain, old, records, computed, bare, unprepared):
                session = sd.Session(policy="sam-cal")
                session.attach(index)
                session.prefill(stream[:2])
                got = []
                for t in stream[2:]:
                    tree = session.propose(t)
                    got.append((list(tree.tokens), list(tree.parents)))
                    session.commit([t])
                drafts.append(got)
            for other in drafts[1:]:
                self.assertEqual(drafts[0], other)
            self.assertTrue(any(len(t) > 1 for t, _ in drafts[0]))


class TokenizerTest(unittest.TestCase):
    """samdecoding.Tokenizer against independent oracles: the SentencePiece Python package for a
    .model, Hugging Face's own tokenizers (the Node addon hf_tokenizer_compare installs) for a
    tokenizer.json; the fingerprint against the file's SHA-256 and what sam-build records."""

    TEXTS = ["Hello world", "  two leading spaces, 12345 digits; punctuation!?",
             "caf\u00e9 na\u00efve \u4f60\u597d \U0001f642", "def f(x):\n    return x\t# end\n",
             "Natalia sold clips to 48 of her friends in April.", ""]

    def setUp(self):
        self.data = os.environ.get("SAM_DATA_DIR", "")
        self.model = os.path.join(self.data, "tokenizer", "llama-32k.model")

    def texts(self):
        texts = list(self.TEXTS)
        gsm8k = os.path.join(self.data, "gsm8k", "test.jsonl")
        if os.path.exists(gsm8k):
            with open(gsm8k) as f:
                for line, _ in zip(f, range(200)):
                    record = json.loads(line)
                    texts += [record["question"], record["answer"]]
        return texts

    def build_index(self, d, tokenizer, name):
        import subprocess
        sam_build = os.environ.get("SAM_BUILD_TOOL", "")
        if not os.path.exists(sam_build):
            self.skipTest("sam-build not found (SAM_BUILD_TOOL)")
        corpus = os.path.join(d, "corpus.txt")
        with open(corpus, "w") as f:
            f.write("the quick brown fox\n\njumps over the lazy dog\n")
        out = os.path.join(d, name)
        subprocess.run([sam_build, "-q", "--tokenizer", tokenizer, "--text-split", "blank-line",
                        "--corpus", "text=" + corpus, "-o", out], check=True,
                       stdout=subprocess.DEVNULL)
        return out

    def test_sentencepiece_model_encodes_as_sentencepiece(self):
        if not os.path.exists(self.model):
            self.skipTest("no %s (the shared data folder)" % self.model)
        try:
            import sentencepiece
        except ImportError:
            self.skipTest("the SentencePiece Python package is not installed "
                          "(python3-sentencepiece, tools/install_deps.sh)")
        oracle = sentencepiece.SentencePieceProcessor(model_file=self.model)
        tok = sd.Tokenizer(pathlib.Path(self.model))
        self.assertEqual(tok.kind, "sentencepiece")
        self.assertEqual(tok.vocab_size, oracle.vocab_size())
        self.assertEqual((tok.bos_id, tok.eos_id), (oracle.bos_id(), oracle.eos_id()))
        for text in self.texts():
            ids = oracle.encode(text)
            self.assertEqual(tok.encode(text), ids, text)
            self.assertEqual(tok.encode(text, add_bos=True), [oracle.bos_id()] + ids, text)
            self.assertEqual(tok.decode(ids), oracle.decode(ids), text)
        self.assertEqual(tok.decode(np.array([1, 15043, 3186], dtype=np.uint32)), "Hello world")
        with self.assertRaises(sd.Error) as e:
            tok.decode([15043, 32000])
        self.assertEqual(e.exception.code, "invalid-argument")
        self.assertIn("ids[1] = 32000 is outside the vocabulary", str(e.exception))

    def test_fingerprint_is_what_the_index_records(self):
        if not os.path.exists(self.model):
            self.skipTest("no %s (the shared data folder)" % self.model)
        import hashlib
        import tempfile
        tok = sd.Tokenizer(self.model)
        with open(self.model, "rb") as f:
            self.assertEqual(tok.sha256, hashlib.sha256(f.read()).hexdigest())
        with tempfile.TemporaryDirectory() as d:
            built = self.build_index(d, self.model, "llama.sam")
            index = sd.Index.open(built, tokenizer=tok)
            self.assertEqual(index.tokenizer_sha256, tok.sha256)
            tok.check(index)
            # An index of raw ids, or of another tokenizer: refused by check and by open.
            ids_index = sd.Index.open(INDEX)
            with self.assertRaises(sd.Error) as e:
                tok.check(ids_index)
            self.assertEqual(e.exception.code, "tokenizer-mismatch")
            self.assertIn("from token ids", str(e.exception))
            self.assertIn("llama-32k.model", str(e.exception))
            with self.assertRaises(sd.Error) as e:
                sd.Index.open(INDEX, tokenizer=tok)
            self.assertEqual(e.exception.code, "tokenizer-mismatch")
            hf = self.hf_reference()
            if hf:
                other = sd.Tokenizer(hf[1])
                with self.assertRaises(sd.Error) as e:
                    other.check(index)
                self.assertEqual(e.exception.code, "tokenizer-mismatch")
                self.assertIn(tok.sha256, str(e.exception))
                with self.assertRaises(sd.Error) as e:
                    sd.Index.open(built, tokenizer=other)
                self.assertEqual(e.exception.code, "tokenizer-mismatch")

    def test_example_reads_text_with_the_tokenizer(self):
        """examples/python/draft.py --tokenizer: the text reference drafts as the ids the
        tokenizer gives (the ids run is checked against sam-replay by examples_mat_equals_replay);
        another tokenizer's index is refused."""
        if not os.path.exists(self.model):
            self.skipTest("no %s (the shared data folder)" % self.model)
        import subprocess
        import sys
        import tempfile
        example = pathlib.Path(__file__).resolve().parents[2] / "examples" / "python" / "draft.py"
        tok = sd.Tokenizer(self.model)
        prompt = "the quick brown fox"
        text = " jumps over the lazy dog, the quick brown fox jumps over the lazy dog"
        with tempfile.TemporaryDirectory() as d:
            built = self.build_index(d, self.model, "llama.sam")
            with open(os.path.join(d, "text.txt"), "w") as f:
                f.write(prompt + "\n" + text + "\n")
            with open(os.path.join(d, "ids.txt"), "w") as f:
                f.write(" ".join(map(str, tok.encode(prompt, add_bos=True))) + "\n")
                f.write(" ".join(map(str, tok.encode(text))) + "\n")
            run = lambda *args: subprocess.run([sys.executable, str(example), *args],
                                               capture_output=True, text=True)
            by_text = run("--tokenizer", self.model, built, os.path.join(d, "text.txt"))
            by_ids = run(built, os.path.join(d, "ids.txt"))
            self.assertEqual(by_text.returncode, 0, by_text.stderr)
            self.assertRegex(by_text.stdout, r"^MAT \d")
            self.assertEqual(by_text.stdout, by_ids.stdout)
            refused = run("--tokenizer", self.model, INDEX, os.path.join(d, "text.txt"))
            self.assertEqual(refused.returncode, 1)
            self.assertIn("from token ids", refused.stderr)

    def hf_reference(self):
        """(node_modules, Llama 3's tokenizer.json) when hf_tokenizer_compare's cache is present."""
        modules = os.environ.get("SAM_HF_REFERENCE_MODULES", "")
        json_path = os.path.join(modules, "@lenml", "tokenizer-llama3", "models", "tokenizer.json")
        import shutil
        if not os.path.exists(json_path) or not shutil.which("node"):
            return None
        return modules, json_path

    def test_tokenizer_json_encodes_as_hugging_face(self):
        hf = self.hf_reference()
        if not hf:
            self.skipTest("Hugging Face's tokenizers (the hf_tokenizer_compare test's npm cache, "
                          "SAM_HF_REFERENCE_MODULES) or node is unavailable")
        import struct
        import subprocess
        import tempfile
        modules, json_path = hf
        texts = [t for t in self.texts() if t and "\n" not in t]  # one text a line
        with tempfile.TemporaryDirectory() as d:
            tsv, ids_bin, decoded = (os.path.join(d, n) for n in ("t.tsv", "ids.bin", "dec.txt"))
            with open(tsv, "w") as f:
                for t in texts:
                    f.write("t\t" + t.encode().hex() + "\n")
            script = os.path.join(os.path.dirname(__file__), "..", "indexer", "hf_reference.js")
            subprocess.run(["node", script, modules, json_path, tsv, ids_bin, decoded], check=True,
                           stdout=subprocess.DEVNULL)
            with open(ids_bin, "rb") as f:
                data = f.read()
            expected, at = [], 0
            for _ in texts:
                (n,) = struct.unpack_from("<I", data, at)
                expected.append(list(struct.unpack_from("<%dI" % n, data, at + 4)))
                at += 4 * (n + 1)
            with open(decoded) as f:
                expected_text = [bytes.fromhex(line.strip()).decode() for line in f]
            tok = sd.Tokenizer(json_path)
            self.assertEqual(tok.kind, "tokenizer.json")
            for text, ids, back in zip(texts, expected, expected_text):
                self.assertEqual(tok.encode(text), ids, text)
                self.assertEqual(tok.decode(ids), back, text)
            self.assertEqual(tok.encode(texts[0], add_bos=True)[0], tok.bos_id)
            # The folder holding tokenizer.json is the same tokenizer, and sam-build records its
            # fingerprint.
            self.assertEqual(sd.Tokenizer(os.path.dirname(json_path)).sha256, tok.sha256)
            built = self.build_index(d, json_path, "llama3.sam")
            self.assertEqual(sd.Index.open(built, tokenizer=tok).tokenizer_sha256, tok.sha256)

    def test_bad_files_are_refused_by_name(self):
        import tempfile
        with self.assertRaises(sd.Error) as e:
            sd.Tokenizer("no/such.model")
        self.assertEqual(e.exception.code, "io")
        self.assertIn("no/such.model", str(e.exception))
        with tempfile.TemporaryDirectory() as d:
            bad = os.path.join(d, "bad.model")
            with open(bad, "w") as f:
                f.write("not a tokenizer")
            with self.assertRaises(sd.Error) as e:
                sd.Tokenizer(bad)
            self.assertEqual(e.exception.code, "tokenizer")
            self.assertIn(bad, str(e.exception))


class DocsExampleTest(unittest.TestCase):
    def test_docs_example_runs(self):
        """Runs the first python block of docs/python.md with INDEX_PATH set."""
        with open(os.path.join(os.environ["SAM_DOCS_DIR"], "python.md")) as f:
            blocks = re.findall(r"```python\n(.*?)```", f.read(), re.S)
        self.assertTrue(blocks)
        namespace = {"__name__": "docs_example"}
        os.environ["INDEX_PATH"] = INDEX
        exec(compile(blocks[0], "docs/python.md", "exec"), namespace)
        self.assertGreater(namespace["steps"], 0)


class DistributionTest(unittest.TestCase):
    """The package as users see it: its version, help() signatures and
    docstrings, type stubs; installed with pip (SAM_REQUIRE_INSTALLED, the
    python_pip_install test), its distribution's metadata."""

    def test_version_and_help(self):
        cmake = pathlib.Path(__file__).resolve().parents[2] / "CMakeLists.txt"
        version = re.search(r"project\(sam_decoding VERSION ([0-9.]+)", cmake.read_text())
        self.assertEqual(sd.__version__, version.group(1))
        signature = sd.Session.__init__.__doc__
        for option in ("policy: object = 'sam-cal'", "draft_size: object = None",
                       "tree_width: object = None", "recycling_vocab_size: object = None",
                       "shape: object = None", "experimental: object = None"):
            self.assertIn(option, signature)
        # help() lists every option of the runtime's table with its default and meaning, and
        # the keyword arguments are that table's names in its order (docs/python.md).
        doc = sd.Session.__doc__
        for line in ("draft_size INT (default 40; [1, 4096]): the most nodes a draft holds",
                     "policy NAME (default sam-cal)", "tree_nodes INT (default 60",
                     "min_path_probability FLOAT (default 0.015", "experimental DICT"):
            self.assertIn(line, doc)
        table = re.findall(r"^  ([a-z_]+) [A-Z]+ \(default", doc, re.M)
        names = re.findall(r"([a-z_]+): object = ", signature)
        self.assertEqual(names, table[:len(names) - 2] + ["recycling_vocab_size", "experimental"])
        for documented in (sd.Session, sd.Session.propose, sd.Session.commit, sd.Index,
                           sd.Index.open, sd.DraftPool.propose, sd.propose_batch, sd.Draft):
            self.assertGreater(len(documented.__doc__ or ""), 40, documented)
        # Options keep their errors: an unknown name, a bad value.
        self.assertError("invalid-argument", "unknown option 'no_such'", sd.Session, no_such=1)
        self.assertError("invalid-argument", "draft_size", sd.Session, draft_size="x")

    def assertError(self, code, text, fn, *args, **kwargs):
        with self.assertRaises(sd.Error) as caught:
            fn(*args, **kwargs)
        self.assertEqual(caught.exception.code, code)
        self.assertIn(text, str(caught.exception))

    def test_stubs(self):
        import ast

        package = pathlib.Path(sd.__file__).parent
        self.assertTrue((package / "py.typed").exists())
        stub = ast.parse((package / "_native.pyi").read_text())
        declared = {node.name for node in stub.body
                    if isinstance(node, (ast.ClassDef, ast.FunctionDef))}
        for name in sd.__all__:
            if name[0].isupper() and not name.isupper() or name.islower():
                self.assertIn(name, declared | {"__version__"}, name)

    @unittest.skipUnless(os.environ.get("SAM_REQUIRE_INSTALLED"),
                         "the python_pip_install test checks the installed distribution")
    def test_installed_distribution(self):
        import sys
        from importlib import metadata

        self.assertTrue(sd.__file__.startswith(sys.prefix), sd.__file__)
        self.assertEqual(metadata.version("samdecoding"), sd.__version__)
        self.assertIn("numpy", metadata.requires("samdecoding"))
        plugins = metadata.entry_points(group="sglang.plugins")
        self.assertIn("samdecoding.sglang:register",
                      [ep.value for ep in plugins if ep.name == "samdecoding"])
        # samdecoding.Tokenizer's module is installed beside the extension, and found there.
        shim = os.path.join(os.path.dirname(sd.__file__), "libsam_tokenizer_shim.so")
        self.assertTrue(os.path.exists(shim), shim)
        self.assertIn("libsam_tokenizer_shim.so", [f.name for f in metadata.files("samdecoding")])


if __name__ == "__main__":
    unittest.main()
