"""SGLang with SAM-Decoding drafts: the SAM speculative algorithm (a plugin).

    SGLANG_PLUGINS=samdecoding SAM_INDEX=chat.sam python3 sglang_serve.py MODEL "PROMPT" [NODES]

MODEL is a Hugging Face model name or folder whose tokenizer built the index.
samdecoding, installed with pip, is an SGLang plugin (entry point group
sglang.plugins): every scheduler process registers the SAM algorithm, whose
worker drafts a tree of NODES tokens per request from SAM_INDEX with
SAM_POLICY (default sam-cal) (docs/embedding.md, "Serving engines").
"""
import sys


def main(argv):
    if len(argv) not in (3, 4):
        print(__doc__, file=sys.stderr)
        return 2
    model, prompt = argv[1], argv[2]
    nodes = int(argv[3]) if len(argv) == 4 else 16
    # example-begin: sglang-serve
    import sglang as sgl

    engine = sgl.Engine(model_path=model, speculative_algorithm="SAM",
                        speculative_num_draft_tokens=nodes)
    print(engine.generate(prompt, {"temperature": 0, "max_new_tokens": 200})["text"])
    engine.shutdown()
    # example-end: sglang-serve
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
