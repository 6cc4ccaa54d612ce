"""Drafting from Python: open an index, draft, verify, print MAT.

    python3 draft.py INDEX REFERENCE
    python3 draft.py --tokenizer TOKENIZER INDEX REFERENCE

REFERENCE is a text file of two lines of token ids (the index's tokenizer): a
prompt (BOS first), then the model's greedy continuation of it. With
--tokenizer (the SentencePiece .model or tokenizer.json the index was built
with, checked against the index), its two lines are text instead: the prompt
and the continuation, encoded by samdecoding.Tokenizer. The reference
stands in for the model: after draft node i it "predicts" the continuation's
next token, as a model scoring the whole draft tree in one forward pass would;
only score_draft would call the model instead. The session uses the default
options (policy sam-cal). Exit status: 0 success, 1 runtime error, 2 usage error.
"""
import sys

import samdecoding as sd


def score_draft(draft, text, pos):
    """argmax[i]: the continuation's token after draft node i; past its end, a
    token that no child of the node has, so nothing beyond it is accepted."""
    argmax = []
    for i in range(len(draft)):
        nxt = pos + int(draft.depths[i]) + 1
        if nxt < len(text):
            argmax.append(text[nxt])
        else:
            children = {int(t) for t, p in zip(draft.tokens, draft.parents) if p == i}
            argmax.append(min(set(range(len(children) + 1)) - children))
    return argmax


def read_reference(path, tokenizer, index):
    """The reference's prompt and continuation as ids."""
    with open(path) as f:
        lines = [f.readline().rstrip("\n") for _ in range(2)]
    if tokenizer is None:
        prompt, text = ([int(t) for t in line.split()] for line in lines)
    else:
        # example-begin: python-tokenizer
        tok = sd.Tokenizer(tokenizer)   # SentencePiece .model, tokenizer.json or its folder
        tok.check(index)                # Error "tokenizer-mismatch" unless the index's
        prompt = tok.encode(lines[0], add_bos=True)     # BOS, then the prompt's ids
        text = tok.encode(lines[1])
        # example-end: python-tokenizer
    if not prompt or not text:
        raise ValueError("expected two lines (prompt, continuation)")
    return prompt, text


def main(argv):
    tokenizer = None
    if len(argv) == 5 and argv[1] == "--tokenizer":
        tokenizer, argv = argv[2], argv[:1] + argv[3:]
    if len(argv) != 3:
        print("usage: draft.py [--tokenizer TOKENIZER] INDEX REFERENCE", file=sys.stderr)
        return 2
    try:
        # example-begin: python-loop
        index = sd.Index.open(argv[1])  # mmap + a shared StaticIndex
        prompt, text = read_reference(argv[2], tokenizer, index)
        session = sd.Session()          # the defaults: policy sam-cal, 40-node drafts
        session.attach(index)
        session.prefill(prompt)
        pos = steps = accepted = 0      # text[pos]: the model's last token
        while pos < len(text):
            draft = session.propose(text[pos])          # node 0 is the start token
            argmax = score_draft(draft, text, pos)      # one forward pass over the tree
            result = session.verify_greedy(argmax)
            session.commit(result.commit_tokens)        # the start token + the accepted ones
            pos += len(result.commit_tokens)            # result.bonus_token starts the next step
            accepted += len(result.commit_tokens) - 1
            steps += 1
        print(f"MAT {(accepted + steps) / steps:.3f} ({pos} tokens in {steps} steps)")
        # example-end: python-loop
    except (OSError, ValueError) as e:
        print(f"draft.py: {argv[2]}: {e}", file=sys.stderr)
        return 1
    except sd.Error as e:
        print(f"draft.py: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
