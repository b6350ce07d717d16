"""Replays with prefix caches: requests per CPU-second, the compiled loop against the Python loop.

    python benchmarks/bench_prefix_replay.py          # the demo's busiest hour (sessions) and Mooncake (hashes)

Each row replays the same requests twice in one process, the Python reference loop then the compiled loop (after
one warm-up replay, so the compile is not counted), and checks they agree; CPU seconds by ``time.process_time``,
the load average beside them.
"""
from __future__ import annotations

import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import pandas as pd  # noqa: E402

from shapeviz.ingest import load_log  # noqa: E402
from shapeviz.physics.steps import Deployment  # noqa: E402
from shapeviz.serving import simulator  # noqa: E402
from shapeviz.serving.simulator import simulate  # noqa: E402
from shapeviz.workload.synth import generate  # noqa: E402

TRACES = ROOT.parent / "shared" / "data" / "traces"
BF16 = Deployment("llama-3.1-70b", "h100-sxm", "bf16", None, 4)
FP8 = Deployment("llama-3.1-70b", "h100-sxm", "fp8", None, 4)


def _busiest_hour(frame: pd.DataFrame) -> pd.DataFrame:
    hour = frame["timestamp"].dt.floor("h")
    return frame[hour == hour.value_counts().idxmax()]


def _timed(frame: pd.DataFrame, dep: Deployment, compiled: bool, **kwargs) -> tuple[float, simulator.SimResult]:
    simulator.COMPILED = compiled
    try:
        started = time.process_time()
        result = simulate(frame, dep, **kwargs)
        return time.process_time() - started, result
    finally:
        simulator.COMPILED = True


def row(name: str, frame: pd.DataFrame, dep: Deployment, **kwargs) -> None:
    _timed(frame.iloc[:50], dep, True, **kwargs)   # the compile (or the on-disk cache's load) is not timed
    load = os.getloadavg()[0]
    python_s, reference = _timed(frame, dep, False, **kwargs)
    compiled_s, result = _timed(frame, dep, True, **kwargs)
    same = reference.requests.equals(result.requests) and reference.prefix == result.prefix
    n = len(result.requests)
    print(f"| {name} | {n:,} | {kwargs.get('router', 'round_robin')}, {kwargs.get('replicas', 1)} replicas | "
          f"{n / python_s:,.0f} ({python_s:.2f} s) | {n / compiled_s:,.0f} ({compiled_s:.2f} s) | "
          f"{result.prefix['hit_ratio_tokens']:.2f} | {result.prefix['evicted_blocks']:,} | "
          f"{'yes' if same else 'NO'} | {load:.1f} |", flush=True)


def main() -> None:
    print("| replay | requests | router | Python loop req/CPU-s | compiled req/CPU-s | hit ratio | evicted | "
          "same | load |")
    print("|---|---:|---|---:|---:|---:|---:|---|---:|")
    demo = _busiest_hour(generate(20_000, seed=0, with_hashes=False))
    for router in ("round_robin", "session", "prefix"):
        row("demo busiest hour (sessions)", demo, BF16, replicas=6, router=router)
    mooncake = load_log(TRACES / "mooncake_fast25/conversation_trace.jsonl.gz").frame
    for router in ("round_robin", "prefix"):
        row("Mooncake conversation (hashes)", mooncake, FP8, replicas=8, router=router)


if __name__ == "__main__":
    main()
