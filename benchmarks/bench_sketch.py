"""Streaming ingest, the workload sketch and the Dask engine, measured whole-process (wall, CPU, peak RSS).

    python benchmarks/bench_sketch.py csv --rows 5000000 --repeat 3     # summary vs a bare pyarrow read
    python benchmarks/bench_sketch.py bomb                              # the 2.14 GB-inflating gzip
    python benchmarks/bench_sketch.py dask --files 20 --rows-per-file 5000000 --repeat 2
    python benchmarks/bench_sketch.py peer --rows 1000000 --aiperf PATH/TO/aiperf   # aiperf analyze-trace beside us

Generated logs go to ``--data`` (default: the system temp folder, never the repository) and are kept between
runs. Each measured command runs in its own child process; wall time, CPU time (user + system, all threads
and children) and peak RSS come from ``os.wait4``, which is what ``/usr/bin/time -v`` reports. For the Dask
runs the client's own peak RSS is printed by the client (the workers are separate processes, reported apart).
"""
from __future__ import annotations

import argparse
import gzip
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PY = sys.executable


def run(args: list[str]) -> dict[str, float | str]:
    """One child process; its exit code and the tail of its output."""
    proc = subprocess.run(args, cwd=ROOT, capture_output=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
    return {"exit": proc.returncode, "out": proc.stdout.decode(errors="replace"),
            "err": proc.stderr.decode(errors="replace")[-4000:]}


def timed(args: list[str]) -> dict[str, float | str]:
    """``run`` inside a ``/usr/bin/time``-like wrapper: wall, CPU (with children) and peak RSS from ``wait4``."""
    wrapper = ("import os,sys,time,subprocess;t=time.perf_counter();p=subprocess.Popen(sys.argv[1:]);"
               "_,s,u=os.wait4(p.pid,0);print('__T__',time.perf_counter()-t,u.ru_utime+u.ru_stime,"
               "u.ru_maxrss/1024,os.waitstatus_to_exitcode(s),file=sys.stderr)")
    result = run([PY, "-c", wrapper, *args])
    line = [x for x in str(result["err"]).splitlines() if x.startswith("__T__")][-1].split()
    result.update(wall_s=float(line[1]), cpu_s=float(line[2]), rss_mib=float(line[3]), exit=int(line[4]))
    return result


def summarise(name: str, runs: list[dict]) -> dict[str, float | str]:
    """Median and range of wall, CPU and RSS over repeats."""
    out: dict[str, float | str] = {"name": name}
    for key in ("wall_s", "cpu_s", "rss_mib"):
        values = [float(r[key]) for r in runs]
        out[key] = statistics.median(values)
        out[key + "_range"] = f"{min(values):.2f}-{max(values):.2f}"
    for key in ("client_rss_mib",):
        values = [float(r[key]) for r in runs if key in r]
        if values:
            out[key] = statistics.median(values)
            out[key + "_range"] = f"{min(values):.0f}-{max(values):.0f}"
    return out


# ------------------------------------------------------------------------------------------------ data

def make_csv(data: Path, rows: int) -> Path:
    path = data / f"sketch_bench_{rows}.csv"
    if not path.exists():
        from shapeviz.workload.synth import generate, write_log

        write_log(generate(rows, seed=0, with_hashes=False), path.with_suffix(".tmp.csv"), "csv")
        path.with_suffix(".tmp.csv").rename(path)
    return path


def make_bomb(data: Path) -> Path:
    """238M identical rows, 2.14 GB once inflated (under the 2 GiB limit), as repeated gzip members (~4 MB)."""
    path = data / "bomb_2_14GB.csv.gz"
    if not path.exists():
        member = gzip.compress(b"1000,200\n" * 1_000_000, compresslevel=9)
        path.write_bytes(gzip.compress(b"input_tokens,output_tokens\n") + member * 238)
    return path


def make_parquet(data: Path, files: int, rows: int) -> Path:
    folder = data / f"sketch_bench_{files}x{rows}"
    folder.mkdir(exist_ok=True)
    from shapeviz.workload.synth import generate, write_log

    for i in range(files):
        path = folder / f"part{i:02d}.parquet"
        if not path.exists():
            tmp = folder / f".part{i:02d}.tmp.parquet"
            write_log(generate(rows, seed=i, with_hashes=False), tmp, "parquet")
            tmp.rename(path)
    return folder


# ------------------------------------------------------------------------------------------------ benchmarks

def bench_csv(data: Path, rows: int, repeat: int) -> list[dict]:
    path = make_csv(data, rows)
    bare = [PY, "-c", f"import pyarrow.csv as c; print(c.read_csv({str(path)!r}).num_rows)"]
    ours = [PY, "-m", "shapeviz", "summary", str(path), "--json"]
    results = {"pyarrow.csv.read_csv": [], "summary": []}
    for _ in range(repeat):   # interleaved, so both see the same load on a shared machine
        results["pyarrow.csv.read_csv"].append(timed(bare))
        results["summary"].append(r := timed(ours))
        assert r["exit"] == 0, r["err"]
    return [summarise(k, v) | {"file_mb": path.stat().st_size / 1e6} for k, v in results.items()]


def bench_bomb(data: Path, repeat: int) -> list[dict]:
    path = make_bomb(data)
    runs = []
    for _ in range(repeat):
        r = timed([PY, "-m", "shapeviz", "summary", str(path)])
        assert r["exit"] == 2 and "exceed the limit" in str(r["err"]), r["err"]
        runs.append(r)
    print(str(runs[-1]["err"]).splitlines()[0])
    return [summarise("summary of the 2.14 GB gzip (refused)", runs) | {"file_mb": path.stat().st_size / 1e6}]


CLIENT = """
import resource, sys, time
from shapeviz.cli import main
code = main(sys.argv[1:])
print('__CLIENT_RSS__', resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, file=sys.stderr)
sys.exit(code)
"""

COUNT = """
import logging, resource, sys
import dask.dataframe as dd
from distributed import Client, LocalCluster
from shapeviz.workload.distributed import _columns_used, expand_paths
import pyarrow.parquet as pq
files = expand_paths([sys.argv[1]])
columns = _columns_used(pq.ParquetFile(files[0]).schema_arrow.names, None)
with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None,
                  silence_logs=logging.ERROR) as cluster, Client(cluster):
    rows = dd.read_parquet(files, columns=columns).map_partitions(len).sum().compute()
print(rows, columns)
print('__CLIENT_RSS__', resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, file=sys.stderr)
"""


def bench_dask(data: Path, files: int, rows: int, repeat: int) -> list[dict]:
    folder = make_parquet(data, files, rows)
    glob = str(folder / "*.parquet")
    commands = {
        "dask read + count rows (same columns)": [PY, "-c", COUNT, glob],
        "summary --engine dask --workers 2": [PY, "-c", CLIENT, "summary", glob, "--engine", "dask",
                                              "--workers", "2", "--json"],
    }
    results: dict[str, list[dict]] = {k: [] for k in commands}
    for _ in range(repeat):
        for name, command in commands.items():
            r = timed(command)
            assert r["exit"] == 0, r["err"]
            line = [x for x in str(r["err"]).splitlines() if x.startswith("__CLIENT_RSS__")][-1]
            r["client_rss_mib"] = float(line.split()[1])
            results[name].append(r)
    doc = json.loads(str(results["summary --engine dask --workers 2"][-1]["out"]))
    print(f"summary: {doc['rows']['read']:,} rows read, {doc['rows']['kept']:,} kept; "
          f"count job: {str(results['dask read + count rows (same columns)'][-1]['out']).split()[0]} rows")
    return [summarise(k, v) for k, v in results.items()]


def make_mooncake(data: Path, rows: int) -> Path:
    """A Mooncake-format JSONL (timestamp ms, input_length, output_length, hash_ids), what aiperf analyses."""
    path = data / f"mooncake_{rows}.jsonl"
    if not path.exists():
        import numpy as np

        from shapeviz.workload.synth import generate

        frame = generate(rows, seed=0)
        ms = ((frame["timestamp"] - frame["timestamp"].min()) // np.timedelta64(1, "ms")).to_numpy()
        tmp = path.with_suffix(".tmp")
        with open(tmp, "w") as out:
            for t, n, m, h in zip(ms, frame["input_tokens"].to_numpy(), frame["output_tokens"].to_numpy(),
                                  frame["hash_ids"]):
                out.write(f'{{"timestamp": {int(t)}, "input_length": {int(n)}, "output_length": {int(m)}, '
                          f'"hash_ids": [{",".join(map(str, h.tolist()))}]}}\n')
        tmp.rename(path)
    return path


def bench_peer(data: Path, rows: int, repeat: int, aiperf: str) -> list[dict]:
    """The same job, trace statistics of a big Mooncake log (ISL/OSL distributions, prefix-cache hit rate)."""
    path = make_mooncake(data, rows)
    commands = {"aiperf analyze-trace": [aiperf, "analyze-trace", str(path), "--block-size", "512",
                                         "--output-file", str(data / "aiperf_report.json")],
                "shapeviz summary": [PY, "-m", "shapeviz", "summary", str(path), "--json"]}
    results: dict[str, list[dict]] = {k: [] for k in commands}
    for _ in range(repeat):
        for name, command in commands.items():
            r = timed(command)
            assert r["exit"] == 0, r["err"]
            results[name].append(r)
    doc = json.loads(str(results["shapeviz summary"][-1]["out"]))
    pc = doc.get("prefix_cache", {})
    print(f"shapeviz: input p50 {doc['overall']['input']['p50']:,.0f}, output p50 "
          f"{doc['overall']['output']['p50']:,.0f}, prefix hit (blocks) {pc.get('hit_ratio_blocks')}")
    print("aiperf:", str(results["aiperf analyze-trace"][-1]["out"])[-1500:])
    return [summarise(k, v) | {"file_mb": path.stat().st_size / 1e6} for k, v in results.items()]


def main() -> None:
    """Parse the options, run one benchmark, print a table."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("what", choices=("csv", "bomb", "dask", "peer"))
    parser.add_argument("--aiperf", default="aiperf", help="the aiperf executable (its own virtualenv)")
    parser.add_argument("--rows", type=int, default=5_000_000)
    parser.add_argument("--files", type=int, default=20)
    parser.add_argument("--rows-per-file", type=int, default=5_000_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--data", type=Path, default=Path(tempfile.gettempdir()) / "shapeviz-bench")
    args = parser.parse_args()
    args.data.mkdir(parents=True, exist_ok=True)
    sys.path.insert(0, str(ROOT))
    if args.what == "csv":
        table = bench_csv(args.data, args.rows, args.repeat)
    elif args.what == "bomb":
        table = bench_bomb(args.data, args.repeat)
    elif args.what == "peer":
        table = bench_peer(args.data, args.rows, args.repeat, args.aiperf)
    else:
        table = bench_dask(args.data, args.files, args.rows_per_file, args.repeat)
    for row in table:
        print(json.dumps(row))


if __name__ == "__main__":
    main()
