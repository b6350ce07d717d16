"""The fleet over time: GPU-hours, SLO attainment and missed windows of each autoscaling policy against holding
the peak, on the demo, every real trace with timestamps and a week from a published production pattern; and the
speed of a week of 5-minute windows.

    python benchmarks/bench_autoscale.py --traces ../shared/data/traces [--week] [--speed] [--simulate]

Llama-3.1-70B FP8 on H100 TP2 (the default deployment), SLOs TTFT p90 1000 ms and TPOT p90 50 ms, the scale-up
delay and autoscaler settings of data/autoscaling.json. "estimated" rows judge each minute analytically;
"simulated" rows replay every request with the policy's replicas joining and draining.
"""
from __future__ import annotations

import argparse
import sys
import tracemalloc
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import pandas as pd  # noqa: E402
from timing import timed  # noqa: E402

from shapeviz.fleet.autoscale import (  # noqa: E402
    Policy,
    compare_policies,
    simulate_autoscale,
    startup,
    traffic_windows,
)
from shapeviz.ingest import load_log  # noqa: E402
from shapeviz.physics import Deployment, default_deployment, get_gpu, get_model  # noqa: E402
from shapeviz.workload.synth import generate  # noqa: E402

TRACES = {
    "azure code (1 h)": "azure_llm_2023/AzureLLMInferenceTrace_code.csv",
    "azure conv (1 h)": "azure_llm_2023/AzureLLMInferenceTrace_conv.csv",
    "mooncake conversation (1 h)": "mooncake_fast25/conversation_trace.jsonl.gz",
    "tracelab (19 agent calls over 72 days)": "tracelab_example/round_trace.jsonl",
    "mooncake synthetic": "mooncake_fast25/synthetic_trace.jsonl",
    "burstgpt_1 head (10 h, 400 rows)": "burstgpt/burstgpt_slice.csv",
    "burstgpt_3 head (11 h, 400 rows)": "burstgpt/burstgpt3_slice.csv",
}


SIMULATED = ("peak", "slo")   # replayed policies (the replay costs seconds per thousand requests)


def table(name: str, frame: pd.DataFrame, dep, simulate: bool, window_s: float | None = None) -> list[dict]:
    """One row per policy: estimated, and simulated when asked."""
    tw = traffic_windows(frame, dep, window_s=window_s)
    start = startup(dep)
    est = compare_policies(tw, start)
    rows = []
    for r in est.itertuples():
        row = {"log": name, "windows": tw.n_windows, "policy": r.policy, "gpu_hours": r.gpu_hours,
               "saving": r.saving, "peak_gpu_hours": r.baseline_gpu_hours, "floor_gpu_hours": r.lower_bound_gpu_hours,
               "attainment_est": r.attainment, "missed_est": r.missed_windows, "max_replicas": r.max_replicas}
        if simulate and r.policy in SIMULATED:
            sim = simulate_autoscale(frame, tw, Policy(r.policy), start)
            d = sim.to_dict()
            row.update(gpu_hours_sim=sim.gpu_hours, attainment_sim=d["attainment"],
                       missed_sim=len(d["missed_windows"]),
                       reasons=dict(sim.missed["reason"].value_counts()))
        rows.append(row)
    with pd.option_context("display.width", 250, "display.max_columns", 30, "display.max_colwidth", 90):
        print(pd.DataFrame(rows).round(3).to_string(index=False), flush=True)
    return rows


def speed(dep) -> None:
    """A week of 5-minute windows on the demo shape (7 × the demo's 20,000 requests a day)."""
    frame = generate(140_000, seed=0, days=7, with_hashes=False)

    def run():
        tw = traffic_windows(frame, dep, window_s=300)
        return tw, compare_policies(tw)

    (tw, _), wall, cpu = timed(run, 3)
    tracemalloc.start()
    run()
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    shapes = len({id(lim) for lim in tw.limits})
    print(f"speed: {len(frame):,} requests, {tw.n_windows} windows of 5 min ({shapes} distinct shapes planned), "
          f"4 policies: median {wall:.2f} s wall, {cpu:.2f} s CPU; peak traced memory {peak / 2**20:.1f} MiB")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--traces", type=Path, default=ROOT.parent / "shared" / "data" / "traces")
    ap.add_argument("--week", action="store_true", help="the generated week (benchmarks/make_week_log.py)")
    ap.add_argument("--speed", action="store_true")
    ap.add_argument("--simulate", action="store_true", help="also replay the logs through the simulator (peak, slo)")
    ap.add_argument("--only", default=None, help="only the logs whose name contains this")
    args = ap.parse_args()
    dep = default_deployment()
    rows = []
    if not args.only or args.only in "demo":
        rows += table("demo (1 day, 20k)", generate(20_000, seed=0), dep, args.simulate)
    for name, rel in TRACES.items():
        path = args.traces / rel
        if path.exists() and (not args.only or args.only in name):
            rows += table(name, load_log(path).frame, dep, args.simulate)
    if args.week and not (args.only and args.only != "week"):
        import make_week_log

        # at 1/50 of the published rates a 70B TP2 pool is one replica all week: the week is planned on
        # Llama-3.1-405B FP8 TP8, whose pool swings with the day
        big = Deployment(get_model("llama-3.1-405b"), get_gpu("h100-sxm"), "fp8", None, 8)
        week = make_week_log.generate(7.0, seed=0)
        rows += table(f"azure-2024 pattern week ({len(week):,}), 405B TP8", week, big, False)
        rows += table("azure-2024 pattern week, 5-min windows, 405B TP8", week, big, False, window_s=300)
        if args.simulate:  # the replay of a whole week is hours on a shared machine: its Monday
            monday = week[week["timestamp"] < week["timestamp"].min().floor("D") + pd.Timedelta(days=1)]
            rows += table(f"azure-2024 pattern Monday ({len(monday):,}), 405B TP8", monday, big, True)
    if args.speed:
        speed(dep)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
