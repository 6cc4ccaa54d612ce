"""samdecoding: SAM-Decoding retrieval drafting from Python (docs/python.md).

    import samdecoding as sd
    tokenizer = sd.Tokenizer("llama-32k.model")     # or a tokenizer.json / its folder
    index = sd.Index.open("general.sam", tokenizer=tokenizer)  # refused if built with another
    prompt_ids = tokenizer.encode(prompt, add_bos=True)
    session = sd.Session(policy="sam-cal", draft_size=40)
    session.attach(index)                           # or sd.ShardSet.open("big.samset")
    session.prefill(prompt_ids)
    draft = session.propose(start)                  # draft.tokens, .parents, .depths: numpy
    session.commit(accepted_path)                   # start + the accepted draft tokens
    print(session.stats())

Verification (greedy or lossless sampling) of the last proposal:

    r = session.verify_greedy(argmax)               # argmax[i]: the model's token after node i
    session.commit(r.commit_tokens); start = r.bonus_token

Engine adapters: samdecoding.vllm, samdecoding.sglang, samdecoding.hf
(docs/embedding.md).

Errors raise samdecoding.Error (e.code names the code, e.g. "io").
samdecoding.__version__ is the project's version (the runtime it was built with).
"""
import json as _json

from ._native import (MAX_DRAFT_SIZE, POLICIES, Draft, DraftPool, Error, Index, ResponseCache,
                      Rng, Session, ShardSet, Tokenizer, VerifyResult, __version__,
                      apply_sampling, propose_batch, sample_token, verify_greedy, verify_sampling)

__all__ = ["__version__", "Draft", "DraftPool", "Error", "Index", "MAX_DRAFT_SIZE", "POLICIES", "ResponseCache",
           "Rng", "Session", "ShardSet", "Tokenizer", "VerifyResult", "apply_sampling", "propose_batch",
           "sample_token", "verify_greedy", "verify_sampling"]


def _stats(self):
    """The session's statistics as a dict (Session statistics JSON: per source
    steps, draft_tokens, accepted_tokens, mat, propose_ns and per-depth arrays)."""
    return _json.loads(self.stats_json())


def _metadata(self):
    """The index's build metadata (META section) as a dict: tool_version,
    created_utc, tokenizer, template, corpora, build options."""
    return _json.loads(self.metadata_json())


def _draft_repr(self):
    return "Draft(source=%r, match_len=%d, tokens=%s, parents=%s)" % (
        self.source, self.match_len, self.tokens.tolist(), self.parents.tolist())


Session.stats = _stats
Index.metadata = _metadata
Draft.__repr__ = _draft_repr
