"""The simulated latency-vs-load curve of a fleet, its comparison with the analytic planner, and its figures.

``simulated_point`` runs one load level (Poisson arrivals at the analytic curve's rate, requests sampled from the
log), ``sweep_table`` puts simulated and analytic figures side by side, ``disagreements`` says where they differ
by more than 20%, and the ``*_figure`` builders draw them (labelled **simulated**).
"""
from __future__ import annotations

from dataclasses import replace

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from shapeviz.physics.steps import Deployment
from shapeviz.plotstyle import FONT, fit_header, log_axis
from shapeviz.serving.planner import WhatIf
from shapeviz.serving.simulator import (
    Requests,
    SimResult,
    requests_from_frame,
    simulate,
)

SIM_COLOR = "#D55E00"
ANALYTIC_COLOR = "#0072B2"
SLO_COLOR = "#C0392B"
DISAGREEMENT = 0.20   # above this relative gap the page shows the simulated figure and says why
DEFAULT_POINT_REQUESTS = 1500


def sample_requests(frame: pd.DataFrame, whatif: WhatIf, n: int = DEFAULT_POINT_REQUESTS, seed: int = 0) -> Requests:
    """``n`` requests drawn from the log's rows after the what-if (trims and cache; the traffic lever sets the rate)."""
    base = requests_from_frame(frame, replace(whatif, traffic_multiplier=1.0))
    rng = np.random.default_rng(seed)
    pick = rng.choice(len(base), size=min(n, len(base)), replace=len(base) < n) if len(base) > n else np.arange(len(base))
    # a random draw: arrivals are drawn at each point's rate, and prompt blocks (reuse in arrival order) do not apply
    return replace(base.take(pick), arrival_s=None, blocks=None)


def simulated_point(requests: Requests, dep: Deployment, rate_rps: float, replicas: int, ttft_slo_ms: float,
                    tpot_slo_ms: float, seed: int = 0) -> SimResult:
    """One load level: Poisson arrivals at ``rate_rps`` over ``replicas`` replicas (least outstanding tokens)."""
    return simulate(requests, dep, arrivals="poisson", rate_rps=rate_rps, replicas=replicas, seed=seed,
                    router="least_tokens", ttft_slo_ms=ttft_slo_ms, tpot_slo_ms=tpot_slo_ms)


def sweep_table(points: dict[float, SimResult], analytic: pd.DataFrame) -> pd.DataFrame:
    """One row per traffic multiplier: simulated p50/p90 TTFT and TPOT, goodput, saturation, and the analytic p50/p90."""
    rows = []
    for mult, res in sorted(points.items()):
        s = res.summary()
        rows.append({"traffic_multiplier": mult, "sim_ttft_p50_ms": s["ttft_ms"]["p50"], "sim_ttft_p90_ms": s["ttft_ms"]["p90"],
                     "sim_tpot_p50_ms": s["tpot_ms"]["p50"], "sim_tpot_p90_ms": s["tpot_ms"]["p90"],
                     "goodput": s["goodput"], "sim_saturated": s["saturated"], "busy": s["utilization"]})
    sim = pd.DataFrame(rows)
    cols = ["traffic_multiplier", "ttft_p50_ms", "ttft_p90_ms", "tpot_p50_ms", "tpot_p90_ms", "saturated"]
    out = sim.merge(analytic[cols], on="traffic_multiplier", how="left")
    return out.astype({c: "float64" for c in out.columns if c.endswith("_ms")})


def disagreements(table: pd.DataFrame, multiplier: float = 1.0) -> list[str]:
    """Sentences for the p90 figures where the analytic planner and the simulator differ by more than 20%."""
    row = table.loc[np.isclose(table["traffic_multiplier"], multiplier)]
    if row.empty:
        return []
    r = row.iloc[0]
    out = []
    for metric, why in (("ttft", "the simulator runs each prompt inside an iteration with the decode batch, with "
                                 "chunked prefill and a KV pool that can make prompts wait"),
                        ("tpot", "the simulator's decode batch follows the actual arrivals, prompts chunked into "
                                 "its iterations and KV preemptions, not an average")):
        s, a = r[f"sim_{metric}_p90_ms"], r[f"{metric}_p90_ms"]
        if pd.isna(s):
            continue
        if pd.isna(a):
            out.append(f"{metric.upper()} p90: simulated {s:,.0f} ms where the analytic planner reads saturated")
            continue
        gap = s / a - 1.0 if a > 0 else np.inf
        if abs(gap) > DISAGREEMENT:
            out.append(f"{metric.upper()} p90: simulated {s:,.0f} ms vs analytic {a:,.0f} ms ({gap:+.0%}); trust "
                       f"the simulated figure: {why}")
    return out


def dash(value: object, fmt: str = "{:,.0f}") -> str:
    """A table cell: the number formatted, or a dash for a missing value (never "None" or "nan")."""
    if value is None or (isinstance(value, float) and not np.isfinite(value)) or pd.isna(value):  # type: ignore[arg-type]
        return "–"
    return fmt.format(value)


def latency_load_figure(table: pd.DataFrame, ttft_slo_ms: float, tpot_slo_ms: float, gpus: int,
                        height: int = 400) -> go.Figure:
    """Simulated TTFT/TPOT (p50 line, p50–p90 band) against load, the analytic p50/p90 beside it, SLOs dashed."""
    fig = make_subplots(rows=1, cols=2, subplot_titles=("TTFT", "TPOT"), horizontal_spacing=0.1)
    x = table["traffic_multiplier"]
    for col, metric, slo in ((1, "ttft", ttft_slo_ms), (2, "tpot", tpot_slo_ms)):
        first = col == 1
        fig.add_trace(go.Scatter(x=x, y=table[f"sim_{metric}_p90_ms"], mode="lines", line=dict(width=0),
                                 showlegend=False, hoverinfo="skip", legendgroup="band"), row=1, col=col)
        fig.add_trace(go.Scatter(x=x, y=table[f"sim_{metric}_p50_ms"], mode="lines", line=dict(width=0),
                                 fill="tonexty", fillcolor="rgba(213,94,0,0.18)", name="simulated p50–p90",
                                 showlegend=first, legendgroup="band", hoverinfo="skip"), row=1, col=col)
        for q, dash_style in (("p50", "dot"), ("p90", "solid")):
            fig.add_trace(go.Scatter(
                x=x, y=table[f"sim_{metric}_{q}_ms"], mode="lines+markers", name=f"simulated {q}",
                legendgroup=f"sim{q}", showlegend=first, line=dict(color=SIM_COLOR, dash=dash_style),
                hovertemplate=f"×%{{x}} traffic: simulated {metric.upper()} {q} %{{y:,.0f}} ms<extra></extra>",
            ), row=1, col=col)
            fig.add_trace(go.Scatter(
                x=x, y=table[f"{metric}_{q}_ms"], mode="lines", name=f"analytic {q}", legendgroup=f"an{q}",
                showlegend=first, line=dict(color=ANALYTIC_COLOR, dash=dash_style, width=1.5),
                hovertemplate=f"×%{{x}} traffic: analytic {metric.upper()} {q} %{{y:,.0f}} ms<extra></extra>",
            ), row=1, col=col)
        # a trace, not add_hline: on a log axis plotly places a shape's annotation at 10^value
        fig.add_trace(go.Scatter(x=[float(x.min()), float(x.max())], y=[slo, slo], mode="lines",
                                 line=dict(color=SLO_COLOR, dash="dash"), name="SLO", legendgroup="slo",
                                 showlegend=first, hovertemplate=f"SLO {slo:,.0f} ms<extra></extra>"), row=1, col=col)
        values = pd.concat([table[f"sim_{metric}_p90_ms"], table[f"sim_{metric}_p50_ms"], table[f"{metric}_p90_ms"],
                            table[f"{metric}_p50_ms"], pd.Series([slo])])
        fig.update_yaxes(title_text="ms", **log_axis(values), row=1, col=col)
        fig.update_xaxes(title_text="traffic multiplier (× today's peak)", row=1, col=col)
    sat = table.loc[table["sim_saturated"], "traffic_multiplier"]
    note = f"simulated queue grows without bound from ×{sat.min():g}" if len(sat) else "no simulated saturation in this range"
    fig.update_layout(template="plotly_white", font=FONT)
    return fit_header(fig, f"Simulated latency against load on {gpus} GPUs", f"{note}; log scale",
                      panel_titles=True, height=height + 60)


def distribution_figure(result: SimResult, ttft_slo_ms: float, tpot_slo_ms: float, height: int = 340) -> go.Figure:
    """Simulated TTFT and TPOT of every request at today's load (cumulative share), the SLOs marked."""
    fig = make_subplots(rows=1, cols=2, subplot_titles=("TTFT", "TPOT"), horizontal_spacing=0.1)
    for col, metric, slo in ((1, "ttft_ms", ttft_slo_ms), (2, "tpot_ms", tpot_slo_ms)):
        v = np.sort(result.requests[metric].dropna().to_numpy())
        if v.size:
            share = np.arange(1, v.size + 1) / v.size
            keep = np.unique(np.linspace(0, v.size - 1, min(v.size, 400)).astype(int))  # 400 points draw the curve
            fig.add_trace(go.Scatter(x=v[keep], y=share[keep], mode="lines", line=dict(color=SIM_COLOR),
                                     name=metric.split("_")[0].upper(), showlegend=False,
                                     hovertemplate="%{y:.0%} of requests ≤ %{x:,.0f} ms<extra></extra>"),
                          row=1, col=col)
            met = float((v <= slo).mean())
            fig.add_trace(go.Scatter(x=[slo, slo], y=[0.0, 1.0], mode="lines", showlegend=False,
                                     line=dict(color=SLO_COLOR, dash="dash"),
                                     hovertemplate=f"SLO {slo:,.0f} ms: {met:.0%} of requests within<extra></extra>"),
                          row=1, col=col)
            fig.add_annotation(x=float(np.log10(slo)), y=0.05, text=f"SLO: {met:.0%} within", showarrow=False,
                               xanchor="left", font=dict(color=SLO_COLOR), row=1, col=col)
        fig.update_xaxes(title_text="ms", **log_axis([*v, slo]), row=1, col=col)
        fig.update_yaxes(title_text="share of requests", tickformat=".0%", range=[0, 1.02], row=1, col=col)
    fig.update_layout(template="plotly_white", font=FONT)
    return fit_header(fig, "Simulated TTFT and TPOT at today's load", "cumulative share of requests",
                      panel_titles=True, height=height)


def goodput_figure(table: pd.DataFrame, height: int = 300) -> go.Figure:
    """Simulated goodput (share of requests meeting both SLOs) against load."""
    fig = go.Figure(go.Scatter(x=table["traffic_multiplier"], y=table["goodput"], mode="lines+markers",
                               line=dict(color=SIM_COLOR), name="goodput",
                               hovertemplate="×%{x} traffic: %{y:.0%} meet both SLOs<extra></extra>"))
    fig.update_layout(template="plotly_white", font=FONT, xaxis_title="traffic multiplier (× today's peak)",
                      yaxis=dict(title="goodput", tickformat=".0%", range=[0, 1.02]))
    return fit_header(fig, "Simulated goodput", "share of requests meeting both SLOs", legend=False, height=height)
