"""Disaggregated pools and speculative decoding replayed by the Python loop (before) and the compiled loop (after).

    python benchmarks/bench_one_loop.py                  # simulate --disaggregate on two real traces
    python benchmarks/bench_one_loop.py --levers         # + the levers' disaggregated search (simulate_levers)
    python benchmarks/bench_one_loop.py --speculative    # + simulate and size_fleet with EAGLE-3 / draft model

Before issue 40's item 2 every disaggregated or speculative replay ran the Python loop; now they run the compiled
one. "before" here is the same code with those runs sent to the Python loop (``simulator._compiled`` answering False
for a split or a speculative deployment, which is what the dispatch did), so the two columns differ only by the loop. The compiled loop's compile is
paid once before the timings (a warm-up replay). CPU by ``time.process_time``, requests per CPU-second over the
replayed requests, peak RSS by the resource module, the load average beside each row; each "after" run is checked
to give the "before" run's frames bit for bit.

Workloads (real public logs, found as the tests find them: ``$SHAPEVIZ_TRACES`` or ``../shared/data/traces``):
- Azure LLM inference 2023, conversation (19,366 requests, no sessions or hashes): Llama-3.1-8B FP8 on 1x H100,
  2 prefill + 4 decode replicas, round-robin (``simulate --disaggregate 2:4``);
- Mooncake FAST'25 conversation trace (block hashes, 512-token blocks): Llama-3.1-8B FP8 on 1x H100, the first
  5,000 requests, 3 prefill + 3 decode replicas, the prefix-aware router on the prefill pool's caches.
"""
from __future__ import annotations

import argparse
import os
import resource
import sys
import time
from pathlib import Path
from typing import Any, Callable

import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from shapeviz.ingest import load_log  # noqa: E402
from shapeviz.physics.steps import Deployment  # noqa: E402
from shapeviz.serving import simulator  # noqa: E402
from shapeviz.serving.planner import Workload  # noqa: E402

SMALL = Deployment("llama-3.1-8b", "h100-sxm", "fp8", None, 1)


def traces() -> Path:
    """The shared traces folder, as the tests find it."""
    env = os.environ.get("SHAPEVIZ_TRACES")
    return Path(env) if env else ROOT.parent / "shared" / "data" / "traces"


def python_loop_for_splits(on: bool) -> None:
    """Send disaggregated and speculative runs to the Python loop (``on``), as the dispatch did before, or let them
    compile."""
    if not hasattr(simulator, "_compiled_original"):
        simulator._compiled_original = simulator._compiled  # type: ignore[attr-defined]
    original = simulator._compiled_original  # type: ignore[attr-defined]

    def dispatch(dep: Any, max_num_seqs: int, split: Any, *args: Any, **kw: Any) -> bool:
        if split is not None or dep.speculative is not None:
            return False
        return original(dep, max_num_seqs, split, *args, **kw)

    simulator._compiled = dispatch if on else original


def measured(fn: Callable[[], Any]) -> tuple[Any, float, float, float]:
    """(result, CPU seconds, peak RSS in GB so far, load average at the start)."""
    load = os.getloadavg()[0]
    started = time.process_time()
    result = fn()
    cpu = time.process_time() - started
    return result, cpu, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6, load


def replays(args: argparse.Namespace) -> None:
    cases = [
        ("Azure conv, 2:4, round-robin", load_log(traces() / "azure_llm_2023/AzureLLMInferenceTrace_conv.csv").frame,
         dict(disaggregate="2:4")),
        ("Mooncake conv (hashes), 3:3, prefix-aware",
         load_log(traces() / "mooncake_fast25/conversation_trace.jsonl.gz").frame.iloc[:5000],
         dict(disaggregate="3:3", router="prefix")),
    ]
    print("| workload | loop | CPU | requests per CPU-second | TTFT p90 | TPOT p90 | peak RSS | load |")
    print("|---|---|---:|---:|---:|---:|---:|---:|")
    for name, frame, kwargs in cases:
        simulator.simulate(frame.iloc[:200], SMALL, **kwargs)   # the compile (or its load from disk), not timed
        results = {}
        for loop, python in (("Python (before)", True), ("compiled (after)", False)):
            python_loop_for_splits(python)
            res, cpu, rss, load = measured(lambda: simulator.simulate(frame, SMALL, **kwargs))
            results[loop] = res
            s = res.summary()
            print(f"| {name} | {loop} | {cpu:.2f} s | {len(res.requests) / cpu:,.0f} | {s['ttft_ms']['p90']:.1f} ms | "
                  f"{s['tpot_ms']['p90']:.2f} ms | {rss:.2f} GB | {load:.1f} |", flush=True)
        before, after = results.values()
        pd.testing.assert_frame_equal(after.requests, before.requests, check_exact=True)
        pd.testing.assert_frame_equal(after.utilization, before.utilization, check_exact=True)
    python_loop_for_splits(False)


def levers(args: argparse.Namespace) -> None:
    """``simulate_levers`` (the dashboard's and the report's simulated levers): its disaggregated row searches the
    fewest prefill, then decode, replicas by replaying the Poisson stream on each split."""
    from shapeviz.fleet.levers import simulate_levers

    frame = load_log(traces() / "azure_llm_2023/AzureLLMInferenceTrace_conv.csv").frame
    workload = Workload.from_frame(frame)
    req = simulator.requests_from_workload(workload, args.lever_requests, seed=0)
    rate = workload.rate_rps
    print(f"\nsimulate_levers: {args.lever_requests:,} requests drawn from the Azure conv log at its "
          f"{rate:.2f} req/s, Llama-3.1-8B FP8 on 1x H100, TTFT 500 ms / TPOT 50 ms")
    print("| loop for disaggregated runs | CPU (all levers) | disaggregated row | peak RSS | load |")
    print("|---|---:|---|---:|---:|")
    rows = {}
    for loop, python in (("Python (before)", True), ("compiled (after)", False)):
        python_loop_for_splits(python)
        table, cpu, rss, load = measured(lambda: simulate_levers(req, SMALL, rate, 500.0, 50.0))
        row = table.set_index("lever").loc["disaggregate"]
        rows[loop] = table
        print(f"| {loop} | {cpu:.2f} s | {row['gpus']} GPUs, {row['detail']} | {rss:.2f} GB | {load:.1f} |",
              flush=True)
    python_loop_for_splits(False)
    before, after = rows.values()
    pd.testing.assert_frame_equal(after, before, check_exact=True)


def speculative(args: argparse.Namespace) -> None:
    """One replay of the Azure conversation log (trace arrivals) on 2 replicas, and the fleet sized for it
    (``fleet_answer``, what ``plan`` and the Capacity page's headline run), with speculative decoding."""
    from shapeviz.fleet.sizing import fleet_answer
    from shapeviz.physics.speculative import Speculative

    frame = load_log(traces() / "azure_llm_2023/AzureLLMInferenceTrace_conv.csv").frame
    deps = {
        "EAGLE-3 (3 drafts, 2.5 kept), Llama-3.1-8B FP8 1x H100":
            Deployment("llama-3.1-8b", "h100-sxm", "fp8", None, 1,
                       speculative=Speculative.from_length("eagle3", 3, 2.5)),
        "draft model Llama-3.1-8B (4 drafts, 2.8 kept), Llama-3.1-70B FP8 2x H100":
            Deployment("llama-3.1-70b", "h100-sxm", "fp8", None, 2,
                       speculative=Speculative.from_length("draft", 4, 2.8, draft_model="llama-3.1-8b")),
    }
    print("\nSpeculative decoding on the Azure conversation log (19,366 requests)")
    print("| deployment | run | loop | CPU | requests per CPU-second | answer | peak RSS | load |")
    print("|---|---|---|---:|---:|---|---:|---:|")
    for name, dep in deps.items():
        simulator.simulate(frame.iloc[:200], dep, replicas=2)   # the compile (or its load), not timed
        for run, fn, answer in (
                ("replay on 2 replicas", lambda: simulator.simulate(frame, dep, replicas=2),
                 lambda r: f"TPOT p50 {r.summary()['tpot_ms']['p50']:.2f} ms"),
                ("fleet_answer (plan's sizing)", lambda: fleet_answer(Workload.from_frame(frame), dep, frame)[1],
                 lambda r: f"{r.replicas} replicas, {len(r.trials)} replays")):
            results = {}
            for loop, python in (("Python (before)", True), ("compiled (after)", False)):
                python_loop_for_splits(python)
                res, cpu, rss, load = measured(fn)
                results[loop] = res
                rate = f"{len(frame) / cpu:,.0f}" if run.startswith("replay") else ""
                print(f"| {name} | {run} | {loop} | {cpu:.2f} s | {rate} | {answer(res)} | {rss:.2f} GB | "
                      f"{load:.1f} |", flush=True)
            before, after = results.values()
            if run.startswith("replay"):
                pd.testing.assert_frame_equal(after.requests, before.requests, check_exact=True)
    python_loop_for_splits(False)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--levers", action="store_true", help="also time simulate_levers' disaggregated search")
    parser.add_argument("--lever-requests", type=int, default=3000)
    parser.add_argument("--speculative", action="store_true", help="also time speculative replays and sizings")
    parser.add_argument("--only-speculative", action="store_true", help="only the speculative runs")
    args = parser.parse_args(argv)
    if not args.only_speculative:
        replays(args)
        if args.levers:
            levers(args)
    if args.speculative or args.only_speculative:
        speculative(args)


if __name__ == "__main__":
    main()
