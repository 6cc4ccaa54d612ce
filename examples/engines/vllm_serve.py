"""vLLM with SAM-Decoding drafts: the custom_class speculative method.

    SAM_INDEX=chat.sam python3 vllm_serve.py MODEL "PROMPT" [NUM_SPECULATIVE_TOKENS]

MODEL is a Hugging Face model name or folder whose tokenizer built the index
(SAM_TOKENIZER, optional, checks that at start-up). vLLM constructs
samdecoding.vllm.SamProposer in each worker process, which reads SAM_INDEX,
SAM_POLICY (default sam-cal), SAM_TOKENIZER and SAM_OPTIONS from the
environment it inherits (docs/embedding.md, "Serving engines").
"""
import sys


def main(argv):
    if len(argv) not in (3, 4):
        print(__doc__, file=sys.stderr)
        return 2
    model, prompt = argv[1], argv[2]
    k = int(argv[3]) if len(argv) == 4 else 8
    # example-begin: vllm-serve
    from vllm import LLM, SamplingParams

    llm = LLM(model=model,
              speculative_config={"method": "custom_class",
                                  "model": "samdecoding.vllm.SamProposer",
                                  "num_speculative_tokens": k})
    for output in llm.generate([prompt], SamplingParams(temperature=0, max_tokens=200)):
        print(output.outputs[0].text)
    # example-end: vllm-serve
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
