#!/usr/bin/env python3
"""Markdown tables of gemm_fpx against cuBLAS from a kernel benchmark log.

    python3 scripts/fpx_table.py .gpu/out/bench.log [--format fp6]

reads the `cublas ...` and `fpx FORMAT ACT ...` lines of `gemlite-bench --kernels` (run by
`scripts/gpu-check.sh run`) and prints, per activation type, one row per K x N shape and
one column per M: gemm_fpx's time / its speed-up over cuBLAS of the same run (M = 1 also
its % of the copy bandwidth), the worst sampled check; then the same shapes for the path
QuantLinear used above M = 16 before the tiled kernel, the dense copy + cuBLAS
(`via dequant+cublas` lines).
"""
import argparse
import re
import sys
from collections import defaultdict

LINE = re.compile(
    r"^fpx (?P<fmt>\S+) (?P<act>\S+) K=(?P<K>\d+) N=(?P<N>\d+) M=(?P<M>\d+)(?P<setting>[^:]*): "
    r"(?P<us>[\d.]+) us, [\d.]+ GB/s, (?P<pct>[\d.]+) % of copy, (?P<x>[\d.]+)x cuBLAS"
    r"(?:, check (?P<check>\S+) \((?P<ratio>[\d.]+|inf|nan)\))?"
)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("log")
    parser.add_argument("--format", default="fp6")
    args = parser.parse_args()
    fpx = defaultdict(dict)  # (act, shape) -> M -> (us, x, pct)
    dense = defaultdict(dict)
    checks = defaultdict(lambda: ("ok", 0.0))
    ms = set()
    with open(args.log) as f:
        for line in f:
            m = LINE.match(line.strip())
            if not m or m["fmt"] != args.format:
                continue
            key = (m["act"], (int(m["K"]), int(m["N"])))
            M = int(m["M"])
            cell = (float(m["us"]), float(m["x"]), float(m["pct"]))
            setting = m["setting"].strip()
            if setting == "via dequant+cublas":
                dense[key][M] = cell
            elif setting == "":
                fpx[key][M] = cell
                ms.add(M)
                status, worst = checks[key]
                ratio = float(m["ratio"]) if m["ratio"] not in (None, "nan") else float("inf")
                checks[key] = ("ok" if status == "ok" and m["check"] == "ok" else "FAILED", max(worst, ratio))
    if not fpx:
        print(f"no 'fpx {args.format}' lines in {args.log}", file=sys.stderr)
        return 1
    ms = sorted(ms)
    for act in sorted({a for a, _ in fpx}):
        print(f"\n**{act}**: each cell {args.format} us / speed-up over cuBLAS {act} (same run); "
              "M=1 also % of copy; check = sampled outputs vs float64 (worst error/tolerance)\n")
        print("| K x N | " + " | ".join(f"M={M}" for M in ms) + " | check |")
        print("|---" * (len(ms) + 2) + "|")
        for key in [k for k in fpx if k[0] == act]:
            cells = []
            for M in ms:
                c = fpx[key].get(M)
                if c is None:
                    cells.append("")
                    continue
                cell = f"{c[0]:.1f} / {c[1]:.2f}x"
                if M == 1:
                    cell += f" ({c[2]:.0f} %)"
                cells.append(cell)
            status, worst = checks[key]
            print(f"| {key[1][0]}x{key[1][1]} | " + " | ".join(cells) + f" | {status} ({worst:.2f}) |")
        dense_ms = sorted({M for k in dense if k[0] == act for M in dense[k]})
        if dense_ms:
            print(f"\nThe dense copy + cuBLAS (dequant_fpx, then cublasGemmEx; {act}): us / speed-up over "
                  f"cuBLAS on a dense weight, and gemm_fpx's speed-up over it\n")
            print("| K x N | " + " | ".join(f"M={M}" for M in dense_ms) + " |")
            print("|---" * (len(dense_ms) + 1) + "|")
            for key in [k for k in dense if k[0] == act]:
                cells = []
                for M in dense_ms:
                    d, g = dense[key].get(M), fpx[key].get(M)
                    cells.append(f"{d[0]:.1f} / {d[1]:.2f}x (gemm_fpx {d[0] / g[0]:.2f}x)" if d and g else "")
                print(f"| {key[1][0]}x{key[1][1]} | " + " | ".join(cells) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
