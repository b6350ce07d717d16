"""Recommended SLO ranges per workload shape (``data/slo_ranges.csv``): published planner ranges at p95."""
from __future__ import annotations

from functools import lru_cache

import pandas as pd

from shapeviz.physics.catalogue import DATA_DIR


@lru_cache(maxsize=1)
def slo_ranges() -> pd.DataFrame:
    """The whole table: shape, TTFT and TPOT p95 ranges in ms, what it was published as, and the source."""
    return pd.read_csv(DATA_DIR / "slo_ranges.csv")


def slo_range(shape: str) -> tuple[float, float, float, float]:
    """``(ttft_lo_ms, ttft_hi_ms, tpot_lo_ms, tpot_hi_ms)`` at p95 for a shape id (chat, rag, reasoning, agent, autocomplete)."""
    table = slo_ranges()
    match = table[table["shape"] == str(shape).strip().lower()]
    if match.empty:
        raise ValueError(f"unknown shape {shape!r}; use one of: {', '.join(table['shape'])}")
    row = match.iloc[0]
    return (float(row["ttft_p95_ms_lo"]), float(row["ttft_p95_ms_hi"]),
            float(row["tpot_p95_ms_lo"]), float(row["tpot_p95_ms_hi"]))
