"""Mirrors python/sglang/srt/speculative/spec_registry.py (commit 0057abea):
CustomSpecAlgo (every is_*() false but is_speculative; create_worker refuses
overlap scheduling unless supports_overlap, then returns factory(server_args)),
register_algorithm and get_spec; names are upper-cased, builtin names
reserved, the spec class checked against SpeculativeAlgorithm's is_*() and
supports_*() methods."""
_REGISTRY = {}


class CustomSpecAlgo:
    def __init__(self, name, factory, *, supports_overlap=False, validate_server_args=None):
        self.name = name
        self.factory = factory
        self.supports_overlap = supports_overlap
        self.validate_server_args = validate_server_args

    def is_some(self):
        return True

    def is_none(self):
        return False

    def is_speculative(self):
        return True

    def is_eagle(self):
        return False

    def is_ngram(self):
        return False

    def supports_mixed_chunk(self):
        return False

    def has_draft_kv(self):
        return True

    def create_worker(self, server_args):
        if not server_args.disable_overlap_schedule and not self.supports_overlap:
            raise ValueError("Speculative algorithm %s does not support overlap scheduling."
                             % self.name)
        return self.factory(server_args)


def _reserved_names():
    from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

    return frozenset(algo.name for algo in SpeculativeAlgorithm) | {"NEXTN"}


def register_algorithm(name, *, supports_overlap=False, validate_server_args=None,
                       spec_class=CustomSpecAlgo):
    from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

    upper = name.upper()
    if upper in _reserved_names():
        raise ValueError("'%s' is a reserved speculative algorithm name" % upper)
    if upper in _REGISTRY:
        raise ValueError("Speculative algorithm '%s' already registered." % upper)
    interface = {n for n in vars(SpeculativeAlgorithm) if n.startswith(("is_", "supports_"))}
    missing = sorted(interface - set(dir(spec_class)))
    if missing:
        raise TypeError("%s is missing %s" % (spec_class.__name__, missing))

    def decorator(factory):
        _REGISTRY[upper] = spec_class(name=upper, factory=factory,
                                      supports_overlap=supports_overlap,
                                      validate_server_args=validate_server_args)
        return factory

    return decorator


def get_spec(name):
    return None if name is None else _REGISTRY.get(name.upper())
