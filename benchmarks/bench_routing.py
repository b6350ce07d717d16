"""Prefix caches on replicas and the routers in front of them: validation against the offline analysis, the
hit ratio against the replica count on both Mooncake traces, and the speed of a 36k-request hour with hashes.

    python benchmarks/bench_routing.py [--traces ../shared/data/traces] [--validate] [--table] [--speed]
                                       [--window 2000]

Prints markdown tables. ``--validate``: one replica with an unbounded cache against ``prefix.block_reuse``'s exact
ratio, and one replica with a cache of C blocks against the LRU curve at C. ``--table``: every router at
N = 1, 2, 4, 8, 16 replicas on the first ``--window`` requests of each Mooncake trace, at the trace's own
timestamps, on two deployments (a small KV pool: Llama-3.1-70B FP8 on 2×H100; a large one: Llama-3.1-8B FP8 on
one H100). ``--speed``: CPU seconds of one hour at 10 req/s (36,000 requests) on 8 replicas, with block hashes.
"""
from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from shapeviz.analyses.prefix import block_reuse  # noqa: E402
from shapeviz.fleet.routing import ideal_hit_ratio  # noqa: E402
from shapeviz.ingest import load_log  # noqa: E402
from shapeviz.physics.steps import Deployment  # noqa: E402
from shapeviz.serving.planner import WhatIf  # noqa: E402
from shapeviz.serving.prefix_cache import PrefixBlocks  # noqa: E402
from shapeviz.serving.routers import ROUTERS  # noqa: E402
from shapeviz.serving.simulator import Requests, requests_from_frame, simulate  # noqa: E402

TRACES = {"conversation": "mooncake_fast25/conversation_trace.jsonl.gz",
          "synthetic": "mooncake_fast25/synthetic_trace.jsonl"}
SMALL_POOL = Deployment("llama-3.1-70b", "h100-sxm", "fp8", None, 2)
LARGE_POOL = Deployment("llama-3.1-8b", "h100-sxm", "fp8", None, 1)
COUNTS = (1, 2, 4, 8, 16)


def validate(traces: Path) -> None:
    """One replica: unbounded vs the exact offline ratio; C blocks vs the LRU curve at C."""
    print("| trace | cache | offline tokens | simulated tokens | gap (pts) | offline blocks | simulated blocks | CPU s |")
    print("|---|---|---|---|---|---|---|---|")
    for name, rel in TRACES.items():
        frame = load_log(traces / rel).frame
        caps = [960, 4000, 16000]
        off = block_reuse(frame, capacities=caps)
        points = off.curve.points.set_index("capacity_blocks")
        for cap in [math.inf, *caps]:
            t = time.process_time()
            res = simulate(frame, LARGE_POOL, replicas=1, prefix_cache_blocks=cap, whatif=WhatIf(traffic_multiplier=0.2))
            cpu = time.process_time() - t
            p = res.prefix
            want = off.hit_ratio_tokens if cap == math.inf else float(points.loc[cap, "hit_ratio_tokens"])
            want_b = off.hit_ratio_blocks if cap == math.inf else float(points.loc[cap, "hit_ratio_blocks"])
            label = "unbounded" if cap == math.inf else f"LRU {cap:,} blocks"
            print(f"| {name} | {label} | {want:.2%} | {p['hit_ratio_tokens']:.2%} | "
                  f"{100 * (p['hit_ratio_tokens'] - want):+.2f} | {want_b:.2%} | {p['hit_ratio_blocks']:.2%} | {cpu:.1f} |")


def table(traces: Path, window: int, unbounded: bool = False) -> None:
    """Hit ratio and TTFT per router and replica count, on both traces and both deployments (``unbounded``: every
    replica's cache never evicts, on the large pool only: the router's effect alone, without the KV pool's)."""
    cases = ((("unbounded caches, Llama-3.1-8B FP8, 1×H100", LARGE_POOL),) if unbounded else
             (("large KV pool: Llama-3.1-8B FP8, 1×H100", LARGE_POOL),
              ("small KV pool: Llama-3.1-70B FP8, 2×H100", SMALL_POOL)))
    for dep_name, dep in cases:
        for name, rel in TRACES.items():
            frame = load_log(traces / rel).frame
            req = requests_from_frame(frame)
            req = req.take(np.arange(min(window, len(req))))
            ideal = ideal_hit_ratio(req)
            print(f"\n{name} trace, first {len(req):,} requests at their own timestamps, {dep_name} "
                  f"(one unbounded cache: {ideal:.1%}); hit ratio (tokens) / mean TTFT s / p90 TTFT s\n")
            print("| router | " + " | ".join(f"N={k}" for k in COUNTS) + " |")
            print("|---|" + "---|" * len(COUNTS))
            for router in ROUTERS:
                if router == "session":
                    continue   # no session ids in the Mooncake traces: it would be round-robin
                cells = []
                for k in COUNTS:
                    res = simulate(req, dep, arrivals="trace", replicas=k, router=router,
                                   prefix_cache_blocks=math.inf if unbounded else None)
                    s = res.summary()
                    sat = " (grows)" if s["saturated"] else ""
                    cells.append(f"{res.prefix['hit_ratio_tokens']:.1%} / {s['ttft_ms']['mean'] / 1000:,.1f} / "
                                 f"{s['ttft_ms']['p90'] / 1000:,.1f}{sat}")
                print(f"| {router} | " + " | ".join(cells) + " |")


def speed() -> None:
    """The simulator benchmark's hour (36,000 lognormal requests at 10 req/s, the same lengths) on 8 × TP2 FP8, now
    with 64-token block hashes: a prompt opens with one of 20 shared system prompts (up to 16 blocks) and 40% of
    prompts then repeat the blocks of the last prompt that opened the same way (a conversation going on)."""
    rng = np.random.default_rng(1)
    n, size = 36_000, 64
    inp = np.exp(rng.normal(7.0, 1.0, n)).astype(np.int64).clip(1, 30_000)
    out = np.exp(rng.normal(5.0, 1.0, n)).astype(np.int64).clip(1, 4_000)
    arrival = np.cumsum(rng.exponential(0.1, n))
    system = rng.integers(0, 20, n)
    follow = rng.random(n) < 0.4
    last: dict[int, list[int]] = {}
    looks, next_id = [], 10_000_000
    for i in range(n):
        want = -(-int(inp[i]) // size)
        head = list(range(int(system[i]) * 1000, int(system[i]) * 1000 + min(16, want)))
        body = last.get(int(system[i]), head) if follow[i] else head
        blocks = body[:want]
        fresh = want - len(blocks)
        blocks = blocks + list(range(next_id, next_id + fresh))
        next_id += fresh
        looks.append(blocks)
        last[int(system[i])] = blocks
    lengths = np.array([len(x) for x in looks])
    ptr = np.r_[0, np.cumsum(lengths)]
    ids = np.concatenate([np.asarray(x, dtype=np.int64) for x in looks])
    blocks = PrefixBlocks(size, "block_hashes", "given", ptr, ids, ptr, ids, np.full(n, -1))
    req = Requests(inp, out, np.zeros(n, dtype=np.int64), arrival, None, blocks)
    bare = Requests(inp, out, np.zeros(n, dtype=np.int64), arrival)
    dep = Deployment("llama-3.1-70b", "h100-sxm", "fp8", None, 2)
    print(f"mean {inp.mean():,.0f} in / {out.mean():,.0f} out tokens, {ids.size / n:,.1f} blocks per request")
    for label, r, router in (("no blocks (the simulator benchmark's run)", bare, "round_robin"),
                             ("hashes, round-robin", req, "round_robin"), ("hashes, prefix-aware", req, "prefix")):
        t = time.process_time()
        res = simulate(r, dep, replicas=8, router=router)
        cpu = time.process_time() - t
        s = res.summary()
        hit = res.prefix["hit_ratio_tokens"]
        print(f"- {label}: {cpu:.2f} s CPU; hit {hit:.1%}, TTFT p90 {s['ttft_ms']['p90']:,.0f} ms, "
              f"evicted blocks {res.prefix['evicted_blocks']}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--traces", default=str(ROOT.parent / "shared" / "data" / "traces"))
    parser.add_argument("--validate", action="store_true")
    parser.add_argument("--table", action="store_true")
    parser.add_argument("--speed", action="store_true")
    parser.add_argument("--window", type=int, default=2000)
    parser.add_argument("--unbounded", action="store_true", help="with --table: caches that never evict")
    args = parser.parse_args()
    pd.set_option("display.width", 200)
    if args.validate:
        print("## One replica against the offline analysis\n")
        validate(Path(args.traces))
    if args.table:
        print("\n## Hit ratio against replicas, per router\n")
        table(Path(args.traces), args.window, args.unbounded)
    if args.speed:
        print("\n## Speed\n")
        speed()


if __name__ == "__main__":
    main()
