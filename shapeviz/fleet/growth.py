"""The fleet for next quarter: traffic (and output length) growing month by month, per product.

A monthly growth rate per product (+8%/month for chat, +20%/month for the agent) and a monthly growth of the
output length (a reasoning product's answers getting longer) give each month's traffic. With the simulated method
(``plan --growth``, the page, the memo) every month is sized by the one sizing engine (``fleet.sizing``), on the
window the headline is judged on (the log's busiest hour) grown per product: a product growing by f = k + r keeps
its requests and gains k - 1 whole copies of them plus a seeded share r of another copy's sessions. A new user
behaves like today's users: a session is copied whole (its turns shifted in time together by the copy's seeded
offset, wrapping to the window's start as a unit, so its turns keep their order and their reuse of each other),
its private prompt blocks become the copy's own (no reuse invented between new users and today's) while blocks
several of today's sessions share (the product's system prompt, its tool schemas) stay shared by every copy, and
each request keeps the cached tokens the log reported; output lengths are scaled by the month's output growth. A
month no fleet size meets is labelled unreachable (the product, its class, why), never priced. Month 0 is the headline's answer; each later month's search starts from the month
before. The analytic method plans each month at the log's peak minute grown alike (the estimate, labelled).
One pool per call: a fleet of pools projects each pool with the products it serves.
"""
from __future__ import annotations

import math
import zlib
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import pandas as pd

from shapeviz.fleet.sizing import DEFAULT_SLO_WINDOW_S, Sizing, fleet_answer, ms_words, pair_classes, size_fleet
from shapeviz.physics.steps import DEFAULT_TPOT_SLO_MS, Deployment
from shapeviz.plain import json_safe
from shapeviz.progress import Progress, silent
from shapeviz.serving.planner import DEFAULT_TTFT_SLO_MS, WhatIf, Workload, plan
from shapeviz.serving.prefix_cache import PrefixBlocks
from shapeviz.serving.products import SloClass, class_of
from shapeviz.serving.simulator import Requests
from shapeviz.workload.sketch import WorkloadSketch

HOURS_PER_MONTH = 730.0          # 8,760 h / 12: a month of GPU rental
MAX_REPLAYED_FACTOR = 20.0       # a month is replayed up to 20× today's requests (or output length): bounded work
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
                                 # estimate_replicas, method, headroom_replicas (+ one_fewer, ttft/tpot p90 when
                                 # simulated)
    replicas_now: int
    runs_out_month: int | None   # first month needing more replicas than today's (None: not within the horizon)
    growth: Growth
    deployment: str
    notes: list[str] = field(default_factory=list)
    method: str = "analytic"     # "simulated": every month sized by the one engine; "analytic": the estimate
    sizings: list[Sizing] = field(default_factory=list)   # month by month, when simulated

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON (``plan --growth``)."""
        simulated = self.method == "simulated"
        return json_safe({
            "deployment": self.deployment,
            "method": self.method,
            "replicas_now": self.replicas_now,
            "runs_out_month": self.runs_out_month,
            "growth": {"requests": self.growth.requests, "output_length": self.growth.output,
                       "months": self.growth.months, "source": "set by user (monthly fractions)"},
            "months": self.months.to_dict(orient="records"),
            "provenance": {"rate_rps": "estimated: the log's p99 minute grown per product",
                           "replicas": "simulated" if simulated else "estimated",
                           "gpus": "simulated" if simulated else "estimated",
                           "usd_per_month": "simulated GPUs at the estimate's price" if simulated else "estimated",
                           "hours_per_month": HOURS_PER_MONTH},
            "sized_on": [s.sized_on for s in self.sizings],
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


GROWN_BY = ("today's window grown per product: each product keeps its requests and gains whole copies of them plus "
            "a seeded share of another copy's sessions; a session is copied whole, its turns shifted in time "
            "together by the copy's seeded offset (new users behave like today's, independently of them), with "
            "private prompt blocks of its own (no reuse invented with today's requests), the blocks today's "
            "sessions share (a shared system prompt) still shared, and the cached tokens the log reported kept")


def grow_window(req: Requests, span_s: float, factors: Mapping[str, float],
                output_scale: Mapping[str, float] | None = None, seed: int = 0) -> Requests:
    """``req`` (a window of arrivals from 0 to ``span_s``) with each product's traffic × ``factors[product]`` and
    its output lengths × ``output_scale[product]`` (products not named: × 1).

    A factor f = k + r keeps the product's requests, adds k - 1 whole copies and a seeded share r of the sessions
    of one more (f < 1 keeps a seeded share f of them). The unit copied is a session (a request without one is a
    unit of its own): copy c of a unit is shifted by the copy's seeded offset, and a unit whose shifted start
    passes the window's end wraps to its start whole, so a session's turns keep their gaps and order (its last
    turns may end after the window). The offsets and the order units are drawn in are the same in every month, so
    more growth never removes a request. Copies keep each request's reported cached tokens; their private prompt
    blocks and session keys are their own, the blocks several of today's units share stay shared (``_own_blocks``).
    """
    if req.arrival_s is None:
        raise ValueError("growing a window needs its arrival times")
    t = np.asarray(req.arrival_s, dtype=np.float64)
    span = max(float(span_s), float(t.max()) if t.size else 0.0, 1e-9)
    product = req.product.astype(str) if req.product is not None else np.full(len(req), "all")
    unit = _units(req)
    picked, copy, arrival = [], [], []
    for name in sorted(set(product.tolist())):
        idx = np.flatnonzero(product == name)
        f = float(factors.get(name, 1.0))
        if not (math.isfinite(f) and f >= 0):
            raise ValueError(f"the traffic factor of {name!r} must be ≥ 0, got {f!r}")
        whole = int(math.floor(f + 1e-9))
        share = max(f - whole, 0.0)
        units, at = np.unique(unit[idx], return_inverse=True)
        first = np.full(units.size, np.inf)
        np.minimum.at(first, at, t[idx])   # each unit's first arrival: the unit wraps as one
        sizes = np.bincount(at, minlength=units.size)
        for c in range(max(whole, 1) + (1 if share > 1e-9 and whole >= 1 else 0)):
            rng = np.random.default_rng([seed, zlib.crc32(name.encode("utf-8")), c])
            offset = 0.0 if c == 0 else float(rng.uniform(0.0, span))
            order = rng.permutation(units.size)
            partial = (c == whole) if whole >= 1 else True
            taken = np.ones(units.size, dtype=bool)
            if partial:   # a seeded share of the units, whole: the first of a fixed order (a superset as r grows)
                taken[:] = False
                taken[order[:_units_for(sizes[order], share * idx.size)]] = True
            mine = taken[at]
            chosen = idx[mine]
            shift = offset - span * np.floor((first + offset) / span)   # per unit: wrapped as one
            picked.append(chosen)
            copy.append(np.full(chosen.size, c, dtype=np.int64))
            arrival.append(t[chosen] + shift[at[mine]] if c else t[chosen])
    positions, copies, arrivals = np.concatenate(picked), np.concatenate(copy), np.concatenate(arrival)
    grown = req.take(positions)
    out = grown.output_tokens
    scale = np.array([float((output_scale or {}).get(p, 1.0)) for p in product[positions]]) if output_scale else None
    if scale is not None and np.any(scale != 1.0):
        out = np.maximum(np.round(out * scale), 1).astype(out.dtype)
    grown = replace(grown, arrival_s=arrivals, output_tokens=out,
                    blocks=None if grown.blocks is None else _own_blocks(grown.blocks, copies, unit[positions]))
    return grown.take(np.argsort(arrivals, kind="stable"))


def _units_for(sizes: np.ndarray, requests: float) -> int:
    """How many of the units (``sizes``: requests each, in the order they are drawn) come closest to ``requests``:
    a share is a share of the requests, whole sessions at a time (an agent's long session is not one user)."""
    cum = np.cumsum(sizes)
    k = int(np.searchsorted(cum, requests, side="right"))   # units whose running total stays within
    if k < cum.size and cum[k] - requests < requests - (cum[k - 1] if k else 0):
        k += 1
    return k


def _units(req: Requests) -> np.ndarray:
    """What growth copies as one: each request's session (its key ≥ 0), else the request alone (a negative label)."""
    alone = -1 - np.arange(len(req), dtype=np.int64)
    if req.blocks is None:
        return alone
    key = np.asarray(req.blocks.key, dtype=np.int64)
    return np.where(key >= 0, key, alone)


def _own_blocks(blocks: PrefixBlocks, copies: np.ndarray, units: np.ndarray) -> PrefixBlocks:
    """``blocks`` with each copy's private block ids and session keys in a range of their own (no copy: unchanged).

    A block that more than one of today's units (``units``: each request's session or itself) holds is shared
    (the product's system prompt, its tool schemas): it keeps one id in every copy, as a new user's request
    carries the same shared prompt. A block only one unit holds is that session's own: each copy gets its own id.
    """
    if not copies.any():
        return blocks
    key = np.asarray(blocks.key, dtype=np.int64)
    stride = int(key.max()) + 1 if key.size else 1
    key = np.where(key >= 0, key + copies * stride, key)
    if blocks.source == "sessions":   # a copy's sessions are new sessions: their streams keep the session form
        return blocks.rekeyed(key)
    look_n, keep_n = np.diff(blocks.look_ptr), np.diff(blocks.keep_ptr)
    ids = np.concatenate([blocks.look_ids, blocks.keep_ids])
    unique, dense = np.unique(ids, return_inverse=True)
    dense = dense.reshape(-1)
    owner = np.concatenate([np.repeat(copies, look_n), np.repeat(copies, keep_n)])
    holder = np.concatenate([np.repeat(units, look_n), np.repeat(units, keep_n)])
    # how many distinct units of today hold each block (copies of one unit count once: they hold it as that unit)
    _, holder_dense = np.unique(holder, return_inverse=True)
    pairs = np.unique(holder_dense.reshape(-1).astype(np.int64) * unique.size + dense)
    shared = np.bincount(pairs % unique.size, minlength=unique.size) > 1
    # ids renumbered densely, each copy's private ones in a range of their own: equal ids stay equal within a
    # copy, shared ones in every copy
    moved = np.where(shared[dense], dense, owner * unique.size + dense)
    return replace(blocks, look_ids=moved[:blocks.look_ids.size], keep_ids=moved[blocks.look_ids.size:], key=key)


def project(source: pd.DataFrame | Any, dep: Deployment, growth: Growth, *, peak_rps: float | None = None,
            whatif: WhatIf = WhatIf(), ttft_slo_ms: float = DEFAULT_TTFT_SLO_MS,
            tpot_slo_ms: float = DEFAULT_TPOT_SLO_MS, gpu_hour_usd: float | None = None,
            replicas_now: int | None = None, method: str = "analytic", today: Sizing | None = None,
            classes: Mapping[str, SloClass] | None = None, slo_window_s: float = DEFAULT_SLO_WINDOW_S,
            router: str | None = None, block_size: int | None = None, seed: int = 0,
            progress: Progress = silent) -> GrowthResult:
    """Size every month of the horizon at the grown traffic and output length; when today's replicas run out.

    ``method="simulated"`` (a frame with timestamps): month 0 is ``today`` (the headline's ``Sizing`` from
    ``fleet.sizing.fleet_answer``; sized here when not given) and every later month is ``size_fleet`` on the
    headline's window grown per product (``grow_window``), with the same ``classes``, SLO window, router, block
    size and what-ifs, its search starting from the month before. ``method="analytic"`` (or a sketch, or a log
    without timestamps): each month is the analytic plan at ``peak_rps`` (default: the log's p99 minute) grown per
    product, labelled "estimate". ``replicas_now``: the pool today (default: month 0).
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
    sizings: list[Sizing] = []
    if method == "simulated":
        why = _why_not_replayed(source)
        if why is None and classes is None:
            classes = pair_classes(source, ttft_slo_ms, tpot_slo_ms)
        if why is None:
            sizings = _simulated_months(source, dep, growth, names, table, whatif=whatif, ttft_slo_ms=ttft_slo_ms,
                                        tpot_slo_ms=tpot_slo_ms, gpu_hour_usd=gpu_hour_usd, today=today,
                                        classes=classes, slo_window_s=slo_window_s, router=router,
                                        block_size=block_size, seed=seed, progress=progress)
            why = None if sizings else ("today's fleet could not be replayed on this deployment: "
                                        + "; ".join(today.notes if today is not None else []))
        if sizings:
            estimate_usd = table["usd_per_month"].to_numpy(dtype=np.float64) / np.maximum(
                table["estimate_replicas"].to_numpy(dtype=np.float64), 1.0)
            # a month no fleet size meets has no plan: its search's last candidate is neither shown nor priced
            reached = [reaches(s) for s in sizings]
            table["replicas"] = pd.Series([int(s.replicas) if ok else None for s, ok in zip(sizings, reached)],
                                          dtype=object)
            table["gpus"] = pd.Series([k * dep.tp if k is not None else None for k in table["replicas"]], dtype=object)
            table["usd_per_month"] = pd.Series([float(u * k) if k is not None else None
                                                for u, k in zip(estimate_usd, table["replicas"])], dtype=object)
            table["meets_slo"] = [bool(s.meets) for s in sizings]
            table["method"] = "simulated"
            table["ttft_p90_ms"] = [s.answer.ttft_ms["p90"] if s.answer and ok else None
                                    for s, ok in zip(sizings, reached)]
            table["tpot_p90_ms"] = [s.answer.tpot_ms["p90"] if s.answer and ok else None
                                    for s, ok in zip(sizings, reached)]
            table["one_fewer"] = [None if s.one_fewer is None else s.one_fewer.verdict()["verdict"] for s in sizings]
            left_out = [unreachable_month(s, classes or {}) or None for s in sizings]
            table["unreachable"] = pd.Series(left_out, dtype=object)
            for month, words in enumerate(left_out):
                if words:
                    notes.append(f"month {month}: " + ("unreachable: " if not reached[month] else
                                                       "the fleet leaves out ") + words)
            notes.append(f"every month sized by replaying it ({sizings[0].sized_on.get('window')}): month 0 is "
                         f"today's fleet; later months replay {GROWN_BY}, each search starting from the month "
                         f"before; {sum(len(s.trials) for s in sizings[1:])} replays, "
                         f"{sum(s.cpu_s for s in sizings[1:]):.1f} s CPU")
            dips = _dips(table["replicas"].tolist())
            if dips:
                notes.append(
                    "fewer replicas than an earlier month in month(s) " + ", ".join(
                        f"{m} ({k} against {top} in month {at})" for m, k, top, at in dips)
                    + ": the grown month holds every request of the earlier one, but its p90 is taken over more "
                    "requests, and new users' requests mostly land outside today's bursts (their bursts are placed "
                    "independently of today's), so fewer of them wait; a pool sized for the earlier month keeps "
                    "its headroom. If today's bursts come from one client that grows, its bursts grow with it and "
                    "these months are too small")
        else:
            notes.append(f"months are the analytic estimate ({why})")
    first = table["replicas"].iloc[0]
    if replicas_now is None and first is None:
        raise ValueError("today's traffic is unreachable on this deployment: "
                         + str(table["unreachable"].iloc[0]) + "; growth has no pool to project")
    now = int(first) if replicas_now is None else int(replicas_now)
    if now < 1:
        raise ValueError(f"replicas today must be ≥ 1, got {now}")
    table["headroom_replicas"] = pd.Series([now - k if k is not None else None for k in table["replicas"]],
                                           dtype=object)
    over = [i for i, k in enumerate(table["replicas"]) if k is None or k > now]
    runs_out = int(table["month"].iloc[over[0]]) if over else None
    if runs_out is not None:
        needed = table["replicas"].iloc[over[0]]
        notes.append(f"today's {now} replica(s) run out of headroom in month {runs_out}: "
                     + (f"{int(needed)} needed" if needed is not None else "no fleet size meets it"))
    return GrowthResult(table, now, runs_out, growth, dep.describe(), notes,
                        "simulated" if sizings else "analytic", sizings)


def reaches(sizing: Sizing) -> bool:
    """Whether a replayed fleet meets every class a fleet size can meet (False: the search's last candidate, a
    bound, not a plan)."""
    return sizing.replicas is not None and sizing.answer is not None and bool(sizing.answer.meets)


def unreachable_month(sizing: Sizing, classes: Mapping[str, SloClass]) -> str:
    """The products a month's fleet leaves out, each with its class and why ("" when it serves every one)."""
    out = {u["product"]: (f"{u['product']} ({u['metric'].upper()} p{u['percentile']:g} class "
                          f"{u['target_ms']:,.0f} ms): {u['why']}") for u in sizing.unreachable}
    if not reaches(sizing) and sizing.answer is not None:
        for name, o in sizing.answer.products.items():
            if o.get("meets", True) or name in out:
                continue
            cls = class_of(classes, name)
            target = (f"TTFT p{cls.percentile:g} ≤ {cls.ttft_ms:,.4g} ms, TPOT p{cls.percentile:g} ≤ "
                      f"{cls.tpot_ms:,.4g} ms" if cls is not None else "its class")
            out[name] = (f"{name} ({target}): {sizing.answer.replicas} replicas still give TTFT p90 "
                         f"{ms_words(o.get('ttft_p90_ms'))}, TPOT p90 {ms_words(o.get('tpot_p90_ms'))} and more replicas "
                         "barely help, so its requests' own latency (with the batch they share) is above its class")
    return "; ".join(out[name] for name in sorted(out))


def _dips(replicas: list[int]) -> list[tuple[int, int, int, int]]:
    """``(month, replicas, the most before it, the month of that most)`` for each month below an earlier one."""
    out, top, at = [], -1, 0
    for month, k in enumerate(replicas):
        if k is None:   # an unreachable month has no count to compare
            continue
        if k < top:
            out.append((month, int(k), int(top), at))
        elif k > top:
            top, at = int(k), month
    return out


def _why_not_replayed(source: Any) -> str | None:
    """Why a source's months cannot be replayed (None: they can)."""
    if not isinstance(source, pd.DataFrame):
        return "a workload sketch has no rows to replay"
    if "timestamp" not in source.columns or source["timestamp"].notna().sum() < 2:
        return "the log has no timestamps to replay"
    return None


def _simulated_months(frame: pd.DataFrame, dep: Deployment, growth: Growth, names: list[str], table: pd.DataFrame,
                      *, whatif: WhatIf, ttft_slo_ms: float, tpot_slo_ms: float, gpu_hour_usd: float | None,
                      today: Sizing | None, classes: Mapping[str, SloClass] | None, slo_window_s: float,
                      router: str | None, block_size: int | None, seed: int,
                      progress: Progress = silent) -> list[Sizing]:
    """Month by month, the one engine's ``Sizing`` ([] when today's fleet is not a replayed answer)."""
    last = [(1.0 + growth.rate(p)) ** growth.months for p in names]
    longest = [(1.0 + growth.output_rate(p)) ** growth.months for p in names]
    if max(last + longest) > MAX_REPLAYED_FACTOR:   # the replay holds every grown request: bounded, like uploads
        raise ValueError(f"the growth reaches {max(last):,.3g}× today's requests and {max(longest):,.3g}× their "
                         f"output length by month {growth.months}; months are replayed up to "
                         f"{MAX_REPLAYED_FACTOR:g}× (a shorter horizon, or --method analytic for the estimate)")
    if classes is None:
        classes = pair_classes(frame, ttft_slo_ms, tpot_slo_ms)
    if today is None:
        today = fleet_answer(Workload.from_frame(frame), dep, frame, whatif=whatif, ttft_slo_ms=ttft_slo_ms,
                             tpot_slo_ms=tpot_slo_ms, classes=classes, gpu_hour_usd=gpu_hour_usd,
                             slo_window_s=slo_window_s, router=router, block_size=block_size)[1]
    if today.method != "simulated" or today.replicas is None:
        return []
    sizings = [today]
    for month in range(1, growth.months + 1):
        progress("growth", f"replaying month {month} of {growth.months}", (month - 1) / growth.months)
        factors = {p: (1.0 + growth.rate(p)) ** month for p in names}
        output = {p: (1.0 + growth.output_rate(p)) ** month for p in names}

        def grow(req: Requests, span_s: float, factors: dict = factors, output: dict = output,
                 month: int = month) -> tuple[Requests, dict[str, Any]]:
            return (grow_window(req, span_s, factors, output, seed),
                    {"grown": f"month {month}: {GROWN_BY}", "traffic_factor": factors, "output_factor": output})

        sizing = size_fleet(frame, dep, classes, estimate=int(sizings[-1].replicas), whatif=whatif,
                            slo_window_s=slo_window_s, router=router or "round_robin", block_size=block_size,
                            default_ttft_ms=ttft_slo_ms, default_tpot_ms=tpot_slo_ms, grow=grow)
        # the search started from last month's answer; the estimate it is set beside is this month's own
        sizings.append(replace(sizing, estimate=int(table["estimate_replicas"].iloc[month])))
    return sizings
