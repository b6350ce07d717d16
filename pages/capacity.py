"""Capacity what-if: prefill (TTFT) and decode (TPOT) pressure, GPUs and cost, before → after the sidebar levers."""
from __future__ import annotations

from dataclasses import replace
from typing import NamedTuple

import pandas as pd
import plotly.graph_objects as go
import streamlit as st

from components import sidebar
from components.batch import render_batch_job
from components.context import SETTINGS_HASH, PageContext, page_context, rate_chart, workload
from components.classes import classes_key, edit_classes, page_classes
from components.fleet import DESIGN_KEY, FLEET_DESIGN_KEY, render_fleet_design
from components.fleet_answer import ready as fleet_ready
from components.fleet_answer import render_answer, sized_plans, sizing_of
from components.fleet_answer import start as start_sizing
from components.fleet_answer import start_lever
from components.fleet_time import render_traffic_over_time
from components.measured import plan_vs_measured
from components.routing import render_routers
from components.simulate import render_simulation
from components.speculative import speculative_section
from components.progress import held
from components.widgets import MISSING, badge, chart, lazy_expander, run_on_click, table
from shapeviz.fleet.sizing import COMPARE_SIZED, answer_heading, size_comparison
from shapeviz.outputs.figures import load_curve_figure, pressure_figure
from shapeviz.outputs.report.html import whatif_words
from shapeviz.physics import Deployment
from shapeviz.serving import WhatIf, Workload, load_curve
from shapeviz.serving.compare import WhatIfComparison, compare_deployments, compare_whatif, winners
from shapeviz.text import md_literal, phase_phrase

ctx = page_context()
s, dep = ctx.settings, ctx.deployment
w = workload(ctx.dataset.digest, ctx.dataset.log)

st.title("Capacity what-if")
st.caption(f"{md_literal(dep.describe())} · request rate {w.rate_rps:,.2f} req/s ({md_literal(w.rate_source)}: "
           f"{md_literal(w.rate_note)}) · "
           f"SLOs at p90: TTFT {s.ttft_slo_ms:,.0f} ms, TPOT {s.tpot_slo_ms:,.0f} ms")
model_source, precision_source = sidebar.deployment_sources(s)
st.caption(f"Model: {md_literal(model_source)}. Precision: {md_literal(precision_source)}. "
           f"GPUs per replica: {md_literal(ctx.tp_source)}. "
           f"Serving engine: {md_literal(dep.engine_note)}.")


def _fmt_ms(v: float | None) -> str:
    # The unit is in the metric's label, so the value fits its column; a saturated phase has no latency.
    return "saturated" if v is None else f"{v:,.0f}"


def _delta(x: float | None, y: float | None, unit: str = "") -> str | None:
    if x is None or y is None or x == y:
        return None
    return f"{y - x:+,.0f}{unit}" if abs(y - x) >= 1 else f"{y - x:+,.2f}{unit}"


@st.cache_resource(max_entries=16, ttl=6 * 3600, scope="session", show_spinner=False, hash_funcs=SETTINGS_HASH)
def _plan(digest: str, dep: Deployment, whatif: WhatIf, ttft_slo_ms: float, tpot_slo_ms: float, gpu_hour_usd: float,
          _w: Workload) -> tuple[WhatIfComparison, pd.DataFrame]:
    """The plan before → after the what-if and the load curve of its fleet: every section below reads these."""
    cmp = compare_whatif(_w, dep, whatif, ttft_slo_ms, tpot_slo_ms, gpu_hour_usd)
    curve = load_curve(_w, dep, whatif=whatif, ttft_slo_ms=ttft_slo_ms, tpot_slo_ms=tpot_slo_ms,
                       multipliers=MULTIPLIERS)
    return cmp, curve


def _classes(now: PageContext) -> dict:
    """Every product's class as the page judges it now: its own, else the sidebar's pair."""
    return page_classes(ctx.dataset.digest, ctx.dataset.log, now.settings.ttft_slo_ms, now.settings.tpot_slo_ms)


COMPARE_KEY, COMPARE_RESULTS_KEY = "compare_run", "compare_results"   # the click's settings; the tables compared
MULTIPLIERS = (0.25, 0.5, 0.75, 1.0, 1.25, 1.5, 1.75, 2.0, 2.5, 3.0, 4.0)


@st.cache_resource(max_entries=16, ttl=6 * 3600, scope="session", show_spinner=False, hash_funcs=SETTINGS_HASH)
def _sized(digest: str, dep: Deployment, whatif: WhatIf, ttft_slo_ms: float, tpot_slo_ms: float,
           gpu_hour_usd: float, judged: tuple, _w: Workload, _sized: tuple) -> tuple[WhatIfComparison, pd.DataFrame]:
    """Before → after on today's simulated fleet with the simulated answers (what the memo carries), and the load
    curve of the answer after the what-if (as ``_plan``'s curve is the estimate's)."""
    cmp = compare_whatif(_w, dep, whatif, ttft_slo_ms, tpot_slo_ms, gpu_hour_usd, before=_sized[0], after=_sized[1])
    curve = load_curve(_w, dep, whatif=whatif, ttft_slo_ms=ttft_slo_ms, tpot_slo_ms=tpot_slo_ms,
                       multipliers=MULTIPLIERS, replicas=cmp.after.replicas)   # the answer's, as the estimate's
    return cmp, curve


@st.cache_resource(max_entries=16, ttl=6 * 3600, scope="session", show_spinner=False, hash_funcs=SETTINGS_HASH)
def _figures(digest: str, dep: Deployment, whatif: WhatIf, ttft_slo_ms: float, tpot_slo_ms: float,
             gpu_hour_usd: float, judged: tuple | None, _cmp: WhatIfComparison,
             _curve: pd.DataFrame) -> tuple[go.Figure, go.Figure]:
    """The headline's pressure and load-curve figures of one plan, keyed as its plan is: ``_plan``'s key for the
    estimate (``judged`` None), ``_sized``'s (the classes judged) for the simulated answer. A step back to a what-if
    drawn before, a poll's rerun, or a step that moves only another section reads them here instead of rebuilding
    both (a tenth of a second of plotly's validation per step); only the figures are held, not the plans."""
    return (pressure_figure(_cmp.on_fleet.loc["before"], _cmp.on_fleet.loc["after"], ttft_slo_ms, tpot_slo_ms),
            load_curve_figure(_curve, ttft_slo_ms, tpot_slo_ms))


class _Answer(NamedTuple):
    futures: tuple | None        # the headline's sizings (``fleet_answer.start``)
    cmp: WhatIfComparison        # the plan every section reads: the simulated fleet's once sized, else the estimate
    curve: pd.DataFrame          # its load curve
    simulated: bool
    estimate: WhatIfComparison   # the analytic estimate's plan (the answer line's pressure reads it)
    classes: dict                # every product's class as the page judges it now (``_classes``)


def _answer(now: PageContext) -> _Answer:
    """The headline's sizings (started where they are not), and the plan and curve every section reads: the
    simulated fleet's once its replays are done, the estimate's until then. Each cached value is read once here
    (a step's draw read the estimate and the classes three times over, each read a cache lookup)."""
    s = now.settings
    estimate, curve = _plan(ctx.dataset.digest, dep, now.whatif, s.ttft_slo_ms, s.tpot_slo_ms, s.gpu_hour_usd, w)
    classes = _classes(now)
    frame = ctx.dataset.log.frame if ctx.dataset.sketch is None else None
    futures = start_sizing(ctx.dataset.digest, frame, w, dep, now.whatif, s.ttft_slo_ms, s.tpot_slo_ms,
                           s.gpu_hour_usd, classes)
    sized = sized_plans(futures, estimate.before, estimate.after, dep.tp)
    if sized is None:
        return _Answer(futures, estimate, curve, False, estimate, classes)
    cmp, sized_curve = _sized(ctx.dataset.digest, dep, now.whatif, s.ttft_slo_ms, s.tpot_slo_ms, s.gpu_hour_usd,
                              classes_key(classes), w, sized)
    return _Answer(futures, cmp, sized_curve, True, estimate, classes)


def _now() -> tuple[PageContext, WhatIfComparison, pd.DataFrame]:
    """The sidebar's values as they are now (a fragment rerun sees the step), with the plan and curve they give:
    the simulated fleet's once the headline's replays are done."""
    now = replace(ctx, settings=sidebar.settings())
    answer = _answer(now)
    return now, answer.cmp, answer.curve


# Each section below is a what-if fragment of its own: a trim or traffic step reruns the headline, and a section
# only while it shows something the levers move (a result, a switched-on plan); a section showing its button and
# settings is left as it is, so a step redraws a dozen elements, not the page's sixty.
def _headline() -> None:
    """Pressure, latency, GPUs and cost before → after the what-if, and the load curve of the plan's fleet."""
    now = replace(ctx, settings=sidebar.settings())
    s = now.settings
    futures, cmp, curve, simulated, estimate, classes = _answer(now)
    pressure = (estimate.after.prefill.utilization, estimate.after.decode.utilization)   # per estimated replica
    method = "simulated" if simulated else "estimate"
    before, after = cmp.before, cmp.after
    b, a = before.to_dict(), after.to_dict()

    fleet = cmp.fleet_replicas
    on_fleet = {"before": cmp.on_fleet.loc["before"], "after": cmp.on_fleet.loc["after"]}

    st.subheader(f"Before → after the what-if: pressure on today's fleet ({fleet} × TP{dep.tp} = {fleet * dep.tp} "
                 "GPUs), latency of the answer")
    st.caption(f"The what-if: {whatif_words(now.whatif)}." if not now.whatif.is_identity
               else "The what-if: no lever moved, so before and after are the same plan.")
    row1 = st.columns([1, 1, 1.35, 1.35])  # "1,048 / 6,066" needs more room than "42%"
    for col, phase, help_text in (
        (row1[0], "prefill", "Busy share of each replica's time spent prefilling."),
        (row1[1], "decode", "Decode batch over what the TPOT SLO and the KV pool allow."),
    ):
        x, y = (100 * float(on_fleet[k][f"{phase}_utilization"]) for k in ("before", "after"))
        col.metric(f"{phase.capitalize()} pressure", f"{y:.0f}%", _delta(x, y, " pts"), delta_color="inverse",
                   help=help_text)
    # the answer's latency, as `plan` prints it for the same log and settings (one function: sizing.sized_plan of
    # the one sizing; the estimate's analytic plan until the replays land), before → after the what-if
    for col, metric in ((row1[2], "ttft"), (row1[3], "tpot")):
        x, y = (d[f"{metric}_ms"]["p90"] for d in (b, a))
        col.metric(f"{metric.upper()} p50 / p90 (ms)", f"{_fmt_ms(a[f'{metric}_ms']['p50'])} / {_fmt_ms(y)}",
                   _delta(x, y, " ms p90"), delta_color="inverse",
                   help=(f"The answer's {metric.upper()} ({method}: "
                         + ("its replay of the log's busiest hour on its own fleet" if simulated else
                            "the analytic queue on its own fleet") + "), what `plan` prints for these settings; "
                         "the delta is against today's answer, before the what-if."))
    st.subheader(answer_heading(None if futures is None or not simulated else futures[0].result()))
    row2 = st.columns(4)
    g_b, g_a = b["gpus"], a["gpus"]
    row2[0].metric(f"GPUs colocated ({method})", f"{g_a['colocated'] or MISSING}",
                   _delta(g_b["colocated"], g_a["colocated"]), delta_color="inverse",
                   help="The smallest fleet whose replay of the log meets every product's p90 class (see below)."
                   if simulated else "The analytic estimate (a queue at the peak-minute rate), shown at "
                   "once; the simulated answer replaces it when the replays of the log on candidate fleets are done.")
    no_split = g_a["prefill"] is None or g_a["decode"] is None
    row2[1].metric("GPUs split P + D (estimate)", MISSING if no_split else f"{g_a['prefill']} + {g_a['decode']}",
                   "no split meets the SLOs" if no_split else _delta(g_b.get("disaggregated"), g_a.get("disaggregated"),
                                                                     " total"),
                   delta_color="off" if no_split else "inverse", delta_arrow="off" if no_split else "auto",
                   help="Disaggregated: separate prefill (P) and decode (D) pools. The KV transfer between them adds "
                        "to TTFT, so when the prefill alone nearly fills the TTFT SLO no prefill pool meets it.")
    usd_h = a["cost"].get("usd_per_hour")
    row2[2].metric("Cost per hour", MISSING if usd_h is None else f"${usd_h:,.0f}",
                   _delta(b["cost"].get("usd_per_hour"), usd_h, " $"), delta_color="inverse")
    per_m = a["cost"].get("usd_per_million_tokens")
    row2[3].metric("Cost per 1M tokens", MISSING if per_m is None else f"${per_m:,.3f}",
                   None if per_m is None else _delta(b["cost"].get("usd_per_million_tokens"), per_m, " $"),
                   delta_color="inverse")
    # the cache-aware router's sizing, queued behind the headline's (often done by the time they are shown)
    lever = None if futures is None else start_lever(
        ctx.dataset.digest, ctx.dataset.log.frame, w, dep, now.whatif, s.ttft_slo_ms, s.tpot_slo_ms, s.gpu_hour_usd,
        classes)
    render_answer(futures, dep, pressure=pressure, lever=lever, simulated=simulated)
    left, right = st.columns([0.85, 0.15])
    phase = f"After the what-if the GPU-time is {phase_phrase(after.dominant_phase)}."
    left.markdown(
        phase if simulated   # the line above says what the replays found
        else ("The estimate meets both SLOs" + (f" ({md_literal('; '.join(after.notes))})." if after.notes else ".")
              if after.meets_slo else "**The estimate cannot meet the SLOs** on this deployment at this rate: "
              + md_literal("; ".join(after.notes)) + ".") + " " + phase
    )
    with right:
        badge("estimated")

    # Their names are the app's own ("before", "p90"), nothing from the log: no inert copy needed.
    judged = classes_key(classes) if simulated else None   # the plan's key: the estimate's, or the answer's
    pressure_fig, curve_fig = _figures(ctx.dataset.digest, dep, now.whatif, s.ttft_slo_ms, s.tpot_slo_ms,
                                       s.gpu_hour_usd, judged, cmp, curve)
    chart(pressure_fig, key="pressure", inert=True)
    chart(curve_fig, key="load_curve", inert=True)
    st.caption("The fleet is held at the plan's size; the gap between the operating point and the knee is the "
               "headroom a planner buys.")


def _speculative() -> bool:
    now, _, _ = _now()
    return speculative_section(w, dep, now)


def _simulation() -> bool:
    now, _, curve = _now()
    s = now.settings
    return render_simulation(ctx.dataset.digest, ctx.dataset.log, dep, now.whatif, w.rate_rps * s.traffic,
                             int(curve["replicas"].iloc[0]), s.ttft_slo_ms, s.tpot_slo_ms, curve,
                             ctx.analysis.recommendations, _classes(now),
                             headline=fleet_ready(ctx.dataset.digest, dep, now.whatif, s.ttft_slo_ms, s.tpot_slo_ms,
                                                  s.gpu_hour_usd, _classes(now)), gpu_hour_usd=s.gpu_hour_usd)


def _routers() -> bool:
    now, _, curve = _now()
    s = now.settings
    headline = fleet_ready(ctx.dataset.digest, dep, now.whatif, s.ttft_slo_ms, s.tpot_slo_ms, s.gpu_hour_usd,
                           _classes(now))
    answer = None if headline is None or headline.answer is None else headline.replicas
    return render_routers(ctx.dataset.digest, ctx.dataset.log, dep, now.whatif, w.rate_rps * s.traffic,
                          int(curve["replicas"].iloc[0]), s.ttft_slo_ms, s.tpot_slo_ms, ctx.analysis.recommendations,
                          answer, s.gpu_hour_usd)


def _fleet_design() -> bool:
    now = replace(ctx, settings=sidebar.settings())
    s, classes = now.settings, _classes(now)
    headline = fleet_ready(ctx.dataset.digest, dep, now.whatif, s.ttft_slo_ms, s.tpot_slo_ms, s.gpu_hour_usd, classes)
    design = render_fleet_design(ctx.dataset.digest, ctx.dataset.log, classes, s,
                                 None if headline is None else (headline, dep), deployment=dep)
    if design is not None:
        st.session_state[FLEET_DESIGN_KEY] = {"digest": ctx.dataset.digest, "design": design}
    return st.session_state.get(DESIGN_KEY) is not None  # clicked once: a traffic step redraws its result or button


def _batch_job() -> bool:
    now = replace(ctx, settings=sidebar.settings())
    return render_batch_job(ctx.dataset.digest, ctx.dataset.log, dep, now.whatif, now.settings.gpu_hour_usd)


def _over_time() -> bool:
    now, _, _ = _now()
    s = now.settings
    return render_traffic_over_time(ctx.dataset.digest, ctx.dataset.log, dep, now.whatif, s.ttft_slo_ms,
                                    s.tpot_slo_ms, s.gpu_hour_usd, _classes(now))


def _measured() -> bool:
    now, cmp, _ = _now()
    return plan_vs_measured(now, "capacity", cmp.after)


def _compared(now: PageContext) -> tuple[pd.DataFrame, bool]:
    """Every deployment planned for the workload and the what-if, and whether the cheapest were sized by replaying
    the log (the headline's sizing; a log without timestamps gets analytic estimates only)."""
    s = now.settings
    table_all = compare_deployments(w, dep.model.id, whatif=now.whatif, ttft_slo_ms=s.ttft_slo_ms,
                                    tpot_slo_ms=s.tpot_slo_ms)
    frame = ctx.dataset.log.frame if ctx.dataset.sketch is None else None
    if frame is None or "timestamp" not in frame.columns or table_all.empty:
        return table_all, False
    # the same sizing as the headline: its own row is the headline's answer, the cheapest estimates replayed
    with st.spinner("Replaying the log on your deployment and the cheapest estimates…"):
        classes = _classes(now)
        return size_comparison(table_all, dep.model.id, lambda d: sizing_of(
            ctx.dataset.digest, frame, w, d, now.whatif, s.ttft_slo_ms, s.tpot_slo_ms, s.gpu_hour_usd, classes),
            current=dep), True


def _compare() -> bool:
    now, _, _ = _now()
    s = now.settings
    st.subheader("Compare deployments")
    st.caption("Every GPU, precision and layout (TP; DEP for MoE; FP4 where the GPU runs it) that holds "
               f"{dep.model.name}, planned for this workload and the what-if, "
               "each GPU at its catalogue price (an assumption).")
    # Shown from the click for as long as what it compared stays (a later rerun of the page, such as the headline's
    # when a sizing lands, keeps it; a lever moved shows the button again)
    run_key = (ctx.dataset.digest, dep, now.whatif, s.ttft_slo_ms, s.tpot_slo_ms, s.gpu_hour_usd,
               classes_key(_classes(now)))
    if not run_on_click("Compare all deployments", icon=":material/compare_arrows:", key="compare_all",
                        settings=run_key, state_key=COMPARE_KEY):
        return False
    table_all, replayed_cheapest = held(COMPARE_RESULTS_KEY, run_key, lambda: _compared(now), max_entries=2)
    if replayed_cheapest:
        replayed = int((table_all["method"] == "simulated").sum())
        for _, r in table_all[table_all["yours"] & (table_all["method"] == "simulated")].iterrows():
            st.markdown(f"**Yours**: {int(r['gpus'])}× {md_literal(r['gpu'])}, {str(r['precision']).upper()} "
                        f"{md_literal(r['layout'])}, the headline's simulated answer: "
                        + ("meets every product's class" if r["meets_slo"] else
                           f"meets every other class (no size serves: {md_literal(r['no_size_serves'])})"
                           if r["meets_others"] else "no size meets every class")
                        + (f" · ${r['usd_per_million_tokens']:,.3f} / 1M tokens at the catalogue price"
                           if pd.notna(r["usd_per_million_tokens"]) else ""))
        st.caption(f"{replayed} configurations sized by replaying the log, as the headline is (yours and the "
                   f"{COMPARE_SIZED} cheapest estimates that meet): their GPUs, p90s and cost are simulated, and "
                   "only they can win. The other rows are analytic estimates (a replay search for each of "
                   f"{len(table_all)} configurations would take minutes).")
    else:
        st.caption("Every row is an analytic estimate: this log has no timestamps to replay.")
    ok = int(table_all["meets_slo"].astype(bool).sum()) if not table_all.empty else 0
    st.markdown(f"**{ok} of {len(table_all)} configurations meet both SLOs.**")
    best = winners(table_all)
    if best and not bool(next(iter(best.values()))["meets_slo"]):
        st.warning("No replayed configuration meets every product's class; the winners meet every other one "
                   f"(no size serves: {md_literal(next(iter(best.values()))['no_size_serves'])}: a request's own "
                   "latency there is above its class; the headline says why).", icon=":material/warning:")
    if best:
        cols = st.columns(len(best))
        for col, (title, r) in zip(cols, best.items()):
            # markdown, not a metric: a metric clips a long GPU name ("4× GeForce RTX 3…")
            col.markdown(f"**{title[0].upper() + title[1:]}**: {int(r['gpus'])}× {md_literal(r['gpu'])}, "
                         f"{str(r['precision']).upper()} {md_literal(r['layout'])} · "
                         f"${r['usd_per_million_tokens']:,.3f} / 1M tokens")
            if r.get("caveat"):
                col.caption(f":material/warning: {md_literal(r['caveat'])}")
    shown = table_all.drop(columns=["gpu_id", "ep", "attention_dp", "yours"], errors="ignore")
    table(shown.sort_values(["meets_slo", "usd_per_million_tokens"], ascending=[False, True]))
    badge("simulated" if "method" in table_all and (table_all["method"] == "simulated").any() else "estimated")
    return True


def _assumptions() -> bool:
    def draw() -> None:
        a = _now()[1].after.to_dict()
        table(pd.DataFrame({"assumption": list(a["assumptions"]),
                            "value": [MISSING if v is None else str(v) for v in a["assumptions"].values()]}))
        table(pd.DataFrame({"figure": list(a["provenance"]), "source": list(a["provenance"].values())}))

    return lazy_expander("Assumptions and where each number comes from", "assumptions_open", draw)


sidebar.whatif_fragment(_headline)
sidebar.whatif_fragment(_speculative, "whatif_speculative")
edit_classes(ctx.dataset.digest, ctx.dataset.log, s.ttft_slo_ms, s.tpot_slo_ms)  # an edit reruns the page
sidebar.whatif_fragment(_simulation, "whatif_simulation")
sidebar.whatif_fragment(_routers, "whatif_routers")
sidebar.whatif_fragment(_fleet_design, "whatif_fleet_design")
sidebar.whatif_fragment(_batch_job, "whatif_batch_job")
if "timestamp" in ctx.frame.columns and ctx.frame["timestamp"].notna().any():
    # the log's own rate: no lever moves it
    chart(rate_chart(ctx.dataset.digest, "1min" if (ctx.analysis.traffic.span_s or 0) < 6 * 3600 else "10min",
                     ctx.dataset.log), key="rate", inert=True)
    badge("measured")
    sidebar.whatif_fragment(_over_time, "whatif_over_time")
sidebar.whatif_fragment(_measured, "whatif_measured")
sidebar.whatif_fragment(_compare, "whatif_compare")
sidebar.whatif_fragment(_assumptions, "whatif_assumptions")
