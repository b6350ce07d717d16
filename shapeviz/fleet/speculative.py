"""Speculative decoding as a decode lever: what it buys at a log's own load, and the load above which it stops paying.

Two entry points, both for one pool (the CLI, the Capacity page and a fleet design call them per pool):

``speculative_deployment(dep, workload, method, draft_tokens=None, acceptance_length=None, corners=...)``
    the pool's deployment with the lever on. Unless the user gives the acceptance length, it is assumed from the
    published acceptance of the method on the dataset that stands for each corner (``data/speculative.json``),
    weighted by the pool's output tokens per corner (the decode steps each corner is in).
``speculative_effect(workload, dep, whatif, ttft_slo_ms, tpot_slo_ms)``
    with and without the lever: TPOT at the planned load on the same fleet, decode tokens/s per replica within the
    TPOT SLO, GPUs that meet both SLOs, and the speed-up against load (request rate on that fleet, and decode batch)
    with the load where it falls under 1.1× and under 1× (where it costs more than it saves).

The speed-up is not a constant: verifying k+1 tokens per sequence costs little while the step is memory-bound and
as much as k+1 steps once it is compute-bound, so it is largest at batch 1 and turns into a slowdown at high load.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import pandas as pd

from shapeviz.analyses.shapes import DEFAULT_CORNERS, SHAPES, Corners, classify_codes
from shapeviz.physics.speculative import (
    METHODS,
    Speculative,
    dataset_alpha,
    default_draft_model,
    default_draft_tokens,
    load_speculative,
)
from shapeviz.physics.steps import (
    DEFAULT_TPOT_SLO_MS,
    Deployment,
    decode_step_s,
    operating_batch,
)
from shapeviz.plain import json_safe
from shapeviz.serving.planner import (
    DEFAULT_TTFT_SLO_MS,
    WhatIf,
    Workload,
    load_curve,
    plan,
)

LOAD_GRID = tuple(float(x) for x in np.geomspace(0.05, 40.0, 64))  # traffic multipliers of the speed-up curve
SMALL_GAIN = 1.1   # below this the lever is not worth its memory and operational cost


def corner_output_shares(workload: Workload, corners: Corners = DEFAULT_CORNERS) -> dict[str, float]:
    """Share of the workload's output tokens (its decode steps) in each corner."""
    codes = classify_codes(workload.input_tokens, workload.output_tokens, corners)
    tokens = workload.weight * workload.output_tokens
    total = float(tokens.sum())
    shares = np.bincount(codes.astype(np.int64), weights=tokens, minlength=len(SHAPES))
    return {shape: (float(shares[i]) / total if total > 0 else (1.0 if shape == "chat" else 0.0))
            for i, shape in enumerate(SHAPES)}


def assumed_acceptance(method: str, workload: Workload, corners: Corners = DEFAULT_CORNERS) -> tuple[float, str]:
    """Per-token acceptance assumed for a workload: each corner's published dataset, weighted by output tokens.

    Returns (α, the sentence saying where it comes from).
    """
    datasets = load_speculative()["corner_dataset"]
    shares = corner_output_shares(workload, corners)
    alpha = 0.0
    parts = []
    for corner, share in shares.items():
        if share <= 0:
            continue
        a = dataset_alpha(method, datasets[corner])
        alpha += share * a
        parts.append(f"{corner} {share:.0%} → {datasets[corner]} {a:.2f}")
    source = load_speculative()["acceptance"][method]["source"]
    return alpha, (f"assumed: per-token acceptance {alpha:.2f}, the output-weighted mean of the published rate on "
                   f"each corner's dataset ({'; '.join(parts)}); {source}")


def speculative_deployment(
    dep: Deployment,
    workload: Workload,
    method: str | None,
    draft_tokens: int | None = None,
    acceptance_length: float | None = None,
    corners: Corners = DEFAULT_CORNERS,
    draft_model: str | None = None,
) -> Deployment:
    """The pool's deployment with speculative decoding (``method`` None or "none": without it).

    ``acceptance_length`` is the mean tokens kept per step as engines report it (bonus token included); None assumes
    it from the pool's corner mix. ``draft_model`` (method "draft") defaults to the catalogue's same-tokenizer model.
    """
    if method in (None, "none"):
        if draft_tokens is not None or acceptance_length is not None:
            raise ValueError("--draft-tokens and --acceptance-length need --speculative eagle3, mtp, ngram or draft")
        return replace(dep, speculative=None)
    if method not in METHODS:
        raise ValueError(f"unknown --speculative {method!r}; choose none, {', '.join(METHODS)}")
    k = default_draft_tokens(method) if draft_tokens is None else draft_tokens
    drafter = (draft_model or default_draft_model(dep.model.id)) if method == "draft" else None
    if acceptance_length is not None:
        spec = Speculative.from_length(method, k, float(acceptance_length), "set by user", drafter)
    else:
        alpha, source = assumed_acceptance(method, workload, corners)
        spec = Speculative(method, k, alpha, source, drafter)
    return replace(dep, speculative=spec)


@dataclass(frozen=True)
class SpeculativeEffect:
    """What the lever buys at the planned load, and where it stops paying (``to_dict`` is the JSON block)."""

    settings: dict[str, Any]            # Speculative.to_dict(): method, draft_tokens, acceptance_length, ...
    rate_rps: float                     # the planned load (after the what-if)
    replicas: int                       # the fleet the curve runs on: the plan without the lever
    context_tokens: float               # mean context of a decode step
    tpot_ms: dict[str, float | None]    # p50 at the planned load on that fleet: without, with
    tpot_speedup: float | None
    throughput_speedup: float | None    # output tokens/s per GPU at the planned load: GPUs without / with
    capacity_speedup: float             # decode tokens/s per replica at the largest batch the TPOT SLO allows
    gpus: dict[str, int | None]         # colocated GPUs that meet both SLOs: without, with
    stops_paying: dict[str, float | None]   # rate_rps, traffic_multiplier, batch where the speed-up falls under 1
    small_gain: dict[str, float | None]     # the same where it falls under 1.1
    curve: pd.DataFrame = field(repr=False)  # per load: rate_rps, traffic_multiplier, tpot p50 without/with, speedup
    batch_curve: pd.DataFrame = field(repr=False)  # per decode batch: tpot without/with (ms), speedup
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        """The ``speculative`` block of the plan JSON (no curves)."""
        s = self.settings
        return json_safe({
            "method": s["method"], "draft_tokens": s["draft_tokens"], "draft_model": s["draft_model"],
            "acceptance_length": s["acceptance_length"], "acceptance_rate": s["acceptance_rate"],
            "acceptance_source": s["acceptance_source"],
            "tpot_speedup": self.tpot_speedup, "throughput_speedup": self.throughput_speedup,
            "capacity_at_tpot_slo_speedup": self.capacity_speedup,
            "tpot_p50_ms": self.tpot_ms, "gpus": self.gpus, "rate_rps": self.rate_rps, "replicas": self.replicas,
            "context_tokens": self.context_tokens,
            "stops_paying_above": self.stops_paying, "gain_below_1_1x_above": self.small_gain,
            "provenance": {"acceptance_length": "set by user" if s["acceptance_source"] == "set by user" else "assumed",
                           "tpot_speedup": "estimated", "throughput_speedup": "estimated",
                           "capacity_at_tpot_slo_speedup": "estimated", "gpus": "estimated",
                           "stops_paying_above": "estimated"},
            "notes": self.notes,
        })

    def citation(self) -> str:
        """One sentence for the decode-bandwidth recommendation: the gain here and the load where it stops paying."""
        s = self.settings
        head = (f"speculative decoding ({s['method']}, {s['draft_tokens']} drafts, "
                f"{s['acceptance_length']:.2f} tokens/step {'set by you' if s['acceptance_source'] == 'set by user' else 'assumed'})")
        gain = (f"TPOT {self.tpot_speedup:.2f}× faster at this load" if self.tpot_speedup
                else "this load saturates the fleet")
        g = self.gpus
        gpus = (f", {g['without']} → {g['with']} GPUs" if g["without"] and g["with"] else "")
        stop = self.stops_paying
        if stop["rate_rps"] is not None:
            where = (f"stops paying above {stop['rate_rps']:,.3g} req/s ({stop['traffic_multiplier']:.1f}× this log's "
                     f"rate, a decode batch of {stop['batch']:,.0f} per replica on {self.replicas} replica(s))")
        elif stop["batch"] is not None:
            where = (f"pays at every load {self.replicas} replica(s) carry; it would stop above a decode batch of "
                     f"{stop['batch']:,.0f} per replica")
        else:
            where = "pays at every load this fleet carries"
        return f"estimated: {head}: {gain}{gpus}; {where}"


def _decode_context(w: Workload) -> float:
    """Mean context of a decode step: each request weighs by its output tokens (the steps it is in)."""
    weights = w.weight * np.maximum(w.output_tokens, 1.0)
    return float(np.dot(weights, w.input_tokens + w.output_tokens / 2.0) / weights.sum())


def _first_below(x: np.ndarray, y: np.ndarray, level: float) -> float | None:
    """The x where y first falls under ``level`` (interpolated between grid points), None if it never does."""
    below = np.flatnonzero(np.isfinite(y) & (y < level))
    if below.size == 0:
        return None
    i = int(below[0])
    if i == 0 or not np.isfinite(y[i - 1]):
        return float(x[i])
    if y[i] <= 0:  # the lever's fleet saturates there while the plain one still keeps up: the last load it paid
        return float(x[i - 1])
    frac = (y[i - 1] - level) / max(y[i - 1] - y[i], 1e-12)
    return float(x[i - 1] + frac * (x[i] - x[i - 1]))


def speculative_effect(
    workload: Workload,
    dep: Deployment,
    whatif: WhatIf = WhatIf(),
    ttft_slo_ms: float = DEFAULT_TTFT_SLO_MS,
    tpot_slo_ms: float = DEFAULT_TPOT_SLO_MS,
    gpu_hour_usd: float | None = None,
) -> SpeculativeEffect:
    """With and without the deployment's speculative decoding: TPOT, throughput and GPUs at the planned load, and
    the speed-up against load with the load above which it costs more than it saves."""
    spec = dep.speculative
    if spec is None:
        raise ValueError("the deployment has no speculative decoding to judge: choose a method first")
    plain = replace(dep, speculative=None)
    w = workload.apply(whatif)
    context = _decode_context(w)
    without = plan(workload, plain, whatif, ttft_slo_ms, tpot_slo_ms, gpu_hour_usd)
    with_lever = plan(workload, dep, whatif, ttft_slo_ms, tpot_slo_ms, gpu_hour_usd)
    replicas = int(without.replicas or 1)

    mult = np.array(sorted(set(LOAD_GRID) | {1.0}))
    c0 = load_curve(workload, plain, mult, whatif, ttft_slo_ms, tpot_slo_ms, replicas=replicas)
    c1 = load_curve(workload, dep, mult, whatif, ttft_slo_ms, tpot_slo_ms, replicas=replicas)
    t0, t1 = c0["tpot_p50_ms"].to_numpy(), c1["tpot_p50_ms"].to_numpy()
    # Past the plain fleet's knee both are compared only while the lever still keeps up; where the lever saturates
    # first it has stopped paying (speed-up 0), where the plain fleet saturates first it is still paying.
    ratio = np.where(np.isfinite(t0) & np.isfinite(t1), t0 / np.where(np.isfinite(t1), t1, np.nan), np.nan)
    ratio = np.where(~np.isfinite(t1) & np.isfinite(t0), 0.0, ratio)
    curve = pd.DataFrame({"traffic_multiplier": mult, "rate_rps": c0["rate_rps"].to_numpy(),
                          "tpot_p50_ms_without": t0, "tpot_p50_ms_with": t1, "speedup": ratio})
    here = int(np.argmin(np.abs(mult - 1.0)))
    tpot_speedup = float(ratio[here]) if np.isfinite(ratio[here]) and ratio[here] > 0 else None

    limit = float(min(plain.max_batch_kv(context), dep.max_batch_kv(context), dep.max_batch))
    grid = np.unique(np.round(np.geomspace(1.0, max(limit, 1.0), 96)))
    s0, s1 = decode_step_s(plain, grid, context), decode_step_s(dep, grid, context)
    batch_curve = pd.DataFrame({"batch": grid, "tpot_ms_without": s0 * 1e3, "tpot_ms_with": s1 * 1e3,
                                "speedup": s0 / s1})

    def capacity(d: Deployment) -> float:
        b = float(operating_batch(d, context, tpot_slo_ms))
        return b / float(decode_step_s(d, b, context))

    capacity_speedup = capacity(dep) / capacity(plain)
    g0, g1 = without.gpus["colocated"], with_lever.gpus["colocated"]
    # the same demand on fewer (or more) GPUs: output tokens/s per GPU at the planned load
    throughput_speedup = g0 / g1 if g0 and g1 else None
    stop_rate = _first_below(curve["rate_rps"].to_numpy(), ratio, 1.0)
    gain_rate = _first_below(curve["rate_rps"].to_numpy(), ratio, SMALL_GAIN)
    stop_batch = _first_below(grid, s0 / s1, 1.0)
    gain_batch = _first_below(grid, s0 / s1, SMALL_GAIN)
    base = max(w.rate_rps, 1e-12)
    notes = []
    if spec.acceptance_source != "set by user":
        notes.append("acceptance is assumed from published benchmarks; measure yours (vLLM and SGLang log the mean "
                     "acceptance length) and set it (--acceptance-length) before buying on it")
    if stop_rate is None and stop_batch is not None:
        notes.append(f"on {replicas} replica(s) the fleet saturates before the decode batch reaches "
                     f"{stop_batch:,.0f}, where the lever would stop paying")
    return SpeculativeEffect(
        settings=spec.to_dict(),
        rate_rps=w.rate_rps,
        replicas=replicas,
        context_tokens=context,
        tpot_ms={"without": _finite(t0[here]), "with": _finite(t1[here])},
        tpot_speedup=tpot_speedup,
        throughput_speedup=None if throughput_speedup is None else float(throughput_speedup),
        capacity_speedup=float(capacity_speedup),
        gpus={"without": without.gpus["colocated"], "with": with_lever.gpus["colocated"]},
        stops_paying={"rate_rps": stop_rate, "traffic_multiplier": None if stop_rate is None else stop_rate / base,
                      "batch": stop_batch},
        small_gain={"rate_rps": gain_rate, "traffic_multiplier": None if gain_rate is None else gain_rate / base,
                    "batch": gain_batch},
        curve=curve,
        batch_curve=batch_curve,
        notes=notes,
    )


def _finite(x: float) -> float | None:
    return float(x) if math.isfinite(float(x)) else None


__all__ = ["SpeculativeEffect", "assumed_acceptance", "corner_output_shares", "speculative_deployment",
           "speculative_effect"]
