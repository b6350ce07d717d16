"""A progress bar for long work (reading, shapes, clusters, sessions, prefix reuse) on the page.

Used inside the cached loaders and analyses: the bar is drawn while the work runs and emptied when it ends, so a
cache hit (a slider step) replays only an empty slot. Updates are throttled: a 5M-row read reports after every
batch, but the browser needs a few frames a second, not a hundred messages.
"""
from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager

import streamlit as st

from shapeviz.progress import Progress

MIN_INTERVAL_S = 0.25


@contextmanager
def progress_bar(first: str) -> Iterator[Progress]:
    """``with progress_bar("Reading your log") as progress: work(progress=progress)``."""
    bar = st.progress(0.0, text=f"{first}…")
    last = [0.0]

    def report(stage: str, detail: str = "", fraction: float | None = None) -> None:
        now = time.monotonic()
        if now - last[0] < MIN_INTERVAL_S:
            return
        last[0] = now
        text = stage.capitalize() + (f": {detail}" if detail else "") + "…"   # counts and our words, no log text
        bar.progress(0.0 if fraction is None else min(max(fraction, 0.0), 1.0), text=text)

    try:
        yield report
    finally:
        bar.empty()
