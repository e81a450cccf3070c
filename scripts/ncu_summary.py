#!/usr/bin/env python3
"""Per-kernel time from an `ncu --csv --metrics gpu__time_duration.sum` log: one line per
(kernel, grid, block), largest total first, so a model step's time can be read by op.

    python3 scripts/ncu_summary.py ncu.csv [--steps N]

Totals are per model step: divided by N, by default the number of embedding launches
(one per forward) in the log.
"""
import argparse
import collections
import csv
import sys


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("csv")
    parser.add_argument("--steps", type=float, default=0, help="divide totals by this many steps")
    args = parser.parse_args()
    with open(args.csv) as f:
        rows = list(csv.reader(line for line in f if line.startswith('"')))
    if not rows:
        sys.exit(f"{args.csv}: no ncu csv rows")
    header, rows = rows[0], rows[1:]
    col = {name: header.index(name) for name in ("Kernel Name", "Grid Size", "Block Size", "Metric Unit", "Metric Value")}
    scale = {"ns": 1e-3, "nsecond": 1e-3, "us": 1.0, "usecond": 1.0, "ms": 1e3, "msecond": 1e3}
    times = collections.defaultdict(list)  # (kernel, grid, block) -> [us]
    for r in rows:
        kernel = r[col["Kernel Name"]].split("(")[0].replace("void ", "")[:60]
        value = float(r[col["Metric Value"]].replace(",", "")) * scale[r[col["Metric Unit"]]]
        times[(kernel, r[col["Grid Size"]], r[col["Block Size"]])].append(value)
    total = sum(sum(v) for v in times.values())
    if args.steps <= 0:
        args.steps = max(1, sum(len(v) for (kernel, _, _), v in times.items() if "embed_kernel" in kernel))
    print(f"{len(rows)} kernels, {total / args.steps:.1f} us per step ({args.steps:g} steps)")
    print(f"{'us/step':>9} {'share':>6} {'calls':>6} {'us/call':>8}  kernel grid block")
    for (kernel, grid, block), v in sorted(times.items(), key=lambda kv: -sum(kv[1])):
        print(f"{sum(v) / args.steps:9.1f} {100 * sum(v) / total:5.1f}% {len(v) / args.steps:6.1f} "
              f"{sum(v) / len(v):8.2f}  {kernel} {grid} {block}")


if __name__ == "__main__":
    main()
