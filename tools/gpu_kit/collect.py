#!/usr/bin/env python3
"""Collects the GPU kit's figures (tools/gpu_kit/run.sh) into OUT/gpu_kit.json.

    collect.py OUT

Reads every OUT/*.log: the "JSON {...}" lines that bench-forward and
bench-generate print, ctest's summary, the engine checks' lines;
adds the environment and, per cost curve, t(n)/t(1). Standard library only.
"""
import json
import os
import sys


def main(out):
    figures = {"environment": open(os.path.join(out, "environment.txt")).read().splitlines()
               if os.path.exists(os.path.join(out, "environment.txt")) else []}
    for name in sorted(os.listdir(out)):
        if not name.endswith(".log"):
            continue
        lines = open(os.path.join(out, name), errors="replace").read().splitlines()
        records = []
        for line in lines:
            if line.startswith("JSON "):
                try:
                    records.append(json.loads(line[5:]))
                except ValueError:
                    pass
        key = name[:-4]
        if records:
            figures[key] = records
        if key == "ctest":
            figures["ctest"] = [l for l in lines if "tests passed" in l or "tests failed" in l]
        if key in ("engines_live", "steps"):
            figures[key] = lines[-40:]
    # Cost curves: t(n)/t(1) per shape.
    curves = {}
    for key, records in figures.items():
        if not key.startswith("forward_") or not isinstance(records, list):
            continue
        for shape in ("chain", "tree"):
            points = {r["tokens"]: r["median_ms"] for r in records
                      if isinstance(r, dict) and r.get("shape") == shape}
            if 1 in points and points[1] > 0:
                curves["%s_%s" % (key, shape)] = {
                    "t1_ms": points[1],
                    "ratio": {str(n): round(t / points[1], 4) for n, t in sorted(points.items())}}
    figures["cost_curves"] = curves
    with open(os.path.join(out, "gpu_kit.json"), "w") as f:
        json.dump(figures, f, indent=1)
    print("collect.py: %d cost curves, %d files -> %s" % (
        len(curves), len(figures), os.path.join(out, "gpu_kit.json")))


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "/tmp/gpu_kit_out")
