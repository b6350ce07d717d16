"""The path into the loop: how long a sizing takes to turn a log into the window it replays, and one replay's
result outside the loop (issue 40, item 2).

    python benchmarks/bench_request_table.py                 # the busiest hour of a seeded 1M-request day
    python benchmarks/bench_request_table.py --rows 200000 --repeat 5

Per row, the median of ``--repeat`` runs of CPU seconds (``time.process_time``) and, in one more run, the peak of
Python-allocated memory (``tracemalloc``, numpy's arrays included) of:

- ``window``: ``fleet.sizing.slo_window`` (the log read into requests, the busiest hour chosen, its rows with their
  prompt blocks), what a sizing does once before its replays;
- ``replay``: one ``simulate`` of that window on ``--replicas`` replicas, round-robin, of which ``loop`` is the
  compiled loop alone (``sim_core.run``) and the rest is building its inputs and its result frames.

The load average is printed beside each figure.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
import tracemalloc
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from shapeviz.fleet.sizing import slo_window  # noqa: E402
from shapeviz.physics.steps import Deployment, smallest_tp  # noqa: E402
from shapeviz.serving import sim_core, simulator  # noqa: E402
from shapeviz.workload.synth import generate  # noqa: E402


def _measure(run, repeat: int) -> tuple[float, float, float]:
    """Median CPU seconds of ``repeat`` runs, the tracemalloc peak (MB) of one more, and the load at the start
    (memory is traced apart: tracing slows the runs it traces)."""
    load = os.getloadavg()[0]
    cpu = []
    for _ in range(repeat):
        started = time.process_time()
        run()
        cpu.append(time.process_time() - started)
    tracemalloc.start()
    run()
    peak = tracemalloc.get_traced_memory()[1] / 1e6
    tracemalloc.stop()
    return statistics.median(cpu), peak, load


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=1_000_000, help="requests in the seeded day")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--replicas", type=int, default=297, help="the 1M day's answer")
    args = parser.parse_args(argv)
    frame = generate(args.rows, seed=0, with_hashes=False)
    dep = Deployment("llama-3.1-70b", "h100", None, None, smallest_tp("llama-3.1-70b", "h100", None))
    req, _ = slo_window(frame, dep)
    # compiled once before anything is timed
    simulator.simulate(req.take(np.arange(min(len(req), 500))), dep, replicas=2)
    print(f"seeded day of {args.rows:,} requests, busiest hour {len(req):,} requests, {args.replicas} replicas")
    print("| step | CPU (median of runs) | peak traced memory | load |")
    print("|---|---:|---:|---:|")
    cpu, peak, load = _measure(lambda: slo_window(frame, dep), args.repeat)
    print(f"| window (`slo_window`) | {cpu:.2f} s | {peak:,.0f} MB | {load:.1f} |", flush=True)
    loop = []
    run = sim_core.run

    def timed(*a, **k):
        started = time.process_time()
        out = run(*a, **k)
        loop.append(time.process_time() - started)
        return out

    sim_core.run = timed
    try:
        cpu, peak, load = _measure(lambda: simulator.simulate(req, dep, replicas=args.replicas), args.repeat)
    finally:
        sim_core.run = run
    inside = statistics.median(loop[:args.repeat])
    print(f"| replay (`simulate`) | {cpu:.2f} s | {peak:,.0f} MB | {load:.1f} |")
    print(f"| of which the compiled loop | {inside:.2f} s | | |")
    print(f"| of which its inputs and result frames | {cpu - inside:.2f} s | | |", flush=True)


if __name__ == "__main__":
    main()
