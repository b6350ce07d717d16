"""The Capacity page's "Simulate this fleet" section: the discrete-event simulator next to the analytic curve.

Each load level is simulated once per (log, deployment, what-if, SLOs, fleet) and cached; a progress bar
advances as the levels complete. Everything drawn here is labelled **simulated**.
"""
from __future__ import annotations

from dataclasses import astuple

import pandas as pd
import streamlit as st

from components.fleet import render_product_outcomes
from components.widgets import chart, run_on_click, table
from shapeviz.fleet.levers import lever_citations, simulate_levers
from shapeviz.fleet.sizing import Sizing
from shapeviz.fleet.words import relative_to_answer
from shapeviz.fleet.sweep import (
    DEFAULT_POINT_REQUESTS,
    dash,
    disagreements,
    distribution_figure,
    goodput_figure,
    latency_load_figure,
    sample_requests,
    simulated_point,
    sweep_table,
)
from shapeviz.ingest import LoadedLog
from shapeviz.physics import Deployment
from shapeviz.recommend import LEVER_LABELS, Recommendation, by_lever
from shapeviz.serving import WhatIf
from shapeviz.serving.sim_calibrate import LogCalibration, fit_to_log, latency_columns
from shapeviz.serving.simulator import SimResult
from shapeviz.text import md_literal

SIM_MULTIPLIERS = (0.5, 1.0, 1.5, 2.0, 3.0)
RUN_KEY = "simulate_fleet_run"
LEVERS_KEY = "simulate_levers_run"
LEVER_REQUESTS = 1000
CALIBRATE_KEY = "simulate_calibration_run"


@st.cache_resource(max_entries=8, ttl=6 * 3600, scope="session", show_spinner=False)
def _calibration(digest: str, dep: Deployment, replicas: int, _log: LoadedLog) -> LogCalibration:
    return fit_to_log(_log.frame, dep, replicas)


def _calibrates(log: LoadedLog) -> bool:
    """The log carries latencies and timestamps: the section offers to fit today's fleet to them."""
    return bool(latency_columns(log.frame)) and "timestamp" in log.frame.columns


def _render_calibration(digest: str, log: LoadedLog, dep: Deployment, replicas: int) -> Deployment | None:
    """When the log carries latencies: fit today's fleet to them; the calibrated deployment if the user uses it."""
    if not _calibrates(log):
        return None
    st.markdown("**Calibrate to your log**: your log carries measured latencies. State today's fleet (the "
                "sidebar's GPU, model and TP) and fit how fast it really runs.")
    cols = st.columns([0.3, 0.3, 0.4])
    today = int(cols[0].number_input("Today's replicas", min_value=1, max_value=10_000, value=replicas, step=1,
                                     key="calibrate_replicas"))
    if cols[1].button("Calibrate", icon=":material/tune:", key="calibrate_to_log"):
        st.session_state[CALIBRATE_KEY] = (digest, dep, today)
    if st.session_state.get(CALIBRATE_KEY) != (digest, dep, today):
        return None
    with st.spinner("Replaying your log on today's fleet…"):
        try:
            cal = _calibration(digest, dep, today, log)
        except ValueError as exc:
            st.error(f"Calibration: {md_literal(exc)}", icon=":material/error:")
            return None
    st.markdown(cal.describe())
    shown = pd.concat([cal.before.assign(fit="before"), cal.after.assign(fit=cal.label)], ignore_index=True)
    table(pd.DataFrame({
        "fit": shown["fit"], "product": shown["product"], "latency": shown["latency"].str.replace("_ms", "").str.upper(),
        **{c.replace("_", " "): [dash(v, "{:,.0f} ms") for v in shown[c]]
           for c in ("measured_p50", "simulated_p50", "measured_p90", "simulated_p90")},
    }))
    use = cols[2].toggle("Use it below", value=True, key="calibrate_use",
                         help="Simulate this fleet with the fitted correction (labelled 'calibrated to your log').")
    return cal.deployment if use else None


@st.cache_resource(max_entries=16, ttl=6 * 3600, scope="session", show_spinner=False)
def _levers(digest: str, dep: Deployment, whatif: tuple, rate_rps: float, ttft_slo_ms: float, tpot_slo_ms: float,
            _log: LoadedLog) -> pd.DataFrame:
    requests = sample_requests(_log.frame, WhatIf(*whatif), LEVER_REQUESTS)
    return simulate_levers(requests, dep, rate_rps, ttft_slo_ms, tpot_slo_ms)


@st.cache_resource(max_entries=64, ttl=6 * 3600, scope="session", show_spinner=False)
def _point(digest: str, dep: Deployment, whatif: tuple, rate_rps: float, replicas: int, ttft_slo_ms: float,
           tpot_slo_ms: float, _log: LoadedLog) -> SimResult:
    requests = sample_requests(_log.frame, WhatIf(*whatif), DEFAULT_POINT_REQUESTS)
    return simulated_point(requests, dep, rate_rps, replicas, ttft_slo_ms, tpot_slo_ms)


def render_simulation(digest: str, log: LoadedLog, dep: Deployment, whatif: WhatIf, rate_rps: float,
                      replicas: int, ttft_slo_ms: float, tpot_slo_ms: float, analytic: pd.DataFrame,
                      recommendations: list[Recommendation] | None = None, classes: dict | None = None,
                      headline: Sizing | None = None, gpu_hour_usd: float | None = None) -> bool:
    """Draw "Simulate this fleet": run on request, then the curves, distributions, goodput and disagreements
    (``headline``: the headline's sizing, whose replay this section's 1× point is set beside, with what differs;
    ``gpu_hour_usd``: the price the headline's cost uses, which the levers' fleets are priced at).

    False while it shows only its button and caption (nothing that the what-if levers move).
    """
    st.subheader("Simulate this fleet")
    calibrated = _render_calibration(digest, log, dep, replicas)
    if calibrated is not None:
        dep = calibrated
        st.badge("calibrated to your log", color="green", help="Efficiencies fitted to your log's latencies.")
    st.caption(f"A discrete-event replay of {DEFAULT_POINT_REQUESTS:,} requests drawn from your log on the plan's "
               "fleet (the load curve's): an iteration-level scheduler with chunked prefill and a KV pool, Poisson "
               "arrivals at each load, step times from the same calibrated physics as the plan.")
    # What a click holds on to: every setting but the fleet's size, which is the headline's. Clicked once, the section
    # follows it (the estimate's replicas, then the simulated answer's); a lever move shows the button again.
    clicked = (digest, dep, astuple(whatif), rate_rps, ttft_slo_ms, tpot_slo_ms)
    if not run_on_click("Simulate this fleet", icon=":material/play_arrow:", key="simulate_fleet", settings=clicked,
                        state_key=RUN_KEY):
        st.caption("Takes a few seconds; results are kept for this log and these settings.")
        return _calibrates(log)   # its "today's replicas" starts at the plan's, which the levers move
    st.caption(f"On {replicas} × TP{dep.tp} replicas ({replicas * dep.tp} GPUs) at {rate_rps:,.2f} req/s today.")
    if headline is not None and headline.answer is not None:   # one fleet, two replays: say what differs
        st.caption(md_literal(
            f"The headline's figures for {headline.answer.replicas} × TP{dep.tp} (TTFT p90 "
            f"{dash(headline.answer.ttft_ms.get('p90'), '{:,.0f} ms')}, TPOT p90 "
            f"{dash(headline.answer.tpot_ms.get('p90'), '{:,.0f} ms')}) replay {headline.sized_on.get('window', '')} "
            f"({headline.sized_on.get('requests', 0):,} requests at the log's own arrival times); this section "
            f"replays {DEFAULT_POINT_REQUESTS:,} requests drawn from the whole log with Poisson arrivals at each "
            "load (seed 0), so its 1× point differs from the headline by its window, its requests and its arrivals. "
            "The headline is the answer."))
    progress = st.progress(0.0, text="Simulating…")
    points: dict[float, SimResult] = {}
    try:
        for i, mult in enumerate(SIM_MULTIPLIERS):
            points[mult] = _point(digest, dep, astuple(whatif), rate_rps * mult, replicas, ttft_slo_ms,
                                  tpot_slo_ms, log)
            progress.progress((i + 1) / len(SIM_MULTIPLIERS), text=f"Simulated ×{mult:g} traffic")
    except ValueError as exc:  # e.g. a request longer than one replica's KV pool
        progress.empty()
        st.error(f"Simulation: {md_literal(exc)}", icon=":material/error:")
        return True
    progress.empty()
    sweep = sweep_table(points, analytic)
    today = points[1.0].summary()
    cols = st.columns(4)
    cols[0].metric("Simulated TTFT p90", dash(today["ttft_ms"]["p90"], "{:,.0f} ms"))
    cols[1].metric("Simulated TPOT p90", dash(today["tpot_ms"]["p90"], "{:,.0f} ms"))
    cols[2].metric("Simulated goodput", dash(today["goodput"], "{:.0%}"),
                   help="Share of requests meeting both SLOs (TTFT and TPOT).")
    cols[3].metric("Queue at today's load", "grows" if today["saturated"] else "stable",
                   help="'grows': the fleet serves fewer requests than arrive, the queue grows without bound.")
    st.badge("simulated", color="violet", help="From the discrete-event simulator, not measured.")
    for line in disagreements(sweep):
        st.warning(line, icon=":material/compare_arrows:")
    chart(latency_load_figure(sweep, ttft_slo_ms, tpot_slo_ms, replicas * dep.tp), key="sim_load_curve")
    chart(distribution_figure(points[1.0], ttft_slo_ms, tpot_slo_ms), key="sim_distribution")
    if classes:
        st.markdown("**What each product gets at today's load**, against its own class (simulated)")
        render_product_outcomes(points[1.0].requests, classes)
    chart(goodput_figure(sweep), key="sim_goodput")
    shown = pd.DataFrame({
        "traffic": [f"×{m:g}" for m in sweep["traffic_multiplier"]],
        "TTFT p90 simulated": [dash(v, "{:,.0f} ms") for v in sweep["sim_ttft_p90_ms"]],
        "TTFT p90 analytic": [dash(v, "{:,.0f} ms") for v in sweep["ttft_p90_ms"]],
        "TPOT p90 simulated": [dash(v, "{:,.0f} ms") for v in sweep["sim_tpot_p90_ms"]],
        "TPOT p90 analytic": [dash(v, "{:,.0f} ms") for v in sweep["tpot_p90_ms"]],
        "goodput": [dash(v, "{:.0%}") for v in sweep["goodput"]],
        "queue": ["grows" if s else "stable" for s in sweep["sim_saturated"]],
    })
    table(shown)
    answer = None if headline is None or headline.answer is None else headline.replicas
    _render_levers(clicked, log, dep, whatif, rate_rps, ttft_slo_ms, tpot_slo_ms, recommendations or [], answer,
                   gpu_hour_usd)
    return True


def _render_levers(clicked: tuple, log: LoadedLog, dep: Deployment, whatif: WhatIf, rate_rps: float,
                   ttft_slo_ms: float, tpot_slo_ms: float, recommendations: list[Recommendation],
                   answer: int | None = None, gpu_hour_usd: float | None = None) -> None:
    """The scheduling levers sized by simulation, each fleet in the headline's terms (replicas × TP, GPUs, against
    the answer's ``answer`` replicas, at ``gpu_hour_usd``), and the recommendations citing the simulated gain."""
    st.markdown("**Scheduling levers, sized by simulation** (the fewest GPUs meeting both p90 SLOs)")
    if not run_on_click("Simulate the levers", icon=":material/tune:", key="simulate_levers", settings=clicked,
                        state_key=LEVERS_KEY):
        st.caption(f"Priority queues, a smaller prefill chunk, disaggregation and one pool per corner, each "
                   f"searched on {LEVER_REQUESTS:,} requests of your log; takes tens of seconds.")
        return
    with st.spinner("Simulating the levers…"):
        try:
            levers = _levers(clicked[0], dep, astuple(whatif), rate_rps, ttft_slo_ms, tpot_slo_ms, log)
        except ValueError as exc:
            st.error(f"Simulation: {md_literal(exc)}", icon=":material/error:")
            return
    tp = dep.tp
    table(pd.DataFrame({
        "lever": levers["label"],
        "GPUs": ["cannot meet" if pd.isna(v) else relative_to_answer(int(v) // tp, answer, tp, gpu_hour_usd)
                  for v in levers["gpus"]],
        "TTFT p90": [dash(v, "{:,.0f} ms") for v in levers["ttft_p90_ms"]],
        "TPOT p90": [dash(v, "{:,.0f} ms") for v in levers["tpot_p90_ms"]],
        "goodput": [dash(v, "{:.0%}") for v in levers["goodput"]],
        "how": levers["detail"],
    }))
    st.badge("simulated", color="violet", help="From the discrete-event simulator, not measured.")
    st.caption(md_literal(_levers_against_answer(levers, tp, answer)))
    cites = lever_citations(levers, tp, answer, gpu_hour_usd)
    # each lever once, with every scope it was recommended for: its reasons are on the Shape page, its gain here
    for lever, scopes in by_lever(r for r in recommendations if r.lever in cites):
        where = ", ".join("all traffic" if s == "overall" else s for s in scopes)
        st.markdown(f"- **{LEVER_LABELS[lever]}** ({md_literal(where)}): {md_literal(cites[lever])}.")


def _levers_against_answer(levers: pd.DataFrame, tp: int, answer: int | None) -> str:
    """Why this search's baseline is not the headline's fleet, and how the two stand."""
    base = levers.loc[levers["lever"] == "baseline", "gpus"]
    today = ("no colocated fleet searched meets the SLOs" if base.empty or pd.isna(base.iloc[0])
             else relative_to_answer(int(base.iloc[0]) // tp, answer, tp))
    return (f"This search's baseline (today's FCFS colocated fleet): {today}"
            + ("" if answer is not None else " (the headline's answer is still being replayed)")
            + f". Each lever is searched on {LEVER_REQUESTS:,} requests drawn from the whole log with Poisson arrivals "
            "at its mean rate, the headline's answer on the log's busiest window at its own arrival times, so the two "
            "baselines can differ; read each lever as a change from this search's baseline. Costs at the sidebar's "
            "$/GPU-hour, the price of the headline's cost.")
