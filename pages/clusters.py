"""Clusters: the shapes actually present, which products are mixed, which pools serve several corners."""
from __future__ import annotations

import pandas as pd
import streamlit as st

from components.context import CLUSTER_K, MATERIAL_SHARE_PCT, page_context
from components.widgets import badge, chart, csv_button, table
from shapeviz.figures import clusters_figure, fmt_tokens
from shapeviz.shapes import SHAPE_LABELS


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
             help="A product is mixed when clusters in different corners each hold at least this share of its "
                  "requests or GPU-time.")

score = "" if result.silhouette is None else f", silhouette {result.silhouette:.2f}"
how = {"auto": "chosen by silhouette on a sample", "user": "set by you", "one_shape": "one shape only"}[result.k_source]
st.caption(f"k-means on standardised log input and log output tokens: k = {result.k} ({how}{score}); "
           f"fitted on {result.sample_size:,} sampled requests, applied to all {len(ctx.frame):,}.")

rate = ctx.analysis.traffic.mean_rps
chart(clusters_figure(ctx.frame, result.labels, result.clusters, corners=ctx.settings.corners, rate_rps=rate),
      key="clusters")

rows = pd.DataFrame([
    {
        "cluster": f"C{c.id}", "corner": SHAPE_LABELS[c.shape], "share of requests": c.share,
        "share of GPU-time": c.gpu_share, "phase": c.phase,
        "centre": f"{fmt_tokens(c.input_center)} in / {fmt_tokens(c.output_center)} out",
        "p50": f"{fmt_tokens(c.input_p50)} in / {fmt_tokens(c.output_p50)} out",
        "request rate (req/s)": None if rate is None else c.share * rate,
        "products": ", ".join(f"{p} {s:.0%}" for p, s in list(c.products.items())[:4]),
    }
    for c in result.clusters
])
pct = st.column_config.NumberColumn(format="percent")
table(rows, **{"share of requests": pct, "share of GPU-time": pct,
               "request rate (req/s)": st.column_config.NumberColumn(format="%.2f")})
csv_button(rows, "clusters.csv")
badge("measured")

st.subheader("Mixed products and pools")
if not result.mixed_products and not result.mixed_pools:
    st.success("No product splits across corners, and no pool serves two corners with material traffic.")
for flag in result.mixed_products:
    st.warning(f"**{flag.scope}** is mixed. {flag.reason}", icon=":material/call_split:")
for flag in result.mixed_pools:
    label = "The whole log" if flag.scope == "overall" else f"Pool **{flag.scope}**"
    st.warning(f"{label} serves several corners. {flag.reason}", icon=":material/call_split:")

with st.expander("How each product splits across clusters"):
    table(result.product_table(), request_share=pct, gpu_share=pct)
if result.k_scores:
    with st.expander("Silhouette score per k"):
        table(pd.DataFrame({"k": list(result.k_scores), "silhouette": list(result.k_scores.values())}))
