"""vLLM's InputBatch as a custom proposer sees it: a stand-in mirroring
vllm/v1/worker/gpu_input_batch.py (vllm-project/vllm, commit a9e3b0a0), used
by the interface test's engine driver (tests/python/test_engines.py) and by
the fake LLM (vllm/__init__.py here)."""
import numpy as np

try:
    import torch
except ImportError:  # the buffers are numpy arrays then
    torch = None


class InputBatch:
    """The part of vLLM's InputBatch that a custom proposer sees, with its
    row moves (vllm-project/vllm vllm/v1/worker/gpu_input_batch.py, commit
    a9e3b0a0): whole (max_num_reqs, max_model_len) int32 token_ids_cpu and
    num_tokens_no_spec buffers; add_request writes the whole prompt (and any
    output) into the lowest removed row, or the next one; remove_request
    leaves a hole that condense() fills with the last rows, copying only
    their first num_tokens ids (the rest of a row keeps what was there);
    swap_states(i1, i2) swaps two whole rows. token_ids_cpu is the numpy view
    of token_ids_cpu_tensor, what propose_draft_token_ids hands over."""

    def __init__(self, max_num_reqs, max_model_len):
        if torch is not None:
            self.token_ids_cpu_tensor = torch.zeros((max_num_reqs, max_model_len),
                                                    dtype=torch.int32)
            self.token_ids_cpu = self.token_ids_cpu_tensor.numpy()
        else:
            self.token_ids_cpu = np.zeros((max_num_reqs, max_model_len), dtype=np.int32)
            self.token_ids_cpu_tensor = self.token_ids_cpu
        self.num_tokens_no_spec = np.zeros(max_num_reqs, dtype=np.int32)
        self.req_ids = []  # row -> request id (None: a hole); never handed to the proposer
        self.removed = []  # removed rows not yet filled

    @property
    def num_reqs(self):
        return sum(r is not None for r in self.req_ids)

    def add_request(self, req_id, token_ids):
        if self.removed:
            self.removed.sort()
            row = self.removed.pop(0)
            self.req_ids[row] = req_id
        else:
            row = len(self.req_ids)
            self.req_ids.append(req_id)
        self.token_ids_cpu[row, :len(token_ids)] = token_ids
        self.num_tokens_no_spec[row] = len(token_ids)
        return row

    def remove_request(self, req_id):
        row = self.req_ids.index(req_id)
        self.req_ids[row] = None
        self.removed.append(row)

    def condense(self):
        holes = sorted(self.removed)
        self.removed = []
        for hole in holes:
            last = max((i for i, r in enumerate(self.req_ids) if r is not None), default=-1)
            if last <= hole:
                break
            n = self.num_tokens_no_spec[last]
            self.token_ids_cpu[hole, :n] = self.token_ids_cpu[last, :n]
            self.num_tokens_no_spec[hole] = n
            self.req_ids[hole], self.req_ids[last] = self.req_ids[last], None
        while self.req_ids and self.req_ids[-1] is None:
            self.req_ids.pop()

    def swap_states(self, i1, i2):
        tmp = self.token_ids_cpu[i1, ...].copy()
        self.token_ids_cpu[i1, ...] = self.token_ids_cpu[i2, ...]
        self.token_ids_cpu[i2, ...] = tmp
        n = self.num_tokens_no_spec
        n[i1], n[i2] = n[i2], n[i1]
        self.req_ids[i1], self.req_ids[i2] = self.req_ids[i2], self.req_ids[i1]

    def append_sampled(self, row, ids):
        """What _bookkeeping_sync does with a row's sampled ids."""
        start = self.num_tokens_no_spec[row]
        self.token_ids_cpu[row, start:start + len(ids)] = ids
        self.num_tokens_no_spec[row] = start + len(ids)
