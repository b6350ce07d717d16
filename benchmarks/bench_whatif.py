"""What-if recompute: how long a slider move takes once a million-request log is binned.

    python benchmarks/bench_whatif.py               # 1M requests from shapeviz.workload.synth (numpy lognormals if absent)
    python benchmarks/bench_whatif.py --rows 200000 --repeat 10

Prints the median wall time (time.perf_counter) and the peak traced memory (tracemalloc) of:
Workload.from_frame (binning + measured peak rate), plan() for a series of what-if moves, load_curve(),
balance_ratio() on a 200-point line, and request_gpu_seconds() on every row.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
import tracemalloc
from pathlib import Path
from typing import Any, Callable

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from shapeviz.physics import balance_ratio, default_deployment, request_gpu_seconds
from shapeviz.serving import WhatIf, Workload, load_curve, plan


def _frame(rows: int, seed: int) -> tuple[pd.DataFrame, str]:
    try:
        from shapeviz.workload.synth import generate

        return generate(rows, seed=seed), "shapeviz.workload.synth.generate"
    except ImportError:
        rng = np.random.default_rng(seed)
        start = pd.Timestamp("2024-05-13", tz="UTC")
        return pd.DataFrame({
            "input_tokens": np.clip(rng.lognormal(7.0, 1.0, rows), 1, 128_000).astype(np.int32),
            "output_tokens": np.clip(rng.lognormal(5.0, 1.0, rows), 1, 16_000).astype(np.int32),
            "timestamp": start + pd.to_timedelta(np.sort(rng.uniform(0, 86_400, rows)), unit="s"),
            "product": pd.Categorical(rng.choice(["chat", "rag"], rows)),
        }), "numpy lognormals"


def _measure(fn: Callable[[], Any], repeat: int) -> tuple[float, float, Any]:
    """Median seconds over ``repeat`` runs and the peak traced MiB of one run."""
    result = fn()  # warm-up (imports, caches)
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - t0)
    tracemalloc.start()
    fn()
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return statistics.median(times), peak / 2**20, result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)

    t0 = time.perf_counter()
    frame, origin = _frame(args.rows, args.seed)
    print(f"{len(frame):,} requests from {origin} in {time.perf_counter() - t0:.1f} s")
    dep = default_deployment()
    print(f"deployment: {dep.describe()}")

    results: list[tuple[str, float, float, str]] = []
    sec, mib, workload = _measure(lambda: Workload.from_frame(frame), args.repeat)
    results.append(("Workload.from_frame (bin + peak rate)", sec, mib,
                     f"{workload.weight.size} points, {workload.rate_rps:,.1f} req/s {workload.rate_source}"))

    moves = [WhatIf(), WhatIf(trim_input=0.3), WhatIf(trim_output=0.5), WhatIf(cache_hit=0.4),
             WhatIf(traffic_multiplier=2.0), WhatIf(0.2, 0.2, 0.5, 1.5)]
    state = {"i": 0}

    def one_move() -> Any:
        state["i"] += 1
        return plan(workload, dep, moves[state["i"] % len(moves)])

    sec, mib, p = _measure(one_move, max(args.repeat, 4) * len(moves))
    results.append(("plan() per what-if move", sec, mib, f"{p.gpus['colocated']} GPUs colocated"))

    sec, mib, curve = _measure(lambda: load_curve(workload, dep, np.linspace(0.25, 4, 16)), args.repeat)
    results.append(("load_curve() 16 multipliers (plan included)", sec, mib,
                    f"{int(curve['saturated'].sum())} of 16 saturated on {int(curve['gpus'].iloc[0])} GPUs"))

    line = np.geomspace(16, 131_072, 200)
    sec, mib, _ = _measure(lambda: balance_ratio(dep, line), args.repeat)
    results.append(("balance_ratio() 200 points", sec, mib, ""))

    inp = frame["input_tokens"].to_numpy()
    out = frame["output_tokens"].to_numpy()
    sec, mib, _ = _measure(lambda: request_gpu_seconds(dep, inp, out), max(1, args.repeat // 2))
    results.append((f"request_gpu_seconds() on {len(frame):,} rows", sec, mib, ""))

    print(f"\n{'operation':44s} {'median':>10s} {'peak MiB':>9s}  note")
    for name, sec, mib, note in results:
        print(f"{name:44s} {sec * 1000:8.1f} ms {mib:9.1f}  {note}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
