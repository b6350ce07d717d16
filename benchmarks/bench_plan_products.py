"""``plan``'s per-product judgement (issue #19): what it adds to a plan of a multi-product log.

    python benchmarks/bench_plan_products.py                  # 1M requests from shapeviz.workload.synth
    python benchmarks/bench_plan_products.py --rows 200000 --repeat 3

Prints the median wall and CPU seconds (benchmarks/timing.py) and the peak traced memory (tracemalloc) of
Workload.from_frame + plan() (what ``plan`` did before) and of plan_products() (what it adds: each product's
rows binned, its classes' p90s on the plan's shared replicas).
"""
from __future__ import annotations

import argparse
import sys
import tracemalloc
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from timing import timed

from shapeviz.physics import default_deployment
from shapeviz.serving import WhatIf, Workload, plan
from shapeviz.serving.products import default_classes, plan_products
from shapeviz.workload.synth import generate


def main() -> None:
    """Run the benchmark and print one line per step."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    frame = generate(args.rows, seed=0)
    dep, whatif = default_deployment(), WhatIf()
    classes = default_classes(frame)

    def planned():
        w = Workload.from_frame(frame)
        return w, plan(w, dep, whatif)

    (workload, p), wall, cpu = timed(planned, args.repeat)
    print(f"{args.rows:,} rows, {frame['product'].nunique()} products, {p.replicas} replicas")
    print(f"from_frame + plan : wall {wall:.3f} s, CPU {cpu:.3f} s")
    out, wall, cpu = timed(lambda: plan_products(frame, workload, dep, whatif, p.replicas, classes, 50.0),
                           args.repeat)
    tracemalloc.start()
    plan_products(frame, workload, dep, whatif, p.replicas, classes, 50.0)
    peak = tracemalloc.get_traced_memory()[1] / 2**20
    tracemalloc.stop()
    print(f"plan_products     : wall {wall:.3f} s, CPU {cpu:.3f} s, peak traced {peak:.0f} MiB, "
          f"{sum(o['meets'] for o in out.values())} of {len(out)} products meet their class")


if __name__ == "__main__":
    main()
