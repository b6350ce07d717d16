"""The fleet over time: replicas per window from the log's own traffic, autoscaling policies, their cost and risk.

Every plan elsewhere is sized for one rate, the log's peak minute. Here the log is cut into windows (5 minutes;
1 hour for logs longer than two days) and each window gets the replicas that meet both p90 SLOs at *its* busiest
minute and *its* shape (the mix of products and their token lengths drift over the day too): exactly from the
window's rows when the log fits in memory, from the workload sketch's per-minute, per-product token sums above
that. The analytic planner gives, per window, the most requests per second one replica carries within the SLOs
(``planner.replica_limits``), so the replicas any minute needs are ``ceil(rate / that)``.

An autoscaling policy turns the minutes' rates into a replica schedule: hold at peak; a utilisation target
(KEDA/HPA on a request-rate metric); predicted SLO attainment (the planner's replicas for the last minute's rate
and shape, as the Dynamo planner does); or a schedule per hour of day learned from the log. A replica asked for
at ``t`` serves from ``t + delay`` (weights over the storage bandwidth, plus engine start and warm-up) and is paid
for from ``t``; scale-down waits for a cool-off and never goes below a minimum. The schedule is judged
analytically here (``autoscale``) and by replaying the log through the simulator with replicas joining and
draining (``simulate_autoscale``). One pool of one deployment per call: a fleet of pools calls it per pool.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

import numpy as np
import pandas as pd

from shapeviz.datadir import DATA_DIR
from shapeviz.physics.steps import DEFAULT_TPOT_SLO_MS, Deployment
from shapeviz.plain import json_safe
from shapeviz.serving.planner import (
    DEFAULT_TTFT_SLO_MS,
    ReplicaLimits,
    WhatIf,
    Workload,
    replica_limits,
)
from shapeviz.serving.simulator import simulate
from shapeviz.workload.sketch import WorkloadSketch

POLICIES = ("peak", "utilization", "slo", "schedule")
POLICY_LABELS = {
    "peak": "hold at peak",
    "utilization": "utilisation target",
    "slo": "predicted SLO attainment",
    "schedule": "schedule by hour of day",
}
WINDOW_S = 300.0                 # the default window
LONG_WINDOW_S = 3600.0           # for logs longer than ``long_log_days``
MIN_WINDOW_REQUESTS = 1          # a window with fewer requests keeps the whole log's shape
EXACT_WINDOW_REQUESTS = 2000     # a window with this many requests is planned from its own rows (a stable p90 tail)
MAX_SHAPES = 96                  # distinct window shapes planned (mixes rounded coarser until they fit): a week of
                                 # 5-minute windows is 2,016 of them, and each costs the planner a few milliseconds
SHRINK_REQUESTS = 200            # a product's window mean counts as this many extra requests at its log-wide mean
FALLBACK_UTILIZATION = 0.8      # no size meets the SLOs: sized for this utilisation, as the plan does
IDLE_FLOOR = 0.1                 # a window is never sized below this utilisation: meeting its p90 TTFT by keeping
                                 # replicas 90%+ idle buys GPUs to stand still (its prompts alone nearly reach the SLO)
ATTAINMENT_TARGET = 0.9          # p90 SLOs: a window where fewer than 90% of requests meet both has missed


@lru_cache(maxsize=1)
def defaults() -> dict[str, Any]:
    """The sourced defaults of ``data/autoscaling.json`` (start-up, control loop, cool-off, anchors)."""
    with open(DATA_DIR / "autoscaling.json", encoding="utf-8") as f:
        return json.load(f)


def _default(name: str) -> float:
    return float(defaults()[name]["value"])


def _assumed(name: str) -> str:
    """The data file's source of a default, labelled assumed once."""
    text = str(defaults()[name]["source"])
    return text if text.startswith("assumed") else "assumed: " + text


# --- how fast a replica joins -----------------------------------------------------------------------------
@dataclass(frozen=True)
class Startup:
    """The scale-up delay of one replica: its weights over the storage bandwidth, plus engine start and warm-up."""

    weight_gb: float
    storage_gbps: float
    engine_start_s: float
    sources: dict[str, str] = field(default_factory=dict)

    @property
    def load_s(self) -> float:
        """Seconds to read the replica's weights."""
        return self.weight_gb / self.storage_gbps

    @property
    def delay_s(self) -> float:
        """Seconds from asking for a replica to its first served request."""
        return self.load_s + self.engine_start_s

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON: each figure with where it came from."""
        return {"delay_s": self.delay_s, "weight_gb": self.weight_gb, "storage_gbps": self.storage_gbps,
                "weight_load_s": self.load_s, "engine_start_s": self.engine_start_s, "sources": dict(self.sources)}


def startup(dep: Deployment, storage_gbps: float | None = None, engine_start_s: float | None = None) -> Startup:
    """The scale-up delay of ``dep``: its weight bytes (estimated) over a storage bandwidth and engine start (assumed)."""
    for name, v in (("storage_gbps", storage_gbps), ("engine_start_s", engine_start_s)):
        if v is not None and not (math.isfinite(v) and (v > 0 if name == "storage_gbps" else v >= 0)):
            raise ValueError(f"{name}={v!r} must be a {'positive' if name == 'storage_gbps' else 'non-negative'} number")
    bw = _default("storage_gbps") if storage_gbps is None else float(storage_gbps)
    start = _default("engine_start_s") if engine_start_s is None else float(engine_start_s)
    return Startup(float(dep.weight_bytes) / 1e9, bw, start, {
        "weight_gb": f"estimated: {dep.describe()} weights at {dep.precision or 'native'} precision (physics)",
        "storage_gbps": "set by user" if storage_gbps is not None else _assumed("storage_gbps"),
        "engine_start_s": "set by user" if engine_start_s is not None else _assumed("engine_start_s"),
    })


# --- the policy -------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Policy:
    """An autoscaling policy and its knobs (defaults from ``data/autoscaling.json``)."""

    name: str = "slo"
    target_utilization: float | None = None
    cooloff_s: float | None = None
    min_replicas: int | None = None
    control_interval_s: float | None = None

    def __post_init__(self) -> None:
        if self.name not in POLICIES:
            raise ValueError(f"autoscaling policy {self.name!r} must be one of {', '.join(POLICIES)}")
        u = self.utilization
        if not (0.0 < u <= 1.0):
            raise ValueError(f"target utilisation {u!r} must be a fraction in (0, 1], e.g. 0.7")
        if self.cooloff < 0:
            raise ValueError(f"cool-off {self.cooloff!r} s must be ≥ 0")
        if self.minimum < 1:
            raise ValueError(f"minimum replicas {self.minimum!r} must be ≥ 1")

    @property
    def utilization(self) -> float:
        """Target utilisation (utilisation policy)."""
        return _default("target_utilization") if self.target_utilization is None else float(self.target_utilization)

    @property
    def cooloff(self) -> float:
        """Seconds the desired count must stay lower before replicas are drained."""
        return _default("cooloff_s") if self.cooloff_s is None else float(self.cooloff_s)

    @property
    def minimum(self) -> int:
        """Fewest replicas ever kept."""
        return int(_default("min_replicas")) if self.min_replicas is None else int(self.min_replicas)

    def to_dict(self) -> dict[str, Any]:
        """The policy's settings, each with its origin."""
        def origin(value: Any, key: str) -> str:
            return "set by user" if value is not None else _assumed(key)
        return {"name": self.name, "label": POLICY_LABELS[self.name],
                "target_utilization": self.utilization if self.name == "utilization" else None,
                "cooloff_s": self.cooloff, "min_replicas": self.minimum,
                "sources": {"cooloff_s": origin(self.cooloff_s, "cooloff_s"),
                            "min_replicas": origin(self.min_replicas, "min_replicas"),
                            **({"target_utilization": origin(self.target_utilization, "target_utilization")}
                               if self.name == "utilization" else {})}}


# --- traffic per minute and capacity per window -----------------------------------------------------------
@dataclass
class TrafficWindows:
    """Per-minute rates of a log and, per window, what one replica carries at that window's shape."""

    origin: pd.Timestamp            # start of the first minute (UTC)
    offset_s: float                 # first request's arrival after ``origin`` (the simulator's time 0)
    minute_rps: np.ndarray          # requests per second of every minute from ``origin``
    window_s: float
    window_of_minute: np.ndarray    # window index of each minute
    requests: np.ndarray            # per window
    slo_rps: np.ndarray             # per window: per-replica req/s meeting both p90 SLOs (0: no size meets them)
    full_rps: np.ndarray            # per window: per-replica req/s at 100% of the busier phase
    workloads: list[Workload]       # per window (the whole log's shape where a window has too few requests)
    limits: list[ReplicaLimits]     # per window (shared between windows of one shape)
    shape_source: str               # "window rows" | "sketch: per-minute product mix and token sums"
    tp: int
    gpu_hour_usd: float
    ttft_slo_ms: float
    tpot_slo_ms: float
    dep: Deployment
    notes: list[str] = field(default_factory=list)

    @property
    def n_windows(self) -> int:
        """Number of windows."""
        return int(self.requests.size)

    @property
    def sizing_rps(self) -> np.ndarray:
        """Per window: the per-replica rate the fleet is sized at (the SLO rate, within the floors below)."""
        slo, full = self.slo_rps, self.full_rps
        floored = np.where(slo > 0, np.maximum(slo, IDLE_FLOOR * full), FALLBACK_UTILIZATION * full)
        return np.maximum(floored, 1e-12)

    @property
    def window_rps(self) -> np.ndarray:
        """Mean request rate of every window (the rate its SLOs are planned at)."""
        minutes = np.bincount(self.window_of_minute, minlength=self.n_windows)
        return np.bincount(self.window_of_minute, weights=self.minute_rps, minlength=self.n_windows) / np.maximum(minutes, 1)

    @property
    def window_peak_rps(self) -> np.ndarray:
        """The busiest minute's request rate of every window (the rate its replicas are sized at)."""
        peak = np.zeros(self.n_windows)
        np.maximum.at(peak, self.window_of_minute, self.minute_rps)
        return peak

    @property
    def window_need(self) -> np.ndarray:
        """Replicas each window is sized for at its busiest minute and its shape (0 when idle)."""
        return np.ceil(self.window_peak_rps / self.sizing_rps - 1e-9).astype(np.int64)

    @property
    def window_slo_need(self) -> np.ndarray:
        """Replicas each window needs for both p90 SLOs at its busiest minute (huge where no size meets them)."""
        peak = self.window_peak_rps
        need = np.ceil(peak / np.maximum(self.slo_rps, 1e-12) - 1e-9)
        return np.where((self.slo_rps > 0) | (peak <= 0), need, np.iinfo(np.int64).max // 2).astype(np.int64)

    @property
    def minute_need(self) -> np.ndarray:
        """Every minute's window need."""
        return self.window_need[self.window_of_minute]

    @property
    def minute_slo_need(self) -> np.ndarray:
        """Every minute's window SLO need."""
        return self.window_slo_need[self.window_of_minute]

    @property
    def window_starts(self) -> pd.DatetimeIndex:
        """UTC start of every window."""
        return pd.DatetimeIndex([self.origin + pd.Timedelta(seconds=self.window_s * k) for k in range(self.n_windows)])


def traffic_windows(source: pd.DataFrame | Any, dep: Deployment, *, window_s: float | None = None,
                    whatif: WhatIf = WhatIf(), ttft_slo_ms: float = DEFAULT_TTFT_SLO_MS,
                    tpot_slo_ms: float = DEFAULT_TPOT_SLO_MS, gpu_hour_usd: float | None = None) -> TrafficWindows:
    """Per-minute rates and per-window replica capacity of a canonical frame or a ``WorkloadSketch``.

    The what-if applies to every window (the traffic lever scales the rates, the trims and cache the shape).
    """
    if isinstance(source, WorkloadSketch):
        minute_counts, origin, offset, products = _sketch_minutes(source)
    elif isinstance(source, pd.DataFrame):
        minute_counts, origin, offset, products = _frame_minutes(source)
    else:
        raise ValueError("the fleet over time needs a canonical frame or a workload sketch")
    span_s = minute_counts.size * 60.0
    if window_s is None:
        window_s = LONG_WINDOW_S if span_s > _default("long_log_days") * 86400 else WINDOW_S
    if not (window_s >= 60 and window_s % 60 == 0):
        raise ValueError(f"window {window_s!r} s must be a whole number of minutes (e.g. 300 for 5 minutes)")
    per = int(window_s // 60)
    n_win = int(math.ceil(minute_counts.size / per))
    window_of_minute = np.arange(minute_counts.size) // per
    requests = np.bincount(window_of_minute, weights=minute_counts, minlength=n_win).astype(np.int64)

    if isinstance(source, pd.DataFrame):
        whole, shapes, shape_source = _frame_shapes(source, origin, window_s, n_win, requests)
    else:
        whole, shapes, shape_source = _sketch_shapes(source, origin, window_s, n_win, requests, products)
    slo = np.zeros(n_win)
    full = np.zeros(n_win)
    cache: dict[int, tuple[Workload, ReplicaLimits]] = {}
    workloads: list[Workload] = []
    limits: list[ReplicaLimits] = []
    shape_only = WhatIf(whatif.trim_input, whatif.trim_output, whatif.cache_hit)
    for k in range(n_win):
        base = shapes[k] if shapes[k] is not None else whole
        if id(base) not in cache:
            w = base.apply(shape_only)
            cache[id(base)] = (w, replica_limits(w, dep, ttft_slo_ms, tpot_slo_ms))
        w, lim = cache[id(base)]
        workloads.append(w)
        limits.append(lim)
        slo[k], full[k] = lim.slo_rps, lim.full_rps
    price = dep.gpu.usd_per_gpu_hour if gpu_hour_usd is None else float(gpu_hour_usd)
    notes = []
    if np.any(slo <= 0):
        notes.append(f"{int((slo <= 0).sum())} window(s) cannot meet both SLOs at any size: sized for "
                     f"{FALLBACK_UTILIZATION:.0%} utilisation, as the plan does, and counted as missed")
    idle = (slo > 0) & (slo < IDLE_FLOOR * full)
    if np.any(idle):
        notes.append(f"{int(idle.sum())} window(s) would meet the TTFT p90 SLO only with their replicas over "
                     f"{1 - IDLE_FLOOR:.0%} idle (their prompts alone nearly reach it): sized at {IDLE_FLOOR:.0%} "
                     "utilisation and counted as missed; a pool of their own for the longest prompts, more TP or a "
                     "prefix cache buys them back")
    rates = minute_counts / 60.0 * whatif.traffic_multiplier
    return TrafficWindows(origin, offset, rates, float(window_s), window_of_minute, requests, slo, full, workloads,
                          limits, shape_source, dep.tp, price, float(ttft_slo_ms), float(tpot_slo_ms), dep, notes)


def _frame_minutes(frame: pd.DataFrame) -> tuple[np.ndarray, pd.Timestamp, float, list[str]]:
    if "timestamp" not in frame.columns or frame["timestamp"].notna().sum() < 2:
        raise ValueError("the log has no timestamps, so its traffic over time cannot be planned; map a timestamp column")
    ts = frame["timestamp"].dropna()
    first = ts.min()
    origin = first.floor("min")
    minute = ((ts - origin) // pd.Timedelta(minutes=1)).to_numpy(dtype=np.int64)
    return (np.bincount(minute).astype(np.float64), origin, (first - origin) / pd.Timedelta(seconds=1), [])


def _sketch_minutes(sketch: Any) -> tuple[np.ndarray, pd.Timestamp, float, list[str]]:
    per = sketch.per_minute()
    if len(per) < 2:
        raise ValueError("the log has no timestamps, so its traffic over time cannot be planned; map a timestamp column")
    origin = pd.Timestamp(int(per.index.min()) * 60, unit="s", tz="UTC")
    return per.to_numpy(dtype=np.float64), origin, 0.0, list(sketch.products)


def _frame_shapes(frame: pd.DataFrame, origin: pd.Timestamp, window_s: float, n_win: int,
                  requests: np.ndarray) -> tuple[Workload, list[Workload | None], str]:
    """Per window: its own rows binned when it has ``EXACT_WINDOW_REQUESTS`` or more, else the product mix."""
    rows = frame[frame["timestamp"].notna()]
    whole = Workload.from_frame(rows, rate_rps=1.0)
    win = ((rows["timestamp"] - origin) / pd.Timedelta(seconds=window_s)).to_numpy(dtype=np.float64).astype(np.int64)
    product = rows["product"].astype(str) if "product" in rows.columns else pd.Series("all", index=rows.index)
    pi, names = pd.factorize(product, sort=True)   # np.unique's names and codes, hashed instead of sorted: 7× faster
    per_product = [Workload.from_frame(rows[pi == p], rate_rps=1.0) for p in range(names.size)]
    P = names.size
    key = win * P + pi
    sums = [np.bincount(key, weights=v, minlength=n_win * P).reshape(n_win, P)
            for v in (np.ones(len(rows)), rows["input_tokens"].to_numpy(np.float64),
                      rows["output_tokens"].to_numpy(np.float64))]
    shapes = _mixtures(per_product, *sums, requests)
    order = np.argsort(win, kind="stable")
    bounds = np.searchsorted(win[order], np.arange(n_win + 1))
    exact = np.flatnonzero(requests >= EXACT_WINDOW_REQUESTS)
    if exact.size > MAX_SHAPES:   # too many to plan one by one: the busiest ones keep their own rows
        exact = exact[np.argsort(-requests[exact], kind="stable")[:MAX_SHAPES // 2]]
    for k in exact:
        shapes[k] = Workload.from_frame(rows.iloc[order[bounds[k]:bounds[k + 1]]], rate_rps=1.0)
    return whole, shapes, (f"measured per window: its own requests where it has {EXACT_WINDOW_REQUESTS:,} or more, "
                           "else each product's shape mixed by the window's product counts and mean tokens")


def _sketch_shapes(sketch: Any, origin: pd.Timestamp, window_s: float, n_win: int, requests: np.ndarray,
                   products: list[str]) -> tuple[Workload, list[Workload | None], str]:
    """Per window from the sketch: each product's token plane, mixed by the window's product counts and mean
    tokens per product (the sketch keeps per-minute requests and token sums per product)."""
    whole = Workload.from_view(sketch, rate_rps=1.0)
    t = sketch.timeline
    base = int(origin.value // 60_000_000_000)
    win = ((t["minute"].to_numpy(dtype=np.int64) - base) * 60 // int(window_s))
    index = {name: i for i, name in enumerate(products)}
    pi = t["product"].astype(str).map(index).to_numpy(dtype=np.int64)
    P = len(products)
    key = win * P + pi
    sums = [np.bincount(key, weights=t[col].to_numpy(dtype=np.float64), minlength=n_win * P).reshape(n_win, P)
            for col in ("requests", "input_tokens", "output_tokens")]
    per_product = []
    for q in range(P):
        cnt = sketch.counts[q]
        i, j = np.nonzero(cnt)
        k = cnt[i, j].astype(np.float64)
        per_product.append(None if k.size == 0 else Workload.from_points(
            sketch.input_sum[q][i, j] / k, sketch.output_sum[q][i, j] / k,
            np.minimum(sketch.cached_sum[q][i, j] / k, sketch.input_sum[q][i, j] / k), k, rate_rps=1.0))
    return whole, _mixtures(per_product, *sums, requests), (
        "estimated per window from the sketch: each product's shape mixed by the window's product counts and mean tokens")


def _mixtures(per_product: list[Workload | None], req: np.ndarray, inp: np.ndarray, out: np.ndarray,
              requests: np.ndarray) -> list[Workload | None]:
    """Each window's shape: the products' shapes weighted by the window's request counts, each scaled to the window's
    mean input and output tokens of that product. Both are shrunk towards the log's by ``SHRINK_REQUESTS`` (a few
    requests of a window must not rescale a whole product, as one 100k-token prompt among ten would, nor swing the
    mix: a 5-minute window of 70 requests says little about its share of agents). Mixes are rounded (shares to 2
    points, scales to 5%, coarser when needed) so that at most ``MAX_SHAPES`` distinct shapes are planned."""
    n_win, P = req.shape
    means = np.array([(w.mean_input, w.mean_output) if w is not None else (1.0, 1.0) for w in per_product])
    total = req.sum(axis=1)
    log_share = req.sum(axis=0) / max(req.sum(), 1e-12)
    share = (req + SHRINK_REQUESTS * log_share) / (total[:, None] + SHRINK_REQUESTS)
    s_in = (inp + SHRINK_REQUESTS * means[:, 0]) / (req + SHRINK_REQUESTS) / np.maximum(means[:, 0], 1e-9)
    s_out = (out + SHRINK_REQUESTS * means[:, 1]) / (req + SHRINK_REQUESTS) / np.maximum(means[:, 1], 1e-9)
    live = (requests >= MIN_WINDOW_REQUESTS) & (total > 0)
    # round the mixes (shares, log scales) coarser until at most MAX_SHAPES distinct ones remain
    for share_step, scale_step in ((0.02, 0.05), (0.05, 0.1), (0.1, 0.2), (0.2, 0.4), (0.5, 1.0), (1.0, 10.0)):
        q_share = np.round(share / share_step) * share_step
        q_in = np.round(np.log(s_in) / scale_step) * scale_step
        q_out = np.round(np.log(s_out) / scale_step) * scale_step
        keys = np.concatenate([q_share, np.where(q_share > 0, q_in, 0), np.where(q_share > 0, q_out, 0)], axis=1)
        uniq, inverse = np.unique(keys[live], axis=0, return_inverse=True)
        if uniq.shape[0] <= MAX_SHAPES:
            break
    built: list[Workload | None] = []
    for key in uniq:
        sh, ki, ko = key[:P], np.exp(key[P:2 * P]), np.exp(key[2 * P:])
        parts = [(w.input_tokens * ki[q], w.output_tokens * ko[q], w.cached_tokens * ki[q], w.weight * sh[q])
                 for q, w in enumerate(per_product) if w is not None and sh[q] > 0]
        if not parts:
            built.append(None)
            continue
        n_all, m_all, c_all, w_all = (np.concatenate([x[i] for x in parts]) for i in range(4))
        built.append(Workload.from_points(n_all, m_all, np.minimum(c_all, n_all), w_all, rate_rps=1.0))
    shapes: list[Workload | None] = [None] * n_win
    for k, j in zip(np.flatnonzero(live), np.asarray(inverse).reshape(-1)):
        shapes[k] = built[j]
    return shapes


# --- the policy as a replica schedule ---------------------------------------------------------------------
@dataclass
class Schedule:
    """A policy's replicas per minute: asked for (paid), serving (ready), and the events for the simulator."""

    policy: Policy
    startup: Startup
    desired: np.ndarray        # per minute: what the policy asked for
    provisioned: np.ndarray    # per minute: replicas paid for (serving + starting), at the minute's start
    ready: np.ndarray          # per minute: fewest replicas serving during the minute
    events: list[tuple[float, int]]   # (seconds from the origin, replicas serving from then on)


def replica_schedule(tw: TrafficWindows, policy: Policy, start: Startup) -> Schedule:
    """Run ``policy`` over the minutes of ``tw``: scale-up after ``start.delay_s``, scale-down after the cool-off."""
    need = tw.minute_need
    n = need.size
    cap = tw.sizing_rps[tw.window_of_minute]
    full = tw.full_rps[tw.window_of_minute]
    lo = policy.minimum
    step = 60.0
    lead = int(math.ceil(start.delay_s / step))
    if policy.name == "peak":
        desired = np.full(n, max(int(need.max()), lo))
    elif policy.name == "schedule":
        # the log's own busiest need per hour of day, asked for ``delay`` ahead of the hour it is for
        hour = ((tw.origin.hour * 60 + tw.origin.minute + np.arange(n)) // 60) % 24
        per_hour = np.zeros(24, dtype=np.int64)
        np.maximum.at(per_hour, hour, need)
        target = per_hour[hour]
        ahead = np.concatenate([target[lead:], np.repeat(target[-1:], min(lead, n))])[:n]
        desired = np.maximum(np.maximum(target, ahead), lo)
    else:
        # reactive: at minute m the controller sees minute m−1's rate (the first minute sees its own)
        seen = np.concatenate([tw.minute_rps[:1], tw.minute_rps[:-1]])
        if policy.name == "utilization":
            per = np.maximum(full * policy.utilization, 1e-12)
        else:
            per = cap
        desired = np.maximum(np.ceil(seen / np.maximum(per, 1e-12) - 1e-9).astype(np.int64), lo)
        desired[0] = max(int(need[0]), lo)   # the fleet starts sized for the first minute
    # the peak fleet is the ceiling (maxReplicas): a reactive policy chasing one bursty minute stops there
    desired = np.minimum(desired, max(int(need.max()), lo)).astype(np.int64)

    provisioned = np.zeros(n, dtype=np.int64)
    ready = np.zeros(n, dtype=np.int64)
    serving = int(desired[0])
    changes: list[tuple[float, int]] = [(0.0, serving)]   # (time, +joined / −drained)
    pending: list[list[float]] = []        # [ready_at_s, count] of replicas starting up
    lower_since: float | None = None
    for m in range(n):
        t = m * step
        for p in [p for p in pending if p[0] <= t]:
            serving += int(p[1])
            changes.append((p[0], int(p[1])))
        pending = [p for p in pending if p[0] > t]
        total = serving + sum(int(c) for _, c in pending)
        d = int(desired[m])
        if d > total:
            pending.append([t + start.delay_s, d - total])
            lower_since = None
        elif d < total:
            lower_since = t if lower_since is None else lower_since
            if t - lower_since >= policy.cooloff:
                cut = total - d
                while cut and pending:           # cancel replicas still starting first (newest first)
                    take = min(cut, int(pending[-1][1]))
                    pending[-1][1] -= take
                    cut -= take
                    if pending[-1][1] == 0:
                        pending.pop()
                if cut:
                    serving -= cut               # drain: in-flight requests finish, no new ones arrive
                    changes.append((t, -cut))
                lower_since = None
        else:
            lower_since = None
        provisioned[m] = serving + sum(int(c) for _, c in pending)
        ready[m] = serving
    for p in pending:                            # joins after the last minute still count for the replay
        changes.append((p[0], int(p[1])))
    changes.sort(key=lambda e: e[0])
    times = np.array([c[0] for c in changes])
    counts = np.cumsum([c[1] for c in changes])
    events = _clean_events(list(zip(times.tolist(), counts.astype(int).tolist())))
    return Schedule(policy, start, desired, provisioned, ready, events)


def _clean_events(events: list[tuple[float, int]]) -> list[tuple[float, int]]:
    out: list[tuple[float, int]] = []
    for t, k in sorted(events, key=lambda e: e[0]):
        if out and abs(out[-1][0] - t) < 1e-9:
            out[-1] = (t, k)
        elif not out or out[-1][1] != k:
            out.append((t, k))
    return out


# --- what a schedule costs and risks ----------------------------------------------------------------------
@dataclass
class AutoscaleResult:
    """One policy over the log: per window rate, replicas, latency, attainment; GPU-hours and cost against peak."""

    policy: Policy
    startup: Startup
    method: str                   # "estimated" (analytic) | "simulated"
    windows: pd.DataFrame         # start, rate_rps, peak_rps, replicas, replicas_needed, ttft_p90_ms, tpot_p90_ms,
                                  # attainment, missed
    gpu_hours: float
    cost: float
    baseline_gpu_hours: float     # hold at peak over the same span
    lower_bound_gpu_hours: float  # every window held at exactly its own minimum fleet
    usd_per_gpu_hour: float
    window_s: float
    shape_source: str
    schedule: Schedule
    notes: list[str] = field(default_factory=list)

    @property
    def saving(self) -> float:
        """Share of the hold-at-peak GPU-hours this policy saves."""
        return 1.0 - self.gpu_hours / self.baseline_gpu_hours if self.baseline_gpu_hours > 0 else 0.0

    @property
    def missed(self) -> pd.DataFrame:
        """The windows where the policy missed the SLOs."""
        return self.windows[self.windows["missed"]]

    def to_dict(self) -> dict[str, Any]:
        """The stable JSON document (``plan --autoscale`` / ``simulate --autoscale``)."""
        w = self.windows
        rows = [{"start": s.isoformat(), "rate_rps": float(r), "peak_rps": float(pk), "replicas": int(k),
                 "replicas_needed": int(nd), "ttft_p90_ms": _num(tt), "tpot_p90_ms": _num(tp),
                 "attainment": _num(a), "missed": bool(ms), "reason": why or None}
                for s, r, pk, k, nd, tt, tp, a, ms, why in zip(
                    w["start"], w["rate_rps"], w["peak_rps"], w["replicas"], w["replicas_needed"], w["ttft_p90_ms"],
                    w["tpot_p90_ms"], w["attainment"], w["missed"], w["reason"])]
        served = w["requests"].sum()
        overall = float((w["attainment"].fillna(1.0) * w["requests"]).sum() / served) if served else None
        return json_safe({
            "method": self.method,
            "policy": self.policy.to_dict(),
            "window_s": self.window_s,
            "shape_per_window": self.shape_source,
            "scale_up_delay": self.startup.to_dict(),
            "windows": rows,
            "gpu_hours": self.gpu_hours,
            "cost": self.cost,
            "baseline_gpu_hours": self.baseline_gpu_hours,
            "baseline_cost": self.baseline_gpu_hours * self.usd_per_gpu_hour,
            "lower_bound_gpu_hours": self.lower_bound_gpu_hours,
            "saving": self.saving,
            "usd_per_gpu_hour": self.usd_per_gpu_hour,
            "attainment": overall,
            "missed_windows": [r["start"] for r in rows if r["missed"]],
            "max_replicas": int(self.schedule.provisioned.max()) if self.schedule.provisioned.size else 0,
            "provenance": {"rate_rps": "measured", "replicas_needed": "estimated", "replicas": "estimated",
                           "ttft_p90_ms": self.method, "tpot_p90_ms": self.method, "attainment": self.method,
                           "gpu_hours": "estimated", "cost": "estimated", "usd_per_gpu_hour": "assumed",
                           "scale_up_delay": "estimated from assumed storage bandwidth and engine start"},
            "notes": self.notes,
        })


def _num(x: Any) -> float | None:
    v = float(x) if x is not None else float("nan")
    return v if math.isfinite(v) else None


def _totals(tw: TrafficWindows, sched: Schedule) -> tuple[float, float, float]:
    """(GPU-hours of the schedule, of hold-at-peak, of every window at its own minimum), over the log's minutes."""
    need = tw.minute_need
    lo = sched.policy.minimum
    per_min = tw.tp / 60.0
    gpu_hours = float(sched.provisioned.sum()) * per_min
    baseline = float(max(int(need.max()), lo)) * need.size * per_min
    win_need = np.zeros(tw.n_windows, dtype=np.int64)
    np.maximum.at(win_need, tw.window_of_minute, need)
    minutes = np.bincount(tw.window_of_minute, minlength=tw.n_windows)
    lower = float((np.maximum(win_need, lo) * minutes).sum()) * per_min
    return gpu_hours, baseline, lower


def autoscale(tw: TrafficWindows, policy: Policy | str = "slo", start: Startup | None = None) -> AutoscaleResult:
    """A policy over the log, judged analytically: a minute misses when fewer replicas serve than it needs."""
    policy = Policy(policy) if isinstance(policy, str) else policy
    start = startup(tw.dep) if start is None else start
    sched = replica_schedule(tw, policy, start)
    need = tw.minute_need
    met = sched.ready >= tw.minute_slo_need
    wom = tw.window_of_minute
    counts = tw.minute_rps * 60.0
    n = tw.n_windows
    met_requests = np.bincount(wom, weights=counts * met, minlength=n)
    total = np.bincount(wom, weights=counts, minlength=n)
    # latency at the window's rate on the fewest replicas serving in it
    peak = np.zeros(n)
    np.maximum.at(peak, wom, tw.minute_rps)
    serving = np.full(n, np.iinfo(np.int64).max)
    np.minimum.at(serving, wom, sched.ready)
    serving = np.maximum(serving, 1)
    rate = tw.window_rps
    ttft = np.full(n, np.nan)
    tpot = np.full(n, np.nan)
    for k in np.flatnonzero(rate > 0):
        a, b = tw.limits[k].latency(np.array([rate[k] / serving[k]]))
        ttft[k], tpot[k] = float(a[0]), float(b[0])
    win_need = np.zeros(n, dtype=np.int64)
    np.maximum.at(win_need, wom, need)
    win_prov = np.zeros(n, dtype=np.int64)
    np.maximum.at(win_prov, wom, sched.provisioned)
    attainment = np.where(total > 0, met_requests / np.maximum(total, 1e-12), np.nan)
    missed_min = np.bincount(wom, weights=~met & (counts > 0), minlength=n) > 0
    reason = _reasons(tw, sched, n)
    windows = pd.DataFrame({
        "start": tw.window_starts, "requests": total.astype(np.int64),
        "rate_rps": rate, "peak_rps": peak,
        "replicas": win_prov, "replicas_needed": win_need,
        "ttft_p90_ms": ttft, "tpot_p90_ms": tpot, "attainment": attainment, "missed": missed_min,
        "reason": np.where(missed_min, reason, ""),
    })
    gpu_hours, baseline, lower = _totals(tw, sched)
    notes = list(tw.notes)
    notes.append("attainment (estimated): share of the window's requests arriving in minutes with enough replicas "
                 "serving for both p90 SLOs at the window's rate and shape; the simulator replays the requests themselves")
    _explain_misses(windows, sched, notes)
    return AutoscaleResult(policy, start, "estimated", windows, gpu_hours, gpu_hours * tw.gpu_hour_usd, baseline,
                           lower, tw.gpu_hour_usd, tw.window_s, tw.shape_source, sched, notes)


REASONS = {
    "starting": "a burst faster than the scale-up delay: replicas were still starting",
    "late": "the policy asked for too few replicas (it reacts to the last minute's rate)",
    "shape": "the window's shape cannot meet the SLOs economically (prompts alone near the TTFT SLO)",
    "burst": "a burst inside the window (the replay sees it; the per-minute plan did not)",
}


def _reasons(tw: TrafficWindows, sched: Schedule, n: int) -> np.ndarray:
    """Why each window could miss: shape first, then replicas still starting, then a policy that asked too late."""
    wom = tw.window_of_minute
    short = sched.ready < tw.minute_slo_need
    starting = short & (sched.provisioned > sched.ready)
    late = short & (sched.provisioned < tw.minute_slo_need)
    shape = (tw.slo_rps < IDLE_FLOOR * tw.full_rps)
    any_start = np.bincount(wom, weights=starting, minlength=n) > 0
    any_late = np.bincount(wom, weights=late, minlength=n) > 0
    return np.where(shape, "shape", np.where(any_start, "starting", np.where(any_late, "late", "burst")))


def _explain_misses(windows: pd.DataFrame, sched: Schedule, notes: list[str]) -> None:
    missed = windows[windows["missed"]]
    if not len(missed):
        return
    counts = missed["reason"].value_counts()
    parts = [f"{int(c)} {REASONS[k]}" for k, c in counts.items() if k in REASONS]
    delay = (f" (scale-up delay {sched.startup.delay_s:.0f} s = {sched.startup.load_s:.0f} s of weights + "
             f"{sched.startup.engine_start_s:.0f} s engine start)") if "starting" in counts.index else ""
    notes.append(f"missed {len(missed)} of {len(windows)} window(s): " + "; ".join(parts) + delay)


def compare_policies(tw: TrafficWindows, start: Startup | None = None, policies: tuple[str, ...] = POLICIES,
                     **knobs: Any) -> pd.DataFrame:
    """Every policy side by side: GPU-hours, cost, saving against hold-at-peak, attainment and missed windows."""
    start = startup(tw.dep) if start is None else start
    rows = []
    for name in policies:
        r = autoscale(tw, Policy(name, **knobs), start)
        d = r.to_dict()
        rows.append({"policy": name, "label": POLICY_LABELS[name], "gpu_hours": r.gpu_hours, "cost": r.cost,
                     "saving": r.saving, "baseline_gpu_hours": r.baseline_gpu_hours,
                     "lower_bound_gpu_hours": r.lower_bound_gpu_hours, "attainment": d["attainment"],
                     "missed_windows": int(r.windows["missed"].sum()), "max_replicas": d["max_replicas"]})
    return pd.DataFrame(rows)


# --- the replay -------------------------------------------------------------------------------------------
def simulate_autoscale(frame: pd.DataFrame, tw: TrafficWindows, policy: Policy | str = "slo",
                       start: Startup | None = None, whatif: WhatIf = WhatIf(), **sim: Any) -> AutoscaleResult:
    """Replay the log through the simulator with the policy's replicas joining and draining; attainment per window.

    A draining replica finishes the requests it holds and takes no new ones; its tail is added to the GPU-hours.
    """
    if whatif.traffic_multiplier != 1:
        raise ValueError("the replay keeps the log's own timeline: plan a traffic change analytically (plan --autoscale)")
    policy = Policy(policy) if isinstance(policy, str) else policy
    start = startup(tw.dep) if start is None else start
    result = autoscale(tw, policy, start)
    sched = result.schedule
    times = np.array([e[0] for e in sched.events]) - tw.offset_s
    counts = np.maximum(np.array([e[1] for e in sched.events], dtype=np.int64), 1)
    run = simulate(frame, tw.dep, arrivals="trace", replicas=int(counts.max()), whatif=whatif,
                   ttft_slo_ms=tw.ttft_slo_ms, tpot_slo_ms=tw.tpot_slo_ms,
                   replica_schedule=(times, counts), **sim)
    r = run.requests
    win = np.floor((r["arrival_s"].to_numpy() + tw.offset_s) / tw.window_s).astype(np.int64)
    win = np.clip(win, 0, tw.n_windows - 1)
    ok = (r["ttft_ms"] <= tw.ttft_slo_ms) & (r["tpot_ms"].isna() | (r["tpot_ms"] <= tw.tpot_slo_ms))
    g = pd.DataFrame({"w": win, "ok": ok.to_numpy(), "ttft": r["ttft_ms"].to_numpy(), "tpot": r["tpot_ms"].to_numpy()})
    agg = g.groupby("w").agg(att=("ok", "mean"), ttft=("ttft", lambda v: np.nanpercentile(v, 90)),
                             tpot=("tpot", lambda v: np.nanpercentile(v, 90) if np.isfinite(v).any() else np.nan))
    agg = agg.reindex(np.arange(tw.n_windows))
    windows = result.windows.copy()
    windows["ttft_p90_ms"] = agg["ttft"].to_numpy()
    windows["tpot_p90_ms"] = agg["tpot"].to_numpy()
    windows["attainment"] = agg["att"].to_numpy()
    windows["missed"] = windows["attainment"].fillna(1.0) < ATTAINMENT_TARGET
    windows["reason"] = np.where(windows["missed"], _reasons(tw, sched, tw.n_windows), "")
    # draining replicas are paid until their last request finishes
    tail_s = _drain_tail_s(r, times, counts)
    gpu_hours = result.gpu_hours + tail_s * tw.tp / 3600.0
    notes = [n for n in result.notes if not n.startswith("attainment (estimated)")]
    notes = [n for n in notes if not n.startswith("missed ")]
    notes.append(f"simulated: {len(r):,} requests replayed on the policy's schedule; attainment = share meeting both "
                 f"SLOs; a window misses below {ATTAINMENT_TARGET:.0%}")
    _explain_misses(windows, sched, notes)
    notes.extend(run.notes)
    return AutoscaleResult(policy, start, "simulated", windows, gpu_hours, gpu_hours * tw.gpu_hour_usd,
                           result.baseline_gpu_hours, result.lower_bound_gpu_hours, tw.gpu_hour_usd, tw.window_s,
                           tw.shape_source, sched, notes)


def _drain_tail_s(r: pd.DataFrame, times: np.ndarray, counts: np.ndarray) -> float:
    """Replica-seconds draining replicas keep working after they stop taking requests (their last finish − drain)."""
    arrival = r["arrival_s"].to_numpy()
    finish = arrival + r["e2e_ms"].to_numpy() / 1000.0
    replica = r["replica"].to_numpy()
    by_replica: dict[int, tuple[np.ndarray, np.ndarray]] = {}
    for rep in np.unique(replica):
        mine = replica == rep
        order = np.argsort(arrival[mine], kind="stable")
        by_replica[int(rep)] = (arrival[mine][order], np.maximum.accumulate(finish[mine][order]))
    tail = 0.0
    for i in range(1, len(times)):
        t, k, prev = float(times[i]), int(counts[i]), int(counts[i - 1])
        for rep in range(k, prev):
            if rep not in by_replica:
                continue
            arr, last = by_replica[rep]
            j = int(np.searchsorted(arr, t, side="left"))
            if j:
                tail += max(float(last[j - 1]) - t, 0.0)
    return tail
