"""Tests of the SDSAT fine-tuning recipe (tools/sdsat: sdsat_model.py, finetune.py).

Run by CTest with Debian's python3 (python3-torch, numpy). SAM_GENERATE: the
sam-generate binary (the C++ model is the oracle of the Python one; the test
skips without it), SAM_TOKENIZER: the 32K SentencePiece model (sam-generate
needs one; skipped with a message when absent).
"""
import json
import os
import subprocess
import sys
import tempfile
import unittest

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tools", "sdsat"))
import sdsat_model as sm  # noqa: E402

FINETUNE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tools", "sdsat",
                        "finetune.py")


def tiny(vocab=40, seed=0, kv_heads=2, tie=False):
    config = sm.LlamaConfig(vocab_size=vocab, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                            num_attention_heads=4, num_key_value_heads=kv_heads, tie_word_embeddings=tie)
    return sm.Llama(config).init_random(seed, std=0.2)


class SafetensorsTest(unittest.TestCase):
    def test_round_trip_every_dtype(self):
        tensors = {"a": torch.randn(3, 5), "b": torch.randn(7).half(), "c": torch.randn(2, 2).bfloat16(),
                   "empty": torch.zeros(0, 3)}
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "t.safetensors")
            sm.write_safetensors(path, tensors, {"k": "v"})
            back = sm.read_safetensors(path)
            self.assertEqual(sorted(back), sorted(tensors))
            for k, t in tensors.items():
                self.assertEqual(back[k].dtype, t.dtype, k)
                self.assertTrue(torch.equal(back[k], t), k)
            self.assertEqual([f for f in os.listdir(d)], ["t.safetensors"], "no temporary file left")

    def test_corrupt_files_name_the_file(self):
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "bad.safetensors")
            sm.write_safetensors(path, {"a": torch.randn(4, 4)})
            data = open(path, "rb").read()
            for broken, why in ((data[:5], "truncated"), (data[:-8], "do not hold"),
                                (b"\x05\x00\x00\x00\x00\x00\x00\x00{nope", "not JSON"),
                                (b"\xff" * 8 + data[8:], "exceeds")):
                open(path, "wb").write(broken)
                with self.assertRaisesRegex(sm.CheckpointError, "bad.safetensors.*" + why):
                    sm.read_safetensors(path)

    def test_model_save_load(self):
        model = tiny(tie=True)
        with tempfile.TemporaryDirectory() as d:
            model.save(d)
            back = sm.Llama.load(d)
            ids = torch.tensor([[1, 5, 9, 3]])
            self.assertTrue(torch.equal(model(ids), back(ids)))
            self.assertTrue(back.config.tie_word_embeddings)


class CppAgreementTest(unittest.TestCase):
    """The Python model is the C++ backend's model: same greedy output on a
    checkpoint written by bench-random-model."""

    def test_greedy_equals_sam_generate(self):
        exe, tok = os.environ.get("SAM_GENERATE"), os.environ.get("SAM_TOKENIZER")
        rnd = os.environ.get("SAM_RANDOM_MODEL")
        if not exe or not os.path.exists(exe) or not rnd or not os.path.exists(rnd):
            self.skipTest("SAM_GENERATE or SAM_RANDOM_MODEL is not set (a build without the torch "
                          "backend)")
        if not tok or not os.path.exists(tok):
            self.skipTest("the 32K tokenizer (../shared/data/tokenizer/llama-32k.model) is absent")
        with tempfile.TemporaryDirectory() as d:
            ckpt = os.path.join(d, "rnd")
            subprocess.run([rnd, "--out", ckpt, "--tokenizer", tok, "--layers", "2",
                            "--hidden", "64", "--seed", "5"], check=True, capture_output=True)
            prompt = json.loads(subprocess.run(
                [exe, "--tokenizer", tok, "--template", "raw", "--prompt", "Name three colours.",
                 "--print-prompt-ids"], check=True, capture_output=True, text=True).stdout)
            out = json.loads(subprocess.run(
                [exe, "--model", ckpt, "--tokenizer", tok, "--template", "raw", "--prompt",
                 "Name three colours.", "--no-spec", "--json", "--max-new-tokens", "24"],
                check=True, capture_output=True, text=True).stdout)
            model = sm.Llama.load(ckpt)
            self.assertEqual(sm.greedy(model, prompt, 24), out["output_ids"])


def naive_sequence(tokens, anchors, adaptive):
    """An independent construction of an SDSAT sequence: lists of (kind,
    anchor, j) per slot, then the rules applied pairwise."""
    slots = []
    for i, x in enumerate(tokens):
        slots.append(("std", i, 0, x))
        if i in anchors:
            for j in range(1, len(adaptive) + 1):
                slots.append(("ada", i, j, adaptive[j - 1]))
    ids = [s[3] for s in slots]
    pos = [s[1] + s[2] for s in slots]
    labels = []
    for kind, p, j, _ in slots:
        target = p + 1 + j
        labels.append(tokens[target] if target < len(tokens) else -100)
    allowed = []
    for qi, (qk, qp, qj, _) in enumerate(slots):
        row = []
        for ki, (kk, kp, kj, _) in enumerate(slots):
            if qk == "std":
                row.append(kk == "std" and kp <= qp)
            else:
                row.append((kk == "std" and kp <= qp) or (kk == "ada" and kp == qp and kj <= qj))
        allowed.append(row)
    return ids, pos, labels, allowed


class SatSequenceTest(unittest.TestCase):
    def test_equals_the_naive_construction(self):
        import random
        rng = random.Random(3)
        for trial in range(50):
            n = rng.randrange(2, 20)
            tokens = [rng.randrange(40) for _ in range(n)]
            anchors = rng.sample(range(n), rng.randrange(0, min(4, n) + 1))
            adaptive = [39] * rng.randrange(1, 5)
            ids, pos, labels, allowed, kind = sm.sat_sequence(tokens, anchors, adaptive)
            want = naive_sequence(tokens, set(anchors), adaptive)
            self.assertEqual(ids.tolist(), want[0], trial)
            self.assertEqual(pos.tolist(), want[1], trial)
            self.assertEqual(labels.tolist(), want[2], trial)
            self.assertEqual(allowed.tolist(), want[3], trial)

    def test_standard_logits_ignore_adaptive_blocks(self):
        """Standard tokens never attend to adaptive ones: their logits are the
        plain sequence's, whatever blocks are inserted."""
        model = tiny()
        tokens = [1, 7, 3, 9, 12, 5, 6, 2, 8, 30]
        plain = model(torch.tensor([tokens]))[0]
        ids, pos, _, allowed, kind = sm.sat_sequence(tokens, [1, 4, 8], [39, 38, 37])
        logits = model(ids[None], pos[None], allowed[None])[0]
        torch.testing.assert_close(logits[~kind], plain, rtol=1e-5, atol=1e-5)

    def test_adaptive_token_at_the_end_is_plain_causal_attention(self):
        """Inference appends the block after the context: the training mask
        and positions give the same logits there."""
        model = tiny()
        tokens = [1, 7, 3, 9, 12]
        ids, pos, _, allowed, kind = sm.sat_sequence(tokens, [4], [39, 39])
        masked = model(ids[None], pos[None], allowed[None])[0]
        causal = model(torch.tensor([tokens + [39, 39]]))[0]
        torch.testing.assert_close(masked, causal, rtol=1e-5, atol=1e-5)


class SchemeTest(unittest.TestCase):
    def test_two_pass_equals_plain_greedy_for_any_checkpoint_and_ids(self):
        for seed, ids in ((0, [39] * 3), (1, [35, 36, 37, 38]), (2, [0])):
            model = tiny(seed=seed)
            prompt = [1, 4, 9, 16, 25 % 40]
            out, passes, accepted = sm.sdsat_greedy(model, prompt, 30, ids)
            self.assertEqual(out, sm.greedy(model, prompt, 30), seed)
            self.assertEqual(passes, 2 * len(accepted))


class FinetuneCliTest(unittest.TestCase):
    def run_cli(self, *args):
        return subprocess.run([sys.executable, FINETUNE] + list(args), capture_output=True, text=True)

    def test_training_teaches_the_adaptive_tokens_and_keeps_plain_logits_close(self):
        with tempfile.TemporaryDirectory() as d:
            data = os.path.join(d, "data.txt")
            # A language with one continuation: 2 3 4 5 6 7 ... repeated.
            with open(data, "w") as f:
                for s in range(40):
                    f.write(" ".join(str(2 + (s + i) % 20) for i in range(40)) + "\n")
            base = os.path.join(d, "base")
            tiny().save(base)
            r = self.run_cli("--model", base, "--out", os.path.join(d, "out"), "--data", data,
                             "--adaptive-ids", "39", "--block-length", "3", "--steps", "60",
                             "--lr", "5e-3", "--batch", "8", "--seq-len", "24", "--threads", "1")
            self.assertEqual(r.returncode, 0, r.stderr)
            before = [float(x) for x in r.stdout.split("adaptive accuracy by j [")[1].split("]")[0].split(",")]
            after = [float(x) for x in r.stdout.split("adaptive accuracy by j [")[2].split("]")[0].split(",")]
            self.assertGreater(min(after), max(before), r.stdout)
            config = json.load(open(os.path.join(d, "out", "config.json")))
            self.assertEqual(config["sdsat_tokens"], [39, 39, 39])

    def test_bad_flags_and_inputs(self):
        with tempfile.TemporaryDirectory() as d:
            base = os.path.join(d, "base")
            tiny().save(base)
            data = os.path.join(d, "data.txt")
            open(data, "w").write("1 2 3 4 5 6 7 8 9 10\n")
            r = self.run_cli("--model", base, "--out", d + "/o", "--data", data, "--adaptive-ids", "40")
            self.assertEqual(r.returncode, 2)
            self.assertIn("outside the vocabulary [0, 40)", r.stderr)
            r = self.run_cli("--model", base, "--out", d + "/o", "--data", data, "--adaptive-ids", "1,2",
                             "--block-length", "3")
            self.assertEqual(r.returncode, 2)
            self.assertIn("2 ids for --block-length 3", r.stderr)
            r = self.run_cli("--model", base, "--out", d + "/o", "--data", d + "/missing.txt")
            self.assertEqual(r.returncode, 1)
            self.assertIn("missing.txt", r.stderr)
            open(data, "w").write("1 2 x\n")
            r = self.run_cli("--model", base, "--out", d + "/o", "--data", data)
            self.assertEqual(r.returncode, 1)
            self.assertIn("data.txt:1", r.stderr)
            r = self.run_cli("--model", d + "/nothing", "--out", d + "/o", "--data", data)
            self.assertEqual(r.returncode, 1)
            self.assertIn("config.json", r.stderr)
            self.assertFalse(os.path.exists(d + "/o"), "nothing written on errors")


if __name__ == "__main__":
    unittest.main()
