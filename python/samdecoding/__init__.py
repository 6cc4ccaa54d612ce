"""samdecoding: SAM-Decoding retrieval drafting from Python (docs/python.md).

    import samdecoding as sd
    index = sd.Index.open("general.sam")            # shared by any number of sessions
    session = sd.Session(policy="sam-cal", draft_size=40)
    session.attach(index)                           # or sd.ShardSet.open("big.samset")
    session.prefill(prompt_ids)
    draft = session.propose(start)                  # draft.tokens, .parents, .depths: numpy
    session.commit(accepted_path)                   # start + the accepted draft tokens
    print(session.stats())

Errors raise samdecoding.Error (e.code names the code, e.g. "io").
"""
import json as _json

from ._native import (MAX_DRAFT_SIZE, POLICIES, Draft, DraftPool, Error, Index, Session,
                      ShardSet, propose_batch)

__all__ = ["Draft", "DraftPool", "Error", "Index", "MAX_DRAFT_SIZE", "POLICIES", "Session",
           "ShardSet", "propose_batch"]


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
