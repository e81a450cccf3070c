#!/usr/bin/env python3
"""The tiled FPx shapes' sweep as rows of tests/cpu/test_launch_rules.cpp's table.

    GEMLITE_BENCH_FPX_SWEEP=1 GEMLITE_BENCH_ACT=fp16 GEMLITE_BENCH_M=32,48,64,128,256,384,512 \\
      gemlite-bench --kernels --kernel-set fpx > sweep-1.log   # three runs, one log each
    python3 scripts/fpx_sweep_table.py sweep-*.log [--format fp6]

reads the `fpx FORMAT fp16 K= N= M= narrow|wide|tall splits=Z` lines (every run in the
logs; "tiled" is the narrow shape's name in logs before 2026-11-27's twentieth session) and
prints, per K x N and M above kFpxMaxM (16: below it the tiled kernel never runs by
itself), the median time of the narrow shape at 1, 2, 4, 8 splits, of the wide one and of
the tall one, as `{K, N, M, {narrow...}, {wide...}, {tall...}},` -- the rows that
LaunchRules.TiledShapeAndSplitsNearTheBestMeasured holds fpx_tiled_launch against; the
narrow shape's are {} above kFpxNarrowMaxM, where the automatic choice does not consider
it -- and, on stderr, the best setting of each.
"""
import argparse
import pathlib
import re
import statistics
import sys
from collections import defaultdict

LINE = re.compile(
    r"fpx (?P<fmt>\S+) fp16 K=(?P<K>\d+) N=(?P<N>\d+) M=(?P<M>\d+) (?P<shape>narrow|tiled|wide|tall) "
    r"splits=(?P<z>\d): (?P<us>[\d.]+) us")
SPLITS = (1, 2, 4, 8)
FPX_MAX_M = 16  # kFpxMaxM (kernels/fpx/gemm_fpx.h): the register kernel's M


def narrow_max_m():
    """kFpxNarrowMaxM, read from kernels/fpx/fpx_launch.h so that the two cannot drift."""
    header = pathlib.Path(__file__).resolve().parent.parent / "kernels/fpx/fpx_launch.h"
    m = re.search(r"constexpr int kFpxNarrowMaxM = (\d+);", header.read_text())
    if not m:
        sys.exit(f"fpx_sweep_table: no kFpxNarrowMaxM in {header}")
    return int(m[1])


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("logs", nargs="+")
    parser.add_argument("--format", default="fp6")
    args = parser.parse_args()
    times = defaultdict(list)  # (K, N, M, shape, splits) -> us of each run
    for path in args.logs:
        try:
            with open(path) as log:
                for line in log:
                    m = LINE.search(line)
                    if m and m["fmt"] == args.format and int(m["M"]) > FPX_MAX_M:
                        shape = "narrow" if m["shape"] == "tiled" else m["shape"]
                        times[(int(m["K"]), int(m["N"]), int(m["M"]), shape, int(m["z"]))].append(float(m["us"]))
        except OSError as e:
            sys.exit(f"fpx_sweep_table: {path}: {e.strerror}")
    cases = sorted({key[:3] for key in times})
    if not cases:
        sys.exit(f"fpx_sweep_table: no '{args.format} ... narrow|wide|tall splits=' lines above M = {FPX_MAX_M} in {', '.join(args.logs)}")
    narrow_up_to = narrow_max_m()
    for K, N, M in cases:
        median = {}
        for shape in ("narrow", "wide", "tall") if M <= narrow_up_to else ("wide", "tall"):
            for z in SPLITS:
                runs = times.get((K, N, M, shape, z))
                if not runs:
                    sys.exit(f"fpx_sweep_table: {K}x{N} M={M}: no {shape} run at {z} splits")
                median[(shape, z)] = statistics.median(runs)
        row = lambda shape: ", ".join(f"{median[(shape, z)]:.1f}" for z in SPLITS) if (shape, 1) in median else ""
        print(f"      {{{K}, {N}, {M}, {{{row('narrow')}}}, {{{row('wide')}}}, {{{row('tall')}}}}},")
        best = min(median, key=median.get)
        print(f"{K}x{N} M={M}: best {best[0]} at {best[1]} splits, {median[best]:.1f} us", file=sys.stderr)


if __name__ == "__main__":
    main()
