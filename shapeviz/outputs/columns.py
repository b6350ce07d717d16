"""How a table reads: a human name with its unit for every column id the model layer returns, a rounding that
means something, booleans as words, and the names of the model's own ids (design families, layouts).

One map for every page and file: a column called ``ttft_p90_ms`` is "TTFT p90 (ms)" to the nearest millisecond
wherever it is shown. Pure data, no Streamlit: the page's table helper turns a ``ColumnSpec`` into its column
configuration.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np
import pandas as pd

YES, NO = "yes", "no"


@dataclass(frozen=True)
class ColumnSpec:
    """How one column is shown: its header, and a printf format for its numbers (None: text as it is)."""

    label: str
    format: str | None = None


# Formats: milliseconds to the millisecond (TPOT, tens of ms, to a tenth), money to the cent (per 1M tokens, to a
# tenth of a cent), shares as whole percents, rates to three significant figures.
MS, MS_FINE, USD, USD_FINE, PERCENT, COUNT, RATE = "%.0f", "%.1f", "$%.2f", "$%.3f", "%.0f%%", "%d", "%.3g"

COLUMNS: dict[str, ColumnSpec] = {
    "gpu": ColumnSpec("GPU"), "precision": ColumnSpec("weights"), "layout": ColumnSpec("layout"),
    "tp": ColumnSpec("GPUs per replica (TP)", COUNT), "gpus": ColumnSpec("GPUs", COUNT),
    "replicas": ColumnSpec("replicas", COUNT), "replicas_needed": ColumnSpec("replicas needed", COUNT),
    "requests": ColumnSpec("requests", COUNT), "month": ColumnSpec("month", COUNT),
    "meets_slo": ColumnSpec("meets both SLOs"), "meets": ColumnSpec("meets its class"),
    "ttft_p90_ms": ColumnSpec("TTFT p90 (ms)", MS), "ttft_p50_ms": ColumnSpec("TTFT p50 (ms)", MS),
    "tpot_p90_ms": ColumnSpec("TPOT p90 (ms)", MS_FINE), "tpot_p50_ms": ColumnSpec("TPOT p50 (ms)", MS_FINE),
    "ttft_slo_ms": ColumnSpec("TTFT target (ms)", MS), "tpot_slo_ms": ColumnSpec("TPOT target (ms)", MS_FINE),
    "usd_per_hour": ColumnSpec("$ / hour", USD), "usd_per_million_tokens": ColumnSpec("$ / 1M tokens", USD_FINE),
    "usd_per_month": ColumnSpec("$ / month", "$%.0f"),
    "rate_rps": ColumnSpec("requests / s", RATE), "goodput_rps": ColumnSpec("goodput (requests / s)", RATE),
    "mean_output_tokens": ColumnSpec("mean output tokens", "%.0f"),
    "attainment": ColumnSpec("SLO attainment", PERCENT), "start": ColumnSpec("window start"),
    "reason": ColumnSpec("why"), "corner": ColumnSpec("corner"), "product": ColumnSpec("product"),
}
# Ids of the model's choices, as a planner says them.
DESIGN_FAMILIES: dict[str, str] = {
    "shared_fcfs": "one shared pool (first come, first served)",
    "shared_deadline": "one shared pool (earliest deadline first)",
    "per_product": "a pool per product",
    "per_corner": "a pool per corner",
    "split": "prefill and decode split",
    "mix": "GPU types mixed by prompt size",
}
# A share is a fraction of 0..1 shown as a whole percent: its column id says so.
_SHARE = re.compile(r"(share|ratio|attainment|goodput$|saving|utili[sz]ation)")


def design_family(family: str) -> str:
    """The planner's words for a fleet design's family id (the id itself when it has none)."""
    return DESIGN_FAMILIES.get(family, family.replace("_", " "))


def label(column: str) -> str:
    """A column's header: the map's, else the id with its unit suffix spelt out (``x_ms`` → "x (ms)")."""
    if column in COLUMNS:
        return COLUMNS[column].label
    words = str(column)
    for suffix, unit in (("_ms", " (ms)"), ("_rps", " (requests / s)"), ("_usd", " ($)"), ("_s", " (s)")):
        if words.endswith(suffix):
            words = words[: -len(suffix)] + unit
            break
    return words.replace("_", " ")


def number_format(column: str, values: pd.Series) -> str:
    """A printf format that rounds ``values`` to what matters: a share to a whole percent (after ``readable``
    scales it), big numbers to units, small ones to three significant figures; never 745.8977."""
    if column in COLUMNS and COLUMNS[column].format:
        return str(COLUMNS[column].format)
    if is_share(column, values):
        return PERCENT
    finite = values.to_numpy(dtype=np.float64, na_value=np.nan)
    finite = finite[np.isfinite(finite)]
    if finite.size and np.all(finite == np.round(finite)):
        return "%d"
    top = float(np.abs(finite).max()) if finite.size else 0.0
    return "%.0f" if top >= 100 else "%.1f" if top >= 10 else "%.3g"


def is_share(column: str, values: pd.Series) -> bool:
    """A fraction shown as a percent: its id names a share and every value lies in 0..1."""
    if column in COLUMNS:
        return COLUMNS[column].format == PERCENT
    v = values.dropna()
    return bool(_SHARE.search(str(column).lower())) and len(v) > 0 and bool(((v >= 0) & (v <= 1)).all())


def readable(frame: pd.DataFrame) -> tuple[pd.DataFrame, dict[str, ColumnSpec]]:
    """A copy of ``frame`` as a reader sees it, and each column's header and format: booleans as yes/no, shares
    ×100 (shown with a % sign), every number with a format; the ids stay the frame's (a CSV keeps its own)."""
    shown = frame.copy()
    specs: dict[str, ColumnSpec] = {}
    for column in shown.columns:
        values = shown[column]
        name = str(column)
        if pd.api.types.is_bool_dtype(values) or _all_bool(values):
            shown[column] = [None if v is None or v is pd.NA else YES if bool(v) else NO for v in values]
            specs[name] = ColumnSpec(label(name))
        elif pd.api.types.is_numeric_dtype(values):
            fmt = number_format(name, values)
            if fmt == PERCENT and is_share(name, values):
                shown[column] = values * 100.0
            specs[name] = ColumnSpec(label(name), fmt)
        else:
            specs[name] = ColumnSpec(label(name))
    return shown, specs


def _all_bool(values: pd.Series) -> bool:
    # an object column of True/False with gaps (None) is a boolean column too
    if values.dtype != object:
        return False
    present = [v for v in values if v is not None and v is not pd.NA]
    return bool(present) and all(isinstance(v, (bool, np.bool_)) for v in present)
