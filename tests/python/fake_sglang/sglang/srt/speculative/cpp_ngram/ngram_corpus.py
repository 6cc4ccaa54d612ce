"""Mirrors the interface of python/sglang/srt/speculative/cpp_ngram/
ngram_corpus.py (commit 574f6d7c). The stock corpus is not needed here: the
test's worker must never call it (a SamWorker replaces it)."""


class NgramCorpus:
    def __init__(self, **kwargs):
        raise AssertionError("the stock NgramCorpus was built: SamWorker did not replace it")
