"""Which uploaded files the pages analyse: the latest upload, not every file the uploader still lists.

Files dropped together are one upload, one product per file (the uploader takes several at once). Streamlit's
uploader keeps every file a session dropped in its list, so a log dropped after one had been analysed was merged
into it without a word, and the column mapping listed the first file's columns for a file it did not map. A new
upload is a new question: the pages analyse the files of the latest drop, the earlier ones stay listed (the
uploader's × removes them) with a note saying they are not analysed and a button that analyses every listed file
together. Removing the analysed files analyses what is left.
"""
from __future__ import annotations

from typing import Any

import streamlit as st

UPLOAD_KEY = "uploads"
MAPPING_KEY = "mapping_override"
ANALYSED = "_uploads_analysed"   # file ids of the files the pages analyse
SEEN = "_uploads_seen"           # file ids the uploader held at its last change


def _ids(files: list[Any]) -> list[str]:
    return [f.file_id for f in files]


def on_change() -> None:
    """The uploader's callback: the files just added become the analysed ones; a mapping starts afresh when the
    analysed files change (removing a file that was not analysed keeps it)."""
    ids = _ids(st.session_state.get(UPLOAD_KEY) or [])
    seen = set(st.session_state.get(SEEN) or ())
    added = [i for i in ids if i not in seen]
    before = list(st.session_state.get(ANALYSED) or ())
    kept = [i for i in before if i in ids]
    st.session_state[ANALYSED] = added or kept or ids
    st.session_state[SEEN] = ids
    if st.session_state[ANALYSED] != before:
        st.session_state[MAPPING_KEY] = {}


def analysed(files: list[Any]) -> list[Any]:
    """The files the pages analyse, in the uploader's order: the latest upload's (every file when none is known)."""
    chosen = set(st.session_state.get(ANALYSED) or ())
    return [f for f in files if f.file_id in chosen] or list(files)


def not_analysed(files: list[Any]) -> list[Any]:
    """Files the uploader still lists that the pages do not analyse (uploaded before the latest)."""
    kept = {f.file_id for f in analysed(files)}
    return [f for f in files if f.file_id not in kept]


def analyse_all() -> None:
    """The button's callback: every listed file analysed together, one product per file."""
    st.session_state[ANALYSED] = _ids(st.session_state.get(UPLOAD_KEY) or [])
    st.session_state[MAPPING_KEY] = {}
