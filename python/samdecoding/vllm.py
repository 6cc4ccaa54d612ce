"""SAM-Decoding drafts in vLLM, through its custom proposer interface.

vLLM (V1 engine) loads a user class named by the speculative config's
`custom_proposer_backend`, constructs it with the VllmConfig and calls its
`propose` once per engine step for the whole running batch:

    from vllm import LLM
    llm = LLM(model="meta-llama/Llama-2-7b-chat-hf",
              speculative_config={"num_speculative_tokens": 8,
                                  "custom_proposer_backend": "samdecoding.vllm.SamProposer"})

with the index and policy given by environment variables (vLLM's worker
processes inherit them):

    SAM_INDEX=chat.sam SAM_POLICY=sam python serve.py

    SAM_INDEX      the index file (required unless a subclass sets index_path)
    SAM_POLICY     a session policy (samdecoding.POLICIES; default "sam-cal")
    SAM_TOKENIZER  optional: the model's SentencePiece file, checked against
                   the index's tokenizer fingerprint at start-up
    SAM_OPTIONS    optional: JSON object of further Session options,
                   e.g. '{"draft_size": 24}'
    SAM_CACHE_MIB  optional: a cross-request response cache of this many MiB
                   (compiling its tenants on its own thread); every finished
                   request's output drafts for later ones. Or pass
                   response_cache= (a ResponseCache, or MiB) and cache_tenant=.

or by a subclass (class MyProposer(SamProposer): index_path = "chat.sam").

What `propose` does: for each row of the batch it keeps one session per
request, created on first sight (prefilled with the request's tokens) and
freed when the request leaves the batch; each step it commits the tokens
verified since the last step and returns the session's draft as a list of ids:
the policy's draft (its length is the policy's choice: a long match drafts
long, no match drafts nothing), as its first-child chain (vLLM verifies
chains), at most num_speculative_tokens ids. vLLM's custom proposer interface
does not name requests, so a request is recognised by its tokens: a row whose
tokens continue the text its session has taken in is that request (rows move
when vLLM condenses its batch; a moved request keeps its session). If an
engine passes `req_ids` (a list of request ids, one per row), requests are
keyed by id instead.

vLLM cannot be installed on the machine this package is developed on: this
adapter is written against vLLM's documented interface (the
CustomClassProposer docstring of vllm/v1/spec_decode/custom_class_proposer.py)
and tested by replaying that call sequence (tests/python/test_engines.py).
"""
import json
import os

from ._requests import RequestDrafter, SessionPool, first_child_chain, open_index
from ._requests import response_cache as _response_cache


class SamProposer:
    """A vLLM custom proposer drafting with SAM-Decoding sessions."""

    index_path = None
    policy = None
    tokenizer_path = None
    session_options = None

    def __init__(self, vllm_config=None, *, index=None, policy=None, num_speculative_tokens=None,
                 tokenizer=None, reuse_sessions=True, response_cache=None, cache_tenant="",
                 **options):
        spec = getattr(vllm_config, "speculative_config", None)
        if num_speculative_tokens is None:
            num_speculative_tokens = getattr(spec, "num_speculative_tokens", None)
        if not num_speculative_tokens or num_speculative_tokens < 1:
            raise ValueError("SamProposer: num_speculative_tokens must be at least 1 "
                             "(speculative_config['num_speculative_tokens'])")
        self.num_speculative_tokens = int(num_speculative_tokens)
        env_options = json.loads(os.environ.get("SAM_OPTIONS", "{}"))
        merged = dict(self.session_options or {})
        merged.update(env_options)
        merged.update(options)
        merged["policy"] = (policy or self.policy or os.environ.get("SAM_POLICY") or
                            merged.get("policy") or "sam-cal")
        # The draft may hold every token vLLM verifies (and the start token).
        merged.setdefault("draft_size", self.num_speculative_tokens + 1)
        index = index if index is not None else (self.index_path or os.environ.get("SAM_INDEX"))
        tokenizer = tokenizer or self.tokenizer_path or os.environ.get("SAM_TOKENIZER")
        self.index = open_index(index, tokenizer)
        self._pool = SessionPool(self.index, merged, reuse=reuse_sessions,
                                 cache=_response_cache(response_cache), tenant=cache_tenant)
        self._by_key = {}  # row (or request id) -> RequestDrafter

    def load_model(self, *args, **kwargs):
        """No model to load (vLLM calls this on every proposer)."""

    @property
    def num_requests(self):
        """Requests with a live session."""
        return len(self._by_key)

    def propose(self, sampled_token_ids, num_tokens_no_spec, token_ids_cpu, slot_mappings=None,
                req_ids=None):
        """One list of draft ids per request of the batch (row order).

        sampled_token_ids[i]  the ids sampled for row i this step (empty: the
                              row is not decoding, e.g. a partial prefill:
                              no draft)
        num_tokens_no_spec    row i's token count (array, or one int for all)
        token_ids_cpu         (rows, max_len) ids: a CPU torch tensor or numpy
        """
        rows = _as_rows(token_ids_cpu)
        counts = num_tokens_no_spec
        drafts = []
        previous, claimed = self._by_key, {}
        for i, sampled in enumerate(sampled_token_ids):
            key = req_ids[i] if req_ids is not None else i
            n = int(counts if _is_scalar(counts) else counts[i])
            context = rows[i, :n]
            drafter = previous.pop(key, None)
            if req_ids is None and drafter is not None and not drafter.continues(context):
                previous[key] = drafter  # another request now holds this row
                drafter = None
            if not len(sampled):
                if drafter is not None:
                    claimed[key] = drafter
                drafts.append([])
                continue
            if drafter is None and req_ids is None:
                drafter = _take_continued(previous, context)
            if drafter is None:
                drafter = RequestDrafter(self._pool.get(), context, keep_text=req_ids is None)
            claimed[key] = drafter
            draft = drafter.propose(context)
            drafts.append(first_child_chain(draft, self.num_speculative_tokens))
        for drafter in previous.values():  # requests that left the batch
            self._pool.put(drafter.session)
        self._by_key = claimed
        return drafts


def _as_rows(token_ids):
    if hasattr(token_ids, "numpy"):  # a CPU torch tensor: a view, no copy
        token_ids = token_ids.numpy()
    rows = token_ids
    if getattr(rows, "ndim", 0) != 2:
        raise ValueError("SamProposer: token_ids_cpu must be a 2-D (rows, max_len) array")
    return rows


def _is_scalar(value):
    return isinstance(value, int) or getattr(value, "ndim", 1) == 0


def _take_continued(drafters, context):
    """Removes and returns the drafter (of a request that moved rows) whose
    text `context` continues; the longest such text wins; None if none."""
    best_key, best = None, None
    for key, drafter in drafters.items():
        if drafter.continues(context) and (best is None or drafter.taken > best.taken):
            best_key, best = key, drafter
    if best is not None:
        del drafters[best_key]
    return best
