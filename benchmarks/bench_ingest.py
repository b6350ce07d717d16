"""Ingest benchmark: ``load_log`` + a per-product p50/p90/p99 summary, against a bare pyarrow read and naive pandas.

A log of N generated requests (``shapeviz.workload.synth.generate``) is written in a realistic source format: Helicone-like
column names (``request_created_at`` as ISO-8601 text with ``Z``, ``service``, ``session_id``, ``model``,
``prompt_tokens``, ``completion_tokens``, ``latency`` in ms), as CSV and as Parquet. Each method then runs in its own
child process, so that its peak RSS (``resource.getrusage``) is its own:

- ``shapeviz``: ``load_log(path)`` then the summary (groupby product, quantiles of both token axes);
- ``pyarrow``: ``pyarrow.csv.read_csv`` / ``pyarrow.parquet.read_table`` of the same file, nothing else;
- ``naive``: ``pd.read_csv`` (or ``pd.read_parquet``), ``pd.to_numeric(errors="coerce")`` per column,
  ``pd.to_datetime(format="mixed")`` (per-row format inference), then the same summary.

Each child first runs its method once on a 1,000-row copy of the file (warm-up), then times the real file.
Wall time is the median over ``--repeat`` runs, the methods taking turns; CPU time (all threads) is also given,
since wall time on a shared machine moves with the neighbours' load.

Usage: ``python benchmarks/bench_ingest.py --rows 1000000 --repeat 3`` (add ``--rows 10000000`` for the large run).
"""
from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

QUANTILES = [0.5, 0.9, 0.99]


def write_logs(n_rows: int, folder: Path) -> dict[str, Path]:
    """Generate ``n_rows`` requests and write them as a Helicone-like CSV and Parquet file."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.csv as pa_csv
    import pyarrow.parquet as pq

    from shapeviz.workload.synth import generate

    frame = generate(n_rows, seed=0, with_hashes=False)
    rng = np.random.default_rng(0)
    latency_ms = 150 + 18.0 * frame["output_tokens"].to_numpy() * rng.lognormal(0, 0.2, len(frame))
    table = pa.table({
        "request_created_at": pa.array(frame["timestamp"]).cast(pa.timestamp("ms", tz="UTC"), safe=False),
        "service": pa.array(frame["product"].astype(str)),
        "session_id": pa.array(frame["session_id"].astype(str)),
        "model": pa.array(frame["model"].astype(str)),
        "prompt_tokens": pa.array(frame["input_tokens"].to_numpy()),
        "completion_tokens": pa.array(frame["output_tokens"].to_numpy()),
        "latency": pa.array(np.round(latency_ms, 1)),
    })
    paths = {"csv": folder / f"log_{n_rows}.csv", "parquet": folder / f"log_{n_rows}.parquet"}
    pa_csv.write_csv(table, paths["csv"], write_options=pa_csv.WriteOptions(quoting_style="none"))
    pq.write_table(table, paths["parquet"])
    # a small file of the same shape, to warm each child up (lazy imports and first-call set-up are not
    # throughput, and a long-running app pays them once)
    pa_csv.write_csv(table.slice(0, 1000), _warm(paths["csv"]), write_options=pa_csv.WriteOptions(quoting_style="none"))
    pq.write_table(table.slice(0, 1000), _warm(paths["parquet"]))
    return paths


def _warm(path: Path) -> Path:
    return path.with_name("warm_" + path.name)


def _summary(frame, product: str, input_col: str, output_col: str):
    return frame.groupby(product, observed=True)[[input_col, output_col]].quantile(QUANTILES)


def run_child(method: str, path: Path) -> dict[str, float]:
    """One timed run of one method, in this (fresh) process; returns wall seconds and peak RSS."""
    import pandas as pd
    import pyarrow.csv as pa_csv
    import pyarrow.parquet as pq

    from shapeviz.ingest import load_log

    if not path.name.startswith("warm_") and _warm(path).exists():
        run_child(method, _warm(path))
    base_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    before = resource.getrusage(resource.RUSAGE_SELF)
    start = time.perf_counter()
    if method == "shapeviz":
        frame, report = load_log(path)
        _summary(frame, "product", "input_tokens", "output_tokens")
        rows = report.rows_kept
    elif method == "pyarrow":
        table = pa_csv.read_csv(path) if path.suffix == ".csv" else pq.read_table(path)
        rows = table.num_rows
    elif method == "naive":
        frame = pd.read_csv(path) if path.suffix == ".csv" else pd.read_parquet(path)
        for column in ("prompt_tokens", "completion_tokens", "latency"):
            frame[column] = pd.to_numeric(frame[column], errors="coerce")
        frame["request_created_at"] = pd.to_datetime(frame["request_created_at"], format="mixed", utc=True)
        _summary(frame, "service", "prompt_tokens", "completion_tokens")
        rows = len(frame)
    else:
        raise ValueError(f"unknown method {method!r}; use shapeviz, pyarrow or naive")
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_SELF)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)   # all threads
    return {"wall_s": wall, "cpu_s": cpu, "peak_rss_mib": after.ru_maxrss / 1024,   # ru_maxrss is KiB on Linux
            "base_rss_mib": base_rss / 1024, "rows": rows}


def _once(method: str, path: Path) -> dict[str, float]:
    out = subprocess.run([sys.executable, __file__, "--child", method, str(path)], check=True,
                         capture_output=True, text=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def measure(methods: list[str], path: Path, repeat: int) -> dict[str, dict[str, float]]:
    """Per method: median wall time and largest peak RSS over ``repeat`` fresh child processes.

    The methods take turns (A, B, C, A, B, C, ...) so that a busy machine slows them alike.
    """
    runs: dict[str, list[dict[str, float]]] = {m: [] for m in methods}
    for _ in range(repeat):
        for method in methods:
            runs[method].append(_once(method, path))
    return {m: {"wall_s": statistics.median(r["wall_s"] for r in rs),
                "cpu_s": statistics.median(r["cpu_s"] for r in rs),
                "peak_rss_mib": max(r["peak_rss_mib"] for r in rs),
                "base_rss_mib": min(r["base_rss_mib"] for r in rs), "rows": rs[0]["rows"]}
            for m, rs in runs.items()}


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark and print a Markdown table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, nargs="+", default=[1_000_000], help="log sizes (requests)")
    parser.add_argument("--formats", nargs="+", default=["csv", "parquet"], choices=["csv", "parquet"])
    parser.add_argument("--repeat", type=int, default=3, help="runs per method (median wall time)")
    parser.add_argument("--skip-naive", action="store_true", help="skip the slow naive pandas baseline")
    parser.add_argument("--child", nargs=2, metavar=("METHOD", "PATH"), help=argparse.SUPPRESS)
    parser.add_argument("--write", nargs=2, metavar=("ROWS", "FOLDER"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(run_child(args.child[0], Path(args.child[1]))))
        return 0
    if args.write:
        write_logs(int(args.write[0]), Path(args.write[1]))
        return 0
    print("| rows | format | file MB | shapeviz s | pyarrow s | naive s | shapeviz / pyarrow | naive / shapeviz"
          " | CPU s shapeviz / pyarrow / naive | peak RSS MiB shapeviz / pyarrow / naive |")
    print("|---:|---|---:|---:|---:|---:|---:|---:|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        for n_rows in args.rows:
            # generated in a child: ru_maxrss survives exec, so this process must stay small for the
            # children's peak RSS to be their own
            subprocess.run([sys.executable, __file__, "--write", str(n_rows), tmp], check=True)
            paths = {"csv": Path(tmp) / f"log_{n_rows}.csv", "parquet": Path(tmp) / f"log_{n_rows}.parquet"}
            for fmt in args.formats:
                path = paths[fmt]
                result = measure(["shapeviz", "pyarrow"], path, args.repeat)
                ours, bare = result["shapeviz"], result["pyarrow"]
                naive = None if args.skip_naive else measure(["naive"], path, 1)["naive"]

                def cell(r: dict[str, float] | None, key: str, fmt_: str) -> str:
                    return format(r[key], fmt_) if r else "-"

                print(f"| {n_rows:,} | {fmt} | {path.stat().st_size / 1e6:.0f} | {ours['wall_s']:.2f} | "
                      f"{bare['wall_s']:.2f} | {cell(naive, 'wall_s', '.2f')} | {ours['wall_s'] / bare['wall_s']:.2f}× | "
                      + (f"{naive['wall_s'] / ours['wall_s']:.1f}×" if naive else "-")
                      + f" | {ours['cpu_s']:.2f} / {bare['cpu_s']:.2f} / {cell(naive, 'cpu_s', '.2f')}"
                      f" | {ours['peak_rss_mib']:.0f} / {bare['peak_rss_mib']:.0f} / {cell(naive, 'peak_rss_mib', '.0f')}"
                      f" (base {ours['base_rss_mib']:.0f}) |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
