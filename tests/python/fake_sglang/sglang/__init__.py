"""A stand-in for the parts of SGLang (sgl-project/sglang) that the
samdecoding plugin meets, with upstream's module, class and method names and
call order, for tests/python/test_engines.py. No model runs: the target
worker answers from recorded generations. Each module cites the upstream
file it mirrors."""
