"""Small drawing helpers shared by the pages: provenance badges, tables, charts."""
from __future__ import annotations

from collections.abc import Callable

import pandas as pd
import plotly.graph_objects as go
import streamlit as st

from shapeviz.outputs.columns import PERCENT, readable

# Every number says where it comes from.
PROVENANCE: dict[str, tuple[str, str, str]] = {
    "measured": ("measured", "green", "Measured from your log."),
    "estimated": ("estimated", "blue", "Estimated by the capacity model (calibrated on published measurements)."),
    "assumed": ("assumed", "orange", "An assumption: a default or a value you set."),
    "simulated": ("simulated", "violet", "From the discrete-event simulator replaying requests of your log, not "
                                         "measured."),
}

MISSING = "—"  # what a missing value reads as, in every metric and table
PLOT_CONFIG = {"displaylogo": False, "toImageButtonOptions": {"format": "png", "scale": 2}}


def badge(kind: str) -> None:
    """A small coloured label: measured / estimated / assumed / simulated."""
    label, color, help_text = PROVENANCE[kind]
    st.badge(label, color=color, help=help_text)  # type: ignore[arg-type]


def chart(fig: go.Figure, key: str, *, inert: bool = False) -> None:
    """A plotly chart at full width, and a PNG of it rendered on the server when the user asks for one.

    ``inert``: the figure's names are escaped already (a cached figure): drawn as it is, without a copy.
    """
    from shapeviz.outputs.report import browser_path, figures_to_png, inert_figure

    if not inert:
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


def lazy_expander(label: str, key: str, draw: Callable[[], object]) -> bool:
    """A closed expander that runs ``draw`` inside it only while it is open; True when it is open.

    Opening it reruns the page (or its fragment); closed, its tables and editors cost neither the server nor the
    browser anything on a page's first draw or a slider step.
    """
    box = st.expander(label, key=key, on_change="rerun")
    if box.open:
        with box:
            draw()
    return bool(box.open)


def table(frame: pd.DataFrame, **column_config: object) -> None:
    """A read-only table that reads: headers in words with units, numbers rounded to what matters, shares as whole
    percents, booleans as yes/no, long text in a column wide enough to read whole, a missing value as a dash.

    Headers and formats come from the model layer's one map (``shapeviz.outputs.columns``); ``column_config``
    overrides a column (a "percent" format there is a share, shown as a whole percent).
    """
    shown, specs = readable(frame)
    config: dict[str, object] = {}
    for column, spec in specs.items():
        given = column_config.get(column)
        if isinstance(given, dict):
            given = dict(given)
            type_config = dict(given.get("type_config") or {})
            if type_config.get("format") == "percent":  # Streamlit's own would print 26.28%
                if spec.format != PERCENT:
                    shown[column] = frame[column] * 100.0
                type_config["format"] = PERCENT
                given["type_config"] = type_config
            given["label"] = given.get("label") or spec.label
            config[column] = given
        elif spec.format:
            config[column] = st.column_config.NumberColumn(spec.label, format=spec.format)
        elif shown[column].dtype == object or pd.api.types.is_string_dtype(shown[column]):
            config[column] = st.column_config.TextColumn(spec.label, width=_text_width(shown[column], spec.label))
        else:  # a time or a category: its own column type, only named (a text column would print a time as ms)
            config[column] = st.column_config.Column(spec.label)
    shown, config = _dash_for_missing(shown, config)
    st.dataframe(shown, hide_index=True, column_config=config)


TEXT_PX_PER_CHAR, TEXT_MAX_PX = 7.6, 1100  # the grid's 14 px font; wider than any page: the table scrolls


def _text_width(values: pd.Series, header: str) -> int | str | None:
    """Wide enough for the longest cell (a GPU name, a reason): the grid clips text, it never wraps it."""
    longest = max([len(str(header))] + [len(str(v)) for v in values if v is not None])
    return None if longest <= 24 else int(min(24 + TEXT_PX_PER_CHAR * longest, TEXT_MAX_PX))


def _dash_for_missing(frame: pd.DataFrame, config: dict) -> tuple[pd.DataFrame, dict]:
    # st.dataframe draws every null as "None" and ignores a Styler's na_rep for it, so a column with gaps is
    # shown as text: its numbers formatted as its column config asks, its gaps as a dash.
    gaps = [c for c in frame.columns if frame[c].isna().any()]
    if not gaps:
        return frame, config
    frame = frame.copy()  # a small table: the caller's frame stays as it was
    for column in gaps:
        spec = config.get(column) or {}
        label = spec.get("label") if isinstance(spec, dict) else None
        fmt = (spec.get("type_config") or {}).get("format") if isinstance(spec, dict) else None
        values = frame[column]
        numeric = pd.api.types.is_numeric_dtype(values) and not pd.api.types.is_bool_dtype(values)
        frame[column] = [MISSING if pd.isna(v) else _format(v, fmt) if numeric else str(v) for v in values]
        config[column] = st.column_config.TextColumn(label or str(column))
    return frame, config


def _format(value: float, fmt: str | None) -> str:
    if fmt == "percent":
        return f"{value:.1%}"
    if fmt and "%" in fmt:
        return fmt % value
    return f"{value:,}" if float(value).is_integer() else f"{value:,.4g}"


def csv_button(frame: pd.DataFrame, file_name: str, label: str = "CSV", key: str | None = None) -> None:
    """Download a table as CSV, with spreadsheet formulas neutralised."""
    from shapeviz.outputs.report import safe_csv_bytes

    st.download_button(label, safe_csv_bytes(frame), file_name=file_name, mime="text/csv",
                       icon=":material/download:", key=key or f"csv-{file_name}", on_click="ignore")


def run_on_click(label: str, *, icon: str, key: str, settings: object, state_key: str) -> bool:
    """A button for long work: True once clicked, for as long as ``settings`` stay what they were at the click (a
    slider move afterwards shows the button again, never an old result as if it were the new one)."""
    if st.button(label, icon=icon, key=key):
        st.session_state[state_key] = settings
    return st.session_state.get(state_key) == settings
