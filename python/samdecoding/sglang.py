"""SAM-Decoding draft trees in SGLang: the speculative algorithm "SAM".

Installed with this package, an SGLang plugin (entry-point group
`sglang.plugins`, name `samdecoding`) registers the algorithm SAM. Start
SGLang with it, the index and policy given by environment variables (the
scheduler processes inherit them):

    SGLANG_PLUGINS=samdecoding SAM_INDEX=chat.sam SAM_POLICY=sam-cal \\
        python -m sglang.launch_server --model-path ... \\
        --speculative-algorithm SAM --speculative-num-draft-tokens 16

    SAM_INDEX, SAM_POLICY, SAM_TOKENIZER, SAM_OPTIONS, SAM_CACHE_MIB,
    SAM_THREADS as for samdecoding.vllm (docs/embedding.md)

SAM verifies like NGRAM: the algorithm's is_ngram() is true, so SGLang's
tree verification (NgramVerifyInput) checks one draft tree of exactly
--speculative-num-draft-tokens nodes per request, root first.

How it plugs in, as merged in SGLang (sgl-project/sglang):
  - python/sglang/srt/plugins/__init__.py (commit 32c764af): load_plugins()
    runs, in every SGLang process (the scheduler processes, which
    sglang/srt/entrypoints/engine.py starts with the "spawn" method, call it
    in run_scheduler_process), each `sglang.plugins` entry point of the
    installed distributions that SGLANG_PLUGINS allows, with no arguments:
    here register().
  - python/sglang/srt/speculative/spec_registry.py (commit 0057abea):
    SpeculativeAlgorithm.register(name, supports_overlap=..., spec_class=...)
    decorates a factory(server_args) returning the worker class; spec_class,
    a CustomSpecAlgo subclass, answers the is_*() questions.
  - python/sglang/srt/speculative/ngram_worker.py (NGRAMWorker, a
    BaseSpecWorker): _prepare_draft_tokens(batch) returns the flat int64
    drafts (batch size x draft_token_num, each row's root first) and the
    ancestor mask (batch size x draft_token_num^2; mask[i, j] true when node
    j is node i or an ancestor of it) from self.ngram_corpus
    (cpp_ngram/ngram_corpus.py, commit 574f6d7c: batch_get(req_ids,
    batch_tokens, total_lens), batch_put, synchronize, reset,
    erase_match_state(req_ids)). In overlap mode the last round's accepted
    ids (batch.spec_info.accept_tokens, accept_lens, row stride
    batch.spec_info.draft_token_num) are not yet in req.output_ids and are
    spliced in. After verification the worker calls _update_ngram_corpus
    (batch_put) and erase_match_state for the requests that left the batch.

SamWorker subclasses that worker: its _prepare_draft_tokens reads and
splices the previous round's ids exactly as the stock one does (and keeps
the same staging attributes for the stock _update_ngram_corpus), and hands
SamCorpus every request's id and whole token list (prompt, output ids,
spliced ids), so that each request keeps one session (its dynamic automaton
over prompt and generation) from its first step to its last;
erase_match_state frees it. The step's requests draft in one DraftPool
call, the GIL released. Supported: SGLang versions with the plugin
framework, spec_registry.py and NgramCorpus.erase_match_state (SGLang's
main branch at the commits above); the NgramCache-era worker (before
NgramCorpus) is not supported.

Padding: a tree smaller than draft_token_num is padded with leaves under the
root carrying token 0 (their mask row: themselves and the root). A padding
leaf is accepted only when the model's token after the root is 0 anyway, so
verification stays exact.
"""
import json
import logging
import os
import sys

import numpy as np

from ._native import DraftPool, Error
from ._requests import AdapterMetrics, RequestDrafter, SessionPool, drafting_threads, open_index
from ._requests import response_cache as _response_cache

logger = logging.getLogger(__name__)

ALGORITHM = "SAM"


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


class SamCorpus:
    """Stands where NGRAMWorker keeps its NgramCorpus (worker.ngram_corpus):
    one session per request, drafting trees of draft_token_num nodes."""

    def __init__(self, draft_token_num, *, index=None, policy=None, tokenizer=None,
                 reuse_sessions=True, response_cache=None, cache_tenant="", threads=None,
                 **options):
        if draft_token_num < 1:
            raise ValueError("SamCorpus: draft_token_num must be at least 1")
        merged = json.loads(os.environ.get("SAM_OPTIONS", "{}"))
        merged.update(options)
        merged["policy"] = policy or os.environ.get("SAM_POLICY") or merged.get("policy") or "sam-cal"
        merged["draft_size"] = draft_token_num
        self.draft_token_num = draft_token_num
        path = index if index is not None else os.environ.get("SAM_INDEX")
        self.index = open_index(path, tokenizer or os.environ.get("SAM_TOKENIZER"))
        self._pool = SessionPool(self.index, merged, reuse=reuse_sessions,
                                 cache=_response_cache(response_cache), tenant=cache_tenant)
        self._requests = {}  # request id -> RequestDrafter
        self._metrics = AdapterMetrics()
        self._draft_pool = DraftPool(drafting_threads(threads, "SamCorpus"))
        logger.info("SAM-Decoding drafter active (SGLang algorithm %s): index %s (%d tokens), "
                    "policy %s, %d draft tokens", ALGORITHM,
                    path if isinstance(path, str) else "given", self.index.num_tokens,
                    merged["policy"], draft_token_num)

    @property
    def num_requests(self):
        """Requests with a live session."""
        return len(self._requests)

    def metrics(self):
        """Tree nodes drafted and accepted, steps and MAT per draft source,
        per live request (by request id) and in total (a dict; see
        samdecoding._requests.AdapterMetrics)."""
        return self._metrics.as_dict()

    def draft(self, req_ids, prompts, outputs, spliced):
        """Trees for the decoding requests: req_ids[r] names request r, its
        tokens are prompts[r] + outputs[r] + spliced[r] (origin_input_ids,
        output_ids, and in overlap mode the previous round's accepted ids
        not yet in output_ids), the last one not yet drafted from. A request
        seen for the first time gets a session prefilled with its tokens.
        Returns (drafts, mask), flat, as NgramCorpus.batch_get does."""
        d = self.draft_token_num
        drafts = np.zeros((len(req_ids), d), dtype=np.int64)
        mask = np.zeros((len(req_ids), d, d), dtype=bool)
        drafters, starts = [], []
        for r, rid in enumerate(req_ids):
            drafter = self._requests.get(rid)
            if drafter is None:
                context = list(prompts[r]) + list(outputs[r]) + list(spliced[r])
                drafter = RequestDrafter(self._pool.get(), context, keep_text=False,
                                         serial=rid, metrics=self._metrics)
                self._requests[rid] = drafter
                start = drafter.advance(context)
            else:
                start = drafter.advance_tail(*_tail((prompts[r], outputs[r], spliced[r]),
                                                    drafter.taken))
            drafters.append(drafter)
            starts.append(start)
        # Every request drafts in one call, the GIL released.
        proposals = self._draft_pool.propose([dr.session for dr in drafters], starts) \
            if drafters else []
        for r, (drafter, draft) in enumerate(zip(drafters, proposals)):
            if isinstance(draft, Error):
                raise draft
            n = tree_layout(draft, d, drafts[r], mask[r])
            self._metrics.offer(drafter, draft.source, draft.tokens[1:n].tolist(),
                                draft.parents[:n].tolist())
        return drafts.reshape(-1), mask.reshape(-1)

    # -- what NGRAMWorker calls on its corpus -------------------------------

    def synchronize(self):
        """Nothing pending (NgramCorpus inserts on a thread)."""

    def batch_put(self, batch_tokens):
        """Nothing to do: sessions take the verified ids at the next draft."""

    def erase_match_state(self, req_ids):
        """Frees the sessions of requests that left the batch."""
        for rid in req_ids:
            drafter = self._requests.pop(rid, None)
            if drafter is not None:
                self._metrics.finished(drafter)
                self._pool.put(drafter.session)

    def reset(self):
        self.erase_match_state(list(self._requests))

    def batch_get(self, req_ids, batch_tokens, total_lens):
        raise NotImplementedError("SamCorpus drafts from whole token lists: SamWorker calls "
                                  "draft(), not the window lookup batch_get")

    def load_external_corpus_named(self, corpus_id, token_chunks):
        raise ValueError("speculative algorithm %s drafts from its SAM index (SAM_INDEX): "
                         "--speculative-ngram-external-corpus-path does not apply" % ALGORITHM)


def _tail(parts, taken):
    """(pending, start): the ids after the first `taken` of the
    concatenation of `parts`, but the last, and the last, without building
    the concatenation."""
    n = sum(len(p) for p in parts)
    if n < taken + 1:
        raise ValueError("a request's tokens shrank from %d to %d" % (taken + 1, n))
    pending, offset = [], 0
    for part in parts:
        lo, hi = max(taken - offset, 0), min(len(part), n - 1 - offset)
        if lo < hi:
            pending.extend(part[lo:hi])
        offset += len(part)
    last = next(p for p in reversed(parts) if len(p))
    return pending, last[-1]


def worker_class(base=None, **corpus_options):
    """SGLang's NGRAMWorker drafting with a SamCorpus (`base`: the
    NGRAMWorker class; imported from SGLang when None)."""
    if base is None:
        from sglang.srt.speculative.ngram_worker import NGRAMWorker as base  # noqa: N813

    class SamWorker(base):
        def __init__(self, server_args, *args, **kwargs):
            # The stock constructor builds self.ngram_corpus from its
            # module's NgramCorpus: a SamCorpus is built in its place.
            module = sys.modules[base.__module__]
            stock = getattr(module, "NgramCorpus", None)
            module.NgramCorpus = lambda **kw: SamCorpus(kw["draft_token_num"], **corpus_options)
            try:
                super().__init__(server_args, *args, **kwargs)
            finally:
                if stock is None:
                    del module.NgramCorpus
                else:
                    module.NgramCorpus = stock
            if not isinstance(self.ngram_corpus, SamCorpus):
                self.ngram_corpus = SamCorpus(self.draft_token_num, **corpus_options)

        def _prepare_draft_tokens(self, batch):
            # The previous round's accepted ids, read and staged as the
            # stock worker does (its _update_ngram_corpus reads the staging).
            stride = batch.spec_info.draft_token_num
            self._prev_stride = stride
            prev_ids, prev_lens = batch.spec_info.accept_tokens, batch.spec_info.accept_lens
            if not prev_ids.is_cpu:
                prev_ids, prev_lens = prev_ids.cpu(), prev_lens.cpu()
            self.prev_token_ids = prev_ids.tolist()
            self.prev_accept_lens = prev_lens.tolist()
            self.ngram_corpus.synchronize()
            # Overlap mode processes results one round behind: the last
            # round's ids are not in output_ids yet (grammar batches and sync
            # mode process them first).
            use_prev = self.enable_overlap and not batch.has_grammar
            reqs = batch.reqs
            spliced = [self.prev_token_ids[i * stride:i * stride + self.prev_accept_lens[i]]
                       if use_prev else [] for i in range(len(reqs))]
            return self.ngram_corpus.draft([req.rid for req in reqs],
                                           [req.origin_input_ids for req in reqs],
                                           [req.output_ids for req in reqs], spliced)

    return SamWorker


def register():
    """The `sglang.plugins` entry point: registers the speculative algorithm
    SAM (once per process)."""
    from sglang.srt.speculative.spec_info import SpeculativeAlgorithm
    from sglang.srt.speculative.spec_registry import CustomSpecAlgo, get_spec

    if get_spec(ALGORITHM) is not None:
        return

    class SamSpecAlgo(CustomSpecAlgo):
        """Verified like NGRAM: a tree per request, no draft model."""

        def is_ngram(self):
            return True

        def has_draft_kv(self):
            return False

        def handle_server_args(self, server_args):
            # The settings SGLang's server_args gives NGRAM (a draft budget
            # when none is given; the tree width as EAGLE's top-k; no mixed
            # chunked prefill), which the NGRAM worker and verifier read.
            if getattr(server_args, "speculative_num_draft_tokens", None) is None:
                server_args.speculative_num_draft_tokens = 16
            if getattr(server_args, "speculative_eagle_topk", None) is None:
                server_args.speculative_eagle_topk = getattr(
                    server_args, "speculative_ngram_max_bfs_breadth", None)
            server_args.enable_mixed_chunk = False

    SpeculativeAlgorithm.register(ALGORITHM, supports_overlap=True, spec_class=SamSpecAlgo)(
        lambda server_args: worker_class())
    logger.info("samdecoding registered the speculative algorithm %s", ALGORITHM)


__all__ = ["ALGORITHM", "SamCorpus", "register", "tree_layout", "worker_class"]
