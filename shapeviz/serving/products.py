"""SLO classes per product and what each product gets: every product is judged against its own targets.

A class is a TTFT and a TPOT target at a percentile (p90, the percentile the planner and the simulator report).
Its default comes from the product's corner (the corner holding most of its requests) and the published planner
ranges in ``data/slo_ranges.csv`` (p95 ranges per shape): the upper end of the range, so that the default is
the loosest target a published planner still calls acceptable for that shape (assumed; edit per product with
``--slo PRODUCT=TTFT_MS:TPOT_MS`` or a fleet file). ``product_outcomes`` turns a simulation's per-request frame
into the per-product TTFT/TPOT/E2E percentiles, SLO attainment and goodput of ``simulate --json``;
``plan_products`` judges each product analytically on the plan's shared fleet (``plan --json``).
"""
from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import pandas as pd

from shapeviz.analyses.shapes import DEFAULT_CORNERS, SHAPES, Corners, classify_codes
from shapeviz.physics.steps import Deployment
from shapeviz.plain import json_safe
from shapeviz.serving.planner import WhatIf, Workload, shared_latency_ms
from shapeviz.serving.simulator import latency_stats
from shapeviz.workload.requests import Requests
from shapeviz.serving.slo import slo_range

CLASS_PERCENTILE = 90          # targets are judged at p90, like the plan and the simulator's summary
ALL_PRODUCTS = "*"             # a --slo / fleet-file key that sets every product without its own class


@dataclass(frozen=True)
class SloClass:
    """One product's targets: TTFT and TPOT at ``percentile``, the corner they came from, and their source."""

    product: str
    ttft_ms: float
    tpot_ms: float
    percentile: int = CLASS_PERCENTILE
    corner: str | None = None
    source: str = "assumed"

    def __post_init__(self) -> None:
        for name in ("ttft_ms", "tpot_ms"):
            v = getattr(self, name)
            if not (isinstance(v, (int, float)) and math.isfinite(v) and v > 0):
                raise ValueError(f"SLO class of {self.product!r}: {name}={v!r} must be a positive number of ms")
        if not 0 < self.percentile < 100:
            raise ValueError(f"SLO class of {self.product!r}: percentile={self.percentile!r} must be in 1..99")

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready fields."""
        return asdict(self)


def corner_default(corner: str) -> tuple[float, float]:
    """``(ttft_ms, tpot_ms)`` of a corner's default class: the upper end of its published p95 range."""
    _, ttft_hi, _, tpot_hi = slo_range(corner)
    return ttft_hi, tpot_hi


def product_corners(frame: pd.DataFrame, corners: Corners = DEFAULT_CORNERS) -> dict[str, str]:
    """The corner holding most of each product's requests (the product's own shape)."""
    codes = classify_codes(frame["input_tokens"].to_numpy(), frame["output_tokens"].to_numpy(), corners)
    product = frame["product"].astype(str).to_numpy() if "product" in frame.columns else np.full(len(frame), "all")
    table = pd.crosstab(pd.Series(product, name="product"), pd.Series(codes, name="corner"))
    return {str(p): SHAPES[int(table.loc[p].idxmax())] for p in table.index}


def default_classes(frame: pd.DataFrame, corners: Corners = DEFAULT_CORNERS) -> dict[str, SloClass]:
    """Every product's class from its corner (``data/slo_ranges.csv``, upper end of the published p95 range)."""
    out = {}
    for product, corner in product_corners(frame, corners).items():
        ttft, tpot = corner_default(corner)
        out[product] = SloClass(product, ttft, tpot, CLASS_PERCENTILE, corner,
                                f"default for the {corner} corner: upper end of the published p95 range "
                                f"(data/slo_ranges.csv), judged at p{CLASS_PERCENTILE} (assumed)")
    return out


def parse_slo(pairs: Iterable[str] | None) -> dict[str, tuple[float, float]]:
    """``["doc-search=1200:60", "*=500:50"]`` → ``{"doc-search": (1200.0, 60.0), ...}``; ValueError on bad input."""
    out: dict[str, tuple[float, float]] = {}
    for pair in pairs or ():
        name, sep, targets = str(pair).rpartition("=")
        ttft, colon, tpot = targets.partition(":")
        try:
            values = (float(ttft), float(tpot))
        except ValueError:
            values = (float("nan"), float("nan"))
        if not sep or not name.strip() or not colon or not all(math.isfinite(v) and v > 0 for v in values):
            raise ValueError(f"--slo expects PRODUCT=TTFT_MS:TPOT_MS (e.g. --slo doc-search=1200:60), got {pair!r}")
        out[name.strip()] = values
    return out


def resolve_classes(frame: pd.DataFrame, overrides: Mapping[str, tuple[float, float]] | None = None,
                    source: str = "set by user (--slo)", corners: Corners = DEFAULT_CORNERS) -> dict[str, SloClass]:
    """Default classes with the user's targets on top; an override naming no product of the log is an error."""
    classes = default_classes(frame, corners)
    overrides = dict(overrides or {})
    unknown = sorted(set(overrides) - set(classes) - {ALL_PRODUCTS})
    if unknown:
        raise ValueError(f"--slo names product(s) not in the log: {', '.join(map(repr, unknown))}; "
                         f"the log's products are {', '.join(map(repr, sorted(classes)))}")
    for product, cls in list(classes.items()):
        if product in overrides or ALL_PRODUCTS in overrides:
            ttft, tpot = overrides.get(product, overrides.get(ALL_PRODUCTS))  # type: ignore[misc]
            classes[product] = SloClass(product, float(ttft), float(tpot), cls.percentile, cls.corner, source)
    return classes


def class_targets_ms(products: np.ndarray | None, classes: Mapping[str, SloClass], default_ms: float,
                     metric: str = "ttft_ms") -> np.ndarray | None:
    """Each request's ``metric`` target (``ttft_ms`` or ``tpot_ms``): its product's class, else the ``*`` class,
    else ``default_ms``."""
    if products is None:
        return None
    lookup = {p: float(getattr(c, metric)) for p, c in classes.items()}
    values = pd.Series(products, dtype="object").map(lookup).fillna(lookup.get(ALL_PRODUCTS, default_ms))
    return values.to_numpy(dtype=np.float64)


def ttft_targets_ms(products: np.ndarray | None, classes: Mapping[str, SloClass], default_ms: float) -> np.ndarray | None:
    """Each request's TTFT target (its product's class; ``default_ms`` for a product without one)."""
    return class_targets_ms(products, classes, default_ms, "ttft_ms")


def class_of(classes: Mapping[str, SloClass], name: str) -> SloClass | None:
    """``name``'s class: its own, else the class every product without one gets (``ALL_PRODUCTS``), else None."""
    return classes.get(name) or classes.get(ALL_PRODUCTS)


def product_labels(req: Requests) -> np.ndarray:
    """Each request's product as text (``ALL_PRODUCTS`` for every request of a log without products)."""
    return req.product.astype(str) if req.product is not None else np.full(len(req), ALL_PRODUCTS)


def beyond_context(req: Requests, dep: Deployment) -> np.ndarray:
    """Which requests do not fit the model's context window (prompt and answer over the checkpoint's
    ``max_position_embeddings``): an engine refuses them, on any number of replicas and any TP, so they are never
    replayed as if served (a log planned on another model than its own: 256k-token agent contexts on a 128k
    model)."""
    limit = dep.model.max_context_tokens
    if not limit:
        return np.zeros(len(req), dtype=bool)
    return (np.asarray(req.input_tokens, dtype=np.int64) + np.asarray(req.output_tokens, dtype=np.int64)) > limit


def refused_words(req: Requests, dep: Deployment, over: np.ndarray, of: str = "the window's") -> str:
    """The requests ``beyond_context`` refuses, in one sentence: how many, of which products, and why."""
    product = product_labels(req)
    names, counts = np.unique(product[over], return_counts=True)
    return (f"{int(over.sum()):,} of {of} {len(req):,} requests ("
            + ", ".join(f"{n} {c:,}" for n, c in zip(names, counts))
            + f") are longer than {dep.model.name}'s context window of {dep.model.max_context_tokens:,} tokens "
            "(prompt and answer): an engine refuses them, so they are not replayed")


def context_refusals(req: Requests, dep: Deployment, classes: Mapping[str, SloClass]) -> list[dict[str, Any]]:
    """Products no replica of ``dep`` serves because more of their requests than their class percentile allows are
    beyond its model's context window (``beyond_context``), each with ``cause`` "context", why and the lever: the
    plan's sizing and every pool a fleet design tries name them this way (no TP and no size helps)."""
    product = product_labels(req)
    n_in = np.asarray(req.input_tokens, dtype=np.float64)
    over = beyond_context(req, dep)
    out = []
    for name in sorted(set(product[over].tolist())):
        cls = class_of(classes, name)
        if cls is None:
            continue
        mine = product == name
        q = cls.percentile
        refused = float(over[mine].mean())
        if refused > 1.0 - q / 100.0:
            prompt = float(np.percentile(n_in[mine], q))
            out.append({"product": name, "metric": "ttft", "percentile": q, "target_ms": cls.ttft_ms,
                        "alone_ms": None, "input_tokens": prompt, "cause": "context", "refused_share": refused,
                        "why": (f"{refused:.0%} of its requests (p{q} prompt {prompt:,.0f} tokens) are longer than "
                                f"{dep.model.name}'s context window of {dep.model.max_context_tokens:,} tokens, "
                                "which an engine refuses on any number of replicas or GPUs per replica"),
                        "levers": "a pool of its own on a model with a longer context window (the model its log "
                                  "names), or shorter contexts (compaction)"})
    return out



def product_outcomes(requests: pd.DataFrame, classes: Mapping[str, SloClass]) -> dict[str, dict[str, Any]]:
    """Per product: TTFT/TPOT/E2E ``{mean,p50,p90,p99}`` (ms), its class, whether its percentiles meet it,
    attainment (share of its requests within both targets) and goodput (those requests per second of the run).
    """
    if len(requests) == 0:
        return {}
    product = (requests["product"].astype(str) if "product" in requests.columns
               else pd.Series("all", index=requests.index))
    finish = requests["arrival_s"] + requests["e2e_ms"] / 1000.0
    span = float(finish.max() - requests["arrival_s"].min())
    out: dict[str, dict[str, Any]] = {}
    for name, idx in product.groupby(product, sort=True).groups.items():
        r = requests.loc[idx]
        cls = classes.get(str(name))
        ttft = r["ttft_ms"].to_numpy(dtype=np.float64)
        tpot = r["tpot_ms"].to_numpy(dtype=np.float64)
        doc: dict[str, Any] = {"requests": len(r), "ttft_ms": latency_stats(ttft), "tpot_ms": latency_stats(tpot),
                               "e2e_ms": latency_stats(r["e2e_ms"].to_numpy(dtype=np.float64))}
        if cls is not None:
            q = cls.percentile
            t_q = float(np.percentile(ttft, q))
            d = tpot[~np.isnan(tpot)]
            d_q = float(np.percentile(d, q)) if d.size else None
            ok = (ttft <= cls.ttft_ms) & (np.isnan(tpot) | (tpot <= cls.tpot_ms))
            doc["slo"] = cls.to_dict()
            doc[f"ttft_p{q}_ms"] = t_q
            doc[f"tpot_p{q}_ms"] = d_q
            doc["meets"] = bool(t_q <= cls.ttft_ms and (d_q is None or d_q <= cls.tpot_ms))
            doc["attainment"] = float(ok.mean())
            doc["goodput_rps"] = float(ok.sum() / span) if span > 0 else None
        out[str(name)] = doc
    return json_safe(out)


def products_meet(outcomes: Mapping[str, Mapping[str, Any]]) -> bool:
    """True when every product with a class meets it."""
    return all(o.get("meets", True) for o in outcomes.values())


def outcomes_table(outcomes: Mapping[str, Mapping[str, Any]]) -> pd.DataFrame:
    """One row per product: its p90s against its own class, attainment and goodput (for pages and reports)."""
    rows = []
    for name, o in outcomes.items():
        slo = o.get("slo") or {}
        q = slo.get("percentile", CLASS_PERCENTILE)
        rows.append({"product": name, "requests": o["requests"], "corner": slo.get("corner"),
                     "ttft_slo_ms": slo.get("ttft_ms"), f"ttft_p{q}_ms": o.get(f"ttft_p{q}_ms"),
                     "tpot_slo_ms": slo.get("tpot_ms"), f"tpot_p{q}_ms": o.get(f"tpot_p{q}_ms"),
                     "meets": o.get("meets"), "attainment": o.get("attainment"),
                     "goodput_rps": o.get("goodput_rps")})
    return pd.DataFrame(rows)


def plan_products(frame: pd.DataFrame, workload: Workload, dep: Deployment, whatif: WhatIf, replicas: int | None,
                  classes: Mapping[str, SloClass], tpot_slo_ms: float) -> dict[str, dict[str, Any]]:
    """Per product: its class, its TTFT/TPOT at the class percentile on the plan's ``replicas`` (shared by the
    whole ``workload``, analytic: ``planner.shared_latency_ms``) and whether it meets its own class."""
    product = frame["product"].astype(str) if "product" in frame.columns else pd.Series("all", index=frame.index)
    groups = product.groupby(product, sort=True).groups
    out: dict[str, dict[str, Any]] = {}
    by_q: dict[int, list[str]] = {}
    for name in groups:
        if str(name) in classes:
            by_q.setdefault(classes[str(name)].percentile, []).append(str(name))
    for q, names in by_q.items():
        parts = {n: Workload.from_frame(frame.loc[groups[n]], rate_rps=workload.rate_rps) for n in names}
        latency = ({n: (None, None) for n in names} if not replicas else
                   shared_latency_ms(workload, parts, dep, whatif, int(replicas), tpot_slo_ms, quantile=q / 100.0))
        for n in names:
            cls, (ttft, tpot) = classes[n], latency[n]
            out[n] = {"class": {k: v for k, v in cls.to_dict().items() if k != "product"},
                      "requests": len(groups[n]),
                      f"ttft_p{q}_ms": ttft, f"tpot_p{q}_ms": tpot,
                      "meets": bool(ttft is not None and tpot is not None
                                    and ttft <= cls.ttft_ms and tpot <= cls.tpot_ms)}
    return json_safe(dict(sorted(out.items())))
