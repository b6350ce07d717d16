"""Plan vs measured on a page: upload aiperf / guidellm results, read them (and the log's own latencies) against
the plan, show the side-by-side table and the measured points on the latency-vs-load chart."""
from __future__ import annotations

import pandas as pd
import streamlit as st

from components.context import PageContext, workload
from components.widgets import badge, chart, csv_button, table
from shapeviz.outputs.measured import (
    check_document,
    log_levels,
    measured_figure,
    parse_result,
    plan_reference,
    read_plan_reference,
)
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
               "guidellm's JSON report. A log with ttft_ms/tpot_ms columns is compared as well.")
    uploads = st.file_uploader("Load-test results (JSON)", type=["json", "jsonl"], accept_multiple_files=True,
                               key=f"measured-{key}")
    levels = []
    for f in uploads or []:
        try:
            levels.extend(parse_result(f.getvalue(), f.name))
        except ValueError as exc:
            st.error(md_literal(exc), icon=":material/error:")  # upload names are the user's: one literal line
    from_log = log_levels(ctx.frame, source=ctx.dataset.label)
    levels.extend(from_log)
    if not levels:
        st.caption("No results yet.")
        return False
    if after is None:
        after = compare_whatif(w, dep, ctx.whatif, s.ttft_slo_ms, s.tpot_slo_ms, s.gpu_hour_usd).after
    reference = read_plan_reference(plan_reference(w, dep, after, whatif=ctx.whatif, ttft_slo_ms=s.ttft_slo_ms,
                                                   tpot_slo_ms=s.tpot_slo_ms))
    notes = ["the log's latencies are those of the fleet that served it; the plan's are for the planned fleet"] \
        if from_log else []
    doc = check_document(reference, levels, notes)
    for line in doc["verdict"] or ["No level has both a measured and a planned figure (beyond the knee the plan "
                                   "saturates)."]:
        st.markdown(f"- {md_literal(line)}")  # result files are untrusted: their labels read as typed
    if doc["meets_slo_at_every_level"] is not None:
        st.markdown("The fleet **met** both p90 SLOs at every measured level." if doc["meets_slo_at_every_level"]
                    else "The fleet **missed** a p90 SLO at some measured level.")
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
