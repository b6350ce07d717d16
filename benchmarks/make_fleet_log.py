"""The product brief's two products plus an autocomplete product, as one request log for the fleet designer.

    python benchmarks/make_fleet_log.py                    # benchmarks/out/fleet_brief.csv, 6,000 requests in 1 h
    python benchmarks/make_fleet_log.py --requests 12000 --hours 1 --out my.csv

A RAG support search (p50 6k in / 150 out) and a coding agent (p50 800 in / 2.5k out), the seed cases of
PRODUCT.md (synth scenario ``shared_pool``, equal shares), plus an IDE autocomplete product (synth profile
``ide-autocomplete``) at a third of the RAG search's traffic (assumed). The generator spreads each day of
synthetic traffic over one day; the day is then compressed to ``--hours`` so that the log carries a load that
needs several replicas (6,000 requests in one hour: 1.7 req/s, assumed), keeping the diurnal shape and the
bursts. Seeded: the same arguments give the same log.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from shapeviz.workload.synth import generate, scenario, write_log

AUTOCOMPLETE_SHARE = 0.2   # assumed: autocomplete requests as a share of the whole log


def fleet_brief(requests: int = 6000, hours: float = 1.0, seed: int = 0) -> pd.DataFrame:
    """The canonical frame: rag-search and coding-agent (PRODUCT.md) plus ide-autocomplete, over ``hours``."""
    n_auto = round(requests * AUTOCOMPLETE_SHARE)
    brief = scenario("shared_pool", requests - n_auto, seed=seed)
    auto = generate(n_auto, seed=seed + 1, products=["ide-autocomplete"], with_hashes=False)
    auto["model"] = brief["model"].iloc[0]   # one model for the fleet (the brief's Llama-3.1-70B)
    frame = pd.concat([brief.drop(columns=["hash_ids"], errors="ignore"), auto], ignore_index=True)
    for col in ("product", "model", "session_id"):
        if col in frame.columns:
            frame[col] = frame[col].astype(str).astype("category")
    start = frame["timestamp"].min()
    frame["timestamp"] = start + (frame["timestamp"] - start) * (hours / 24.0)
    return frame.sort_values("timestamp", kind="stable").reset_index(drop=True)


def main() -> None:
    """Write the log."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=6000)
    ap.add_argument("--hours", type=float, default=1.0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "out" / "fleet_brief.csv"))
    args = ap.parse_args()
    frame = fleet_brief(args.requests, args.hours, args.seed)
    path = write_log(frame, args.out, "csv")
    counts = frame["product"].value_counts().to_dict()
    print(f"{path}: {len(frame):,} requests over {args.hours:g} h; " + ", ".join(f"{k} {v:,}" for k, v in counts.items()))


if __name__ == "__main__":
    main()
