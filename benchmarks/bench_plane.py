"""Plane figure: build time and the bytes a browser receives, from 10k to 1M+ requests.

    python benchmarks/bench_plane.py [--rows 10000,100000,1000000] [--repeat 5]

Requests come from ``shapeviz.workload.synth.generate`` (generation not timed). Below the point budget the plane draws
every request; above it, a log-binned density plus a uniform sample, so the payload stays bounded.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from shapeviz.outputs.figures import figure_bytes, plane_figure  # noqa: E402
from shapeviz.physics import balance_ratio, default_deployment  # noqa: E402
from shapeviz.workload.synth import generate  # noqa: E402


def main() -> None:
    """Print one row per log size: build time (median), CPU time, figure JSON size."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", default="10000,100000,1000000")
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    dep = default_deployment()
    x = np.logspace(0, 6.5, 60)
    balance = (x, balance_ratio(dep, x) * x)
    print("| requests | mode | build s (median) | CPU s (median) | figure JSON |")
    print("|---:|---|---:|---:|---:|")
    for n in (int(r) for r in args.rows.split(",")):
        frame = generate(n, seed=0, with_hashes=False)
        walls, cpus, size = [], [], 0
        for _ in range(args.repeat):
            w0, c0 = time.perf_counter(), time.process_time()
            fig = plane_figure(frame, balance=balance, shift=(0.3, 0.2))
            size = figure_bytes(fig)  # serialising is part of what a page pays
            walls.append(time.perf_counter() - w0)
            cpus.append(time.process_time() - c0)
        mode = "density + 3k sample" if n > 20_000 else "every request"
        print(f"| {n:,} | {mode} | {statistics.median(walls):.3f} | {statistics.median(cpus):.3f} | "
              f"{size / 1e6:.2f} MB |")


if __name__ == "__main__":
    main()
