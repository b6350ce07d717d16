"""The fleet for next quarter: traffic (and output length) growing month by month, per product.

A monthly growth rate per product (+8%/month for chat, +20%/month for the agent) and a monthly growth of the
output length (a reasoning product's answers getting longer) project the log's peak traffic month by month; each
month is planned like today (the analytic planner at the grown rate and shape) and gives the replicas, GPUs and
cost of one pool, and the month its replicas today run out of headroom. One pool per call: a fleet of pools
projects each pool with the products it serves.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from shapeviz.physics.steps import DEFAULT_TPOT_SLO_MS, Deployment
from shapeviz.plain import json_safe
from shapeviz.serving.planner import DEFAULT_TTFT_SLO_MS, WhatIf, Workload, plan
from shapeviz.workload.sketch import WorkloadSketch

HOURS_PER_MONTH = 730.0          # 8,760 h / 12: a month of GPU rental
ALL = "*"                        # the growth of every product not named


@dataclass(frozen=True)
class Growth:
    """Monthly growth of requests and of output length per product (``"*"``: every other product), and a horizon."""

    requests: dict[str, float] = field(default_factory=dict)
    output: dict[str, float] = field(default_factory=dict)
    months: int = 3

    def __post_init__(self) -> None:
        if not (isinstance(self.months, (int, np.integer)) and 0 < self.months <= 60):
            raise ValueError(f"the horizon must be 1 to 60 months, got {self.months!r}")
        for kind, rates in (("request", self.requests), ("output-length", self.output)):
            for product, g in rates.items():
                if not (isinstance(g, (int, float)) and math.isfinite(g) and g > -1.0):
                    raise ValueError(f"{kind} growth of {product!r} must be a monthly fraction above -1 "
                                     f"(0.08 for +8%/month), got {g!r}")

    def rate(self, product: str) -> float:
        """Monthly request growth of ``product``."""
        return float(self.requests.get(product, self.requests.get(ALL, 0.0)))

    def output_rate(self, product: str) -> float:
        """Monthly output-length growth of ``product``."""
        return float(self.output.get(product, self.output.get(ALL, 0.0)))


def parse_growth(pairs: list[str] | None) -> dict[str, float]:
    """``["chat=0.08", "agent=20%", "0.05"]`` → {product: monthly fraction}; a bare number is every product's."""
    out: dict[str, float] = {}
    for pair in pairs or []:
        name, sep, value = pair.rpartition("=")
        name = name.strip() if sep else ALL
        text = value.strip()
        try:
            g = float(text[:-1]) / 100.0 if text.endswith("%") else float(text)
        except ValueError:
            raise ValueError(f"growth {pair!r}: expected PRODUCT=RATE such as chat=0.08 or agent=20%") from None
        out[name or ALL] = g
    return out


@dataclass
class GrowthResult:
    """Month by month: rate, replicas, GPUs, cost, and when the pool's replicas today run out of headroom."""

    months: pd.DataFrame         # month, rate_rps, mean_output_tokens, replicas, gpus, usd_per_month, meets_slo,
                                 # headroom_replicas
    replicas_now: int
    runs_out_month: int | None   # first month needing more replicas than today's (None: not within the horizon)
    growth: Growth
    deployment: str
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON (``plan --growth``)."""
        return json_safe({
            "deployment": self.deployment,
            "replicas_now": self.replicas_now,
            "runs_out_month": self.runs_out_month,
            "growth": {"requests": self.growth.requests, "output_length": self.growth.output,
                       "months": self.growth.months, "source": "set by user (monthly fractions)"},
            "months": self.months.to_dict(orient="records"),
            "provenance": {"rate_rps": "estimated: the log's p99 minute grown per product",
                           "replicas": "estimated", "gpus": "estimated", "usd_per_month": "estimated",
                           "hours_per_month": HOURS_PER_MONTH},
            "notes": self.notes,
        })


def product_workloads(source: pd.DataFrame | Any) -> tuple[list[str], list[Workload], np.ndarray]:
    """Each product's shape (a workload of weight 1) and its request count, from a canonical frame or a sketch."""
    if isinstance(source, WorkloadSketch):
        names, shapes, counts = [], [], []
        for q, name in enumerate(source.products):
            cnt = source.counts[q]
            i, j = np.nonzero(cnt)
            if i.size == 0:
                continue
            k = cnt[i, j].astype(np.float64)
            n = source.input_sum[q][i, j] / k
            shapes.append(Workload.from_points(n, source.output_sum[q][i, j] / k,
                                               np.minimum(source.cached_sum[q][i, j] / k, n), k, rate_rps=1.0))
            names.append(str(name))
            counts.append(k.sum())
        return names, shapes, np.asarray(counts)
    if not isinstance(source, pd.DataFrame) or len(source) == 0:
        raise ValueError("growth needs a canonical frame or a workload sketch with requests")
    product = source["product"].astype(str) if "product" in source.columns else pd.Series("all", index=source.index)
    names = sorted(product.unique())
    shapes = [Workload.from_frame(source[(product == p).to_numpy()], rate_rps=1.0) for p in names]
    counts = np.array([(product == p).sum() for p in names], dtype=np.float64)
    return names, shapes, counts


def mix(shapes: list[Workload], rates: np.ndarray, output_scale: np.ndarray | None = None) -> Workload:
    """One pool's workload: the products' shapes weighted by their rates (outputs scaled per product)."""
    scale = np.ones(len(shapes)) if output_scale is None else output_scale
    keep = [q for q in range(len(shapes)) if rates[q] > 0]
    if not keep:
        raise ValueError("no traffic left to plan (every product's rate is 0)")
    n = np.concatenate([shapes[q].input_tokens for q in keep])
    m = np.concatenate([shapes[q].output_tokens * scale[q] for q in keep])
    c = np.concatenate([shapes[q].cached_tokens for q in keep])
    w = np.concatenate([shapes[q].weight * rates[q] for q in keep])
    return Workload.from_points(n, np.maximum(m, 1.0), np.minimum(c, n), w, rate_rps=float(rates[keep].sum()))


def project(source: pd.DataFrame | Any, dep: Deployment, growth: Growth, *, peak_rps: float | None = None,
            whatif: WhatIf = WhatIf(), ttft_slo_ms: float = DEFAULT_TTFT_SLO_MS,
            tpot_slo_ms: float = DEFAULT_TPOT_SLO_MS, gpu_hour_usd: float | None = None,
            replicas_now: int | None = None, sized_now: int | None = None) -> GrowthResult:
    """Plan every month of the horizon at the grown traffic and output length; when today's replicas run out.

    ``peak_rps``: today's planning rate (default: the log's p99 minute, as ``plan``); each product keeps its
    share of it and grows at its own rate. ``replicas_now``: the pool today (default: month 0's plan).
    ``sized_now``: today's fleet as the one sizing function replayed it (``fleet.sizing.fleet_answer``, what
    ``plan`` prints): month 0 is that fleet and every later month is its estimate scaled by the same ratio
    (replaying a month of grown traffic that the log never saw would invent its arrivals).
    """
    names, shapes, counts = product_workloads(source)
    if peak_rps is None:
        peak_rps = Workload.from_view(source).rate_rps
    if not (peak_rps > 0):
        raise ValueError("the log's planning rate is 0 (its p99 minute has no requests): set the rate to project "
                         "growth from")
    share = counts / counts.sum()
    g = np.array([growth.rate(p) for p in names])
    o = np.array([growth.output_rate(p) for p in names])
    unknown = sorted((set(growth.requests) | set(growth.output)) - {ALL} - set(names))
    notes = []
    if unknown:
        notes.append(f"growth given for product(s) not in the log, ignored: {', '.join(unknown)}")
    rows = []
    for month in range(growth.months + 1):
        rates = peak_rps * share * (1.0 + g) ** month
        w = mix(shapes, rates, (1.0 + o) ** month)
        p = plan(w, dep, whatif, ttft_slo_ms, tpot_slo_ms, gpu_hour_usd)
        per_hour = p.cost.get("usd_per_hour") or 0.0
        rows.append({"month": month, "rate_rps": p.rate_rps, "mean_output_tokens": w.apply(whatif).mean_output,
                     "replicas": p.replicas, "gpus": p.gpus["colocated"], "usd_per_month": per_hour * HOURS_PER_MONTH,
                     "meets_slo": p.meets_slo})
    table = pd.DataFrame(rows)
    table["estimate_replicas"] = table["replicas"]
    table["method"] = "estimate"
    if sized_now is not None and sized_now >= 1 and table["replicas"].iloc[0]:
        scale = sized_now / float(table["replicas"].iloc[0])
        grown = np.ceil(table["replicas"].to_numpy(dtype=np.float64) * scale - 1e-9).astype(int)
        grown[0] = int(sized_now)
        factor = grown / table["replicas"].to_numpy(dtype=np.float64)
        table["replicas"] = grown
        table["gpus"] = grown * dep.tp
        table["usd_per_month"] = table["usd_per_month"] * factor
        table["method"] = ["simulated"] + [f"estimate × {scale:.2f} (today's replayed answer / its estimate)"] * (
            len(table) - 1)
        notes.append(f"month 0 is today's fleet as the log's replay sizes it ({sized_now} replicas, the estimate "
                     f"said {int(table['estimate_replicas'].iloc[0])}); later months scale each month's estimate by "
                     f"that ratio ({scale:.2f}×)")
    now = int(table["replicas"].iloc[0]) if replicas_now is None else int(replicas_now)
    if now < 1:
        raise ValueError(f"replicas today must be ≥ 1, got {now}")
    table["headroom_replicas"] = now - table["replicas"]
    over = table.index[table["replicas"] > now]
    runs_out = int(table["month"].iloc[over[0]]) if len(over) else None
    if runs_out is not None:
        notes.append(f"today's {now} replica(s) run out of headroom in month {runs_out}: "
                     f"{int(table['replicas'].iloc[over[0]])} needed")
    return GrowthResult(table, now, runs_out, growth, dep.describe(), notes)
