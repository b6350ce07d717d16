"""The scheduling levers the planner's rules name, quantified by simulation against the same SLOs.

For each lever (priority queues, a smaller prefill chunk, disaggregated prefill/decode pools, one pool per
workload corner) ``simulate_levers`` finds the fewest GPUs whose simulated p90 TTFT and TPOT meet the SLOs and
whose queue keeps up, next to the same sizing of today's FCFS colocated fleet. ``lever_citations`` turns the
table into the sentence the recommendations cite ("split pools: 18 → 12 GPUs at the same p90 SLOs").
"""
from __future__ import annotations

import math
from dataclasses import replace
from typing import Any, Callable

import numpy as np
import pandas as pd

from shapeviz.analyses.shapes import SHAPES, classify_codes
from shapeviz.fleet.words import answer_offset, usd_per_hour_words
from shapeviz.physics.steps import Deployment
from shapeviz.serving.simulator import Requests, simulate

SMALL_CHUNK_TOKENS = 2048   # the chunked-prefill lever: vLLM's long-standing default budget with chunking on
MAX_REPLICAS_SEARCHED = 256
MIN_POOL_REQUESTS = 30      # corners with fewer sampled requests join the largest pool


def _meets(result: Any, ttft_slo_ms: float, tpot_slo_ms: float) -> bool:
    s = result.summary()
    tpot = s["tpot_ms"]["p90"]
    return (not s["saturated"] and s["ttft_ms"]["p90"] is not None and s["ttft_ms"]["p90"] <= ttft_slo_ms
            and (tpot is None or tpot <= tpot_slo_ms))


def smallest_fleet(run: Callable[[int], Any], ttft_slo_ms: float, tpot_slo_ms: float,
                   start: int = 1, upper: int = MAX_REPLICAS_SEARCHED) -> tuple[int | None, Any]:
    """Fewest replicas ``k`` with ``run(k)`` meeting both p90 SLOs (doubling, then bisection); (None, last) if none."""
    k, last_fail, found = max(start, 1), 0, None
    results: dict[int, Any] = {}
    while k <= upper:
        results[k] = run(k)
        if _meets(results[k], ttft_slo_ms, tpot_slo_ms):
            found = k
            break
        last_fail, k = k, k * 2
    if found is None:
        return None, results[max(results)]
    lo, hi = last_fail, found
    while hi - lo > 1:
        mid = (lo + hi) // 2
        results[mid] = run(mid)
        if _meets(results[mid], ttft_slo_ms, tpot_slo_ms):
            hi = mid
        else:
            lo = mid
    return hi, results[hi]


class _Combined:
    """Several pools' per-request results read as one fleet (the summary keys ``_row`` uses)."""

    def __init__(self, requests: pd.DataFrame, ttft_slo_ms: float, tpot_slo_ms: float) -> None:
        self.requests = requests
        self.ttft_slo_ms, self.tpot_slo_ms = ttft_slo_ms, tpot_slo_ms

    def summary(self) -> dict[str, Any]:
        r = self.requests
        tpot_ok = r["tpot_ms"].isna() | (r["tpot_ms"] <= self.tpot_slo_ms)
        tpot = r["tpot_ms"].dropna()
        return {"ttft_ms": {"p90": float(r["ttft_ms"].quantile(0.9))},
                "tpot_ms": {"p90": float(tpot.quantile(0.9)) if len(tpot) else None},
                "goodput": float(((r["ttft_ms"] <= self.ttft_slo_ms) & tpot_ok).mean())}


def _row(lever: str, label: str, gpus: int | None, result: Any, detail: str) -> dict[str, Any]:
    s = result.summary()
    return {"lever": lever, "label": label, "gpus": gpus, "ttft_p90_ms": s["ttft_ms"]["p90"],
            "tpot_p90_ms": s["tpot_ms"]["p90"], "goodput": s["goodput"], "detail": detail}


def _subset(req: Requests, mask: np.ndarray) -> Requests:
    """The requests of one corner's pool; their arrivals are drawn anew at that pool's rate."""
    return replace(req.take(mask), arrival_s=None)


def simulate_levers(requests: Requests, dep: Deployment, rate_rps: float, ttft_slo_ms: float, tpot_slo_ms: float,
                    seed: int = 0, progress: Callable[[float], None] | None = None) -> pd.DataFrame:
    """GPUs each scheduling lever needs to meet both p90 SLOs at ``rate_rps`` (Poisson), by simulation.

    Rows: ``baseline`` (FCFS, colocated, 8192-token iterations), ``priority_queues`` (shortest prompt first),
    ``chunked_prefill`` (2048-token iterations), ``disaggregate`` (prefill + decode pools) and ``split_pools``
    (one pool per corner, each at its share of the rate). ``gpus`` is None where no fleet up to 256 replicas
    meets the SLOs.
    """
    if not (math.isfinite(rate_rps) and rate_rps > 0):
        raise ValueError(f"rate_rps={rate_rps!r} must be a positive request rate")
    steps = 6
    done = [0]

    def tick() -> None:
        done[0] += 1
        if progress is not None:
            progress(min(done[0] / steps, 1.0))

    def colocated(**kw: Any) -> Callable[[int], Any]:
        return lambda k: simulate(requests, dep, arrivals="poisson", rate_rps=rate_rps, replicas=k, seed=seed,
                                  router="least_tokens", ttft_slo_ms=ttft_slo_ms, tpot_slo_ms=tpot_slo_ms, **kw)

    rows = []
    base_k, base = smallest_fleet(colocated(), ttft_slo_ms, tpot_slo_ms)
    rows.append(_row("baseline", "today: FCFS, colocated", base_k and base_k * dep.tp, base, "8192-token iterations"))
    tick()
    start = max((base_k or 2) // 4, 1)
    k, res = smallest_fleet(colocated(scheduler="priority"), ttft_slo_ms, tpot_slo_ms, start=start)
    rows.append(_row("priority_queues", "priority queues (short prompts first)", k and k * dep.tp, res,
                     "shortest uncached prompt first"))
    tick()
    k, res = smallest_fleet(colocated(max_num_batched_tokens=SMALL_CHUNK_TOKENS), ttft_slo_ms, tpot_slo_ms, start=start)
    rows.append(_row("chunked_prefill", f"prefill chunk {SMALL_CHUNK_TOKENS:,} tokens", k and k * dep.tp, res,
                     f"{SMALL_CHUNK_TOKENS}-token iterations"))
    tick()

    # Disaggregated: the fewest prefill replicas with a generous decode pool, then the fewest decode replicas.
    generous = max(base_k or 4, 2)

    def split(p: int, d: int) -> Any:
        return simulate(requests, dep, arrivals="poisson", rate_rps=rate_rps, disaggregate=(p, d), seed=seed,
                        router="least_tokens", ttft_slo_ms=ttft_slo_ms, tpot_slo_ms=tpot_slo_ms)

    p_k, _ = smallest_fleet(lambda p: split(p, generous), ttft_slo_ms, tpot_slo_ms)
    if p_k is not None:
        d_k, res = smallest_fleet(lambda d: split(p_k, d), ttft_slo_ms, tpot_slo_ms)
        gpus = None if d_k is None else (p_k + d_k) * dep.tp
        detail = f"{p_k} prefill + {d_k} decode replicas" if d_k else "no decode pool meets the TPOT SLO"
    else:
        res, gpus, detail = split(1, generous), None, "no prefill pool meets the TTFT SLO (the KV transfer adds to it)"
    rows.append(_row("disaggregate", "disaggregated prefill / decode", gpus, res, detail))
    tick()

    # One pool per corner, each at its share of the traffic, judged on the fleet-wide p90 of all requests
    # (the same SLO as the shared pool: a pool of long prompts is not asked to beat its own prefill time).
    codes = classify_codes(requests.input_tokens, requests.output_tokens)
    counts = np.bincount(codes, minlength=len(SHAPES))
    codes = np.where(counts[codes] < MIN_POOL_REQUESTS, int(counts.argmax()), codes)
    pools = [(SHAPES[int(c)], _subset(requests, codes == c), float((codes == c).mean())) for c in np.unique(codes)]
    runs: dict[tuple[int, int], Any] = {}

    def pool_run(i: int, k: int) -> Any:
        if (i, k) not in runs:
            _, sub, share = pools[i]
            runs[(i, k)] = simulate(sub, dep, arrivals="poisson", rate_rps=rate_rps * share, replicas=k, seed=seed,
                                    router="least_tokens", ttft_slo_ms=ttft_slo_ms, tpot_slo_ms=tpot_slo_ms)
        return runs[(i, k)]

    def score(ks: list[int]) -> tuple[float, bool, pd.DataFrame]:
        frames = [pool_run(i, k).requests for i, k in enumerate(ks)]
        both = pd.concat(frames, ignore_index=True)
        sat = any(pool_run(i, k).saturated for i, k in enumerate(ks))
        t90 = float(both["ttft_ms"].quantile(0.9)) / ttft_slo_ms
        p90 = both["tpot_ms"].dropna()
        d90 = float(p90.quantile(0.9)) / tpot_slo_ms if len(p90) else 0.0
        return max(t90, d90), sat, both

    ks = []
    for i in range(len(pools)):  # each pool's smallest size that keeps up with its traffic
        k = 1
        while pool_run(i, k).saturated and k < MAX_REPLICAS_SEARCHED:
            k *= 2
        ks.append(k)
    worst, sat, both = score(ks)
    while (sat or worst > 1.0) and sum(ks) < MAX_REPLICAS_SEARCHED:
        trials = []
        for i in range(len(pools)):
            grown = ks.copy()
            grown[i] += 1
            trials.append((score(grown)[0], i))
        _, best = min(trials)
        ks[best] += 1
        worst, sat, both = score(ks)
    met = not sat and worst <= 1.0
    detail = "replicas: " + ", ".join(f"{name} {k}" for (name, _, _), k in zip(pools, ks))
    split_result = _Combined(both, ttft_slo_ms, tpot_slo_ms)
    rows.append(_row("split_pools", "one pool per corner", sum(ks) * dep.tp if met else None, split_result, detail))
    tick()
    table = pd.DataFrame(rows)
    table["gpus"] = table["gpus"].astype("Int64")
    tick()
    return table


def lever_citations(table: pd.DataFrame, tp: int = 1, answer: int | None = None,
                    gpu_hour_usd: float | None = None) -> dict[str, str]:
    """Per lever, the simulated change against this search's baseline, in the headline's terms: "simulated: one pool
    per corner saves 3 → 2 × TP4 = 12 → 8 GPUs (−$10/h) against this search's FCFS baseline (the answer + 1) at the
    same p90 SLOs (...)". ``tp`` GPUs per replica, ``answer`` the headline's replicas (None while it is replayed),
    ``gpu_hour_usd`` the price every cost on the page uses."""
    base = table.loc[table["lever"] == "baseline", "gpus"]
    if base.empty or pd.isna(base.iloc[0]):
        return {}
    b = int(base.iloc[0])
    against = "this search's FCFS baseline" + ("" if answer is None else f" ({answer_offset(b // tp, answer)})")
    out = {}
    for r in table[table["lever"] != "baseline"].itertuples(index=False):
        if pd.isna(r.gpus):
            out[r.lever] = f"simulated: {r.label} cannot meet the p90 SLOs ({r.detail})"
            continue
        g = int(r.gpus)
        verdict = "saves" if g < b else "costs" if g > b else "changes nothing:"
        cost = "" if gpu_hour_usd is None or g == b else (
            f" ({'+' if g > b else '−'}{usd_per_hour_words(abs(g - b) * gpu_hour_usd)})")
        change = (f"{b // tp} → {g // tp} × TP{tp} = {b} → {g} GPUs{cost}" if g != b
                  else f"{b // tp} × TP{tp} = {b} GPUs either way")
        out[r.lever] = f"simulated: {r.label} {verdict} {change} against {against} at the same p90 SLOs ({r.detail})"
    return out
