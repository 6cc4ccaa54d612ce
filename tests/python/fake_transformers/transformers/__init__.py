"""A stand-in for the parts of Hugging Face transformers that samdecoding.hf
meets, for the interface test and the HF example (examples/engines/
hf_generate.py): AutoTokenizer and AutoModelForCausalLM load a *recording*
instead of a model. A recording folder holds recording.json: {"prompt_text",
"prompt": ids, "generation": ids}; the tokenizer encodes prompt_text as the
recorded prompt ids and decodes ids as their numbers, and the model's greedy
output is the recorded generation. RecordedModel.generate does what
GenerationMixin.generate (src/transformers/generation/utils.py,
huggingface/transformers commit 1097d4b3) does with prompt_lookup_num_tokens:
it asks self._get_candidate_generator(...) for the candidate generator and
runs assisted decoding: get_candidates, one "forward pass" accepting the
longest prefix of the draft equal to the recording plus the model's next id,
update_candidate_strategy with the number of matches."""
import json
import os
import types

import torch

__version__ = "0.0-recording"


def _accepted_prefix(draft, generation, pos):
    n = 0
    while n < len(draft) and pos + n < len(generation) and draft[n] == generation[pos + n]:
        n += 1
    return n


class RecordedModel:
    def __init__(self, prompt, generation):
        self.prompt, self.generation = list(prompt), list(generation)
        self.drafted = []  # draft lengths, per get_candidates call

    def generate(self, inputs, prompt_lookup_num_tokens=None, max_new_tokens=20,
                 do_sample=False):
        prompt, gen = self.prompt, self.generation
        if inputs[0].tolist() != prompt:
            raise ValueError("RecordedModel: not the recorded prompt")
        config = types.SimpleNamespace(max_length=inputs.shape[1] + max_new_tokens)
        generator = self._get_candidate_generator(generation_config=config, input_ids=inputs)
        ids = torch.cat((inputs, torch.tensor([gen[:1]])), dim=-1)
        limit = min(config.max_length, len(prompt) + len(gen))
        while ids.shape[1] < limit:
            candidates, _ = generator.get_candidates(ids)
            pos = ids.shape[1] - len(prompt)
            draft = candidates[0, ids.shape[1]:].tolist()
            self.drafted.append(len(draft))
            k = _accepted_prefix(draft, gen, pos)
            ids = torch.cat((ids, torch.tensor([gen[pos:pos + k + 1]])), dim=-1)
            generator.update_candidate_strategy(ids, None, torch.tensor(k))
        return ids[:, :limit]

    def _get_candidate_generator(self, **kwargs):
        raise AssertionError("the prompt lookup generator must not be used")


def _recording(folder):
    with open(os.path.join(folder, "recording.json")) as f:
        return json.load(f)


class RecordedTokenizer:
    def __init__(self, recording):
        self.recording = recording

    def __call__(self, text, return_tensors=None):
        if text != self.recording["prompt_text"]:
            raise ValueError("RecordedTokenizer: not the recorded prompt text")
        return types.SimpleNamespace(input_ids=torch.tensor([self.recording["prompt"]]))

    def decode(self, ids):
        return " ".join(str(int(i)) for i in ids)


class AutoTokenizer:
    @staticmethod
    def from_pretrained(folder):
        return RecordedTokenizer(_recording(folder))


class AutoModelForCausalLM:
    @staticmethod
    def from_pretrained(folder):
        recording = _recording(folder)
        return RecordedModel(recording["prompt"], recording["generation"])
