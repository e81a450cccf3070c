#!/usr/bin/env python3
"""The A/B table of scripts/gpu-check.sh (GEMLITE_GPU_BASE_REV): for each kernel benchmark
line and each model test (tg128, and ppN with GEMLITE_GPU_AB_PROMPTS), the base build's
and this build's mean over the rounds.

usage: ab_summary.py OUT_DIR   (reads ab-kernels-{base,this}-N.log, ab-models-{base,this}-N.md)
"""
import glob
import os
import re
import sys
from collections import defaultdict


def kernel_lines(path):
    """'gemv q4g64 fp16 K=4096 N=4096 M=1' -> (us, % of copy) for each benchmark line."""
    pattern = re.compile(r"^((?:cublas|gemv|fpx|attention) [^:]+): ([\d.]+) us, [\d.]+ GB/s, ([\d.]+) % of copy")
    with open(path) as f:
        for line in f:
            m = pattern.match(line)
            if m:
                yield m.group(1), (float(m.group(2)), float(m.group(3)))


def test_rows(path):
    """llama-bench rows '| llama2-7b q4g64 | ... | tg128 | 450.5 ± 0.3 | ...' (and ppN) -> tok/s."""
    with open(path) as f:
        for line in f:
            cells = [c.strip() for c in line.split("|")]
            if len(cells) > 7 and (cells[6].startswith("tg") or cells[6].startswith("pp")):
                yield f"{cells[1]} {cells[6]}", float(cells[7].split()[0])


def mean(values):
    return sum(values) / len(values)


def main():
    out = sys.argv[1]
    kernels = defaultdict(lambda: defaultdict(list))
    models = defaultdict(lambda: defaultdict(list))
    for side in ("base", "this"):
        for path in sorted(glob.glob(os.path.join(out, f"ab-kernels-{side}-*.log"))):
            for name, value in kernel_lines(path):
                kernels[name][side].append(value)
        for path in sorted(glob.glob(os.path.join(out, f"ab-models-{side}-*.md"))):
            for name, value in test_rows(path):
                models[name][side].append(value)
    if kernels:
        print(f"{'kernel':48s} {'base us':>8s} {'this us':>8s} {'base %':>7s} {'this %':>7s}")
        for name, sides in kernels.items():
            if "base" in sides and "this" in sides:
                b_us, t_us = mean([v[0] for v in sides["base"]]), mean([v[0] for v in sides["this"]])
                b_pc, t_pc = mean([v[1] for v in sides["base"]]), mean([v[1] for v in sides["this"]])
                print(f"{name:48s} {b_us:8.1f} {t_us:8.1f} {b_pc:7.1f} {t_pc:7.1f}")
    if models:
        print(f"{'model':48s} {'base t/s':>9s} {'this t/s':>9s} {'change':>8s}")
        for name, sides in models.items():
            if "base" in sides and "this" in sides:
                b, t = mean(sides["base"]), mean(sides["this"])
                print(f"{name:48s} {b:9.1f} {t:9.1f} {100 * (t / b - 1):+7.1f} %")
    return 0


if __name__ == "__main__":
    sys.exit(main())
