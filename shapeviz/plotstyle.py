"""The look every chart shares, wherever its builder lives: fonts, the product palette, log and integer axes, and
a header (title, subtitle, legend, panel titles) laid out so that no two pieces of text overlap.

Plain dicts only (no plotly import): figure builders of any layer spread them into their layouts.
"""
from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence

FONT = dict(family="Inter, Segoe UI, Helvetica, Arial, sans-serif", size=13)

# A qualitative palette whose colours stay apart for every viewer: Okabe-Ito (colour-blind safe) first, then
# darker and paler hues of other families. Every pair differs by more than MIN_COLOR_DISTANCE (CIE76 ΔE).
PALETTE: tuple[str, ...] = (
    "#0072B2", "#E69F00", "#009E73", "#CC79A7", "#D55E00", "#56B4E9", "#7F7F7F", "#F0E442",
    "#882255", "#332288", "#117733", "#AA4499", "#EE6677", "#999933", "#661100", "#000000",
)
MIN_COLOR_DISTANCE = 20.0

# Pixel heights of the header's lines at FONT's size (title 17 px, subtitle 13 px, legend and panel titles 13 px).
_TITLE_PX, _SUBTITLE_PX, _LEGEND_ROW_PX, _PANEL_PX, _PAD_PX = 26, 20, 24, 24, 10
_LEGEND_ITEM_PX, _LEGEND_CHAR_PX, _WIDTH_PX = 44, 7.5, 860  # an item: symbol + gap, then its text; the narrowest chart


def color_distance(a: str, b: str) -> float:
    """CIE76 ΔE between two '#rrggbb' colours: about 2 is the smallest a person notices, above 20 reads as distinct."""
    la, lb = _lab(a), _lab(b)
    return math.dist(la, lb)


def _lab(hex_color: str) -> tuple[float, float, float]:
    r, g, b = (int(hex_color.lstrip("#")[i:i + 2], 16) / 255.0 for i in (0, 2, 4))

    def linear(c: float) -> float:
        return c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4

    r, g, b = linear(r), linear(g), linear(b)
    x = (0.4124 * r + 0.3576 * g + 0.1805 * b) / 0.95047
    y = 0.2126 * r + 0.7152 * g + 0.0722 * b
    z = (0.0193 * r + 0.1192 * g + 0.9505 * b) / 1.08883

    def f(t: float) -> float:
        return t ** (1 / 3) if t > 0.008856 else 7.787 * t + 16 / 116

    fx, fy, fz = f(x), f(y), f(z)
    return 116 * fy - 16, 500 * (fx - fy), 200 * (fy - fz)


def fmt_number(value: float) -> str:
    """A tick label: 1,000 and 2.5, never 1e+3 or 2.500."""
    v = float(value)
    return f"{v:,.0f}" if v >= 10 or v.is_integer() else f"{v:.3g}"


# From sparse to dense: a set is used when it puts at least MIN_LOG_TICKS labels in the range.
_LOG_MANTISSAS: tuple[tuple[float, ...], ...] = ((1,), (1, 3), (1, 2, 5), (1, 1.5, 2, 3, 5, 7),
                                                    (1, 1.2, 1.5, 2, 2.5, 3, 4, 5, 6, 7, 8))
MIN_LOG_TICKS = 3


def log_ticks(values: Iterable[float], fmt: Callable[[float], str] = fmt_number) -> tuple[list[float], list[str]]:
    """Tick values and labels for a log axis over ``values``: whole decades when they span several, else
    1-2-5 (or finer) steps, every label written out; plotly's own minor labels ("2 5 1000 2 5") never appear."""
    finite = [float(v) for v in values if v is not None and math.isfinite(float(v)) and float(v) > 0]
    if not finite:
        return [], []
    lo, hi = min(finite), max(finite)
    if hi == lo:
        lo, hi = lo / 2, hi * 2
    ticks: list[float] = []
    for mantissas in _LOG_MANTISSAS:
        ticks = [float(f"{m * 10.0 ** e:.6g}") for e in range(math.floor(math.log10(lo)) - 1, math.ceil(math.log10(hi)) + 1)
                 for m in mantissas]
        ticks = [t for t in ticks if lo / 1.05 <= t <= hi * 1.05]
        if len(ticks) >= MIN_LOG_TICKS:
            break
    return ticks, [fmt(t) for t in ticks]


def log_axis(values: Iterable[float], fmt: Callable[[float], str] = fmt_number, **axis: object) -> dict:
    """The settings of a log axis whose labels are ``log_ticks`` of ``values`` (spread into update_*axes)."""
    vals, text = log_ticks(values, fmt)
    return dict(type="log", tickvals=vals, ticktext=text, **axis)


def integer_axis(largest: float, **axis: object) -> dict:
    """A count axis (replicas, GPUs) from zero: whole-number ticks only, never 0 to 1 in steps of 0.2."""
    top = max(float(largest), 1.0)
    step = next(s for s in (1, 2, 5, 10, 20, 25, 50, 100, 200, 250, 500, 1000) if top / s <= 8) if top <= 8000 \
        else 10 ** math.ceil(math.log10(top / 8))
    return dict(tickmode="linear", tick0=0, dtick=step, tickformat=",d", range=[0, top * 1.12 + 0.05],
                **axis)


def legend_rows(labels: Sequence[str], width_px: float = _WIDTH_PX) -> int:
    """How many rows a horizontal legend of ``labels`` takes at ``width_px``: one when every item fits; otherwise
    plotly lays the items out in a grid of equal columns as wide as the widest item."""
    if not labels:
        return 0
    widths = [_LEGEND_ITEM_PX + _LEGEND_CHAR_PX * len(str(label)) for label in labels]
    if sum(widths) <= width_px:
        return 1
    per_row = max(1, int(width_px // max(widths)))
    return math.ceil(len(widths) / per_row)


def header(title: str, subtitle: str | None = None, *, height: int, legend: Sequence[str] = (),
           panel_titles: bool = False, right: int = 20, left: int = 60, bottom: int = 50) -> dict:
    """Layout keys for a chart's top: title, subtitle under it, the legend under that, then the panel titles.

    Each piece has a band of its own in the top margin (sized from its lines), so none overlaps another or the plot;
    ``legend`` are the legend's labels (to count its rows), empty for a chart without one.
    """
    rows = legend_rows(legend)
    title_px = _TITLE_PX + (_SUBTITLE_PX if subtitle else 0)
    top = _PAD_PX + title_px + rows * _LEGEND_ROW_PX + (_PANEL_PX if panel_titles else 0) + _PAD_PX
    text = title + (f"<br><sup>{subtitle}</sup>" if subtitle else "")
    layout: dict = dict(
        height=height,
        # plotly anchors a two-line title by its first line: the subtitle's height goes below the anchor, not above
        title=dict(text=text, x=0.01, xanchor="left", yref="container", yanchor="top",
                   y=1 - (_PAD_PX + (_SUBTITLE_PX if subtitle else 0)) / height),
        margin=dict(l=left, r=right, t=top, b=bottom),
        showlegend=bool(rows),
    )
    if rows:
        layout["legend"] = dict(orientation="h", yref="container", y=1 - (_PAD_PX + title_px) / height,
                                yanchor="top", x=0, xanchor="left", itemsizing="constant")
    return layout


def legend_labels(fig: object) -> list[str]:
    """The names a figure's legend shows: every named trace not marked ``showlegend=False``."""
    return [str(t.name) for t in getattr(fig, "data", ()) if t.showlegend is not False and t.name]


def fit_header(fig: object, title: str, subtitle: str | None = None, *, legend: bool = True,
               panel_titles: bool = False, height: int | None = None, **margins: int) -> object:
    """Lay out ``fig``'s top with ``header`` once its traces are in (their names make the legend); returns fig."""
    h = int(height or getattr(fig.layout, "height", None) or 450)  # type: ignore[attr-defined]
    fig.update_layout(**header(title, subtitle, height=h, legend=legend_labels(fig) if legend else (),  # type: ignore[attr-defined]
                               panel_titles=panel_titles, **margins))
    return fig


def refit_header(fig: object, *, panel_titles: bool = False) -> object:
    """``fit_header`` again after traces were added to a finished figure (their names lengthen its legend)."""
    text = str(fig.layout.title.text or "")  # type: ignore[attr-defined]
    title, _, rest = text.partition("<br><sup>")
    return fit_header(fig, title, rest.removesuffix("</sup>") or None, panel_titles=panel_titles)
