"""Report bundle: how long one click on "Build report bundle" (or `python -m shapeviz report`) takes.

    python benchmarks/bench_report.py                      # 1M requests from shapeviz.workload.synth, no prefix hashes
    python benchmarks/bench_report.py --hashes             # with hash_ids (the replay JSONL carries them)
    python benchmarks/bench_report.py --rows 100000 --repeat 3

Prints wall seconds (time.perf_counter) of the whole bundle built from the loaded log (analysis included, PNGs
included), then of its parts: the analyses, the what-if plans and figures, the PNGs (one browser session), the
HTML memo, the CSVs, the replay traces and the zip; the size of each file; the peak traced memory (tracemalloc)
of a bundle without PNGs, and the process's peak RSS (resource.getrusage).
"""
from __future__ import annotations

import argparse
import resource
import statistics
import sys
import time
import tracemalloc
from pathlib import Path
from typing import Any, Callable

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from shapeviz.analysis import analyze  # noqa: E402
from shapeviz.ingest import LoadedLog, LoadReport  # noqa: E402
from shapeviz.outputs import report  # noqa: E402
from shapeviz.outputs.report import bundle as report_bundle  # noqa: E402
from shapeviz.physics import default_deployment  # noqa: E402
from shapeviz.serving import WhatIf, Workload  # noqa: E402
from shapeviz.serving.compare import compare_whatif  # noqa: E402
from shapeviz.workload.synth import generate  # noqa: E402

WHATIF = WhatIf(trim_input=0.3, trim_output=0.2, traffic_multiplier=2.0)


def _time(fn: Callable[[], Any], repeat: int) -> tuple[float, Any]:
    """Median wall seconds over ``repeat`` runs, and the last result."""
    times, result = [], None
    for _ in range(repeat):
        t0 = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), result


def main() -> None:
    """Generate a log, build its bundle, print the figures."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--hashes", action="store_true", help="generate prefix-block hash_ids too")
    parser.add_argument("--repeat", type=int, default=1, help="runs per step (median)")
    parser.add_argument("--no-png", action="store_true", help="skip the PNG export")
    args = parser.parse_args()

    t0 = time.perf_counter()
    frame = generate(args.rows, seed=args.seed, with_hashes=args.hashes)
    n = len(frame)
    log = LoadedLog(frame, LoadReport(source=f"synth-{n}.parquet", format="parquet", compression="none",
                                      rows_read=n, rows_kept=n, mapping={c: c for c in frame.columns}))
    print(f"{n:,} requests generated in {time.perf_counter() - t0:.1f} s "
          f"({'with' if args.hashes else 'without'} hash_ids); what-if: {WHATIF}")
    dep = default_deployment()
    png = not args.no_png

    whole, bundle = _time(lambda: report.report_files(log, deployment=dep, whatif=WHATIF, png=png), args.repeat)
    print(f"\nwhole bundle (analysis + plans + figures + {'PNGs + ' if png else ''}HTML + CSVs + replay): "
          f"{whole:.1f} s; zip {len(bundle.zip()) / 1e6:,.1f} MB")
    for note in bundle.notes:
        print(f"  note: {note}")

    steps: list[tuple[str, float]] = []
    t, analysis = _time(lambda: analyze(log, deployment=dep), args.repeat)
    steps.append(("analyze (shape, clusters, sessions, prefix, rules)", t))
    t, w = _time(lambda: Workload.from_frame(frame), args.repeat)
    steps.append(("Workload.from_frame", t))
    t, cmp = _time(lambda: compare_whatif(w, dep, WHATIF), args.repeat)
    steps.append(("compare_whatif (plans before/after, on today's fleet)", t))
    t, (figures, _, _) = _time(lambda: report_bundle._figures(log, analysis, dep, WHATIF, w, cmp, analysis.profile.corners,
                                                       1000.0, 50.0), args.repeat)
    steps.append(("figures (plane, clusters, pressure, load, rate)", t))
    if png:
        t, _ = _time(lambda: report.figures_to_png(figures), args.repeat)
        steps.append((f"PNGs ({len(figures)} figures, one browser session)", t))
    t, replay = _time(lambda: report.replay_trace(frame, WHATIF, rate_rps=cmp.after.rate_rps), args.repeat)
    steps.append(("replay_trace (what-if per request)", t))
    t, jsonl = _time(lambda: report.replay_jsonl(replay), args.repeat)
    steps.append((f"replay_jsonl ({len(jsonl) / 1e6:,.0f} MB)", t))
    t, vidur = _time(lambda: report.replay_vidur_csv(replay), args.repeat)
    steps.append((f"replay_vidur_csv ({len(vidur) / 1e6:,.0f} MB)", t))
    if "hash_ids" in frame.columns:
        # hash_ids are kept only without an input trim: measure that case too
        keep = WhatIf(trim_output=WHATIF.trim_output, traffic_multiplier=WHATIF.traffic_multiplier)
        hashed = report.replay_trace(frame, keep, rate_rps=cmp.after.rate_rps)
        t, jsonl_h = _time(lambda: report.replay_jsonl(hashed), args.repeat)
        steps.append((f"replay_jsonl with hash_ids, no input trim ({len(jsonl_h) / 1e6:,.0f} MB)", t))
    t, _ = _time(lambda: report.report_files(log, deployment=dep, whatif=WHATIF, png=False, analysis=analysis,
                                             workload=w), args.repeat)
    steps.append(("bundle without PNGs, analysis and workload given (the page's cached case)", t))
    t, _ = _time(bundle.zip, args.repeat)
    steps.append(("zip", t))
    print("\n| step | wall s |\n|---|---:|")
    for name, seconds in steps:
        print(f"| {name} | {seconds:.2f} |")
    print("\n| file | bytes |\n|---|---:|")
    for name, data in bundle.files.items():
        print(f"| {name} | {len(data):,} |")

    tracemalloc.start()
    report.report_files(log, deployment=dep, whatif=WHATIF, png=False, analysis=analysis, workload=w)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux
    print(f"\npeak traced memory of a bundle without PNGs (analysis given): {peak / 2**20:,.0f} MiB; "
          f"process peak RSS {rss:,.0f} MiB")


if __name__ == "__main__":
    main()
