"""Saturation as an engine saturates: the tool's Offline against its own Server, per admission policy.

    python benchmarks/bench_saturation.py                  # both systems, every policy, 24,576 requests
    python benchmarks/bench_saturation.py --requests 6144  # quicker
    python benchmarks/bench_saturation.py --verdicts       # `saturated` against the run's length, near the knee

MLPerf's workload (Llama-2-70B FP8 on 8 accelerators; requests drawn from the OpenOrca length sample,
``serving.mlperf.openorca_requests``: input mean 225 tokens, outputs scaled to a mean of 290). For each system and each admission policy of ``simulator.ADMISSIONS``:

- **Offline**: every request offered at once (``simulate(..., all_at_once=True)``), output tokens/s from the first
  arrival to the last completion, and the preemptions it took;
- **Server**: the highest Poisson rate whose simulated p99 TTFT and p99 TPOT meet MLPerf's Llama-2-70B Server
  limits (2,000 ms and 200 ms), found by bisection to 1 %, and its output tokens/s.

The engine's claim is Offline ≥ Server: offered everything, a real engine admits what its KV pool holds and runs
at its best throughput. Wall seconds per system and the load average are printed beside the figures.

``--verdicts``: ``SimResult.saturated`` for Poisson runs of 120, 240, 600 and 1,200 s of arrivals at rates around
the 8x H200 system's knee (``--rates``) (the issue's example: a verdict that flipped with the run's length), with the queue wait's
p90 beside it.
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from shapeviz.physics.steps import Deployment  # noqa: E402
from shapeviz.serving.mlperf import LIMITS_MS, openorca_requests  # noqa: E402
from shapeviz.serving.simulator import ADMISSIONS, Requests, simulate  # noqa: E402

TTFT_P99_MS, TPOT_P99_MS = LIMITS_MS["Server"]
SYSTEMS = {   # 8 accelerators each: replicas × TP
    "8x H200 FP8 (8 x TP1)": (Deployment("llama-2-70b", "h200", "fp8", None, 1), 8),
    "8x H100 FP8 (4 x TP2)": (Deployment("llama-2-70b", "h100-sxm", "fp8", None, 2), 4),
}


def output_tps(result) -> float:
    return float(result.summary()["throughput"]["output_tokens_per_s"])


def meets(result) -> bool:
    s = result.summary()
    return s["ttft_ms"]["p99"] <= TTFT_P99_MS and s["tpot_ms"]["p99"] <= TPOT_P99_MS


def server(req: Requests, dep: Deployment, replicas: int, admission: str, start_rps: float) -> tuple[float, float]:
    """The highest Poisson rate meeting the limits (bisection to 1 %) and its output tokens/s."""
    def run(rate: float):
        return simulate(req, dep, arrivals="poisson", rate_rps=rate, replicas=replicas, admission=admission)
    lo, hi = None, start_rps
    while True:   # bracket
        r = run(hi)
        if meets(r):
            lo, lo_result, hi = hi, r, hi * 1.25
        elif lo is None:
            hi /= 1.25
        else:
            break
        if lo is not None and hi > 1e4:
            break
    while hi / lo > 1.01:
        mid = (lo * hi) ** 0.5
        r = run(mid)
        if meets(r):
            lo, lo_result = mid, r
        else:
            hi = mid
    return lo, output_tps(lo_result)


def verdicts(rates: list[float], seconds=(120, 240, 600, 1200)) -> None:
    """``saturated`` by run length at each rate (the same seeded requests, cut at each duration)."""
    dep, replicas = SYSTEMS["8x H200 FP8 (8 x TP1)"]
    print("| rate req/s | " + " | ".join(f"{s} s" for s in seconds) + " |")
    print("|---|" + "---|" * len(seconds))
    for rate in rates:
        req = openorca_requests(int(rate * max(seconds)) + 100, seed=2)
        cells = []
        for s in seconds:
            r = simulate(req, dep, arrivals="poisson", rate_rps=rate, replicas=replicas, duration_s=s, seed=3)
            cells.append(f"{'saturated' if r.saturated else 'keeps up'} (queue p90 {r.summary()['queue_ms']['p90']:,.0f} ms)")
        print(f"| {rate:g} | " + " | ".join(cells) + " |", flush=True)
    print(f"load average: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=24_576)
    parser.add_argument("--policies", nargs="*", default=list(ADMISSIONS))
    parser.add_argument("--verdicts", action="store_true")
    parser.add_argument("--rates", nargs="+", type=float, default=[110.0, 120.0, 125.0, 130.0, 140.0],
                        help="with --verdicts: the Poisson rates (req/s) around the 8x H200 system's knee")
    args = parser.parse_args()
    if args.verdicts:
        verdicts(args.rates)
        return
    req = openorca_requests(args.requests)
    print(f"{args.requests:,} requests: input mean {req.input_tokens.mean():.0f} (p99 "
          f"{np.percentile(req.input_tokens, 99):.0f}), output mean {req.output_tokens.mean():.0f}")
    print("| system | admission | Offline out tok/s | Offline preemptions | Server req/s | Server out tok/s | "
          "Offline / Server | wall s |")
    print("|---|---|---|---|---|---|---|---|")
    for name, (dep, replicas) in SYSTEMS.items():
        for admission in args.policies:
            w0 = time.perf_counter()
            off = simulate(req, dep, all_at_once=True, replicas=replicas, admission=admission)
            off_tps = output_tps(off)
            rate, srv_tps = server(req, dep, replicas, admission, off_tps / float(req.output_tokens.mean()) * 0.8)
            print(f"| {name} | {admission} | {off_tps:,.0f} | {off.preemptions:,} | {rate:.1f} | {srv_tps:,.0f} | "
                  f"{off_tps / srv_tps:.3f} | {time.perf_counter() - w0:.0f} |", flush=True)
    print(f"load average: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
