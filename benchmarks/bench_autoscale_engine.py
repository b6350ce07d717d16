"""Autoscaling on the one sizing engine (issue 27 item 4): CPU of ``plan --autoscale`` and ``simulate --autoscale``
on real traces, and the gap between the estimated and the replayed SLO attainment of a policy.

    python benchmarks/bench_autoscale_engine.py --traces ../shared/data/traces [--policy slo] [--repeat 3]
        [--extra "--method analytic"]

Each command runs ``--repeat`` times, each in a fresh child process through the command line's ``main`` (its JSON
captured): the CPU time (``time.process_time``) of the command alone, after the imports, nothing cached from an
earlier run in memory. The median is printed with the load average at the start and the end. Run it from another
checkout to time the code before a change.
"""
from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import shlex
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from shapeviz.cli import main as cli  # noqa: E402

TRACES = {
    "azure code": "azure_llm_2023/AzureLLMInferenceTrace_code.csv",
    "azure conv": "azure_llm_2023/AzureLLMInferenceTrace_conv.csv",
    "burstgpt_1 head": "burstgpt/burstgpt_slice.csv",
}


def run(args: list[str]) -> tuple[float, dict]:
    """The command in a fresh child process: (its CPU seconds, its JSON)."""
    child = subprocess.run([sys.executable, __file__, "--child", json.dumps(args)], capture_output=True, text=True,
                           check=True)
    got = json.loads(child.stdout)
    return got["cpu"], got["doc"]


def in_process(args: list[str]) -> tuple[float, dict]:
    out = io.StringIO()
    started = time.process_time()
    with contextlib.redirect_stdout(out):
        code = cli(args)
    cpu = time.process_time() - started
    if code != 0:
        raise SystemExit(f"{args}: exit {code}")
    return cpu, json.loads(out.getvalue())


def main() -> int:
    if len(sys.argv) == 3 and sys.argv[1] == "--child":
        cpu, doc = in_process(json.loads(sys.argv[2]))
        print(json.dumps({"cpu": cpu, "doc": doc}))
        return 0
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--traces", type=Path, default=ROOT.parent / "shared" / "data" / "traces")
    ap.add_argument("--policy", action="append", default=None)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--extra", default="", help="more options for both commands, e.g. \"--method analytic\"")
    ap.add_argument("--only", default=None)
    a = ap.parse_args()
    print(f"load average at start: {os.getloadavg()}")
    for name, rel in TRACES.items():
        if a.only and a.only not in name:
            continue
        for policy in a.policy or ["slo"]:
            row = {}
            for command in ("plan", "simulate"):
                args = [command, str(a.traces / rel), "--autoscale", policy, "--json", *shlex.split(a.extra)]
                if command == "simulate":
                    args = [x for x in args if x not in ("--method", "analytic", "simulated")]
                cpus, doc = [], {}
                for _ in range(a.repeat):
                    cpu, doc = run(args)
                    cpus.append(cpu)
                reasons: dict[str, int] = {}
                for w in doc["windows"]:
                    if w["missed"] and w.get("reason"):
                        reasons[w["reason"]] = reasons.get(w["reason"], 0) + 1
                row[command] = doc
                print(f"{name:16} {policy:8} {command:8} CPU {statistics.median(cpus):6.2f} s (runs {min(cpus):.2f}–"
                      f"{max(cpus):.2f})  attainment {doc['attainment']:.1%}  missed {len(doc['missed_windows'])}/"
                      f"{len(doc['windows'])} {reasons}  GPU-h {doc['gpu_hours']:.2f}  most replicas "
                      f"{doc['max_replicas']}  sized by {doc.get('windows_sized_by', {}).get('method', 'analytic')}",
                      flush=True)
            gap = row["plan"]["attainment"] - row["simulate"]["attainment"]
            print(f"{name:16} {policy:8} estimated − replayed attainment: {gap:+.1%}")
    print(f"load average at end: {os.getloadavg()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
