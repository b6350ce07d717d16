"""Plan vs measured on a page: upload aiperf / guidellm results, read them (and the log's own latencies) against
the plan, show the side-by-side table and the measured points on the latency-vs-load chart."""
from __future__ import annotations

import pandas as pd
import streamlit as st

from components import data
from components.context import PageContext, workload
from components.widgets import badge, chart, csv_button, table
from shapeviz.fleet.sizing import other_models
from shapeviz.outputs.measured import (
    check_document,
    fleet_verdict,
    log_levels,
    measured_figure,
    parse_result,
    plan_reference,
    read_plan_reference,
)
from shapeviz.physics.catalogue import Model
from shapeviz.serving import Plan, load_curve
from shapeviz.serving.compare import compare_whatif
from shapeviz.text import md_literal

MULTIPLIERS = (0.25, 0.5, 0.75, 1.0, 1.25, 1.5, 1.75, 2.0, 2.5, 3.0, 4.0)
COLUMNS = {"level": "level", "source": "file", "rate_rps": "req/s", "requests": "requests",
           "measured_ttft_p50_ms": "TTFT p50 measured", "planned_ttft_p50_ms": "TTFT p50 plan",
           "measured_ttft_p90_ms": "TTFT p90 measured", "planned_ttft_p90_ms": "TTFT p90 plan",
           "measured_tpot_p50_ms": "TPOT p50 measured", "planned_tpot_p50_ms": "TPOT p50 plan",
           "measured_tpot_p90_ms": "TPOT p90 measured", "planned_tpot_p90_ms": "TPOT p90 plan",
           "measured_output_tokens_per_s": "output tok/s measured", "planned_output_tokens_per_s": "output tok/s plan"}


def plan_vs_measured(ctx: PageContext, key: str, after: Plan | None = None) -> bool:
    """The plan-vs-measured section: uploads, table, chart (``key`` keeps two pages' widgets apart).

    False while there is nothing to compare (nothing drawn depends on the what-if levers).
    """
    s, dep = ctx.settings, ctx.deployment
    w = workload(ctx.dataset.digest, ctx.dataset.log)
    st.subheader("Plan vs measured")
    st.caption("Run the load test of the report bundle (aiperf or guidellm) against the deployment, then drop the "
               "result files here: aiperf's profile_export_aiperf.json or its per-request profile_export.jsonl, "
               "guidellm's JSON report. A log's own TTFT/TPOT are shown too, and judge the plan only when the log was "
               "served by the planned deployment.")
    uploads = st.file_uploader("Load-test results (JSON)", type=["json", "jsonl"], accept_multiple_files=True,
                               key=f"measured-{key}")
    levels = read_results(list(uploads or []))   # load tests of the planned fleet: judged against the plan
    from_log = log_levels(ctx.frame, source=ctx.dataset.label)
    # Like with like: the log's latencies judge the plan only when the log was served by the planned deployment
    # (the user says so); otherwise they are shown as what they are, without a verdict.
    judged_log = bool(from_log) and st.checkbox(
        f"This log was served by the planned deployment ({md_literal(dep.describe())})",
        key=f"measured-log-is-plan-{key}",
        help="Tick it only when the log's requests ran on this model, engine and GPU: then the plan is judged "
             "against the log's latencies. Otherwise they are another fleet's and say nothing about the plan.")
    if from_log and not judged_log:
        _log_latencies(from_log, log_models(ctx.frame), dep.model)
    if judged_log:
        levels.extend(from_log)
    if not levels:
        if not from_log:
            st.caption("No results yet.")
        return bool(from_log)
    if after is None:
        after = compare_whatif(w, dep, ctx.whatif, s.ttft_slo_ms, s.tpot_slo_ms, s.gpu_hour_usd).after
    reference = read_plan_reference(plan_reference(w, dep, after, whatif=ctx.whatif, ttft_slo_ms=s.ttft_slo_ms,
                                                   tpot_slo_ms=s.tpot_slo_ms))
    notes = ["the log's latencies are judged against the plan because you said the log was served by the planned "
             "deployment"] if judged_log else []
    doc = check_document(reference, levels, notes)
    for line in doc["verdict"] or ["No level has both a measured and a planned figure (beyond the knee the plan "
                                   "saturates)."]:
        st.markdown(f"- {md_literal(line)}")  # result files are untrusted: their labels read as typed
    overall = fleet_verdict(doc)   # check's own sentence: met, missed, or unknown (a level without a finite p90)
    if overall is not None:
        st.markdown(f"**{overall[0].upper()}{overall[1:]}.**")
    frame = pd.DataFrame(doc["levels"])
    shown = frame[[c for c in COLUMNS if c in frame.columns]].rename(columns=COLUMNS)
    table(shown)
    csv_button(frame, "plan_vs_measured.csv", key=f"csv-measured-{key}")
    badge("measured")
    curve = load_curve(w, dep, MULTIPLIERS, ctx.whatif, s.ttft_slo_ms, s.tpot_slo_ms, replicas=after.replicas or 1)
    chart(measured_figure(curve, doc, after.rate_rps, s.ttft_slo_ms, s.tpot_slo_ms), key=f"measured-chart-{key}")
    st.caption("Lines: the plan on its fleet (estimated). Markers: measured levels at their rate, open p50, filled "
               "p90. A ratio measured / plan above 1 says the plan was optimistic; it can recalibrate the model.")
    for note in doc["notes"]:
        st.caption(md_literal(note))
    return True


def read_results(uploads: list) -> list:
    """The measured levels of the dropped result files: within the session's upload budget, read in one of the
    server's two work slots, each bad file said on one literal line and the good ones kept. No file, no slot: the
    section redraws on every what-if step, and must not wait behind other visitors' logs for nothing."""
    levels: list = []
    try:
        data.check_upload_budget(list(uploads or []))   # the same budget as logs, before a byte is parsed
    except ValueError as exc:
        st.error(md_literal(exc), icon=":material/error:")
        return levels
    if not uploads:
        return levels
    with data.work_slot(None, "other visitors' files are being read"):   # and the same two slots
        for f in uploads:
            try:
                levels.extend(parse_result(f.getvalue(), f.name))
            except ValueError as exc:
                st.error(md_literal(exc), icon=":material/error:")  # upload names are the user's: one literal line
    return levels


MODELS_NAMED = 5   # a log of many models names the first few and counts the rest


def log_models(frame: pd.DataFrame) -> list[str]:
    """The models a log names (most requests first), or none when it has no model column."""
    if "model" not in frame.columns:
        return []
    return [str(m) for m in frame["model"].dropna().astype(str).value_counts().index]


def _log_latencies(levels: list, models: list[str], planned: Model) -> None:
    """The log's own latencies per rate band, with no verdict: they are the fleet's that served the log."""
    others = other_models(models, planned.id)
    named = ", ".join(others[:MODELS_NAMED]) + (f" and {len(others) - MODELS_NAMED} more"
                                                 if len(others) > MODELS_NAMED else "")
    served = (f"served by {named}, not the planned {planned.name}" if others
              else "served by the fleet that logged them")
    st.markdown(f"**Your log's own latencies** ({md_literal(served)}): what they are, not a verdict on the plan; "
                "tick the box above if the planned deployment served them.")
    table(pd.DataFrame({
        "level": [lv.label for lv in levels],
        "req/s": [lv.rate_rps for lv in levels],
        "requests": [lv.requests for lv in levels],
        "TTFT p50 (ms)": [lv.ttft_p50_ms for lv in levels], "TTFT p90 (ms)": [lv.ttft_p90_ms for lv in levels],
        "TPOT p50 (ms)": [lv.tpot_p50_ms for lv in levels], "TPOT p90 (ms)": [lv.tpot_p90_ms for lv in levels],
    }), **{c: st.column_config.NumberColumn(format="%.0f") for c in ("TTFT p50 (ms)", "TTFT p90 (ms)")},
        **{c: st.column_config.NumberColumn(format="%.1f") for c in ("TPOT p50 (ms)", "TPOT p90 (ms)")},
        **{"req/s": st.column_config.NumberColumn(format="%.2f")})
    badge("measured")
