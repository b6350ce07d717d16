"""From a workload and a deployment to TTFT, TPOT, GPUs and cost: the serving plan and its what-if.

A ``Workload`` is a small set of weighted (input, output, cached) points plus a request rate, binned once from
the canonical frame, so a slider move never touches the million rows again. ``plan`` turns it into prefill and
decode demand, the pressure on each phase, TTFT and TPOT percentiles, and the GPUs (colocated, or split into a
prefill and a decode pool) that meet both SLOs.

Queueing, in one paragraph: each replica's prefills form an M/G/1 queue (Pollaczek–Khinchine mean wait
``λ·E[S²] / (2(1−ρ))``, which rises sharply as the prefill utilisation ρ nears 1); the wait is 0 with
probability 1−ρ and exponential otherwise. Decoding sequences follow Little's law, ``B̄ = λ·E[output]·TPOT``,
and their number at any instant is Poisson (M/G/∞), which gives the TPOT spread. Colocated decode only runs
when no prefill does, so its TPOT is stretched by ``1/(1−ρ)``. A prompt runs inside an engine iteration that
also decodes the running batch (iteration-level scheduling), so its TTFT adds the wait for the iteration under
way (uniform over one TPOT) and the batch's share of its own iteration (``physics.mixed_step_s``); the
discrete-event simulator (``simulator.py``) is the check on all of this.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field, replace
from numbers import Real
from typing import Any, Iterable

import numpy as np
import pandas as pd

from shapeviz.physics.steps import (
    DEFAULT_TPOT_SLO_MS,
    Deployment,
    decode_step_s,
    mixed_step_s,
    prefill_time_s,
    prefill_work_s,
    request_gpu_seconds,
)
from shapeviz.plain import json_safe
from shapeviz.workload.binning import N_BINS
# the what-if and the log's tokens per request are the request table's (``workload.requests``), named here too
from shapeviz.workload.requests import WhatIf  # noqa: F401
from shapeviz.workload.requests import log_tokens as request_tokens  # noqa: F401
from shapeviz.workload.sketch import WorkloadSketch
from shapeviz.workload.view import WorkloadView, as_view

DEFAULT_TTFT_SLO_MS = 1000.0
ASSUMED_RATE_RPS = 1.0          # only when a log has no timestamps and the user set no rate
BINS_PER_OCTAVE = 4             # ±9% of a token count: finer than any decision the plan supports
Z90 = 1.2815515655446004        # standard normal 90th percentile (Poisson spread of the decode batch)
SKETCH_POINTS = 96              # quantile points kept of the prefill-time distribution
DOMINANT_SHARE = 0.6            # a phase "dominates" above this share of the GPU-time
FALLBACK_UTILIZATION = 0.8      # when an SLO cannot be met at any size, size the pools for this utilisation
IDLE_PRESSURE = 0.5             # below this on both phases a plan says why it buys more replicas than the load needs
# how the note that says so begins: it counts the estimate's replicas, so a replayed answer drops it (its own reason
# is ``fleet.sizing.pressure_reason``)
LATENCY_SIZED = "sized by the "
MAX_REPLICAS = 1_000_000


# --- workload ----------------------------------------------------------------------------------------------
@dataclass(frozen=True, eq=False)
class Workload:
    """Weighted (input, output, cached) points (weights sum to 1) and a request rate."""

    input_tokens: np.ndarray
    output_tokens: np.ndarray
    cached_tokens: np.ndarray
    weight: np.ndarray
    rate_rps: float
    rate_source: str = "set by user"   # "measured" | "set by user" | "assumed"
    rate_note: str = ""
    n_requests: int = 0

    @classmethod
    def from_points(
        cls,
        input_tokens: Iterable[float],
        output_tokens: Iterable[float],
        cached_tokens: Iterable[float] | float = 0.0,
        weight: Iterable[float] | None = None,
        *,
        rate_rps: float,
        rate_source: str = "set by user",
        rate_note: str = "",
    ) -> "Workload":
        """A workload from explicit points (e.g. a scenario, or ``--isl/--osl``)."""
        n = np.atleast_1d(np.asarray(input_tokens, dtype=np.float64))
        m = np.atleast_1d(np.asarray(output_tokens, dtype=np.float64))
        p = np.broadcast_to(np.asarray(cached_tokens, dtype=np.float64), n.shape).copy()
        w = np.ones_like(n) if weight is None else np.atleast_1d(np.asarray(weight, dtype=np.float64))
        if not (n.shape == m.shape == w.shape) or n.size == 0:
            raise ValueError("input, output and weight need the same, non-zero number of points")
        if np.any(~np.isfinite(n)) or np.any(~np.isfinite(m)) or np.any(n < 0) or np.any(m < 0):
            raise ValueError("token counts must be finite and ≥ 0")
        if np.any(p < 0) or np.any(p > n):
            raise ValueError("cached tokens must lie between 0 and the input tokens of each point")
        if np.any(w < 0) or w.sum() <= 0:
            raise ValueError("weights must be ≥ 0 and not all 0")
        _check_rate(rate_rps)
        return cls(n, m, p, w / w.sum(), float(rate_rps), rate_source, rate_note, int(n.size))

    @classmethod
    def fixed(cls, isl: float, osl: float, rate_rps: float, cached_tokens: float = 0.0, **kw: Any) -> "Workload":
        """Every request the same shape (``--isl/--osl``)."""
        if not (isl >= 1 and osl >= 1):
            raise ValueError(f"--isl and --osl must be ≥ 1 token, got isl={isl!r}, osl={osl!r}")
        return cls.from_points([isl], [osl], [cached_tokens], rate_rps=rate_rps, **kw)

    @classmethod
    def from_view(cls, data: WorkloadView | pd.DataFrame | WorkloadSketch, rate_rps: float | None = None) -> "Workload":
        """Bin a workload view (a canonical frame: every row; a sketch: its cells) into weighted points, and
        measure (or take) the request rate.

        Rows are binned a quarter of an octave on each axis (input, output, and uncached input when the log
        reports prefix hits); a sketch's cells are its points already (its products' cells merged). Each point
        is the mean of its bin, so token totals (hence demand in tokens/s) are exact. The rate is the user's if
        given, else the observed peak: the p99 of per-minute request rates.
        """
        view = as_view(data)
        if view.n_requests == 0:
            raise ValueError("the log has no requests to plan for")
        if view.exact:
            n, m = view.input_tokens.astype(np.float64), view.output_tokens.astype(np.float64)
            p = view.cached_tokens
            width = BINS_PER_OCTAVE * 32  # 2^32 tokens is beyond any context
            ix = np.minimum(np.floor(np.log2(np.maximum(n, 1.0)) * BINS_PER_OCTAVE), width - 1).astype(np.int64)
            iy = np.minimum(np.floor(np.log2(np.maximum(m, 1.0)) * BINS_PER_OCTAVE), width - 1).astype(np.int64)
            code = ix * width + iy
            if np.any(p > 0):
                # Prefix hits split a bin: one prompt fully cached and one not share an input length but not a
                # prefill time, and the mean of the two put the TTFT p90 far above every real request's (the
                # simulator replays them one by one). So uncached tokens are a third binning axis when the log has any.
                iz = np.minimum(np.floor(np.log2(np.maximum(n - p, 1.0)) * BINS_PER_OCTAVE), width - 1).astype(np.int64)
                _, code = np.unique(code * width + iz, return_inverse=True)
                code = code.reshape(-1)
            totals = (n, m, p)
        else:
            code = view.bins("input") * N_BINS + view.bins("output")
            totals = (view.totals("input"), view.totals("output"), view.totals("cached"))
        size = int(code.max()) + 1
        count = view.count(code, size)
        used = np.flatnonzero(count)
        c = count[used]
        n, m, p = (np.bincount(code, weights=v, minlength=size)[used] / c for v in totals)
        if rate_rps is not None:
            _check_rate(rate_rps)
            rate, source, note = float(rate_rps), "set by user", "request rate set by the user"
        else:
            rate, source, note = _measured_rate(view)
        return cls(n, m, np.minimum(p, n), c / c.sum(), rate, source, note, view.n_requests)

    @classmethod
    def from_frame(cls, frame: pd.DataFrame, rate_rps: float | None = None) -> "Workload":
        """``from_view`` of a canonical frame (every row); kept for its many callers."""
        return cls.from_view(frame, rate_rps)

    def apply(self, whatif: WhatIf) -> "Workload":
        """The workload after the what-if levers (trim, cache hit, traffic)."""
        n = self.input_tokens * (1.0 - whatif.trim_input)
        m = self.output_tokens * (1.0 - whatif.trim_output)
        # Trimming removes cached and uncached prompt tokens alike; a set hit rate replaces the log's figure.
        p = self.cached_tokens * (1.0 - whatif.trim_input)
        if whatif.cache_hit is not None:
            current = self.mean(self.cached_tokens) / max(self.mean(self.input_tokens), 1e-12)
            p = p * (whatif.cache_hit / current) if current > 0 else n * whatif.cache_hit
        return Workload(n, m, np.minimum(p, n), self.weight, self.rate_rps * whatif.traffic_multiplier,
                        self.rate_source, self.rate_note, self.n_requests)

    def mean(self, values: np.ndarray) -> float:
        """Request-weighted mean of a per-point quantity."""
        return float(np.dot(self.weight, values))

    @property
    def mean_input(self) -> float:
        """Mean input tokens per request."""
        return self.mean(self.input_tokens)

    @property
    def mean_output(self) -> float:
        """Mean output tokens per request."""
        return self.mean(self.output_tokens)

    @property
    def mean_cached(self) -> float:
        """Mean cached (prefix-hit) input tokens per request."""
        return self.mean(self.cached_tokens)


def _check_rate(rate_rps: float) -> None:
    if not isinstance(rate_rps, (int, float, np.floating, np.integer)) or not (math.isfinite(rate_rps) and rate_rps > 0):
        raise ValueError(f"request rate {rate_rps!r} must be a positive number of requests per second")


def _measured_rate(view: WorkloadView) -> tuple[float, str, str]:
    """Peak rate of a log: p99 of per-minute rates (the mean rate for logs shorter than two minutes)."""
    arrivals = view.arrivals
    if arrivals.requests < 2:
        return ASSUMED_RATE_RPS, "assumed", (
            f"the log has no timestamps, so {ASSUMED_RATE_RPS:g} req/s is assumed; set the rate (--rate) to plan for yours"
        )
    start, end = arrivals.span_ns()
    span_s = (end - start) / 1e9
    where = "" if view.exact else "; from the workload sketch"
    if span_s < 120:
        rate = arrivals.requests / max(span_s, 1.0)
        return rate, "measured", f"mean rate over the log's {span_s:.0f} s (too short for per-minute peaks{where})"
    rate = float(np.percentile(view.per_minute_rates(), 99))
    mean = arrivals.requests / span_s
    return rate, "measured", (
        f"observed peak: p99 of per-minute request rates over {span_s / 60:.0f} min (mean {mean:.3g} req/s{where})"
    )


# --- the queueing evaluator -------------------------------------------------------------------------------
def _weighted_quantiles(values: np.ndarray, weights: np.ndarray, qs: np.ndarray) -> np.ndarray:
    order = np.argsort(values)
    v, w = values[order], weights[order]
    cdf = np.cumsum(w) - 0.5 * w
    cdf /= w.sum()
    return np.interp(qs, cdf, v)


def _sketch(values: np.ndarray, weights: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """At most SKETCH_POINTS equally weighted quantiles of a weighted distribution."""
    if values.size <= SKETCH_POINTS:
        return values, weights / weights.sum()
    qs = (np.arange(SKETCH_POINTS) + 0.5) / SKETCH_POINTS
    return _weighted_quantiles(values, weights, qs), np.full(SKETCH_POINTS, 1.0 / SKETCH_POINTS)


def _ttft_quantiles(
    service_s: np.ndarray, service_w: np.ndarray, rho: np.ndarray, mean_wait_s: np.ndarray, q: float
) -> np.ndarray:
    """q-quantile of TTFT = own prefill + wait, per row of (rho, mean wait); the wait is 0 w.p. 1−ρ, else exponential."""
    rho = np.clip(rho, 1e-12, 1 - 1e-12)[:, None]
    theta = (mean_wait_s[:, None] / rho)  # mean wait of those who wait
    lo = np.full(rho.shape, service_s.min())
    hi = service_s.max() + theta * (np.log(np.maximum(rho, 1e-12) / (1.0 - q)).clip(min=0.0) + 1.0) + 1e-9
    for _ in range(34):  # the bracket starts within ~1e3 of the answer: 2^-34 of it is far below a microsecond
        mid = (lo + hi) / 2.0
        x = mid - service_s[None, :]
        cdf = np.where(x >= 0, 1.0 - rho * np.exp(-np.maximum(x, 0.0) / np.maximum(theta, 1e-15)), 0.0)
        below = (cdf * service_w[None, :]).sum(axis=1, keepdims=True) < q
        lo = np.where(below, mid, lo)
        hi = np.where(below, hi, mid)
    return ((lo + hi) / 2.0)[:, 0]


@dataclass(frozen=True, eq=False)
class _Evaluator:
    """Per-workload constants of one deployment; evaluates many replica counts or rates at once."""

    dep: Deployment
    rate_rps: float
    latency_s: np.ndarray        # own prefill latency per point (alone)
    weight: np.ndarray
    work_mean_s: float           # E[prefill work], replica-seconds
    work_sq_mean_s2: float       # E[work²]
    output_mean: float
    context_mean: float          # decode-time-weighted mean context
    batch_grid: np.ndarray
    step_grid_s: np.ndarray      # decode step time over batch_grid at context_mean
    batch_limit: float           # KV pool and engine cap at the mean context
    mixed_batch_s: np.ndarray    # decode batches at which a prompt's extra cost in a mixed iteration is known
    mixed_extra_s: np.ndarray    # how much longer a mean prompt's iteration is with that decode batch in it

    @classmethod
    def build(cls, w: Workload, dep: Deployment, extra_latency_s: np.ndarray | float = 0.0) -> "_Evaluator":
        n, m, p = w.input_tokens, w.output_tokens, w.cached_tokens
        latency = prefill_time_s(dep, n, p) + extra_latency_s
        work = prefill_work_s(dep, n, p)
        out_mean = w.mean(m)
        context = w.mean(m * (n + m / 2.0)) / out_mean if out_mean > 0 else w.mean(n)
        limit = float(min(dep.max_batch_kv(context), dep.max_batch))
        grid = np.arange(1.0, max(limit, 1.0) + 1.0)
        s_lat, s_w = _sketch(latency, w.weight)
        # Iteration-level engines run a prompt inside an iteration that also decodes the running batch, so its
        # first token waits for that batch's share of the iteration (small while the prefill is compute-bound).
        n_mean, p_mean = w.mean(n), w.mean(p)
        alone = mixed_step_s(dep, np.array([n_mean]), np.array([p_mean]), 0, 0.0)
        mb = np.unique(np.round(np.geomspace(1.0, max(limit, 1.0), 16)))
        extra = np.array([mixed_step_s(dep, np.array([n_mean]), np.array([p_mean]), b, context) - alone for b in mb])
        return cls(dep, w.rate_rps, s_lat, s_w, w.mean(work), w.mean(work**2), out_mean, context, grid,
                   decode_step_s(dep, grid, context), limit, mb, np.maximum(extra, 0.0))

    def step_s(self, batch: np.ndarray) -> np.ndarray:
        """Decode step time at a (fractional) batch, interpolated on the grid."""
        return np.interp(np.maximum(batch, 1.0), self.batch_grid, self.step_grid_s)

    def evaluate(self, replica_rate: np.ndarray, prefill: bool = True, decode: bool = True,
                 tpot_slo_s: float = DEFAULT_TPOT_SLO_MS / 1000.0,
                 quantiles: tuple[float, ...] = (0.5, 0.9)) -> dict[str, np.ndarray]:
        """Latencies and pressures at per-replica request rates ``replica_rate`` (vectorised)."""
        lam = np.asarray(replica_rate, dtype=np.float64)
        rho = lam * self.work_mean_s if prefill else np.zeros_like(lam)
        stretch = 1.0 / np.maximum(1.0 - rho, 1e-9)
        out: dict[str, np.ndarray] = {"prefill_rho": rho}
        if decode:
            # Little's law fixed point B = λ·E[m]·t(B)·stretch, found on the batch grid.
            a = lam * self.output_mean * stretch
            gap = a[:, None] * self.step_grid_s[None, :] - self.batch_grid[None, :]
            below = gap <= 0
            has_root = below.any(axis=1) & (rho < 1)
            first = np.where(below.any(axis=1), below.argmax(axis=1), len(self.batch_grid) - 1)
            g1 = gap[np.arange(len(lam)), first]
            g0 = np.where(first > 0, gap[np.arange(len(lam)), np.maximum(first - 1, 0)], a * self.step_grid_s[0])
            b0 = np.where(first > 0, self.batch_grid[np.maximum(first - 1, 0)], 0.0)
            b1 = self.batch_grid[first]
            frac = np.where(g0 - g1 > 0, g0 / np.maximum(g0 - g1, 1e-30), 1.0)
            batch = np.where(first > 0, b0 + frac * (b1 - b0), a * self.step_grid_s[0])
            batch = np.where(has_root, batch, np.inf)
            tpot50 = self.step_s(batch) * stretch
            tpot90 = self.step_s(batch + Z90 * np.sqrt(batch)) * stretch
            # Decode capacity: tokens/s at the largest batch the KV pool and the TPOT SLO allow (at least one
            # sequence, so an SLO tighter than a single step reads as pressure above 1, not as infinity).
            b_slo = np.interp(tpot_slo_s / stretch, self.step_grid_s, self.batch_grid, left=1.0, right=self.batch_grid[-1])
            cap = np.maximum(np.minimum(b_slo, self.batch_limit), 1.0)
            capacity = cap / (self.step_s(cap) * stretch)
            out.update(batch=batch, tpot_p50_s=np.where(has_root, tpot50, np.inf),
                       tpot_p90_s=np.where(has_root, tpot90, np.inf),
                       decode_pressure=np.where(rho < 1, lam * self.output_mean / capacity, np.inf),
                       kv_fill=np.where(has_root, batch / max(self.batch_limit, 1e-9), np.inf))
            # A prompt waits for the iteration under way (half of one, on average) and then shares its own
            # iteration with the decode batch; both vanish as the batch empties. (The residual alone, with the
            # prefill assumed to pre-empt decoding, put TTFT at the knee at half of what the simulator and the
            # published Triton/TensorRT-LLM sweep show.)
            shared = np.interp(np.where(has_root, batch, 1.0), self.mixed_batch_s, self.mixed_extra_s)
            presence = np.where(has_root, np.minimum(batch, 1.0), 0.0)
            iteration = np.where(has_root, tpot50, 0.0) * presence
            residual = (np.where(has_root, tpot50 / 2.0 + shared, 0.0) * presence) if prefill else 0.0
            shared = shared * presence
        else:
            residual = 0.0
            iteration = shared = np.zeros_like(lam)
        if prefill:
            ok = rho < 1
            wait = np.where(ok, lam * self.work_sq_mean_s2 / (2.0 * np.maximum(1.0 - rho, 1e-9)), np.inf)
            wait_total = np.where(ok, wait + residual, 0.0)
            mean = float(np.dot(self.weight, self.latency_s)) + wait_total
            out["ttft_mean_s"] = np.where(ok, mean, np.inf)
            # the iteration residual is paid by everyone, uniform over one iteration: its q-quantile is q of one
            for q in quantiles:
                value = _ttft_quantiles(self.latency_s, self.weight, np.where(ok, rho, 0.5), np.where(ok, wait, 0.0), q)
                shift = np.where(ok, q * iteration + shared, 0.0)
                out[f"ttft_p{round(q * 100)}_s"] = np.where(ok, value + shift, np.inf)
        return out


def shared_latency_ms(workload: Workload, parts: dict[str, Workload], dep: Deployment, whatif: WhatIf,
                      replicas: int, tpot_slo_ms: float = DEFAULT_TPOT_SLO_MS,
                      quantile: float = 0.9) -> dict[str, tuple[float | None, float | None]]:
    """Each part's TTFT and TPOT ``quantile`` (ms; None when saturated) on ``replicas`` colocated replicas that
    serve the whole ``workload`` (its products together, e.g. the plan's fleet).

    The queue is the whole workload's: prefill utilisation, M/G/1 wait, decode batch and iteration residual come
    from its evaluator at its rate over the replicas; only the prefill of the request itself is the part's own.
    A colocated decode step serves every running sequence at once, so TPOT is the same for every part.
    """
    if not (isinstance(replicas, (int, np.integer)) and replicas >= 1):
        raise ValueError(f"replicas={replicas!r} must be a whole number ≥ 1")
    w = workload.apply(whatif)
    ev = _Evaluator.build(w, dep)
    rate = np.array([w.rate_rps / replicas])
    key = f"p{round(quantile * 100)}_s"
    out: dict[str, tuple[float | None, float | None]] = {}
    for name, part in parts.items():
        pw = part.apply(whatif)
        latency, weight = _sketch(prefill_time_s(dep, pw.input_tokens, pw.cached_tokens), pw.weight)
        r = replace(ev, latency_s=latency, weight=weight).evaluate(
            rate, tpot_slo_s=tpot_slo_ms / 1000.0, quantiles=(quantile,))
        out[name] = (_ms(r[f"ttft_{key}"]), _ms(r[f"tpot_{key}"]))
    return out


def _smallest(feasible: Any, upper: int = MAX_REPLICAS) -> int | None:
    """Smallest k in 1..upper with feasible(k) true (feasible monotone): a geometric scan, then 32-way refinement.

    Each round evaluates a few dozen candidates in one vectorised call, so the exact answer takes 2-4 calls.
    """
    cand = np.unique(np.round(np.geomspace(1, upper, 48)).astype(np.int64))
    ok = feasible(cand)
    if not ok.any():
        return None
    i = int(ok.argmax())
    if i == 0:
        return int(cand[0])
    lo, hi = int(cand[i - 1]), int(cand[i])  # lo fails, hi passes
    while hi - lo > 1:
        mids = np.unique(np.round(np.linspace(lo, hi, 34)).astype(np.int64))
        mids = mids[(mids > lo) & (mids < hi)]
        ok = feasible(mids)
        if ok.any():
            j = int(ok.argmax())
            hi, lo = int(mids[j]), (int(mids[j - 1]) if j > 0 else lo)
        else:
            lo = int(mids[-1])
    return hi


# --- the plan ----------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Percentiles:
    """p50 and p90 of a latency, in ms (None when the system is saturated)."""

    p50: float | None
    p90: float | None


@dataclass(frozen=True)
class Phase:
    """Demand on one phase and the pressure it puts on the planned colocated replicas."""

    demand_tokens_per_s: float   # prefill: uncached input tokens/s; decode: output tokens/s
    gpu_seconds_per_s: float     # GPUs this phase needs alone when batched as well as KV and the TPOT SLO allow
    utilization: float           # demand over capacity: prefill busy share of each replica; decode tokens/s over
                                 # what the batch allowed by the KV pool and the TPOT SLO delivers (>1: overloaded)


@dataclass(frozen=True)
class Plan:
    """The capacity plan of one workload on one deployment (``to_dict`` for JSON and the UI)."""

    deployment: str
    rate_rps: float
    rate_source: str
    prefill: Phase
    decode: Phase
    ttft_ms: Percentiles
    tpot_ms: Percentiles
    replicas: int | None                 # colocated replicas of ``tp`` GPUs
    gpus: dict[str, int | None]          # colocated, prefill, decode, disaggregated
    disaggregated: dict[str, Any]        # TTFT/TPOT of the split pools
    operating_batch: float | None
    dominant_phase: str                  # prefill | decode | balanced (share of GPU-time)
    meets_slo: bool
    cost: dict[str, float | None]
    assumptions: dict[str, Any]
    provenance: dict[str, str]           # figure → measured | estimated | assumed
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-safe dict (no NaN or inf: None instead)."""
        return json_safe(asdict(self))


def _ms(x: np.ndarray | float) -> float | None:
    v = float(np.asarray(x).reshape(-1)[0]) * 1000.0
    return v if math.isfinite(v) else None


def plan(
    workload: Workload,
    dep: Deployment,
    whatif: WhatIf = WhatIf(),
    ttft_slo_ms: float = DEFAULT_TTFT_SLO_MS,
    tpot_slo_ms: float = DEFAULT_TPOT_SLO_MS,
    gpu_hour_usd: float | None = None,
) -> Plan:
    """GPUs, TTFT/TPOT percentiles, phase pressure and cost that meet both SLOs (colocated and disaggregated)."""
    for name, v in (("ttft_slo_ms", ttft_slo_ms), ("tpot_slo_ms", tpot_slo_ms)):
        if not (isinstance(v, Real) and math.isfinite(v) and v > 0):
            raise ValueError(f"{name}={v!r} must be a positive number of milliseconds")
    if gpu_hour_usd is not None and not (math.isfinite(gpu_hour_usd) and gpu_hour_usd >= 0):
        raise ValueError(f"gpu_hour_usd={gpu_hour_usd!r} must be a price ≥ 0 in US dollars per GPU-hour")
    w = workload.apply(whatif)
    lam = w.rate_rps
    ttft_s, tpot_s = ttft_slo_ms / 1000.0, tpot_slo_ms / 1000.0
    ev = _Evaluator.build(w, dep)
    notes: list[str] = []

    def colocated_ok(k: np.ndarray) -> np.ndarray:
        r = ev.evaluate(lam / k, tpot_slo_s=tpot_s, quantiles=(0.9,))
        return (r["ttft_p90_s"] <= ttft_s) & (r["tpot_p90_s"] <= tpot_s) & (r["prefill_rho"] < 1)

    def utilisation_ok(k: np.ndarray) -> np.ndarray:
        r = ev.evaluate(lam / k, tpot_slo_s=tpot_s, quantiles=())
        return (r["prefill_rho"] <= FALLBACK_UTILIZATION) & (r["kv_fill"] <= FALLBACK_UTILIZATION)

    replicas = _smallest(colocated_ok)
    meets = replicas is not None
    if replicas is None:
        notes.extend(_why_infeasible(ev, w, ttft_s, tpot_s))
        replicas = _smallest(utilisation_ok)
    r = ev.evaluate(np.array([lam / replicas]) if replicas else np.array([np.nan]), tpot_slo_s=tpot_s)

    # Disaggregated: a prefill pool (TTFT + KV transfer) and a decode pool (TPOT, no prefill interference).
    transfer = dep.kv_bytes_per_gpu(w.input_tokens) * dep.tp / (dep.eff.kv_transfer_gbps * 1e9)
    ev_p = _Evaluator.build(w, dep, extra_latency_s=transfer)
    k_p = _smallest(lambda k: ev_p.evaluate(lam / k, decode=False, quantiles=(0.9,))["ttft_p90_s"] <= ttft_s)
    k_d = _smallest(lambda k: ev.evaluate(lam / k, prefill=False, tpot_slo_s=tpot_s, quantiles=())["tpot_p90_s"] <= tpot_s)
    rp = ev_p.evaluate(np.array([lam / k_p]), decode=False) if k_p else None
    rd = ev.evaluate(np.array([lam / k_d]), prefill=False, tpot_slo_s=tpot_s) if k_d else None

    tp = dep.tp
    gpus = {
        "colocated": replicas * tp if replicas else None,
        "prefill": k_p * tp if k_p else None,
        "decode": k_d * tp if k_d else None,
        "disaggregated": (k_p + k_d) * tp if (k_p and k_d) else None,
    }
    batch = float(r["batch"][0]) if replicas else float("nan")
    # What each phase costs when batched as well as the KV pool and the TPOT SLO allow: the same accounting
    # as the balance line on the plane, so "dominant phase" and the line agree.
    pre_s, dec_s = request_gpu_seconds(dep, w.input_tokens, w.output_tokens, w.cached_tokens, tpot_slo_ms=tpot_slo_ms)
    prefill_gpu_s, decode_gpu_s = lam * w.mean(pre_s), lam * w.mean(dec_s)
    total_gpu_s = prefill_gpu_s + decode_gpu_s
    share = prefill_gpu_s / total_gpu_s if total_gpu_s > 0 else 0.5
    dominant = "prefill" if share >= DOMINANT_SHARE else "decode" if share <= 1 - DOMINANT_SHARE else "balanced"

    price = dep.gpu.usd_per_gpu_hour if gpu_hour_usd is None else float(gpu_hour_usd)
    out_per_hour = lam * w.mean_output * 3600.0
    all_per_hour = lam * (w.mean_input + w.mean_output) * 3600.0
    cost: dict[str, float | None] = {"usd_per_gpu_hour": price}
    for key, n_gpus in (("colocated", gpus["colocated"]), ("disaggregated", gpus["disaggregated"])):
        per_hour = n_gpus * price if n_gpus else None
        cost[f"{key}_usd_per_hour"] = per_hour
        cost[f"{key}_usd_per_million_output_tokens"] = per_hour / out_per_hour * 1e6 if per_hour and out_per_hour else None
        cost[f"{key}_usd_per_million_tokens"] = per_hour / all_per_hour * 1e6 if per_hour and all_per_hour else None
    cost["usd_per_hour"] = cost["colocated_usd_per_hour"]
    cost["usd_per_million_output_tokens"] = cost["colocated_usd_per_million_output_tokens"]
    cost["usd_per_million_tokens"] = cost["colocated_usd_per_million_tokens"]

    throughput_replicas = _smallest(utilisation_ok)
    idle = max(float(r["prefill_rho"][0]), float(r["decode_pressure"][0])) < IDLE_PRESSURE
    if meets and idle and throughput_replicas is not None and replicas > throughput_replicas:
        # A practitioner reads low pressure on a big fleet as a bug unless the plan says what the GPUs are for.
        fewer = ev.evaluate(np.array([lam / (replicas - 1)]), tpot_slo_s=tpot_s, quantiles=(0.9,))
        binding = "TTFT" if float(fewer["ttft_p90_s"][0]) > ttft_s else "TPOT"
        notes.append(
            f"{LATENCY_SIZED}{binding} p90 SLO, not by throughput: {throughput_replicas} replica(s) would carry this "
            f"load below {FALLBACK_UTILIZATION:.0%} utilisation, and the other {replicas - throughput_replicas} keep "
            f"the {binding} p90 within its SLO (one replica fewer misses it); "
            + ("more GPUs per replica (TP), a prefix cache, trimmed prompts or a pool of its own for the longest "
               "prompts buy it back" if binding == "TTFT" else
               "more GPUs per replica (TP), lower-precision weights or a smaller decode batch buy it back")
        )
    alone_p90 = float(_weighted_quantiles(ev.latency_s, ev.weight, np.array([0.9]))[0])
    if meets and alone_p90 > 0.7 * ttft_s:
        notes.append(
            f"the p90 prefill alone takes {alone_p90 * 1000:.0f} ms of the {ttft_slo_ms:.0f} ms TTFT SLO, so replicas "
            "must stay nearly idle to avoid queueing: raise TP, trim input or cache prefixes"
        )
    p99_context = float(np.max(w.input_tokens + w.output_tokens))
    if dep.max_batch_kv(p99_context) < 1:
        notes.append(
            f"the longest requests ({p99_context:,.0f} tokens of context) do not fit one replica's KV pool: raise TP"
        )
    if dep.tp > 8 and "nvl72" not in dep.gpu.scaleup_link.lower():
        notes.append(f"TP{dep.tp} spans more than one 8-GPU node: the model assumes the scale-up link between all "
                     "of them, so all-reduce costs are optimistic")
    if dep.emulation_note:
        notes.append(dep.emulation_note)

    demand_source = ("assumed" if w.rate_source == "assumed" else
                     "measured" if (w.rate_source == "measured" and whatif.is_identity) else "estimated")
    assumptions = _assumptions(dep, w, whatif, ttft_slo_ms, tpot_slo_ms, price, gpu_hour_usd is None)
    return Plan(
        deployment=dep.describe(),
        rate_rps=lam,
        rate_source=w.rate_source,
        prefill=Phase(lam * (w.mean_input - w.mean_cached), prefill_gpu_s, float(r["prefill_rho"][0])),
        decode=Phase(lam * w.mean_output, decode_gpu_s, float(r["decode_pressure"][0])),
        ttft_ms=Percentiles(_ms(r["ttft_p50_s"]), _ms(r["ttft_p90_s"])),
        tpot_ms=Percentiles(_ms(r["tpot_p50_s"]), _ms(r["tpot_p90_s"])),
        replicas=replicas,
        gpus=gpus,
        disaggregated={
            "prefill_replicas": k_p,
            "decode_replicas": k_d,
            "ttft_ms": asdict(Percentiles(_ms(rp["ttft_p50_s"]), _ms(rp["ttft_p90_s"]))) if rp else None,
            "tpot_ms": asdict(Percentiles(_ms(rd["tpot_p50_s"]), _ms(rd["tpot_p90_s"]))) if rd else None,
            "kv_transfer_ms_mean": float(np.dot(w.weight, transfer)) * 1000.0,
        },
        operating_batch=batch if math.isfinite(batch) else None,
        dominant_phase=dominant,
        meets_slo=meets,
        cost=cost,
        assumptions=assumptions,
        provenance={
            "rate_rps": "measured" if w.rate_source == "measured" else "assumed",
            "prefill.demand_tokens_per_s": demand_source,
            "decode.demand_tokens_per_s": demand_source,
            "prefill.utilization": "estimated",
            "decode.utilization": "estimated",
            "ttft_ms": "estimated",
            "tpot_ms": "estimated",
            "gpus": "estimated",
            "operating_batch": "estimated",
            "cost.usd_per_gpu_hour": "assumed",
            "cost": "estimated",
            "slo": "assumed",
        },
        notes=notes,
    )


def _why_infeasible(ev: _Evaluator, w: Workload, ttft_s: float, tpot_s: float) -> list[str]:
    """One line per SLO that no number of replicas can meet, with the lever that would."""
    notes = []
    alone_p90 = float(_weighted_quantiles(ev.latency_s, ev.weight, np.array([0.9]))[0])
    if alone_p90 > ttft_s:
        notes.append(
            f"TTFT SLO {ttft_s * 1000:.0f} ms is below the p90 prefill time of a request alone "
            f"({alone_p90 * 1000:.0f} ms): raise TP, use FP8, trim input or cache prefixes"
        )
    if float(ev.step_grid_s[0]) > tpot_s:
        notes.append(
            f"TPOT SLO {tpot_s * 1000:.0f} ms is below one decode step at batch 1 "
            f"({float(ev.step_grid_s[0]) * 1000:.1f} ms): raise TP or use FP8 weights"
        )
    if not notes:
        notes.append("both SLOs cannot be met together on colocated replicas: consider disaggregated pools")
    notes.append(f"pools sized for {FALLBACK_UTILIZATION:.0%} utilisation instead; SLOs are not met")
    return notes


def _assumptions(dep: Deployment, w: Workload, whatif: WhatIf, ttft_slo_ms: float, tpot_slo_ms: float,
                 price: float, price_assumed: bool) -> dict[str, Any]:
    e = dep.eff
    return {
        "model": dep.model.name,
        "model_source": dep.model.source,
        "gpu": dep.gpu.name,
        "gpu_source": dep.gpu.source,
        "precision": dep.precision,
        "kv_precision": dep.kv_precision,
        "compute_precision": dep.compute_precision,
        "fp8_note": dep.emulation_note,
        "tp": dep.tp,
        "layout": dep.layout,
        "efficiency": {name: {"value": value, "source": e.sources.get(name, "")} for name, value in e.to_dict().items()},
        "efficiency_fitted_on": e.fitted_on,
        "slo": {"ttft_p90_ms": ttft_slo_ms, "tpot_p90_ms": tpot_slo_ms,
                "source": "set by user or the shapeviz defaults (TTFT 1000 ms, TPOT 50 ms)"},
        "rate_rps": w.rate_rps,
        "rate_source": w.rate_source,
        "rate_note": w.rate_note,
        "whatif": asdict(whatif),
        "usd_per_gpu_hour": price,
        "price_source": dep.gpu.price_source if price_assumed else "set by user",
        "queueing": "M/G/1 prefill queue per replica (Pollaczek-Khinchine); Little's law for decode; Poisson decode batch",
        "kv_transfer_gbps": e.kv_transfer_gbps,
    }


def load_curve(
    workload: Workload,
    dep: Deployment,
    multipliers: Iterable[float] = (0.25, 0.5, 0.75, 1.0, 1.25, 1.5, 2.0, 3.0, 4.0),
    whatif: WhatIf = WhatIf(),
    ttft_slo_ms: float = DEFAULT_TTFT_SLO_MS,
    tpot_slo_ms: float = DEFAULT_TPOT_SLO_MS,
    replicas: int | None = None,
) -> pd.DataFrame:
    """TTFT/TPOT p50/p90 versus traffic multiplier on a fixed fleet (the plan's colocated replicas by default).

    One row per multiplier (relative to the what-if workload). Past saturation the latencies are NaN and
    ``saturated`` is True: that is the knee a planner buys headroom before.
    """
    mult = np.asarray(list(multipliers), dtype=np.float64)
    if mult.size == 0 or np.any(~np.isfinite(mult)) or np.any(mult <= 0):
        raise ValueError("multipliers must be positive numbers, e.g. [0.5, 1, 2]")
    if replicas is None:
        replicas = plan(workload, dep, whatif, ttft_slo_ms, tpot_slo_ms).replicas or 1
    elif not (isinstance(replicas, (int, np.integer)) and replicas >= 1):
        raise ValueError(f"replicas={replicas!r} must be a whole number ≥ 1")
    w = workload.apply(whatif)
    ev = _Evaluator.build(w, dep)
    r = ev.evaluate(w.rate_rps * mult / replicas, tpot_slo_s=tpot_slo_ms / 1000.0)
    saturated = ~np.isfinite(r["ttft_p90_s"]) | ~np.isfinite(r["tpot_p90_s"])

    def ms(key: str) -> np.ndarray:
        return np.where(saturated, np.nan, r[key] * 1000.0)

    return pd.DataFrame({
        "traffic_multiplier": mult,
        "rate_rps": w.rate_rps * mult,
        "ttft_p50_ms": ms("ttft_p50_s"),
        "ttft_p90_ms": ms("ttft_p90_s"),
        "tpot_p50_ms": ms("tpot_p50_s"),
        "tpot_p90_ms": ms("tpot_p90_s"),
        "prefill_utilization": r["prefill_rho"],
        "decode_utilization": np.where(np.isfinite(r["decode_pressure"]), r["decode_pressure"], np.nan),
        "saturated": saturated,
        "replicas": replicas,
        "gpus": replicas * dep.tp,
    })


# --- per-replica limits (the fleet over time sizes every window from these) --------------------------------
CURVE_POINTS = 32   # per-replica rates of the latency curve, from a thousandth of full load to full load

@dataclass(frozen=True)
class ReplicaLimits:
    """What one replica carries for a workload's shape: the most req/s meeting both p90 SLOs, and at full load."""

    slo_rps: float        # largest per-replica rate whose TTFT p90 and TPOT p90 meet the SLOs (0: none does)
    full_rps: float       # per-replica rate at which prefill or decode runs at 100% (the utilisation scale)
    curve_rps: np.ndarray = field(default_factory=lambda: np.zeros(0))   # per-replica rates of the latency curve
    ttft_p90_ms: np.ndarray = field(default_factory=lambda: np.zeros(0))  # TTFT p90 there (inf: saturated)
    tpot_p90_ms: np.ndarray = field(default_factory=lambda: np.zeros(0))  # TPOT p90 there (inf: saturated)

    def latency(self, per_replica_rps: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """TTFT and TPOT p90 (ms) at per-replica rates, interpolated on the curve (inf past full load)."""
        x = np.asarray(per_replica_rps, dtype=np.float64)
        if self.curve_rps.size == 0:
            return np.full(x.shape, np.nan), np.full(x.shape, np.nan)
        lx = np.log(np.maximum(x, self.curve_rps[0]))
        grid = np.log(self.curve_rps)
        out = []
        for values in (self.ttft_p90_ms, self.tpot_p90_ms):
            finite = np.isfinite(values)
            v = np.interp(lx, grid[finite], values[finite]) if finite.any() else np.full(x.shape, np.inf)
            out.append(np.where(x > self.curve_rps[finite][-1] if finite.any() else True, np.inf, v))
        return out[0], out[1]


def replica_limits(workload: Workload, dep: Deployment, ttft_slo_ms: float = DEFAULT_TTFT_SLO_MS,
                   tpot_slo_ms: float = DEFAULT_TPOT_SLO_MS) -> ReplicaLimits:
    """Per-replica request rates of a shape: the most that meets both p90 SLOs, and the rate at full utilisation.

    Replicas share a rate evenly in the plan, so ``k`` replicas meet the SLOs at rate ``λ`` exactly when
    ``λ / k ≤ slo_rps``: the replicas a window needs are ``ceil(λ / slo_rps)`` (the same answer as ``plan``).
    """
    ev = _Evaluator.build(workload, dep)
    ttft_s, tpot_s = ttft_slo_ms / 1000.0, tpot_slo_ms / 1000.0
    top = 1.0 / max(ev.work_mean_s, 1e-12)  # prefill at 100%: nothing faster is stable

    def ok(x: np.ndarray) -> np.ndarray:
        r = ev.evaluate(x, tpot_slo_s=tpot_s, quantiles=(0.9,))
        return (r["ttft_p90_s"] <= ttft_s) & (r["tpot_p90_s"] <= tpot_s) & (r["prefill_rho"] < 1)

    def full(x: np.ndarray) -> np.ndarray:
        r = ev.evaluate(x, tpot_slo_s=tpot_s, quantiles=())
        return (r["prefill_rho"] < 1) & (r["decode_pressure"] < 1)

    full_rps = _largest(full, top)
    if full_rps <= 0:
        return ReplicaLimits(0.0, 0.0)
    # one evaluation on a grid up to full load: the latency curve, and the bracket of the SLO rate
    grid = np.geomspace(full_rps * 1e-3, full_rps, CURVE_POINTS)
    r = ev.evaluate(grid, tpot_slo_s=tpot_s, quantiles=(0.9,))
    good = (r["ttft_p90_s"] <= ttft_s) & (r["tpot_p90_s"] <= tpot_s) & (r["prefill_rho"] < 1)
    if not good[0]:
        slo_rps = _largest(ok, grid[0])
    elif good.all():
        slo_rps = float(grid[-1])
    else:
        last = int(np.flatnonzero(~good)[0]) - 1   # feasibility is monotone: the first failure ends it
        slo_rps = _largest(ok, float(grid[last + 1]), lo=float(grid[last]))
    return ReplicaLimits(slo_rps, full_rps, grid, r["ttft_p90_s"] * 1000.0, r["tpot_p90_s"] * 1000.0)


def _largest(feasible: Any, top: float, points: int = 12, lo: float | None = None) -> float:
    """Largest x in (0, top) with feasible(x) true (feasible for all smaller x): vectorised grid rounds, each
    ``points`` wide, narrowing to 0.5% (down to a millionth of ``top`` when the first round finds nothing).
    ``lo``: a rate already known to be feasible (the search starts there)."""
    if lo is not None:
        hi = top
        while hi / lo > 1.005:
            grid = np.geomspace(lo, hi, points)
            ok = feasible(grid)
            last = int(np.flatnonzero(ok).max()) if ok.any() else 0
            if last == grid.size - 1:
                return float(grid[-1])
            lo, hi = float(grid[last]), float(grid[last + 1])
        return lo
    lo, hi = top * 1e-3, top
    if not bool(feasible(np.array([lo]))[0]):
        lo, hi = top * 1e-6, top * 1e-3
        if not bool(feasible(np.array([lo]))[0]):
            return 0.0
    while hi / lo > 1.005:
        grid = np.geomspace(lo, hi, points)
        ok = feasible(grid)
        last = int(np.flatnonzero(ok).max())
        if last == grid.size - 1:
            return float(grid[-1])
        lo, hi = float(grid[last]), float(grid[last + 1])
    return lo
