"""Hugging Face transformers with SAM-Decoding drafts: a candidate generator.

    python3 hf_generate.py MODEL INDEX "PROMPT" [NUM_OUTPUT_TOKENS]

MODEL is a Hugging Face model name or folder whose tokenizer built INDEX.
samdecoding.hf.generate runs the model's assisted generation with
SamCandidateGenerator's drafts (greedy here; sampling is exact too), then this
prints the text and the drafts' mean accepted tokens per step (docs/embedding.md,
"Serving engines").
"""
import sys


def main(argv):
    if len(argv) not in (4, 5):
        print(__doc__, file=sys.stderr)
        return 2
    model_name, index, prompt = argv[1:4]
    k = int(argv[4]) if len(argv) == 5 else 10
    # example-begin: hf-generate
    import samdecoding.hf
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(model_name)
    model = AutoModelForCausalLM.from_pretrained(model_name)
    inputs = tok(prompt, return_tensors="pt").input_ids
    generator = samdecoding.hf.SamCandidateGenerator(index, num_output_tokens=k, policy="sam-cal")
    out = samdecoding.hf.generate(model, inputs, index, candidate_generator=generator,
                                  max_new_tokens=200, do_sample=False)
    print(tok.decode(out[0][inputs.shape[1]:]))
    total = generator.metrics()["total"]
    steps = sum(s["steps"] for s in total.values())
    accepted = sum(s["accepted"] for s in total.values())
    print(f"drafted steps {steps}, accepted {accepted}")
    # example-end: hf-generate
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
