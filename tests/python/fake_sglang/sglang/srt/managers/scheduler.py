"""Mirrors the scheduler process of python/sglang/srt/managers/scheduler.py:
run_scheduler_process (the target of the processes that
python/sglang/srt/entrypoints/engine.py starts after
mp.set_start_method("spawn", force=True)) loads the plugins, resolves
--speculative-algorithm with SpeculativeAlgorithm.from_string, builds the
worker class create_worker returns, and runs the event loop: prefill
(extend) batches for new requests, decode batches otherwise; with overlap
scheduling a batch's results (req.output_ids) are processed after the next
batch was launched, so a request that finished runs one more decode round,
whose result is dropped. The target model is a recording: request r's
generation is requests[r]["generation"]."""
import collections
import logging

from sglang.srt.plugins import load_plugins
from sglang.srt.speculative.spec_info import SpeculativeAlgorithm


class Req:
    def __init__(self, rid, origin_input_ids, generation):
        self.rid = rid
        self.origin_input_ids = list(origin_input_ids)
        self.output_ids = []
        self.generation = generation

    def finished(self):
        return len(self.output_ids) >= len(self.generation)


class ScheduleBatch:
    def __init__(self, reqs, forward_mode, spec_info=None):
        self.reqs = reqs
        self.forward_mode = forward_mode
        self.spec_info = spec_info
        self.has_grammar = False


class RecordedTarget:
    """The target model: verifies trees against the recorded generations
    (greedy: the longest path whose every id is the next recorded one, then
    the bonus id) and logs every decode round's drafts."""

    def __init__(self, log):
        self.pos = {}  # rid -> generated ids so far, processed or not
        self.log = log

    def prefill(self, batch):
        for req in batch.reqs:
            self.pos[req.rid] = 1
        return [req.generation[0] for req in batch.reqs]

    def verify(self, batch, drafts, mask):
        accepted = []
        for b, req in enumerate(batch.reqs):
            gen, pos = req.generation, self.pos[req.rid]
            d = drafts.shape[1]
            parents = []
            for i in range(d):
                ancestors = [j for j in range(d) if mask[b, i, j] and j != i]
                parents.append(max(ancestors, key=lambda j: mask[b, j].sum())
                               if ancestors else -1)
            node, path = 0, []
            while pos + len(path) < len(gen):
                want = gen[pos + len(path)]
                child = next((j for j in range(1, d) if parents[j] == node and
                              drafts[b, j] == want), None)
                if child is None:
                    break
                path.append(want)
                node = child
            bonus = gen[pos + len(path)] if pos + len(path) < len(gen) else 0
            self.log.append({"rid": req.rid, "pos": pos, "tokens": drafts[b].tolist(),
                             "parents": parents, "accepted": len(path)})
            self.pos[req.rid] = pos + len(path) + 1
            accepted.append(path + [bonus])
        return accepted


def run_scheduler_process(server_args, requests, max_running, pipe, worker_class=None):
    """worker_class: the test's own, instead of the algorithm's (in-process runs)."""
    load_plugins()
    algorithm = SpeculativeAlgorithm.from_string(server_args.speculative_algorithm)
    if worker_class is None:
        worker_class = algorithm.create_worker(server_args)
    log = []
    target = RecordedTarget(log)
    worker = worker_class(server_args, 0, 0, None, 0, 0, 0, 0, target)
    overlap = not server_args.disable_overlap_schedule
    waiting = [Req("req-%d" % r, q["prompt"], q["generation"]) for r, q in enumerate(requests)]
    running, spec_rows = [], {}  # rid -> (accept_tokens row, accept_len) of its last round
    unprocessed = collections.deque()
    stride = server_args.speculative_num_draft_tokens

    def process(batch, accepted):
        for req, ids in zip(batch.reqs, accepted):
            if not req.finished():
                req.output_ids.extend(ids[:len(req.generation) - len(req.output_ids)])
        for req in batch.reqs:
            if req.finished() and req in running:
                running.remove(req)

    while waiting or running or unprocessed:
        if waiting and not running:
            # (A simplification: new requests are admitted when the running
            # batch has emptied, so that the spliced ids are exactly those of
            # the last decode round.)
            while unprocessed:
                process(*unprocessed.popleft())
            reqs = []
            while waiting and len(running) + len(reqs) < max_running:
                reqs.append(waiting.pop(0))
            batch = ScheduleBatch(reqs, "extend")
            running.extend(reqs)
        elif running:
            from sglang.srt.speculative.ngram_worker import DeviceTensor, NgramVerifyInput

            tokens = [t for req in running for t in spec_rows[req.rid][0]]
            lens = [spec_rows[req.rid][1] for req in running]
            batch = ScheduleBatch(list(running), "decode",
                                  NgramVerifyInput(stride, DeviceTensor(tokens),
                                                   DeviceTensor(lens)))
        else:
            batch = None
        if batch is not None:
            accepted, next_input = worker.forward_batch_generation(batch)
            rows = next_input.accept_tokens.cpu().tolist()
            lens = next_input.accept_lens.cpu().tolist()
            for i, req in enumerate(batch.reqs):
                spec_rows[req.rid] = (rows[i * stride:(i + 1) * stride], lens[i])
            unprocessed.append((batch, accepted))
        # Overlap: this round's results wait until the next round is launched.
        while unprocessed and (not overlap or len(unprocessed) > 1 or batch is None):
            process(*unprocessed.popleft())
    corpus = worker.ngram_corpus
    pipe.send({"log": log, "class": type(worker).__name__, "is_ngram": algorithm.is_ngram(),
               "live_sessions": corpus.num_requests, "metrics": corpus.metrics(),
               "last_batch": sorted(worker._prev_decode_rids)})
    pipe.close()
