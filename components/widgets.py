"""Small drawing helpers shared by the pages: provenance badges, tables, charts."""
from __future__ import annotations

import pandas as pd
import plotly.graph_objects as go
import streamlit as st

# Every number says where it comes from.
PROVENANCE: dict[str, tuple[str, str, str]] = {
    "measured": ("measured", "green", "Measured from your log."),
    "estimated": ("estimated", "blue", "Estimated by the capacity model (calibrated on published measurements)."),
    "assumed": ("assumed", "orange", "An assumption: a default or a value you set."),
}

PLOT_CONFIG = {"displaylogo": False, "toImageButtonOptions": {"format": "png", "scale": 2}}


def badge(kind: str) -> None:
    """A small coloured label: measured / estimated / assumed."""
    label, color, help_text = PROVENANCE[kind]
    st.badge(label, color=color, help=help_text)  # type: ignore[arg-type]


def chart(fig: go.Figure, key: str) -> None:
    """A plotly chart at full width, and a PNG of it rendered on the server when the user asks for one."""
    from shapeviz.report import browser_path, figures_to_png, inert_figure

    fig = inert_figure(fig)  # product names come from the user's log: never markup
    st.plotly_chart(fig, key=key, config=PLOT_CONFIG, theme=None)
    try:
        browser_path()
    except ValueError as exc:  # no chromium on this server: say so instead of failing on click
        st.download_button("PNG", b"", disabled=True, help=str(exc), key=f"png-{key}", icon=":material/image:")
        return
    st.download_button(
        "PNG", data=lambda: figures_to_png({key: fig})[key], file_name=f"shapeviz-{key}.png", mime="image/png",
        key=f"png-{key}", icon=":material/image:", on_click="ignore",
        help="Rendered on the server (kaleido and the system chromium) at print resolution.",
    )


def table(frame: pd.DataFrame, **column_config: object) -> None:
    """A read-only table, index hidden."""
    st.dataframe(frame, hide_index=True, column_config=column_config or None)


def csv_button(frame: pd.DataFrame, file_name: str, label: str = "CSV", key: str | None = None) -> None:
    """Download a table as CSV, with spreadsheet formulas neutralised."""
    from shapeviz.report import safe_csv_bytes

    st.download_button(label, safe_csv_bytes(frame), file_name=file_name, mime="text/csv",
                       icon=":material/download:", key=key or f"csv-{file_name}", on_click="ignore")
