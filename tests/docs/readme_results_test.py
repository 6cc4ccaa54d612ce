#!/usr/bin/env python3
"""The README's Results block says what docs/performance.md says.

tools/bench/report.sh writes both from one run; this catches a block edited by hand, or a
performance document regenerated without its README (report.py without --readme). Checks,
against the performance document's own tables: every policy's MAT and tokens verified per step
(the "Drafting quality" table), every policy's step cost at 1K (the "Per-step cost" table), the
index's bytes per token and build speed (the "Index" table).

  readme_results_test.py SOURCE_DIR
  readme_results_test.py --self-test     the checks fail on altered copies of the two texts
"""
import os
import re
import sys


def rows(text, heading):
    """The data rows of the first table after `heading`, as lists of cells."""
    at = text.find(heading)
    if at < 0:
        raise ValueError(f"no '{heading}'")
    out, started = [], False
    for line in text[at:].splitlines()[1:]:
        if line.startswith("|"):
            started = True
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            if not set("".join(cells)) <= set("-: "):
                out.append(cells)
        elif started:
            break
    return out[1:]  # without the header


def policy_name(cell):
    m = re.search(r"`([a-z-]+)`", cell)
    return m.group(1) if m else None


def problems(readme, perf):
    """What the README's block says that the performance document does not."""
    found = []
    begin, end = readme.find("<!-- results:"), readme.find("<!-- /results -->")
    if begin < 0 or end < begin:
        return ["README.md has no Results block (<!-- results: ... --> ... <!-- /results -->)"]
    block = readme[begin:end]
    quality = {policy_name(r[0]): r for r in rows(perf, "## Drafting quality")}
    step = {}
    for r in rows(perf, "## Per-step cost"):
        if r[0] == "1024":
            step[policy_name(r[1])] = r
    for r in rows(block, "<!-- results:"):  # the block's first table: the policies
        name = policy_name(r[0])
        if name is None or len(r) < 4 or name == "sglang-ngram":
            continue
        mat, tokens, cost = (c.strip("*") for c in r[1:4])
        q = quality.get(name)
        if q is None:
            found.append(f"README: `{name}` is not in docs/performance.md's Drafting quality table")
            continue
        if (mat, tokens) != (q[1], q[2]):
            found.append(f"README: `{name}` MAT / tokens per step {mat} / {tokens}, "
                         f"docs/performance.md {q[1]} / {q[2]}")
        if cost:
            s = step.get(name)
            want = f"{s[2]} us" if s else None
            if cost != want:
                found.append(f"README: `{name}` step cost at 1K '{cost}', docs/performance.md "
                             f"'{want}'")
    index = {r[0]: r[1] for r in rows(perf, "## Index")}
    file_cell = next((v for k, v in index.items() if k == "index file"), "")
    m = re.search(r"([\d.]+) bytes/token", file_cell)
    b = re.search(r"([\d.]+) bytes a token", block)
    if not m or not b or f"{float(m.group(1)):.1f}" != b.group(1):
        found.append(f"README: {b.group(1) if b else '?'} bytes a token, docs/performance.md "
                     f"{m.group(1) if m else '?'}")
    speed_cell = next((v for k, v in index.items() if k.startswith("build, end to end")), "")
    m = re.search(r"([\d.]+)M tokens/s", speed_cell)
    b = re.search(r"built at ([\d.]+)M tokens/s", block)
    if not m or not b or m.group(1) != b.group(1):
        found.append(f"README: built at {b.group(1) if b else '?'}M tokens/s, "
                     f"docs/performance.md {m.group(1) if m else '?'}")
    return found


def self_test(readme, perf):
    """Each alteration must be caught, and the texts as they are must pass."""
    assert not problems(readme, perf), problems(readme, perf)
    mat = re.search(r"\*\*`sam-cal`\*\* \(default\) \| \*\*([\d.]+)\*\*", readme)
    assert mat, "the README's sam-cal row"
    altered = [
        readme.replace(mat.group(0), mat.group(0).replace(mat.group(1), "9.999")),
        readme.replace("bytes a token", "bytes each"),
        re.sub(r"built at [\d.]+M", "built at 0.01M", readme),
        readme.replace("<!-- /results -->", ""),
    ]
    for k, text in enumerate(altered):
        assert problems(text, perf), f"alteration {k} of README.md was not caught"
    cal = re.search(r"^\| `sam-cal` \| ([\d.]+) \|", perf, re.M)
    assert cal, "docs/performance.md's sam-cal row"
    assert problems(readme, perf.replace(cal.group(0), "| `sam-cal` | 0.001 |")), \
        "an altered docs/performance.md was not caught"
    print("readme_results_test: self-test passed (5 alterations caught)")


def main():
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    source = sys.argv[1]
    if source == "--self-test":
        source = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
    with open(os.path.join(source, "README.md")) as f:
        readme = f.read()
    with open(os.path.join(source, "docs", "performance.md")) as f:
        perf = f.read()
    if sys.argv[1] == "--self-test":
        self_test(readme, perf)
        return 0
    found = problems(readme, perf)
    for p in found:
        print(f"FAIL: {p}")
    if found:
        print("tools/bench/report.sh writes both; run it, or fix README.md's Results block by hand")
        return 1
    print("readme_results_test: README.md's Results block matches docs/performance.md")
    return 0


if __name__ == "__main__":
    sys.exit(main())
