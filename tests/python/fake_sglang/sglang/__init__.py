"""A stand-in for the parts of SGLang (sgl-project/sglang) that the
samdecoding plugin meets, with upstream's module, class and method names and
call order, for tests/python/test_engines.py. No model runs: the target
worker answers from recorded generations. Each module cites the upstream
file it mirrors."""


def _spawn_scheduler(server_args, requests, num_steps):
    """run_scheduler_process in a process started with the "spawn" method, as
    sglang.Engine starts its scheduler; returns what the scheduler sends, or
    None if it died. (Also the test driver's way of starting a scheduler.)"""
    import multiprocessing

    from sglang.srt.managers.scheduler import run_scheduler_process

    context = multiprocessing.get_context("spawn")
    receiver, sender = context.Pipe(duplex=False)
    process = context.Process(target=run_scheduler_process,
                              args=(server_args, requests, num_steps, sender))
    process.start()
    sender.close()
    try:
        result = receiver.recv() if receiver.poll(300) else None
    except EOFError:
        result = None
    process.join(60)
    return result


class Engine:
    """Mirrors sglang.Engine (python/sglang/srt/entrypoints/engine.py): the
    server arguments as keywords; the scheduler runs in a process started with
    the "spawn" method (srt/managers/scheduler.py here: it loads the plugins
    and builds the speculative algorithm's worker). The model is a recording:
    model_path is a folder holding recording.json ({"prompt_text", "prompt":
    ids, "generation": ids}), and generate returns its generation's ids as
    numbers in "text"."""

    def __init__(self, model_path, speculative_algorithm=None, speculative_num_draft_tokens=8,
                 disable_overlap_schedule=False, **server_args):
        import json
        import os
        import types

        with open(os.path.join(model_path, "recording.json")) as f:
            self.recording = json.load(f)
        self.server_args = types.SimpleNamespace(
            speculative_algorithm=speculative_algorithm,
            disable_overlap_schedule=disable_overlap_schedule,
            speculative_num_draft_tokens=speculative_num_draft_tokens,
            speculative_ngram_max_trie_depth=18, speculative_ngram_min_bfs_breadth=1,
            speculative_ngram_max_bfs_breadth=10, speculative_ngram_match_type="BFS",
            speculative_ngram_capacity=1000000, **server_args)

    def generate(self, prompt, sampling_params):
        if prompt != self.recording["prompt_text"]:
            raise ValueError("Engine: not the recorded prompt text")
        if sampling_params.get("temperature", 1.0) != 0:
            raise ValueError("the recording holds greedy outputs: temperature 0")
        gen = self.recording["generation"][:sampling_params.get("max_new_tokens", 128)]
        request = {"prompt": self.recording["prompt"], "generation": gen}
        result = _spawn_scheduler(self.server_args, [request], 1)
        if result is None:
            raise RuntimeError("the scheduler process failed (is the algorithm %r registered?)"
                               % self.server_args.speculative_algorithm)
        total = result["metrics"]["total"]
        return {"text": " ".join(map(str, gen)),
                "meta_info": {"spec_worker": result["class"],
                              "spec_accepted": sum(v["accepted"] for v in total.values())}}

    def shutdown(self):
        """Nothing runs between calls here."""
