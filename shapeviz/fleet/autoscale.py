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
from dataclasses import dataclass, field, replace
from functools import lru_cache
from typing import Any

import numpy as np
import pandas as pd

from shapeviz.datadir import DATA_DIR
from shapeviz.fleet.sizing import pair_classes, size_fleet
from shapeviz.physics.steps import DEFAULT_TPOT_SLO_MS, Deployment
from shapeviz.plain import json_safe
from shapeviz.serving.planner import (
    DEFAULT_TTFT_SLO_MS,
    ReplicaLimits,
    WhatIf,
    Workload,
    replica_limits,
)
from shapeviz.serving.products import class_targets_ms
from shapeviz.serving.simulator import simulate
from shapeviz.workload.sketch import WorkloadSketch

POLICIES = ("peak", "utilization", "slo", "schedule", "queue")
POLICY_LABELS = {
    "peak": "hold at peak",
    "utilization": "utilisation target",
    "slo": "predicted SLO attainment",
    "schedule": "schedule by hour of day",
    "queue": "queue depth with hysteresis",
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
MAX_QUEUE_REPLAYS = 12           # the queue policy's replay settles in a few rounds (one minute at least each); a
                                 # week-long log is not replayed minute after minute: past this, it says where it stopped


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
    max_replicas: int | None = None          # the ceiling (maxReplicaCount); None: the busiest window's need
    initial_replicas: int | None = None      # replicas serving at the log's start; None: the first minute's need
    scale_down_per_min: int | None = None    # most replicas drained (or cancelled) per minute; None: no limit
    queue_up: float | None = None            # queue policy: waiting requests per serving replica that scale up
    queue_down: float | None = None          # queue policy: below this for the cool-off, scale down

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
        for name in ("max_replicas", "initial_replicas", "scale_down_per_min"):
            v = getattr(self, name)
            if v is not None and not (float(v) == int(v) and int(v) >= 1):
                raise ValueError(f"{name.replace('_', ' ')} {v!r} must be a whole number ≥ 1")
        if self.max_replicas is not None and self.max_replicas < self.minimum:
            raise ValueError(f"max replicas {self.max_replicas} is below the minimum {self.minimum}")
        if not (0.0 <= self.down < self.up and math.isfinite(self.up)):
            raise ValueError(f"queue thresholds must satisfy 0 ≤ scale-down ({self.down!r}) < scale-up ({self.up!r}) "
                             "waiting requests per replica")

    @property
    def up(self) -> float:
        """Queue policy: waiting requests per serving replica above which it scales up."""
        return _default("queue_up") if self.queue_up is None else float(self.queue_up)

    @property
    def down(self) -> float:
        """Queue policy: waiting requests per serving replica below which (for the cool-off) it scales down."""
        return _default("queue_down") if self.queue_down is None else float(self.queue_down)

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
        queue = self.name == "queue"
        return {"name": self.name, "label": POLICY_LABELS[self.name],
                "target_utilization": self.utilization if self.name == "utilization" else None,
                "cooloff_s": self.cooloff, "min_replicas": self.minimum,
                "max_replicas": self.max_replicas, "initial_replicas": self.initial_replicas,
                "scale_down_per_min": self.scale_down_per_min,
                "queue_up": self.up if queue else None, "queue_down": self.down if queue else None,
                "sources": {"cooloff_s": origin(self.cooloff_s, "cooloff_s"),
                            "min_replicas": origin(self.min_replicas, "min_replicas"),
                            "max_replicas": ("set by user" if self.max_replicas is not None else
                                             "estimated: the busiest window's replicas at its rate and shape"),
                            "initial_replicas": ("set by user" if self.initial_replicas is not None else
                                                 "estimated: the first minute's need"),
                            "scale_down_per_min": ("set by user" if self.scale_down_per_min is not None else
                                                   "assumed: no limit (the HPA's default scale-down policy drains "
                                                   "100% of the pods per 15 s)"),
                            **({"queue_up": origin(self.queue_up, "queue_up"),
                                "queue_down": origin(self.queue_down, "queue_down")} if queue else {}),
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
    window_ttft_ms: np.ndarray | None = None   # per window: the TTFT p90 target it is sized for (the strictest class
    window_tpot_ms: np.ndarray | None = None   # among its products; the default pair without classes), and TPOT
    classes: dict[str, Any] | None = None      # product -> SloClass (None: one class, the TTFT/TPOT pair)
    scale: float = 1.0     # replicas the one sizing engine's replay needs per replica the planner needs (1: analytic)
    sized_by: dict[str, Any] = field(default_factory=lambda: {"method": "analytic"})

    @property
    def n_windows(self) -> int:
        """Number of windows."""
        return int(self.requests.size)

    @property
    def sizing_rps(self) -> np.ndarray:
        """Per window: the per-replica rate the fleet is sized at (the SLO rate, within the floors below)."""
        slo, full = self.slo_rps, self.full_rps
        floored = np.where(slo > 0, np.maximum(slo, IDLE_FLOOR * full), FALLBACK_UTILIZATION * full)
        return np.maximum(np.minimum(floored / self.scale, np.maximum(full, floored)), 1e-12)

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
        need = np.ceil(peak / np.maximum(self.slo_rps / self.scale, 1e-12) - 1e-9)
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
                    tpot_slo_ms: float = DEFAULT_TPOT_SLO_MS, gpu_hour_usd: float | None = None,
                    classes: dict[str, Any] | None = None) -> TrafficWindows:
    """Per-minute rates and per-window replica capacity of a canonical frame or a ``WorkloadSketch``.

    The what-if applies to every window (the traffic lever scales the rates, the trims and cache the shape).
    ``classes`` (product -> ``SloClass``, e.g. ``sizing.pair_classes``): each window is sized for the strictest
    class among the products it holds (they share one queue), products without a class at the TTFT/TPOT pair.
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
    default = (float(ttft_slo_ms), float(tpot_slo_ms))
    if classes and isinstance(source, pd.DataFrame):
        pairs, present = _window_pairs(source, origin, window_s, n_win, classes, default)
    elif classes and len({(c.ttft_ms, c.tpot_ms) for c in classes.values()}) > 1:
        raise ValueError("per-product SLO classes need the log's rows (the embedded engine), not a sketch")
    else:   # one pair for every product: the classes' (all equal), else the default
        only = next(iter(classes.values()), None) if classes else None
        pairs = [default if only is None else (float(only.ttft_ms), float(only.tpot_ms))]
        present = np.ones((n_win, 1), dtype=bool)
    slo = np.zeros(n_win)
    full = np.zeros(n_win)
    w_ttft = np.zeros(n_win)
    w_tpot = np.zeros(n_win)
    cache: dict[tuple[int, tuple[float, float]], tuple[Workload, ReplicaLimits]] = {}
    workloads: list[Workload] = []
    limits: list[ReplicaLimits] = []
    shape_only = WhatIf(whatif.trim_input, whatif.trim_output, whatif.cache_hit)
    for k in range(n_win):
        base = shapes[k] if shapes[k] is not None else whole
        held = [pairs[j] for j in np.flatnonzero(present[k])] or pairs
        best: tuple[Workload, ReplicaLimits, tuple[float, float]] | None = None
        for pair in held:   # the strictest class the window holds: the fewest requests per second per replica
            if (id(base), pair) not in cache:
                w = base.apply(shape_only)
                cache[(id(base), pair)] = (w, replica_limits(w, dep, pair[0], pair[1]))
            w, lim = cache[(id(base), pair)]
            if best is None or lim.slo_rps < best[1].slo_rps:
                best = (w, lim, pair)
        assert best is not None
        w, lim, pair = best
        workloads.append(w)
        limits.append(lim)
        slo[k], full[k] = lim.slo_rps, lim.full_rps
        w_ttft[k], w_tpot[k] = pair
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
    if len(pairs) > 1:
        notes.append(f"{len(pairs)} SLO classes: each window is sized for the strictest class among the products it "
                     "holds (they share one queue); the replay judges every request by its own product's class")
    rates = minute_counts / 60.0 * whatif.traffic_multiplier
    return TrafficWindows(origin, offset, rates, float(window_s), window_of_minute, requests, slo, full, workloads,
                          limits, shape_source, dep.tp, price, float(ttft_slo_ms), float(tpot_slo_ms), dep, notes,
                          w_ttft, w_tpot, dict(classes) if classes else None)


def sized_by_simulation(frame: pd.DataFrame, tw: TrafficWindows, *, whatif: WhatIf = WhatIf(),
                        router: str = "round_robin", block_size: int | None = None) -> TrafficWindows:
    """``tw`` with its windows' needs set by the one sizing engine (``sizing.size_fleet``): the log's busiest hour
    is sized by replaying it, and every window's per-replica rate is scaled by what that replay needed against the
    planner's need at the same hour's busiest minute (the planner sees per-minute rates; the replay sees the
    bursts inside the minute and prompts sharing the decode batch). The same scale is applied to every window."""
    classes = tw.classes or pair_classes(frame, tw.ttft_slo_ms, tw.tpot_slo_ms)
    need = tw.window_peak_rps / tw.sizing_rps          # the planner's need per window, before rounding up
    sizing = size_fleet(frame, tw.dep, classes, estimate=max(int(tw.window_need.max()), 1),
                        whatif=whatif, router=router, block_size=block_size, default_ttft_ms=tw.ttft_slo_ms,
                        default_tpot_ms=tw.tpot_slo_ms)
    on = sizing.sized_on
    info: dict[str, Any] = {"method": "simulated", "replicas": sizing.replicas, "meets": sizing.meets,
                            "window": on.get("window"), "cpu_s": sizing.cpu_s,
                            "one_fewer": None if sizing.one_fewer is None else sizing.one_fewer.verdict()}
    first = int(math.floor((float(on.get("start_s", 0.0)) + tw.offset_s) / tw.window_s))
    last = int(math.floor((float(on.get("end_s", tw.n_windows * tw.window_s)) + tw.offset_s) / tw.window_s))
    est = float(need[max(first, 0):min(last, tw.n_windows - 1) + 1].max(initial=0.0))
    if not sizing.meets or not sizing.replicas or est <= 0:
        why = "no replica count met every class in the replay: the windows keep the planner's need"
    elif sizing.replicas == 1:   # one replica is a floor, not a measure: the replay says the hour needs at most one
        why = (f"{on.get('window')} meets every class on one replica replayed, which bounds its need but does not "
               "measure it: the windows keep the planner's need")
    else:
        why = None
    if why is not None:
        info.update(method="analytic", why=why)
        return replace(tw, sized_by=info, notes=[*tw.notes, "windows sized by the planner: " + why])
    scale = float(sizing.replicas) / est
    info["scale"] = scale
    info["planner_need"] = est
    info["proof"] = ("one fewer misses" if sizing.one_fewer is not None and not sizing.one_fewer.meets
                     else "the fewest there are")
    note = (f"windows sized by simulation: {on.get('window')} needs {sizing.replicas} replicas replayed "
            f"({info['proof']}) where the planner needs {est:.2f} at its busiest minute, so every window's per-replica "
            f"rate is scaled by {1 / scale:.2f} (the same burstiness assumed in every window)")
    return replace(tw, scale=scale, sized_by=info, notes=[*tw.notes, note])


def _window_pairs(frame: pd.DataFrame, origin: pd.Timestamp, window_s: float, n_win: int, classes: dict[str, Any],
                  default: tuple[float, float]) -> tuple[list[tuple[float, float]], np.ndarray]:
    """The distinct SLO pairs of the log's products, and which of them each window holds requests of."""
    rows = frame[frame["timestamp"].notna()]
    win = ((rows["timestamp"] - origin) / pd.Timedelta(seconds=window_s)).to_numpy(dtype=np.float64).astype(np.int64)
    product = rows["product"].astype(str) if "product" in rows.columns else pd.Series("all", index=rows.index)
    codes, names = pd.factorize(product, sort=True)
    names = np.asarray(names, dtype=object)
    of_name = list(zip(class_targets_ms(names, classes, default[0], "ttft_ms").tolist(),
                       class_targets_ms(names, classes, default[1], "tpot_ms").tolist()))
    pairs = sorted(set(of_name))
    index = np.array([pairs.index(p) for p in of_name], dtype=np.int64)
    present = np.zeros((n_win, len(pairs)), dtype=bool)
    present[np.clip(win, 0, n_win - 1), index[codes]] = True
    return pairs, present


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
    desired: np.ndarray        # per minute: what the policy asked for (within the ceiling)
    provisioned: np.ndarray    # per minute: replicas paid for (serving + starting), at the minute's start
    ready: np.ndarray          # per minute: fewest replicas serving during the minute
    events: list[tuple[float, int]]   # (seconds from the origin, replicas serving from then on)
    clipped: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=bool))  # per minute: the policy wanted
                                                                                   # more than the ceiling
    backlog: np.ndarray = field(default_factory=lambda: np.zeros(0))   # per minute: requests queued at its start
                                                                       # (estimated: arrivals over full capacity)
    signal: np.ndarray | None = None   # queue policy: waiting requests per serving replica it read each minute
    signal_source: str = ""            # "estimated" | "simulated"
    ceiling: int = 0


def _steady_waiting(tw: TrafficWindows, m: int, rps: float, serving: int) -> float:
    """Requests waiting per replica in steady state at ``rps`` over ``serving`` replicas (Little's law on the
    planner's TTFT p90 above its unloaded value: an estimate of the gauge a queue-depth autoscaler reads)."""
    if rps <= 0:
        return 0.0
    lim = tw.limits[int(tw.window_of_minute[m])]
    per = rps / max(serving, 1)
    ttft = float(lim.latency(np.array([per * tw.scale]))[0][0])
    if lim.ttft_p90_ms.size == 0 or not math.isfinite(ttft):
        return math.inf
    return per * max(ttft - float(lim.ttft_p90_ms[0]), 0.0) / 1000.0


def replica_schedule(tw: TrafficWindows, policy: Policy, start: Startup,
                     signal: np.ndarray | None = None) -> Schedule:
    """Run ``policy`` over the minutes of ``tw``: scale-up after ``start.delay_s``, scale-down after the cool-off
    (at most ``scale_down_per_min`` a minute), never above the ceiling nor below the minimum.

    The queue policy reads ``signal`` (waiting requests per serving replica at each minute's start, e.g. from a
    replay of an earlier schedule); without it, the estimate: the fluid backlog (arrivals over the serving
    replicas' full capacity) plus Little's law on the planner's latency curve.
    """
    need = tw.minute_need
    n = need.size
    cap = tw.sizing_rps[tw.window_of_minute]
    full = tw.full_rps[tw.window_of_minute]
    lo = policy.minimum
    step = 60.0
    lead = int(math.ceil(start.delay_s / step))
    ceiling = max(int(need.max()), lo) if policy.max_replicas is None else int(policy.max_replicas)
    queue = policy.name == "queue"
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
    desired = desired.astype(np.int64)

    asked = np.zeros(n, dtype=np.int64)
    clipped = np.zeros(n, dtype=bool)
    provisioned = np.zeros(n, dtype=np.int64)
    ready = np.zeros(n, dtype=np.int64)
    backlog = np.zeros(n)
    seen_q = np.zeros(n) if queue else None
    first = desired[0] if policy.initial_replicas is None else max(int(policy.initial_replicas), lo)
    serving = int(min(first, ceiling))
    changes: list[tuple[float, int]] = [(0.0, serving)]   # (time, +joined / −drained)
    pending: list[list[float]] = []        # [ready_at_s, count] of replicas starting up
    lower_since: float | None = None
    queued = 0.0                           # the fluid backlog carried into the minute
    for m in range(n):
        t = m * step
        for p in [p for p in pending if p[0] <= t]:
            serving += int(p[1])
            changes.append((p[0], int(p[1])))
        pending = [p for p in pending if p[0] > t]
        total = serving + sum(int(c) for _, c in pending)
        want = int(desired[m])
        if queue:
            if m == 0:
                q = 0.0
            elif signal is not None:
                q = float(signal[m])
            else:
                q = queued / max(serving, 1) + _steady_waiting(tw, m - 1, float(tw.minute_rps[m - 1]), int(ready[m - 1]))
            seen_q[m] = q   # type: ignore[index]
            if m == 0:
                want = total
            elif q > policy.up:      # HPA: ceil(serving × metric / target), never below what is already asked
                want = max(int(math.ceil(max(serving, 1) * min(q, 1e6) / policy.up - 1e-9)), total)
            elif q < policy.down:
                want = int(math.ceil(serving * q / policy.up - 1e-9))
            else:                    # inside the band: hold
                want = total
            want = max(want, lo)
        clipped[m] = want > ceiling
        d = min(want, ceiling)
        asked[m] = d
        if d > total:
            pending.append([t + start.delay_s, d - total])
            lower_since = None
        elif d < total:
            lower_since = t if lower_since is None else lower_since
            if t - lower_since >= policy.cooloff:
                cut = total - d
                if policy.scale_down_per_min is not None:
                    cut = min(cut, int(policy.scale_down_per_min))
                left = total - cut
                while cut and pending:           # cancel replicas still starting first (newest first)
                    take = min(cut, int(pending[-1][1]))
                    pending[-1][1] -= take
                    cut -= take
                    if pending[-1][1] == 0:
                        pending.pop()
                if cut:
                    serving -= cut               # drain: in-flight requests finish, no new ones arrive
                    changes.append((t, -cut))
                if left <= d:                    # done; else drain on at the next minute (the scale-down rate)
                    lower_since = None
        else:
            lower_since = None
        provisioned[m] = serving + sum(int(c) for _, c in pending)
        ready[m] = serving
        backlog[m] = queued
        queued = max(queued + float(tw.minute_rps[m]) * step - serving * float(full[m]) * step, 0.0)
    for p in pending:                            # joins after the last minute still count for the replay
        changes.append((p[0], int(p[1])))
    changes.sort(key=lambda e: e[0])
    times = np.array([c[0] for c in changes])
    counts = np.cumsum([c[1] for c in changes])
    events = _clean_events(list(zip(times.tolist(), counts.astype(int).tolist())))
    return Schedule(policy, start, asked, provisioned, ready, events, clipped, backlog, seen_q,
                    ("simulated" if signal is not None else "estimated") if queue else "", ceiling)


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
    traffic: TrafficWindows | None = None   # the windows it was planned on (for the per-minute series)
    replay: pd.DataFrame | None = None      # simulated: every replayed request (``SimResult.requests``)

    @property
    def saving(self) -> float:
        """Share of the hold-at-peak GPU-hours this policy saves."""
        return 1.0 - self.gpu_hours / self.baseline_gpu_hours if self.baseline_gpu_hours > 0 else 0.0

    @property
    def missed(self) -> pd.DataFrame:
        """The windows where the policy missed the SLOs."""
        return self.windows[self.windows["missed"]]

    def minutes(self) -> dict[str, Any]:
        """The per-minute replica series (columns of equal length, one entry a minute from ``start``)."""
        sc = self.schedule
        tw = self.traffic
        out: dict[str, Any] = {
            "start": None if tw is None else tw.origin.isoformat(), "step_s": 60.0,
            "rate_rps": [] if tw is None else [float(x) for x in tw.minute_rps],
            "replicas_needed": [] if tw is None else [int(x) for x in tw.minute_need],
            "desired": [int(x) for x in sc.desired], "replicas": [int(x) for x in sc.provisioned],
            "serving": [int(x) for x in sc.ready], "clipped": [bool(x) for x in sc.clipped],
            "queue_estimated": [float(x) for x in sc.backlog],
        }
        if sc.signal is not None:
            out["queue_per_replica"] = [float(x) for x in sc.signal]
            out["queue_per_replica_source"] = sc.signal_source
        return out

    def to_dict(self) -> dict[str, Any]:
        """The stable JSON document (``plan --autoscale`` / ``simulate --autoscale``)."""
        w = self.windows
        rows = [{"start": s.isoformat(), "rate_rps": float(r), "peak_rps": float(pk), "replicas": int(k),
                 "replicas_needed": int(nd), "ttft_p90_ms": _num(tt), "tpot_p90_ms": _num(tp),
                 "attainment": _num(a), "missed": bool(ms), "reason": why or None,
                 "reason_text": REASONS.get(why) if why else None, "clipped": bool(cl)}
                for s, r, pk, k, nd, tt, tp, a, ms, why, cl in zip(
                    w["start"], w["rate_rps"], w["peak_rps"], w["replicas"], w["replicas_needed"], w["ttft_p90_ms"],
                    w["tpot_p90_ms"], w["attainment"], w["missed"], w["reason"], w["clipped"])]
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
            "ceiling": self.schedule.ceiling,
            "clipped_windows": [r["start"] for r in rows if r["clipped"]],
            "minutes": self.minutes(),
            "provenance": {"rate_rps": "measured", "peak_rps": "measured",
                           "replicas_needed": "estimated", "replicas": "estimated",
                           "minutes": "estimated (the policy's schedule; queue_per_replica as its source says)",
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


def autoscale(tw: TrafficWindows, policy: Policy | str = "slo", start: Startup | None = None,
              schedule: Schedule | None = None) -> AutoscaleResult:
    """A policy over the log, judged analytically: a minute misses when fewer replicas serve than it needs, or
    when the queue carried into it (arrivals beyond the serving replicas' full capacity) takes longer than the
    TTFT target to clear. ``schedule``: judge that schedule of the policy instead of planning one."""
    policy = Policy(policy) if isinstance(policy, str) else policy
    start = startup(tw.dep) if start is None else start
    sched = replica_schedule(tw, policy, start) if schedule is None else schedule
    need = tw.minute_need
    wom = tw.window_of_minute
    ttft_s = _window_ttft_ms(tw)[wom] / 1000.0
    drain_s = sched.backlog / np.maximum(np.maximum(sched.ready, 1) * tw.full_rps[wom], 1e-12)
    met = (sched.ready >= tw.minute_slo_need) & (drain_s <= ttft_s)
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
        a, b = tw.limits[k].latency(np.array([rate[k] * tw.scale / serving[k]]))
        ttft[k], tpot[k] = float(a[0]), float(b[0])
    win_need = np.zeros(n, dtype=np.int64)
    np.maximum.at(win_need, wom, need)
    win_prov = np.zeros(n, dtype=np.int64)
    np.maximum.at(win_prov, wom, sched.provisioned)
    attainment = np.where(total > 0, met_requests / np.maximum(total, 1e-12), np.nan)
    missed_min = np.bincount(wom, weights=~met & (counts > 0), minlength=n) > 0
    first_minute = np.searchsorted(wom, np.arange(n))
    carried = (drain_s > ttft_s)[np.minimum(first_minute, wom.size - 1)]
    reason = _reasons(tw, sched, n, carried)
    windows = pd.DataFrame({
        "start": tw.window_starts, "requests": total.astype(np.int64),
        "rate_rps": rate, "peak_rps": peak,
        "replicas": win_prov, "replicas_needed": win_need,
        "ttft_p90_ms": ttft, "tpot_p90_ms": tpot, "attainment": attainment, "missed": missed_min,
        "reason": np.where(missed_min, reason, ""),
        "clipped": np.bincount(wom, weights=sched.clipped, minlength=n) > 0,
    })
    gpu_hours, baseline, lower = _totals(tw, sched)
    notes = list(tw.notes)
    notes.append("attainment (estimated): share of the window's requests arriving in minutes with enough replicas "
                 "serving for both p90 SLOs at the window's rate and shape, and no queue carried in that takes longer "
                 "than the TTFT target to clear. It errs both ways: a minute short of replicas counts as wholly "
                 "missed (a replay serves many of its requests in time), and bursts inside a minute are not seen (a "
                 "replay misses them); simulate --autoscale replays the requests themselves")
    _explain_misses(windows, sched, notes)
    return AutoscaleResult(policy, start, "estimated", windows, gpu_hours, gpu_hours * tw.gpu_hour_usd, baseline,
                           lower, tw.gpu_hour_usd, tw.window_s, tw.shape_source, sched, notes, tw)


def _window_ttft_ms(tw: TrafficWindows) -> np.ndarray:
    return tw.window_ttft_ms if tw.window_ttft_ms is not None else np.full(tw.n_windows, tw.ttft_slo_ms)


REASONS = {
    "backlog": "backlog left by an earlier window: the queue carried in took longer than the TTFT target to clear",
    "ceiling": "the ceiling (max replicas) held the policy below the window's need",
    "starting": "start-up delay: replicas asked for were not yet serving",
    "late": "the policy asked for too few replicas (it reacts to the last minute's signal)",
    "shape": "the window's shape cannot meet the SLOs economically (prompts alone near the TTFT SLO)",
    "burst": "a burst inside the window (the replay sees it; the per-minute plan did not)",
}


def _reasons(tw: TrafficWindows, sched: Schedule, n: int, carried: np.ndarray) -> np.ndarray:
    """Why each window could miss, the first that holds: its shape; the ceiling; replicas asked for but still
    starting; a queue carried in from an earlier window (``carried``); a policy that asked too few; else a burst."""
    wom = tw.window_of_minute
    short = sched.ready < tw.minute_slo_need
    starting = short & (sched.provisioned > sched.ready)
    late = short & (sched.provisioned < tw.minute_slo_need)
    capped = short & sched.clipped
    shape = (tw.slo_rps < IDLE_FLOOR * tw.full_rps)
    any_start = np.bincount(wom, weights=starting, minlength=n) > 0
    any_late = np.bincount(wom, weights=late, minlength=n) > 0
    any_cap = np.bincount(wom, weights=capped, minlength=n) > 0
    return np.select([shape, any_cap, any_start, carried, any_late], ["shape", "ceiling", "starting", "backlog", "late"],
                     "burst")


def _explain_misses(windows: pd.DataFrame, sched: Schedule, notes: list[str]) -> None:
    clipped = int(windows["clipped"].sum())
    if clipped:
        notes.append(f"the ceiling of {sched.ceiling} replicas clipped the policy in {clipped} window(s)")
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
    Every request is judged by its product's class (``tw.classes``), else by the TTFT/TPOT pair. The queue policy
    reads its signal from the replay: the schedule is replanned from the replay's waiting requests per serving
    replica, minute by minute, and replayed again until the schedule the replay was run on is the one its own
    signal asks for (a minute's decision reads only what happened before it, so each round fixes at least one
    more minute; in practice a few rounds). After ``MAX_QUEUE_REPLAYS`` rounds it keeps the schedule it replayed
    and says from which minute on the schedule had not settled.
    """
    if whatif.traffic_multiplier != 1:
        raise ValueError("the replay keeps the log's own timeline: plan a traffic change analytically (plan --autoscale)")
    policy = Policy(policy) if isinstance(policy, str) else policy
    start = startup(tw.dep) if start is None else start
    sched = replica_schedule(tw, policy, start)
    rounds = 0
    unsettled: int | None = None
    while True:
        rounds += 1
        times = np.array([e[0] for e in sched.events]) - tw.offset_s
        counts = np.maximum(np.array([e[1] for e in sched.events], dtype=np.int64), 1)
        run = simulate(frame, tw.dep, arrivals="trace", replicas=int(counts.max()), whatif=whatif,
                       ttft_slo_ms=tw.ttft_slo_ms, tpot_slo_ms=tw.tpot_slo_ms,
                       replica_schedule=(times, counts), **sim)
        if policy.name != "queue":
            break
        replanned = replica_schedule(tw, policy, start, signal=_waiting_per_replica(run.requests, tw, sched))
        same = replanned.events == sched.events and np.array_equal(replanned.provisioned, sched.provisioned)
        if same:
            sched = replanned
            break
        if rounds >= MAX_QUEUE_REPLAYS:   # keep the schedule replayed; say from which minute it is not yet settled
            differ = np.flatnonzero((replanned.provisioned != sched.provisioned) | (replanned.desired != sched.desired))
            unsettled = int(differ[0]) if differ.size else 0
            break
        sched = replanned
    result = autoscale(tw, policy, start, schedule=sched)
    r = run.requests
    arrival = r["arrival_s"].to_numpy()
    win = np.floor((arrival + tw.offset_s) / tw.window_s).astype(np.int64)
    win = np.clip(win, 0, tw.n_windows - 1)
    ttft_target, tpot_target = _request_targets(r, tw)
    tpot_v = r["tpot_ms"].to_numpy()
    ok = (r["ttft_ms"].to_numpy() <= ttft_target) & (np.isnan(tpot_v) | (tpot_v <= tpot_target))
    g = pd.DataFrame({"w": win, "ok": ok, "ttft": r["ttft_ms"].to_numpy(), "tpot": tpot_v})
    agg = g.groupby("w").agg(att=("ok", "mean"), ttft=("ttft", lambda v: np.nanpercentile(v, 90)),
                             tpot=("tpot", lambda v: np.nanpercentile(v, 90) if np.isfinite(v).any() else np.nan))
    agg = agg.reindex(np.arange(tw.n_windows))
    windows = result.windows.copy()
    windows["ttft_p90_ms"] = agg["ttft"].to_numpy()
    windows["tpot_p90_ms"] = agg["tpot"].to_numpy()
    windows["attainment"] = agg["att"].to_numpy()
    windows["missed"] = windows["attainment"].fillna(1.0) < ATTAINMENT_TARGET
    carried = _carried_in(r, tw, sched)
    windows["reason"] = np.where(windows["missed"], _reasons(tw, sched, tw.n_windows, carried), "")
    # draining replicas are paid until their last request finishes
    tail_s = _drain_tail_s(r, times, counts)
    gpu_hours = result.gpu_hours + tail_s * tw.tp / 3600.0
    notes = [n for n in result.notes if not n.startswith(("attainment (estimated)", "missed ", "the ceiling"))]
    notes.append(f"simulated: {len(r):,} requests replayed on the policy's schedule; attainment = share meeting "
                 f"{'its product class' if tw.classes else 'both SLOs'}; a window misses below "
                 f"{ATTAINMENT_TARGET:.0%}; a miss is backlog when the requests still waiting for their first token "
                 "at the window's start take longer than its TTFT target to clear at the serving replicas' full rate")
    if policy.name == "queue" and unsettled is None:
        notes.append(f"queue policy: its signal (waiting requests per serving replica, each minute) read from the "
                     f"replay; {rounds} replay(s) until the schedule and the replay agreed")
    elif policy.name == "queue":
        notes.append(f"queue policy: its signal read from the replay; after {rounds} replays the schedule still moved "
                     f"from minute {unsettled} on, so from there it follows the signal of the replay before it (the "
                     "minutes before are exact)")
    _explain_misses(windows, sched, notes)
    notes.extend(run.notes)
    return AutoscaleResult(policy, start, "simulated", windows, gpu_hours, gpu_hours * tw.gpu_hour_usd,
                           result.baseline_gpu_hours, result.lower_bound_gpu_hours, tw.gpu_hour_usd, tw.window_s,
                           tw.shape_source, sched, notes, tw, r)


def _request_targets(r: pd.DataFrame, tw: TrafficWindows) -> tuple[np.ndarray, np.ndarray]:
    """Every replayed request's TTFT and TPOT p90 targets: its product's class, else the pair."""
    if not tw.classes or "product" not in r.columns:
        return np.full(len(r), tw.ttft_slo_ms), np.full(len(r), tw.tpot_slo_ms)
    products = r["product"].astype(str).to_numpy()
    return (class_targets_ms(products, tw.classes, tw.ttft_slo_ms, "ttft_ms"),   # type: ignore[return-value]
            class_targets_ms(products, tw.classes, tw.tpot_slo_ms, "tpot_ms"))


def _waiting_per_replica(r: pd.DataFrame, tw: TrafficWindows, sched: Schedule) -> np.ndarray:
    """The queue gauge at every minute's start in a replay: requests arrived and not yet scheduled, per serving
    replica (read just before the minute, so that it holds only what happened before the decision)."""
    arrival = np.sort(r["arrival_s"].to_numpy())
    started = np.sort(r["arrival_s"].to_numpy() + r["queue_ms"].to_numpy() / 1000.0)
    t = np.arange(tw.minute_rps.size) * 60.0 - tw.offset_s - 1e-6
    waiting = np.searchsorted(arrival, t, side="right") - np.searchsorted(started, t, side="right")
    return waiting / np.maximum(sched.ready, 1)


def _carried_in(r: pd.DataFrame, tw: TrafficWindows, sched: Schedule) -> np.ndarray:
    """Per window: did the replay carry a queue into it? The requests that arrived before its start and still
    wait for their first token then, over the serving replicas' full rate, take longer than its TTFT target.
    (A first token comes after its arrival, so those are the arrivals before the start less the first tokens by it.)"""
    arrival = r["arrival_s"].to_numpy()
    first = arrival + r["ttft_ms"].to_numpy() / 1000.0
    answered = np.isfinite(first)
    t0 = np.arange(tw.n_windows) * tw.window_s - tw.offset_s
    waiting = (np.searchsorted(np.sort(arrival[answered]), t0, side="left")
               - np.searchsorted(np.sort(first[answered]), t0, side="right"))
    minute0 = np.minimum(np.searchsorted(tw.window_of_minute, np.arange(tw.n_windows)), tw.window_of_minute.size - 1)
    rate = np.maximum(sched.ready[minute0], 1) * tw.full_rps[: tw.n_windows]
    out = (waiting > 0) & (waiting / np.maximum(rate, 1e-12) > _window_ttft_ms(tw) / 1000.0)
    out[0] = False   # nothing is carried into the first window
    return out


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
