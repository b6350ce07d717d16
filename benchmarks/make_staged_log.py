"""A load test's log: a real trace's requests replayed on Poisson stages of rising rate, as guidellm or aiperf run.

    python benchmarks/make_staged_log.py                   # benchmarks/out/staged_azure_conv.csv
    python benchmarks/make_staged_log.py --rates 3,6,9,12,15,18 --stage-s 180 --trace PATH --out my.csv

Each request keeps the (input, output) tokens of the trace's requests in their order (the Azure LLM 2023
conversation trace by default, from ``../shared/data/traces/``); arrivals are Poisson at each stage's rate for
``--stage-s`` seconds. Seeded: the same arguments give the same log. ``simulate`` reports it stage by stage.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from shapeviz.ingest import load_log  # noqa: E402

TRACE = ROOT.parent / "shared" / "data" / "traces" / "azure_llm_2023" / "AzureLLMInferenceTrace_conv.csv"


def staged_log(trace: Path, rates: list[float], stage_s: float, seed: int = 0) -> pd.DataFrame:
    """timestamp, input_tokens, output_tokens: the trace's requests in order on Poisson stages at ``rates``."""
    real = load_log(trace).frame
    rng = np.random.default_rng(seed)
    parts, t = [], 0.0
    for rate in rates:
        gaps = rng.exponential(1.0 / rate, size=int(rate * stage_s * 1.5) + 50)
        x = t + np.cumsum(gaps)
        parts.append(x[x < t + stage_s])
        t += stage_s
    arrival = np.concatenate(parts)
    pick = np.arange(arrival.size) % len(real)
    return pd.DataFrame({
        "timestamp": pd.Timestamp("2026-01-05", tz="UTC") + pd.to_timedelta(arrival, unit="s"),
        "input_tokens": real["input_tokens"].to_numpy()[pick],
        "output_tokens": real["output_tokens"].to_numpy()[pick],
    })


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--trace", type=Path, default=TRACE)
    p.add_argument("--rates", default="3,6,9,12,15,18", help="requests per second of each stage")
    p.add_argument("--stage-s", type=float, default=180.0, help="seconds per stage")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "out" / "staged_azure_conv.csv")
    a = p.parse_args()
    frame = staged_log(a.trace, [float(r) for r in a.rates.split(",")], a.stage_s, a.seed)
    a.out.parent.mkdir(parents=True, exist_ok=True)
    frame.to_csv(a.out, index=False)
    print(f"{a.out}: {len(frame):,} requests in {len(a.rates.split(','))} stages of {a.stage_s:g} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
