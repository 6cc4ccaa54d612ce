"""SAM-Decoding draft trees in SGLang, through its NGRAM speculative algorithm.

SGLang's NGRAM algorithm (`--speculative-algorithm NGRAM`) verifies a draft
*tree* per request in one pass: its worker (NGRAMWorker) asks a cache object
for every decoding request's tree, as flat arrays

    drafts, mask = cache.batch_get(batch_tokens)
    # drafts: int64, batch_size * draft_token_num ids; row r's first id is the
    #         request's last verified token (the root), then the tree's nodes
    #         (parents before children)
    # mask:   bool, batch_size * draft_token_num * draft_token_num; within row
    #         r, mask[i, j] is True when node j is node i or an ancestor of it

and tells it the verified tokens afterwards (`cache.batch_put(...)`). This
module plugs SAM-Decoding in at that seam:

  SamNgramCache  the cache: every request's session drafts its tree
                 (the policy's tree or linear draft, at most
                 draft_token_num nodes, padded: see below).
  SamWorker      NGRAMWorker with a SamNgramCache that it hands each
                 request's id and whole token sequence, so that every request
                 keeps its own session (its dynamic automaton over prompt and
                 generation) from its first step to its last. The stock
                 worker hands over only the last max_match_window_size
                 tokens and no request ids; SamNgramCache then drafts from a
                 fresh session over that window (static index + window).
  install()      patches SGLang's NGRAM worker (and its cache class) with
                 these, in the process that creates the scheduler's workers:

    import samdecoding.sglang
    samdecoding.sglang.install(index="chat.sam", policy="sam-cal")
    # then start SGLang in this process, e.g. sglang.Engine(model_path=...,
    #   speculative_algorithm="NGRAM", speculative_num_draft_tokens=16)

  (SAM_INDEX, SAM_POLICY, SAM_TOKENIZER and SAM_OPTIONS, as for the vLLM
  adapter, configure caches that SGLang constructs itself.)

Padding: a tree smaller than draft_token_num is padded with leaves under the
root carrying token 0 (their mask row: themselves and the root). A padding
leaf is accepted only when the model's token after the root is 0 anyway, so
verification stays exact.

SGLang cannot be installed on the machine this package is developed on: this
adapter follows the NgramCache/NGRAMWorker interface of SGLang's sources
(python/sglang/srt/speculative/ngram_worker.py) and is tested by replaying
that call sequence (tests/python/test_engines.py).
"""
import json
import os

import numpy as np

from ._requests import RequestDrafter, SessionPool, as_ids, open_index
from ._requests import response_cache as _response_cache


def tree_layout(draft, draft_token_num, tokens_out, mask_out):
    """Writes `draft` (a Draft) into one request's row: tokens_out (int64,
    draft_token_num) and mask_out (bool, draft_token_num x draft_token_num).
    Returns the number of real nodes (the rest is padding)."""
    tokens, parents = draft.tokens, draft.parents
    n = min(len(tokens), draft_token_num)
    tokens_out[:n] = tokens[:n]
    tokens_out[n:] = 0
    mask_out[:] = False
    for i in range(n):
        mask_out[i, i] = True
        p = parents[i]
        if p >= 0:
            mask_out[i] |= mask_out[p]  # the parent's ancestors, itself
    for i in range(n, draft_token_num):  # padding leaves under the root
        mask_out[i, i] = True
        mask_out[i, 0] = True
    return n


class SamNgramCache:
    """A drop-in for SGLang's NgramCache drafting with SAM-Decoding sessions."""

    def __init__(self, draft_token_num, *, index=None, policy=None, tokenizer=None,
                 reuse_sessions=True, absent_steps_to_free=1, max_match_window_size=None,
                 response_cache=None, cache_tenant="", **options):
        if draft_token_num < 1:
            raise ValueError("SamNgramCache: draft_token_num must be at least 1")
        # The n-gram cache's own parameters (min/max_bfs_breadth, capacity,
        # branch_length, min_match_window_size) have no meaning here.
        for ngram_only in ("min_match_window_size", "min_bfs_breadth", "max_bfs_breadth",
                           "capacity", "branch_length"):
            options.pop(ngram_only, None)
        merged = json.loads(os.environ.get("SAM_OPTIONS", "{}"))
        merged.update(options)
        merged["policy"] = policy or os.environ.get("SAM_POLICY") or merged.get("policy") or "sam-cal"
        merged["draft_size"] = draft_token_num
        self.draft_token_num = draft_token_num
        self.index = open_index(index if index is not None else os.environ.get("SAM_INDEX"),
                                tokenizer or os.environ.get("SAM_TOKENIZER"))
        self._pool = SessionPool(self.index, merged, reuse=reuse_sessions,
                                 cache=_response_cache(response_cache), tenant=cache_tenant)
        self._requests = {}  # request id -> RequestDrafter
        self._absent = {}    # request id -> consecutive batches without it
        self._absent_steps_to_free = max(1, absent_steps_to_free)
        self._window_session = None

    @property
    def num_requests(self):
        return len(self._requests)

    # -- the NgramCache interface ------------------------------------------

    def batch_get(self, batch_tokens, req_ids=None):
        """Trees for a batch of token windows (the stock NGRAMWorker: no
        request state; each window drafts from a fresh session)."""
        if req_ids is not None:
            raise ValueError("SamNgramCache.batch_get: for request ids use batch_get_requests")
        drafts, mask = self._buffers(len(batch_tokens))
        if self._window_session is None:
            self._window_session = self._pool.get()
        session = self._window_session
        for r, window in enumerate(batch_tokens):
            window = as_ids(window)
            session.reset()
            session.prefill(window[:-1])
            tree_layout(session.propose(int(window[-1])), self.draft_token_num, drafts[r],
                        mask[r])
        return drafts.reshape(-1), mask.reshape(-1)

    def batch_put(self, batch_tokens):
        """Nothing to do: sessions take the verified tokens at the next
        batch_get_requests (they are in the requests' token lists then)."""

    def synchronize(self):
        pass

    def reset(self):
        for drafter in self._requests.values():
            self._pool.put(drafter.session)
        self._requests.clear()
        self._absent.clear()

    # -- per-request drafting (SamWorker) -----------------------------------

    def batch_get_requests(self, req_ids, prompts, outputs):
        """Trees for the decoding requests: req_ids[r] names request r,
        prompts[r] its prompt ids (origin_input_ids), outputs[r] the ids
        generated so far (output_ids, the last one not yet drafted from).
        A request seen for the first time gets a session prefilled with its
        tokens; one missing from absent_steps_to_free batches in a row is
        freed."""
        drafts, mask = self._buffers(len(req_ids))
        for r, rid in enumerate(req_ids):
            prompt, output = prompts[r], outputs[r]
            drafter = self._requests.get(rid)
            if drafter is None:
                context = list(prompt) + list(output)
                drafter = RequestDrafter(self._pool.get(), context, keep_text=False)
                self._requests[rid] = drafter
                draft = drafter.propose(context)
            else:
                draft = drafter.propose_tail(*_tail(prompt, output, drafter.taken))
            tree_layout(draft, self.draft_token_num, drafts[r], mask[r])
        present = set(req_ids)
        for rid in list(self._requests):
            if rid in present:
                self._absent.pop(rid, None)
                continue
            self._absent[rid] = self._absent.get(rid, 0) + 1
            if self._absent[rid] >= self._absent_steps_to_free:
                self.erase(rid)
        return drafts.reshape(-1), mask.reshape(-1)

    def erase(self, rid):
        """Frees a finished request's session now."""
        drafter = self._requests.pop(rid, None)
        self._absent.pop(rid, None)
        if drafter is not None:
            self._pool.put(drafter.session)

    def _buffers(self, batch_size):
        d = self.draft_token_num
        return (np.zeros((batch_size, d), dtype=np.int64),
                np.zeros((batch_size, d, d), dtype=bool))


def _tail(prompt, output, taken):
    """(pending, start): the ids after the first `taken` of prompt + output,
    but the last, and the last, without building prompt + output."""
    p = len(prompt)
    n = p + len(output)
    if n < taken + 1:
        raise ValueError("a request's tokens shrank from %d to %d" % (taken + 1, n))
    start = output[-1] if output else prompt[-1]
    if taken >= p:
        pending = output[taken - p:n - 1 - p]
    else:
        pending = list(prompt[taken:]) + list(output[:max(0, n - 1 - p)])
    return pending, start


def worker_class(base=None, **cache_options):
    """SGLang's NGRAMWorker with a SamNgramCache that receives each decoding
    request's id and token lists (`base`: the NGRAMWorker class; imported
    from SGLang when None)."""
    if base is None:
        from sglang.srt.speculative.ngram_worker import NGRAMWorker as base  # noqa: N813

    class SamWorker(base):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            if not isinstance(self.ngram_cache, SamNgramCache):
                self.ngram_cache = SamNgramCache(self.draft_token_num, **cache_options)

        def _prepare_draft_tokens(self, batch):
            self.ngram_cache.synchronize()
            reqs = batch.reqs
            return self.ngram_cache.batch_get_requests(
                [req.rid for req in reqs], [req.origin_input_ids for req in reqs],
                [req.output_ids for req in reqs])

        def _update_ngram_cache(self, batch):
            pass  # the next _prepare_draft_tokens hands the verified tokens over

    return SamWorker


def install(**cache_options):
    """Makes SGLang's NGRAM algorithm draft with SAM-Decoding in this process:
    replaces sglang.srt.speculative.ngram_worker's NGRAMWorker with
    worker_class(**cache_options) and its NgramCache with SamNgramCache.
    Returns the worker class."""
    from sglang.srt.speculative import ngram_worker

    worker = worker_class(ngram_worker.NGRAMWorker, **cache_options)
    ngram_worker.NGRAMWorker = worker
    ngram_worker.NgramCache = lambda draft_token_num, **kw: SamNgramCache(
        draft_token_num, **dict(kw, **cache_options))
    return worker
