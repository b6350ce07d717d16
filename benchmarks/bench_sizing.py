"""How long the one sizing function takes, and the fleet it gives against the analytic estimate (issue #27).

    python benchmarks/bench_sizing.py                 # the demo and the real traces beside the checkout
    python benchmarks/bench_sizing.py --big 1000000   # also the busiest hour of a seeded 1M-request day

Each row: the analytic estimate (the old headline), the simulated answer, one replica fewer's verdict, the replays
run and the CPU seconds of the whole sizing (``time.process_time``), with the load average beside it.
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from shapeviz.fleet.sizing import fleet_answer  # noqa: E402
from shapeviz.ingest import load_log  # noqa: E402
from shapeviz.physics.steps import Deployment, smallest_tp  # noqa: E402
from shapeviz.serving.planner import Workload  # noqa: E402
from shapeviz.workload.synth import generate  # noqa: E402

TRACES = ROOT.parent / "shared" / "data" / "traces"
REAL = {
    "Azure 2023 code": "azure_llm_2023/AzureLLMInferenceTrace_code.csv",
    "Azure 2023 conversation": "azure_llm_2023/AzureLLMInferenceTrace_conv.csv",
    "Mooncake conversation": "mooncake_fast25/conversation_trace.jsonl.gz",
}


def _deployment(model: str, gpu: str, precision: str | None) -> Deployment:
    return Deployment(model, gpu, precision, None, smallest_tp(model, gpu, precision))


def size(name: str, frame, dep: Deployment) -> None:
    workload = Workload.from_frame(frame)
    load = os.getloadavg()[0]
    started = time.process_time()
    _, sizing, estimate, _ = fleet_answer(workload, dep, frame)
    cpu = time.process_time() - started
    fewer = sizing.one_fewer
    print(f"| {name} | {len(frame):,} | {sizing.sized_on.get('requests'):,} | {dep.describe()} | {estimate.replicas} | "
          f"{sizing.replicas} | {'—' if fewer is None else f'{fewer.replicas}: ' + fewer.verdict()['verdict'][:6]} | "
          f"{len(sizing.trials)} | {cpu:.1f} s | {load:.1f} |", flush=True)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--big", type=int, default=None, metavar="ROWS", help="also a seeded day of ROWS requests")
    parser.add_argument("--only", default=None, help="run only the rows whose name contains this")
    parser.add_argument("--no-reuse", action="store_true",
                        help="the --big day without its sessions: no prefix reuse, so no prefix caches to replay")
    args = parser.parse_args(argv)
    print("| log | requests | replayed (busiest hour) | deployment | estimate | simulated | one fewer | replays | "
          "CPU | load |")
    print("|---|---:|---:|---|---:|---:|---|---:|---:|---:|")
    rows = [("demo (20k requests, one day)", lambda: generate(20_000, seed=0), (None,))]
    rows += [(name, lambda p=path: load_log(TRACES / p).frame, ("fp8", None)) for name, path in REAL.items()]
    if args.big:
        def big():
            frame = generate(args.big, seed=0, with_hashes=False)
            return frame.drop(columns=["session_id"]) if args.no_reuse else frame
        rows.append((f"seeded day of {args.big:,} requests" + (", no sessions" if args.no_reuse else ""), big,
                     (None,)))
    for name, make, precisions in rows:
        if args.only and args.only not in name:
            continue
        frame = make()
        for precision in precisions:
            size(name, frame, _deployment("llama-3.1-70b", "h100", precision))


if __name__ == "__main__":
    main()
