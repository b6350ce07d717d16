"""Issue 41's hostile-input probes: each command's peak memory and time on the files that used to blow it up.

    python benchmarks/bench_probes.py [--only NAME ...] [--keep DIR]

Writes each probe into a temporary folder (or ``--keep DIR``), runs the command line on it in a child process and
reads its peak resident memory (``/usr/bin/time -v``'s "Maximum resident set size") and its wall time.
The issue's target: every command under 1.5 GB on every probe.
Printed with the load average, as benchmarks/README.md records it.
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

ROOT = Path(__file__).resolve().parents[1]
LIMIT_MB = 1536


def _products_csv(path: Path, rows: int, products: int) -> list[str]:
    rng = np.random.default_rng(0)
    names = np.arange(rows) if products >= rows else rng.integers(0, products, rows)
    pd.DataFrame({
        "timestamp": pd.Timestamp("2025-01-01", tz="UTC") + pd.to_timedelta(np.sort(rng.random(rows)) * 3600, "s"),
        "input_tokens": rng.integers(10, 8000, rows), "output_tokens": rng.integers(1, 1000, rows),
        "product": [f"prod-{p}" for p in names]}).to_csv(path, index=False)
    return ["summary", str(path)]


def _parquet(path: Path, column: str, rows: int = 5_000_000, name_bytes: int = 4_000) -> None:
    """``rows`` rows whose ``column`` repeats one ``name_bytes`` string: dictionary-encoded on disk, a few MB."""
    schema = pa.schema([("input_tokens", pa.int32()), ("output_tokens", pa.int32()), (column, pa.string())])
    block = 100_000
    text = pa.array(["P" * name_bytes], pa.string()).take(pa.array(np.zeros(block, np.int32)))
    table = pa.table({"input_tokens": np.full(block, 100, np.int32), "output_tokens": np.full(block, 10, np.int32),
                      column: text}, schema=schema)
    with pq.ParquetWriter(path, schema, store_schema=False) as writer:   # a plain string column, as other tools write
        for _ in range(rows // block):
            writer.write_table(table)


def _parquet_unmapped(path: Path) -> list[str]:
    _parquet(path, "prompt_text")
    return ["summary", str(path)]


def _parquet_gz_unmapped(path: Path) -> list[str]:
    """The unmapped-text probe gzipped: a ``.parquet.gz`` needs its bytes in memory before Parquet can seek."""
    import gzip
    import shutil

    plain = path.with_suffix("")
    _parquet(plain, "prompt_text")
    with plain.open("rb") as src, gzip.open(path, "wb") as dst:
        shutil.copyfileobj(src, dst)
    plain.unlink()
    return ["summary", str(path)]


def _parquet_mapped(path: Path) -> list[str]:
    _parquet(path, "team")
    return ["summary", "--map", "product=team", str(path)]


def _parquet_long_names(path: Path, rows: int = 500_000, block: int = 50_000) -> list[str]:
    """``rows`` distinct 4,000-character product names, zstd: a few MB on disk, 2 GB once read."""
    schema = pa.schema([("input_tokens", pa.int32()), ("output_tokens", pa.int32()), ("product", pa.string())])
    with pq.ParquetWriter(path, schema, compression="zstd", store_schema=False) as writer:
        for start in range(0, rows, block):
            names = pa.array([f"{'P' * 3990}{i:010d}" for i in range(start, start + block)], pa.string())
            writer.write_table(pa.table({"input_tokens": np.full(block, 100, np.int32),
                                         "output_tokens": np.full(block, 10, np.int32), "product": names},
                                        schema=schema))
    return ["summary", str(path)]


def _csv_long_names(path: Path, rows: int = 400_000) -> list[str]:
    """``rows`` distinct 4,000-character product names in a gzip CSV: a few MB, 1.6 GB of names once read."""
    import gzip

    with gzip.open(path, "wt") as out:
        out.write("input_tokens,output_tokens,product\n")
        out.writelines(f"100,10,{'P' * 3990}{i:010d}\n" for i in range(rows))
    return ["summary", str(path)]


def _results(path: Path) -> list[str]:
    n = (255 << 20) // 3
    path.write_bytes(b'{"benchmarks":[' + b",".join([b"{}"] * (n - 10)) + b"]}")
    plan = path.with_name("plan.json")
    plan.write_text(subprocess.run([sys.executable, "-m", "shapeviz", "config", "--isl", "2048", "--osl", "256",
                                    "--rate", "2", "--engine", "vllm", "--layout", "colocated", "--json"],
                                   cwd=ROOT, capture_output=True, text=True, check=True).stdout)
    return ["check", str(plan), str(path)]


def _times(path: Path) -> list[str]:
    path.write_text("timestamp,input_tokens,output_tokens\n1678-01-01T00:00:00Z,10,5\n2261-06-01T00:00:00Z,10,5\n"
                    "2025-01-01T00:00:00Z,20,5\n")
    return ["summary", str(path)]


def _names(path: Path) -> list[str]:
    pd.DataFrame({"timestamp": pd.date_range("2025-01-01", periods=400, freq="s", tz="UTC"),
                  "input_tokens": np.arange(400) + 100, "output_tokens": np.arange(400) % 50 + 10,
                  "product": ["chat\nEVERY PRODUCT MEETS ITS CLASS", "safe\u202egnp.exe"] * 200}).to_csv(path,
                                                                                                        index=False)
    return ["simulate", str(path)]


PROBES: dict[str, tuple[str, Callable[[Path], list[str]]]] = {
    "products-10k": ("products.csv", lambda p: _products_csv(p, 100_000, 10_000)),
    "products-100k": ("products100k.csv", lambda p: _products_csv(p, 100_000, 100_000)),
    "products-1m": ("products1m.csv", lambda p: _products_csv(p, 1_000_000, 1_000_000)),
    "parquet-unmapped-text": ("payload.parquet", _parquet_unmapped),
    "parquet-gz-unmapped-text": ("payload.parquet.gz", _parquet_gz_unmapped),
    "parquet-mapped-label": ("label.parquet", _parquet_mapped),
    "parquet-long-names": ("longnames.parquet", _parquet_long_names),
    "csv-long-names": ("longnames.csv.gz", _csv_long_names),
    "results-empty-objects": ("results.json", _results),
    "timestamps-1678-2261": ("times.csv", _times),
    "names-newline-bidi": ("names.csv", _names),
}


def run(args: list[str]) -> tuple[int, float, float, str]:
    """Exit status, peak RSS (MB), wall seconds and the first line of output of one command-line run.

    Measured by ``/usr/bin/time -v`` around the command: a child's own ``ru_maxrss`` would start from this
    process's peak at the fork (Linux carries it over), and this process has just written the probe.
    """
    start = time.perf_counter()
    done = subprocess.run(["/usr/bin/time", "-v", sys.executable, "-m", "shapeviz", *args], cwd=ROOT,
                          capture_output=True, text=True, errors="replace")
    wall = time.perf_counter() - start
    peak_kb = next(int(line.split(":")[1]) for line in done.stderr.splitlines()
                   if "Maximum resident set size" in line)
    shown = (done.stdout.strip() or done.stderr.strip()).splitlines()[:1]
    return done.returncode, peak_kb / 1024, wall, (shown or [""])[0][:110]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", action="append", choices=sorted(PROBES))
    parser.add_argument("--keep", type=Path, help="write the probes here (kept) instead of a temporary folder")
    args = parser.parse_args()
    folder = args.keep or Path(tempfile.mkdtemp(prefix="probes-"))
    folder.mkdir(parents=True, exist_ok=True)
    print(f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print(f"{'probe':<24}{'command':<10}{'exit':>5}{'peak MB':>9}{'wall s':>8}  first line")
    worst = 0.0
    for name in args.only or list(PROBES):
        filename, make = PROBES[name]
        command = make(folder / filename)
        code, peak, wall, first = run(command)
        worst = max(worst, peak)
        print(f"{name:<24}{command[0]:<10}{code:>5}{peak:>9,.0f}{wall:>8.1f}  {first}")
    print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print(f"largest peak {worst:,.0f} MB: {'under' if worst < LIMIT_MB else 'OVER'} the {LIMIT_MB:,} MB target")


if __name__ == "__main__":
    main()
