"""Mirrors NGRAMWorker of python/sglang/srt/speculative/ngram_worker.py as
merged with NgramCorpus (the overlap-capable worker, a BaseSpecWorker): the
constructor's attributes and its NgramCorpus(...) call, _prepare_draft_tokens
(the previous round's accept_tokens / accept_lens read with the stride of
batch.spec_info, spliced after output_ids in overlap mode, the corpus asked
with request ids, windows and total lengths), _update_ngram_corpus, and
forward_batch_generation's order: draft, verify, _update_ngram_corpus,
erase_match_state for the requests that left the decode batch, the next
round's NgramVerifyInput. The GPU parts are left out: the target worker
verifies the flat drafts and ancestor mask directly."""
import numpy as np

from sglang.srt.speculative.cpp_ngram.ngram_corpus import NgramCorpus


class DeviceTensor:
    """What .is_cpu / .cpu() / .tolist() see of a CUDA tensor."""

    def __init__(self, values, is_cpu=False):
        self._values = np.asarray(values)
        self.is_cpu = is_cpu

    def cpu(self):
        return DeviceTensor(self._values.copy(), is_cpu=True)

    def tolist(self):
        return self._values.tolist()


class NgramVerifyInput:
    def __init__(self, draft_token_num, accept_tokens=None, accept_lens=None):
        self.draft_token_num = draft_token_num
        self.accept_tokens = accept_tokens
        self.accept_lens = accept_lens


class BaseSpecWorker:
    pass


class NGRAMWorker(BaseSpecWorker):
    def __init__(self, server_args, gpu_id, tp_rank, dp_rank, moe_ep_rank, attn_cp_rank,
                 moe_dp_rank, nccl_port, target_worker):
        self.server_args = server_args
        self.enable_overlap = not server_args.disable_overlap_schedule
        self._target_worker = target_worker
        self.draft_token_num = server_args.speculative_num_draft_tokens
        self.max_trie_depth = server_args.speculative_ngram_max_trie_depth
        self._prev_decode_rids = set()
        self._prev_stride = self.draft_token_num
        self.ngram_corpus = NgramCorpus(
            min_bfs_breadth=server_args.speculative_ngram_min_bfs_breadth,
            max_bfs_breadth=server_args.speculative_ngram_max_bfs_breadth,
            match_type=server_args.speculative_ngram_match_type,
            capacity=server_args.speculative_ngram_capacity,
            max_trie_depth=server_args.speculative_ngram_max_trie_depth,
            draft_token_num=server_args.speculative_num_draft_tokens,
        )

    @property
    def target_worker(self):
        return self._target_worker

    def clear_cache_pool(self):
        self.ngram_corpus.reset()
        self._prev_decode_rids = set()

    def _efficient_concat_last_n(self, seq1, seq2, n):
        if len(seq2) >= n:
            return seq2[-n:]
        return seq1[-(n - len(seq2)):] + seq2

    def _prepare_draft_tokens(self, batch):
        bs = len(batch.reqs)
        stride = batch.spec_info.draft_token_num
        self._prev_stride = stride
        prev_token_ids, prev_accept_lens = (batch.spec_info.accept_tokens,
                                            batch.spec_info.accept_lens)
        if not prev_token_ids.is_cpu:
            prev_token_ids = prev_token_ids.cpu()
            prev_accept_lens = prev_accept_lens.cpu()
        self.prev_token_ids = prev_token_ids.tolist()
        self.prev_accept_lens = prev_accept_lens.tolist()
        self.ngram_corpus.synchronize()
        req_ids, batch_tokens, total_lens = [], [], []
        use_prev_tokens = self.enable_overlap and not batch.has_grammar
        for i, req in enumerate(batch.reqs):
            prev_tokens = (self.prev_token_ids[i * stride:i * stride + self.prev_accept_lens[i]]
                           if use_prev_tokens else [])
            batch_tokens.append(self._efficient_concat_last_n(
                list(req.origin_input_ids),
                list(req.output_ids[-self.max_trie_depth:]) + prev_tokens, self.max_trie_depth))
            req_ids.append(req.rid)
            total_lens.append(len(req.origin_input_ids) + len(req.output_ids) + len(prev_tokens))
        req_drafts, mask = self.ngram_corpus.batch_get(req_ids, batch_tokens, total_lens)
        assert len(req_drafts) == bs * self.draft_token_num
        return req_drafts, mask

    def _update_ngram_corpus(self, batch):
        stride = self._prev_stride
        use_prev_tokens = self.enable_overlap and not batch.has_grammar
        batch_tokens = []
        for i, req in enumerate(batch.reqs):
            prev_tokens = (self.prev_token_ids[i * stride:i * stride + self.prev_accept_lens[i]]
                           if use_prev_tokens else [])
            batch_tokens.append(self._efficient_concat_last_n(
                list(req.origin_input_ids),
                list(req.output_ids[-self.max_trie_depth:]) + prev_tokens, self.max_trie_depth))
        self.ngram_corpus.batch_put(batch_tokens)

    def forward_batch_generation(self, batch):
        bs = len(batch.reqs)
        d = self.draft_token_num
        if batch.forward_mode == "decode":
            req_drafts, mask = self._prepare_draft_tokens(batch)
            accept = self.target_worker.verify(batch, req_drafts.reshape(bs, d),
                                               np.asarray(mask).reshape(bs, d, d).astype(bool))
            accept_lens = [len(a) for a in accept]
            self._update_ngram_corpus(batch)
            cur_rids = {req.rid for req in batch.reqs}
            departed = self._prev_decode_rids - cur_rids
            if departed:
                self.ngram_corpus.erase_match_state(list(departed))
            self._prev_decode_rids = cur_rids
        else:  # extend: the prefill samples one id
            accept = [[t] for t in self.target_worker.prefill(batch)]
            accept_lens = [1] * bs
        tokens = np.zeros((bs, d), dtype=np.int64)
        for i, ids in enumerate(accept):
            tokens[i, :len(ids)] = ids
        return accept, NgramVerifyInput(d, DeviceTensor(tokens.reshape(-1)),
                                        DeviceTensor(np.array(accept_lens)))
