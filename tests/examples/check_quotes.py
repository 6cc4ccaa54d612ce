#!/usr/bin/env python3
"""The docs quote the examples exactly.

    check_quotes.py SOURCE_DIR

A doc (README.md, docs/*.md) quotes an example with a marker line
    <!-- example: examples/c/draft.c c-loop -->
followed by a fenced code block; the block must equal the lines of that file between its
`example-begin: c-loop` and `example-end: c-loop` lines, with their common indentation removed.
Every region marked in examples/ must be quoted at least once. Exit 0 when all agree, 1 with
every difference named (doc, line, file, region).
"""
import difflib
import glob
import os
import re
import sys
import textwrap

MARKER = re.compile(r"^<!-- example: (\S+) (\S+) -->\s*$")


def regions(path):
    """{name: text} of the regions marked in one example file."""
    out, name, lines = {}, None, []
    with open(path) as f:
        for line in f:
            begin = re.search(r"example-begin: (\S+)", line)
            end = re.search(r"example-end: (\S+)", line)
            if begin:
                name, lines = begin.group(1), []
            elif end and name == end.group(1):
                out[name] = textwrap.dedent("".join(lines))
                name = None
            elif name:
                lines.append(line)
    return out


def main(root):
    errors, quoted = [], set()
    examples = {}
    for path in sorted(glob.glob(os.path.join(root, "examples", "**", "*.*"), recursive=True)):
        for name, text in regions(path).items():
            examples[(os.path.relpath(path, root), name)] = text
    docs = [os.path.join(root, "README.md")] + sorted(glob.glob(os.path.join(root, "docs", "*.md")))
    for doc in docs:
        with open(doc) as f:
            lines = f.readlines()
        for i, line in enumerate(lines):
            m = MARKER.match(line)
            if not m:
                continue
            where = f"{os.path.relpath(doc, root)}:{i + 1}"
            key = (m.group(1), m.group(2))
            if key not in examples:
                errors.append(f"{where}: {key[0]} has no region '{key[1]}'")
                continue
            if i + 1 >= len(lines) or not lines[i + 1].startswith("```"):
                errors.append(f"{where}: no code block right after the marker")
                continue
            end = next((j for j in range(i + 2, len(lines)) if lines[j].startswith("```")), None)
            if end is None:
                errors.append(f"{where}: the code block is not closed")
                continue
            block = "".join(lines[i + 2:end])
            quoted.add(key)
            if block != examples[key]:
                diff = "".join(difflib.unified_diff(examples[key].splitlines(True), block.splitlines(True),
                                                    f"{key[0]} ({key[1]})", where))
                errors.append(f"{where}: differs from {key[0]} region '{key[1]}':\n{diff}")
    for key in sorted(set(examples) - quoted):
        errors.append(f"{key[0]}: region '{key[1]}' is quoted in no doc")
    if not examples:
        errors.append("no marked regions found under examples/")
    for e in errors:
        print("FAIL:", e)
    if not errors:
        print(f"check_quotes: {len(quoted)} quoted regions equal their examples")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
