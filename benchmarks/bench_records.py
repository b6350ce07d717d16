"""Load-test per-request records as a log: a large guidellm report and aiperf profile_export.jsonl, time and memory.

Each file is built from the real fixture of its tool (tests/data/ingest/guidellm_0.8.1_report.json, trimmed as
described there; tests/data/measured/aiperf_0.13.0_records.jsonl), its records repeated N times with seeded changes
to the token counts and latencies and fresh session ids, written as the tools write them (guidellm: one indented
JSON document; aiperf: one JSON line per record). Each method runs in its own child process, so its peak RSS
(``resource.getrusage``) is its own:

- ``load_log``: ``shapeviz.ingest.load_log(path)``;
- ``json.loads``: the file parsed by the standard library, nothing else (the floor for a Python parse).

Usage: ``python benchmarks/bench_records.py --requests 50000 --repeat 3``.
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


def write(kind: str, n: int, path: Path) -> None:
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
start = time.perf_counter(); cpu = time.process_time()
if method == "load_log":
    rows = load_log(path)[1].rows_kept
elif path.endswith(".jsonl"):
    rows = sum(1 for line in open(path, "rb") if json.loads(line))
else:
    rows = len(json.loads(open(path, "rb").read())["benchmarks"][0]["requests"]["successful"])
wall, cpu = time.perf_counter() - start, time.process_time() - cpu
print(json.dumps({{"wall_s": wall, "cpu_s": cpu, "rows": rows,
                  "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}}))
"""


def run(method: str, path: Path) -> dict:
    out = subprocess.run([sys.executable, "-c", CHILD.format(root=str(ROOT)), method, str(path)],
                         capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=50_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--write", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.write:
        write(args.write[0], args.requests, Path(args.write[1]))
        return
    with tempfile.TemporaryDirectory() as folder:
        for kind, name in (("guidellm", "report.json"), ("aiperf", "profile_export.jsonl")):
            path = Path(folder) / name
            # written by a child: a parent that held the records would pass its peak RSS on to every child
            subprocess.run([sys.executable, __file__, "--write", kind, str(path), "--requests", str(args.requests)],
                           check=True)
            print(f"{kind}: {args.requests:,} requests, {path.stat().st_size / 2**20:,.0f} MiB")
            for method in ("load_log", "json.loads"):
                runs = [run(method, path) for _ in range(args.repeat)]
                print(f"  {method:10s} rows {runs[0]['rows']:>8,}  wall {statistics.median(r['wall_s'] for r in runs):6.2f} s"
                      f"  cpu {statistics.median(r['cpu_s'] for r in runs):6.2f} s"
                      f"  peak RSS {max(r['peak_rss_mb'] for r in runs):6,.0f} MB")


if __name__ == "__main__":
    main()
