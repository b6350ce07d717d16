"""Serving configs, the bundle's deployment files and plan-vs-measured parsing: how long they take.

    python benchmarks/bench_deploy.py                      # 1M requests from shapeviz.workload.synth, no prefix hashes
    python benchmarks/bench_deploy.py --hashes             # with hash_ids (prefix reuse replayed from the hashes)
    python benchmarks/bench_deploy.py --rows 100000 --repeat 5

Prints, as medians over --repeat runs, wall seconds (time.perf_counter) and CPU seconds (time.process_time) of:
the prefix-reuse signal of the log, one engine's configs (plan given, as in the bundle and the page), the whole
deployment part of a report bundle (three engines, manifests, plan.json, knee, load-test commands), the plan
reference, and parsing a guidellm report of --report-mb MB (benchmarks replicated from a small real one) and an
aiperf summary. Then the process's peak RSS (resource.getrusage).
"""
from __future__ import annotations

import argparse
import json
import resource
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from timing import timed  # noqa: E402  (benchmarks/timing.py, beside this script)

from shapeviz.analyses.prefix import prefix_reuse  # noqa: E402
from shapeviz.outputs.deploy.build import (  # noqa: E402
    deployment_bundle,
    longest_context,
    prefix_signal,
)
from shapeviz.outputs.deploy.bundle import deploy_files  # noqa: E402
from shapeviz.outputs.measured import parse_result, plan_reference  # noqa: E402
from shapeviz.physics import default_deployment  # noqa: E402
from shapeviz.serving import WhatIf, Workload, plan  # noqa: E402
from shapeviz.workload.synth import generate  # noqa: E402

DATA = ROOT / "tests" / "data" / "measured"


def main() -> None:
    """Generate a log, time each step, print the figures."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--hashes", action="store_true", help="generate prefix-block hash_ids too")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--report-mb", type=float, default=50.0, help="size of the guidellm report to parse")
    args = parser.parse_args()

    frame = generate(args.rows, seed=args.seed, with_hashes=args.hashes)
    dep = default_deployment()
    whatif = WhatIf(trim_input=0.3)
    w = Workload.from_frame(frame)
    after = plan(w, dep, whatif)
    print(f"{len(frame):,} requests{' with hash_ids' if args.hashes else ''}; {dep.describe()}; repeat {args.repeat}")
    rows: list[tuple[str, float, float]] = []

    prefix, wall, cpu = timed(lambda: prefix_signal(frame, WhatIf()), args.repeat)
    rows.append(("prefix-reuse signal of the log", wall, cpu))
    context = longest_context(frame, whatif)
    _, wall, cpu = timed(lambda: deployment_bundle(
        w, dep, engine="vllm", whatif=whatif, ttft_slo_ms=1000, tpot_slo_ms=50, max_context_tokens=context,
        context_source="measured", prefix=prefix, the_plan=after), args.repeat)
    rows.append(("vLLM configs, both layouts (plan given)", wall, cpu))
    files, wall, cpu = timed(lambda: deploy_files(frame, w, dep, after, whatif=whatif, ttft_slo_ms=1000,
                                                  tpot_slo_ms=50), args.repeat)
    rows.append((f"bundle deployment part ({len(files.files)} files, {sum(map(len, files.files.values())):,} B)", wall, cpu))
    reuse = prefix_reuse(frame) if args.hashes else None
    _, wall, cpu = timed(lambda: deploy_files(frame, w, dep, after, whatif=whatif, ttft_slo_ms=1000,
                                              tpot_slo_ms=50, prefix_reuse=reuse), args.repeat)
    rows.append(("  the same with the analysis's prefix reuse (as the report does)", wall, cpu))
    _, wall, cpu = timed(lambda: plan_reference(w, dep, after, whatif=whatif, ttft_slo_ms=1000, tpot_slo_ms=50),
                         args.repeat)
    rows.append(("plan reference (plan.json)", wall, cpu))

    small = json.loads((DATA / "guidellm_0.8.1_report.json").read_text())
    copies = max(1, int(args.report_mb * 2**20 / len(json.dumps(small))))
    big = json.dumps({"metadata": small["metadata"], "benchmarks": small["benchmarks"] * copies}).encode()
    levels, wall, cpu = timed(lambda: parse_result(big, "big.json"), args.repeat)
    rows.append((f"guidellm report, {len(big) / 2**20:,.1f} MiB, {len(levels):,} benchmarks", wall, cpu))
    aiperf = (DATA / "aiperf_0.13.0_planned.json").read_bytes()
    _, wall, cpu = timed(lambda: parse_result(aiperf, "a.json"), args.repeat)
    rows.append(("aiperf profile export (2 KB)", wall, cpu))

    width = max(len(r[0]) for r in rows)
    print(f"{'step'.ljust(width)}  wall s    CPU s")
    for name, wall, cpu in rows:
        print(f"{name.ljust(width)}  {wall:7.3f}  {cpu:7.3f}")
    print(f"peak RSS {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:,.0f} MiB")


if __name__ == "__main__":
    main()
