#!/usr/bin/env python3
"""The README's GEMV table from a kernel benchmark log.

    python3 scripts/gemv_table.py .gpu/out/bench.log [--act fp16] [--m 1]

reads the `cublas ACT ...` and `gemv FORMAT ACT ...` lines of `gemlite-bench --kernels`
(run by `scripts/gpu-check.sh run`) and prints one row per K x N shape: cuBLAS's time (its %
of the copy bandwidth), then per format its time / % of copy / speed-up over cuBLAS of the
same run.
"""
import argparse
import re
import sys
from collections import defaultdict

LINE = re.compile(
    r"^(?P<kind>cublas|gemv(?: (?P<fmt>\S+))?) (?P<act>\S+) K=(?P<K>\d+) N=(?P<N>\d+) M=(?P<M>\d+)"
    r"(?P<setting>[^:]*): (?P<us>[\d.]+) us, [\d.]+ GB/s, (?P<pct>[\d.]+) % of copy"
    r"(?:, (?P<x>[\d.]+)x cuBLAS)?"
)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("log")
    parser.add_argument("--act", default="fp16")
    parser.add_argument("--m", type=int, default=1)
    args = parser.parse_args()
    cublas = {}  # shape -> (us, pct)
    gemv = defaultdict(dict)  # shape -> format -> (us, pct, x)
    formats = []
    with open(args.log) as f:
        for line in f:
            m = LINE.match(line.strip())
            if not m or m["act"] != args.act or int(m["M"]) != args.m or m["setting"].strip():
                continue
            shape = (int(m["K"]), int(m["N"]))
            if m["kind"] == "cublas":
                # The FPx part of the log times cuBLAS again: keep the GEMV part's.
                if shape not in cublas:
                    cublas[shape] = (float(m["us"]), float(m["pct"]))
                continue
            fmt = m["fmt"]
            if fmt not in formats:
                formats.append(fmt)
            gemv[shape][fmt] = (float(m["us"]), float(m["pct"]), float(m["x"]))
    if not gemv:
        print(f"no 'gemv FORMAT {args.act} ... M={args.m}' lines in {args.log}", file=sys.stderr)
        return 1
    print(f"| K x N | cuBLAS {args.act} | " + " | ".join(formats) + " |")
    print("|---" * (len(formats) + 2) + "|")
    for shape, cells in gemv.items():
        row = [f"{shape[0]}x{shape[1]}"]
        base = cublas.get(shape)
        row.append(f"{base[0]:.1f} ({base[1]:.0f} %)" if base else "")
        for fmt in formats:
            c = cells.get(fmt)
            row.append(f"{c[0]:.1f} / {c[1]:.0f} / {c[2]:.2f}x" if c else "")
        print("| " + " | ".join(row) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
