"""A stand-in for the parts of vLLM (vllm-project/vllm) that a user's program
and samdecoding.vllm.SamProposer meet, for the engine example
(examples/engines/vllm_serve.py): LLM loads a *recording* instead of a model
(a folder holding recording.json: {"prompt_text", "prompt": ids,
"generation": ids}; its output text is the generation's ids as numbers).

LLM(model, speculative_config={"method": "custom_class", "model": NAME, ...})
builds the proposer as create_custom_proposer does
(vllm/v1/spec_decode/custom_class_proposer.py, commit f7490e78: import NAME,
construct it with the vllm_config); generate runs each prompt's request alone
in an InputBatch (v1/worker/gpu_input_batch.py here): after each step's
bookkeeping (the sampled ids appended to the row) it calls
propose(sampled_token_ids, num_tokens_no_spec, token_ids_cpu) as
GPUModelRunner.propose_draft_token_ids does (vllm/v1/worker/
gpu_model_runner.py, commit 000fc94b), then "verifies" the row's chain
against the recording: its longest prefix equal to the recorded ids, plus the
model's next id. It logs the drafted and accepted counts, as vLLM's spec-decode
metrics do."""
import importlib
import json
import logging
import os
import types

from vllm.v1.worker.gpu_input_batch import InputBatch

logger = logging.getLogger("vllm")


class SamplingParams:
    def __init__(self, temperature=1.0, max_tokens=16):
        if temperature != 0:
            raise ValueError("the recording holds greedy outputs: temperature=0")
        self.temperature, self.max_tokens = temperature, max_tokens


def create_custom_proposer(vllm_config):
    module, _, name = vllm_config.speculative_config.model.rpartition(".")
    return getattr(importlib.import_module(module), name)(vllm_config)


class LLM:
    def __init__(self, model, speculative_config=None, max_model_len=4096, max_num_seqs=4):
        with open(os.path.join(model, "recording.json")) as f:
            self.recording = json.load(f)
        if (speculative_config or {}).get("method") != "custom_class":
            raise ValueError("this stand-in runs the custom_class method only")
        self.k = speculative_config["num_speculative_tokens"]
        self.max_model_len, self.max_num_seqs = max_model_len, max_num_seqs
        self.vllm_config = types.SimpleNamespace(
            speculative_config=types.SimpleNamespace(**speculative_config),
            model_config=types.SimpleNamespace(max_model_len=max_model_len))
        self.proposer = create_custom_proposer(self.vllm_config)

    def generate(self, prompts, sampling_params):
        outputs = []
        for n, text in enumerate(prompts):
            if text != self.recording["prompt_text"]:
                raise ValueError("LLM: not the recorded prompt text")
            gen = self.recording["generation"][:sampling_params.max_tokens]
            batch = InputBatch(self.max_num_seqs, self.max_model_len)
            row = batch.add_request("req-%d" % n, self.recording["prompt"])
            out, drafted, accepted = [gen[0]], 0, 0
            batch.append_sampled(row, out)
            sampled = [list(out)]
            while len(out) < len(gen):
                drafts = self.proposer.propose(sampled, batch.num_tokens_no_spec,
                                               batch.token_ids_cpu_tensor)
                draft = list(drafts[row])[:self.k]
                k = 0
                while k < len(draft) and len(out) + k < len(gen) and draft[k] == gen[len(out) + k]:
                    k += 1
                ids = gen[len(out):len(out) + k + 1]
                drafted, accepted = drafted + len(draft), accepted + k
                out += ids
                batch.append_sampled(row, ids)
                sampled = [ids]
            logger.warning("speculative decoding: %d draft tokens, %d accepted", drafted, accepted)
            completion = types.SimpleNamespace(text=" ".join(map(str, out)), token_ids=out)
            outputs.append(types.SimpleNamespace(prompt=text, outputs=[completion]))
        return outputs
