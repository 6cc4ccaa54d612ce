#!/usr/bin/env python3
"""sam-replay --report, --draft-sizes and --cost-curve, end to end on a small ids index.

The HTML page must be well-formed XML with no scripts or fetched resources, and every chart must
hold the numbers of the JSON output of the same run: each mark's data attributes are compared
with the JSON, and its geometry (bar lengths, point positions) must be a linear function of those
numbers. Also: the report directory rules (created if missing, a foreign index.html never
replaced, other files untouched), the cost curve errors (exit 1, naming file and line), and
--save-cache / --load-cache (replaying Y after loading the cache saved after X drafts exactly as
replaying X then Y does).

    replay_report_test.py BIN_DIR
"""
import json
import os
import random
import subprocess
import sys
import tempfile
import unittest
import xml.etree.ElementTree as ET

BIN = sys.argv.pop(1) if len(sys.argv) > 1 else "build/bin"
SVG = "{http://www.w3.org/2000/svg}"
XHTML = "{http://www.w3.org/1999/xhtml}"


def run(*args):
    return subprocess.run([os.path.join(BIN, args[0]), *args[1:]], capture_output=True, text=True)


class ReplayReportTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        d = cls.tmp.name
        rng = random.Random(5)
        phrases = [[rng.randrange(2, 40) for _ in range(rng.randrange(3, 8))] for _ in range(10)]

        def sentence(parts):
            out = []
            for _ in range(parts):
                out += rng.choice(phrases)
                if rng.random() < 0.3:
                    out.append(rng.randrange(2, 40))
            return out

        with open(os.path.join(d, "corpus.jsonl"), "w") as f:
            for _ in range(80):
                f.write(json.dumps(sentence(8)) + "\n")
        with open(os.path.join(d, "traces.jsonl"), "w") as f:
            for i in range(16):
                f.write(json.dumps({"id": str(i), "category": "code" if i % 3 == 0 else "chat",
                                    "prompt_ids": [1] + sentence(3),
                                    "output_ids": sentence(10)}) + "\n")
        with open(os.path.join(d, "curve.csv"), "w") as f:
            f.write("# test curve\ntokens,cost\n1,10\n4,11\n16,14\n")
        r = run("sam-build", "-o", os.path.join(d, "idx.sam"), "--vocab-size", "41",
                "--corpus", "ids=" + os.path.join(d, "corpus.jsonl"))
        assert r.returncode == 0, r.stderr
        cls.base = ["sam-replay", "--index", os.path.join(d, "idx.sam"),
                    "--traces", os.path.join(d, "traces.jsonl")]
        cls.report = os.path.join(d, "report")
        r = run(*cls.base, "--json", "--draft-sizes", "4,8,16", "--cost-curve",
                os.path.join(d, "curve.csv"), "--report", cls.report)
        assert r.returncode == 0, r.stderr
        cls.json = json.loads(r.stdout)
        cls.page = os.path.join(cls.report, "index.html")
        cls.root = ET.parse(cls.page).getroot()  # well-formed, or this raises

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def marks(self, chart):
        svgs = [e for e in self.root.iter(SVG + "svg") if e.get("data-chart") == chart]
        self.assertEqual(len(svgs), 1, chart)
        return [e for e in svgs[0].iter() if e.get("data-policy") is not None]

    def by_key(self, chart):
        out = {}
        for m in self.marks(chart):
            key = (m.get("data-policy"), m.get("data-key"))
            self.assertNotIn(key, out, chart)
            self.assertEqual(m.get("data-chart"), chart)
            out[key] = m
        return out

    def assert_linear(self, pairs, what):
        """Pixels = a + b * value for every (value, pixels) pair, within rounding."""
        pairs = sorted(pairs)
        lo, hi = pairs[0], pairs[-1]
        self.assertGreater(hi[0] - lo[0], 0, what)
        b = (hi[1] - lo[1]) / (hi[0] - lo[0])
        for v, px in pairs:
            self.assertAlmostEqual(px, lo[1] + b * (v - lo[0]), delta=0.03, msg=what)
        return b

    def test_page_names_its_run(self):
        """The page names the index, the traces, the policies and every option given."""
        with open(self.page) as f:
            text = f.read()
        self.assertIn("<code>" + self.base[2] + "</code>", text)
        self.assertIn("<code>" + self.base[4] + "</code>", text)
        for p in self.json["policies"]:
            self.assertIn("<code>" + p["name"] + "</code>", text)
        self.assertIn("<code>--draft-sizes 4 8 16</code>", text)
        self.assertIn("<code>--cost-curve " + self.base[4].replace("traces.jsonl", "curve.csv")
                      + "</code>", text)
        self.assertEqual(self.json["run"]["indexes"], [self.base[2]])
        self.assertEqual(self.json["run"]["traces_file"], self.base[4])

    def test_page_is_self_contained(self):
        self.assertEqual(self.root.tag, XHTML + "html")
        for e in self.root.iter():
            self.assertNotIn(e.tag.split("}")[-1], ("script", "link", "img", "iframe", "object"))
            for name, value in e.attrib.items():
                self.assertNotIn(name.split("}")[-1], ("src", "href"), e.tag)
                self.assertFalse(name.startswith("on"), name)
        with open(self.page) as f:
            text = f.read()
        self.assertNotIn("http://w", text.replace("http://www.w3.org/", ""))
        self.assertIn('<meta name="generator" content="sam-replay"/>', text)

    def test_mat_chart(self):
        marks = self.by_key("mat")
        expected = {}
        for p in self.json["policies"]:
            expected[(p["name"], "all")] = p["mat"]
            for c, v in p["by_category"].items():
                expected[(p["name"], c)] = v["mat"]
        self.assertEqual(set(marks), set(expected))
        pairs = []
        for key, m in marks.items():
            self.assertEqual(float(m.get("data-value")), expected[key], key)
            pairs.append((expected[key], float(m.get("height"))))
        self.assertGreater(self.assert_linear(pairs + [(0.0, 0.0)], "mat bar heights"), 0)

    def test_depth_chart(self):
        marks = self.by_key("depth")
        expected = {(p["name"], str(d + 1)): v for p in self.json["policies"]
                    for d, v in enumerate(p["accepted_at_depth"])}
        self.assertEqual(set(marks), set(expected))
        for key, m in marks.items():
            self.assertEqual(float(m.get("data-value")), expected[key], key)
        self.assert_linear([(expected[k], float(m.get("cy"))) for k, m in marks.items()], "depth y")
        self.assert_linear([(int(k[1]), float(m.get("cx"))) for k, m in marks.items()], "depth x")

    def check_budget(self, chart, field):
        marks = self.by_key(chart)
        expected = {(p["name"], str(q["draft_size"])): q for p in self.json["policies"]
                    for q in p["budget_curve"]}
        self.assertEqual(set(marks), set(expected))
        ys, xs = [], []
        for key, m in marks.items():
            self.assertEqual(float(m.get("data-value")), expected[key][field], key)
            self.assertEqual(float(m.get("data-x")), expected[key]["tokens_per_step"], key)
            ys.append((expected[key][field], float(m.get("cy"))))
            xs.append((expected[key]["tokens_per_step"], float(m.get("cx"))))
        self.assert_linear(ys, chart + " y")
        self.assert_linear(xs, chart + " x")

    def test_budget_chart(self):
        self.check_budget("budget", "mat")
        self.check_budget("speedup", "projected_speedup")
        for p in self.json["policies"]:
            self.assertEqual([q["draft_size"] for q in p["budget_curve"]], [4, 8, 16])
            for q in p["budget_curve"]:
                self.assertLessEqual(q["tokens_per_step"], q["draft_size"])

    def test_sources_chart(self):
        marks = self.by_key("sources")
        expected = {(p["name"], s): v for p in self.json["policies"]
                    for s, v in p["by_source"].items()}
        self.assertEqual(set(marks), set(expected))
        for key, m in marks.items():
            self.assertEqual(float(m.get("data-value")), expected[key]["share"], key)
            self.assertEqual(float(m.get("data-mat")), expected[key]["mat"], key)
        self.assert_linear([(expected[k]["share"], float(m.get("width"))) for k, m in marks.items()]
                           + [(0.0, 0.0)], "source bar widths")
        for p in self.json["policies"]:
            self.assertAlmostEqual(sum(v["share"] for v in p["by_source"].values()), 1.0)

    def test_step_time_chart(self):
        marks = self.by_key("steptime")
        expected = {}
        for p in self.json["policies"]:
            h = p["step_us_histogram"]
            self.assertEqual(len(h["counts"]), len(h["edges_us"]))
            self.assertEqual(sum(h["counts"]), p["steps"])
            for b, c in enumerate(h["counts"]):
                expected[(p["name"], str(b))] = (c, c / p["steps"])
        self.assertEqual(set(marks), set(expected))
        for key, m in marks.items():
            self.assertEqual(int(m.get("data-count")), expected[key][0], key)
            self.assertAlmostEqual(float(m.get("data-value")), expected[key][1], places=12)
        self.assert_linear([(expected[k][1], float(m.get("cy"))) for k, m in marks.items()],
                           "step time y")

    def test_cost_curve_in_json(self):
        self.assertEqual(self.json["cost_curve"]["relative"], [[1, 1.0], [4, 1.1], [16, 1.4]])
        cal = [p for p in self.json["policies"] if p["name"] == "sam-cal"][0]
        self.assertTrue(cal["cost_aware"])
        for p in self.json["policies"]:
            self.assertGreater(p["projected_speedup"], 0)
            # Speed-up = tokens / cost with cost >= steps * 1 and <= steps * t(size) bound.
            self.assertLessEqual(p["projected_speedup"], p["mat"] + 1e-12)

    def test_report_directory_rules(self):
        d = self.tmp.name
        # Re-running over its own report replaces it; other files stay.
        with open(os.path.join(self.report, "notes.txt"), "w") as f:
            f.write("mine")
        r = run(*self.base, "--policy", "sam", "--report", self.report)
        self.assertEqual(r.returncode, 0, r.stderr)
        with open(os.path.join(self.report, "notes.txt")) as f:
            self.assertEqual(f.read(), "mine")
        self.assertEqual([n for n in os.listdir(self.report) if ".tmp" in n or ".probe" in n], [])
        # A foreign index.html is never replaced.
        foreign = os.path.join(d, "foreign")
        os.mkdir(foreign)
        with open(os.path.join(foreign, "index.html"), "w") as f:
            f.write("<html>someone's page</html>")
        r = run(*self.base, "--policy", "sam", "--report", foreign)
        self.assertEqual(r.returncode, 2)
        self.assertIn("not written by sam-replay", r.stderr)
        with open(os.path.join(foreign, "index.html")) as f:
            self.assertEqual(f.read(), "<html>someone's page</html>")
        # Not a directory; a missing parent; a link.
        r = run(*self.base, "--report", os.path.join(d, "traces.jsonl"))
        self.assertEqual(r.returncode, 2)
        self.assertIn("not a directory", r.stderr)
        r = run(*self.base, "--report", os.path.join(d, "no", "such"))
        self.assertEqual(r.returncode, 2)
        self.assertIn("does not exist", r.stderr)
        os.symlink(self.report, os.path.join(d, "link"))
        r = run(*self.base, "--report", os.path.join(d, "link"))
        self.assertEqual(r.returncode, 2)
        self.assertIn("symbolic link", r.stderr)

    def test_cost_curve_errors(self):
        d = self.tmp.name
        bad = os.path.join(d, "bad.csv")
        with open(bad, "w") as f:
            f.write("tokens,cost\n1,10\n8,abc\n")
        out = os.path.join(d, "not-written")
        r = run(*self.base, "--cost-curve", bad, "--report", out)
        self.assertEqual(r.returncode, 1)
        self.assertRegex(r.stderr, r"^sam-replay: .*bad\.csv: line 3: field 'cost'")
        self.assertFalse(os.path.exists(out))  # nothing written after a failure
        r = run(*self.base, "--cost-curve", os.path.join(d, "missing.csv"))
        self.assertEqual(r.returncode, 1)
        self.assertIn("missing.csv", r.stderr)
        r = run(*self.base, "--project-only")
        self.assertEqual(r.returncode, 2)
        r = run(*self.base, "--draft-sizes", "0,8")
        self.assertEqual(r.returncode, 2)



    def test_child_records_draft_the_same(self):
        def without_timings(x):
            if isinstance(x, dict):
                return {k: without_timings(v) for k, v in x.items()
                        if "_us" not in k and "histogram" not in k}
            if isinstance(x, list):
                return [without_timings(v) for v in x]
            return x
        out = []
        for extra in ((), ("--child-records",)):
            r = run(*self.base, "--policy", "sam-cal", "--policy", "sam-tree", "--json", *extra)
            self.assertEqual(r.returncode, 0, r.stderr)
            replay = json.loads(r.stdout)
            self.assertEqual(replay.pop("run")["options"].get("--child-records"), extra and True or None)
            out.append(without_timings(replay))
        self.assertEqual(out[0], out[1])
        self.assertGreater(out[0]["policies"][0]["mat"], 1.0)

    def test_widths(self):
        # 8 is the default of sam-tree's --tree-width and of sam-cal's calibrated_width
        # (an experimental tuning parameter); narrower trees verify fewer tokens a step.
        def replay(*extra):
            r = run(*self.base, "--policy", "sam-cal", "--policy", "sam-tree", "--json", *extra)
            self.assertEqual(r.returncode, 0, r.stderr)
            return {p["name"]: p for p in json.loads(r.stdout)["policies"]}
        default = replay()
        eight = replay("--tree-width", "8", "--experimental", "calibrated_width=8")
        one = replay("--tree-width", "1", "--experimental", "calibrated_width=1")
        cal_one = replay("--experimental", "calibrated_width=1")
        for name in ("sam-cal", "sam-tree"):
            self.assertEqual(default[name]["mat"], eight[name]["mat"])
            self.assertEqual(default[name]["tokens_per_step"], eight[name]["tokens_per_step"])
            self.assertLess(one[name]["tokens_per_step"], default[name]["tokens_per_step"], name)
        # Each width reaches its own policy only.
        self.assertEqual(cal_one["sam-tree"]["tokens_per_step"], default["sam-tree"]["tokens_per_step"])
        self.assertEqual(cal_one["sam-cal"]["tokens_per_step"], one["sam-cal"]["tokens_per_step"])
        r = run(*self.base, "--tree-width", "0")
        self.assertEqual(r.returncode, 2)
        self.assertIn("tree-width", r.stderr)

    def test_saved_cache_resumes_the_replay(self):
        d = self.tmp.name
        with open(os.path.join(d, "traces.jsonl")) as f:
            traces = [json.loads(line) for line in f]
        # X then Y in one replay: one tenant (no --tenant-field), categories x and y.
        paths = {}
        labelled = [dict(t, category="x" if i < 8 else "y") for i, t in enumerate(traces)]
        for name, part in (("xy", labelled), ("x", labelled[:8]), ("y", labelled[8:])):
            paths[name] = os.path.join(d, f"cache-{name}.jsonl")
            with open(paths[name], "w") as f:
                for t in part:
                    f.write(json.dumps(t) + "\n")
        idx = os.path.join(d, "idx.sam")
        saved = os.path.join(d, "x.samc")

        def replay(name, *extra):
            r = run("sam-replay", "--index", idx, "--traces", paths[name], "--policy", "sam",
                    "--policy", "sam-cal", "--json", "--cross-request", *extra)
            self.assertEqual(r.returncode, 0, r.stderr)
            return {p["name"]: p for p in json.loads(r.stdout)["policies"]}

        both = replay("xy")
        replay("x", "--save-cache", saved)
        self.assertTrue(os.path.exists(saved))
        # sam-inspect reads it: one tenant (""), X's 8 outputs and their tokens.
        r = run("sam-inspect", "--json", saved)
        self.assertEqual(r.returncode, 0, r.stderr)
        info = json.loads(r.stdout)
        self.assertEqual(info["kind"], "response cache")
        self.assertEqual(info["responses"], 8)
        self.assertEqual(info["tenants"], [{"tenant": "", "responses": 8,
                                            "tokens": sum(len(t["output_ids"])
                                                          for t in traces[:8])}])
        self.assertEqual(info["tokenizer_sha256"], "")
        r = run("sam-inspect", saved)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("8 responses", r.stdout)
        resumed = replay("y", "--load-cache", saved)
        cold = replay("y")
        # The paper rule learns nothing across traces: Y drafts the same as after X.
        self.assertEqual(resumed["sam"]["by_category"]["y"], both["sam"]["by_category"]["y"])
        self.assertEqual(resumed["sam"]["cache"]["responses"], len(traces))
        self.assertEqual(cold["sam"]["cache"]["responses"], len(traces) - 8)
        self.assertNotEqual(cold["sam"]["by_category"]["y"], both["sam"]["by_category"]["y"])
        # Refusals: exit 2 for flags that cannot apply, exit 1 naming a bad cache file.
        for extra in (["--save-cache", saved], ["--load-cache", saved]):
            r = run("sam-replay", "--index", idx, "--traces", paths["y"], *extra)
            self.assertEqual(r.returncode, 2, r.stderr)
            self.assertIn("need --cross-request", r.stderr)
        r = run("sam-replay", "--index", idx, "--traces", paths["y"], "--policy", "pld",
                "--cross-request", "--save-cache", os.path.join(d, "pld.samc"))
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertIn("pld keeps no cache", r.stderr)
        self.assertFalse(os.path.exists(os.path.join(d, "pld.samc")))
        bad = os.path.join(d, "bad.samc")
        with open(bad, "w") as f:
            f.write("not a cache")
        r = run("sam-replay", "--index", idx, "--traces", paths["y"], "--policy", "sam",
                "--cross-request", "--load-cache", bad)
        self.assertEqual(r.returncode, 1, r.stderr)
        self.assertIn("bad.samc", r.stderr)


if __name__ == "__main__":
    unittest.main(verbosity=2)
