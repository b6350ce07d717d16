"""Generate seeded request logs for the other benchmarks, and measure the generator itself.

    python benchmarks/make_logs.py                       # 1M rows as csv, csv.gz, parquet, jsonl.zst
    python benchmarks/make_logs.py --rows 10000000 --formats parquet
    python benchmarks/make_logs.py --measure 1000000 10000000   # generate() time and peak memory only

Logs go to ``benchmarks/out/`` (git-ignored), named ``synth_<rows>_seed<seed>.<ext>``; existing files are kept
unless ``--force``. Each ``--measure`` size runs in a fresh process so its peak memory is its own.
"""
from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from shapeviz.workload.synth import generate, write_log  # noqa: E402

OUT = ROOT / "benchmarks" / "out"
# extension -> write_log format
FORMATS: dict[str, str] = {
    "csv": "csv", "csv.gz": "csv", "csv.zst": "csv", "tsv": "tsv", "parquet": "parquet",
    "jsonl": "jsonl", "jsonl.gz": "jsonl", "jsonl.zst": "jsonl", "json": "json",
}


def _peak_rss_mib() -> float:
    """Peak resident memory of this process so far (Linux reports KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def measure_one(rows: int, seed: int, with_hashes: bool) -> dict[str, float]:
    """Time one generate() call in this process and report its peak memory above the starting point."""
    import numpy as np

    generate(1000, seed=seed, with_hashes=with_hashes)  # warm imports and the data file
    base = _peak_rss_mib()
    start = time.perf_counter()
    frame = generate(rows, seed=seed, with_hashes=with_hashes)
    seconds = time.perf_counter() - start
    blocks = int(frame["hash_ids"].map(len).sum()) if with_hashes else 0
    return {
        "rows": rows, "with_hashes": with_hashes, "seconds": round(seconds, 2),
        "peak_rss_mib": round(_peak_rss_mib(), 0), "peak_above_start_mib": round(_peak_rss_mib() - base, 0),
        "frame_mib": round(frame.memory_usage(deep=True).sum() / 2**20 + blocks * 8 / 2**20, 0),
        "hash_blocks": blocks, "sessions": int(frame["session_id"].nunique()) if "session_id" in frame else 0,
        "input_p50": float(np.median(frame["input_tokens"])),
    }


def measure(sizes: list[int], seed: int, with_hashes: bool, repeat: int) -> None:
    """Run measure_one for each size (and repeat) in a fresh interpreter; print one line per run, then medians."""
    for rows in sizes:
        runs = []
        for _ in range(repeat):
            cmd = [sys.executable, __file__, "--_measure-one", str(rows), "--seed", str(seed)]
            if not with_hashes:
                cmd.append("--no-hashes")
            done = subprocess.run(cmd, capture_output=True, text=True, check=True)
            runs.append(json.loads(done.stdout.strip().splitlines()[-1]))
            print(json.dumps(runs[-1]))
        seconds = sorted(r["seconds"] for r in runs)[len(runs) // 2]
        peak = sorted(r["peak_rss_mib"] for r in runs)[len(runs) // 2]
        print(f"generate({rows:,}, with_hashes={with_hashes}): median {seconds:.2f} s, peak RSS {peak:,.0f} MiB "
              f"over {repeat} run(s)")


def make_logs(rows: int, seed: int, formats: list[str], out: Path, with_hashes: bool, force: bool) -> list[Path]:
    """Write one generated frame in each format; print time and size of each write."""
    out.mkdir(parents=True, exist_ok=True)
    wanted = {ext: out / f"synth_{rows}_seed{seed}.{ext}" for ext in formats}
    todo = {ext: p for ext, p in wanted.items() if force or not p.exists()}
    if not todo:
        print("all logs exist (use --force to rewrite)")
        return list(wanted.values())
    start = time.perf_counter()
    frame = generate(rows, seed=seed, with_hashes=with_hashes)
    print(f"generate({rows:,}): {time.perf_counter() - start:.2f} s")
    for ext, path in todo.items():
        start = time.perf_counter()
        write_log(frame, path, FORMATS[ext])
        print(f"{path.name}: {time.perf_counter() - start:.2f} s, {path.stat().st_size / 2**20:,.1f} MiB")
    return list(wanted.values())


def main(argv: list[str] | None = None) -> None:
    """Command line: make logs (default) or measure the generator."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=1_000_000, help="requests per log (default 1,000,000)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--formats", default="csv,csv.gz,parquet,jsonl.zst",
                        help=f"comma-separated, from: {', '.join(FORMATS)}")
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument("--hashes", action="store_true",
                        help="include hash_ids (JSON and Parquet logs carry them; large at millions of rows)")
    parser.add_argument("--force", action="store_true", help="rewrite logs that exist")
    parser.add_argument("--measure", type=int, nargs="+", metavar="ROWS", help="measure generate() at these sizes")
    parser.add_argument("--no-hashes", action="store_true", help="with --measure: generate without hash_ids")
    parser.add_argument("--repeat", type=int, default=3, help="with --measure: runs per size (median reported)")
    parser.add_argument("--_measure-one", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)

    if args._measure_one:
        print(json.dumps(measure_one(args._measure_one, args.seed, not args.no_hashes)))
    elif args.measure:
        measure(args.measure, args.seed, not args.no_hashes, args.repeat)
    else:
        formats = [f.strip() for f in args.formats.split(",") if f.strip()]
        unknown = [f for f in formats if f not in FORMATS]
        if unknown:
            parser.error(f"unknown format {', '.join(unknown)}: choose from {', '.join(FORMATS)}")
        make_logs(args.rows, args.seed, formats, args.out, args.hashes, args.force)


if __name__ == "__main__":
    main()
