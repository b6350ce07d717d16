"""Where `summary` of a big CSV spends its time, stage by stage, beside a bare pyarrow read (issue 40, items 3-4).

    python benchmarks/bench_summary_stages.py --rows 5000000 --repeat 3

Each repeat runs, back to back in fresh child processes, a bare two-thread ``pyarrow.csv.read_csv`` of the file and
``python -m shapeviz summary FILE --json`` with every stage of the command timed from inside (the stage functions
wrapped with a timer; the wrapped functions do the same work). Stages: imports (the command's modules), parsing
(the streamed read, ``iter_tables``), the canonical frame (``build_frame`` per chunk), the sketch (per chunk and the
merges), the analysis (deployment, shape profile and corner shares, clusters with the mixed test, sessions, prefix
reuse, traffic, recommendations) and the output (document and JSON). Wall and CPU seconds (``time.process_time``:
every thread of the process); the load average (``os.getloadavg``) is printed beside each run. The log is
``shapeviz.workload.synth.generate`` written as CSV into ``--data`` (the system temp folder, never the repository).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PY = sys.executable

CHILD = r"""
import json, sys, time
try:   # what `python -m shapeviz` does first (issue 41): Arrow's buffers from glibc's malloc
    from shapeviz.allocator import arrow_pool_from_malloc
    arrow_pool_from_malloc()
except ImportError:   # --before: code older than that choice
    pass
T = {}
def clock():
    return time.perf_counter(), time.process_time()
def add(name, w0, c0):
    w1, c1 = clock()
    w, c = T.get(name, (0.0, 0.0))
    T[name] = (w + w1 - w0, c + c1 - c0)
w0, c0 = clock()
import shapeviz.outputs.summary as summary_mod
import shapeviz.cli as cli
add("imports", w0, c0)
import shapeviz.workload.sketch as sk
import shapeviz.analysis as an
import shapeviz.analyses.clusters as cl
import shapeviz.outputs.summary as su

def timed(module, attr, name):
    inner = getattr(module, attr)
    def wrapper(*a, **k):
        w0, c0 = clock()
        try:
            return inner(*a, **k)
        finally:
            add(name, w0, c0)
    setattr(module, attr, wrapper)

def timed_iter(module, attr, name):
    inner = getattr(module, attr)
    def wrapper(*a, **k):
        it = inner(*a, **k)
        while True:
            w0, c0 = clock()
            try:
                item = next(it)
            except StopIteration:
                add(name, w0, c0)
                return
            add(name, w0, c0)
            yield item
    setattr(module, attr, wrapper)

timed_iter(sk, "iter_tables", "parse (iter_tables)")
timed(sk, "_concat_raw", "parse (join blocks into chunks)")
timed(sk, "build_frame", "canonical frame (build_frame)")
timed(sk.WorkloadSketch, "from_frame", "sketch (per chunk)")
timed(sk, "merge_all", "sketch (merges)")
timed(sk.WorkloadSketch, "merge", "sketch (merges)")
timed(an, "as_view", "analysis: view")
timed(an, "request_gpu_time", "analysis: GPU-time per cell")
timed(an, "shape_profile", "analysis: shape profile, corner shares")
timed(an, "find_clusters", "analysis: clusters + mixed test")
timed(cl, "product_modes", "  of which the mixed test (product_modes)")
timed(cl, "_mixed_pools", "  of which mixed pools")
timed(an, "_sessions", "analysis: sessions")
timed(an, "prefix_reuse_of", "analysis: prefix reuse")
timed(an, "traffic", "analysis: traffic")
timed(an, "_recommendations", "analysis: recommendations")
timed(su, "default_deployment_for", "analysis: deployment of the log")
timed(su, "summary_document", "output: document")
timed(cli, "_emit", "output: JSON")
w0, c0 = clock()
code = cli.main(["summary", *sys.argv[1:], "--json"])
add("total after imports", w0, c0)
print("__STAGES__", json.dumps(T), file=sys.stderr)
sys.exit(code)
"""

BARE = "import pyarrow.csv as c, sys; print(c.read_csv(sys.argv[1]).num_rows)"


def timed_child(args: list[str], root: Path = ROOT) -> dict:
    """A child process's wall, CPU (user + system, all threads, from ``os.wait4``), peak RSS and stderr."""
    start = time.perf_counter()
    proc = subprocess.Popen(args, cwd=root, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            env={**os.environ, "PYTHONPATH": str(root)})
    err = proc.stderr.read().decode(errors="replace")
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    assert os.waitstatus_to_exitcode(status) == 0, err[-3000:]
    return {"wall_s": wall, "cpu_s": usage.ru_utime + usage.ru_stime, "rss_mib": usage.ru_maxrss / 1024, "err": err}


def main() -> None:
    """Generate the log once, then run bare read and staged summary back to back, ``--repeat`` times."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=5_000_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--data", type=Path, default=Path(tempfile.gettempdir()) / "shapeviz-bench")
    parser.add_argument("--before", type=Path, default=None,
                        help="a checkout of the code before (e.g. `git archive COMMIT | tar -x -C DIR`): its whole "
                             "`summary` is timed in the same runs, between the bare read and this code's")
    args = parser.parse_args()
    args.data.mkdir(parents=True, exist_ok=True)
    sys.path.insert(0, str(ROOT))
    from benchmarks.bench_sketch import make_csv

    path = make_csv(args.data, args.rows)
    runs: list[dict] = []
    for i in range(args.repeat):
        load = os.getloadavg()[0]
        bare = timed_child([PY, "-c", BARE, str(path)])
        if args.before is not None:
            before = timed_child([PY, "-m", "shapeviz", "summary", str(path), "--json"], args.before)
            print(f"run {i + 1}: before {before['wall_s']:.2f} s (CPU {before['cpu_s']:.2f}, "
                  f"{before['rss_mib']:.0f} MiB)", flush=True)
        ours = timed_child([PY, "-c", CHILD, str(path)])
        stages = json.loads([x for x in ours["err"].splitlines() if x.startswith("__STAGES__")][-1].split(" ", 1)[1])
        runs.append({"load": load, "bare": bare, "ours": ours, "stages": stages}
                    | ({"before": before} if args.before is not None else {}))
        print(f"run {i + 1}: load {load:.2f}  bare {bare['wall_s']:.2f} s (CPU {bare['cpu_s']:.2f})  summary "
              f"{ours['wall_s']:.2f} s (CPU {ours['cpu_s']:.2f}, {ours['rss_mib']:.0f} MiB)  ratio "
              f"{ours['wall_s'] / bare['wall_s']:.2f}x", flush=True)
    print(f"\nfile: {path.stat().st_size / 1e6:.0f} MB, {args.rows:,} rows; medians of {args.repeat} runs, "
          f"load average {min(r['load'] for r in runs):.2f}-{max(r['load'] for r in runs):.2f}")
    print("| stage | wall s | CPU s |\n|---|---:|---:|")
    for name in runs[0]["stages"]:
        wall = statistics.median(r["stages"].get(name, (0, 0))[0] for r in runs)
        cpu = statistics.median(r["stages"].get(name, (0, 0))[1] for r in runs)
        print(f"| {name} | {wall:.3f} | {cpu:.3f} |")
    sides = ("bare", "ours", "before") if args.before is not None else ("bare", "ours")
    med = {side: {k: statistics.median(r[side][k] for r in runs) for k in ("wall_s", "cpu_s", "rss_mib")}
           for side in sides}
    ratios = sorted(r["ours"]["wall_s"] / r["bare"]["wall_s"] for r in runs)
    print(f"| whole `summary` process | {med['ours']['wall_s']:.2f} | {med['ours']['cpu_s']:.2f} |")
    print(f"| bare `pyarrow.csv.read_csv` process | {med['bare']['wall_s']:.2f} | {med['bare']['cpu_s']:.2f} |")
    if args.before is not None:
        print(f"| whole `summary` process, code before | {med['before']['wall_s']:.2f} | {med['before']['cpu_s']:.2f} |")
        print(f"before / bare: wall {med['before']['wall_s'] / med['bare']['wall_s']:.2f}x, CPU "
              f"{med['before']['cpu_s'] / med['bare']['cpu_s']:.2f}x; per-run wall ratios "
              + ", ".join(f"{x:.2f}" for x in sorted(r["before"]["wall_s"] / r["bare"]["wall_s"] for r in runs)))
    print(f"ratio of medians: wall {med['ours']['wall_s'] / med['bare']['wall_s']:.2f}x, CPU "
          f"{med['ours']['cpu_s'] / med['bare']['cpu_s']:.2f}x; per-run wall ratios "
          + ", ".join(f"{x:.2f}" for x in ratios)
          + f"; peak RSS {med['ours']['rss_mib']:.0f} / {med['bare']['rss_mib']:.0f} MiB")


if __name__ == "__main__":
    main()
