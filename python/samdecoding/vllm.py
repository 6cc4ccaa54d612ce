"""SAM-Decoding drafts in vLLM, through its `custom_class` speculative method.

vLLM (V1 engine) loads a user proposer class named by the speculative
config's `model` when `method` is "custom_class":

    from vllm import LLM
    llm = LLM(model="meta-llama/Llama-2-7b-chat-hf",
              speculative_config={"method": "custom_class",
                                  "model": "samdecoding.vllm.SamProposer",
                                  "num_speculative_tokens": 8})

with the index and policy given by environment variables (vLLM's worker
processes inherit them):

    SAM_INDEX=chat.sam SAM_POLICY=sam-cal python serve.py

    SAM_INDEX      the index file (required unless a subclass sets index_path)
    SAM_POLICY     a session policy (samdecoding.POLICIES; default "sam-cal")
    SAM_TOKENIZER  optional: the model's tokenizer (.model, tokenizer.json or
                   its folder), checked against the index's tokenizer
                   fingerprint at start-up
    SAM_OPTIONS    optional: JSON object of further Session options,
                   e.g. '{"draft_size": 24}'
    SAM_CACHE_MIB  optional: a cross-request response cache of this many MiB
                   (compiling its tenants on its own thread); every finished
                   request's output drafts for later ones
    SAM_THREADS    optional: threads that draft a step's rows (default: up to
                   4, never more than the machine's cores)

or by a subclass (class attributes index_path, policy, tokenizer_path,
session_options, response_cache, cache_tenant, reuse_sessions, threads):

    class ChatProposer(SamProposer):
        index_path = "chat.sam"
        policy = "sam-cal"

and speculative_config={"method": "custom_class", "model": "mymodule.ChatProposer", ...}.

The interface, as merged in vLLM (vllm-project/vllm):
  - vllm/v1/spec_decode/custom_class_proposer.py (commit f7490e78):
    create_custom_proposer(vllm_config) imports speculative_config.model and
    constructs user_class(vllm_config), nothing else; the object needs a
    callable propose (load_model is optional: vLLM calls it if present).
  - vllm/v1/worker/gpu_model_runner.py (commit 000fc94b), sample_tokens and
    propose_draft_token_ids: after bookkeeping has written the step's
    sampled ids into the InputBatch, and only when the batch fits the
    drafter (otherwise the step's drafts are zeros and propose is not
    called), it calls
        propose(sampled_token_ids, input_batch.num_tokens_no_spec,
                input_batch.token_ids_cpu, slot_mappings=...)
    sampled_token_ids: one list per row of the batch (empty for a row still
    in chunked prefill, whose whole prompt is already in token_ids_cpu);
    num_tokens_no_spec and token_ids_cpu: the InputBatch's whole numpy
    buffers (max_num_reqs rows, max_model_len columns; only the first
    len(sampled_token_ids) rows are live, and past num_tokens_no_spec[i] a
    row may hold an earlier request's ids). It returns one list of draft
    ids per row.
  - vllm/v1/worker/gpu_input_batch.py (commit a9e3b0a0): rows move. A new
    request takes the lowest removed row first, condense() moves the last
    rows into the remaining holes, swap_states(i1, i2) swaps two rows.
    The proposer is never told which request a row holds.

What propose does: one session per request, created when the request first
has a sampled id (prefilled with its tokens) and freed when it leaves the
batch. A request is recognised by its tokens: a row whose tokens continue
the text a session has taken in is that session's request (moved or not).
Each step the tokens verified since the last step are committed, then all
rows draft in one batched call (samdecoding.DraftPool, the GIL released).
vLLM verifies one sequence per request: sessions draft with shape "chain"
(unless SAM_OPTIONS or session_options name a shape), and each row gets the
root path of the policy's whole tree with the most expected accepted
tokens, at most num_speculative_tokens ids and never past max_model_len
(Session.propose's max_nodes). With shape "tree" a row gets the first-child
chain of a tree of at most that many nodes.

vLLM cannot be installed where this package is developed: the adapter
follows those files and is tested by a driver that replays their call
sequence (tests/python/test_engines.py). Each tensor-parallel rank of the
last pipeline stage builds its own proposer; they draft the same ids.
"""
import json
import logging
import os

import numpy as np

from ._native import DraftPool, Error
from ._requests import (AdapterMetrics, RequestDrafter, SessionPool, chain_of, chain_options,
                        drafting_threads, open_index)
from ._requests import response_cache as _response_cache

logger = logging.getLogger(__name__)


class SamProposer:
    """A vLLM custom proposer drafting with SAM-Decoding sessions.

    Constructed by vLLM as SamProposer(vllm_config); configured by the
    environment (SAM_INDEX, ...) or a subclass's attributes."""

    index_path = None
    policy = None
    tokenizer_path = None
    session_options = None
    response_cache = None  # a ResponseCache, or a bound in MiB
    cache_tenant = ""
    reuse_sessions = True  # False: a fresh session (and sam-cal prior) per request
    threads = None

    def __init__(self, vllm_config):
        spec = getattr(vllm_config, "speculative_config", None)
        k = getattr(spec, "num_speculative_tokens", None)
        if not k or k < 1:
            raise ValueError("SamProposer: speculative_config.num_speculative_tokens must be "
                             "at least 1")
        self.num_speculative_tokens = int(k)
        model_config = getattr(vllm_config, "model_config", None)
        self.max_model_len = getattr(model_config, "max_model_len", None)
        options = dict(self.session_options or {})
        options.update(json.loads(os.environ.get("SAM_OPTIONS", "{}")))
        options["policy"] = (self.policy or os.environ.get("SAM_POLICY") or
                             options.get("policy") or "sam-cal")
        # vLLM verifies one sequence per request: each step's chain is cut
        # from the policy's whole tree (at most K ids a row, see propose).
        options = chain_options(options)
        index = self.index_path or os.environ.get("SAM_INDEX")
        self.index = open_index(index, self.tokenizer_path or os.environ.get("SAM_TOKENIZER"))
        self._pool = SessionPool(self.index, options, reuse=self.reuse_sessions,
                                 cache=_response_cache(self.response_cache),
                                 tenant=self.cache_tenant)
        threads = drafting_threads(self.threads, "SamProposer")
        self._draft_pool = DraftPool(threads)
        self._by_row = {}  # row -> RequestDrafter
        self._serial = 0
        self._metrics = AdapterMetrics()
        logger.info("SAM-Decoding drafter active (vLLM custom_class): index %s (%d tokens), "
                    "policy %s, %d speculative tokens, %d drafting threads",
                    index if isinstance(index, str) else "given", self.index.num_tokens,
                    options["policy"], self.num_speculative_tokens, threads)

    def load_model(self, *args, **kwargs):
        """No model to load (vLLM calls this when the proposer has it)."""

    @property
    def num_requests(self):
        """Requests with a live session."""
        return len(self._by_row)

    def metrics(self):
        """Drafted and accepted ids, steps and MAT per draft source, per
        live request (keyed by a serial number) and in total (a dict; see
        samdecoding._requests.AdapterMetrics)."""
        return self._metrics.as_dict()

    def propose(self, sampled_token_ids, num_tokens_no_spec, token_ids_cpu, slot_mappings=None):
        """One list of draft ids per row of the batch.

        sampled_token_ids[i]  the ids sampled for row i this step (empty: the
                              row is not decoding, e.g. in chunked prefill:
                              no draft)
        num_tokens_no_spec    row i's token count (the InputBatch buffer)
        token_ids_cpu         the InputBatch's (max_num_reqs, max_model_len)
                              ids: a CPU torch tensor or a numpy array
        slot_mappings         unused (KV-cache slots)
        """
        buffer = token_ids_cpu.numpy() if hasattr(token_ids_cpu, "numpy") else token_ids_cpu
        if getattr(buffer, "ndim", 0) != 2:
            raise ValueError("SamProposer: token_ids_cpu must be a 2-D (rows, max_len) array")
        counts = np.asarray(num_tokens_no_spec)
        num_rows = len(sampled_token_ids)
        drafts = [[] for _ in range(num_rows)]
        previous, claimed = self._by_row, {}
        sessions, starts, limits, drafting = [], [], [], []
        for i, sampled in enumerate(sampled_token_ids):
            context = buffer[i, :int(counts[i])]
            drafter = _find(previous, i, context, len(context) - len(sampled))
            if not len(sampled):
                if drafter is not None:
                    claimed[i] = drafter
                continue
            if drafter is None:
                self._serial += 1
                drafter = RequestDrafter(self._pool.get(), context, serial=self._serial,
                                         metrics=self._metrics)
            claimed[i] = drafter
            starts.append(drafter.advance(context))
            sessions.append(drafter.session)
            # Draft ids for this row: K, and no more than the row has room
            # for before max_model_len.
            limit = self.num_speculative_tokens
            if self.max_model_len is not None:
                limit = min(limit, self.max_model_len - len(context))
            limits.append(max(limit, 0))
            drafting.append(i)
        for drafter in previous.values():  # requests that left the batch
            self._metrics.finished(drafter)
            self._pool.put(drafter.session)
        self._by_row = claimed
        if sessions:
            proposals = self._draft_pool.propose(sessions, starts, [k + 1 for k in limits])
            for i, limit, proposal in zip(drafting, limits, proposals):
                if isinstance(proposal, Error):
                    raise proposal
                chain = chain_of(proposal, limit)
                self._metrics.offer(claimed[i], proposal.source, chain)
                drafts[i] = chain
        return drafts


def _find(drafters, row, context, before):
    """Removes and returns the drafter of the request whose tokens are
    `context` (None for a new request): a drafter whose text the context
    continues, preferring one whose last context had `before` ids (the row's
    count before this step's sampled ids were appended: true of the request
    itself unless propose was skipped), then the one that drafted for this
    row, then the longest text. Only requests with the same tokens are
    ambiguous, and their sessions hold the same text. The session that
    drafted for this row at the last step, with the expected count, is
    checked on its first and last 64 ids only (the common case, in O(1))."""
    own = drafters.get(row)
    if own is not None and own.taken + 1 == before and own.likely_continues(context):
        return drafters.pop(row)
    best_key, best = None, None
    for key, drafter in drafters.items():
        # The cheap check first: other requests differ in their last ids.
        if not drafter.likely_continues(context) or not drafter.continues(context):
            continue
        rank = (drafter.taken + 1 == before, key == row, drafter.taken)
        if best is None or rank > best:
            best_key, best = key, rank
    return None if best is None else drafters.pop(best_key)
