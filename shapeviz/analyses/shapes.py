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
from shapeviz.workload.arrays import product_codes, token_arrays
from shapeviz.workload.sketch import WorkloadSketch

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


def request_gpu_time(frame: pd.DataFrame, deployment: object | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(prefill, decode) GPU-seconds of every request on ``deployment`` (default: the capacity default).

    Cached tokens are passed on when the log reports them, since a prefix-cache hit is prefill work not done.
    """
    dep = resolve_deployment(deployment)
    inp, out = token_arrays(frame)
    cached: np.ndarray | int = 0
    if "cached_tokens" in frame.columns:
        cached = frame["cached_tokens"].to_numpy(dtype=np.float64, na_value=0.0).astype(np.int64)
        cached = np.minimum(cached, inp)
    prefill_s, decode_s = request_gpu_seconds(dep, inp, out, cached)
    prefill_s = np.broadcast_to(np.asarray(prefill_s, dtype=np.float64), inp.shape)
    decode_s = np.broadcast_to(np.asarray(decode_s, dtype=np.float64), inp.shape)
    return prefill_s, decode_s


def _group_quantiles(values: np.ndarray, order: np.ndarray, bounds: np.ndarray) -> np.ndarray:
    """Quantiles (``QUANTILES``) of each group; ``order`` sorts rows by group, ``bounds`` are group offsets."""
    qs = [q for _, q in QUANTILES]
    grouped = values[order]
    out = np.zeros((len(bounds) - 1, len(qs)), dtype=np.float64)
    for g in range(len(bounds) - 1):  # one iteration per product, not per row
        lo, hi = bounds[g], bounds[g + 1]
        if hi > lo:
            out[g] = np.percentile(grouped[lo:hi], qs)
    return out


def _shares(totals: np.ndarray) -> dict[str, float]:
    total = float(totals.sum())
    if total <= 0:
        return {s: 0.0 for s in SHAPES}
    return {s: float(t / total) for s, t in zip(SHAPES, totals)}


def shape_profile(
    frame: pd.DataFrame,
    corners: Corners = DEFAULT_CORNERS,
    deployment: object | None = None,
    *,
    phase_threshold: float = DEFAULT_PHASE_THRESHOLD,
    gpu_time: tuple[np.ndarray, np.ndarray] | None = None,
) -> ShapeProfile:
    """Per-product and overall percentiles, corner shares (requests, tokens, GPU-time), dominant shape and phase.

    ``gpu_time`` lets a caller that already costed the rows (``request_gpu_time``) pass them in.
    """
    _check_phase_threshold(phase_threshold)
    if not isinstance(corners, Corners):
        raise ValueError(f"corners must be a shapeviz.analyses.shapes.Corners, got {type(corners).__name__}")
    inp, out = token_arrays(frame)
    if inp.size == 0:
        raise ValueError("the frame has no requests; load a log with at least one served request")
    dep = resolve_deployment(deployment)
    prefill_s, decode_s = gpu_time if gpu_time is not None else request_gpu_time(frame, dep)
    if len(prefill_s) != inp.size or len(decode_s) != inp.size:
        raise ValueError(f"gpu_time arrays have {len(prefill_s)} rows, the frame {inp.size}; cost the same frame")
    gpu_s = prefill_s + decode_s

    corner = classify_codes(inp, out, corners).astype(np.int64)
    prod, names = product_codes(frame)
    n_prod, n_shape = len(names), len(SHAPES)

    # One bincount per measure over (product, corner) cells: the whole profile is a handful of vectorised passes.
    cell = prod.astype(np.int64) * n_shape + corner
    size = n_prod * n_shape
    req_cells = np.bincount(cell, minlength=size).reshape(n_prod, n_shape).astype(np.float64)
    tok_cells = np.bincount(cell, weights=(inp + out).astype(np.float64), minlength=size).reshape(n_prod, n_shape)
    gpu_cells = np.bincount(cell, weights=gpu_s, minlength=size).reshape(n_prod, n_shape)
    prefill_by_prod = np.bincount(prod, weights=prefill_s, minlength=n_prod)
    in_sum = np.bincount(prod, weights=inp.astype(np.float64), minlength=n_prod)
    out_sum = np.bincount(prod, weights=out.astype(np.float64), minlength=n_prod)

    order = np.argsort(prod, kind="stable")
    bounds = np.concatenate([[0], np.cumsum(req_cells.sum(axis=1)).astype(np.int64)])
    in_q = _group_quantiles(inp, order, bounds)
    out_q = _group_quantiles(out, order, bounds)

    total_requests = float(inp.size)
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

    qs = [q for _, q in QUANTILES]
    overall = stats(
        OVERALL, total_requests, np.percentile(inp, qs), np.percentile(out, qs), float(in_sum.sum()),
        float(out_sum.sum()), req_cells.sum(axis=0), tok_cells.sum(axis=0), gpu_cells.sum(axis=0),
        float(prefill_by_prod.sum()),
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


def shape_profile_from_sketch(sketch: WorkloadSketch, corners: Corners | None = None, deployment: object | None = None,
                              *, phase_threshold: float | None = None) -> ShapeProfile:
    """``shapes.shape_profile`` from a sketch: quantiles from bins, corners and GPU-time per cell (its mean)."""
    corners = DEFAULT_CORNERS if corners is None else corners
    threshold = DEFAULT_PHASE_THRESHOLD if phase_threshold is None else phase_threshold
    _check_phase_threshold(threshold)
    if sketch.requests == 0:
        raise ValueError("the sketch has no requests; load a log with at least one served request")
    dep = resolve_deployment(deployment)
    p, i, j = np.nonzero(sketch.counts)
    c = sketch.counts[p, i, j].astype(np.float64)
    n_mean = sketch.input_sum[p, i, j] / c
    m_mean = sketch.output_sum[p, i, j] / c
    cached = sketch.cached_sum[p, i, j] / c
    # a cell's requests are costed at the cell's mean (cells are 15 % wide): GPU-time on bins, not rows
    prefill_cell, decode_cell = request_gpu_seconds(dep, n_mean, m_mean, np.minimum(cached, n_mean))
    prefill_s = np.broadcast_to(np.asarray(prefill_cell, dtype=np.float64), c.shape) * c
    decode_s = np.broadcast_to(np.asarray(decode_cell, dtype=np.float64), c.shape) * c
    corner = classify_codes(n_mean, m_mean, corners).astype(np.int64)
    n_prod, n_shape = len(sketch.products), len(SHAPES)
    cell = p.astype(np.int64) * n_shape + corner
    size = n_prod * n_shape
    req_cells = np.bincount(cell, weights=c, minlength=size).reshape(n_prod, n_shape)
    tok_cells = np.bincount(cell, weights=sketch.input_sum[p, i, j] + sketch.output_sum[p, i, j].astype(np.float64),
                            minlength=size).reshape(n_prod, n_shape)
    gpu_cells = np.bincount(cell, weights=prefill_s + decode_s, minlength=size).reshape(n_prod, n_shape)
    prefill_by_prod = np.bincount(p, weights=prefill_s, minlength=n_prod)
    in_sum = sketch.input_sum.sum(axis=(1, 2)).astype(np.float64)
    out_sum = sketch.output_sum.sum(axis=(1, 2)).astype(np.float64)
    qs = np.array([q for _, q in QUANTILES])
    total_requests = float(c.sum())
    total_gpu = float(gpu_cells.sum())

    def stats(scope: str, product: str | None, requests: float, in_total: float, out_total: float,
              req_c: np.ndarray, tok_c: np.ndarray, gpu_c: np.ndarray, prefill_total: float) -> ShapeStats:
        gpu_total = float(gpu_c.sum())
        prefill_share = prefill_total / gpu_total if gpu_total > 0 else 0.0
        in_q, out_q = sketch.quantile("input", qs, product), sketch.quantile("output", qs, product)
        return ShapeStats(
            scope=scope, requests=int(requests),
            input={**{k: float(v) for (k, _), v in zip(QUANTILES, in_q)}, "mean": in_total / requests},
            output={**{k: float(v) for (k, _), v in zip(QUANTILES, out_q)}, "mean": out_total / requests},
            request_share=_shares(req_c), token_share=_shares(tok_c), gpu_share=_shares(gpu_c),
            dominant_shape=SHAPES[int(np.argmax(req_c))], phase=phase_of(prefill_share, threshold),
            prefill_gpu_share=float(prefill_share), gpu_seconds=gpu_total,
            share_of_requests=float(requests / total_requests),
            share_of_gpu=float(gpu_total / total_gpu) if total_gpu > 0 else 0.0,
        )

    overall = stats(OVERALL, None, total_requests, float(in_sum.sum()), float(out_sum.sum()), req_cells.sum(axis=0),
                    tok_cells.sum(axis=0), gpu_cells.sum(axis=0), float(prefill_by_prod.sum()))
    counts = req_cells.sum(axis=1)
    ranking = sorted(range(n_prod), key=lambda g: (-counts[g], sketch.products[g]))
    products = {sketch.products[g]: stats(sketch.products[g], sketch.products[g], counts[g], in_sum[g], out_sum[g],
                                          req_cells[g], tok_cells[g], gpu_cells[g], prefill_by_prod[g])
                for g in ranking if counts[g] > 0}
    return ShapeProfile(overall=overall, products=products, corners=corners, phase_threshold=float(threshold),
                        deployment=deployment_label(dep))

