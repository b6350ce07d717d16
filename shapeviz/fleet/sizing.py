"""One answer to "how many replicas": the smallest fleet whose simulated p90s meet every product's class.

The analytic plan (``serving.planner.plan``) is the starting point and bracket; the answer is then found by
replaying the log's own arrivals (``serving.simulator.simulate``: its products, the router and the replicas'
prefix caches, speculative decoding carried by the deployment, the what-if levers) on candidate fleets.

"Meets" means every product's p90 TTFT and TPOT, over the log's busiest window (an hour by default, the whole
log when it is shorter; the window of the most GPU-work, not of the most requests), within its own class. The
search is economical: one replay of the whole window at the estimate finds its hardest stretches (the five-minute
stretches where the simulated p90s stand furthest above their classes, each replayed after a lead-in minute so
the backlog it meets is there); the search for more replicas runs on those stretches only, then every candidate
is confirmed on the whole window, and the replay of one replica fewer on the whole window is kept as the proof
that the answer is not padded. ``size_fleet`` returns a ``Sizing``; ``analytic_sizing`` labels the estimate
alone (``--method analytic``, fixed shapes, sketches of logs too big to replay row by row).
"""
from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import pandas as pd

from shapeviz.analyses.prefix import has_hashes
from shapeviz.analyses.sessions import has_sessions
from shapeviz.fleet.routing import plan_with_router
from shapeviz.workload.requests import RequestTable
from shapeviz.physics.catalogue import get_gpu, get_model, hosted_stand_in
from shapeviz.physics.steps import (
    TP_CHOICES,
    Deployment,
    decode_step_s,
    max_tp_in_node,
    prefill_time_s,
    request_gpu_seconds,
    smallest_tp,
)
from shapeviz.plain import json_safe
from shapeviz.serving.planner import (
    FALLBACK_UTILIZATION,
    LATENCY_SIZED,
    MAX_REPLICAS,
    Percentiles,
    Plan,
    WhatIf,
    Workload,
    plan,
)
from shapeviz.serving.products import (  # beyond_context and refused_words are re-exported
    ALL_PRODUCTS,
    SloClass,
    beyond_context,
    class_of,
    context_refusals,
    product_labels,
    product_outcomes,
    products_meet,
    refused_words,
    resolve_classes,
    ttft_targets_ms,
)
from shapeviz.serving.routers import LABELS as ROUTER_LABELS
from shapeviz.serving.simulator import (
    DEFAULT_MAX_BATCHED_TOKENS,
    Requests,
    latency_stats,
    simulate,
)

METHODS = ("simulated", "analytic")
DEFAULT_MODEL = "llama-3.1-70b"  # when neither the user nor the log's model column names a catalogue model
DEFAULT_GPU = "h100-sxm"
DEFAULT_SLO_WINDOW_S = 3600.0    # "meets" is judged on the log's busiest hour (the whole log when shorter)
STRETCH_S = 300.0                # the hardest stretches are five-minute stretches of the window...
LEAD_S = 60.0                    # ...each replayed after the minute before it (its backlog), not counted
STRETCHES = 3                    # how many of them the search replays
MIN_STRETCH_REQUESTS = 20        # a stretch with fewer requests says nothing about a p90
POISSON_REQUESTS = 20_000        # a log without timestamps: at most this many of its requests, at the planned rate
GROWTH = 1.5                     # the upward search multiplies the replica count by this until the stretches meet


@dataclass(frozen=True)
class Trial:
    """One replay: ``replicas`` on the whole window or on the hardest stretches, and what each product got."""

    replicas: int
    on: str                          # "window" | "stretches"
    meets: bool
    products: dict[str, dict[str, Any]]
    ttft_ms: dict[str, float | None]
    tpot_ms: dict[str, float | None]
    worst: float                     # the largest p90 / target over products and both metrics
    cpu_s: float

    def verdict(self) -> dict[str, Any]:
        """The JSON of a trial: its p90s per product, overall, and whether every class is met (``meets``: every
        class a fleet size can meet; a product no size can serve is named as such)."""
        missing = [n for n, o in self.products.items() if not o.get("meets", True)]
        return json_safe({
            "replicas": self.replicas, "meets": self.meets,
            "verdict": ("meets every class" if not missing else
                        "meets every other class; no size serves: " + ", ".join(missing) if self.meets
                        else "misses: " + ", ".join(missing)),
            "ttft_ms": self.ttft_ms, "tpot_ms": self.tpot_ms,
            "products": {n: {k: o.get(k) for k in ("requests", "ttft_p90_ms", "tpot_p90_ms", "meets", "attainment")}
                         for n, o in self.products.items()},
        })


@dataclass
class Sizing:
    """The answer: ``replicas`` of the deployment, how it was found, and the proof one fewer misses."""

    method: str                          # "simulated" | "analytic"
    replicas: int | None
    meets: bool
    estimate: int | None                 # the analytic plan's replicas (the search's starting point)
    sized_on: dict[str, Any]             # the window and stretches replayed, in words and seconds
    answer: Trial | None = None          # the replay of the answer on the whole window
    one_fewer: Trial | None = None       # the replay of one replica fewer on the whole window
    trials: list[Trial] = field(default_factory=list)
    cpu_s: float = 0.0
    notes: list[str] = field(default_factory=list)
    # products whose class no replica count meets on this deployment (a request's own latency is above it);
    # the fleet is sized for the rest, and ``meets`` is then False
    unreachable: list[dict[str, Any]] = field(default_factory=list)

    @property
    def meets_others(self) -> bool:
        """Every class a fleet size can meet is met (all of them when none is unreachable)."""
        return self.meets or (bool(self.unreachable) and self.answer is not None and self.answer.meets)

    @property
    def label(self) -> str:
        """How the number was found, as a page or a memo says it."""
        return ("simulated: the log replayed on the fleet" if self.method == "simulated"
                else "estimate: analytic queue at the peak rate")

    def to_dict(self) -> dict[str, Any]:
        """The ``method``/``sized_on``/``one_fewer`` block of ``plan --json`` (and of every file that carries it)."""
        return json_safe({
            "method": self.method, "label": self.label, "replicas": self.replicas, "meets": self.meets,
            "estimate_replicas": self.estimate, "sized_on": self.sized_on,
            "answer": None if self.answer is None else self.answer.verdict(),
            "one_fewer": None if self.one_fewer is None else self.one_fewer.verdict(),
            "simulations": [{"replicas": t.replicas, "on": t.on, "meets": t.meets, "worst_ratio": t.worst,
                             "cpu_s": t.cpu_s} for t in self.trials],
            "cpu_s": self.cpu_s, "notes": list(self.notes),
            "unreachable": list(self.unreachable), "meets_others": self.meets_others,
        })


def _catalogue_counts(counts: pd.Series) -> tuple[dict[str, int], dict[str, str]]:
    """Requests per catalogue model id from ``counts`` (requests per model name), and the first name of each id
    (a name the catalogue does not know is skipped)."""
    known: dict[str, int] = {}
    names: dict[str, str] = {}
    for name, n in counts.items():
        try:
            model = get_model(str(name)).id
        except ValueError:
            stand_in = hosted_stand_in(str(name))
            if stand_in is None:
                continue
            model = stand_in.model_id   # a hosted API's model: planned on its stated stand-in
        known[model] = known.get(model, 0) + int(n)
        names.setdefault(model, str(name))
    return known, names


PLANNED_AS_IF = "planned as if served by"   # how a hosted model's stand-in is said, on the page and in summary


def model_mapping(name: str, model_id: str) -> str:
    """How a log's model name became the planned catalogue model, in words: the name as written (literal), and
    for a hosted-API model ``planned as if served by`` its stand-in with why."""
    stand_in = hosted_stand_in(name)
    planned = get_model(model_id).name
    if stand_in is not None:
        return (f"{PLANNED_AS_IF} {planned}: the log's model {name!r} is a hosted {stand_in.provider} API "
                f"model; {stand_in.why}")
    same = name.strip().lower() in (model_id.lower(), planned.lower())
    return f"{name!r}" if same else f"{name!r} → {planned}"


def other_models(names: list[str], planned_id: str) -> list[str]:
    """The log's model names that are not the planned catalogue model however they are written (an HF id or a
    quantised checkpoint of it is the same model; a hosted model is not its stand-in)."""
    def same(name: str) -> bool:
        try:
            return get_model(name).id == planned_id
        except ValueError:
            return False
    return [n for n in names if not same(n)]


def log_model(frame: Any) -> tuple[str | None, str]:
    """The catalogue model the log's ``model`` column names (the most requested one), and where it came from.

    Names are shown literally (they are the log's text); a name the catalogue does not know is skipped."""
    if frame is None:
        return None, "no log rows to read a model from"
    if "model" not in frame.columns:
        return None, "the log has no model column"
    counts = frame["model"].astype(str).value_counts()
    known, names = _catalogue_counts(counts)
    if not known:
        return None, f"the log's model column names no catalogue model ({', '.join(map(repr, counts.index[:3]))})"
    best = max(known, key=known.__getitem__)
    others = {p: m for p, m in log_models(frame).items() if m is not None and m != best}
    mapped = model_mapping(names[best], best)
    if hosted_stand_in(names[best]) is not None:
        return best, f"{mapped} ({known[best]:,} of {int(counts.sum()):,} requests)"
    return best, (f"the log's model column ({mapped}, {known[best]:,} of {int(counts.sum()):,} requests)"
                  + (f"; products on other models, planned here on {best} (plan each on its own model for its "
                     f"pool): {', '.join(f'{p} ({m})' for p, m in sorted(others.items()))}" if others else ""))


def model_of_log(frame: Any) -> tuple[str, str]:
    """The model to plan when nobody chose one: the log's (``log_model``), else ``DEFAULT_MODEL``; and its source.
    ``plan``, ``summary`` and the page's sidebar all choose it here."""
    found, why = log_model(frame)
    return (found, why) if found is not None else (DEFAULT_MODEL, f"shapeviz default ({why})")


def log_models(frame: pd.DataFrame) -> dict[str, str | None]:
    """Each product's catalogue model: the one its rows' ``model`` column names most (None: none it knows)."""
    if frame is None or "model" not in frame.columns or "product" not in frame.columns:
        return {}
    pairs = frame.groupby(["product", "model"], observed=True).size()
    out: dict[str, str | None] = {}
    for product in pairs.index.get_level_values(0).unique():
        known, _ = _catalogue_counts(pairs.loc[product])
        out[str(product)] = max(known, key=known.__getitem__) if known else None
    return out


def checkpoint_precision_source(precision: str) -> str:
    """Where a precision nobody chose comes from: the model's own checkpoint."""
    return f"the checkpoint's own precision ({str(precision).upper()}, what a team serves without quantising)"


def default_deployment_for(frame: pd.DataFrame | None, gpu: str = DEFAULT_GPU) -> tuple[Deployment, str, str]:
    """The deployment ``plan`` uses when none is given: the log's model (else the default model) at its
    checkpoint's precision on the smallest TP that holds it; ``(deployment, model source, precision source)``."""
    model_id, source = model_of_log(frame)
    model = get_model(model_id)
    precision = model.checkpoint_precision
    dep = Deployment(model, get_gpu(gpu), precision, None, smallest_tp(model, gpu, precision))
    return dep, source, checkpoint_precision_source(precision)


def analytic_sizing(replicas: int | None, meets: bool, why: str) -> Sizing:
    """The analytic estimate alone, labelled as such (``why``: the reason no replay was run)."""
    return Sizing("analytic", replicas, meets, replicas, {"window": why, "requests": None}, notes=[why])


def busiest_window(req: Requests, dep: Deployment, window_s: float) -> tuple[float, float]:
    """``(start_s, end_s)`` of the ``window_s`` of arrivals holding the most GPU-work (the whole span when shorter)."""
    t = np.asarray(req.arrival_s, dtype=np.float64)
    if t.size == 0 or t[-1] - t[0] <= window_s:
        return (float(t[0]) if t.size else 0.0), (float(t[-1]) if t.size else 0.0)
    pre, dec = request_gpu_seconds(dep, req.input_tokens, req.output_tokens, req.cached_tokens)
    work = np.concatenate([[0.0], np.cumsum(pre + dec)])
    ends = np.searchsorted(t, t + window_s, side="right")     # requests [i, ends[i]) arrive within the window
    best = int(np.argmax(work[ends] - work[: t.size]))
    return float(t[best]), float(t[best] + window_s)


BURST_S = 10.0             # the burst a fleet is sized for: the busiest ten seconds of arrivals
BURSTY = 3.0               # ...at this many times the window's mean rate or more, the answer says so
LOW_PRESSURE = 0.35        # an answer whose busier phase is under this pressure on average explains itself


def burstiness(arrival_s: np.ndarray) -> dict[str, float | None]:
    """The window's mean arrival rate, its busiest ``BURST_S`` seconds' rate, and their ratio."""
    if arrival_s.size < 2 or arrival_s[-1] <= arrival_s[0]:
        return {"mean_rps": None, "busiest_10s_rps": None, "burst_ratio": None}
    span = float(arrival_s[-1] - arrival_s[0])
    ends = np.searchsorted(arrival_s, arrival_s + BURST_S, side="left")
    busiest = float((ends - np.arange(arrival_s.size)).max()) / BURST_S
    mean = arrival_s.size / span
    return {"mean_rps": mean, "busiest_10s_rps": busiest, "burst_ratio": busiest / mean}


def pressure_reason(sizing: Sizing, prefill_pressure: float, decode_pressure: float) -> str | None:
    """Why a replayed answer runs its GPUs at low average pressure, with the levers (None when it does not). The
    pressures are the analytic estimate's, per replica of its ``sizing.estimate`` replicas; the answer's are those
    spread over ``sizing.replicas``. A bursty log's answer is sized for its bursts; another's, met, by its latency
    classes (one replica fewer misses one: the sizing's note names it)."""
    if sizing.method != "simulated" or not sizing.replicas:
        return None
    spread = (sizing.estimate or sizing.replicas) / sizing.replicas
    prefill_pressure, decode_pressure = prefill_pressure * spread, decode_pressure * spread
    if max(prefill_pressure, decode_pressure) >= LOW_PRESSURE:
        return None
    at = (f"the answer runs its GPUs at {prefill_pressure:.0%} prefill / {decode_pressure:.0%} decode pressure on "
          "average")
    ratio = sizing.sized_on.get("burst_ratio")
    if ratio is not None and ratio >= BURSTY:
        return (f"{at} because it is sized for the log's bursts: its busiest {BURST_S:g} s arrive at "
                f"{sizing.sized_on['busiest_10s_rps']:,.1f} req/s, {ratio:,.0f}× the window's mean of "
                f"{sizing.sized_on['mean_rps']:,.2f} req/s, and every request of a burst counts in the p90 (the same "
                "requests at a steady rate need far fewer replicas: benchmarks/README.md). Levers: a looser TTFT "
                "class for traffic that arrives in bursts, a queue that lets latency-tolerant requests wait, or FP8 "
                "weights (priced beside the plan)")
    if not sizing.meets_others:
        return None   # the search gave up: its last count is no answer to explain
    carry = max(1, math.ceil(max(prefill_pressure, decode_pressure) * sizing.replicas / FALLBACK_UTILIZATION))
    return (f"{at} because it is sized by the latency classes, not by throughput: about {carry} replica(s) would "
            f"carry this load below {FALLBACK_UTILIZATION:.0%} utilisation, and {_binding_words(sizing)}. Levers: "
            "more GPUs per replica (TP), a prefix cache with a session-affine router, trimmed prompts, a looser "
            "class, or a pool of its own for the longest prompts")


NEAR_FLOOR = 0.9   # a TTFT class under 1/0.9 of a product's floor leaves its requests little time to queue


def _binding_words(sizing: Sizing) -> str:
    """What one replica fewer than the answer misses, by product; with, for a TTFT class close above the product's
    floor (its prefill alone), how little it leaves for queueing: the reason a latency-sized fleet is large."""
    fewer = sizing.one_fewer
    missed = misses_words(fewer) if fewer is not None else ""
    if not missed:
        return "one replica fewer than the answer misses a class"
    words = f"{fewer.replicas} replica(s) miss {missed}"
    floors = sizing.sized_on.get("ttft_floor_ms") or {}
    for name, o in sorted(fewer.products.items()):
        slo = o.get("slo") or {}
        floor, target = floors.get(name), slo.get("ttft_ms")
        if o.get("meets", True) or floor is None or not target or floor < NEAR_FLOOR * target:
            continue
        q = slo.get("percentile", 90)
        words += (f"; {name}'s p{q} prefill alone on an idle replica takes {ms_words(floor)} of its "
                  f"{ms_words(target)} TTFT class, so only a fleet that almost never queues its prompts meets it")
    return words


class _Search:
    """The replays of one sizing: cached per (replicas, window or stretches)."""

    def __init__(self, req: Requests, dep: Deployment, classes: Mapping[str, SloClass], sim: dict[str, Any],
                 rate_rps: float | None, pause: Callable[[], None] | None = None) -> None:
        self.req, self.dep, self.classes, self.sim, self.rate = req, dep, classes, sim, rate_rps
        self.pause = pause
        self.cache: dict[tuple[int, str], Trial] = {}
        self.stretch_req: Requests | None = None
        self.stretch_count: np.ndarray | None = None   # which replayed requests are counted (not the lead-ins)
        self.frames: dict[tuple[int, str], pd.DataFrame] = {}
        product = req.product.astype(str) if req.product is not None else np.full(len(req), "all")
        self.window_n = {str(p): int((product == p).sum()) for p in np.unique(product)}
        self.window_decoding = {str(p): int(((product == p) & (req.output_tokens > 1)).sum()) for p in np.unique(product)}

    def run(self, k: int, on: str = "window") -> Trial:
        key = (k, on)
        if key not in self.cache:
            if self.pause is not None:
                self.pause()
            req = self.req if on == "window" else self.stretch_req
            started = time.process_time()
            kwargs = dict(self.sim)
            if req.arrival_s is None:
                kwargs.update(arrivals="poisson", rate_rps=self.rate)
            result = simulate(req, self.dep, replicas=int(k), **kwargs)
            frame = result.requests
            if on == "stretches":
                frame = frame.loc[self.stretch_count]
                meets, worst = self._stretch_verdict(frame)
                outcomes = product_outcomes(frame, self.classes)
                self.cache[key] = Trial(int(k), on, meets, outcomes, _p5090(frame["ttft_ms"]),
                                        _p5090(frame["tpot_ms"]), float(worst), time.process_time() - started)
            else:
                self.cache[key] = window_trial(int(k), frame, self.classes, time.process_time() - started)
            if on == "window":
                self.frames[key] = result.requests
        return self.cache[key]

    def judge(self, classes: Mapping[str, SloClass]) -> None:
        """Judge on ``classes`` from now on: the window replays kept are judged again (no replay), the stretches
        are picked again."""
        self.classes = classes
        for key in list(self.cache):
            if key[1] == "window":
                self.cache[key] = window_trial(key[0], self.frames[key], classes, self.cache[key].cpu_s)
            else:
                del self.cache[key]

    def _over(self, frame: pd.DataFrame, name: str, cls: SloClass) -> tuple[int, int]:
        """Requests of ``name`` in ``frame`` over its TTFT and over its TPOT target."""
        product = frame["product"].astype(str).to_numpy() if "product" in frame.columns else np.full(len(frame), "all")
        mine = product == name
        tpot = frame["tpot_ms"].to_numpy()[mine]
        return (int((frame["ttft_ms"].to_numpy()[mine] > cls.ttft_ms).sum()),
                int((tpot[~np.isnan(tpot)] > cls.tpot_ms).sum()))

    def _stretch_verdict(self, frame: pd.DataFrame) -> tuple[bool, float]:
        """Would the window's p90s meet? The requests over a target in the stretches' replay, scaled to the window
        by how the last whole-window replay split its requests over that target between the stretches and the
        rest, against the tenth of the window's requests a p90 allows (the window replay confirms it)."""
        worst = 0.0
        for name, cls in self.classes.items():
            if not self.window_n.get(name):
                continue
            allowed = 1.0 - cls.percentile / 100.0
            for over, (inside, rest), n in zip(self._over(frame, name, cls), self.split[name],
                                               (self.window_n[name], self.window_decoding[name])):
                estimate = over * (inside + rest) / inside if inside else over + rest
                worst = max(worst, estimate / max(allowed * n, 1e-9))
        return worst <= 1.0, worst

    def pick_stretches(self, k: int) -> bool:
        """Choose the hardest stretches from the whole-window replay at ``k``; False when the window is too short."""
        arrival = np.asarray(self.req.arrival_s, dtype=np.float64) if self.req.arrival_s is not None else None
        if arrival is None or arrival[-1] - arrival[0] < STRETCH_S * (STRETCHES + 1):
            return False
        frame = self.frames[(k, "window")]
        stretch = ((arrival - arrival[0]) // STRETCH_S).astype(np.int64)
        product = frame["product"].astype(str).to_numpy() if "product" in frame.columns else np.full(len(frame), "all")
        badness: dict[int, float] = {}
        for s in np.unique(stretch):
            here = stretch == s
            if here.sum() < MIN_STRETCH_REQUESTS:
                continue
            ratios = [0.0]
            for name in np.unique(product[here]):
                cls = self.classes.get(str(name))
                if cls is None:
                    continue
                mask = here & (product == name)
                ttft = frame["ttft_ms"].to_numpy()[mask]
                tpot = frame["tpot_ms"].to_numpy()[mask]
                tpot = tpot[~np.isnan(tpot)]
                ratios.append(float(np.percentile(ttft, cls.percentile)) / cls.ttft_ms)
                if tpot.size:
                    ratios.append(float(np.percentile(tpot, cls.percentile)) / cls.tpot_ms)
            badness[int(s)] = max(ratios)
        hardest = sorted(badness, key=lambda s: -badness[s])[:STRETCHES]
        if len(hardest) < STRETCHES:
            return False
        picked, arrivals, counted, offset = [], [], [], 0.0
        for s in sorted(hardest):
            lo = arrival[0] + s * STRETCH_S
            idx = np.flatnonzero((arrival >= lo - LEAD_S) & (arrival < lo + STRETCH_S))
            picked.append(idx)
            # stretches follow each other after an idle hour, so one replays with none of another's backlog
            arrivals.append(arrival[idx] - (lo - LEAD_S) + offset)
            counted.append(arrival[idx] >= lo)
            offset += LEAD_S + STRETCH_S + 3600.0
        self.stretch_req = replace(self.req.take(np.concatenate(picked)), arrival_s=np.concatenate(arrivals))
        self.stretch_count = np.concatenate(counted)
        inside_frame = frame.iloc[np.concatenate([i[c] for i, c in zip(picked, counted)])]
        self.split = {}
        for name, cls in self.classes.items():
            if self.window_n.get(name):
                total, inside = self._over(frame, name, cls), self._over(inside_frame, name, cls)
                self.split[name] = [(i, t - i) for i, t in zip(inside, total)]
        for key in [key for key in self.cache if key[1] == "stretches"]:
            del self.cache[key]
        self.stretch_span = [(float(arrival[0] + s * STRETCH_S), float(arrival[0] + (s + 1) * STRETCH_S))
                             for s in sorted(hardest)]
        return True


def window_trial(replicas: int, requests: pd.DataFrame, classes: Mapping[str, SloClass], cpu_s: float = 0.0) -> Trial:
    """The verdict on one whole-window replay (``requests``: the simulator's per-request frame): every product's
    class percentile of TTFT and TPOT against its class. The headline's and the fleet designer's "meets"."""
    outcomes = product_outcomes(requests, classes)
    return Trial(int(replicas), "window", products_meet(outcomes), outcomes, _p5090(requests["ttft_ms"]),
                 _p5090(requests["tpot_ms"]), float(_worst(outcomes)), cpu_s)


def _worst(outcomes: Mapping[str, Mapping[str, Any]]) -> float:
    """The largest p90 / target over products and both metrics (above 1: a class is missed)."""
    ratios = [0.0]
    for o in outcomes.values():
        if "slo" in o:
            ratios.append((o.get("ttft_p90_ms") or 0.0) / o["slo"]["ttft_ms"])
            ratios.append((o.get("tpot_p90_ms") or 0.0) / o["slo"]["tpot_ms"])
    return max(ratios)


def _p5090(values: pd.Series) -> dict[str, float | None]:
    stats = latency_stats(values.to_numpy(dtype=np.float64))
    return {"p50": stats["p50"], "p90": stats["p90"]}


def prefill_alone_s(dep: Deployment, input_tokens: np.ndarray, cached_tokens: np.ndarray,
                    budget: int = DEFAULT_MAX_BATCHED_TOKENS) -> np.ndarray:
    """A prompt's prefill alone on an idle replica as the replay runs it: in chunks of the engine's token budget
    per step (``budget``), each chunk a step over the prefix before it (one pass over the whole prompt skips the
    steps' fixed costs and weight reads: 4% under the replay at the p90 of a 24k-token prompt on TP16)."""
    n = np.asarray(input_tokens, dtype=np.float64)
    done = np.minimum(np.asarray(cached_tokens, dtype=np.float64), n)
    total = np.zeros_like(n)
    while (left := n > done).any():
        end = np.minimum(done[left] + budget, n[left])
        total[left] += prefill_time_s(dep, end, done[left])
        done[left] = end
    return total


def ttft_floors_ms(req: Requests, dep: Deployment, classes: Mapping[str, SloClass]) -> dict[str, float]:
    """Each product's TTFT floor: the class percentile of its prompts' prefill alone on an idle replica (ms), with
    the cached tokens the log reports (``prefill_alone_s``). No fleet size serves a product whose floor is above
    its TTFT class; one whose floor is close under it is met only by a fleet that almost never queues it."""
    product = product_labels(req)
    prefill_ms = prefill_alone_s(dep, np.asarray(req.input_tokens, dtype=np.float64),
                                 np.asarray(req.cached_tokens, dtype=np.float64)) * 1000.0
    out = {}
    for name in sorted(set(product.tolist())):
        cls = class_of(classes, name)
        if cls is not None:
            out[name] = float(np.percentile(prefill_ms[product == name], cls.percentile))
    return out


def unreachable_classes(req: Requests, dep: Deployment, classes: Mapping[str, SloClass],
                        floors: Mapping[str, float] | None = None) -> list[dict[str, Any]]:
    """Products whose class no number of replicas meets on ``dep``: more of its requests than its class
    percentile allows are beyond the model's context window (``beyond_context``, ``cause`` "context": no TP
    helps either), or the class percentile of a request's own latency, alone on an idle replica (its prefill for
    TTFT, a decode step at batch one for TPOT), is above the target (``cause`` "alone"). More replicas shorten
    queues, never one prompt's prefill."""
    product = product_labels(req)
    n_in = np.asarray(req.input_tokens, dtype=np.float64)
    n_out = np.asarray(req.output_tokens, dtype=np.float64)
    # the cached tokens the log reports: a request without prompt blocks keeps them in the replay
    # (``Requests.cached_before_lookup``), one with blocks finds its prefix in a replica's warm cache
    floors = ttft_floors_ms(req, dep, classes) if floors is None else floors
    refused = {u["product"]: u for u in context_refusals(req, dep, classes)}
    out = []
    for name in sorted(set(product.tolist())):
        cls = class_of(classes, name)
        if cls is None:
            continue
        mine = product == name
        q = cls.percentile
        prompt = float(np.percentile(n_in[mine], q))
        if name in refused:
            out.append(refused[name])
            continue
        alone = floors[name]
        if alone > cls.ttft_ms:
            out.append({"product": name, "metric": "ttft", "percentile": q, "target_ms": cls.ttft_ms,
                        "cause": "alone",
                        "alone_ms": alone, "input_tokens": prompt,
                        "why": (f"its p{q} prefill alone takes {alone:,.0f} ms (p{q} prompt {prompt:,.0f} tokens, "
                                f"in steps of {DEFAULT_MAX_BATCHED_TOKENS:,} tokens) on "
                                f"{dep.describe()}, above its TTFT class of {cls.ttft_ms:,.0f} ms: more replicas "
                                "shorten the queue, never one prompt's prefill"),
                        "levers": _tp_lever(dep) + "trimmed or cached prompts, or a looser TTFT class"})
            continue
        decoding = mine & (n_out > 1)
        if decoding.any():
            alone = float(np.percentile(decode_step_s(dep, 1.0, n_in[decoding] + n_out[decoding] / 2.0) * 1000.0, q))
            if alone > cls.tpot_ms:
                out.append({"product": name, "metric": "tpot", "percentile": q, "target_ms": cls.tpot_ms,
                            "cause": "alone",
                            "alone_ms": alone, "input_tokens": prompt,
                            "why": (f"its p{q} decode step alone (batch one) takes {alone:,.1f} ms on "
                                    f"{dep.describe()}, above its TPOT class of {cls.tpot_ms:,.0f} ms"),
                            "levers": _tp_lever(dep) + "lower-precision weights, or a looser TPOT class"})
    return out


def _tp_lever(dep: Deployment) -> str:
    """More GPUs per replica as a lever while a replica twice as wide still fits one node."""
    node = dep.gpu.gpus_per_node
    if dep.tp * 2 > TP_CHOICES[-1]:
        return f"a faster GPU (TP{dep.tp} is the widest replica), "
    if dep.tp * 2 > node:
        return f"a faster GPU (TP{dep.tp} {'fills' if dep.tp == node else 'is past'} a node of {node}), "
    return "more GPUs per replica (TP), "


FITS_WORDS = "smallest TP that fits the weights with room for KV"


def auto_tp(frame: pd.DataFrame | None, fits: Deployment, build: Callable[[int], Deployment],
            classes: Mapping[str, SloClass] | None, *, whatif: WhatIf = WhatIf(),
            slo_window_s: float = DEFAULT_SLO_WINDOW_S) -> tuple[Deployment, str, list[dict[str, Any]]]:
    """"auto" GPUs per replica: the smallest TP, from ``fits`` (the smallest that holds the weights with room for
    KV) up to one node of its GPU (``GPU.gpus_per_node``: a TP over the network between nodes is not what engines
    deploy), whose requests on the window the answer is judged on reach every product's class
    (``unreachable_classes``: a request alone on a replica within its class); ``build(tp)`` makes the deployment
    of a TP (ValueError: that TP is not a layout of this model). ``(deployment, where its TP came from, the
    products left out)``: when no TP within a node reaches every class, ``fits`` and the products it leaves out,
    and why (the words name each with its figure on the node's largest TP). Without the log's rows or classes (a
    sketch, a fixed shape): ``fits``."""
    if frame is None or classes is None or len(frame) == 0:
        return fits, FITS_WORDS + _spanning(fits), []
    table = RequestTable.build(frame, whatif)   # one table for every TP tried, as a sizing builds one
    quick = table.requests(blocks=False)
    first: list[dict[str, Any]] | None = None
    widest: tuple[Deployment, list[dict[str, Any]]] | None = None
    for tp in in_node_tps(fits):
        try:
            dep = fits if tp == fits.tp else build(tp)
        except ValueError:
            continue
        # the window the headline judges on, as slo_window picks it, with the prompt blocks its replay looks up
        if quick.arrival_s is not None:
            lo, hi = busiest_window(quick, dep, slo_window_s / whatif.traffic_multiplier)
            rows = np.flatnonzero((table.arrival_s >= lo) & (table.arrival_s <= hi))
            req = table.requests(None if rows.size == len(table) else rows)
        else:
            req = table.requests(np.arange(min(len(table), POISSON_REQUESTS)))
        found = unreachable_classes(req, dep, classes)
        widest = (dep, found)
        # a product beyond the model's context window is out of reach on every TP: the TP is chosen for the others
        left = [u for u in found if u.get("cause") != "context"]
        beyond = sorted({u["product"] for u in found if u.get("cause") == "context"})
        if first is None:
            first = found
        if not left:
            also = ("" if not beyond else f"; {', '.join(beyond)} no TP serves ({dep.model.name}'s context window "
                    "is shorter than its prompts)")
            if tp == fits.tp:
                return dep, FITS_WORDS + also + _spanning(dep), found
            slow = sorted({u["product"] for u in first if u.get("cause") != "context"})
            return dep, (f"the smallest TP that reaches every product's class{' it can' if beyond else ''}: "
                         f"TP{fits.tp} (the {FITS_WORDS}) leaves " + ", ".join(slow) + " out of its class (one "
                         "request alone is over it)" + also), found
    names = ", ".join(sorted({u["product"] for u in first or []}))
    if fits.nodes > 1:   # the weights need more than a node: nothing within one was tried
        return fits, f"{FITS_WORDS}; {fits.node_note}", first or []
    top, why = widest if widest is not None else (fits, [])
    out = "; ".join(f"{u['product']} ({_out_of_reach(u, top.tp)})" for u in why)
    return fits, (f"{FITS_WORDS}; no TP within one node of {fits.gpu.gpus_per_node} {fits.gpu.name} (up to "
                  f"TP{top.tp}) reaches every product's class, so the fleet leaves out {names}"
                  + (f": {out}" if out else "")), first or []


def in_node_tps(fits: Deployment) -> list[int]:
    """The TPs "auto" tries: from ``fits``'s up to one node of its GPU (``GPU.gpus_per_node``); only ``fits``'s when
    the weights alone need more than a node."""
    return [t for t in TP_CHOICES if fits.tp <= t <= max(max_tp_in_node(fits.gpu), fits.tp)]


def _spanning(dep: Deployment) -> str:
    return f"; {dep.node_note}" if dep.node_note else ""


def _out_of_reach(u: dict[str, Any], tp: int) -> str:
    """One unreachable product's reason on TP ``tp`` in a few words (``unreachable_classes``'s entry)."""
    if u.get("cause") == "context":
        return f"{u['refused_share']:.0%} of its prompts beyond the model's context window"
    what = "prefill" if u["metric"] == "ttft" else "decode step"
    return (f"p{u['percentile']:g} {what} alone {u['alone_ms']:,.0f} ms against its {u['metric'].upper()} class of "
            f"{u['target_ms']:,.0f} ms on TP{tp}")


def slo_window(frame: pd.DataFrame, dep: Deployment, *, whatif: WhatIf = WhatIf(),
               slo_window_s: float = DEFAULT_SLO_WINDOW_S, rate_rps: float | None = None,
               block_size: int | None = None) -> tuple[Requests, dict[str, Any]]:
    """The requests "meets" is judged on, and ``sized_on`` (the window in words and seconds): the ``slo_window_s``
    of ``frame`` holding the most GPU-work on ``dep`` (the whole log when shorter), arrivals from its start; a log
    without timestamps: its first ``POISSON_REQUESTS`` requests, to be replayed at ``rate_rps`` (Poisson).
    ``size_fleet`` and the fleet designer both judge on it. The log's request table is built once
    (``workload.requests.RequestTable``: tokens, products, prompt blocks as pointers) and the window sliced from it."""
    if not (math.isfinite(slo_window_s) and slo_window_s > 0):
        raise ValueError(f"--slo-window must be a positive number of seconds, got {slo_window_s!r}")
    table = RequestTable.build(frame, whatif, block_size=block_size)
    # the window is chosen on the requests without their prompt blocks; only its rows' blocks are sliced
    quick = table.requests(blocks=False)
    if quick.arrival_s is not None:
        # the window is an hour of the log's own clock: with the traffic lever it is replayed compressed
        lo, hi = busiest_window(quick, dep, slo_window_s / whatif.traffic_multiplier)
        t = table.arrival_s
        rows = np.flatnonzero((t >= lo) & (t <= hi))
        whole = bool(rows.size == len(table))
        req = table.requests(None if whole else rows)
        span_s = (hi - lo) * whatif.traffic_multiplier
        sized_on = {"window": (f"the whole log ({span_s / 60:,.0f} min of arrivals)" if whole else
                               f"the log's busiest {slo_window_s / 3600:g} h (the most GPU-work), "
                               f"minutes {lo * whatif.traffic_multiplier / 60:,.0f}–{hi * whatif.traffic_multiplier / 60:,.0f}"
                               " from its first request"),
                    "start_s": lo * whatif.traffic_multiplier, "end_s": hi * whatif.traffic_multiplier,
                    "slo_window_s": slo_window_s, "whole_log": whole, "requests": len(req),
                    "arrivals": "the log's own timestamps" + (f" compressed {whatif.traffic_multiplier:g}×"
                                                             if whatif.traffic_multiplier != 1 else ""),
                    **burstiness(np.asarray(req.arrival_s))}
    else:
        if rate_rps is None or not rate_rps > 0:
            raise ValueError("a log without timestamps is replayed at a rate: give --rate R")
        req = table.requests(np.arange(min(len(table), POISSON_REQUESTS)))
        sized_on = {"window": f"the log's first {len(req):,} requests at {rate_rps:,.3g} req/s (Poisson: the log "
                              "has no timestamps)", "requests": len(req), "slo_window_s": slo_window_s,
                    "arrivals": "poisson"}
    return req, sized_on


def size_fleet(frame: pd.DataFrame, dep: Deployment, classes: Mapping[str, SloClass], *, estimate: int | None,
               whatif: WhatIf = WhatIf(), slo_window_s: float = DEFAULT_SLO_WINDOW_S, rate_rps: float | None = None,
               router: str = "round_robin", block_size: int | None = None, scheduler: str = "fcfs",
               default_ttft_ms: float = 1000.0, default_tpot_ms: float = 50.0,
               max_num_seqs: int | None = None,
               grow: Callable[[Requests, float], tuple[Requests, dict[str, Any]]] | None = None,
               pause: Callable[[], None] | None = None) -> Sizing:
    """The smallest replica count of ``dep`` whose replay of ``frame``'s busiest window meets every class.

    ``estimate``: the analytic plan's replicas (the first replay; None starts at one). ``rate_rps``: the rate
    a log without timestamps is replayed at (Poisson). ``router``/``block_size``/``scheduler``: as ``simulate``.
    ``grow(window requests, window span s) -> (requests, words)``: the window's traffic as it will be (a month
    of growth, ``fleet.growth``), sized instead of the window itself; ``words`` join ``sized_on``.
    ``pause()``: called before each replay (a caller's chance to let other work in; it may block a while).
    """
    started = time.process_time()
    notes: list[str] = []
    req, sized_on = slo_window(frame, dep, whatif=whatif, slo_window_s=slo_window_s, rate_rps=rate_rps,
                               block_size=block_size)
    if grow is not None:
        if req.arrival_s is None:
            raise ValueError("growth is replayed on the log's own arrivals: the log needs timestamps")
        req, words = grow(req, float(sized_on["end_s"] - sized_on["start_s"]) / whatif.traffic_multiplier)
        sized_on.update(words, requests=len(req), **burstiness(np.asarray(req.arrival_s)))
    req = replace(req, ttft_target_ms=ttft_targets_ms(req.product, classes, default_ttft_ms))
    sim = {"router": router, "block_size": block_size, "scheduler": scheduler,
           "ttft_slo_ms": default_ttft_ms, "tpot_slo_ms": default_tpot_ms, "max_num_seqs": max_num_seqs}
    # a product no size can serve is named, and the fleet is sized for the others (its requests still load it)
    floors = ttft_floors_ms(req, dep, classes)
    unreachable = unreachable_classes(req, dep, classes, floors)
    sized_on["ttft_floor_ms"] = floors
    out_of_reach = {u["product"] for u in unreachable}
    judged = {name: cls for name, cls in classes.items() if name not in out_of_reach}
    for u in unreachable:
        notes.append(f"no fleet size meets {u['product']}'s class: {u['why']}; sized for the other products "
                     f"({u['levers']})")
    if unreachable and not (set(_names(req)) - out_of_reach):   # nothing left to size: no replay is run
        return Sizing("analytic", estimate, False, estimate, sized_on, notes=notes, unreachable=unreachable,
                      cpu_s=time.process_time() - started)
    refused = beyond_context(req, dep)
    if refused.any():   # refused by the engine at once: they load no replica
        notes.append(refused_words(req, dep, refused))
        req = req.take(np.flatnonzero(~refused))
        sized_on.update(refused=int(refused.sum()), requests=len(req))
    s = _Search(req, dep, judged, sim, rate_rps, pause)
    k0 = max(int(estimate or 1), 1)
    while (found := _upward(s, k0)) is None:
        # no count met: the products whose replayed p90 more replicas no longer lower are named, as those no size
        # serves, and the search runs again for the others (their requests still load the fleet)
        flat = _flat_products(s)
        if not flat or not set(s.classes) - {u["product"] for u in flat}:
            return _infeasible(s, estimate, sized_on, notes, started, classes, unreachable)
        for u in flat:
            notes.append(f"no fleet size meets {u['product']}'s class: {u['why']}; sized for the other products "
                         f"({u['levers']})")
        unreachable = [*unreachable, *flat]
        s.judge({name: cls for name, cls in s.classes.items() if name not in {u["product"] for u in flat}})
    lo_miss, hi_meet = found
    # the stretches may overshoot (they are judged pessimistically): bisect on the whole window down to the
    # largest count it has seen miss, so one replica fewer is a whole-window replay that misses (the proof)
    lo_miss = max([lo_miss] + [t.replicas for (k, on), t in s.cache.items()
                               if on == "window" and not t.meets and k < hi_meet])
    while hi_meet - lo_miss > 1:
        mid = (lo_miss + hi_meet) // 2
        if s.run(mid).meets:
            hi_meet = mid
        else:
            lo_miss = mid
    answer = _judged_on_all(s, s.run(hi_meet), classes)
    one_fewer = s.run(hi_meet - 1) if hi_meet > 1 else None
    if one_fewer is None:
        notes.append("one replica meets every class: there is no smaller fleet to replay")
    sized_on["stretches"] = [
        {"start_s": a * whatif.traffic_multiplier, "end_s": b * whatif.traffic_multiplier}
        for a, b in getattr(s, "stretch_span", [])]
    if sized_on["stretches"]:
        sized_on["search"] = (f"searched on the {STRETCHES} hardest {STRETCH_S / 60:g}-minute stretches of the "
                              "window (where the replay's p90s stood furthest above their classes; a fleet is "
                              "ruled out there when those stretches alone hold more requests over a target than "
                              "the window's p90 allows), every candidate confirmed on the whole window")
    return Sizing("simulated", hi_meet, not unreachable, estimate, sized_on, answer, one_fewer,
                  list(s.cache.values()), time.process_time() - started, notes, unreachable)


def _upward(s: _Search, k0: int) -> tuple[int, int] | None:
    """From the estimate ``k0``, a count that meets on the whole window and the largest seen to miss below it
    (the stretches searched first, every candidate confirmed on the window); None when more replicas stop
    helping before any count meets."""
    hi_meet = k0 if s.run(k0).meets else None
    lo_miss = 0 if hi_meet is not None else k0
    on = "stretches" if s.pick_stretches(k0) else "window"
    while True:
        # the smallest count the stretches do not prove short (a stretch miss is a window miss), then the window
        if hi_meet is not None and hi_meet - lo_miss <= 2:
            break   # one count left between a miss and a meet: the window decides it below
        candidate = _smallest(s, on, lo_miss, hi_meet, k0)
        if candidate is None:
            return None
        if hi_meet is not None and candidate >= hi_meet - 1:
            break
        if s.run(candidate).meets:
            hi_meet = candidate
            break
        # the stretches passed a count the whole window misses: they do not stand for this window (on a log whose
        # hour is evenly loaded, re-picked stretches kept passing one count more, one window replay per replica)
        lo_miss, on = candidate, "window"
    return lo_miss, hi_meet


FLAT = 0.98   # a product's p90 over its target that falls by less than this share as replicas grow by GROWTH: flat


def _flat_products(s: _Search) -> list[dict[str, Any]]:
    """The products whose class the replays show no fleet size meets: at the largest count replayed on the whole
    window and at that count over ``GROWTH`` (replayed when it was not), their p90 stays above the class and
    falls by less than 2%. Each as ``unreachable_classes`` says one, ``cause`` "measured", with what the replays
    gave and, when the replicas' caches kept less of its prompts than the log reports, how much less."""
    top = max(k for k, _ in s.cache)
    below = max(1, int(round(top / GROWTH)))
    if below >= top:
        return []
    hi, lo = s.run(top), s.run(below)
    out = []
    for name, cls in s.classes.items():
        a, b = lo.products.get(name, {}), hi.products.get(name, {})
        q = cls.percentile
        for metric, target in (("ttft", cls.ttft_ms), ("tpot", cls.tpot_ms)):
            was, now = a.get(f"{metric}_p{q}_ms"), b.get(f"{metric}_p{q}_ms")
            if was is None or now is None or now <= target or now < FLAT * was:
                continue
            why = (f"its {metric.upper()} p{q} stays at {now:,.0f} ms on {top} replicas ({was:,.0f} ms on {below}), "
                   f"above its class of {target:,.0f} ms: more replicas no longer lower it (measured by replaying "
                   "the window)")
            cache = _cache_kept(s, top, name)
            out.append({"product": name, "metric": metric, "percentile": q, "target_ms": target, "alone_ms": None,
                        "input_tokens": None, "cause": "measured",
                        "why": why + ("" if cache is None else "; " + cache[0]),
                        "levers": (cache[1] if cache else "more GPUs per replica (TP), trimmed or cached prompts, a "
                                   "looser class, or a pool of its own")})
            break
    return out


def _cache_kept(s: _Search, k: int, name: str) -> tuple[str, str] | None:
    """Why the replay at ``k`` served ``name`` less of its prompts from cache than the log reports (under two
    thirds of it), and the lever, in words; None when it did not (or the log reports nothing, or has no blocks)."""
    frame = s.frames.get((k, "window"))
    blocks = s.req.blocks
    if frame is None or blocks is None or "product" not in frame.columns:
        return None
    mine = frame["product"].astype(str).to_numpy() == name
    prompt = float(frame["input_tokens"].to_numpy()[mine].sum())
    said = float(np.asarray(s.req.cached_tokens)[mine].sum()) / prompt if prompt else 0.0
    kept = float(frame["cached_tokens"].to_numpy()[mine].sum()) / prompt if prompt else 0.0
    if not said or kept >= said * 2.0 / 3.0:
        return None
    return (f"the replicas' caches serve {kept:.0%} of its prompt tokens where the log reports {said:.0%} cached: "
            f"routing {s.sim['router'].replace('_', '-')} sends its turns away from the replica holding their "
            "prefix", "a router that keeps its reuse (--router session, or prefix on block hashes)")


def _names(req: Requests) -> list[str]:
    return sorted(set(req.product.astype(str).tolist())) if req.product is not None else [ALL_PRODUCTS]


def _judged_on_all(s: _Search, trial: Trial, classes: Mapping[str, SloClass]) -> Trial:
    """``trial`` (a whole-window replay) with every product judged against its class, those no size can serve
    included (they miss; ``meets`` stays the verdict on the others)."""
    frame = s.frames.get((trial.replicas, "window"))
    if frame is None or len(classes) == len(s.classes):
        return trial
    return replace(trial, products=product_outcomes(frame, classes))


def _smallest(s: _Search, on: str, lo_miss: int, hi_meet: int | None, k0: int) -> int | None:
    """The smallest count in (lo_miss, hi_meet] that meets ``on`` (growth then bisection); None: none helps."""
    lo, hi = lo_miss, hi_meet
    last: Trial | None = None
    while hi is None:
        k = min(max(int(math.ceil(max(lo, 1) * GROWTH)), lo + 1), MAX_REPLICAS)
        trial = s.run(k, on)
        if trial.meets:
            hi = k
        elif k >= MAX_REPLICAS or (last is not None and k > 2 * k0 + 8 and trial.worst > 0.98 * last.worst):
            return None
        else:
            lo, last = k, trial
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if s.run(mid, on).meets:
            hi = mid
        else:
            lo = mid
    return hi


def _infeasible(s: _Search, estimate: int | None, sized_on: dict[str, Any], notes: list[str],
                started: float, classes: Mapping[str, SloClass], unreachable: list[dict[str, Any]]) -> Sizing:
    trial = max(s.cache.values(), key=lambda t: t.replicas)
    answer = s.run(trial.replicas)
    missing = [n for n, o in answer.products.items() if not o.get("meets", True)]
    notes.append(f"no fleet size meets {', '.join(missing) or 'every class'}: {trial.replicas} replicas still miss "
                 f"(worst p90 {answer.worst:.2f}× its target) and more replicas barely help, so those requests' "
                 "own latency (with the batch they share) is above their class: raise TP, trim prompts or loosen "
                 "the class")
    return Sizing("simulated", trial.replicas, False, estimate, sized_on, _judged_on_all(s, answer, classes), None,
                  list(s.cache.values()), time.process_time() - started, notes, unreachable)


def pair_classes(frame: pd.DataFrame, ttft_ms: float, tpot_ms: float,
                 overrides: Mapping[str, tuple[float, float]] | None = None,
                 pair_source: str = "the default class (--ttft-slo-ms/--tpot-slo-ms)") -> dict[str, SloClass]:
    """Every product's class: its own ``overrides`` entry, else the TTFT/TPOT pair (the default class)."""
    return with_pair(resolve_classes(frame, overrides), ttft_ms, tpot_ms, overrides, pair_source)


def with_pair(corners: Mapping[str, SloClass], ttft_ms: float, tpot_ms: float,
              overrides: Mapping[str, tuple[float, float]] | None = None,
              pair_source: str = "the default class (--ttft-slo-ms/--tpot-slo-ms)",
              own_source: str = "set by user (--slo)") -> dict[str, SloClass]:
    """``corners`` (each product's class from its corner) with the pair in place of every product that has no
    ``overrides`` entry of its own (``"*"`` in ``overrides`` is every product's)."""
    overrides = dict(overrides or {})
    out = {}
    for product, cls in corners.items():
        own = overrides.get(product, overrides.get(ALL_PRODUCTS))
        ttft, tpot, source = (ttft_ms, tpot_ms, pair_source) if own is None else (*own, own_source)
        out[product] = SloClass(product, float(ttft), float(tpot), cls.percentile, cls.corner, source)
    return out


def sized_plan(planned: Plan, sizing: Sizing, tp: int) -> Plan:
    """The analytic ``planned`` with the simulated answer in place of its colocated fleet: replicas, GPUs, cost
    (linear in GPUs), TTFT/TPOT (the answer's replay), the verdict, and each phase's pressure per replica scaled
    to the answer's replicas. An analytic sizing leaves the plan as it is."""
    if sizing.method != "simulated" or sizing.replicas is None or sizing.answer is None:
        return replace(planned, notes=[*planned.notes, sizing_note(sizing)])
    k, k0 = int(sizing.replicas), planned.replicas or int(sizing.replicas)
    factor = k / k0
    cost = dict(planned.cost)
    for key in ("colocated_usd_per_hour", "colocated_usd_per_million_output_tokens", "colocated_usd_per_million_tokens"):
        cost[key] = None if cost.get(key) is None else cost[key] * factor
    cost["usd_per_hour"] = cost["colocated_usd_per_hour"]
    cost["usd_per_million_output_tokens"] = cost["colocated_usd_per_million_output_tokens"]
    cost["usd_per_million_tokens"] = cost["colocated_usd_per_million_tokens"]
    # the colocated fleet is the replay's answer; the prefill/decode split beside it stays the analytic estimate.
    # The estimate's "sized by the SLO, not by throughput" counts the estimate's replicas ("the other 3 keep ..."
    # beside an answer of 1): the answer's own reason is pressure_reason's
    estimated = [n for n in planned.notes if not n.startswith(LATENCY_SIZED)]
    provenance = {**planned.provenance, "ttft_ms": "simulated", "tpot_ms": "simulated", "gpus": "simulated",
                  "cost": "simulated", "gpus.disaggregated": "estimated"}
    return replace(
        planned, replicas=k, gpus={**planned.gpus, "colocated": k * tp}, cost=cost, meets_slo=sizing.meets,
        ttft_ms=Percentiles(**sizing.answer.ttft_ms), tpot_ms=Percentiles(**sizing.answer.tpot_ms),
        prefill=replace(planned.prefill, utilization=planned.prefill.utilization / factor),
        decode=replace(planned.decode, utilization=planned.decode.utilization / factor),
        provenance=provenance, notes=[*estimated, sizing_note(sizing), *filter(None, [pressure_reason(
            sizing, planned.prefill.utilization, planned.decode.utilization)])])


def sizing_note(sizing: Sizing) -> str:
    """One sentence: how the fleet was sized, on what, and the proof that one replica fewer misses."""
    if sizing.answer is None and sizing.unreachable:
        return (f"fleet size: no size serves any product on this deployment ({unreachable_words(sizing)}); the "
                f"analytic estimate's {sizing.estimate} replica(s) are shown, not replayed")
    if sizing.method != "simulated":
        return f"fleet size: {sizing.label} ({sizing.sized_on.get('window')}); not replayed"
    fewer = sizing.one_fewer
    proof = ("" if fewer is None else
             f"; {fewer.replicas} replica(s) miss ({fewer.verdict()['verdict']}: TTFT p90 "
             f"{_fmt(fewer.ttft_ms['p90'])}, TPOT p90 {_fmt(fewer.tpot_ms['p90'])})")
    if sizing.meets:
        head = f"fleet size simulated: {sizing.replicas} replica(s) meet every product's p90 class on "
    elif sizing.meets_others:
        head = (f"fleet size simulated: {sizing.replicas} replica(s) meet every other product's p90 class "
                f"({unreachable_words(sizing)}) on ")
    else:
        head = f"fleet size simulated: no size meets every class up to {sizing.replicas} on "
    return (head + f"{sizing.sized_on.get('window')} (analytic estimate {sizing.estimate}){proof}; "
            f"{len(sizing.trials)} replays, {sizing.cpu_s:.1f} s CPU")


def misses_words(trial: Trial) -> str:
    """The products a replay misses, each with the p90 that is over its class ("" when it misses none): "1 replica
    misses (TTFT p90 846 ms, TPOT p90 40 ms)" read as a contradiction where both fleet-wide p90s were inside."""
    parts = []
    for name, o in sorted(trial.products.items()):
        if o.get("meets", True):
            continue
        slo = o.get("slo") or {}
        q = slo.get("percentile", 90)
        over = [f"{metric.upper()} p{q} {_over_words(value, target)} against {ms_words(target)}"
                for metric, value, target in (("ttft", o.get(f"ttft_p{q}_ms"), slo.get("ttft_ms")),
                                              ("tpot", o.get(f"tpot_p{q}_ms"), slo.get("tpot_ms")))
                if value is not None and target is not None and value > target]
        parts.append(f"{name} ({', '.join(over) or 'its class'})")
    return "; ".join(parts)


def _over_words(ms: float, target: float) -> str:
    """A latency over its target in words that read as over it: 1,000.4 ms, not "1,000 ms against 1,000 ms"."""
    words = ms_words(ms)
    return f"{float(ms):,.1f} ms" if words == ms_words(target) else words


def ms_words(ms: float | None) -> str:
    """A latency in words: whole ms from 100 ms, else three figures (22.4 ms, not "22" beside a class of 22)."""
    if ms is None or not math.isfinite(float(ms)):
        return "n/a"
    return f"{float(ms):,.0f} ms" if float(ms) >= 100 else f"{float(ms):.3g} ms"


def answer_heading(sizing: Sizing | None) -> str:
    """The headline's heading: what the fleet under it meets, as the answer says it (an estimate, every product's
    class, every one but those no size serves, or not every one). A heading never claims what the line under it
    takes back."""
    if sizing is None or sizing.method != "simulated":
        if sizing is not None and sizing.unreachable:
            return "GPUs and cost: no fleet size serves " + ", ".join(sorted(u["product"] for u in sizing.unreachable))
        return "GPUs and cost that meet every product's SLO (estimate)"
    left = sorted(u["product"] for u in sizing.unreachable)
    if sizing.meets:
        return "GPUs and cost that meet every product's SLO"
    if left and sizing.meets_others:
        return ("GPUs and cost that meet every product's SLO but " + ", ".join(left)
                + (" (no fleet size serves them)" if len(left) > 1 else " (no fleet size serves it)"))
    return "GPUs and cost: no fleet size meets every product's SLO"


def unreachable_words(sizing: Sizing) -> str:
    """The products no fleet size serves on the deployment, and why, in one clause ("" when there are none)."""
    return "; ".join(f"no size serves {u['product']}: {u['why']}" for u in sizing.unreachable)


def _fmt(ms: float | None) -> str:
    return "n/a" if ms is None else f"{ms:,.0f} ms"


def fleet_answer(workload: Workload, dep: Deployment, frame: pd.DataFrame | None, *, whatif: WhatIf = WhatIf(),
                 ttft_slo_ms: float = 1000.0, tpot_slo_ms: float = 50.0,
                 classes: Mapping[str, SloClass] | None = None, gpu_hour_usd: float | None = None,
                 method: str = "simulated", slo_window_s: float = DEFAULT_SLO_WINDOW_S,
                 router: str | None = None, block_size: int | None = None,
                 pause: Callable[[], None] | None = None) -> tuple[Plan, Sizing, Plan, dict[str, Any] | None]:
    """The one sizing function behind every fleet size: ``(plan with the answer, sizing, analytic plan, routed)``.

    The analytic plan (with the reuse ``router`` keeps, when given) is the estimate and the search's start; with
    ``method="simulated"`` and the log's rows (``frame``) the answer is the smallest fleet whose replay meets
    every class (``classes``: None gives every product the TTFT/TPOT pair). ``routed``: the router's block.
    ``pause``: ``size_fleet``'s, called before each replay.
    """
    if method not in METHODS:
        raise ValueError(f"--method must be one of {', '.join(METHODS)}, got {method!r}")
    routed = None
    if router:
        estimate, routed = plan_with_router(workload, frame, dep, router, whatif, ttft_slo_ms, tpot_slo_ms,
                                            gpu_hour_usd, block_size=block_size)
    else:
        estimate = plan(workload, dep, whatif, ttft_slo_ms, tpot_slo_ms, gpu_hour_usd)
    if method == "analytic":
        sizing = analytic_sizing(estimate.replicas, estimate.meets_slo,
                                 "analytic estimate (--method analytic): a queue at the peak-minute rate")
    elif frame is None:
        sizing = analytic_sizing(estimate.replicas, estimate.meets_slo,
                                 "analytic estimate: no rows to replay (a fixed --isl/--osl shape, or a log read as "
                                 "a sketch with --engine dask)")
    else:
        if classes is None:
            classes = pair_classes(frame, ttft_slo_ms, tpot_slo_ms)
        if not (math.isfinite(slo_window_s) and slo_window_s > 0):
            raise ValueError(f"--slo-window must be a positive duration, got {slo_window_s!r}")
        try:
            sizing = size_fleet(frame, dep, classes, estimate=estimate.replicas, whatif=whatif,
                                slo_window_s=slo_window_s, rate_rps=workload.rate_rps * whatif.traffic_multiplier,
                                router=router or "round_robin", block_size=block_size,
                                default_ttft_ms=ttft_slo_ms, default_tpot_ms=tpot_slo_ms, pause=pause)
        except ValueError as exc:   # the log cannot be replayed on this deployment (a request beyond the KV pool)
            sizing = analytic_sizing(estimate.replicas, estimate.meets_slo,
                                     f"analytic estimate: the log cannot be replayed on this deployment ({exc})")
    return sized_plan(estimate, sizing, dep.tp), sizing, estimate, routed


LEVER_ROUTER_WORDS = {"prefix": "a prefix-aware router (SGLang's cache_aware rule)",
                      "session": "a session-affine router (a consistent hash on the session id)"}


def lever_router(frame: pd.DataFrame | None) -> str | None:
    """The router that keeps a log's prefix reuse: prefix-aware on block hashes, session affinity on sessions (None
    without either: no router changes what is cached)."""
    if frame is None:
        return None
    return "prefix" if has_hashes(frame) else "session" if has_sessions(frame) else None


def _routable(sizing: Sizing) -> bool:
    """A replayed answer of more than one replica: a router has something to choose between."""
    return sizing.method == "simulated" and (sizing.replicas or 0) >= 2


def router_lever(sizing: Sizing, frame: pd.DataFrame | None, tp: int,
                 size: Callable[[str], Sizing]) -> dict[str, Any] | None:
    """A cache-aware router as a lever beside an answer sized routing round-robin (the sizing's default): ``size(router)
    -> Sizing`` is the same sizing (``fleet_answer`` with the same window and classes) with the router that keeps the
    log's reuse (``lever_router``); a lever, not the plan, as FP8 is. None when there is nothing to weigh: no
    simulated answer, one replica, or no hashes or sessions in the log (nothing is replayed then)."""
    router = lever_router(frame)
    if router is None or not _routable(sizing):
        return None
    return lever_of(sizing, size(router), router, tp)


def lever_of(sizing: Sizing, routed: Sizing, router: str, tp: int) -> dict[str, Any] | None:
    """The router lever's block (``plan --json``'s ``router_lever``; the page's line): ``routed``, the sizing with
    ``router``, beside ``sizing``, the answer routing round-robin (None unless both were replayed, or when the answer
    is one replica: there is nothing to route)."""
    if not _routable(sizing) or routed.method != "simulated" or not routed.replicas:
        return None
    return json_safe({
        "router": router, "router_label": ROUTER_LABELS[router],
        "label": "simulated: a lever, not the plan (the plan routes round-robin)",
        "replicas": routed.replicas, "gpus": routed.replicas * tp,
        "gpus_saved": (sizing.replicas - routed.replicas) * tp,
        "meets": routed.meets, "meets_others": routed.meets_others,
        "one_fewer": None if routed.one_fewer is None else routed.one_fewer.verdict(), "cpu_s": routed.cpu_s})


def router_lever_line(lever: dict[str, Any], tp: int) -> str:
    """The lever in one sentence (plain text: the page escapes it), as ``plan`` prints it and the page shows it."""
    fleet = f"{lever['replicas']} × TP{tp} = {lever['gpus']} GPUs"
    router = LEVER_ROUTER_WORDS[lever["router"]]
    if not (lever["meets"] or lever["meets_others"]):   # its search stopped short too: no fleet to compare
        return (f"Lever (simulated, not the plan): {router}, which sends each request to the replica holding its "
                f"cached prefix, does not meet every class either: {fleet} still miss, and more "
                "replicas stopped helping there")
    every = "every" if lever["meets"] else "every other"
    saved = lever["gpus_saved"]
    what = (f"{saved} fewer than routing round-robin, as the answer above does" if saved > 0
            else "no fewer than routing round-robin" if saved == 0 else f"{-saved} more than routing round-robin")
    return (f"Lever (simulated, not the plan): {router}, which sends each request to the replica holding its cached "
            f"prefix, meets {every} product's class on {fleet}, {what}")


COMPARE_SIZED = 3   # the comparison's cheapest estimates that are sized by replaying the log (besides the current)


def size_comparison(table: pd.DataFrame, model: str, size: Any, *, current: Deployment | None = None,
                    keep: int = COMPARE_SIZED) -> pd.DataFrame:
    """``serving.compare.compare_deployments``' table with its ``keep`` cheapest estimates that meet (and the row
    of ``current``, the page's deployment) sized the way the headline is: ``size(dep) -> Sizing`` (the one
    sizing function, ``fleet_answer``). Those rows say ``method`` "simulated" with the replayed GPUs, p90s, cost
    (the estimate's, scaled by GPUs), ``estimate_gpus``, ``meets_others`` and ``no_size_serves`` (the products
    no size serves on that deployment, ``unreachable_classes``), ``yours`` (the row of ``current``); the others
    stay estimates (replaying every configuration would take a replay search each)."""
    out = table.copy()
    if out.empty:
        return out
    out["estimate_gpus"] = out["gpus"]
    out["one_fewer_meets"] = None
    out["meets_others"] = out["meets_slo"]
    out["no_size_serves"] = ""
    out["yours"] = False
    order = out[out["meets_slo"].astype(bool)].sort_values("usd_per_million_tokens").index[:keep].tolist()
    mine = None
    if current is not None:
        same = out.index[(out["gpu_id"] == current.gpu.id) & (out["precision"] == current.precision)
                         & (out["tp"] == current.tp) & (out["ep"] == current.ep)
                         & (out["attention_dp"] == current.attention_dp)].tolist()
        mine = same[0] if same else None
        if mine is not None:
            out.loc[mine, "yours"] = True
        order = ([mine] if mine is not None else []) + [i for i in order if i != mine]
    for i in order:
        row = out.loc[i]
        # the page's own row is sized on the page's own deployment: the headline's answer, not a second one
        dep = current if i == mine else Deployment(model, row["gpu_id"], row["precision"], tp=int(row["tp"]),
                                                   ep=int(row["ep"]), attention_dp=bool(row["attention_dp"]),
                                                   engine=None if current is None else current.engine)
        sizing: Sizing = size(dep)
        if sizing.method != "simulated" or sizing.replicas is None or sizing.answer is None:
            continue
        gpus = int(sizing.replicas) * int(row["tp"])
        factor = gpus / float(row["gpus"]) if row["gpus"] else float("nan")
        out.loc[i, "method"] = "simulated"
        out.loc[i, "gpus"] = gpus
        out.loc[i, "meets_slo"] = bool(sizing.meets)
        out.loc[i, "ttft_p90_ms"] = sizing.answer.ttft_ms["p90"]
        out.loc[i, "tpot_p90_ms"] = sizing.answer.tpot_ms["p90"]
        for key in ("usd_per_hour", "usd_per_million_tokens"):
            if row[key] is not None and not pd.isna(row[key]):
                out.loc[i, key] = float(row[key]) * factor
        out.loc[i, "one_fewer_meets"] = None if sizing.one_fewer is None else bool(sizing.one_fewer.meets)
        out.loc[i, "meets_others"] = bool(sizing.meets_others)
        out.loc[i, "no_size_serves"] = ", ".join(u["product"] for u in sizing.unreachable)
    return out
