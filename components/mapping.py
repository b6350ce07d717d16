"""The column-mapping editor: the mapping used is always shown; for uploads the user can override it."""
from __future__ import annotations

import pandas as pd
import streamlit as st
from streamlit.runtime.uploaded_file_manager import UploadedFile

from components import data
from components.uploads import analysed
from shapeviz.ingest import DEFAULT_LIMITS, LoadReport
from shapeviz.ingest.stream import columns_seen
from shapeviz.schema import CANONICAL
from shapeviz.text import md_literal

AUTO = "(auto)"
EDITABLE: tuple[str, ...] = tuple(c for c in CANONICAL if c != "hash_ids")


@st.cache_data(max_entries=4, ttl=3600, scope="session", show_spinner=False)
def _columns_seen(digest: str, _file: UploadedFile) -> list[str]:
    # the schema (Parquet) or the first block: listing the columns never parses the whole file
    return columns_seen(_file.getvalue(), _file.name, DEFAULT_LIMITS)


def mapping_table(report: LoadReport) -> pd.DataFrame:
    """canonical column → source column (or rule) as a two-column table."""
    return pd.DataFrame({"canonical": list(report.mapping), "from your log": list(report.mapping.values())})


def in_force(columns: list[str], detected: dict[str, str], overrides: dict[str, str]) -> dict[str, str]:
    """What each dropdown shows: the column in force for each canonical column (the user's override, else the
    one detected), ``AUTO`` only where no column of the file is mapped (a rule such as the file name, or none)."""
    shown = {}
    for canonical in EDITABLE:
        chosen = overrides.get(canonical, detected.get(canonical))
        shown[canonical] = chosen if chosen in columns else AUTO
    return shown


def overrides_from(choices: dict[str, str], detected: dict[str, str], overrides: dict[str, str]) -> dict[str, str]:
    """The overrides a submitted form keeps: a choice that differs from what detection finds, or one the user had
    set before; leaving a detected column as it is adds no override."""
    return {k: v for k, v in choices.items() if v != AUTO and (k in overrides or v != detected.get(k))}


def _auto_label(canonical: str, detected: dict[str, str]) -> str:
    rule = detected.get(canonical)
    return f"(auto: {rule})" if rule else "(not in this log)"


def mapping_editor(report: LoadReport | None) -> None:
    """Show the mapping; for an upload, offer an override per canonical column."""
    if report is not None:
        st.dataframe(mapping_table(report), hide_index=True, width="content")
    uploads = st.session_state.get(data.UPLOAD_KEY) or []
    if st.session_state.get(data.SOURCE_KEY) != "upload" or not uploads:
        st.caption("The mapping of generated data is fixed. Upload a log to map its columns by hand.")
        return
    mapped = analysed(list(uploads))   # the files the pages read: the latest upload's, not every one listed
    try:
        seen = [(f.name, [str(c) for c in _columns_seen(data.upload_digest([f]), f)]) for f in mapped]
    except ValueError as exc:  # a file cannot even be parsed: nothing to map
        st.caption(f"No columns to map: {md_literal(exc)}")
        return
    columns = list(dict.fromkeys(c for _, cols in seen for c in cols))   # one mapping for every file analysed
    current = st.session_state.get(data.MAPPING_KEY) or {}
    detected = dict(report.mapping) if report is not None else {}
    shown = in_force(columns, detected, current)
    with st.form("mapping_form", border=False):
        for name, cols in seen:
            st.caption(f"Columns in {md_literal(name)}: {md_literal(', '.join(cols[:40]))}"
                       f"{' …' if len(cols) > 40 else ''}")
        choices: dict[str, str] = {}
        cols = st.columns(3)
        for i, canonical in enumerate(EDITABLE):
            options = [AUTO, *columns]
            choices[canonical] = cols[i % 3].selectbox(
                canonical, options, index=options.index(shown[canonical]), key=f"map_{canonical}",
                format_func=lambda o, c=canonical: o if o != AUTO else _auto_label(c, detected),
            )
        if st.form_submit_button("Apply mapping", type="primary"):
            st.session_state[data.MAPPING_KEY] = overrides_from(choices, detected, current)
            st.rerun()
