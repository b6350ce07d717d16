"""The tables of the report: load report, shapes per product, clusters, the plan before/after, recommendations."""
from __future__ import annotations

import math
from typing import Any, Callable

import numpy as np
import pandas as pd

from shapeviz.ingest import LoadedLog
from shapeviz.recommend import LEVER_LABELS


# --- tables -----------------------------------------------------------------------------------------------------
def load_report_table(log: LoadedLog) -> pd.DataFrame:
    """How the rows were counted: read, kept, dropped by reason, the column mapping and the notes."""
    r = log.report
    rows: list[tuple[str, str, object]] = [
        ("source", "file", r.source), ("source", "format", r.format), ("source", "compression", r.compression),
        ("rows", "read", r.rows_read), ("rows", "kept", r.rows_kept),
    ]
    rows += [("rows", f"dropped: {reason}", count) for reason, count in r.dropped.items()]
    rows += [("mapping", canonical, column) for canonical, column in r.mapping.items()]
    rows += [("note", str(i + 1), note) for i, note in enumerate(r.notes)]
    return pd.DataFrame(rows, columns=["section", "item", "value"])


def products_table(analysis: Any) -> pd.DataFrame:
    """Shape and phase of the whole log and of each product: percentiles, corner, phase, shares."""
    mixed = {f.scope for f in analysis.clusters.mixed_products}
    rows = []
    for s in analysis.profile.scopes():
        rows.append({
            "product": s.scope, "requests": s.requests, "share_of_requests": s.share_of_requests,
            "shape": s.dominant_shape, "phase": s.phase, "prefill_share_of_gpu_time": s.prefill_gpu_share,
            "share_of_gpu_time": s.share_of_gpu,
            "input_p50": s.input["p50"], "input_p90": s.input["p90"], "input_p99": s.input["p99"],
            "output_p50": s.output["p50"], "output_p90": s.output["p90"], "output_p99": s.output["p99"],
            "mixed": s.scope in mixed,
        })
    return pd.DataFrame(rows)


def clusters_table(analysis: Any) -> pd.DataFrame:
    """The clusters found on the token plane: corner, phase, centre, p50, shares, rate and products."""
    rate = analysis.traffic.mean_rps
    rows = []
    for c in analysis.clusters.clusters:
        rows.append({
            "cluster": f"C{c.id}", "corner": c.shape, "phase": c.phase, "requests": c.requests,
            "share_of_requests": c.share, "share_of_gpu_time": c.gpu_share,
            "input_center": c.input_center, "output_center": c.output_center,
            "input_p50": c.input_p50, "output_p50": c.output_p50,
            "mean_rate_rps": None if rate is None else c.share * rate,
            "products": "; ".join(f"{p} {share:.0%}" for p, share in c.products.items()),
        })
    return pd.DataFrame(rows)


# (label, unit, getter, provenance key) of the capacity plan table, in reading order
_PLAN_ROWS: tuple[tuple[str, str, Callable[[dict], Any], str], ...] = (
    ("request rate", "req/s", lambda p: p["rate_rps"], "rate_rps"),
    ("prefill demand (uncached input tokens)", "tokens/s", lambda p: p["prefill"]["demand_tokens_per_s"],
     "prefill.demand_tokens_per_s"),
    ("decode demand (output tokens)", "tokens/s", lambda p: p["decode"]["demand_tokens_per_s"],
     "decode.demand_tokens_per_s"),
    ("prefill pressure", "share", lambda p: p["prefill"]["utilization"], "prefill.utilization"),
    ("decode pressure", "share", lambda p: p["decode"]["utilization"], "decode.utilization"),
    ("TTFT p50", "ms", lambda p: p["ttft_ms"]["p50"], "ttft_ms"),
    ("TTFT p90", "ms", lambda p: p["ttft_ms"]["p90"], "ttft_ms"),
    ("TPOT p50", "ms", lambda p: p["tpot_ms"]["p50"], "tpot_ms"),
    ("TPOT p90", "ms", lambda p: p["tpot_ms"]["p90"], "tpot_ms"),
    ("meets both SLOs", "", lambda p: p["meets_slo"], "gpus"),
    ("dominant phase", "", lambda p: p["dominant_phase"], "gpus"),
    ("operating decode batch", "sequences", lambda p: p["operating_batch"], "operating_batch"),
    ("replicas (colocated)", "replicas", lambda p: p["replicas"], "gpus"),
    ("GPUs colocated", "GPUs", lambda p: p["gpus"]["colocated"], "gpus"),
    ("GPUs prefill pool (disaggregated)", "GPUs", lambda p: p["gpus"]["prefill"], "gpus.disaggregated"),
    ("GPUs decode pool (disaggregated)", "GPUs", lambda p: p["gpus"]["decode"], "gpus.disaggregated"),
    ("GPUs disaggregated", "GPUs", lambda p: p["gpus"]["disaggregated"], "gpus.disaggregated"),
    ("price per GPU-hour", "USD", lambda p: p["cost"]["usd_per_gpu_hour"], "cost.usd_per_gpu_hour"),
    ("cost per hour (colocated)", "USD", lambda p: p["cost"]["usd_per_hour"], "cost"),
    ("cost per 1M tokens (colocated)", "USD", lambda p: p["cost"]["usd_per_million_tokens"], "cost"),
    ("cost per 1M output tokens (colocated)", "USD", lambda p: p["cost"]["usd_per_million_output_tokens"], "cost"),
    ("cost per hour (disaggregated)", "USD", lambda p: p["cost"]["disaggregated_usd_per_hour"], "gpus.disaggregated"),
)


def provenance_word(source: str | None) -> str:
    """Plan provenance words → measured / estimated / assumed."""
    return {"measured": "measured", "assumed": "assumed", "set by user": "assumed",
            "simulated": "simulated"}.get(str(source), "estimated")


def _row_source(after: dict, key: str) -> str:
    """measured / estimated / assumed for one figure of the plan after the what-if."""
    source = provenance_word(after["provenance"].get(key, "estimated"))
    traffic = after["assumptions"].get("whatif", {}).get("traffic_multiplier", 1)
    if key == "rate_rps" and traffic != 1:
        source = "assumed"  # the rate after the what-if is the user's multiple of the measured one
    return source


_ON_FLEET_ROWS: tuple[tuple[str, str, str], ...] = (
    ("prefill pressure on today's fleet", "share", "prefill_utilization"),
    ("decode pressure on today's fleet", "share", "decode_utilization"),
    ("TTFT p90 on today's fleet", "ms", "ttft_p90_ms"),
    ("TPOT p90 on today's fleet", "ms", "tpot_p90_ms"),
)


def _cell(value: Any) -> Any:
    """NaN (saturated) → None, numpy scalars → Python values."""
    if value is None or (isinstance(value, (float, np.floating)) and not math.isfinite(float(value))):
        return None
    return value.item() if isinstance(value, np.generic) else value


def plan_table(before: dict, after: dict, on_fleet: pd.DataFrame | None = None) -> pd.DataFrame:
    """The capacity plan before and after the what-if, one row per figure, with where it comes from.

    ``on_fleet`` (``compare_whatif(...).on_fleet``) adds pressure and p90 latencies of both workloads on
    today's fleet, where a lever shows as relief on the phase it touches.
    """
    rows = []
    for label, unit, get, key in _PLAN_ROWS:
        rows.append({"figure": label, "unit": unit, "before": get(before), "after": get(after),
                     "source": _row_source(after, key)})
    if on_fleet is not None:
        for label, unit, column in _ON_FLEET_ROWS:
            rows.append({"figure": label, "unit": unit, "before": _cell(on_fleet.loc["before", column]),
                         "after": _cell(on_fleet.loc["after", column]), "source": "estimated"})
    frame = pd.DataFrame(rows)
    # Mixed numbers, booleans and text: keep each cell as it is (numbers stay numbers in the CSV).
    frame["before"] = frame["before"].astype(object)
    frame["after"] = frame["after"].astype(object)
    return frame


def recommendations_table(analysis: Any) -> pd.DataFrame:
    """The planner's levers, strongest first, with the metric each protects and the reason with its numbers."""
    labels = LEVER_LABELS
    rows = [{"rank": i + 1, "lever": r.lever, "lever_label": labels.get(r.lever, r.lever.replace("_", " ")),
             "metric": r.metric, "scope": r.scope, "share_of_gpu_time_touched": r.weight, "reason": r.reason}
            for i, r in enumerate(analysis.recommendations)]
    columns = ["rank", "lever", "lever_label", "metric", "scope", "share_of_gpu_time_touched", "reason"]
    return pd.DataFrame(rows, columns=columns)


