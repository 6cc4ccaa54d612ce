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
            for prepare in (False, True):
                index = sd.Index.open(INDEX, read=read, prepare=prepare)
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
        # sam-cal offers each shard's tree (not the summed counts): left out.
        for policy in ("sam", "static", "dynamic", "sam-tree", "sam-rec"):
            with self.subTest(policy=policy):
                session = new_session(policy)
                session.attach(shards)
                replay(self, session, policy)
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
        self.assertFalse(sd.Index.open(INDEX, prepare=False).prepared)
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


if __name__ == "__main__":
    unittest.main()
