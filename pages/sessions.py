"""Sessions and prefix reuse: context growth per turn, agents, KV per session, what a prefix cache saves."""
from __future__ import annotations

import numpy as np
import pandas as pd
import streamlit as st

from components.context import page_context
from components.widgets import MISSING, badge, chart, csv_button, table
from shapeviz.analyses.prefix import prefix_savings
from shapeviz.analyses.sessions import (
    has_sessions,
    session_table,
    ttft_by_turn,
    turn_profile,
)
from shapeviz.outputs.figures import (
    prefix_curve_figure,
    product_colors,
    ttft_turn_figure,
    turn_growth_figure,
)
from shapeviz.physics.steps import prefill_time_s
from shapeviz.text import md_literal

ctx = page_context()
frame, dep, analysis = ctx.session_frame, ctx.deployment, ctx.analysis  # sketch-only: the sampled sessions
kv_per_token = dep.kv_bytes_per_token
colors = product_colors(frame["product"].astype(str).unique())


def prefill_ms(input_tokens: np.ndarray, cached_tokens: np.ndarray) -> np.ndarray:
    """The capacity model's prefill time of one request, in ms, on the selected deployment."""
    return prefill_time_s(dep, input_tokens, cached_tokens) * 1000.0


st.title("Sessions & prefix cache")

# --- sessions -------------------------------------------------------------------------------------------------
st.header("Sessions")
if not has_sessions(frame):
    st.info("This log has no session or conversation ids, so growth per turn cannot be seen. Map a session "
            "column in the load report (Shape page) if your log has one.")
else:
    s = analysis.sessions or {}
    cols = st.columns(3)
    cols[0].metric("Sessions", f"{s.get('count', 0):,}")
    cols[1].metric("Turns per session (p50)", f"{s.get('turns_p50', 0):,.0f}")
    growth = s.get("growth_tokens_per_turn_p50")
    cols[2].metric("Context growth per turn (p50)", MISSING if growth is None else f"{growth:+,.0f} tokens")
    verdicts = pd.DataFrame([v.to_dict() for v in analysis.agents.values()])
    if not verdicts.empty:
        st.subheader("Which products behave like agents")
        table(verdicts[["product", "is_agent", "sessions", "turns_p50", "growth_tokens_per_turn_p50", "reason"]],
              is_agent=st.column_config.CheckboxColumn("agent"),
              turns_p50=st.column_config.NumberColumn("turns p50", format="%.0f"),
              growth_tokens_per_turn_p50=st.column_config.NumberColumn("growth per turn p50 (tokens)", format="%+.0f"))
    profile = turn_profile(frame, max_turn=49, kv_bytes_per_token=kv_per_token)
    chart(turn_growth_figure(profile, colors), key="turn_growth")
    ttft = ttft_by_turn(frame, prefill_ms, cached="none", max_turn=49)
    chart(ttft_turn_figure(ttft, colors), key="ttft_turn")
    st.caption(f"Prefill time on {dep.describe()} with no prefix cache: every round re-reads its whole context. "
               "The prefix cache below is what makes later rounds cheap again.")
    sessions = session_table(frame, kv_bytes_per_token=kv_per_token)
    st.subheader("KV a session holds at its peak")
    kv = sessions["kv_gb_peak"]
    c = st.columns(3)
    c[0].metric("p50", f"{kv.quantile(0.5):,.2f} GB")
    c[1].metric("p90", f"{kv.quantile(0.9):,.2f} GB")
    c[2].metric("max", f"{kv.max():,.2f} GB")
    st.caption(f"{dep.model.name} at {dep.kv_precision.upper()} KV: {kv_per_token / 1024:,.0f} KiB per token of context.")
    csv_button(sessions, "sessions.csv", "Sessions CSV")
    badge("measured")

# --- prefix reuse -----------------------------------------------------------------------------------------------
st.header("Prefix reuse")
pr = analysis.prefix
if pr.method == "none":
    st.info(md_literal(pr.definition))
else:
    provenance = {"simulated": "estimated", "measured": "measured", "estimated": "estimated"}[pr.provenance]
    method_label = {"block_hashes": "from block hashes", "reported_cached_tokens": "reported by the log",
                    "session_estimate": "estimated from sessions"}[pr.method]
    cols = st.columns(3)
    cols[0].metric(f"Hit ratio, tokens ({method_label})", f"{pr.hit_ratio_tokens:.1%}")
    if pr.hit_ratio_blocks is not None:
        cols[1].metric("Hit ratio, blocks", f"{pr.hit_ratio_blocks:.1%}")
    cols[2].metric("Requests counted", f"{pr.requests:,}")
    badge(provenance)
    st.caption(f"**Definition.** {md_literal(pr.definition)}")
    if pr.block_size_source:
        st.caption(f"Block size: {pr.block_size:,} tokens, {md_literal(pr.block_size_source)}.")
    for note in pr.notes:
        st.caption(md_literal(note))
    if pr.capacity_curve:
        chart(prefix_curve_figure(pr.capacity_curve, pr.hit_ratio_tokens), key="prefix_curve")
        st.caption(f"Curve: {md_literal(pr.curve_method)}. GB of KV for {dep.model.name} at {dep.kv_precision.upper()}.")

    st.subheader("What the prefix cache saves")
    left, right = st.columns(2)
    discount = left.slider("Discount on cached input tokens %", 0, 100, 50, 5, key="cached_discount_pct",
                           help="What your provider or internal price list charges less for cached input.")
    price = right.number_input("Input price, $ per 1M tokens", 0.0, 100.0, 3.0, 0.25, key="input_price",
                               help="An assumption: set your own price.")
    hit = ctx.settings.cache_hit
    savings = prefix_savings(frame["input_tokens"].to_numpy(), hit, prefill_ms=prefill_ms,
                             cached_discount=discount / 100, input_price_per_mtok=price)
    inputs = frame["input_tokens"].to_numpy(dtype=float)
    cold_ms = float(np.median(prefill_ms(inputs, np.zeros_like(inputs))))
    warm_ms = float(np.median(prefill_ms(inputs, np.floor(inputs * hit))))
    c = st.columns(4)
    c[0].metric("Prefill tokens saved", f"{savings.cached_tokens:,}", help=f"at the sidebar's hit rate {hit:.0%}")
    c[1].metric("Prefill GPU-time saved", f"{savings.prefill_time_saved_share:.0%}")
    c[2].metric("TTFT p50, prefill only", f"{warm_ms:,.0f} ms", f"{warm_ms - cold_ms:+,.0f} ms vs no cache",
                delta_color="inverse", help="Median prefill time of a request on the selected deployment, "
                                             "without queueing; the Capacity page adds queueing on the fleet.")
    c[3].metric("Input bill", f"${savings.input_cost_with_cache_usd:,.2f}",
                f"-${savings.cost_saved_usd:,.2f}", delta_color="inverse")
    st.caption(f"At the sidebar's prefix-cache hit rate ({hit:.0%}; it defaults to the measured ratio). TTFT "
               "savings on the planned fleet are on the Capacity page.")
