"""A large serving-benchmark result as a log and as load-test results: load time and peak memory.

A vLLM ``bench serve --save-result --save-detailed`` JSON of N requests is generated (seeded): ``input_lens``,
``output_lens``, ``ttfts`` (s), ``itls`` (one list of output − 1 gaps in s per request), ``generated_texts``
(a short text each) and ``errors`` (1 % failures), beside the run's summary keys, written as vLLM writes it (one
line, ``json.dumps``). Each method runs in its own child process, so its peak RSS (``resource.getrusage``) is
its own:

- ``load_log``: ``shapeviz.ingest.load_log(path)`` (the per-request arrays read columnar by pyarrow);
- ``check``: ``shapeviz.outputs.measured.parse_result(bytes)`` (the same requests, as one load level);
- ``json.loads``: the file parsed by the standard library, nothing else (what reading it as Python objects costs).

Usage: ``python benchmarks/bench_exports.py --requests 100000 --repeat 3``.
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


def write_result(n: int, path: Path, mean_output: int) -> None:
    """A vLLM bench serve result of ``n`` requests (seeded)."""
    import numpy as np

    rng = np.random.default_rng(0)
    inputs = rng.lognormal(np.log(1000), 0.8, n).astype(int) + 1
    outputs = np.minimum(rng.geometric(1 / mean_output, n), 4096)
    failed = rng.random(n) < 0.01
    outputs[failed] = 0
    ttfts = np.where(failed, 0.0, 0.05 + inputs * 1e-4)
    itls = [np.round(rng.uniform(0.015, 0.03, max(int(o) - 1, 0)), 6).tolist() for o in outputs]
    doc = {"date": "20250610-141502", "backend": "vllm", "model_id": "meta-llama/Llama-3.1-70B-Instruct",
           "request_rate": float("inf"), "max_concurrency": 256, "duration": n / 40.0, "completed": int((~failed).sum()),
           "mean_ttft_ms": float(ttfts[~failed].mean() * 1e3), "median_ttft_ms": float(np.median(ttfts[~failed]) * 1e3),
           "input_lens": inputs.tolist(), "output_lens": outputs.tolist(), "ttfts": np.round(ttfts, 6).tolist(),
           "itls": itls, "generated_texts": ["" if f else "Here is the answer." for f in failed],
           "errors": ["Bad Request" if f else "" for f in failed]}
    path.write_text(json.dumps(doc))


CHILD = """
import json, resource, sys, time
sys.path.insert(0, {root!r})
method, path = sys.argv[1], sys.argv[2]
from shapeviz.ingest import load_log
from shapeviz.outputs.measured import parse_result
start = time.perf_counter(); cpu = time.process_time()
if method == "load_log":
    frame, report = load_log(path)
    rows = report.rows_kept
elif method == "check":
    rows = parse_result(open(path, "rb").read(), "bench.json")[0].requests
else:
    rows = len(json.loads(open(path, "rb").read())["input_lens"])
wall, cpu = time.perf_counter() - start, time.process_time() - cpu
print(json.dumps({{"wall_s": wall, "cpu_s": cpu, "rows": rows,
                  "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}}))
"""


def run(method: str, path: Path) -> dict:
    """One method in a fresh child process: wall, CPU, rows and peak RSS."""
    out = subprocess.run([sys.executable, "-c", CHILD.format(root=str(ROOT)), method, str(path)],
                         capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=100_000)
    parser.add_argument("--mean-output", type=int, default=128)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--write", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.write:
        write_result(args.requests, args.write, args.mean_output)
        return
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "vllm_bench.json"
        # written by a child: a parent that held the document would pass its peak RSS on to every forked child
        subprocess.run([sys.executable, __file__, "--write", str(path), "--requests", str(args.requests),
                        "--mean-output", str(args.mean_output)], check=True)
        size_mb = path.stat().st_size / 2**20
        print(f"{args.requests:,} requests, {size_mb:,.0f} MiB of JSON")
        for method in ("load_log", "check", "json.loads"):
            runs = [run(method, path) for _ in range(args.repeat)]
            print(f"{method:11s} rows {runs[0]['rows']:>9,}  wall {statistics.median(r['wall_s'] for r in runs):6.2f} s"
                  f"  cpu {statistics.median(r['cpu_s'] for r in runs):6.2f} s"
                  f"  peak RSS {max(r['peak_rss_mb'] for r in runs):7,.0f} MB")


if __name__ == "__main__":
    main()
