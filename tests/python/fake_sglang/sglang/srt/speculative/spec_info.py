"""Mirrors SpeculativeAlgorithm of python/sglang/srt/speculative/spec_info.py:
from_string resolves builtins first, then registered plugin algorithms;
register(name, *, supports_overlap, validate_server_args, spec_class)."""
from enum import IntEnum, auto

from sglang.srt.speculative.spec_registry import CustomSpecAlgo
from sglang.srt.speculative.spec_registry import get_spec as _get_registered_spec
from sglang.srt.speculative.spec_registry import register_algorithm as _register_algorithm


class SpeculativeAlgorithm(IntEnum):
    EAGLE = auto()
    NGRAM = auto()
    NONE = auto()

    @classmethod
    def from_string(cls, name):
        if name is None:
            return cls.NONE
        upper = name.upper()
        try:
            return cls[upper]
        except KeyError:
            pass
        spec = _get_registered_spec(upper)
        if spec is not None:
            return spec
        raise ValueError("Unknown speculative algorithm name: %s" % name)

    @classmethod
    def register(cls, name, *, supports_overlap=False, validate_server_args=None,
                 spec_class=CustomSpecAlgo):
        return _register_algorithm(name, supports_overlap=supports_overlap,
                                   validate_server_args=validate_server_args,
                                   spec_class=spec_class)

    def is_some(self):
        return self != SpeculativeAlgorithm.NONE

    def is_none(self):
        return self == SpeculativeAlgorithm.NONE

    def is_speculative(self):
        return self != SpeculativeAlgorithm.NONE

    def is_eagle(self):
        return self == SpeculativeAlgorithm.EAGLE

    def is_ngram(self):
        return self == SpeculativeAlgorithm.NGRAM

    def supports_mixed_chunk(self):
        return False
