"""Per-request sessions kept in step with an engine's token sequences.

The engine adapters (vllm.py, sglang.py, hf.py) share this: an engine hands
over, at every step, each running request's tokens so far (prompt, then
every verified token); the adapter turns the difference since the last step
into the session's calls:

    first sight   session.prefill(context[:-1]); session.propose(context[-1])
    later steps   session.commit(context[m:n-1])   # the last start + accepted
                  session.propose(context[n-1])    # the bonus token starts the next draft

where m is how many tokens the session has taken in (prefill + commits) and
n the context's length now. That is exactly the loop of docs/python.md, so
an adapter drafts what a session driven by hand drafts.
"""
import os

import numpy as np

from ._native import Error, Index, ResponseCache, Session, Tokenizer

# How a context is handed over: a 1-D array of ids (numpy, a list, a CPU
# torch tensor's .numpy()).


def as_ids(context):
    """A 1-D numpy array of the ids in `context` (no copy for numpy arrays)."""
    array = np.asarray(context)
    if array.ndim != 1:
        raise Error("a request's tokens must be one-dimensional, got shape %s" % (array.shape,))
    return array


def chain_options(options):
    """Session options for a chain-verifying engine (vLLM, HF assisted
    generation): shape "chain" unless the options name a shape. The session
    then cuts each step's chain (Session.propose's max_nodes: the engine's
    limit + 1) from the policy's whole tree of draft_size nodes: the root
    path with the most expected accepted tokens (docs/runtime.md, "Chains")."""
    options = dict(options)
    options.setdefault("shape", "chain")
    return options


def chain_of(draft, limit):
    """The ids a chain-verifying engine gets from `draft`, at most `limit`:
    a chain's ids after its start (shape "chain", or a linear draft), or,
    for a tree (a session with shape "tree"), its first-child chain (node 1,
    its first child, and so on). The one place a draft becomes the list an
    engine verifies."""
    tokens, parents = draft.tokens.tolist(), draft.parents.tolist()
    chain, node = [], 0
    for i in range(1, len(tokens)):
        if len(chain) >= limit:
            break
        if parents[i] == node:
            chain.append(tokens[i])
            node = i
    return chain


def open_index(index, tokenizer=None):
    """`index` as an Index: an Index is used as is, a path is opened
    (prepared: one StaticIndex shared by every session). tokenizer: None, a
    Tokenizer, or the path of the model's tokenizer (.model, tokenizer.json or
    its folder), whose fingerprint the index must record."""
    if tokenizer is not None and not isinstance(tokenizer, Tokenizer):
        tokenizer = Tokenizer(tokenizer)
    if isinstance(index, Index):
        if tokenizer is not None:
            tokenizer.check(index)
        return index
    if index is None:
        raise Error("no index: give index=PATH (or set SAM_INDEX for the engine adapters)")
    return Index.open(index, tokenizer=tokenizer)


class SessionPool:
    """Sessions over one index with one set of options; a freed session is
    Reset() and reused by the next request (a session reserves its dynamic
    automaton's memory once). With reuse=False every request gets a fresh
    session: sam-cal's learned estimates then start from the prior for each
    request, as in a fresh C++ session.

    With a response cache (a ResponseCache), every request's session drafts
    from it under `tenant`, and a request that leaves adds what it generated
    (Session.cache_request) before its session is reset: the cross-request
    cache of docs/runtime.md for an engine's requests."""

    def __init__(self, index, options, reuse=True, cache=None, tenant=""):
        self.index = index
        self.options = dict(options)
        self.reuse = reuse
        self.cache = cache
        self.tenant = tenant
        self._free = []
        Session(**self.options)  # refuses bad options now, not at the first request

    def get(self):
        if self._free:
            session = self._free.pop()
        else:
            session = Session(**self.options)
            session.attach(self.index)
        if self.cache is not None:
            session.attach_cache(self.cache, self.tenant)
        return session

    def put(self, session):
        if self.cache is not None:
            session.cache_request()
        if self.reuse:
            session.reset()
            self._free.append(session)


def drafting_threads(given, who):
    """Threads that draft an engine step's requests: `given`, else
    SAM_THREADS, else up to 4 (never more than the machine's cores)."""
    if given:
        return int(given)
    value = os.environ.get("SAM_THREADS", "")
    if not value:
        return min(4, os.cpu_count() or 1)
    if not value.isdigit() or int(value) < 1:
        raise ValueError("%s: SAM_THREADS must be a number of threads, got %r" % (who, value))
    return int(value)


def response_cache(cache):
    """The response cache of an engine adapter: a ResponseCache is used as
    is; a number is a bound in MiB for a new one that compiles its tenants on
    its own thread (what a server wants); None (or 0) is none. SAM_CACHE_MIB
    gives the number when `cache` is None."""
    if cache is None:
        mib = os.environ.get("SAM_CACHE_MIB")
        cache = float(mib) if mib else None
    if cache is None or isinstance(cache, ResponseCache):
        return cache
    if not cache:
        return None
    if cache < 0:
        raise Error("response_cache: a bound in MiB must be positive, got %r" % (cache,))
    return ResponseCache(int(cache * (1 << 20)), compile=True, compile_background=True)


class RequestDrafter:
    """One request's session and how much of its context it has taken in.

    `offered` is what the engine was handed at the last step (the ids it
    will verify: a chain, or a tree's nodes but the root) and `source` that
    draft's source; at the next step the ids committed before the new start
    tell how many of them the engine accepted (AdapterMetrics)."""

    __slots__ = ("session", "taken", "_seen", "last_draft", "serial", "offered", "source",
                 "tree_parents", "metrics")

    def __init__(self, session, context, keep_text=True, serial=0, metrics=None):
        context = as_ids(context)
        self.session = session
        self.serial = serial
        self.metrics = metrics
        self.offered = None
        self.source = None
        self.tree_parents = None
        session.prefill(context[:-1])
        self.taken = len(context) - 1
        # The ids taken in, to recognise the request by its text (engines that
        # do not name requests: vLLM's proposer interface, HF).
        self._seen = np.array(context[:-1]) if keep_text else None
        self.last_draft = None

    def continues(self, context):
        """True when `context` is this request's text: it starts with every id
        taken in and has at least one more (the next start token)."""
        m = self.taken
        return len(context) > m and np.array_equal(context[:m], self._seen[:m])

    def likely_continues(self, context):
        """continues() on the first and last ids taken in only (at most 64
        of each): for the session that drafted for this row at the last
        step, where the full comparison would cost O(context) a step."""
        m = self.taken
        if len(context) <= m:
            return False
        w = min(m, 64)
        seen = self._seen
        if context.dtype == seen.dtype:  # byte comparison: a fraction of array_equal's cost
            return (context[m - w:m].tobytes() == seen[m - w:m].tobytes() and
                    context[:w].tobytes() == seen[:w].tobytes())
        return (np.array_equal(context[m - w:m], seen[m - w:m]) and
                np.array_equal(context[:w], seen[:w]))

    def advance(self, context):
        """Commits what joined the context since the last step; returns the
        start of the next draft (the context's last id)."""
        context = as_ids(context)
        n = len(context)
        if n < self.taken + 1:
            raise Error("a request's context shrank from %d to %d tokens" % (self.taken + 1, n))
        if n - 1 > self.taken:
            self._take(context[self.taken:n - 1])
        return int(context[n - 1])

    def propose(self, context, max_nodes=None):
        """Commits what joined the context since the last step and proposes
        from its last token (at most max_nodes nodes, the start included;
        None: the session's draft_size)."""
        start = self.advance(context)
        self.last_draft = self.session.propose(start, max_nodes)
        return self.last_draft

    def _take(self, new):
        if self.metrics is not None:
            self.metrics.verified(self, new)
        self.session.commit(new)
        if self._seen is not None:
            self._append(as_ids(new))
        self.taken += len(new)

    def advance_tail(self, pending, start):
        """advance() for engines that hand over only what is new: `pending`
        are context[taken:n-1], `start` is context[n-1]; returns `start`."""
        if len(pending):
            self._take(pending)
        return int(start)

    def _append(self, new):
        m, k = self.taken, len(new)
        if m + k > len(self._seen):
            grown = np.empty(max(2 * len(self._seen), m + k, 64), dtype=self._seen.dtype)
            grown[:m] = self._seen[:m]
            self._seen = grown
        self._seen[m:m + k] = new


class AdapterMetrics:
    """Drafted and accepted ids per draft source, per request and in total,
    as an engine adapter sees them: `drafted` counts the ids handed to the
    engine (a chain's ids, a tree's nodes but the root), `accepted` those the
    engine verified (known at the request's next step), `steps` the steps
    that drafted from that source. MAT = (accepted + steps) / steps: tokens
    a verification step yields, the bonus token included.

    as_dict() is a plain dict: {"total": {source: {...}}, "requests":
    {request: {source: {...}}}, "finished_requests": n}; "total" includes
    the requests that left."""

    def __init__(self):
        self._total = {}
        self._requests = {}
        self.finished_requests = 0

    def offer(self, drafter, source, offered, parents=None):
        """Records what request `drafter` was handed this step (`parents`:
        the tree's parent array, None for a chain)."""
        drafter.offered = offered
        drafter.source = source
        drafter.tree_parents = parents

    def verified(self, drafter, committed):
        """The request's next step committed `committed` (the last start and
        the accepted ids): counts the step of its last offer."""
        offered = drafter.offered
        if offered is None:
            return
        drafter.offered = None
        accepted = _accepted(offered, drafter.tree_parents,
                             committed.tolist() if hasattr(committed, "tolist") else committed)
        for table in (self._total, self._requests.setdefault(drafter.serial, {})):
            row = table.setdefault(drafter.source, [0, 0, 0])
            row[0] += 1
            row[1] += len(offered)
            row[2] += accepted

    def finished(self, drafter):
        """The request left: its row of `requests` goes (total keeps it)."""
        self._requests.pop(drafter.serial, None)
        self.finished_requests += 1

    def as_dict(self):
        return {"total": _rows(self._total),
                "requests": {key: _rows(value) for key, value in self._requests.items()},
                "finished_requests": self.finished_requests}


def _accepted(offered, parents, committed):
    """How many of the offered ids the committed ids (the start, then the
    accepted ones) follow: the chain's matching prefix, or in a tree (offered
    = nodes 1.., parents[i] the parent of node i, the root 0) the path."""
    if parents is None:
        k = 0
        while k < len(offered) and k + 1 < len(committed) and offered[k] == committed[k + 1]:
            k += 1
        return k
    node, k = 0, 0
    for token in committed[1:]:
        child = next((i for i in range(1, len(parents))
                      if parents[i] == node and offered[i - 1] == token), None)
        if child is None:
            break
        node, k = child, k + 1
    return k


def _rows(table):
    return {source: {"steps": steps, "drafted": drafted, "accepted": accepted,
                     "mat": (accepted + steps) / steps if steps else 0.0}
            for source, (steps, drafted, accepted) in table.items()}
