"""Serving-benchmark and load-test exports as logs (and as `check`'s results): load time and peak memory.

Each file is generated (seeded) and written as its tool writes it:

- ``vllm``: a vLLM ``bench serve --save-result --save-detailed`` JSON of N requests: ``input_lens``,
  ``output_lens``, ``ttfts`` (s), ``itls`` (one list of output − 1 gaps in s per request), ``generated_texts`` and
  ``errors`` (1 % failures) beside the run's summary keys, on one line (``json.dumps``);
- ``guidellm``, ``aiperf``: the real fixture of each tool (tests/data/ingest/guidellm_0.8.1_report.json, trimmed
  as described there; tests/data/measured/aiperf_0.13.0_records.jsonl), its records repeated N times with seeded
  changes to the token counts and latencies and fresh session ids (guidellm: one indented JSON document; aiperf:
  one JSON line per record).

Each method runs in its own child process, so its peak RSS (``resource.getrusage``) is its own:

- ``load_log``: ``shapeviz.ingest.load_log(path)``;
- ``check``: ``shapeviz.outputs.measured.parse_result(bytes)`` (vLLM: the same requests, as one load level);
- ``json.loads``: the file parsed by the standard library, nothing else (the floor for a Python parse).

Usage: ``python benchmarks/bench_exports.py --formats vllm --requests 100000 --repeat 3``;
``python benchmarks/bench_exports.py --formats guidellm aiperf --requests 50000 --repeat 2``.
"""
from __future__ import annotations

import argparse
import copy
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
GUIDELLM = ROOT / "tests" / "data" / "ingest" / "guidellm_0.8.1_report.json"
AIPERF = ROOT / "tests" / "data" / "measured" / "aiperf_0.13.0_records.jsonl"
FILES = {"vllm": "vllm_bench.json", "guidellm": "report.json", "aiperf": "profile_export.jsonl"}
METHODS = {"vllm": ("load_log", "check", "json.loads"), "guidellm": ("load_log", "json.loads"),
           "aiperf": ("load_log", "json.loads")}


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


def write_records(kind: str, n: int, path: Path) -> None:
    """A guidellm report or an aiperf records file of ``n`` requests (seeded)."""
    import random

    rng = random.Random(0)
    if kind == "guidellm":
        doc = json.loads(GUIDELLM.read_text())
        bench = doc["benchmarks"][0]
        seeds = bench["requests"]["successful"]
        out = []
        for i in range(n):
            r = copy.deepcopy(seeds[i % len(seeds)])
            r["prompt_tokens"] = rng.randint(50, 4000)
            r["time_to_first_token_ms"] *= rng.uniform(0.8, 1.5)
            r["request_start_time"] += i * 0.05
            r["info"]["conversation_id"] = f"c{i // 3}"
            r["info"]["turn_index"] = i % 3
            out.append(r)
        bench["requests"]["successful"] = out
        path.write_text(json.dumps(doc, indent=1))
    else:
        seeds = [json.loads(line) for line in AIPERF.read_text().splitlines()]
        with path.open("w") as f:
            for i in range(n):
                r = copy.deepcopy(seeds[i % len(seeds)])
                r["metrics"]["input_sequence_length"]["value"] = rng.randint(50, 4000)
                r["metrics"]["time_to_first_token"]["value"] *= rng.uniform(0.8, 1.5)
                r["metadata"]["request_start_ns"] += i * 50_000_000
                r["metadata"]["conversation_id"] = f"c{i // 3}"
                r["metadata"]["turn_index"] = i % 3
                f.write(json.dumps(r) + "\n")


CHILD = """
import json, resource, sys, time
sys.path.insert(0, {root!r})
method, path = sys.argv[1], sys.argv[2]
from shapeviz.ingest import load_log
from shapeviz.outputs.measured import parse_result
start = time.perf_counter(); cpu = time.process_time()
if method == "load_log":
    rows = load_log(path)[1].rows_kept
elif method == "check":
    rows = parse_result(open(path, "rb").read(), "bench.json")[0].requests
elif path.endswith(".jsonl"):
    rows = sum(1 for line in open(path, "rb") if json.loads(line))
else:
    doc = json.loads(open(path, "rb").read())
    rows = len(doc["input_lens"]) if "input_lens" in doc else len(doc["benchmarks"][0]["requests"]["successful"])
wall, cpu = time.perf_counter() - start, time.process_time() - cpu
print(json.dumps({{"wall_s": wall, "cpu_s": cpu, "rows": rows,
                  "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}}))
"""


def run(method: str, path: Path) -> dict:
    """One method in a fresh child process: wall, CPU, rows and peak RSS."""
    out = subprocess.run([sys.executable, "-c", CHILD.format(root=str(ROOT)), method, str(path)],
                         capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def write(kind: str, n: int, path: Path, mean_output: int) -> None:
    """The ``kind`` export of ``n`` requests (seeded)."""
    if kind == "vllm":
        write_result(n, path, mean_output)
    else:
        write_records(kind, n, path)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--formats", nargs="+", choices=list(FILES), default=list(FILES))
    parser.add_argument("--requests", type=int, default=100_000)
    parser.add_argument("--mean-output", type=int, default=128, help="vllm: the mean output length")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--write", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.write:
        write(args.write[0], args.requests, Path(args.write[1]), args.mean_output)
        return
    with tempfile.TemporaryDirectory() as folder:
        for kind in args.formats:
            path = Path(folder) / FILES[kind]
            # written by a child: a parent that held the document would pass its peak RSS on to every forked child
            subprocess.run([sys.executable, __file__, "--write", kind, str(path), "--requests", str(args.requests),
                            "--mean-output", str(args.mean_output)], check=True)
            print(f"{kind}: {args.requests:,} requests, {path.stat().st_size / 2**20:,.0f} MiB")
            for method in METHODS[kind]:
                runs = [run(method, path) for _ in range(args.repeat)]
                print(f"  {method:10s} rows {runs[0]['rows']:>9,}  wall {statistics.median(r['wall_s'] for r in runs):6.2f} s"
                      f"  cpu {statistics.median(r['cpu_s'] for r in runs):6.2f} s"
                      f"  peak RSS {max(r['peak_rss_mb'] for r in runs):7,.0f} MB")


if __name__ == "__main__":
    main()
