"""Shape: the input-vs-output plane, the headline figures, the shape and phase per product, what to buy."""
from __future__ import annotations

from dataclasses import astuple

import pandas as pd
import streamlit as st

from components import sidebar
from components.context import BALANCE_INPUT_TOKENS, page_context, plane
from components.mapping import mapping_editor
from components.widgets import MISSING, badge, chart, csv_button, lazy_expander, table
from shapeviz.analyses.shapes import SHAPE_LABELS, SHAPES
from shapeviz.fleet.sizing import PLANNED_AS_IF
from shapeviz.ingest.names import OTHER_PRODUCTS
from shapeviz.outputs.figures import fmt_tokens, whatif_shift_figure
from shapeviz.outputs.report import products_table
from shapeviz.physics import balance_ratio
from shapeviz.recommend import LEVER_LABELS, said_before
from shapeviz.text import md_literal, phase_phrase

ctx = page_context()
analysis, frame, s = ctx.analysis, ctx.frame, ctx.settings
report, overall, t = analysis.report, analysis.profile.overall, analysis.traffic

st.title("Workload shape")
st.caption(f"{md_literal(ctx.dataset.label)}{' · synthetic' if ctx.dataset.synthetic else ''} · "
           f"{md_literal(report.describe())}")
model_source = sidebar.deployment_sources(s)[0]
if model_source.startswith(PLANNED_AS_IF):
    st.info(f"GPU-time {md_literal(model_source)}")

# --- headline ----------------------------------------------------------------------------------------------
def _rate(rps: float) -> str:
    """Two significant decimals where they matter: 0.0042 reads "0.0042", not "0.00"."""
    return f"{rps:,.2f}" if rps >= 0.1 or rps == 0 else f"{rps:.2g}"


cols = st.columns(6)
cols[0].metric("Requests", f"{t.requests:,}")
# Units sit in the labels so the values stay short enough for a sixth of the page.
cols[1].metric("Time span (h)", MISSING if t.span_s is None else f"{t.span_s / 3600:,.1f}")
cols[2].metric("Mean rate (req/s)", MISSING if t.mean_rps is None else _rate(t.mean_rps))
cols[3].metric("Peak minute (req/s)", MISSING if t.peak_rps is None else _rate(t.peak_rps))
for col, label, dist in ((cols[4], "Input tokens p50", overall.input), (cols[5], "Output tokens p50", overall.output)):
    col.metric(label, fmt_tokens(dist["p50"]), f"p90 {fmt_tokens(dist['p90'])} · p99 {fmt_tokens(dist['p99'])}",
               delta_color="off", delta_arrow="off")
left, right = st.columns([0.8, 0.2], vertical_alignment="center")
left.markdown(
    f"Mostly **{SHAPE_LABELS[overall.dominant_shape]}** traffic; on {md_literal(ctx.deployment.describe())} its "
    f"GPU-time is {phase_phrase(overall.phase)} ({overall.prefill_gpu_share:.0%} prefill)."
)
with right:
    badge("measured")

# --- the plane -----------------------------------------------------------------------------------------------
# The plane changes only with the log, the corners, the deployment and the cache share; trims redraw the small
# chart below it, so a trim step never sends (or redraws) the plane's points again.
fig, p50, colors = plane(ctx.dataset, astuple(s.corners), ctx.deployment, s.cache_hit, s.tpot_slo_ms)
chart(fig, key="plane", inert=True)
st.caption("Above the dashed balance line a request costs more decode than prefill GPU-time on the selected "
           "deployment. Diamonds are each product's median request. Corner boundaries are in the sidebar.")
balance = (BALANCE_INPUT_TOKENS, balance_ratio(ctx.deployment, BALANCE_INPUT_TOKENS, s.cache_hit * BALANCE_INPUT_TOKENS,
                                               tpot_slo_ms=s.tpot_slo_ms) * BALANCE_INPUT_TOKENS)


def _whatif_shift() -> None:
    """Each product's median before → after the trims: the only part of this page a trim step redraws."""
    now = sidebar.settings()
    chart(whatif_shift_figure(p50, (now.trim_input, now.trim_output), colors, balance), key="whatif_shift", inert=True)


sidebar.whatif_fragment(_whatif_shift)

# --- per product -----------------------------------------------------------------------------------------------
st.subheader("Shape and phase per product")
mixed = {f.scope: f.reason for f in analysis.clusters.mixed_products}
per_product = products_table(analysis)  # the same table the report bundle writes
num = st.column_config.NumberColumn
table(per_product,
      share_of_requests=num("share of requests", format="percent"),
      prefill_share_of_gpu_time=num("prefill share of GPU-time", format="percent"),
      share_of_gpu_time=num("share of GPU-time", format="percent"),
      **{c: num(c.replace("_", " "), format="%.0f") for c in per_product.columns if c[-3:] in ("p50", "p90", "p99")})
csv_button(per_product, "shapes_per_product.csv")
for scope, reason in mixed.items():
    st.warning(f"**{md_literal(scope)}** is mixed: {md_literal(reason)}", icon=":material/call_split:")
for flag in analysis.clusters.mixed_pools:
    st.warning(f"**Pool {md_literal(flag.scope)}** serves several corners: {md_literal(flag.reason)}",
               icon=":material/call_split:")

st.subheader("Where requests, tokens and GPU-time sit")
corner_rows = pd.DataFrame({
    "corner": [SHAPE_LABELS[c] for c in SHAPES],
    "requests": [overall.request_share[c] for c in SHAPES],
    "tokens": [overall.token_share[c] for c in SHAPES],
    "GPU-time": [overall.gpu_share[c] for c in SHAPES],
})
share = num(format="percent")
table(corner_rows, requests=share, tokens=share, **{"GPU-time": share})

# --- recommendations ---------------------------------------------------------------------------------------------
st.subheader("What to buy first")
if not analysis.recommendations:
    st.write("Nothing stands out: the traffic is balanced between phases and sits in one corner.")
TOP = 5  # the first few are the decision; the rest, per product, one click away


def _recommendation(rec) -> None:  # noqa: ANN001 - a shapeviz.recommend.Recommendation
    scope = "all traffic" if rec.scope == "overall" else md_literal(rec.scope)
    st.markdown(f"**{LEVER_LABELS[rec.lever]}** for {scope}, protects **{rec.metric.upper()}**  \n"
                f"{md_literal(said_before(rec.reason, shown_findings))}")


# a mixed product's or pool's sentence is in its warning above: the advice built on it says only the advice
shown_findings = [*mixed.values(), *(f.reason for f in analysis.clusters.mixed_pools)]
for rec in analysis.recommendations[:TOP]:
    _recommendation(rec)
def _more_recommendations() -> None:
    for rec in analysis.recommendations[TOP:]:
        _recommendation(rec)


if len(analysis.recommendations) > TOP:
    lazy_expander(f"{len(analysis.recommendations) - TOP} more, product by product", "more_recommendations_open",
                  _more_recommendations)
badge("estimated")

# --- load report ---------------------------------------------------------------------------------------------------
def _load_report() -> None:
    """What was read and dropped, the reader's notes, and the column mapping."""
    st.markdown(f"**Source** {md_literal(report.source)} · format {md_literal(report.format)} · compression "
                f"{md_literal(report.compression)}")
    if report.dropped:
        table(pd.DataFrame({"reason": list(report.dropped), "rows": list(report.dropped.values())}))
    for note in report.notes:
        st.caption(md_literal(note))
    st.markdown("**Column mapping**")
    mapping_editor(report)


# products counted together change every per-product figure: said outside the closed expander too
for note in (n for n in report.notes if OTHER_PRODUCTS in n):
    st.info(md_literal(note), icon=":material/info:")
lazy_expander(f"Load report: {md_literal(report.describe())}", "load_report_open", _load_report)
