"""Workload-shape corners of the input-vs-output token plane.

The plane is log-log; three boundaries cut it into the five corners of PRODUCT.md:

    output ≥ long_output    │ reasoning            │ agent (long in, long out)
    ────────────────────────┼──────────────────────┼──────────────────────────
    short ≤ output < long   │ chat                 │ rag
    output < short_output   │ autocomplete         │ rag
                            input < long_input      input ≥ long_input

The defaults put the domain's seed cases in the right corner: 6k in / 150 out is ``rag``, 800 in / 2.5k out is
``reasoning``, 1.5k in / 15 out is ``autocomplete``, ~1k in / ~130 out is ``chat``. Session-aware ``agent``
detection (context growing turn after turn) lives in ``sessions.py``; here a corner is a region of the plane.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np
import pandas as pd

from shapeviz.physics import default_deployment, request_gpu_seconds
from shapeviz.workload.view import WorkloadView, as_view

SHAPES: tuple[str, ...] = ("chat", "rag", "reasoning", "agent", "autocomplete")

SHAPE_LABELS: dict[str, str] = {
    "chat": "Chat",
    "rag": "RAG / long context",
    "reasoning": "Reasoning",
    "agent": "Agent / long-in long-out",
    "autocomplete": "Autocomplete",
}

# What each corner hurts first (PRODUCT.md vocabulary table).
FIRST_METRIC: dict[str, str] = {
    "chat": "both",
    "rag": "ttft",
    "reasoning": "tpot",
    "agent": "both",
    "autocomplete": "ttft",
}


@dataclass(frozen=True)
class Corners:
    """Boundaries between the corners, in tokens. The user can move them."""

    long_input_tokens: int = 4096
    long_output_tokens: int = 1024
    short_output_tokens: int = 48

    def __post_init__(self) -> None:
        for name, value in asdict(self).items():
            if not (isinstance(value, (int, np.integer)) and 0 < value < 10_000_000):
                raise ValueError(f"corner boundary {name}={value!r} must be a whole number of tokens in 1..10M")
        if self.short_output_tokens >= self.long_output_tokens:
            raise ValueError(
                f"short_output_tokens ({self.short_output_tokens}) must be below "
                f"long_output_tokens ({self.long_output_tokens})"
            )


DEFAULT_CORNERS = Corners()


def classify_codes(input_tokens: np.ndarray, output_tokens: np.ndarray, corners: Corners = DEFAULT_CORNERS) -> np.ndarray:
    """Corner index (into ``SHAPES``) of every request, vectorised; int8."""
    inp = np.asarray(input_tokens)
    out = np.asarray(output_tokens)
    long_in = inp >= corners.long_input_tokens
    long_out = out >= corners.long_output_tokens
    short_out = out < corners.short_output_tokens
    codes = np.zeros(inp.shape, dtype=np.int8)  # chat
    codes[~long_in & short_out] = SHAPES.index("autocomplete")
    codes[~long_in & long_out] = SHAPES.index("reasoning")
    codes[long_in & ~long_out] = SHAPES.index("rag")
    codes[long_in & long_out] = SHAPES.index("agent")
    return codes


def classify(input_tokens: np.ndarray, output_tokens: np.ndarray, corners: Corners = DEFAULT_CORNERS) -> pd.Categorical:
    """Corner id of every request as a categorical with the categories of ``SHAPES``."""
    return pd.Categorical.from_codes(classify_codes(input_tokens, output_tokens, corners), categories=list(SHAPES))


def corner_of(input_tokens: float, output_tokens: float, corners: Corners = DEFAULT_CORNERS) -> str:
    """Corner id of one (input, output) point, e.g. a p50 or a cluster centre."""
    return SHAPES[int(classify_codes(np.array([input_tokens]), np.array([output_tokens]), corners)[0])]


def shape_shares(
    input_tokens: np.ndarray,
    output_tokens: np.ndarray,
    corners: Corners = DEFAULT_CORNERS,
    weights: np.ndarray | None = None,
) -> dict[str, float]:
    """Share of requests (or of ``weights``, e.g. tokens or GPU-seconds) in each corner; sums to 1."""
    codes = classify_codes(input_tokens, output_tokens, corners)
    w = None if weights is None else np.asarray(weights, dtype=np.float64)
    totals = np.bincount(codes, weights=w, minlength=len(SHAPES)).astype(np.float64)
    total = totals.sum()
    if total <= 0:
        return {s: 0.0 for s in SHAPES}
    return {s: float(t / total) for s, t in zip(SHAPES, totals)}


# ──────────────────────────────────────────────────────────────────────────────────────────────────────────────
# Shape profile: the distribution of each product, where its GPU-time goes, and which phase it leans on.
# ──────────────────────────────────────────────────────────────────────────────────────────────────────────────

PHASES: tuple[str, ...] = ("prefill", "decode", "balanced")
QUANTILES: tuple[tuple[str, float], ...] = (("p50", 50.0), ("p90", 90.0), ("p99", 99.0))
OVERALL = "overall"
# The product name used when a frame carries no ``product`` column (the contract says it always does, but a
# hand-made frame in a notebook may not).
DEFAULT_PHASE_THRESHOLD = 0.6


@dataclass(frozen=True)
class ShapeStats:
    """The shape of one scope (the whole log or one product): a distribution, its corners and its phase.

    ``dominant_shape`` is the corner holding the most *requests*. Requests, not GPU-time, because the shape
    names what the users send: it is the corner of the median request, it does not flip when the user picks
    another GPU or model in the sidebar, and it is what a product team recognises itself by. Where the
    GPU-time goes is answered next to it, by ``gpu_share`` per corner and by ``phase``, which is decided by
    GPU-time. So a code-completion log stays ``autocomplete`` even when its few long prompts hold much of the
    prefill bill, and the planner sees both facts.
    """

    scope: str
    requests: int
    input: dict[str, float]           # p50, p90, p99, mean of input tokens
    output: dict[str, float]          # p50, p90, p99, mean of output tokens
    request_share: dict[str, float]   # corner -> share of this scope's requests
    token_share: dict[str, float]     # corner -> share of this scope's input + output tokens
    gpu_share: dict[str, float]       # corner -> share of this scope's GPU-seconds (prefill + decode)
    dominant_shape: str
    phase: str                        # prefill | decode | balanced, by GPU-time
    prefill_gpu_share: float          # prefill share of this scope's GPU-seconds
    gpu_seconds: float                # total GPU-seconds (prefill + decode) of this scope
    share_of_requests: float          # this scope's share of all requests in the log (1.0 for overall)
    share_of_gpu: float               # this scope's share of all GPU-seconds in the log (1.0 for overall)

    def to_dict(self) -> dict[str, object]:
        """Plain JSON-ready dict."""
        return asdict(self)


@dataclass(frozen=True)
class ShapeProfile:
    """Per-product and overall shape of a log, with the corners and deployment it was computed for."""

    overall: ShapeStats
    products: dict[str, ShapeStats]   # by descending request count, then name
    corners: Corners
    phase_threshold: float
    deployment: str

    def scopes(self) -> list[ShapeStats]:
        """Overall first, then every product."""
        return [self.overall, *self.products.values()]

    def to_dict(self) -> dict[str, object]:
        """Plain JSON-ready dict (stable keys)."""
        return {
            "corners": asdict(self.corners),
            "phase_threshold": self.phase_threshold,
            "deployment": self.deployment,
            "overall": self.overall.to_dict(),
            "products": {name: stats.to_dict() for name, stats in self.products.items()},
        }


def phase_of(prefill_gpu_share: float, threshold: float = DEFAULT_PHASE_THRESHOLD) -> str:
    """``prefill`` or ``decode`` when that side holds more than ``threshold`` of GPU-time, else ``balanced``."""
    _check_phase_threshold(threshold)
    if prefill_gpu_share > threshold:
        return "prefill"
    if 1.0 - prefill_gpu_share > threshold:
        return "decode"
    return "balanced"


def _check_phase_threshold(threshold: float) -> None:
    if not (0.5 <= float(threshold) < 1.0):
        raise ValueError(f"phase threshold {threshold!r} must be in [0.5, 1): the share of GPU-time one phase must exceed")


def resolve_deployment(deployment: object | None) -> object:
    """The deployment to cost requests on: the given one, else the capacity model's default."""
    if deployment is not None:
        return deployment
    return default_deployment()


def deployment_label(deployment: object) -> str:
    """A short human label of a deployment for JSON and captions."""
    for attr in ("label", "name", "id"):
        value = getattr(deployment, attr, None)
        if isinstance(value, str) and value:
            return value
    model = getattr(deployment, "model", None)
    gpu = getattr(deployment, "gpu", None)
    if model is not None and gpu is not None:
        model_id = getattr(model, "name", None) or getattr(model, "id", None) or str(model)
        gpu_id = getattr(gpu, "name", None) or getattr(gpu, "id", None) or str(gpu)
        parts = [f"{model_id} on {gpu_id}"]
        precision = getattr(deployment, "precision", None)
        tp = getattr(deployment, "tp", None)
        if precision:
            parts.append(str(precision).upper())
        if tp:
            parts.append(f"TP{tp}")
        return " ".join(parts)
    return str(deployment)


def request_gpu_time(data: WorkloadView | pd.DataFrame, deployment: object | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(prefill, decode) GPU-seconds of one request of every row of the view (a frame: every request).

    A sketch's cell is costed once, at its mean tokens (cells are 15 % wide). Cached tokens are passed on when
    the log reports them, since a prefix-cache hit is prefill work not done.
    """
    view = as_view(data)
    dep = resolve_deployment(deployment)
    inp = view.input_tokens
    cached: np.ndarray | int = 0
    if view.has_cached:
        cached = view.cached_tokens if not view.exact else view.cached_tokens.astype(np.int64)
    prefill_s, decode_s = request_gpu_seconds(dep, inp, view.output_tokens, cached)
    prefill_s = np.broadcast_to(np.asarray(prefill_s, dtype=np.float64), inp.shape)
    decode_s = np.broadcast_to(np.asarray(decode_s, dtype=np.float64), inp.shape)
    return prefill_s, decode_s


def _shares(totals: np.ndarray) -> dict[str, float]:
    total = float(totals.sum())
    if total <= 0:
        return {s: 0.0 for s in SHAPES}
    return {s: float(t / total) for s, t in zip(SHAPES, totals)}


def shape_profile(
    data: WorkloadView | pd.DataFrame,
    corners: Corners = DEFAULT_CORNERS,
    deployment: object | None = None,
    *,
    phase_threshold: float = DEFAULT_PHASE_THRESHOLD,
    gpu_time: tuple[np.ndarray, np.ndarray] | None = None,
) -> ShapeProfile:
    """Per-product and overall percentiles, corner shares (requests, tokens, GPU-time), dominant shape and phase.

    ``data``: a workload view (or a canonical frame: every row). From rows the percentiles are exact; from a
    sketch's cells they are within one bin and a cell straddling a corner boundary goes to the corner of its
    mean. ``gpu_time`` lets a caller that already costed the rows (``request_gpu_time``) pass them in.
    """
    _check_phase_threshold(phase_threshold)
    if not isinstance(corners, Corners):
        raise ValueError(f"corners must be a shapeviz.analyses.shapes.Corners, got {type(corners).__name__}")
    view = as_view(data)
    if view.n_requests == 0:
        raise ValueError("the log has no requests; load a log with at least one served request")
    dep = resolve_deployment(deployment)
    prefill_s, decode_s = gpu_time if gpu_time is not None else request_gpu_time(view, dep)
    rows = len(view.input_tokens)
    if len(prefill_s) != rows or len(decode_s) != rows:
        raise ValueError(f"gpu_time arrays have {len(prefill_s)} rows, the view {rows}; cost the same rows")
    prefill_w, decode_w = view.weighted(prefill_s), view.weighted(decode_s)
    gpu_w = prefill_w + decode_w

    corner = classify_codes(view.input_tokens, view.output_tokens, corners).astype(np.int64)
    prod, names = view.product, view.products
    n_prod, n_shape = len(names), len(SHAPES)

    # One weighted bincount per measure over (product, corner) cells: a handful of vectorised passes.
    cell = prod.astype(np.int64) * n_shape + corner
    size = n_prod * n_shape
    in_tok, out_tok = view.totals("input"), view.totals("output")
    req_cells = view.count(cell, size).reshape(n_prod, n_shape)
    tok_cells = np.bincount(cell, weights=in_tok + out_tok, minlength=size).reshape(n_prod, n_shape)
    gpu_cells = np.bincount(cell, weights=gpu_w, minlength=size).reshape(n_prod, n_shape)
    prefill_by_prod = np.bincount(prod, weights=prefill_w, minlength=n_prod)
    in_sum = np.bincount(prod, weights=in_tok, minlength=n_prod)
    out_sum = np.bincount(prod, weights=out_tok, minlength=n_prod)
    qs = [q for _, q in QUANTILES]
    in_all, in_q = view.quantiles("input", qs)
    out_all, out_q = view.quantiles("output", qs)

    total_requests = float(view.n_requests)
    total_gpu = float(gpu_cells.sum())  # the same sum the scopes use, so overall's share is exactly 1

    def stats(scope: str, requests: float, in_quant: np.ndarray, out_quant: np.ndarray, in_total: float,
              out_total: float, req_c: np.ndarray, tok_c: np.ndarray, gpu_c: np.ndarray, prefill_total: float) -> ShapeStats:
        gpu_total = float(gpu_c.sum())
        prefill_share = prefill_total / gpu_total if gpu_total > 0 else 0.0
        return ShapeStats(
            scope=scope,
            requests=int(requests),
            input={**{k: float(v) for (k, _), v in zip(QUANTILES, in_quant)}, "mean": in_total / requests},
            output={**{k: float(v) for (k, _), v in zip(QUANTILES, out_quant)}, "mean": out_total / requests},
            request_share=_shares(req_c),
            token_share=_shares(tok_c),
            gpu_share=_shares(gpu_c),
            # argmax takes the first maximum: ties resolve in SHAPES order, deterministically.
            dominant_shape=SHAPES[int(np.argmax(req_c))],
            phase=phase_of(prefill_share, phase_threshold),
            prefill_gpu_share=float(prefill_share),
            gpu_seconds=gpu_total,
            share_of_requests=float(requests / total_requests),
            share_of_gpu=float(gpu_total / total_gpu) if total_gpu > 0 else 0.0,
        )

    overall = stats(
        OVERALL, total_requests, in_all, out_all, float(in_sum.sum()), float(out_sum.sum()), req_cells.sum(axis=0),
        tok_cells.sum(axis=0), gpu_cells.sum(axis=0), float(prefill_by_prod.sum()),
    )
    counts = req_cells.sum(axis=1)
    ranking = sorted(range(n_prod), key=lambda g: (-counts[g], names[g]))
    products = {
        names[g]: stats(names[g], counts[g], in_q[g], out_q[g], in_sum[g], out_sum[g], req_cells[g], tok_cells[g],
                        gpu_cells[g], prefill_by_prod[g])
        for g in ranking
        if counts[g] > 0
    }
    return ShapeProfile(overall=overall, products=products, corners=corners, phase_threshold=float(phase_threshold),
                        deployment=deployment_label(dep))
