"""A progress bar for long work (reading, shapes, clusters, sessions, prefix reuse) on the page.

Used inside the cached loaders and analyses: the bar is drawn while the work runs and emptied when it ends, so a
cache hit (a slider step) replays only an empty slot. Updates are throttled: a 5M-row read reports after every
batch, but the browser needs a few frames a second, not a hundred messages.
"""
from __future__ import annotations

import time
from collections.abc import Callable, Hashable, Iterator
from contextlib import contextmanager
from typing import TypeVar

import streamlit as st

from shapeviz.progress import Progress

MIN_INTERVAL_S = 0.25
T = TypeVar("T")


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


def held(store: str, key: Hashable, compute: Callable[[], T], max_entries: int = 8) -> T:
    """``compute()`` once per ``key`` in this session, its result held in ``st.session_state[store]``.

    For long work that draws a progress bar made outside it: a cached function must not write into such a bar
    (a cache hit replays the write into a bar that no longer exists), so the work runs uncached, with its bar, and
    its result is kept here, keyed by content (a log's digest and the settings), the oldest dropped past
    ``max_entries``. An exception is not held: the next run tries again.
    """
    results: dict[Hashable, T] = st.session_state.setdefault(store, {})
    if key in results:
        results[key] = results.pop(key)   # the most recently used goes last
        return results[key]
    value = compute()
    results[key] = value
    while len(results) > max_entries:
        results.pop(next(iter(results)))
    return value
