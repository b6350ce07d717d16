"""The fleet designer: the cheapest set of pools whose SIMULATED per-product p90s meet every product's class.

The space searched, each family sized by simulation (fewest replicas whose replay meets every class it serves):
- ``shared``: one pool of one GPU type for every product, FCFS (today's fleet; the best of these is the
  baseline) and with the deadline scheduler (earliest TTFT deadline first: each product's class sets the order);
- ``per_product`` / ``per_corner``: one pool per product (or per corner), each on its own cheapest GPU type;
  pools share nothing, so each pool's GPU type and size are chosen on its own;
- ``split``: one prefill/decode pool whose two sides may use different GPU types (Splitwise);
- ``mix``: GPU types mixed by prompt size within one pool, Mélange-style: prompt-size buckets × GPU types as an
  integer program (``scipy.optimize.milp``) on the analytic per-replica capacity, then sized up by simulation.

Pruning: the analytic planner prices every (pool, GPU type) first and only the ``PRUNE_KEEP`` cheapest GPU types
of each pool are simulated, starting at the analytic size; replica counts are found by doubling and bisection.
"Meets" is the headline's (``sizing.fleet_answer``): every product's p90 TTFT and TPOT within its class over the
window ``sizing.slo_window`` chooses (the log's busiest ``--slo-window``, an hour by default, the whole log when
shorter), the same ``Trial`` verdict. The search replays that window's busiest ``search_requests`` requests (without
prompt blocks, the simulator's quicker loop); every candidate is then ``settle``d on the whole window, with the
replicas' prefix caches as the headline replays them: pools of a product that misses grow, the largest pool is
trimmed while the window still meets, and the replay of one replica fewer there is kept as the proof. Every design
reported is replayed once more with another seed (the window's requests and gaps permuted within each product and
10-minute block): a second look, shown, not the verdict.
"""
from __future__ import annotations

import copy
import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import pandas as pd

from shapeviz.fleet.pools import (
    ANY_PRODUCT,
    Fleet,
    FleetResult,
    Pool,
    PoolResult,
    Side,
    cost_per_hour,
    fleet_gpus,
    pool_deployment,
    pool_gpus,
    reseeded,
    simulate_fleet,
    simulate_pool,
    subset,
)
from shapeviz.fleet.sizing import DEFAULT_GPU, DEFAULT_SLO_WINDOW_S, Trial, slo_window, window_trial
from shapeviz.physics.steps import (
    TP_CHOICES,
    Deployment,
    decode_step_s,
    max_tp_in_node,
    prefill_time_s,
    smallest_tp,
)
from shapeviz.plain import json_safe
from shapeviz.progress import Progress, silent
from shapeviz.serving.parallel import Runner, map_jobs
from shapeviz.serving.planner import WhatIf, Workload, plan
from shapeviz.serving.products import SloClass, beyond_context, context_refusals, refused_words
from shapeviz.serving.simulator import Requests

UNLOADED_SHARE = 0.8           # a GPU type is kept when its unloaded p-latency is within 80% of every class
HARDEN_ROUNDS = 8              # rounds of growth at most when the whole window misses a class (settle)
PRUNE_KEEP = 2                 # GPU types simulated per pool, cheapest by the analytic plan
MAX_REPLICAS = 64              # per pool (or side)
ANALYTIC_POINTS = 400          # requests the analytic sizing reads per pool (a uniform subsample)
DEFAULT_SEARCH_REQUESTS = 5000   # the busiest requests of the window the search replays (benchmarks/README.md)
CAPACITY_SCALE = 20.0         # the mix's capacity per replica: analytic plan at 20x a bucket's rate
MIN_BUCKET_REQUESTS = 20      # smaller prompt-size buckets join their neighbour
SIZE_EDGES = (0, 512, 2048, 8192, 32768, 10**9)   # prompt-size buckets of the mix (tokens, [lo, hi))
ROUTER = "round_robin"        # every pool's router: the headline's (fleet_answer's), so its deployment is its fleet


def peak_window(req: Requests, n: int) -> Requests:
    """The ``n`` consecutive arrivals spanning the least time (the busiest stretch of the log), or all of them."""
    if len(req) <= n:
        return req
    t = np.asarray(req.arrival_s)
    span = t[n - 1:] - t[: t.size - n + 1]
    start = int(np.argmin(span))
    mask = np.zeros(len(req), dtype=bool)
    mask[start:start + n] = True
    out = subset(req, mask)
    return replace(out, arrival_s=out.arrival_s - out.arrival_s[0])  # type: ignore[operator]


class _Search:
    """Shared state: the window, the classes, prices, a cache of pool replays and a simulation count."""

    def __init__(self, req: Requests, classes: Mapping[str, SloClass], prices: Mapping[str, float], model: str,
                 precision: str | None, progress: Progress, kv: Mapping[str, Any] | None = None) -> None:
        self.req, self.classes, self.prices, self.model, self.precision = req, classes, prices, model, precision
        self.kv = dict(kv or {})   # the KV pool every pool's replicas get (kv_cache_tokens, gpu_memory_utilization)
        self.progress = progress
        self.simulations = 0
        self.pruned: list[str] = []
        self.cache: dict[tuple, Any] = {}
        span = float(req.arrival_s[-1] - req.arrival_s[0]) if len(req) > 1 else 1.0  # type: ignore[index]
        self.span_s = max(span, 1e-9)

    def __getstate__(self) -> dict[str, Any]:
        # a job ships the window, classes and prices; progress (a terminal's or a page's) and the cache stay here
        return {**self.__dict__, "progress": silent, "cache": {}}

    def fresh(self) -> "_Search":
        """A copy for one job: the same window, classes and prices; its own counters, notes and cache."""
        mine = copy.copy(self)
        mine.simulations, mine.pruned, mine.cache, mine.progress = 0, [], {}, silent
        return mine

    def absorb(self, simulations: int, notes: Sequence[str]) -> None:
        """Count a job's simulations and keep its notes, in job order (as one after the other would)."""
        self.simulations += simulations
        for text in notes:
            self.note(text)

    # -- helpers --
    def note(self, text: str) -> None:
        """Say once why a candidate was not simulated."""
        if text not in self.pruned:
            self.pruned.append(text)

    def mask(self, products: Sequence[str]) -> np.ndarray:
        """Requests of these products (``*``: all)."""
        if ANY_PRODUCT in products:
            return np.ones(len(self.req), dtype=bool)
        return np.isin(np.asarray(self.req.product, dtype=object), list(products))

    def classes_of(self, req: Requests) -> dict[str, SloClass]:
        present = set(np.unique(np.asarray(req.product, dtype=object)).tolist()) if req.product is not None else set()
        return {p: c for p, c in self.classes.items() if p in present}

    def tp(self, gpu: str) -> int | None:
        """Smallest TP of ``gpu`` that holds the model with room for KV (None: it cannot)."""
        try:
            return smallest_tp(self.model, gpu, self.precision)
        except ValueError:
            return None

    def options(self, req: Requests, gpus: Sequence[str], check: str = "both",
                rate_scale: float = 1.0, name: str = "", best_effort: bool = False) -> list[tuple[float, str, int, int]]:
        """(analytic $/h, gpu, tp, analytic replicas) per GPU type, cheapest first, at the smallest TP whose
        unloaded latency meets every class it serves (``check``: both, ttft or tpot); GPU types that cannot are
        left out (and said in ``pruned``). The analytic size sums each product's own plan at its own class."""
        out = []
        product = np.asarray(req.product, dtype=object)
        names = sorted(set(product.tolist()))
        n_in = req.input_tokens.astype(np.float64)
        n_cached = req.cached_tokens.astype(np.float64)
        for g in gpus:
            t0 = self.tp(g)
            if t0 is None:
                self.note(f"{g}: the model does not fit")
                continue
            chosen = None
            widest = max_tp_in_node(g)   # one node of the GPU (data/gpus.csv gpus_per_node), as "auto" TP stays
            for tp in (t for t in TP_CHOICES if t0 <= t <= widest):
                try:
                    dep = pool_deployment(Pool("x", precision=self.precision, **self.kv), self.model, g, tp)
                except ValueError as exc:   # the KV pool set does not fit this replica
                    self.note(f"{g} TP{tp}: {exc}")
                    continue
                ttft0 = prefill_time_s(dep, n_in, n_cached) * 1000.0
                fits = True
                for prod in names:
                    c = self.classes.get(prod)
                    if c is None:
                        continue
                    m = product == prod
                    if check in ("both", "ttft") and np.percentile(ttft0[m], c.percentile) > UNLOADED_SHARE * c.ttft_ms:
                        fits = False
                        break
                    ctx = float(np.mean(n_in[m] + req.output_tokens[m] / 2.0))
                    step = float(np.asarray(decode_step_s(dep, 1.0, np.array([ctx]))).reshape(-1)[0]) * 1000.0
                    if check in ("both", "tpot") and step > UNLOADED_SHARE * c.tpot_ms:
                        fits = False
                        break
                if fits:
                    chosen = (tp, dep)
                    break
            if chosen is None and best_effort:   # the fastest replica considered, for the few prompts nothing serves
                tp = widest
                try:
                    chosen = ((tp, pool_deployment(Pool("x", precision=self.precision, **self.kv), self.model, g, tp))
                              if tp >= t0 else None)
                except ValueError:
                    chosen = None
            if chosen is None:
                self.note(f"{name or 'a pool'} on {g}: even unloaded, a class it serves is out of reach up to TP{widest}")
                continue
            tp, dep = chosen
            k0 = 0
            for prod in names:
                m = product == prod
                c = self.classes.get(prod)
                pick = np.flatnonzero(m)
                pick = pick[np.linspace(0, pick.size - 1, min(pick.size, ANALYTIC_POINTS)).astype(np.int64)]
                rate = max(m.sum() / self.span_s * rate_scale, 1e-6)
                try:
                    w = Workload.from_points(req.input_tokens[pick], req.output_tokens[pick], req.cached_tokens[pick],
                                             rate_rps=rate)
                    p = plan(w, dep, ttft_slo_ms=c.ttft_ms if c else 1000.0, tpot_slo_ms=c.tpot_ms if c else 50.0)
                    k0 += p.replicas or 1
                except ValueError:
                    k0 += 1
            price = float(self.prices.get(g, math.inf))
            if math.isfinite(price):
                out.append((max(k0, 1) * tp * price, g, tp, max(k0, 1)))
        out.sort()
        return out

    def run(self, pool: Pool, req: Requests) -> Any:
        key = (pool, len(req), id(req))
        if key not in self.cache:
            self.simulations += 1
            self.cache[key] = simulate_pool(pool, req, self.model, self.classes_of(req))
        return self.cache[key]

    def ok(self, result: Any, check: str = "both") -> bool:
        """The replay meets every class it serves (``check``: both, ttft or tpot) and its queue keeps up."""
        if result.saturated:
            return False
        f = result.requests
        for product, idx in f.groupby(f["product"].astype(str)).groups.items():
            c = self.classes.get(str(product))
            if c is None:
                continue
            r = f.loc[idx]
            if check in ("both", "ttft") and float(np.percentile(r["ttft_ms"], c.percentile)) > c.ttft_ms:
                return False
            tpot = r["tpot_ms"].dropna()
            if check in ("both", "tpot") and len(tpot) and float(np.percentile(tpot, c.percentile)) > c.tpot_ms:
                return False
        return True

    def smallest(self, make: Callable[[int], Pool], req: Requests, start: int, check: str = "both") -> tuple[int | None, Any]:
        """Fewest replicas ``k`` with ``make(k)`` meeting every class: steps from ``start`` (the analytic size, usually
        close), growing steps upwards, then bisection; (None, last replay) if even ``MAX_REPLICAS`` does not."""
        k = int(min(max(start, 1), MAX_REPLICAS))
        upper = min(MAX_REPLICAS, max(4 * k, 16))   # far above the analytic size: give up, the class is out of reach
        try:
            res = self.run(make(k), req)
        except ValueError:
            return None, None
        if self.ok(res, check):
            hi, best = k, res
            lo = 0
            step = 1
            while hi > 1:   # walk down while it still meets
                k2 = max(hi - step, 1)
                r2 = self.run(make(k2), req)
                if not self.ok(r2, check):
                    lo = k2
                    break
                hi, best = k2, r2
                step *= 2
        else:
            lo, hi, best, step = k, None, None, 1
            while hi is None:
                k = min(lo + step, upper)
                r2 = self.run(make(k), req)
                if self.ok(r2, check):
                    hi, best = k, r2
                elif k >= upper:
                    return None, r2
                else:
                    lo, step = k, step * 2
        while hi - lo > 1:
            mid = (lo + hi) // 2
            r2 = self.run(make(mid), req)
            if self.ok(r2, check):
                hi, best = mid, r2
            else:
                lo = mid
        return hi, best

    def best_colocated(self, name: str, products: Sequence[str], gpus: Sequence[str], scheduler: str = "fcfs",
                       input_tokens: Any = None, start: int | None = None) -> Pool | None:
        """The cheapest colocated pool for these products over ``gpus`` (analytic prune, then simulated sizing)."""
        sub = subset(self.req, self.mask(products))
        if input_tokens is not None:
            size_ok = np.zeros(len(sub), dtype=bool)
            for lo, hi in input_tokens:
                size_ok |= (sub.input_tokens >= lo) & (sub.input_tokens < hi)
            sub = subset(sub, size_ok)
        if len(sub) == 0:
            return None
        priced = self.options(sub, gpus, name=name)
        for _, g, tp, _ in priced[PRUNE_KEEP:]:
            self.note(f"{name} on {g} TP{tp}: analytic cost above the {PRUNE_KEEP} cheapest")
        best: tuple[float, Pool] | None = None
        for _, g, tp, k0 in priced[:PRUNE_KEEP]:
            def make(k: int, g: str = g, tp: int = tp) -> Pool:
                return Pool(name, tuple(products), g, k, tp, None, self.precision, scheduler,
                            input_tokens=input_tokens, **self.kv)

            k, _ = self.smallest(make, sub, start or k0)
            if k is None:
                continue
            cost = k * tp * float(self.prices[g])
            if best is None or cost < best[0]:
                best = (cost, make(k))
        return None if best is None else best[1]

    def best_split(self, name: str, products: Sequence[str], gpus: Sequence[str]) -> Pool | None:
        """The cheapest prefill/decode pool: prefill sized for TTFT, then decode for TPOT, GPU types chosen per side."""
        sub = subset(self.req, self.mask(products))
        pre_opts = self.options(sub, gpus, check="ttft", name=f"{name} prefill")[:PRUNE_KEEP]
        dec_opts = self.options(sub, gpus, check="tpot", name=f"{name} decode")[:PRUNE_KEEP]
        if not pre_opts or not dec_opts:
            return None
        _, g0, tp0, k00 = dec_opts[0]
        generous = Side(g0, max(k00, 2), tp0)
        best_pre: tuple[float, Side] | None = None
        for _, g, tp, k0 in pre_opts:
            k, _ = self.smallest(lambda k, g=g, tp=tp: Pool(name, tuple(products), precision=self.precision,
                                                          prefill=Side(g, k, tp), decode=generous, **self.kv), sub,
                                 max(k0 // 2, 1), check="ttft")
            if k is not None and (best_pre is None or k * tp * self.prices[g] < best_pre[0]):
                best_pre = (k * tp * self.prices[g], Side(g, k, tp))
        if best_pre is None:
            return None
        best: tuple[float, Pool] | None = None
        for _, g, tp, k0 in dec_opts:
            def make(k: int, g: str = g, tp: int = tp) -> Pool:
                return Pool(name, tuple(products), precision=self.precision, prefill=best_pre[1],  # type: ignore[index]
                            decode=Side(g, k, tp), **self.kv)

            k, _ = self.smallest(make, sub, k0, check="both")
            if k is not None:
                cost = cost_per_hour(fleet_gpus(Fleet((make(k),), self.model)), self.prices)
                if best is None or cost < best[0]:
                    best = (cost, make(k))
        return None if best is None else best[1]


def mix_assignment(s: _Search, gpus: Sequence[str]) -> list[tuple[str, int, list[tuple[int, int]], int]]:
    """Mélange-style: prompt-size buckets assigned to GPU types by an integer program on analytic capacity.

    ``min Σ_c price_c·tp_c·n_c`` over columns c = (GPU type, TP) subject to every bucket on exactly one column
    (``x_bc`` binary) and ``Σ_b load_bc·x_bc ≤ n_c`` (``n_c`` whole replicas), where ``load_bc`` is bucket b's rate
    over one replica's analytic capacity for it (the plan at ``CAPACITY_SCALE``× the bucket's rate, so whole
    replicas round little) at its products' own classes. Returns (gpu, tp, prompt ranges, replicas) per column used.
    """
    from scipy.optimize import (  # scipy's optimiser: imported only when a mix is searched
        Bounds,
        LinearConstraint,
        milp,
    )

    # buckets of at least MIN_BUCKET_REQUESTS requests (a small one joins the next; the last joins the one before),
    # so that every prompt size has a pool
    ranges: list[tuple[int, int]] = []
    lo = SIZE_EDGES[0]
    for hi in SIZE_EDGES[1:]:
        if ((s.req.input_tokens >= lo) & (s.req.input_tokens < hi)).sum() >= MIN_BUCKET_REQUESTS:
            ranges.append((lo, hi))
            lo = hi
    if lo < SIZE_EDGES[-1]:
        ranges = ranges[:-1] + [(ranges[-1][0] if ranges else lo, SIZE_EDGES[-1])] if ranges else [(lo, SIZE_EDGES[-1])]
    buckets, opts = [], []
    for lo, hi in ranges:
        m = (s.req.input_tokens >= lo) & (s.req.input_tokens < hi)
        if m.any():
            sub = subset(s.req, m)
            buckets.append((lo, hi))
            label = f"mix prompts {lo:,}–{hi:,}"
            found = (s.options(sub, gpus, rate_scale=CAPACITY_SCALE, name=label)
                     or s.options(sub, gpus, "both", CAPACITY_SCALE, name=label, best_effort=True))
            opts.append({(g, tp): k0 / CAPACITY_SCALE for _, g, tp, k0 in found})
    columns = sorted({c for o in opts for c in o})
    if not buckets or not columns or any(not o for o in opts):
        return []
    nb, nc = len(buckets), len(columns)
    load = np.array([[o.get(c, np.inf) for c in columns] for o in opts])
    cost = np.concatenate([np.zeros(nb * nc), [tp * float(s.prices[g]) for g, tp in columns]])
    a_assign = np.zeros((nb, nb * nc + nc))
    a_cap = np.zeros((nc, nb * nc + nc))
    for b in range(nb):
        a_assign[b, b * nc:(b + 1) * nc] = 1.0
        for j in range(nc):
            a_cap[j, b * nc + j] = load[b, j] if np.isfinite(load[b, j]) else 0.0
    for j in range(nc):
        a_cap[j, nb * nc + j] = -1.0
    upper = np.concatenate([np.isfinite(load).ravel().astype(float), np.full(nc, MAX_REPLICAS)])
    res = milp(cost, constraints=[LinearConstraint(a_assign, 1, 1), LinearConstraint(a_cap, -np.inf, 0)],
               integrality=np.ones(nb * nc + nc), bounds=Bounds(np.zeros(nb * nc + nc), upper))
    if not res.success:
        return []
    x = np.round(res.x[: nb * nc]).reshape(nb, nc)
    n = np.round(res.x[nb * nc:]).astype(int)
    out = []
    for j, (g, tp) in enumerate(columns):
        ranges = [buckets[b] for b in range(nb) if x[b, j] > 0.5]
        if ranges:
            out.append((g, tp, ranges, max(int(n[j]), 1)))
    return out


def _largest(fleet: Fleet) -> int:
    """Index of the fleet's pool with the most GPUs (its largest pool: the one the one-fewer proof trims)."""
    return max(range(len(fleet.pools)), key=lambda i: sum(pool_gpus(fleet.pools[i], fleet.model).values()))


def _count(pool: Pool) -> int:
    """The replicas the one-fewer proof counts: a colocated pool's, or a split pool's larger side's."""
    if not pool.split:
        return pool.replicas
    return max(pool.prefill.replicas, pool.decode.replicas)  # type: ignore[union-attr]


def _resized(fleet: Fleet, i: int, k: int) -> Fleet:
    """``fleet`` with pool ``i`` at ``k`` replicas (a split pool: its larger side)."""
    pool = fleet.pools[i]
    if not pool.split:
        pool = replace(pool, replicas=k)
    elif pool.prefill.replicas >= pool.decode.replicas:  # type: ignore[union-attr]
        pool = replace(pool, prefill=replace(pool.prefill, replicas=k))  # type: ignore[arg-type]
    else:
        pool = replace(pool, decode=replace(pool.decode, replicas=k))  # type: ignore[arg-type]
    return replace(fleet, pools=fleet.pools[:i] + (pool,) + fleet.pools[i + 1:])


def _grown(fleet: Fleet, result: FleetResult) -> tuple[Fleet, int]:
    """One round of growth: per (product, metric) that misses its class, the pool whose own requests of that
    product miss it worst gets one replica (a split pool: the side of the metric, TTFT prefill, TPOT decode)."""
    grow: dict[str, set[str]] = {}
    f = result.requests
    for name, o in result.products.items():
        slo = o.get("slo") or {}
        if o.get("meets", True):
            continue
        for metric, column in (("ttft", "ttft_ms"), ("tpot", "tpot_ms")):
            target = slo.get(column)
            got = o.get(f"{metric}_p{slo.get('percentile', 90)}_ms")
            if target is None or got is None or got <= target:
                continue
            mine = f[f["product"].astype(str) == name]
            worst = (mine.groupby("pool")[column].quantile(slo.get("percentile", 90) / 100.0) / target)
            if len(worst.dropna()):
                grow.setdefault(str(worst.idxmax()), set()).add(metric)
    grown = 0
    pools = []
    for pool in fleet.pools:
        need = grow.get(pool.name, set())
        if not need:
            pools.append(pool)
        elif pool.split:
            pre, dec = pool.prefill, pool.decode
            if "ttft" in need:
                pre = replace(pre, replicas=pre.replicas + 1)  # type: ignore[arg-type]
                grown += 1
            if "tpot" in need:
                dec = replace(dec, replicas=dec.replicas + 1)  # type: ignore[arg-type]
                grown += 1
            pools.append(replace(pool, prefill=pre, decode=dec))
        else:
            pools.append(replace(pool, replicas=pool.replicas + 1))
            grown += 1
    return replace(fleet, pools=tuple(pools)), grown


@dataclass
class Settled:
    """A candidate judged on the whole window: its fleet, that replay and its verdict (``trial``, the headline's
    ``Trial``), the replay of one replica fewer in its largest pool (``one_fewer``), replicas added and trimmed."""

    fleet: Fleet
    result: FleetResult
    trial: Trial
    one_fewer: Trial | None
    grown: int
    trimmed: int
    simulations: int


def settle(fleet: Fleet, window: Requests, classes: Mapping[str, SloClass],
           max_rounds: int = HARDEN_ROUNDS) -> Settled:
    """Judge ``fleet`` (sized on the search's stretch of the window) on the whole window, as the headline is judged:
    pools of products that miss grow one replica a round until every class is met (at most ``max_rounds``); then
    its largest pool is trimmed while the whole window still meets (steps doubling, then bisection), so that the
    replay of one replica fewer there misses: the proof that it is not padded.
    """
    replayed: dict[Pool, PoolResult] = {}   # pools share nothing: a pool once replayed is not replayed again

    def judge(f: Fleet) -> tuple[FleetResult, Trial]:
        started = time.process_time()
        result = simulate_fleet(window, f, classes, done=replayed)
        return result, window_trial(_count(f.pools[_largest(f)]), result.requests, classes,
                                    time.process_time() - started)

    grown = 0
    result, trial = judge(fleet)
    for _ in range(max_rounds):
        if trial.meets:
            break
        fleet, more = _grown(fleet, result)
        if not more:
            break
        grown += more
        result, trial = judge(fleet)
    if not trial.meets:
        return Settled(fleet, result, trial, None, grown, 0, len(replayed))
    i = _largest(fleet)
    hi = _count(fleet.pools[i])
    lo, step = 0, 1
    fewer: dict[int, tuple[Fleet, FleetResult, Trial]] = {}
    while hi - lo > 1:   # walk down while it still meets, steps doubling; then bisect (lo misses, hi meets)
        k = max(hi - step, lo + 1) if lo == 0 else (lo + hi) // 2
        f = _resized(fleet, i, k)
        fewer[k] = (f, *judge(f))
        if fewer[k][2].meets:
            hi, step = k, step * 2
        else:
            lo = k
    trimmed = _count(fleet.pools[i]) - hi
    if trimmed:
        fleet, result, trial = fewer[hi]
    proof = fewer[lo][2] if lo in fewer else None
    return Settled(fleet, result, trial, proof, grown, trimmed, len(replayed))


FAMILY_STAGES = {"shared_fcfs": "one shared pool", "shared_deadline": "one shared pool, deadline order",
                 "per_product": "a pool per product", "per_corner": "a pool per corner", "split": "prefill/decode split"}


def _search_job(s: _Search, method: str, args: tuple[Any, ...]) -> tuple[Pool | None, int, list[str]]:
    """One pool's sizing search (``best_colocated`` or ``best_split``) on a fresh copy of the search state: the pool,
    its simulations and its notes. Module-level, so that a local process or a Dask worker can run it."""
    mine = s.fresh()
    return getattr(mine, method)(*args), mine.simulations, mine.pruned


def _settle_job(fleet: Fleet, window: Requests, classes: Mapping[str, SloClass]) -> Settled | str:
    """``settle`` one candidate (module-level, so that a local process or a Dask worker can run it); why not, when
    the window cannot be replayed on it (a prompt of the window beyond a replica's KV pool, found in no search)."""
    try:
        return settle(fleet, window, classes)
    except ValueError as exc:
        return str(exc)


def _reseeded_job(fleet: Fleet, window: Requests, classes: Mapping[str, SloClass]) -> FleetResult:
    """One design replayed on the re-seeded twin of the window (a second look; it does not decide ``meets``)."""
    return simulate_fleet(window, fleet, classes)


def _summary(result: FleetResult) -> dict[str, dict[str, Any]]:
    out = {}
    for name, o in result.products.items():
        if "slo" not in o:   # a product no design serves (``unreachable``): named in the document, judged nowhere
            continue
        slo = o.get("slo") or {}
        out[name] = {"ttft_p90_ms": o.get("ttft_p90_ms"), "tpot_p90_ms": o.get("tpot_p90_ms"),
                     "meets": bool(o.get("meets", False)),
                     "ttft_slo_ms": slo.get("ttft_ms"), "tpot_slo_ms": slo.get("tpot_ms")}
    return out


def _describe(fleet: Fleet) -> str:
    parts = []
    for p in fleet.pools:
        who = "all products" if ANY_PRODUCT in p.products else ", ".join(p.products)
        if p.input_tokens:
            who += " (prompts " + ", ".join(f"{lo:,}–{hi:,}" if hi < 10**8 else f"≥{lo:,}" for lo, hi in p.input_tokens) + ")"
        if p.split:
            pre, dec = p.prefill, p.decode
            what = (f"{pre.replicas}× {pre.gpu} TP{pre.tp} prefill + {dec.replicas}× {dec.gpu} TP{dec.tp} decode")  # type: ignore[union-attr]
        else:
            what = f"{p.replicas}× {p.gpu}" + (f" TP{p.tp}" if p.tp else "") + (
                f", {p.scheduler}" if p.scheduler != "fcfs" else "")
        parts.append(f"{p.name}: {what} for {who}")
    return "; ".join(parts)


def design_fleet(frame: pd.DataFrame, classes: Mapping[str, SloClass], *, gpus: Sequence[str],
                 prices: Mapping[str, float], model: str, precision: str | None = "fp8", whatif: Any = None,
                 search_requests: int = DEFAULT_SEARCH_REQUESTS, top: int = 5, check_seed: int = 1,
                 families: Sequence[str] = ("shared", "per_product", "per_corner", "split", "mix"),
                 progress: Progress = silent, kv_cache_tokens: int | None = None,
                 gpu_memory_utilization: float | None = None, runner: Runner | None = None,
                 slo_window_s: float = DEFAULT_SLO_WINDOW_S, router: str = ROUTER,
                 reference: Deployment | None = None, serving_engine: str | None = None) -> dict[str, Any]:
    """Search the design space and return the ``design --json`` document (``designs`` best first, ``baseline``).

    Every design is judged as the headline (``sizing.fleet_answer``) is: replayed on ``sizing.slo_window`` (the
    busiest ``slo_window_s`` of the log by GPU-work on ``reference``, the headline's deployment when the page has
    one, else the model on plan's default GPU type; the whole log when shorter), every product's p90 TTFT and TPOT
    against its class (``sizing.Trial``).
    ``kv_cache_tokens`` / ``gpu_memory_utilization``: the KV pool of every replica, as the engines set it;
    ``router``: every pool's (the headline's by default, so that a shared pool of its deployment is its fleet).
    ``serving_engine``: the engine every pool runs (None: vLLM, what ``config`` writes): its efficiency and sequence
    cap on each GPU type (``physics.engines``), and each pool of the document names it.
    ``runner``: where the pools' sizing searches and the candidates' replays run (``serving.parallel``: local
    processes or Dask); None (or a serial runner) runs them here, one after the other. The document is the same
    either way.
    """
    started = time.process_time()
    whatif = whatif or WhatIf()
    kv = {k: v for k, v in (("kv_cache_tokens", kv_cache_tokens), ("gpu_memory_utilization", gpu_memory_utilization))
          if v is not None}
    served = {**kv, "engine": serving_engine}
    engine = {**served, "router": router}   # what every pool the search builds runs with
    judged, sized_on = _judged_window(frame, whatif, slo_window_s,
                                      reference or _reference(model, precision, gpus, served))
    # requests beyond the pools' model's context window are refused as plan refuses them (every pool runs that
    # model: its replay refuses them too), and a product with more of them than its percentile allows is named,
    # its class left out of every design's verdict (no pool, GPU or TP serves it)
    pools_model = _reference(model, precision, gpus, served)
    unreachable = context_refusals(judged, pools_model, classes)
    refused = beyond_context(judged, pools_model)
    refused_note = refused_words(judged, pools_model, refused) if refused.any() else None
    if refused.all():
        raise ValueError(f"nothing to design for: {refused_note}")
    if refused.any():
        judged = judged.take(np.flatnonzero(~refused))
        sized_on = {**sized_on, "refused": int(refused.sum()), "requests": len(judged)}
    named = {u["product"] for u in unreachable}
    all_classes, classes = classes, {p: c for p, c in classes.items() if p not in named}
    # the search's stretch: the busiest requests of the window, without prompt blocks (the replicas' prefix caches
    # take the simulator's slower loop: the search sizes without them, the window's replays judge with them)
    window = peak_window(replace(judged, blocks=None), search_requests)
    s = _Search(window, classes, prices, model, precision, progress, engine)
    products = sorted(set(np.asarray(window.product, dtype=object).tolist()))
    candidates: list[tuple[str, Fleet]] = []
    steps = len(families) + 2
    done = 0

    def tick(stage: str) -> None:
        nonlocal done
        done += 1
        # the first half of the bar is the sizing searches (below), the second the families and whole-window replays
        progress("fleet design", f"{stage} ({s.simulations} simulations)", min(0.5 + 0.5 * done / steps, 1.0))

    progress("fleet design", f"searching on {len(window):,} requests", 0.0)
    # the sizing searches share nothing (each pool on its own requests): one job each, side by side when the
    # runner has processes or a cluster; results, simulations and notes are taken in job order, as serially
    jobs: list[tuple[str, str, tuple[Any, ...]]] = []   # (family, method, arguments)
    if "shared" in families:
        jobs += [(f"shared_{sched}", "best_colocated", ("shared", [ANY_PRODUCT], gpus, sched))
                 for sched in ("fcfs", "deadline")]
    if "per_product" in families and len(products) > 1:
        jobs += [("per_product", "best_colocated", (p, [p], gpus)) for p in products]
    if "per_corner" in families:
        by_corner: dict[str, list[str]] = {}
        for p in products:
            by_corner.setdefault(classes[p].corner or p if p in classes else p, []).append(p)
        if 1 < len(by_corner) < len(products):
            jobs += [("per_corner", "best_colocated", (c, ps, gpus)) for c, ps in sorted(by_corner.items())]
    if "split" in families:
        jobs.append(("split", "best_split", ("split", [ANY_PRODUCT], gpus)))
    found = map_jobs(runner, _search_job, [(s, method, args) for _, method, args in jobs],
                 lambda i: progress("fleet design", f"sizing search {i} of {len(jobs)} ({jobs[i - 1][0]})",
                                    0.5 * i / len(jobs)))
    pools_of: dict[str, list[Pool | None]] = {}
    for (family, _, _), (pool, simulations, notes) in zip(jobs, found):
        s.absorb(simulations, notes)
        pools_of.setdefault(family, []).append(pool)
    for family, pools in pools_of.items():
        if all(pools):
            candidates.append((family, Fleet(tuple(pools), model)))  # type: ignore[arg-type]
        tick(FAMILY_STAGES.get(family, family))
    if "mix" in families:
        assignment = mix_assignment(s, gpus)
        if len(assignment) > 1:   # one column only is the shared family again
            pools = tuple(Pool(f"mix-{g}-tp{tp}", (ANY_PRODUCT,), g, n, tp, None, precision, input_tokens=tuple(ranges),
                               **engine)
                          for g, tp, ranges, n in assignment)
            candidates.append(("mix", Fleet(pools, model)))
        tick("GPU mix by prompt size (MILP)")

    # every candidate judged on the whole window, as the headline is: grown where a class misses, its largest pool
    # trimmed while the window still meets (one replica fewer there is the proof that misses)
    unique: list[tuple[str, Fleet]] = []
    seen = set()
    targets = {p: (c.ttft_ms, c.tpot_ms) for p, c in classes.items()}   # simulate --fleet judges on the same classes
    for family, fleet in candidates:
        if repr(fleet.pools) not in seen:
            seen.add(repr(fleet.pools))
            unique.append((family, replace(fleet, slo=targets)))
    scored = []
    for (family, _), settled in zip(unique, map_jobs(runner, _settle_job, [(f, judged, classes) for _, f in unique])):
        if isinstance(settled, str):
            s.note(f"{family}: the window cannot be replayed on it ({settled})")
            continue
        s.simulations += settled.simulations
        gpus_used = fleet_gpus(settled.fleet)
        scored.append({"family": family, "fleet": settled.fleet, "settled": settled, "gpus": gpus_used,
                       "cost": cost_per_hour(gpus_used, prices)})
    tick("whole-window replays")
    scored.sort(key=lambda d: (not d["settled"].trial.meets, d["cost"]))
    shown = scored[:top] + [d for d in scored[top:] if d["family"] == "shared_fcfs"][:1]
    # a second look, not a verdict: each design shown replayed on the window's re-seeded twin, without prompt
    # blocks (permuting a product's requests breaks its sessions' turn order, which the prefix caches would read)
    twin = reseeded(replace(judged, blocks=None), check_seed)
    for d, again in zip(shown, map_jobs(runner, _reseeded_job, [(d["fleet"], twin, classes) for d in shown])):
        d["check"] = again
    s.simulations += sum(len(d["fleet"].pools) for d in shown)

    def entry(d: dict[str, Any]) -> dict[str, Any]:
        fleet: Fleet = d["fleet"]
        settled: Settled = d["settled"]
        largest = fleet.pools[_largest(fleet)]
        fewer = None if settled.one_fewer is None else {**settled.one_fewer.verdict(), "pool": largest.name}
        return {"name": d["family"], "family": d["family"], "fleet": fleet.to_dict(), "summary": _describe(fleet),
                "cost_per_hour": d["cost"], "gpus": d["gpus"], "products": _summary(settled.result),
                "meets": settled.trial.meets, "method": "simulated", "answer": settled.trial.verdict(),
                "one_fewer": fewer, "grown_on_window": settled.grown, "trimmed_on_window": settled.trimmed,
                # the re-seeded replay no longer resizes a design (it is a second look): kept for older readers
                "grown_after_reseed": 0,
                "busy": {p.pool.name: p.busy for p in settled.result.pools},
                "reseeded": {"seed": check_seed, "meets": d["check"].meets, "decides": False,
                             "products": _summary(d["check"])}}

    shared = [d for d in shown if d["family"] == "shared_fcfs"]
    baseline = entry(shared[0]) if shared else None
    designs = [entry(d) for d in shown[:top]]
    best_cost = designs[0]["cost_per_hour"] if designs else None
    for i, d in enumerate(designs):
        d["why"] = _why(d, i, designs[0], baseline)
    if baseline is not None:
        baseline["why"] = _why(baseline, next((i for i, d in enumerate(scored) if d["family"] == "shared_fcfs"), 1),
                               designs[0], baseline)
    doc = {
        "designs": designs,
        "baseline": baseline,
        "classes": {p: c.to_dict() for p, c in all_classes.items()},
        "unreachable": unreachable,
        "prices_usd_per_gpu_hour": {g: float(prices[g]) for g in gpus if g in prices},
        "sized_on": sized_on,
        "search": {"requests": len(window), "window_s": s.span_s, "log_requests": len(frame),
                   "judged_requests": len(judged), "router": router,
                   "simulations": s.simulations, "pruned": s.pruned, "families": list(families),
                   "cpu_s": time.process_time() - started,
                   "how": "analytic plan prices every (pool, GPU type); the cheapest "
                          f"{PRUNE_KEEP} per pool are sized by simulation (doubling/bisection from the analytic "
                          f"size) on the busiest {len(window):,} requests of the window; every design is then judged "
                          "as the headline is, by replaying the whole window (" + str(sized_on["window"]) + "): pools "
                          "of a product that misses its class grow, the largest pool is trimmed while the window "
                          "still meets, and one replica fewer there is replayed as the proof that it misses; "
                          f"the designs shown are replayed once more with seed {check_seed} (a second look, not "
                          "a verdict)"},
        "best_cost_per_hour": best_cost,
    }
    if not any(d["meets"] for d in designs):
        doc["note"] = ("no design searched meets every class: " + "; ".join(s.pruned[:6]) if s.pruned else
                       "no design searched meets every class; loosen the class that misses or allow more GPU types")
    if unreachable:   # as plan names them: the designs meet every other product's class
        doc["note"] = "; ".join([*(f"no design serves {u['product']}: {u['why']} ({u['levers']})" for u in unreachable),
                                 *([doc["note"]] if "note" in doc else []),
                                 *([refused_note] if refused_note else [])])
    progress("fleet design", f"done ({s.simulations} simulations)", 1.0)
    return json_safe(doc)


def _reference(model: str, precision: str | None, gpus: Sequence[str], kv: Mapping[str, Any]) -> Deployment:
    """The deployment whose GPU-work picks the busiest window when none is given: the model on plan's default GPU
    type (else the first of ``gpus`` that holds it) at the design's precision, on the smallest TP that holds it."""
    for g in (DEFAULT_GPU, *gpus):
        try:
            return pool_deployment(Pool("reference", precision=precision, **kv), model, g)
        except ValueError:
            continue
    raise ValueError(f"{model} fits none of the GPU types {', '.join(gpus)} (with the KV pool set)")


def _judged_window(frame: pd.DataFrame, whatif: WhatIf, slo_window_s: float,
                   reference: Deployment) -> tuple[Requests, dict[str, Any]]:
    """The headline's window (``sizing.slo_window``), with arrivals and products: a log without timestamps gets
    Poisson arrivals at its own rate, as ``simulate --fleet`` replays it."""
    stamped = "timestamp" in frame.columns and frame["timestamp"].notna().sum() >= 2
    rate = None if stamped else Workload.from_frame(frame).rate_rps * whatif.traffic_multiplier
    req, sized_on = slo_window(frame, reference, whatif=whatif, slo_window_s=slo_window_s, rate_rps=rate)
    if len(req) == 0:
        raise ValueError("no requests to simulate")
    product = req.product if req.product is not None else np.full(len(req), "all", dtype=object)
    if req.arrival_s is None:
        arrival = np.cumsum(np.random.default_rng(0).exponential(1.0 / rate, size=len(req)))  # type: ignore[operator]
        req = replace(req, arrival_s=arrival - arrival[0])
    return replace(req, product=product), sized_on


def _why(d: dict[str, Any], rank: int, best: dict[str, Any], baseline: dict[str, Any] | None) -> str:
    if not d["meets"]:
        bad = [p for p, o in d["products"].items() if not o["meets"]]
        return f"misses the class of {', '.join(bad)} on the smallest fleet searched"
    words = []
    if rank == 0:
        words.append("cheapest fleet that meets every class")
    else:
        words.append(f"${d['cost_per_hour'] - best['cost_per_hour']:,.2f}/h more than the best")
    if baseline is not None and d["family"] == "shared_fcfs":
        words.append("the baseline: one shared FCFS pool of one GPU type")
    elif baseline is not None and baseline["meets"]:
        delta = baseline["cost_per_hour"] - d["cost_per_hour"]
        pct = delta / baseline["cost_per_hour"] if baseline["cost_per_hour"] else 0.0
        words.append(f"{'saves' if delta > 0 else 'costs'} ${abs(delta):,.2f}/h ({abs(pct):.0%}) against one shared "
                     f"FCFS pool")
    if d.get("grown_on_window"):
        words.append(f"{d['grown_on_window']} replica(s) added to the search's size so that the whole window meets "
                     "every class")
    return "; ".join(words)
