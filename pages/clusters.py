"""Clusters: the shapes actually present, which products are mixed, which pools serve several corners."""
from __future__ import annotations

import pandas as pd
import streamlit as st

from components.context import CLUSTER_K, MATERIAL_SHARE_PCT, page_context
from components.widgets import badge, chart, csv_button, table
from shapeviz.outputs.figures import clusters_figure
from shapeviz.outputs.report import clusters_table
from shapeviz.text import md_literal


def _keep_k() -> None:
    choice = st.session_state["_k_widget"]
    st.session_state[CLUSTER_K] = None if choice == "auto" else int(choice)


def _keep_material() -> None:
    st.session_state[MATERIAL_SHARE_PCT] = st.session_state["_material_widget"]


ctx = page_context()
result = ctx.analysis.clusters

st.title("Clusters")
left, right = st.columns(2)
left.segmented_control(
    "Number of clusters", ["auto", 1, 2, 3, 4, 5, 6, 7, 8], key="_k_widget",
    default=st.session_state.get(CLUSTER_K) or "auto", required=True,
    on_change=_keep_k,
    help="auto: the k with the best silhouette on a sample (one cluster when the log is one shape).",
)
right.slider("Material share for 'mixed' (%)", 5, 50, st.session_state.get(MATERIAL_SHARE_PCT, 15), 1,
             key="_material_widget", on_change=_keep_material,
             help="A product is mixed when its requests form two modes or more (a test against one mode in "
                  "log-token space, not the clusters drawn above), each holding at least this share of its requests "
                  "or GPU-time.")

score = "" if result.silhouette is None else f", silhouette {result.silhouette:.2f}"
how = {"auto": "chosen by silhouette on a sample", "user": "set by you", "one_shape": "one shape only"}[result.k_source]
st.caption(f"k-means on standardised log input and log output tokens: k = {result.k} ({how}{score}); "
           f"fitted on {result.sample_size:,} sampled requests, applied to all {len(ctx.frame):,}.")

rate = ctx.analysis.traffic.mean_rps
chart(clusters_figure(ctx.frame, result.labels, result.clusters, corners=ctx.settings.corners, rate_rps=rate),
      key="clusters")

rows = clusters_table(ctx.analysis)  # the same table the report bundle writes
num = st.column_config.NumberColumn
table(rows, share_of_requests=num("share of requests", format="percent"),
      share_of_gpu_time=num("share of GPU-time", format="percent"),
      mean_rate_rps=num("mean rate (req/s)", format="%.2f"),
      **{c: num(c.replace("_", " "), format="%.0f") for c in ("input_center", "output_center", "input_p50", "output_p50")})
csv_button(rows, "clusters.csv")
badge("measured")

st.subheader("Mixed products and pools")
if not result.mixed_products and not result.mixed_pools:
    st.success("Every product is one mode, and no pool serves two corners with material traffic.")
for flag in result.mixed_products:
    st.warning(f"**{md_literal(flag.scope)}** is mixed: {len(flag.modes)} modes. {md_literal(flag.reason)}",
               icon=":material/call_split:")
for flag in result.mixed_pools:
    label = "The whole log" if flag.scope == "overall" else f"Pool **{md_literal(flag.scope)}**"
    st.warning(f"{label} serves several corners. {md_literal(flag.reason)}", icon=":material/call_split:")

with st.expander("How each product splits across clusters"):
    table(result.product_table(), request_share=num(format="percent"), gpu_share=num(format="percent"))
if result.k_scores:
    with st.expander("Silhouette score per k"):
        table(pd.DataFrame({"k": list(result.k_scores), "silhouette": list(result.k_scores.values())}))
