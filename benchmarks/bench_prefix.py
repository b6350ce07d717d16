"""Prefix reuse and sessions: speed, peak memory and the error of the sampled LRU curve.

    python benchmarks/bench_prefix.py                   # Mooncake traces + 1M synthetic requests with hashes
    python benchmarks/bench_prefix.py --requests 200000 # a smaller synthetic log
    python benchmarks/bench_prefix.py --skip-exact      # skip the exact curve at 1M requests (the slow part)
    python benchmarks/bench_prefix.py --traces DIR      # another copy of the real traces
    python benchmarks/bench_prefix.py --skip-traces --skip-sessions   # only the large synthetic log

What it measures:
1. Mooncake conversation / synthetic traces: unbounded hit ratios (vs SOURCE.md), time of the exact LRU curve.
2. Error of the sampled (SHARDS) curve against the exact one on the conversation trace, at several rates:
   max |sampled − exact| over the curve's capacities, in percentage points.
3. A synthetic log of --requests requests with Mooncake-style hashes (shapeviz.workload.synth, the benchmark
   generator): prefix_reuse with its default (sampled above the exact budget) and the exact curve, their
   times, peak memory, and the error of the default against exact.
4. Session analyses on the same log (without hashes).

Times are medians of --repeat runs (the slow 1M-request runs once), wall-clock and CPU seconds of the process
(numpy here runs on one core, so on a shared machine CPU time is the steadier figure); peak memory is
tracemalloc's peak of one run (numpy reports its buffers to tracemalloc); the process peak RSS ends the output.
"""
from __future__ import annotations

import argparse
import os
import resource
import sys
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from timing import timed  # noqa: E402  (benchmarks/timing.py, beside this script)

from shapeviz.analyses import prefix, sessions  # noqa: E402
from shapeviz.ingest import load_log  # noqa: E402
from shapeviz.workload import synth  # noqa: E402

KV_BYTES_PER_TOKEN = 327_680.0  # Llama-3-70B-like KV at 16 bits; only scales the GB axis here


def _peak_mb(fn: Callable[[], Any]) -> float:
    tracemalloc.start()
    try:
        fn()
        return tracemalloc.get_traced_memory()[1] / 1e6
    finally:
        tracemalloc.stop()


def _curve_error(a: prefix.BlockReuse, b: prefix.BlockReuse) -> tuple[float, float]:
    pa, pb = a.curve.points, b.curve.points
    return (
        float(np.abs(pa["hit_ratio_blocks"].to_numpy() - pb["hit_ratio_blocks"].to_numpy()).max()),
        float(np.abs(pa["hit_ratio_tokens"].to_numpy() - pb["hit_ratio_tokens"].to_numpy()).max()),
    )


def bench_mooncake(traces: Path, repeat: int) -> None:
    print("\n## Mooncake traces: unbounded hit ratio and exact LRU curve")
    print("| trace | requests | block accesses | hit blocks | hit tokens | exact curve wall s | CPU s | peak MB |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    frames = {}
    for name in ("conversation_trace.jsonl.gz", "synthetic_trace.jsonl"):
        frame = load_log(traces / "mooncake_fast25" / name).frame
        frames[name] = frame
        result, wall, cpu = timed(lambda: prefix.block_reuse(frame, sample_rate=1.0), repeat)
        peak = _peak_mb(lambda: prefix.block_reuse(frame, sample_rate=1.0))
        print(f"| {name} | {len(frame):,} | {result.blocks:,} | {result.hit_ratio_blocks:.2%} "
              f"| {result.hit_ratio_tokens:.2%} | {wall:.2f} | {cpu:.2f} | {peak:,.0f} |")

    frame = frames["conversation_trace.jsonl.gz"]
    exact = prefix.block_reuse(frame, sample_rate=1.0)
    caps = exact.curve.points["capacity_blocks"].to_numpy()
    print("\n## Sampled (SHARDS) curve vs exact, conversation trace (max error over the curve, points)")
    print("| rate | kept whole | blocks error | tokens error | CPU s |")
    print("|---:|---|---:|---:|---:|")
    for rate in (0.5, 0.25, 0.1, 0.05):
        sampled, _, cpu = timed(lambda: prefix.block_reuse(frame, sample_rate=rate, capacities=caps), repeat)
        err_b, err_t = _curve_error(sampled, exact)
        hot = sampled.curve.description.split(":")[1].split(" plus")[0].strip()
        print(f"| {rate:.0%} | {hot} | {err_b * 100:.2f} | {err_t * 100:.2f} | {cpu:.2f} |")


def bench_synthetic(n_requests: int, seed: int, skip_exact: bool) -> None:
    print(f"\n## {n_requests:,} synthetic requests with prefix hashes (shapeviz.workload.synth, seed {seed})")
    t0 = time.perf_counter()
    frame = synth.generate(n_requests, seed=seed)
    accesses = int(frame["hash_ids"].map(len).sum())
    print(f"generated in {time.perf_counter() - t0:.1f} s: {accesses:,} block accesses")
    default, wall, cpu = timed(lambda: prefix.block_reuse(frame, kv_bytes_per_token=KV_BYTES_PER_TOKEN), 1)
    peak = _peak_mb(lambda: prefix.block_reuse(frame))
    print("| curve | wall s | CPU s | peak MB | hit blocks | hit tokens | method |")
    print("|---|---:|---:|---:|---:|---:|---|")
    print(f"| default | {wall:.1f} | {cpu:.1f} | {peak:,.0f} | {default.hit_ratio_blocks:.2%} | "
          f"{default.hit_ratio_tokens:.2%} | {default.curve.description} |")
    if not skip_exact:
        caps = default.curve.points["capacity_blocks"].to_numpy()
        exact, wall, cpu = timed(lambda: prefix.block_reuse(frame, sample_rate=1.0, capacities=caps), 1)
        peak = _peak_mb(lambda: prefix.block_reuse(frame, sample_rate=1.0, capacities=caps))
        err_b, err_t = _curve_error(default, exact)
        print(f"| exact | {wall:.1f} | {cpu:.1f} | {peak:,.0f} | {exact.hit_ratio_blocks:.2%} | "
              f"{exact.hit_ratio_tokens:.2%} | {exact.curve.description} |")
        print(f"default vs exact: max error {err_b * 100:.2f} points (blocks), {err_t * 100:.2f} (tokens)")


def bench_sessions(n_requests: int, seed: int, repeat: int) -> None:
    frame = synth.generate(n_requests, seed=seed, with_hashes=False)
    n_sessions = sessions.session_summary(frame)["count"]
    print(f"\n## Sessions on {n_requests:,} synthetic requests ({n_sessions:,} sessions)")
    print("| call | wall s | CPU s | peak MB |")
    print("|---|---:|---:|---:|")

    def prefill_ms(n: np.ndarray, p: np.ndarray) -> np.ndarray:
        return 0.02 * (n - p) + 2e-6 * (n**2 - p**2)

    calls: dict[str, Callable[[], Any]] = {
        "session_turns": lambda: sessions.session_turns(frame),
        "session_table (kv)": lambda: sessions.session_table(frame, kv_bytes_per_token=KV_BYTES_PER_TOKEN),
        "turn_profile (kv)": lambda: sessions.turn_profile(frame, kv_bytes_per_token=KV_BYTES_PER_TOKEN),
        "detect_agents": lambda: sessions.detect_agents(frame),
        "ttft_by_turn": lambda: sessions.ttft_by_turn(frame, prefill_ms),
        "session_summary": lambda: sessions.session_summary(frame),
        "prefix_reuse (reported cached)": lambda: prefix.prefix_reuse(frame),
    }
    for name, fn in calls.items():
        _, wall, cpu = timed(fn, repeat)
        print(f"| {name} | {wall:.2f} | {cpu:.2f} | {_peak_mb(fn):,.0f} |")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    default_traces = Path(os.environ.get("SHAPEVIZ_TRACES", ROOT.parent / "shared" / "data" / "traces"))
    parser.add_argument("--traces", type=Path, default=default_traces,
                        help="folder of the real traces (default: $SHAPEVIZ_TRACES, else ../shared/data/traces)")
    parser.add_argument("--requests", type=int, default=1_000_000, help="synthetic requests (default 1M)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--repeat", type=int, default=3, help="runs per timing on the small inputs (median)")
    parser.add_argument("--skip-exact", action="store_true", help="skip the exact curve on the synthetic log")
    parser.add_argument("--skip-traces", action="store_true", help="skip the Mooncake part")
    parser.add_argument("--skip-sessions", action="store_true", help="skip the session part")
    args = parser.parse_args(argv)
    if not (args.traces / "mooncake_fast25").is_dir():
        parser.error(f"no mooncake_fast25 folder under {args.traces}; pass --traces or set SHAPEVIZ_TRACES")
    print(f"numpy {np.__version__}, {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}")
    if not args.skip_traces:
        bench_mooncake(args.traces, args.repeat)
    bench_synthetic(args.requests, args.seed, args.skip_exact)
    if not args.skip_sessions:
        bench_sessions(args.requests, args.seed, args.repeat)
    print(f"\nprocess peak RSS {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6:.2f} GB")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
