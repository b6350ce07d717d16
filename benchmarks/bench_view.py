"""The workload view: building it, and one ``analyze`` from every row or from a sketch's view, timed.

The frame is the demo mix of ``shapeviz.workload.synth`` (no prefix hashes); generation and the sketch are not
timed. Steps, each the median of ``--repeat`` runs in this process (wall and CPU seconds: on a shared machine
other processes stretch the wall time):

- ``view from rows``: ``WorkloadView.from_frame`` (token arrays, cached tokens, product and model codes, times);
- ``view from sketch``: ``WorkloadView.from_sketch`` of the frame's sketch (its occupied cells and minutes);
- ``analyze rows``: ``analysis.analyze`` of the loaded log (view, shape profile, clusters, sessions, prefix
  reuse, recommendations), what the dashboard and ``summary`` run on a log that fits in memory;
- ``analyze sketch``: the same ``analyze`` of the sketch's view (cells, its 50,000-row sample for clusters).

Usage: ``python benchmarks/bench_view.py --rows 1000000 --repeat 3``.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from timing import timed  # noqa: E402  (benchmarks/timing.py, beside this script)
from shapeviz.analysis import analyze  # noqa: E402
from shapeviz.ingest import LoadedLog  # noqa: E402
from shapeviz.ingest.frame import LoadReport  # noqa: E402
from shapeviz.workload import synth  # noqa: E402
from shapeviz.workload.sketch import SketchedLog, WorkloadSketch  # noqa: E402
from shapeviz.workload.view import WorkloadView  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    """Print one markdown table row per (rows, step)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", default="1000000", help="comma-separated frame sizes")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args(argv)
    print(f"frame: demo mix (synth.generate, no hashes), seed 0, median of {args.repeat}")
    print("| rows | step | wall s | CPU s | result |")
    print("|---:|---|---:|---:|---|")
    for rows in (int(r) for r in args.rows.split(",")):
        frame = synth.generate(rows, 0, with_hashes=False)
        log = LoadedLog(frame, LoadReport("demo", "frame", "none", len(frame), len(frame)))
        sketch = WorkloadSketch.from_frame(frame, log.report)
        analyze(LoadedLog(frame.iloc[:2_000], log.report))   # warm-up: imports and first-call costs
        steps = {
            "view from rows": lambda: WorkloadView.from_frame(frame, log.report),
            "view from sketch": lambda: WorkloadView.from_sketch(sketch),
            "analyze rows": lambda: analyze(log),
            "analyze sketch": lambda: analyze(SketchedLog(sketch)),
        }
        for name, fn in steps.items():
            result, wall, cpu = timed(fn, args.repeat)
            if isinstance(result, WorkloadView):
                note = f"{len(result.input_tokens):,} weighted rows for {result.n_requests:,} requests"
            else:
                note = (f"k={result.clusters.k}, dominant {result.profile.overall.dominant_shape}, "
                        f"{len(result.recommendations)} recommendations")
            print(f"| {rows:,} | {name} | {wall:.3f} | {cpu:.3f} | {note} |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
