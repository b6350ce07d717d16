"""The Capacity page's "Routers and prefix caches" section: the reuse each router keeps, its TTFT and GPUs.

Each replica keeps its own prefix cache in its KV pool, so the router decides how much of the log's reuse the
fleet really gets. Simulated once per (log, deployment, what-if, rate, fleet, SLOs) on request and held; drawn
only for logs with block hashes or sessions (otherwise the sidebar's prefix-cache share stays an assumption).
"""
from __future__ import annotations

from dataclasses import astuple

import pandas as pd
import streamlit as st

from components.progress import held
from components.widgets import badge, chart, run_on_click, table
from shapeviz.analyses.prefix import has_hashes
from shapeviz.analyses.sessions import has_sessions
from shapeviz.fleet.routing import (
    WINDOW_REQUESTS,
    hit_ratio_figure,
    ideal_hit_ratio,
    reuse_window,
    router_citation,
    router_table,
)
from shapeviz.fleet.sweep import dash
from shapeviz.fleet.words import relative_to_answer
from shapeviz.ingest import LoadedLog
from shapeviz.physics import Deployment
from shapeviz.recommend import LEVER_LABELS, Recommendation, by_lever
from shapeviz.serving import WhatIf
from shapeviz.serving.routers import LABELS, ROUTERS
from shapeviz.text import md_literal

RUN_KEY = "compare_routers_run"
ROUTER_KEY = "capacity_router"
SINGLE_REPLICA = ("Today's fleet is one replica: every router sends every request to the same cache, so the "
                  "four rows at today's fleet are identical by construction. Routers differ from two replicas on: "
                  "see the chart and the GPUs each needs to meet the SLOs.")
RESULTS_KEY = "compare_routers_results"   # {settings: (curve, summary, ideal hit ratio)}, bounded


def _compare(settings: tuple, log: LoadedLog) -> tuple[pd.DataFrame, pd.DataFrame, float | None]:
    # Uncached, with its own bar: the result is held per settings by `held` (a cached function must not write
    # into a bar made outside it; its replay on the next full rerun would raise).
    _digest, dep, whatif, rate_rps, replicas, ttft_slo_ms, tpot_slo_ms = settings
    bar = st.progress(0.0, text="Simulating the routers…")
    try:
        requests = reuse_window(log.frame, WhatIf(*whatif))
        curve, summary = router_table(requests, dep, rate_rps, replicas, ttft_slo_ms, tpot_slo_ms,
                                      progress=lambda f: bar.progress(f, text="Simulating the routers…"))
        return curve, summary, ideal_hit_ratio(requests)
    finally:
        bar.empty()


def render_routers(digest: str, log: LoadedLog, dep: Deployment, whatif: WhatIf, rate_rps: float, replicas: int,
                   ttft_slo_ms: float, tpot_slo_ms: float, recommendations: list[Recommendation],
                   answer: int | None = None, gpu_hour_usd: float | None = None) -> bool:
    """Draw the router comparison: one row per router, the hit ratio against replicas, the cited recommendation;
    each router's fleet in the headline's terms (replicas × TP, GPUs, against the answer's ``answer`` replicas, at
    ``gpu_hour_usd``).

    False while it shows only its choices and button (nothing that the what-if levers move).
    """
    st.subheader("Routers and prefix caches")
    frame = log.frame
    if not (has_hashes(frame) or has_sessions(frame)):
        st.caption("This log has no block hashes or session ids, so the reuse a router keeps cannot be simulated: "
                   "the sidebar's prefix-cache share applies to every request on every replica (an assumption).")
        return False
    source = "block hashes" if has_hashes(frame) else "sessions (each turn reuses the previous turn's context)"
    st.caption(f"Each replica keeps its own prefix cache in its KV pool; which cache a request meets is the router's "
               f"choice. Simulated on the first {WINDOW_REQUESTS:,} requests of your log in arrival order (reuse "
               f"from its {source}), Poisson arrivals at the what-if's rate, caches starting cold.")
    choice = st.selectbox("Router", ROUTERS, format_func=LABELS.get, key=ROUTER_KEY, index=ROUTERS.index("prefix"),
                          help="The router whose figures lead; the table compares all four.")
    settings = (digest, dep, astuple(whatif), rate_rps, replicas, ttft_slo_ms, tpot_slo_ms)
    # A click holds on to every setting but the fleet's size: it follows the headline's (the estimate's replicas,
    # then the simulated answer's)
    clicked = (digest, dep, astuple(whatif), rate_rps, ttft_slo_ms, tpot_slo_ms)
    if not run_on_click("Compare routers", icon=":material/alt_route:", key="compare_routers", settings=clicked,
                        state_key=RUN_KEY):
        st.caption("Four routers × five fleet sizes plus the smallest fleet meeting the SLOs; takes tens of seconds.")
        return False
    st.caption(f"At {rate_rps:,.2f} req/s on {replicas} replicas.")
    if replicas <= 1:
        st.info(SINGLE_REPLICA, icon=":material/info:")
    try:
        curve, summary, ideal = held(RESULTS_KEY, settings, lambda: _compare(settings, log))
    except ValueError as exc:
        st.error(f"Simulation: {md_literal(exc)}", icon=":material/error:")
        return True
    row = summary.set_index("router").loc[choice]
    cols = st.columns(4)
    cols[0].metric("Prefix hit ratio", dash(row["hit_ratio_tokens"], "{:.0%}"),
                   help=f"Share of prompt tokens served from the replicas' caches on {replicas} replicas.")
    cols[1].metric("TTFT p50 / p90 (ms)", f"{dash(row['ttft_p50_ms'])} / {dash(row['ttft_p90_ms'])}")
    cols[2].metric("GPUs meeting the SLOs", "cannot meet" if pd.isna(row["gpus"]) else f"{int(row['gpus'])}",
                   help=None if pd.isna(row["gpus"]) else
                   relative_to_answer(int(row["gpus"]) // dep.tp, answer, dep.tp, gpu_hour_usd))
    cols[3].metric("One shared cache, unbounded", dash(ideal, "{:.0%}"),
                   help="The same requests through one cache that never evicts: the ceiling of any router.")
    badge("simulated")
    table(pd.DataFrame({
        "router": summary["label"],
        f"hit ratio on {replicas} replicas": [dash(v, "{:.1%}") for v in summary["hit_ratio_tokens"]],
        "TTFT p50": [dash(v, "{:,.0f} ms") for v in summary["ttft_p50_ms"]],
        "TTFT p90": [dash(v, "{:,.0f} ms") for v in summary["ttft_p90_ms"]],
        "GPUs meeting the SLOs": ["cannot meet" if pd.isna(v) else
                                   relative_to_answer(int(v) // dep.tp, answer, dep.tp, gpu_hour_usd)
                                   for v in summary["gpus"]],
        "hit ratio there": [dash(v, "{:.1%}") for v in summary["hit_ratio_at_gpus"]],
    }))
    st.caption(f"Each router's fleet is searched on the first {WINDOW_REQUESTS:,} requests with Poisson arrivals; "
               "the headline's answer replays the log's busiest window at its own arrival times, so the two can "
               "differ" + (" (the answer is still being replayed)" if answer is None else "")
               + ". Costs at the sidebar's $/GPU-hour, the price of the headline's cost.")
    chart(hit_ratio_figure(curve), key="router_hit_ratio")
    st.caption("Round-robin and least-tokens spread a conversation's turns over every replica's cache: each cache "
               "holds copies of the same prefixes. Affinity keeps them on one replica, so N small caches act as one "
               "large one. The prefix-aware rule is SGLang router's cache_aware (load guard: in-flight requests "
               "max − min > 64 and max > 1.5 × min → least loaded).")
    cite = router_citation(summary, choice, dep.tp)
    if cite:  # the lever once, with every scope it was recommended for (its reasons are on the Shape page)
        for lever, scopes in by_lever(r for r in recommendations if r.lever == "prefix_cache"):
            where = ", ".join("all traffic" if s == "overall" else s for s in scopes)
            st.markdown(f"**{LEVER_LABELS[lever]}** ({md_literal(where)}): {md_literal(cite)}.")
    return True
