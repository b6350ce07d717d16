"""One replay with prefix caches built from sessions: CPU and peak memory of the compiled loop on a big day.

    python benchmarks/bench_session_runs.py                       # 200k-request day's busiest hour, 100 replicas
    python benchmarks/bench_session_runs.py --day 1000000 --replicas 297 --router round_robin session prefix

The seeded day (``generate(day, seed=0, with_hashes=False)``: sessions, no hashes), its busiest clock hour,
Llama-3.1-70B BF16 on 4x H100, replayed twice per router in one process (the first replay pays the compile and
the per-sizing checks; the second is what every further replay of a sizing costs). CPU by ``time.process_time``,
peak RSS by the resource module, the load average beside them; the hit ratio and evicted blocks printed so that
two versions of the loop can be checked for the same answer.
"""
from __future__ import annotations

import argparse
import os
import resource
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from shapeviz.physics.steps import Deployment  # noqa: E402
from shapeviz.serving import simulator  # noqa: E402
from shapeviz.serving.planner import WhatIf  # noqa: E402
from shapeviz.workload.synth import generate  # noqa: E402

BF16 = Deployment("llama-3.1-70b", "h100-sxm", "bf16", None, 4)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--day", type=int, default=200_000, help="requests in the seeded day")
    parser.add_argument("--replicas", type=int, default=100)
    parser.add_argument("--router", nargs="+", default=["round_robin"])
    args = parser.parse_args(argv)
    frame = generate(args.day, seed=0, with_hashes=False)
    hour = frame["timestamp"].dt.floor("h")
    frame = frame[hour == hour.value_counts().idxmax()]
    req = simulator.requests_from_frame(frame, WhatIf())
    print(f"{len(req):,} requests, {int(req.blocks.look_ptr[-1]):,} block look-ups, {args.replicas} replicas")
    print("| router | replay | CPU | hit ratio (tokens) | evicted blocks | peak RSS | load |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for router in args.router:
        for replay in (1, 2):
            load = os.getloadavg()[0]
            started = time.process_time()
            result = simulator.simulate(req, BF16, replicas=args.replicas, router=router)
            cpu = time.process_time() - started
            rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6
            print(f"| {router} | {replay} | {cpu:.2f} s | {result.prefix['hit_ratio_tokens']:.6f} | "
                  f"{result.prefix['evicted_blocks']:,} | {rss:.2f} GB | {load:.1f} |", flush=True)


if __name__ == "__main__":
    main()
