"""Issue 40's held-out check: a generated day sized with `plan` within 5× the CPU of `summary` of the same file.

    python benchmarks/bench_day_plan.py                    # 1,000,000 requests, seed 0 (sessions, no hashes)
    python benchmarks/bench_day_plan.py --rows 100000 --runs 2

The day is ``shapeviz.workload.synth.generate(rows, seed, with_hashes=False)`` written as Parquet into a temporary
folder (removed afterwards). Each command runs as ``python -m shapeviz`` in a child process; its CPU (user + system)
and peak RSS come from ``resource.getrusage(RUSAGE_CHILDREN)`` around it, the load average is read before each run.
The plan's fleet, its router lever and the products it leaves out are printed with the figures, since what the plan
says is half of the check (benchmarks/README.md, "Issue 40: the 1M-request day's plan, held out").
"""
from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from shapeviz.workload.synth import generate  # noqa: E402


def run(command: str, path: Path) -> tuple[float, float, float, str]:
    """(CPU s, wall s, peak RSS GB, stdout) of ``python -m shapeviz COMMAND PATH``."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    out = subprocess.run([sys.executable, "-m", "shapeviz", command, str(path)], cwd=ROOT, check=True,
                         capture_output=True, text=True).stdout
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return cpu, wall, after.ru_maxrss / 1e6, out   # ru_maxrss: the largest child so far, in KiB on Linux


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--runs", type=int, default=1, help="pairs of (summary, plan), alternating")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / f"day_{args.rows}.parquet"
        generate(args.rows, seed=args.seed, with_hashes=False).to_parquet(path)
        print(f"{args.rows:,} requests, seed {args.seed}: {path.stat().st_size / 1e6:.1f} MB of Parquet")
        for i in range(args.runs):
            load = os.getloadavg()[0]
            s_cpu, s_wall, _, _ = run("summary", path)
            p_cpu, p_wall, rss, out = run("plan", path)
            print(f"run {i + 1} (load {load:.1f} → {os.getloadavg()[0]:.1f}): summary {s_cpu:.1f} s CPU / "
                  f"{s_wall:.1f} s wall; plan {p_cpu:.1f} s CPU / {p_wall:.1f} s wall; plan/summary "
                  f"{p_cpu / s_cpu:.2f}× CPU; largest child's peak RSS {rss:.2f} GB")
        for line in out.splitlines():
            if line.startswith(("GPUs:", "Lever", "SLOs", "  ", "note: fleet size")):
                print(line)


if __name__ == "__main__":
    main()
