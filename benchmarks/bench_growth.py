"""``plan --growth`` with every month sized by the one engine: CPU time and the months' replicas, against the
analytic months scaled by today's replay/estimate ratio (what growth printed before issue 27's growth item).

    python benchmarks/bench_growth.py --log ../shared/data/traces/azure_llm_2023/AzureLLMInferenceTrace_code.csv
    python benchmarks/bench_growth.py --demo 20000          # the dashboard's demo mix (generate(20000, seed=0))

Each run is ``python -m shapeviz plan LOG --gpu h100 --growth 8% --months N --json`` in this process, timed with
``time.process_time`` (CPU of this process; the simulator runs here). Prints the load average beside each figure.
"""
from __future__ import annotations

import argparse
import contextlib
import io
import json
import math
import os
import tempfile
import time
from pathlib import Path

from shapeviz.cli import main


def run(log: str, months: int, growth: str, gpu: str) -> tuple[float, dict]:
    """One ``plan --growth`` run: (CPU s, its growth document)."""
    out = io.StringIO()
    started = time.process_time()
    with contextlib.redirect_stdout(out):
        code = main(["plan", log, "--gpu", gpu, "--growth", growth, "--months", str(months), "--json"])
    cpu = time.process_time() - started
    if code != 0:
        raise SystemExit(f"plan failed ({code})")
    return cpu, json.loads(out.getvalue())["growth"]


def scaled_estimate(doc: dict) -> list[int]:
    """The old months: each month's analytic estimate × (month 0's replayed answer / its estimate), rounded up."""
    months = doc["months"]
    if months[0]["replicas"] is None:
        return [None] * len(months)
    ratio = months[0]["replicas"] / max(months[0]["estimate_replicas"], 1)
    return [months[0]["replicas"]] + [int(math.ceil(m["estimate_replicas"] * ratio - 1e-9)) for m in months[1:]]


def main_() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--log", help="a log file")
    p.add_argument("--demo", type=int, default=None, metavar="N", help="the demo mix of N requests instead")
    p.add_argument("--months", type=int, nargs="+", default=[3, 12])
    p.add_argument("--growth", default="8%")
    p.add_argument("--gpu", default="h100")
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        log = args.log
        if args.demo:
            from shapeviz.workload.synth import generate

            log = str(Path(tmp) / "demo.csv")
            generate(args.demo, seed=0).to_csv(log, index=False)
        if not log:
            raise SystemExit("give --log or --demo")
        for months in args.months:
            cpu, doc = run(log, months, args.growth, args.gpu)
            print(f"load {os.getloadavg()[0]:.2f} | {Path(log).name} | {args.growth} × {months} months | "
                  f"CPU {cpu:.1f} s | method {doc['method']}")
            print("  simulated:", [m["replicas"] for m in doc["months"]])
            print("  estimate :", [m["estimate_replicas"] for m in doc["months"]])
            print("  old (estimate × today's ratio):", scaled_estimate(doc))
            print("  one fewer:", sorted({m.get("one_fewer") for m in doc["months"]}, key=str))
            print("  meets    :", [m.get("meets_slo") for m in doc["months"]])
            print("  left out:", [sorted({w.split(" (")[0] for w in (m.get("unreachable") or "").split("; ") if w})
                                  for m in doc["months"]])


if __name__ == "__main__":
    main_()
