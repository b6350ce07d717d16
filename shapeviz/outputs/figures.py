"""Plotly figure builders: analysis results in, figures out. No computation a page would need twice lives here.

Every figure is built from plain data (frames, dataclasses) so that the dashboard, the PNG export and the HTML
report draw the same thing. Large logs are aggregated before drawing: the plane switches to a log-binned
density with a uniform sample on top above a point budget, so the payload sent to a browser stays small.
"""
from __future__ import annotations

import copy
import math
import functools
import hashlib
from typing import Any, Callable, Iterable, Mapping, Sequence

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from shapeviz.analyses.shapes import (
    DEFAULT_CORNERS,
    SHAPE_LABELS,
    SHAPES,
    Corners,
    classify_codes,
)
from shapeviz.ingest import relative_times
from shapeviz.plotstyle import FONT, PALETTE, fit_header, header, integer_axis, log_axis
from shapeviz.workload import binning

CORNER_FILLS: dict[str, str] = {
    "chat": "rgba(0,114,178,0.06)",
    "rag": "rgba(230,159,0,0.08)",
    "reasoning": "rgba(204,121,167,0.08)",
    "agent": "rgba(213,94,0,0.07)",
    "autocomplete": "rgba(0,158,115,0.07)",
}
POINT_BUDGET = 20_000      # above this many requests the plane draws a density plus a sample
DENSITY_SAMPLE = 3_000     # points drawn on top of the density
TOKEN_TICKS: tuple[float, ...] = (1, 10, 100, 1_000, 10_000, 100_000, 1_000_000)
# The look of plotly_white for the small figures a slider step rebuilds: assigning a named template copies and
# validates the whole template on every figure (about 20 ms each, more than the figure itself).
LIGHT = dict(template=None, paper_bgcolor="white", plot_bgcolor="white", font=FONT)
LIGHT_AXIS = dict(gridcolor="rgba(0,0,0,0.07)", zeroline=False, linecolor="rgba(0,0,0,0.2)")


def fmt_tokens(value: float) -> str:
    """1234 → '1.2k', 6000 → '6k', 2500000 → '2.5M': how planners say token counts."""
    v = float(value)
    for div, suffix in ((1e6, "M"), (1e3, "k")):
        if abs(v) >= div:
            s = f"{v / div:.1f}".rstrip("0").rstrip(".")
            return f"{s}{suffix}"
    return f"{v:.0f}"


def product_colors(products: Iterable[str]) -> dict[str, str]:
    """A stable colour per product: the same name gets the same colour on every page and every rerun.

    Names are placed by a digest of the name (stable across logs), with linear probing so that up to
    len(PALETTE) products never share a colour.
    """
    colors: dict[str, str] = {}
    used: set[int] = set()
    for name in sorted({str(p) for p in products}):
        slot = int(hashlib.sha1(name.encode("utf-8")).hexdigest(), 16) % len(PALETTE)
        for step in range(len(PALETTE)):
            candidate = (slot + step) % len(PALETTE)
            if candidate not in used or len(used) >= len(PALETTE):
                slot = candidate
                break
        used.add(slot)
        colors[name] = PALETTE[slot]
    return colors


def _log_range(values: np.ndarray, pad: float = 0.15) -> list[float]:
    v = np.asarray(values, dtype=np.float64)
    v = v[v > 0]
    if v.size == 0:
        return [0.0, 4.0]
    lo, hi = np.log10(np.quantile(v, 0.0005)), np.log10(v.max())
    return [max(0.0, lo - pad), max(hi + pad, lo + 1.0)]


def _token_axis(fig: go.Figure, title: str | None, row: int, col: int, axis: str, rng: Sequence[float]) -> None:
    ticks = [t for t in TOKEN_TICKS if rng[0] - 0.01 <= np.log10(t) <= rng[1] + 0.01]
    update = fig.update_xaxes if axis == "x" else fig.update_yaxes
    update(
        type="log", range=list(rng), tickvals=ticks, ticktext=[fmt_tokens(t) for t in ticks],
        title_text=title, row=row, col=col, showgrid=True, gridcolor="rgba(0,0,0,0.07)", zeroline=False,
    )


def _corner_shapes(fig: go.Figure, corners: Corners, xr: Sequence[float], yr: Sequence[float],
                   xref: str = "x3", yref: str = "y3") -> None:
    """Shade the five corners and label each one that is visible."""
    li, lo, so = (np.log10(v) for v in (corners.long_input_tokens, corners.long_output_tokens,
                                        corners.short_output_tokens))
    x0, x1, y0, y1 = 0.0, 8.0, 0.0, 8.0
    regions = {
        "autocomplete": (x0, li, y0, so),
        "chat": (x0, li, so, lo),
        "reasoning": (x0, li, lo, y1),
        "rag": (li, x1, y0, lo),
        "agent": (li, x1, lo, y1),
    }
    for shape, (ax0, ax1, ay0, ay1) in regions.items():
        # Shapes take data values on log axes (annotations take log10 values).
        fig.add_shape(type="rect", x0=10**ax0, x1=10**ax1, y0=10**ay0, y1=10**ay1, xref=xref, yref=yref,
                      layer="between",
                      line_width=0, fillcolor=CORNER_FILLS[shape])
        # Label at the visible inner corner of the region.
        vx0, vx1 = max(ax0, xr[0]), min(ax1, xr[1])
        vy0, vy1 = max(ay0, yr[0]), min(ay1, yr[1])
        if vx1 - vx0 < 0.25 or vy1 - vy0 < 0.12:
            continue
        left = ax0 <= 0.0
        top = ay1 >= 8.0
        fig.add_annotation(
            x=(vx0 + 0.04) if left else (vx1 - 0.04), y=(vy1 - 0.04) if top else (vy0 + 0.04),
            xref=xref, yref=yref, text=SHAPE_LABELS[shape], showarrow=False,
            xanchor="left" if left else "right", yanchor="top" if top else "bottom",
            font=dict(size=11, color="rgba(60,60,60,0.85)"),
        )
    for value, axis in ((li, "x"), (lo, "y"), (so, "y")):
        if axis == "x":
            fig.add_shape(type="line", x0=10**value, x1=10**value, y0=10**y0, y1=10**y1, xref=xref, yref=yref,
                          line=dict(color="rgba(80,80,80,0.45)", width=1, dash="dot"), layer="between")
        else:
            x_end = li if value == so else x1
            fig.add_shape(type="line", x0=10**x0, x1=10**x_end, y0=10**value, y1=10**value, xref=xref, yref=yref,
                          line=dict(color="rgba(80,80,80,0.45)", width=1, dash="dot"), layer="between")


def plane_figure(
    frame: pd.DataFrame,
    *,
    corners: Corners = DEFAULT_CORNERS,
    colors: dict[str, str] | None = None,
    point_budget: int = POINT_BUDGET,
    balance: tuple[np.ndarray, np.ndarray] | None = None,
    balance_label: str = "prefill = decode GPU-time",
    shift: tuple[float, float] | None = None,
    title: str | None = None,
    height: int = 640,
    seed: int = 0,
) -> go.Figure:
    """The input-vs-output token plane: corners, products, p50 markers, marginals; a density for big logs.

    Args:
        frame: canonical frame (``input_tokens``, ``output_tokens``, ``product``).
        corners: boundaries of the corner overlays.
        colors: product → colour (``product_colors`` by default).
        point_budget: above this many rows, draw a log-binned density and a uniform sample instead.
        balance: (input tokens, output tokens) of the balance line, drawn dashed when given.
        shift: (trim_input, trim_output) fractions of a what-if; draws each product's p50 moving there.
    """
    products = [str(p) for p in frame["product"].astype("category").cat.categories
                if (frame["product"] == p).any()]
    colors = colors or product_colors(products)
    inp = frame["input_tokens"].to_numpy()
    out = frame["output_tokens"].to_numpy()
    xr, yr = _log_range(inp), _log_range(out)

    fig = make_subplots(
        rows=2, cols=2, column_widths=[0.84, 0.16], row_heights=[0.16, 0.84],
        shared_xaxes=True, shared_yaxes=True, horizontal_spacing=0.01, vertical_spacing=0.01,
    )
    dense = len(frame) > point_budget
    if dense:
        bins = binning.bin_plane(frame).total
        counts = np.where(bins > 0, bins, np.nan).T  # heatmap z is [y][x]
        fig.add_trace(
            go.Heatmap(
                x=binning.EDGES, y=binning.EDGES, z=np.log10(counts), name="density",
                colorscale=[[0, "rgb(235,238,245)"], [0.5, "rgb(140,150,175)"], [1, "rgb(40,45,70)"]],
                showscale=False, customdata=np.nan_to_num(counts).astype(np.int64),
                hovertemplate="%{customdata:,} requests in this cell<extra>density</extra>",
            ),
            row=2, col=1,
        )
        points = binning.uniform_sample(frame, DENSITY_SAMPLE, seed=seed)
    else:
        points = frame
    marker_size = 4 if dense or len(points) > 5_000 else 6
    codes = classify_codes(points["input_tokens"].to_numpy(), points["output_tokens"].to_numpy(), corners)
    corner_names = np.array(SHAPES, dtype=object)[codes]
    for name in products:
        mask = (points["product"] == name).to_numpy()
        if not mask.any():
            continue
        fig.add_trace(
            go.Scattergl(
                x=points["input_tokens"].to_numpy()[mask], y=points["output_tokens"].to_numpy()[mask],
                mode="markers", name=name, legendgroup=name,
                marker=dict(size=marker_size, color=colors[name], opacity=0.55 if not dense else 0.7, line_width=0),
                customdata=corner_names[mask],
                hovertemplate=(f"<b>{_escape(name)}</b><br>%{{x:,}} input → %{{y:,}} output tokens"
                               "<br>corner: %{customdata}<extra></extra>"),
            ),
            row=2, col=1,
        )
    # p50 markers per product (add_whatif_shift draws where a what-if moves them).
    p50 = frame.groupby("product", observed=True)[["input_tokens", "output_tokens"]].median()
    for name in products:
        if name not in p50.index:
            continue
        px, py = float(p50.loc[name, "input_tokens"]), float(p50.loc[name, "output_tokens"])
        fig.add_trace(
            go.Scatter(
                x=[px], y=[py], mode="markers", name=f"{name} p50", legendgroup=name, showlegend=False,
                marker=dict(symbol="diamond", size=15, color=colors[name], line=dict(color="black", width=1.5)),
                hovertemplate=(f"<b>{_escape(name)}</b> median request<br>{fmt_tokens(px)} in / "
                               f"{fmt_tokens(py)} out<extra></extra>"),
            ),
            row=2, col=1,
        )
    # Marginal distributions, log-binned, one step line per product.
    centres = 10.0 ** ((binning.LOG_EDGES[:-1] + binning.LOG_EDGES[1:]) / 2)
    for name in products:
        sub = frame.loc[frame["product"] == name]
        _, cx = binning.marginal(sub["input_tokens"].to_numpy())
        _, cy = binning.marginal(sub["output_tokens"].to_numpy())
        nzx, nzy = cx > 0, cy > 0
        fig.add_trace(go.Scatter(x=centres[nzx], y=cx[nzx], mode="lines", line_shape="hvh", showlegend=False,
                                 legendgroup=name, line=dict(color=colors[name], width=1.5),
                                 hovertemplate=f"{_escape(name)}: %{{y:,}} requests near %{{x:,.0f}} input tokens<extra></extra>"),
                      row=1, col=1)
        fig.add_trace(go.Scatter(x=cy[nzy], y=centres[nzy], mode="lines", line_shape="vhv", showlegend=False,
                                 legendgroup=name, line=dict(color=colors[name], width=1.5),
                                 hovertemplate=f"{_escape(name)}: %{{x:,}} requests near %{{y:,.0f}} output tokens<extra></extra>"),
                      row=2, col=2)
    if shift is not None:
        add_whatif_shift(fig, p50, shift, colors)
    if balance is not None:
        add_balance_line(fig, balance[0], balance[1], balance_label)
    _corner_shapes(fig, corners, xr, yr)
    _token_axis(fig, "input tokens per request (log)", 2, 1, "x", xr)
    _token_axis(fig, "output tokens per request (log)", 2, 1, "y", yr)
    _token_axis(fig, None, 1, 1, "x", xr)
    _token_axis(fig, None, 2, 2, "y", yr)
    fig.update_yaxes(row=1, col=1, showticklabels=False, showgrid=False, title_text=None)
    fig.update_xaxes(row=2, col=2, showticklabels=False, showgrid=False, title_text=None)
    subtitle = (f"density of {len(frame):,} requests, {len(points):,} sampled points on top"
                if dense else f"{len(frame):,} requests")
    fig.update_layout(
        title=dict(text=(title or "Workload shape: input vs output tokens") + f"<br><sup>{subtitle}</sup>", x=0.01),
        height=height, template="plotly_white", font=FONT, margin=dict(l=60, r=20, t=70, b=110),
        legend=dict(orientation="h", yanchor="top", y=-0.1, x=0, itemsizing="constant"),
        hovermode="closest",
    )
    return fig


def add_whatif_shift(fig: go.Figure, p50: pd.DataFrame, shift: tuple[float, float], colors: dict[str, str]) -> None:
    """Arrows from each product's p50 to where the what-if trims move it, on a ``plane_figure``.

    ``p50``: median ``input_tokens``/``output_tokens`` indexed by product; ``shift``: (trim_input, trim_output).
    """
    if not (shift[0] > 0 or shift[1] > 0):
        return
    for name, row in p50.iterrows():  # one row per product, not per request
        px, py = float(row["input_tokens"]), float(row["output_tokens"])
        nx, ny = max(px * (1 - shift[0]), 1.0), max(py * (1 - shift[1]), 1.0)
        color = colors.get(str(name), "#555")
        fig.add_annotation(
            x=np.log10(nx), y=np.log10(ny), ax=np.log10(px), ay=np.log10(py), xref="x3", yref="y3",
            axref="x3", ayref="y3", showarrow=True, arrowhead=2, arrowwidth=1.5, arrowcolor=color, text="",
        )
        fig.add_trace(
            go.Scatter(
                x=[nx], y=[ny], mode="markers", name=f"{name} p50 after what-if", legendgroup=str(name),
                showlegend=False, marker=dict(symbol="diamond-open", size=15, color=color, line=dict(width=2)),
                hovertemplate=(f"<b>{_escape(str(name))}</b> median after what-if<br>{fmt_tokens(nx)} in / "
                               f"{fmt_tokens(ny)} out<extra></extra>"),
            ),
            row=2, col=1,
        )


def whatif_shift_figure(p50: pd.DataFrame, shift: tuple[float, float], colors: dict[str, str],
                        balance: tuple[np.ndarray, np.ndarray] | None = None, height: int = 300) -> go.Figure:
    """Each product's median request before (filled) and after (open) the what-if trims, on log token axes.

    Its names are escaped here (they come from the log), so it is drawn as it is, without an inert copy.

    A few points and arrows, drawn apart from the plane: a slider step redraws this, never the plane's
    thousands of points. ``balance`` adds the prefill = decode line of the deployment.
    """
    fig = go.Figure()
    xs, ys = [], []
    for name, row in p50.iterrows():  # one row per product, not per request
        px, py = float(row["input_tokens"]), float(row["output_tokens"])
        nx, ny = max(px * (1 - shift[0]), 1.0), max(py * (1 - shift[1]), 1.0)
        xs += [px, nx]
        ys += [py, ny]
        color = colors.get(str(name), "#555")
        label = _escape(str(name))  # a name from the log: inert in the legend and the hover text
        if (nx, ny) != (px, py):
            fig.add_annotation(x=np.log10(nx), y=np.log10(ny), ax=np.log10(px), ay=np.log10(py), xref="x", yref="y",
                               axref="x", ayref="y", showarrow=True, arrowhead=2, arrowwidth=1.5, arrowcolor=color,
                               text="")
        fig.add_trace(go.Scatter(
            x=[px, nx], y=[py, ny], mode="markers", name=label, legendgroup=label,
            marker=dict(symbol=["diamond", "diamond-open"], size=13, color=color, line=dict(color=color, width=2)),
            customdata=[["today"], ["after the what-if"]],
            hovertemplate=f"<b>{label}</b> median %{{customdata[0]}}<br>%{{x:,.0f}} in / %{{y:,.0f}} out<extra></extra>",
        ))
    xr, yr = _log_range(np.asarray(xs), pad=0.35), _log_range(np.asarray(ys), pad=0.35)
    if balance is not None:
        fig.add_trace(go.Scatter(x=balance[0], y=balance[1], mode="lines", name="prefill = decode GPU-time",
                                 line=dict(color="#333", width=2, dash="dash"),
                                 hovertemplate="balance: %{x:,.0f} in ↔ %{y:,.0f} out<extra></extra>"))
    for axis, rng, title in (("x", xr, "input tokens (log)"), ("y", yr, "output tokens (log)")):
        ticks = [v for v in (1, 10, 100, 1e3, 1e4, 1e5, 1e6) if rng[0] <= np.log10(v) <= rng[1]]
        getattr(fig, f"update_{axis}axes")(type="log", range=rng, tickvals=ticks,
                                           ticktext=[fmt_tokens(v) for v in ticks], title_text=title, **LIGHT_AXIS)
    moved = shift[0] > 0 or shift[1] > 0
    fig.update_layout(
        height=height, **LIGHT, margin=dict(l=60, r=20, t=50, b=40),
        title=dict(text="Each product's median request" + (" before → after the what-if" if moved else
                                                            "<br><sup>move a trim slider to see it shift</sup>"), x=0.01),
        legend=dict(orientation="v", x=1.02, y=1), hovermode="closest",
    )
    return fig


def add_balance_line(fig: go.Figure, input_tokens: np.ndarray, output_tokens: np.ndarray, label: str) -> None:
    """The dashed line where prefill and decode GPU-time of a request are equal, on a ``plane_figure``."""
    fig.add_trace(
        go.Scatter(x=input_tokens, y=output_tokens, mode="lines", name=label,
                   line=dict(color="#333", width=2, dash="dash"),
                   hovertemplate="balance: %{x:,.0f} in ↔ %{y:,.0f} out<extra></extra>"),
        row=2, col=1,
    )


def _escape(text: str) -> str:
    """Product names come from user data: keep them inert inside plotly's HTML-ish labels."""
    return (str(text).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
            .replace("%{", "%&#123;"))


def figure_bytes(fig: go.Figure) -> int:
    """Size of the JSON a browser receives for a figure."""
    return len(fig.to_json().encode("utf-8"))


CLUSTER_COLORS: tuple[str, ...] = ("#4C78A8", "#F58518", "#54A24B", "#B279A2", "#E45756", "#72B7B2", "#9D755D", "#BAB0AC")


def clusters_figure(
    frame: pd.DataFrame,
    labels: np.ndarray,
    clusters: Sequence,
    *,
    corners: Corners = DEFAULT_CORNERS,
    rate_rps: float | None = None,
    height: int = 600,
    seed: int = 0,
) -> go.Figure:
    """Clusters on the plane: a sample of requests coloured by cluster, bubbles at the centres sized by rate.

    ``clusters`` are ``shapeviz.analyses.clusters.Cluster`` objects (id, share, input_center, output_center, shape).
    Bubble area is proportional to the cluster's request rate (its share of ``rate_rps``) or, without
    timestamps, to its share of requests.
    """
    sample_idx = np.arange(len(frame))
    if len(frame) > 6_000:
        rng = np.random.default_rng(seed)
        sample_idx = np.sort(rng.choice(len(frame), size=6_000, replace=False))
    inp = frame["input_tokens"].to_numpy()[sample_idx]
    out = frame["output_tokens"].to_numpy()[sample_idx]
    lab = np.asarray(labels)[sample_idx]
    fig = go.Figure()
    for c in clusters:
        mask = lab == c.id
        color = CLUSTER_COLORS[c.id % len(CLUSTER_COLORS)]
        fig.add_trace(go.Scattergl(
            x=inp[mask], y=out[mask], mode="markers", name=f"cluster {c.id}: {c.shape}", legendgroup=str(c.id),
            marker=dict(size=4, color=color, opacity=0.35), hoverinfo="skip",
        ))
    shares = np.array([c.share for c in clusters], dtype=np.float64)
    sizes = 18 + 70 * np.sqrt(shares / max(shares.max(), 1e-9))
    for c, size in zip(clusters, sizes):
        color = CLUSTER_COLORS[c.id % len(CLUSTER_COLORS)]
        rate = f"{c.share * rate_rps:,.2f} req/s" if rate_rps else f"{c.share:.0%} of requests"
        fig.add_trace(go.Scatter(
            x=[c.input_center], y=[c.output_center], mode="markers+text", showlegend=False, legendgroup=str(c.id),
            marker=dict(size=size, color=color, opacity=0.75, line=dict(color="black", width=1.5)),
            text=[f"C{c.id}"], textfont=dict(color="white", size=12),
            hovertemplate=(f"<b>cluster {c.id}</b> · {SHAPE_LABELS[c.shape]}<br>centre {fmt_tokens(c.input_center)} in / "
                           f"{fmt_tokens(c.output_center)} out<br>{rate} · {c.gpu_share:.0%} of GPU-time<extra></extra>"),
        ))
    xr, yr = _log_range(frame["input_tokens"].to_numpy()), _log_range(frame["output_tokens"].to_numpy())
    _corner_shapes(fig, corners, xr, yr, xref="x", yref="y")
    for axis, rng, title in (("x", xr, "input tokens per request (log)"), ("y", yr, "output tokens per request (log)")):
        ticks = [v for v in TOKEN_TICKS if rng[0] - 0.01 <= np.log10(v) <= rng[1] + 0.01]
        (fig.update_xaxes if axis == "x" else fig.update_yaxes)(
            type="log", range=rng, tickvals=ticks, ticktext=[fmt_tokens(v) for v in ticks], title_text=title,
            gridcolor="rgba(0,0,0,0.07)")
    fig.update_layout(
        title=dict(text="Clusters of the token plane<br><sup>bubble area ∝ request rate</sup>", x=0.01),
        height=height, template="plotly_white", font=FONT, margin=dict(l=60, r=20, t=70, b=100),
        legend=dict(orientation="h", yanchor="top", y=-0.14, x=0),
    )
    return fig


BEFORE_AFTER = ("#9AA5B1", "#0072B2")


def pressure_figure(before: Mapping, after: Mapping, ttft_slo_ms: float, tpot_slo_ms: float,
                    height: int = 360) -> go.Figure:
    """Prefill and decode pressure, TTFT and TPOT p90 against their SLOs: before → after the what-if.

    ``before``/``after`` are rows of ``capacity.load_curve`` on the same fleet (keys ``prefill_utilization``,
    ``decode_utilization``, ``ttft_p90_ms``, ``tpot_p90_ms``). Latencies are drawn as a share of their SLO so
    all four share one axis: 100% is the limit.

    Drawn on every what-if step: built as one dict (5 ms) rather than trace by trace (~30 ms of plotly's updates).
    """
    def row(r: Mapping) -> list[float | None]:
        ttft, tpot = r["ttft_p90_ms"], r["tpot_p90_ms"]
        return [
            float(r["prefill_utilization"]), float(r["decode_utilization"]),
            None if pd.isna(ttft) else float(ttft) / ttft_slo_ms, None if pd.isna(tpot) else float(tpot) / tpot_slo_ms,
        ]

    labels = ["prefill pressure", "decode pressure", "TTFT p90 / SLO", "TPOT p90 / SLO"]
    data = []
    for name, r, color in (("before", before, BEFORE_AFTER[0]), ("after what-if", after, BEFORE_AFTER[1])):
        values = row(r)
        data.append(dict(
            type="bar", x=labels, y=[v if v is not None else 0 for v in values], name=name,
            marker=dict(color=color), text=[("saturated" if v is None else f"{v:.0%}") for v in values],
            textposition="outside", hovertemplate="%{x}: %{text}<extra>" + name + "</extra>",
        ))
    layout = dict(
        barmode="group", **LIGHT,
        yaxis=dict(**LIGHT_AXIS, tickformat=".0%", title=dict(text="share of capacity or SLO")),
        shapes=[dict(type="line", xref="paper", x0=0, x1=1, y0=1.0, y1=1.0,
                     line=dict(color="#C0392B", dash="dash", width=1.5))],
        annotations=[dict(xref="paper", x=0, y=1.0, text="limit / SLO", showarrow=False, xanchor="left",
                          yanchor="bottom")],
    )
    layout.update(header("Pressure on each phase, on today's fleet", height=height, legend=_legend(data)))
    return _figure(data, layout)


def _legend(data: list[dict]) -> list[str]:
    """The legend's names of a figure built from dicts (``header`` counts its rows): in the dict, not a figure,
    so a figure redrawn on every what-if step is laid out once (``fit_header`` on a figure costs 4 ms more)."""
    return [str(d["name"]) for d in data if d.get("showlegend", True) and d.get("name")]


def _figure(data: list[dict], layout: dict) -> go.Figure:
    """A figure from whole dicts (validated once), without a template when ``layout`` says ``template=None``.

    In a layout dict given to ``go.Figure`` a None template means plotly's default one; assigned afterwards, as
    ``update_layout(**LIGHT)`` does, it means none: assigned afterwards here too, so both ways draw the same.
    """
    no_template = "template" in layout and layout.pop("template") is None
    fig = go.Figure(dict(data=data, layout=layout))
    if no_template:
        fig.update_layout(template=None)
    return fig


@functools.cache
def _two_panel_layout(titles: tuple[str, str]) -> dict:
    """The layout ``make_subplots(1, 2)`` gives (axes' domains and anchors, the panel titles), made once."""
    return make_subplots(rows=1, cols=2, subplot_titles=titles, horizontal_spacing=0.1).layout.to_plotly_json()


def load_curve_figure(curve: pd.DataFrame, ttft_slo_ms: float, tpot_slo_ms: float, current: float = 1.0,
                      height: int = 380) -> go.Figure:
    """TTFT and TPOT (p50, p90) against traffic multiplier on a fixed fleet, SLOs dashed, today marked.

    Drawn on every what-if step: built as one dict (5 ms) rather than trace by trace (~100 ms of plotly's updates).
    """
    layout = copy.deepcopy(_two_panel_layout(("TTFT", "TPOT")))
    data, shapes, annotations = [], [], layout.get("annotations", [])
    x = curve["traffic_multiplier"]
    for col, metric, slo in ((1, "ttft", ttft_slo_ms), (2, "tpot", tpot_slo_ms)):
        axis = "" if col == 1 else str(col)
        for q, dash in (("p50", "dot"), ("p90", "solid")):
            data.append(dict(
                type="scatter", x=x, y=curve[f"{metric}_{q}_ms"], mode="lines+markers", name=f"{q}", legendgroup=q,
                showlegend=col == 1, line=dict(color="#0072B2", dash=dash),
                hovertemplate=f"×%{{x}} traffic: {metric.upper()} {q} %{{y:,.0f}} ms<extra></extra>",
                xaxis=f"x{axis}", yaxis=f"y{axis}",
            ))
        shapes.append(dict(type="line", xref=f"x{axis} domain", yref=f"y{axis}", x0=0, x1=1, y0=slo, y1=slo,
                           line=dict(color="#C0392B", dash="dash")))
        annotations.append(dict(xref=f"x{axis} domain", yref=f"y{axis}", x=0, y=slo, text=f"SLO {slo:,.0f} ms",
                                showarrow=False, xanchor="left", yanchor="bottom"))
        shapes.append(dict(type="line", xref=f"x{axis}", yref=f"y{axis} domain", x0=current, x1=current, y0=0, y1=1,
                           line=dict(color="#555", dash="dot")))
        layout[f"yaxis{axis}"].update(title=dict(text="ms"), rangemode="tozero", **LIGHT_AXIS)
        layout[f"xaxis{axis}"].update(title=dict(text="traffic multiplier (× today's peak)"), **LIGHT_AXIS)
    saturated = curve.loc[curve["saturated"], "traffic_multiplier"]
    note = (f"saturates from ×{saturated.min():g}" if len(saturated) else "no saturation in this range")
    layout.update(**LIGHT, shapes=shapes, annotations=annotations)
    layout.update(header(f"Latency against load on {int(curve['gpus'].iloc[0])} GPUs",
                         f"{note}; dotted line: the operating point", height=height, legend=_legend(data),
                         panel_titles=True))
    return _figure(data, layout)


def speculative_figure(curve: pd.DataFrame, tpot_slo_ms: float, current_rps: float,
                       stops_rps: float | None = None, label: str = "speculative", height: int = 380) -> go.Figure:
    """TPOT p50 with and without speculative decoding, and the speed-up, against request rate on a fixed fleet.

    ``curve`` is ``SpeculativeEffect.curve``; the dotted line marks today's rate, the dashed one the rate above
    which the lever costs more than it saves (when the fleet reaches it).
    """
    fig = make_subplots(rows=1, cols=2, subplot_titles=("TPOT p50", "Speed-up (without / with)"),
                        horizontal_spacing=0.1)
    x = curve["rate_rps"]
    for name, column, dash in (("without", "tpot_p50_ms_without", "solid"), (label, "tpot_p50_ms_with", "dot")):
        fig.add_trace(go.Scatter(x=x, y=curve[column], mode="lines", name=name, line=dict(color="#0072B2", dash=dash),
                                 hovertemplate=f"%{{x:,.3g}} req/s: {name} %{{y:,.1f}} ms<extra></extra>"), row=1, col=1)
    gain = curve["speedup"].where(curve["speedup"] > 0)
    fig.add_trace(go.Scatter(x=x, y=gain, mode="lines", name="speed-up", line=dict(color="#009E73"),
                             hovertemplate="%{x:,.3g} req/s: ×%{y:.2f}<extra></extra>"), row=1, col=2)
    fig.add_shape(type="line", xref="x domain", yref="y", x0=0, x1=1, y0=tpot_slo_ms, y1=tpot_slo_ms,
                  line=dict(color="#C0392B", dash="dash"))
    fig.add_annotation(xref="x domain", yref="y", x=0, y=tpot_slo_ms, text=f"SLO {tpot_slo_ms:,.0f} ms",
                       showarrow=False, xanchor="left", yanchor="bottom")
    fig.add_shape(type="line", xref="x2 domain", yref="y2", x0=0, x1=1, y0=1.0, y1=1.0,
                  line=dict(color="#555", dash="dash"))
    for axis in ("", "2"):
        fig.add_shape(type="line", xref=f"x{axis}", yref=f"y{axis} domain", x0=current_rps, x1=current_rps, y0=0,
                      y1=1, line=dict(color="#555", dash="dot"))
        if stops_rps is not None:
            fig.add_shape(type="line", xref=f"x{axis}", yref=f"y{axis} domain", x0=stops_rps, x1=stops_rps, y0=0,
                          y1=1, line=dict(color="#C0392B", dash="dash"))
    fig.update_xaxes(title_text="request rate on this fleet (req/s)", **log_axis(x), **LIGHT_AXIS)
    fig.update_yaxes(title_text="ms", rangemode="tozero", row=1, col=1, **LIGHT_AXIS)
    fig.update_yaxes(title_text="× faster", rangemode="tozero", row=1, col=2, **LIGHT_AXIS)
    where = (f"stops paying above {stops_rps:,.3g} req/s (red dashes)" if stops_rps is not None
             else "pays at every rate this fleet carries")
    fig.update_layout(**LIGHT)
    return fit_header(fig, "Speculative decoding against load", f"{where}; dotted line: today", panel_titles=True,
                      height=height)


def time_axis(times: pd.Series) -> tuple[Callable[[pd.Series], pd.Series], str | None]:
    """How to draw times as the log has them: ``(to_x, axis title)``. Dates stay dates; offsets from the trace's
    start (``ingest.relative_times``) become elapsed minutes or hours, never dates in 1970."""
    if not relative_times(times):
        return (lambda t: t), None
    hours = float(pd.to_datetime(times, utc=True).max().value) / 1e9 >= 2 * 3600
    scale, title = (3600, "hours from the log's start") if hours else (60, "minutes from the log's start")
    return (lambda t: pd.to_datetime(t, utc=True).astype("int64") / 1e9 / scale), title


def rate_figure(rates: pd.DataFrame, colors: dict[str, str] | None = None, height: int = 320) -> go.Figure:
    """Request rate over time per product (stacked), from ``capacity.rate_over_time``."""
    products = [str(p) for p in rates["product"].unique()]
    colors = colors or product_colors(products)
    to_x, x_title = time_axis(rates["timestamp"])
    fig = go.Figure()
    for name in products:
        sub = rates[rates["product"] == name]
        fig.add_trace(go.Scatter(
            x=to_x(sub["timestamp"]), y=sub["rate_rps"], mode="lines", stackgroup="rate", name=name,
            line=dict(width=0.5, color=colors.get(name, "#888")),
            hovertemplate=f"{_escape(name)}: %{{y:.2f}} req/s<extra></extra>",
        ))
    fig.update_layout(template="plotly_white", font=FONT, yaxis_title="requests / s", xaxis_title=x_title)
    return fit_header(fig, "Request rate over time", height=height)


def turn_growth_figure(profile: pd.DataFrame, colors: dict[str, str] | None = None, height: int = 380) -> go.Figure:
    """Input tokens by turn index per product: the median line and a p10–p90 band (``sessions.turn_profile``)."""
    products = [str(p) for p in profile["product"].unique()]
    colors = colors or product_colors(products)
    fig = go.Figure()
    for name in products:
        sub = profile[profile["product"] == name].sort_values("turn")
        color = colors.get(name, "#888")
        x = sub["turn"].to_numpy() + 1  # people count turns from 1
        fig.add_trace(go.Scatter(x=np.concatenate([x, x[::-1]]),
                                 y=np.concatenate([sub["input_tokens_p90"], sub["input_tokens_p10"][::-1]]),
                                 fill="toself", fillcolor=color, opacity=0.15, line_width=0, hoverinfo="skip",
                                 showlegend=False, legendgroup=name))
        fig.add_trace(go.Scatter(x=x, y=sub["input_tokens_p50"], mode="lines+markers", name=name, legendgroup=name,
                                 line=dict(color=color), customdata=sub["sessions"],
                                 hovertemplate=(f"{_escape(name)} turn %{{x}}: median %{{y:,.0f}} input tokens"
                                                "<br>%{customdata:,} sessions reach this turn<extra></extra>")))
    band = pd.concat([profile["input_tokens_p10"], profile["input_tokens_p90"]])
    fig.update_yaxes(title_text="input tokens (median, p10–p90 band)", **log_axis(band, fmt_tokens))
    fig.update_xaxes(title_text="turn in session")
    fig.update_layout(template="plotly_white", font=FONT)
    return fit_header(fig, "Context growth per turn", height=height)


def ttft_turn_figure(ttft: pd.DataFrame, colors: dict[str, str] | None = None, height: int = 340) -> go.Figure:
    """Prefill time of turn k relative to turn 1, per product (``sessions.ttft_by_turn``)."""
    products = [str(p) for p in ttft["product"].unique()]
    colors = colors or product_colors(products)
    fig = go.Figure()
    for name in products:
        sub = ttft[ttft["product"] == name].sort_values("turn")
        fig.add_trace(go.Scatter(x=sub["turn"] + 1, y=sub["ratio_to_turn_1"], mode="lines+markers", name=name,
                                 line=dict(color=colors.get(name, "#888")), customdata=sub["ttft_ms_p50"],
                                 hovertemplate=(f"{_escape(name)} turn %{{x}}: %{{y:.1f}}× turn 1 "
                                                "(p50 %{customdata:,.0f} ms)<extra></extra>")))
    fig.add_hline(y=1.0, line=dict(color="#999", dash="dot"))
    fig.update_layout(template="plotly_white", font=FONT, xaxis_title="turn in session", yaxis_title="× turn 1")
    return fit_header(fig, "TTFT of turn k against turn 1 (prefill only, no queueing)", height=height)


def prefix_curve_figure(curve: Sequence[dict], unbounded: float | None, height: int = 340) -> go.Figure:
    """Prefix-cache hit ratio against cache capacity (LRU), from ``PrefixReuse.capacity_curve``."""
    points = pd.DataFrame(list(curve))
    use_gb = "capacity_gb" in points and points["capacity_gb"].notna().all()
    x = points["capacity_gb"] if use_gb else points["capacity_blocks"]
    fig = go.Figure()
    fig.add_trace(go.Scatter(x=x, y=points["hit_ratio_tokens"], mode="lines+markers", name="token-weighted",
                             line=dict(color="#0072B2"),
                             hovertemplate="%{x:,.1f}: %{y:.1%} of input tokens<extra></extra>"))
    fig.add_trace(go.Scatter(x=x, y=points["hit_ratio_blocks"], mode="lines", name="blocks",
                             line=dict(color="#56B4E9", dash="dot"),
                             hovertemplate="%{x:,.1f}: %{y:.1%} of blocks<extra></extra>"))
    if unbounded is not None:
        fig.add_hline(y=unbounded, line=dict(color="#999", dash="dash"),
                      annotation_text=f"unbounded cache {unbounded:.1%}", annotation_position="bottom right")
    fig.update_xaxes(title_text="cache capacity (GB of KV)" if use_gb else "cache capacity (blocks)", **log_axis(x))
    fig.update_yaxes(tickformat=".0%", rangemode="tozero", title_text="prefix-cache hit ratio")
    fig.update_layout(template="plotly_white", font=FONT)
    return fit_header(fig, "Prefix-cache hit ratio against capacity (LRU)", height=height)


def product_latency_figure(requests: pd.DataFrame, classes: Mapping[str, object], height: int = 360) -> go.Figure:
    """Each product's simulated TTFT and TPOT (cumulative share), each against its own class (a marker at the
    class's target and percentile)."""
    fig = make_subplots(rows=1, cols=2, subplot_titles=("TTFT", "TPOT"), horizontal_spacing=0.1)
    products = sorted(requests["product"].astype(str).unique()) if "product" in requests.columns else []
    colors = product_colors(products)
    for name in products:
        r = requests[requests["product"].astype(str) == name]
        cls = classes.get(name)
        for col, metric, target_attr in ((1, "ttft_ms", "ttft_ms"), (2, "tpot_ms", "tpot_ms")):
            v = np.sort(r[metric].dropna().to_numpy())
            if v.size == 0:
                continue
            share = np.arange(1, v.size + 1) / v.size
            keep = np.unique(np.linspace(0, v.size - 1, min(v.size, 300)).astype(int))
            label = _escape(name)
            fig.add_trace(go.Scatter(x=v[keep], y=share[keep], mode="lines", line=dict(color=colors[name]),
                                     name=label, legendgroup=label, showlegend=col == 1,
                                     hovertemplate=f"{label}: %{{y:.0%}} ≤ %{{x:,.0f}} ms<extra></extra>"),
                          row=1, col=col)
            if cls is not None:
                target = float(getattr(cls, target_attr))
                q = float(getattr(cls, "percentile", 90)) / 100.0
                fig.add_trace(go.Scatter(x=[target], y=[q], mode="markers", legendgroup=label, showlegend=False,
                                         marker=dict(symbol="x", size=11, color=colors[name]),
                                         hovertemplate=f"{label} class: p{q * 100:.0f} ≤ {target:,.0f} ms<extra></extra>"),
                              row=1, col=col)
        for col, metric in ((1, "ttft_ms"), (2, "tpot_ms")):
            fig.update_xaxes(title_text="ms", **log_axis(requests[metric]), row=1, col=col)
            fig.update_yaxes(title_text="share of the product's requests", tickformat=".0%", range=[0, 1.02],
                             row=1, col=col)
    fig.update_layout(template="plotly_white", font=FONT)
    return fit_header(fig, "Each product against its own class",
                      "simulated; × marks the class (target at its percentile): a curve left of its × at that height "
                      "meets it", panel_titles=True, height=height)


POLICY_COLORS = {"peak": "#9AA5B1", "utilization": "#E69F00", "slo": "#0072B2", "schedule": "#009E73",
                 "queue": "#CC79A7"}
# Policies often hold the same replicas (all at one at a quiet hour): a dash and width each keep every line visible.
POLICY_LINES = {"peak": ("solid", 4.0), "utilization": ("dash", 3.0), "slo": ("dot", 2.4), "schedule": ("dashdot", 1.8),
                "queue": ("longdash", 1.4)}
MINUTE_POINTS = 1500   # the per-minute replica chart draws at most this many steps (a week is 10,080 minutes)


def replica_minutes_figure(minutes: Mapping[str, Any], label: str, gpus_per_replica: int = 1,
                           max_points: int = MINUTE_POINTS, height: int = 400) -> go.Figure:
    """One policy's schedule minute by minute (``AutoscaleResult.minutes()``): the request rate (top), and the
    replicas paid for, serving and needed as steps (bottom). Aggregated before drawing into at most ``max_points``
    steps: the mean rate and the most replicas of each step's minutes."""
    n = len(minutes["replicas"])
    step = max(1, int(math.ceil(n / max(max_points, 1))))
    edges = np.arange(0, n, step)

    def per_step(values: Any, how: Callable[..., np.ndarray]) -> np.ndarray:
        v = np.asarray(values, dtype=np.float64)
        return how(v, edges) if v.size else v

    def mean(v: np.ndarray, at: np.ndarray) -> np.ndarray:
        return np.add.reduceat(v, at) / np.diff(np.append(at, v.size))

    times = pd.Series(pd.Timestamp(minutes["start"]) + pd.to_timedelta(edges * 60.0, unit="s"))
    to_x, x_title = time_axis(times)
    x = to_x(times)
    fig = make_subplots(rows=2, cols=1, shared_xaxes=True, vertical_spacing=0.08, row_heights=[0.35, 0.65])
    fig.add_trace(go.Scatter(x=x, y=per_step(minutes["rate_rps"], mean), mode="lines", name="request rate",
                             line=dict(color="#444", width=1.2, shape="hv"),
                             hovertemplate="%{y:.2f} req/s<extra></extra>"), row=1, col=1)
    lines = (("replicas_needed", "needed (its window)", "#444", "dot", 1.0),
             ("replicas", f"{label}: paid for (serving + starting)", "#CC79A7", "solid", 2.4),
             ("serving", f"{label}: serving", "#0072B2", "dash", 1.6))
    most = 1.0
    for key, name, color, dash_style, width in lines:
        y = per_step(minutes.get(key, []), np.maximum.reduceat)
        if not y.size:
            continue
        most = max(most, float(np.nanmax(y)))
        fig.add_trace(go.Scatter(x=x, y=y, mode="lines", name=name,
                                 line=dict(color=color, width=width, dash=dash_style, shape="hv"),
                                 hovertemplate=f"{_escape(name)}: %{{y}} replicas ({gpus_per_replica} GPUs each)"
                                               "<extra></extra>"), row=2, col=1)
    fig.update_layout(**LIGHT)
    fig.update_yaxes(title_text="requests / s", row=1, col=1, rangemode="tozero", **LIGHT_AXIS)
    fig.update_yaxes(title_text="replicas", row=2, col=1, **integer_axis(most), **LIGHT_AXIS)
    fig.update_xaxes(**LIGHT_AXIS)
    if x_title:
        fig.update_xaxes(title_text=x_title, row=2, col=1)
    title = "Replicas minute by minute" + (f" (each step {step} minutes, its most replicas)" if step > 1 else "")
    return fit_header(fig, title, height=height)


def fleet_over_time_figure(windows: dict[str, pd.DataFrame], labels: Mapping[str, str] | None = None,
                           gpus_per_replica: int = 1, height: int = 420) -> go.Figure:
    """Request rate per window (top) and each policy's replicas per window (bottom), from ``fleet.autoscale``.

    ``windows``: policy id → its ``AutoscaleResult.windows`` (start, rate_rps, replicas, replicas_needed, missed).
    """
    fig = make_subplots(rows=2, cols=1, shared_xaxes=True, vertical_spacing=0.08, row_heights=[0.4, 0.6])
    first = next(iter(windows.values()))
    to_x, x_title = time_axis(first["start"])
    fig.add_trace(go.Scatter(x=to_x(first["start"]), y=first["rate_rps"], mode="lines", name="request rate",
                             line=dict(color="#444", width=1.2, shape="hv"),
                             hovertemplate="%{y:.2f} req/s<extra></extra>"), row=1, col=1)
    fig.add_trace(go.Scatter(x=to_x(first["start"]), y=first["replicas_needed"], mode="lines",
                             name="needed (each window)",
                             line=dict(color="#444", width=1, dash="dot", shape="hv"),
                             hovertemplate="%{y} replicas needed<extra></extra>"), row=2, col=1)
    for policy, frame in windows.items():
        name = (labels or {}).get(policy, policy)
        color = POLICY_COLORS.get(policy, "#888")
        dash_style, width = POLICY_LINES.get(policy, ("solid", 1.8))
        fig.add_trace(go.Scatter(x=to_x(frame["start"]), y=frame["replicas"], mode="lines", name=name,
                                 line=dict(color=color, width=width, dash=dash_style, shape="hv"),
                                 hovertemplate=f"{name}: %{{y}} replicas ({gpus_per_replica} GPUs each)<extra></extra>"),
                      row=2, col=1)
        missed = frame[frame["missed"]]
        if len(missed):
            fig.add_trace(go.Scatter(x=to_x(missed["start"]), y=missed["replicas"], mode="markers",
                                     name=f"{name}: missed",
                                     marker=dict(color=color, symbol="x", size=7), showlegend=False,
                                     hovertemplate=f"{name}: missed window<extra></extra>"), row=2, col=1)
    fig.update_layout(**LIGHT)
    top_rate = float(np.nanmax(first["rate_rps"])) if len(first) else 1.0
    fig.update_yaxes(title_text="requests / s", row=1, col=1, range=[0, max(top_rate, 1e-9) * 1.12], **LIGHT_AXIS)
    most = max([float(np.nanmax(f["replicas"])) for f in windows.values() if len(f)]
               + [float(np.nanmax(first["replicas_needed"])) if len(first) else 1.0])
    fig.update_yaxes(title_text="replicas", row=2, col=1, **integer_axis(most), **LIGHT_AXIS)
    fig.update_xaxes(**LIGHT_AXIS)
    if x_title:
        fig.update_xaxes(title_text=x_title, row=2, col=1)
    return fit_header(fig, "Traffic and replicas over time", height=height)


def growth_figure(months: pd.DataFrame, replicas_now: int, height: int = 320) -> go.Figure:
    """Replicas needed per month of growth against the pool today (``fleet.growth.project``)."""
    fig = go.Figure()
    fig.add_trace(go.Bar(x=months["month"], y=pd.to_numeric(months["replicas"], errors="coerce"), name="replicas needed", marker_color="#0072B2",
                         hovertemplate="month %{x}: %{y} replicas<extra></extra>"))
    fig.add_shape(type="line", x0=-0.5, x1=float(months["month"].max()) + 0.5, y0=replicas_now, y1=replicas_now,
                  line=dict(color="#D55E00", dash="dash"))
    fig.add_annotation(x=float(months["month"].max()), y=replicas_now, text=f"today: {replicas_now}",
                       showarrow=False, yshift=12, font=dict(color="#D55E00"), bgcolor="rgba(255,255,255,0.85)")
    fig.update_layout(**LIGHT, xaxis_title="month", yaxis_title="replicas")
    fit_header(fig, "The pool month by month", height=height, legend=False)
    counts = pd.to_numeric(months["replicas"], errors="coerce")   # an unreachable month has no count
    fig.update_yaxes(**integer_axis(max(float(counts.max(skipna=True)) if counts.notna().any() else 0.0,
                                        float(replicas_now))), **LIGHT_AXIS)
    fig.update_xaxes(dtick=1, **LIGHT_AXIS)
    return fig
