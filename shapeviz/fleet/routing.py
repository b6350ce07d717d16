"""Routers compared on a log: the prefix reuse each one keeps, its latency, and the GPUs it needs.

The reuse a fleet gets is a result, not an input: each replica keeps its own prefix cache in its KV pool
(``shapeviz.serving.prefix_cache``) and the router (``shapeviz.serving.routers``) decides which cache a request
meets. ``router_table`` simulates the same window of the log under every router: the hit ratio against the
replica count (the cost of scaling out without affinity), TTFT at today's fleet, and the fewest GPUs meeting
both p90 SLOs. ``router_citation`` is the sentence the prefix-cache recommendation cites; ``routed_reuse`` is
the hit ratio one router gets on one fleet (``plan --router`` and ``config --router`` plan with it).
"""
from __future__ import annotations

import math
from dataclasses import replace
from typing import Any, Callable, Sequence

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from shapeviz.fleet.levers import smallest_fleet
from shapeviz.fleet.words import relative_to_answer
from shapeviz.physics.steps import Deployment
from shapeviz.plotstyle import FONT, fit_header
from shapeviz.serving.parallel import run_parallel
from shapeviz.serving.planner import Plan, WhatIf, Workload, plan
from shapeviz.serving.prefix_cache import PrefixCache
from shapeviz.serving.routers import LABELS, ROUTERS
from shapeviz.serving.simulator import (
    Requests,
    SimResult,
    requests_from_frame,
    simulate,
)

WINDOW_REQUESTS = 1000                 # the log's first N requests, in arrival order (reuse needs the order)
REPLICA_COUNTS = (1, 2, 4, 8, 16)      # the hit-ratio-against-scale-out chart
ROUTER_COLORS = {"round_robin": "#999999", "random": "#CC79A7", "least_tokens": "#0072B2", "session": "#009E73", "prefix": "#D55E00"}
# Two routers often keep the same reuse (affinity and prefix-aware on a session log): a marker and a dash of its own
# each, and the later-drawn lines thinner, keep every line visible where they coincide.
ROUTER_STYLES = {"round_robin": ("circle", "solid", 3.0), "random": ("triangle-up", "longdash", 2.8),
                 "least_tokens": ("square", "dot", 2.6),
                 "session": ("diamond", "dash", 2.2), "prefix": ("x", "dashdot", 1.8)}


def reuse_window(frame: pd.DataFrame, whatif: WhatIf, n: int = WINDOW_REQUESTS,
                 block_size: int | None = None) -> Requests:
    """The log's first ``n`` requests in arrival order, with their prompt blocks (hashes or sessions).

    A random sample would break the sessions and shared prefixes that reuse comes from; the caches start cold at
    the window's start, as the offline hit ratio does at the log's.
    """
    base = requests_from_frame(frame, replace(whatif, traffic_multiplier=1.0), block_size=block_size)
    return base.take(np.arange(min(int(n), len(base))))


def routed_run(requests: Requests, dep: Deployment, rate_rps: float, replicas: int, router: str,
               ttft_slo_ms: float, tpot_slo_ms: float, seed: int = 0) -> SimResult:
    """One fleet under one router: Poisson arrivals at ``rate_rps`` over the window, in its order."""
    return simulate(requests, dep, arrivals="poisson", rate_rps=rate_rps, replicas=replicas, router=router,
                    seed=seed, ttft_slo_ms=ttft_slo_ms, tpot_slo_ms=tpot_slo_ms)


def _row(router: str, replicas: int, dep: Deployment, res: SimResult) -> dict[str, Any]:
    s = res.summary()
    return {"router": router, "replicas": replicas, "gpus": replicas * dep.tp,
            "hit_ratio_tokens": res.prefix.get("hit_ratio_tokens"), "source": res.prefix.get("source"),
            "ttft_p50_ms": s["ttft_ms"]["p50"], "ttft_p90_ms": s["ttft_ms"]["p90"], "tpot_p90_ms": s["tpot_ms"]["p90"],
            "goodput": s["goodput"], "saturated": s["saturated"]}


def router_table(requests: Requests, dep: Deployment, rate_rps: float, today_replicas: int, ttft_slo_ms: float,
                 tpot_slo_ms: float, routers: Sequence[str] = ROUTERS, counts: Sequence[int] = REPLICA_COUNTS,
                 progress: Callable[[float], None] | None = None, workers: int | None = 1,
                 scheduler: str | None = None) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Per router: (scale-out curve, one row per replica count) and (summary: today's fleet and the fewest GPUs).

    Summary columns: router, label, hit_ratio_tokens / ttft_p50_ms / ttft_p90_ms at today's replicas, gpus (the
    fewest meeting both p90 SLOs with a queue that keeps up; None if none up to 256 replicas) and the hit ratio
    at that size. ``workers`` / ``scheduler``: the curve's replays run side by side (``serving.parallel``), in local
    processes or on a Dask cluster; the default runs them here, one after the other.
    """
    runs: dict[tuple[str, int], SimResult] = {}
    if workers != 1 or scheduler:
        keys = [(router, k) for router in routers for k in dict.fromkeys([*counts, today_replicas])]
        jobs = [(requests, dep, rate_rps, k, router, ttft_slo_ms, tpot_slo_ms) for router, k in keys]
        runs.update(zip(keys, run_parallel(routed_run, jobs, workers=workers, scheduler=scheduler)))
    steps = len(routers) * (len(counts) + 1)
    done = [0]

    def run(router: str, k: int) -> SimResult:
        if (router, k) not in runs:
            runs[(router, k)] = routed_run(requests, dep, rate_rps, k, router, ttft_slo_ms, tpot_slo_ms)
        return runs[(router, k)]

    def tick() -> None:
        done[0] += 1
        if progress is not None:
            progress(min(done[0] / steps, 1.0))

    curve, summary = [], []
    for router in routers:
        for k in counts:
            curve.append(_row(router, k, dep, run(router, k)))
            tick()
        today = run(router, today_replicas)
        best_k, best = _fewest(lambda k, r=router: run(r, k), ttft_slo_ms, tpot_slo_ms)
        tick()
        t = _row(router, today_replicas, dep, today)
        summary.append({"router": router, "label": LABELS[router], "replicas_today": today_replicas,
                        "hit_ratio_tokens": t["hit_ratio_tokens"], "ttft_p50_ms": t["ttft_p50_ms"],
                        "ttft_p90_ms": t["ttft_p90_ms"], "tpot_p90_ms": t["tpot_p90_ms"], "goodput": t["goodput"],
                        "gpus": None if best_k is None else best_k * dep.tp,
                        "hit_ratio_at_gpus": None if best_k is None else best.prefix.get("hit_ratio_tokens"),
                        "source": t["source"], "notes": "; ".join(today.notes)})
    table = pd.DataFrame(summary)
    table["gpus"] = table["gpus"].astype("Int64")
    return pd.DataFrame(curve), table


def _fewest(run: Callable[[int], SimResult], ttft_slo_ms: float, tpot_slo_ms: float,
            upper: int = 256) -> tuple[int | None, SimResult]:
    """``levers.smallest_fleet``, stopping early when doubling the fleet no longer buys TTFT (prefill-bound)."""
    k, last = 1, None
    while k <= upper:
        res = run(k)
        s = res.summary()
        p90 = s["ttft_ms"]["p90"]
        if last is not None and not res.saturated and p90 is not None and p90 > ttft_slo_ms and p90 > 0.9 * last:
            return None, res   # twice the replicas, under 10% less TTFT: no fleet size meets the SLO
        if not res.saturated and p90 is not None and p90 <= ttft_slo_ms:
            break
        last = p90 if not res.saturated else None
        k *= 2
    else:
        return None, res
    return smallest_fleet(run, ttft_slo_ms, tpot_slo_ms, start=max(k // 2, 1), upper=k)


def ideal_hit_ratio(requests: Requests) -> float | None:
    """The window's reuse through one cache that never evicts (the ceiling any router and fleet can reach)."""
    blocks = requests.blocks
    if blocks is None:
        return None
    cache = PrefixCache(blocks.block_size, math.inf)
    look, keep = blocks.lists()
    n = requests.input_tokens
    hit = 0
    for i in range(len(look)):
        if look[i]:
            hit += max(min(cache.match(look[i]) * blocks.block_size, int(n[i]) - 1), 0)
            cache.pin(look[i])
            cache.release(look[i], keep[i])
    total = int(n[blocks.with_blocks].sum())
    return hit / total if total else None


def router_citation(table: pd.DataFrame, router: str | None = None, tp: int = 1) -> str | None:
    """The sentence the prefix-cache recommendation cites: ``router``'s simulated reuse and GPUs vs round-robin
    (the router the user selected; without one, the router needing the fewest GPUs), fleets as replicas × TP."""
    if table.empty or table["hit_ratio_tokens"].isna().all() or (table["source"] != table["source"].iloc[0]).any():
        return None
    if table["source"].iloc[0] not in ("block_hashes", "sessions"):
        return None
    rr = table.loc[table["router"] == "round_robin"]
    if router is not None and (table["router"] == router).any():
        best = table.loc[table["router"] == router].iloc[0]
    else:
        ranked = table.assign(_g=table["gpus"].astype("float64").fillna(np.inf)).sort_values(
            ["_g", "hit_ratio_tokens"], ascending=[True, False])
        best = ranked.iloc[0]
    k = int(best["replicas_today"])
    text = (f"simulated: the {best['label']} router keeps {best['hit_ratio_tokens']:.0%} of prompt tokens cached "
            f"on {k} replicas")
    if not rr.empty and best["router"] != "round_robin":
        r = rr.iloc[0]
        text += f" against {r['hit_ratio_tokens']:.0%} round-robin"
        if not pd.isna(best["gpus"]) and not pd.isna(r["gpus"]) and int(best["gpus"]) != int(r["gpus"]):
            text += (f", and meets the p90 SLOs on {_fleet(int(best['gpus']), tp)} instead of "
                     f"{_fleet(int(r['gpus']), tp)}")
    elif not pd.isna(best["gpus"]):
        text += f", and meets the p90 SLOs on {_fleet(int(best['gpus']), tp)}"
    return text


def _fleet(gpus: int, tp: int) -> str:
    return relative_to_answer(gpus // tp, None, tp)


def routed_reuse(frame: pd.DataFrame, dep: Deployment, router: str, replicas: int, rate_rps: float,
                 whatif: WhatIf, ttft_slo_ms: float, tpot_slo_ms: float, *, block_size: int | None = None,
                 n: int = 2 * WINDOW_REQUESTS) -> dict[str, Any]:
    """The prefix hit ratio ``router`` keeps on ``replicas`` replicas (the ``prefix`` block of ``simulate --json``)."""
    res = routed_run(reuse_window(frame, whatif, n, block_size), dep, rate_rps, max(int(replicas), 1), router,
                     ttft_slo_ms, tpot_slo_ms)
    return {**res.prefix, "replicas": int(replicas), "window_requests": int(len(res.requests))}


def hit_ratio_figure(curve: pd.DataFrame, height: int = 360) -> go.Figure:
    """Simulated prefix hit ratio against the replica count, one line per router (the cost of scale-out)."""
    fig = go.Figure()
    for router, g in curve.groupby("router", sort=False):
        symbol, dash_style, width = ROUTER_STYLES.get(str(router), ("circle", "solid", 2.0))
        fig.add_trace(go.Scatter(
            x=g["replicas"], y=g["hit_ratio_tokens"], mode="lines+markers", name=LABELS[str(router)],
            line=dict(color=ROUTER_COLORS.get(str(router)), dash=dash_style, width=width),
            marker=dict(symbol=symbol, size=9 if symbol != "x" else 10),
            hovertemplate="%{x} replicas: %{y:.1%} of prompt tokens from the cache<extra></extra>"))
    fig.update_layout(template="plotly_white", font=FONT,
                      xaxis=dict(title="replicas", type="log", tickvals=list(curve["replicas"].unique())),
                      yaxis=dict(title="prompt tokens from the cache", tickformat=".0%", rangemode="tozero"))
    return fit_header(fig, "Prefix hit ratio against replicas, per router",
                      "simulated: each replica keeps its own cache in its KV pool", height=height)


def plan_with_router(workload: Workload, frame: pd.DataFrame | None, dep: Deployment, router: str, whatif: WhatIf,
                     ttft_slo_ms: float, tpot_slo_ms: float, gpu_hour_usd: float | None = None, *,
                     block_size: int | None = None) -> tuple[Plan, dict[str, Any]]:
    """The analytic plan with the prefix reuse ``router`` keeps on the planned fleet (``plan/config --router``).

    Plan, simulate the log's first requests on the planned replicas under the router, plan again with that hit
    ratio as the cached share; once more if the fleet size changed. Without block hashes or sessions the router
    cannot change the reuse, and the plan is the plain one (the ``prefix`` block says so).
    """
    planned = plan(workload, dep, whatif, ttft_slo_ms, tpot_slo_ms, gpu_hour_usd)
    if frame is None:
        return planned, {"router": router, "source": "none", "hit_ratio_tokens": None,
                         "note": "no rows to replay (a fixed shape, or a log read as a sketch with --engine dask): "
                                 "the router cannot change the reuse"}
    rate = workload.rate_rps * whatif.traffic_multiplier
    routed: dict[str, Any] = {}
    for _ in range(2):
        k = max(int(planned.replicas or 1), 1)
        routed = routed_reuse(frame, dep, router, k, rate, whatif, ttft_slo_ms, tpot_slo_ms, block_size=block_size)
        if routed.get("source") not in ("block_hashes", "sessions") or routed.get("hit_ratio_tokens") is None:
            routed["note"] = ("the log has no block hashes or sessions: the router cannot change the reuse, the plan "
                              "keeps the log's reported cached tokens or the what-if share")
            return planned, routed
        share = min(float(routed["hit_ratio_tokens"]), 0.99)
        replanned = plan(workload, dep, replace(whatif, cache_hit=share), ttft_slo_ms, tpot_slo_ms, gpu_hour_usd)
        same = replanned.replicas == planned.replicas
        planned = replanned
        if same:
            break
    routed["note"] = (f"planned with the {routed['hit_ratio_tokens']:.1%} of prompt tokens the {LABELS[router]} "
                      f"router keeps cached on {routed['replicas']} replica(s) (simulated on the log's first "
                      f"{routed['window_requests']:,} requests)")
    return planned, routed
