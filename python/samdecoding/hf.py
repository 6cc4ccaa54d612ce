"""SAM-Decoding drafts in Hugging Face transformers' generate().

transformers' assisted generation asks a *candidate generator* for draft
tokens at every step. As merged in huggingface/transformers:
src/transformers/generation/candidate_generator.py (commit 02dba319)
declares CandidateGenerator.get_candidates(input_ids) and
update_candidate_strategy(input_ids, scores, num_matches) (newer releases
add **kwargs to get_candidates); src/transformers/generation/utils.py
(commit 1097d4b3), _assisted_decoding, runs

    input_ids = the prompt                      # the first call: no id generated yet
    loop:
        candidate_ids, candidate_logits = generator.get_candidates(input_ids)
        # candidate_ids: input_ids followed by the draft ids; logits: None here
        ... one forward pass over candidate_ids; n_matches (a 0-d tensor):
            the draft ids that equal the model's choices ...
        input_ids = cat(input_ids, the matched ids and the model's next id)
        generator.update_candidate_strategy(input_ids, scores, n_matches)

SamCandidateGenerator implements that interface (it subclasses transformers'
CandidateGenerator when transformers is installed) with one session for the
sequence being generated: prefilled with the prompt at the first call, then
fed the verified tokens, so its drafts are the session's: with shape "chain"
(the default here) the root path of the policy's tree with the most expected
accepted tokens, at most num_output_tokens ids.

generate() runs model.generate() with it. transformers has no public argument
for a custom candidate generator; generate() enters assisted generation the
way prompt lookup decoding does (prompt_lookup_num_tokens) and hands
transformers this generator instead of the prompt-lookup one, by overriding
the model's _get_candidate_generator for the duration of the call:

    import samdecoding.hf
    out = samdecoding.hf.generate(model, input_ids, index="chat.sam", policy="sam-cal",
                                  max_new_tokens=256)

Assisted generation in transformers handles one sequence at a time (batch
size 1); greedy and sampling both stay exact (the drafts are deterministic,
so transformers' acceptance rule for drafts without logits applies).

transformers cannot be installed on the machine this package is developed
on: this adapter follows the CandidateGenerator interface and the assisted
decoding loop of transformers' sources, and is tested by replaying that call
sequence with torch tensors (tests/python/test_engines.py).
"""
import logging

from ._requests import (AdapterMetrics, RequestDrafter, SessionPool, chain_of, chain_options,
                        open_index)
from ._requests import response_cache as _response_cache

logger = logging.getLogger(__name__)

try:  # the base class when transformers is there; a plain object otherwise
    from transformers.generation.candidate_generator import CandidateGenerator as _Base
except Exception:  # noqa: BLE001 (any import problem: work without it)
    _Base = object


class SamCandidateGenerator(_Base):
    """A transformers candidate generator drafting with a SAM-Decoding session."""

    def __init__(self, index, num_output_tokens=10, max_length=None, policy="sam-cal",
                 tokenizer=None, response_cache=None, cache_tenant="", **options):
        if num_output_tokens < 1:
            raise ValueError("SamCandidateGenerator: num_output_tokens must be at least 1")
        self.num_output_tokens = int(num_output_tokens)
        self.max_length = max_length
        # One sequence verified per step: each step's chain is cut from the
        # policy's whole tree (at most num_output_tokens ids).
        options = chain_options(dict(options, policy=policy))
        self.index = open_index(index, tokenizer)
        self._pool = SessionPool(self.index, options, reuse=True,
                                 cache=_response_cache(response_cache), tenant=cache_tenant)
        self._drafter = None
        self._serial = 0
        self._metrics = AdapterMetrics()
        logger.info("SAM-Decoding drafter active (transformers candidate generator): index %s "
                    "(%d tokens), policy %s, %d candidate tokens",
                    index if isinstance(index, str) else "given", self.index.num_tokens, policy,
                    self.num_output_tokens)

    def metrics(self):
        """Drafted and accepted ids, steps and MAT per draft source, for the
        sequence being generated and in total (a dict; see
        samdecoding._requests.AdapterMetrics)."""
        return self._metrics.as_dict()

    @property
    def session(self):
        """The session of the sequence being generated (None before the
        first call)."""
        return None if self._drafter is None else self._drafter.session

    def get_candidates(self, input_ids, **kwargs):
        """input_ids: (1, n) LongTensor of the sequence so far (at the first
        call, the prompt). Returns (input_ids followed by the draft, None)."""
        import torch

        if input_ids.shape[0] != 1:
            raise ValueError("SamCandidateGenerator: assisted generation handles batch size 1")
        context = input_ids[0].detach().cpu().numpy()
        drafter = self._drafter
        if drafter is None or not drafter.continues(context):  # a new sequence
            if drafter is not None:
                self._metrics.finished(drafter)
                self._pool.put(drafter.session)
            self._serial += 1
            drafter = self._drafter = RequestDrafter(self._pool.get(), context,
                                                     serial=self._serial, metrics=self._metrics)
        limit = self.num_output_tokens
        if self.max_length is not None:
            limit = max(min(limit, self.max_length - 1 - len(context)), 0)
        draft = drafter.propose(context, max_nodes=limit + 1)
        chain = chain_of(draft, limit)
        self._metrics.offer(drafter, draft.source, chain)
        if not chain:
            return input_ids, None
        tail = torch.tensor([chain], dtype=input_ids.dtype, device=input_ids.device)
        return torch.cat((input_ids, tail), dim=-1), None

    def update_candidate_strategy(self, input_ids, scores, num_matches):
        """Nothing to adapt: the policy sizes each draft, and the verified
        tokens (input_ids) reach the session at the next get_candidates.
        num_matches may be an int or a 0-d tensor."""


def generate(model, inputs, index, *, policy="sam-cal", num_output_tokens=10, tokenizer=None,
             session_options=None, candidate_generator=None, **generate_kwargs):
    """model.generate(inputs, **generate_kwargs) with SAM-Decoding drafts
    (greedy or sampling: exact either way). Returns what generate returns.
    candidate_generator: a SamCandidateGenerator to draft with (to read its
    metrics() afterwards); index, policy, tokenizer and session_options
    then go unused."""
    generator = candidate_generator or SamCandidateGenerator(
        index, num_output_tokens=num_output_tokens, policy=policy, tokenizer=tokenizer,
        **(session_options or {}))

    def hand_over(*args, **kwargs):
        config = kwargs.get("generation_config", args[0] if args else None)
        generator.max_length = getattr(config, "max_length", None)
        return generator

    had_own = "_get_candidate_generator" in vars(model)
    saved = vars(model).get("_get_candidate_generator")
    model._get_candidate_generator = hand_over
    try:
        return model.generate(inputs, prompt_lookup_num_tokens=generator.num_output_tokens,
                              **generate_kwargs)
    finally:
        if had_own:
            model._get_candidate_generator = saved
        else:
            del model._get_candidate_generator


__all__ = ["SamCandidateGenerator", "generate"]
