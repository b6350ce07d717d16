"""Each product's SLO class on the dashboard: the sidebar's TTFT/TPOT pair, unless the product has its own.

The sidebar's pair is the default class; the Capacity page's table gives a product its own targets. The headline,
Compare deployments, Fleet design and the report all judge with ``page_classes`` (``plan`` does the same with
``--ttft-slo-ms/--tpot-slo-ms`` and ``--slo``), so one log and one set of settings give one fleet.
"""
from __future__ import annotations

import math

import pandas as pd
import streamlit as st

from shapeviz.fleet.sizing import with_pair
from shapeviz.ingest import LoadedLog
from shapeviz.serving.products import SloClass, default_classes
from shapeviz.text import md_literal

OWN_KEY = "fleet_slo_classes"      # {digest: {product: (ttft_ms, tpot_ms)}}: the products given their own class
EDITOR_KEY = "fleet_classes_{}"    # the table's widget, per log
TTFT, TPOT = "TTFT p90 target (ms)", "TPOT p90 target (ms)"
GUIDE = "corner's range (ms)"     # the upper end of the corner's published planner range, TTFT / TPOT
PAIR_SOURCE = "the default class (the sidebar's TTFT/TPOT pair)"
OWN_SOURCE = "set by user (its own class)"


@st.cache_resource(max_entries=8, ttl=6 * 3600, scope="session", show_spinner=False)
def _corners(digest: str, _log: LoadedLog) -> dict[str, SloClass]:
    # Each product's corner from every row: once per log, not on every rerun of the page.
    return default_classes(_log.frame)


def _number(value: object, default: float) -> float:
    try:
        v = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return default
    return v if math.isfinite(v) and v > 0 else default


def own_classes(digest: str, log: LoadedLog, ttft_ms: float, tpot_ms: float) -> dict[str, tuple[float, float]]:
    """The products of this log with their own targets: those saved, and the table's edits of this rerun (the
    headline reads them before the table is drawn further down the page). A row equal to the pair has none."""
    products = list(_corners(digest, log))
    own = dict(st.session_state.get(OWN_KEY, {}).get(digest, {}))
    edits = (st.session_state.get(EDITOR_KEY.format(digest)) or {}).get("edited_rows") or {}
    for row, change in edits.items():
        if not 0 <= int(row) < len(products):
            continue
        product = products[int(row)]
        ttft, tpot = own.get(product, (ttft_ms, tpot_ms))
        own[product] = (_number(change.get(TTFT, ttft), ttft), _number(change.get(TPOT, tpot), tpot))
    return {p: v for p, v in own.items() if p in products and tuple(v) != (ttft_ms, tpot_ms)}


def page_classes(digest: str, log: LoadedLog, ttft_ms: float, tpot_ms: float) -> dict[str, SloClass]:
    """Every product's class: its own targets when it has them, else the sidebar's pair."""
    return with_pair(_corners(digest, log), ttft_ms, tpot_ms, own_classes(digest, log, ttft_ms, tpot_ms),
                     PAIR_SOURCE, OWN_SOURCE)


def classes_key(classes: dict[str, SloClass]) -> tuple:
    """A hashable key of the classes (what a cached answer depends on)."""
    return tuple(sorted((p, c.ttft_ms, c.tpot_ms) for p, c in classes.items()))


def edit_classes(digest: str, log: LoadedLog, ttft_ms: float, tpot_ms: float) -> dict[str, SloClass]:
    """The per-product SLO table (editable); returns each product's class."""
    corners = _corners(digest, log)
    classes = page_classes(digest, log, ttft_ms, tpot_ms)
    rows = pd.DataFrame({
        "product": list(classes),
        "corner": [c.corner for c in classes.values()],
        TTFT: [c.ttft_ms for c in classes.values()],
        TPOT: [c.tpot_ms for c in classes.values()],
        "class": ["own" if c.source == OWN_SOURCE else "default (sidebar)" for c in classes.values()],
        GUIDE: [
            f"{c.ttft_ms:,.0f} / {c.tpot_ms:,.0f}" for c in corners.values()],
    })
    st.subheader("SLO class of each product")
    st.caption(f"p90 targets. Every product is judged against the sidebar's pair (TTFT {ttft_ms:,.0f} ms, TPOT "
               f"{tpot_ms:,.0f} ms), the default class, unless you give it its own targets here; the headline, "
               "Compare deployments, Fleet design and the report all judge with these classes. The last column is "
               "a guide: the upper end of the product's corner's published planner range, TTFT / TPOT.")
    st.data_editor(rows, hide_index=True, key=EDITOR_KEY.format(digest),
                   disabled=["product", "corner", "class", GUIDE],
                   column_config={TTFT: st.column_config.NumberColumn(min_value=1.0),
                                  TPOT: st.column_config.NumberColumn(min_value=0.1),
                                  "product": st.column_config.TextColumn()})
    st.session_state.setdefault(OWN_KEY, {})[digest] = own_classes(digest, log, ttft_ms, tpot_ms)
    own = [md_literal(p) for p, c in classes.items() if c.source == OWN_SOURCE]
    if own:
        st.caption(f"Own classes: {', '.join(own)}.")
    return classes
