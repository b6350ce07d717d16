"""Names from a log bounded by the work, not by how many names a file holds or how long they are.

Every per-product table, grid and line of text costs per *name*: a log of 100,000 requests with 10,000 product
names would cost 10,000 of each. So a canonical frame keeps at most ``Limits.max_products`` products by name (the
busiest by requests, ties by name) and counts the rest together as ``OTHER_PRODUCTS``; and a label (product,
model, session, status) is cut to ``Limits.max_name_chars`` characters, ending in an ellipsis. Both are said in
the load report's notes, so the page, ``summary`` and its JSON say it too.

A label is also made *visible* here, once: control characters, line breaks, bidirectional overrides and
zero-width characters become their ``\\uXXXX`` escapes (``shapeviz.text.visible_text``), so no name can add a
line to ``summary``, reorder a CSV cell or the memo's sentence, or hide part of itself in a PNG.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from shapeviz.ingest.limits import Limits
from shapeviz.text import INVISIBLE_PATTERN, visible_text

# Parentheses: a name a product team would not pick, and one that sorts apart from theirs
OTHER_PRODUCTS = "(other products)"
_ELLIPSIS = "…"
_LABELS = ("product", "model", "session_id", "status")


def folded_note(max_products: int) -> str:
    """The note a load report carries when products past the busiest ``max_products`` were counted together."""
    return (f"more than {max_products:,} products: the {max_products:,} busiest by requests keep their names, "
            f"the others are counted together as {OTHER_PRODUCTS!r}")


def bound_names(frame: pd.DataFrame, notes: list[str], limits: Limits) -> pd.DataFrame:
    """``frame`` with over-long labels cut and products past ``limits.max_products`` folded (notes say so)."""
    for name in _LABELS:
        if name in frame.columns and isinstance(frame[name].dtype, pd.CategoricalDtype):
            frame[name], shown = _visible(frame[name])
            if shown:
                notes.append(f"{name}: {shown:,} names hold control, line-break, bidirectional or zero-width "
                             "characters, shown as \\uXXXX escapes")
            frame[name], cut = _cut_long(frame[name], limits.max_name_chars)
            if cut:
                notes.append(f"{name}: {cut:,} names longer than {limits.max_name_chars:,} characters cut to "
                             f"{limits.max_name_chars:,}, ending in {_ELLIPSIS!r}")
    if "product" in frame.columns:
        frame["product"], folded = fold_products(frame["product"], limits.max_products)
        if folded:
            notes.append(folded_note(limits.max_products))
    return frame


def _visible(series: pd.Series) -> tuple[pd.Series, int]:
    """Categories with their invisible characters escaped (``visible_text``); how many names changed."""
    names = series.cat.categories.astype(str)
    hidden = np.asarray(names.str.contains(INVISIBLE_PATTERN, regex=True), dtype=bool)
    if not hidden.any():
        return series, 0
    shown = np.where(hidden, [visible_text(n) if h else n for n, h in zip(names, hidden)], names).astype(object)
    return _recode(series, shown), int(hidden.sum())


def _recode(series: pd.Series, renamed: np.ndarray) -> pd.Series:
    """``series`` with its categories renamed (names that become equal are merged)."""
    unique, inverse = np.unique(renamed, return_inverse=True)
    codes = series.cat.codes.to_numpy()
    codes = np.where(codes >= 0, inverse[np.maximum(codes, 0)], -1)
    return pd.Series(pd.Categorical.from_codes(codes, categories=unique), index=series.index)


def _cut_long(series: pd.Series, max_chars: int) -> tuple[pd.Series, int]:
    """Categories longer than ``max_chars`` cut (names that become equal are merged); how many were cut."""
    names = series.cat.categories.astype(str)
    long = np.asarray(names.str.len()) > max_chars
    if not long.any():
        return series, 0
    cut = np.where(long, names.str.slice(0, max_chars - 1) + _ELLIPSIS, names).astype(object)
    return _recode(series, cut), int(long.sum())


def fold_products(series: pd.Series, max_products: int) -> tuple[pd.Series, int]:
    """The busiest ``max_products`` products by rows keep their names, the rest become ``OTHER_PRODUCTS``.

    Returns the new column and how many names were folded (0: the column unchanged).
    """
    codes = series.cat.codes.to_numpy()
    names = series.cat.categories.astype(str).to_numpy(dtype=object)
    rows = np.bincount(codes[codes >= 0], minlength=len(names))
    present = np.flatnonzero(rows)
    if len(present) <= max_products:
        return series, 0
    # busiest first, ties by name: the same names stay whatever order the rows came in
    order = present[np.lexsort((names[present], -rows[present]))]
    keep = order[:max_products]
    kept_names = sorted(set(names[keep].tolist()) | {OTHER_PRODUCTS})
    position = {n: i for i, n in enumerate(kept_names)}
    remap = np.full(len(names), position[OTHER_PRODUCTS], dtype=np.int64)
    remap[keep] = [position[n] for n in names[keep]]
    new_codes = np.where(codes >= 0, remap[np.maximum(codes, 0)], -1)
    folded = len(present) - len(keep)
    return pd.Series(pd.Categorical.from_codes(new_codes, categories=kept_names), index=series.index), folded


# Request logs are from computers' clocks: a time outside these years is a wrong clock or a wrong unit. pandas
# itself holds 1677-09-21 to 2262-04-11, but two times more than 292 years apart overflow every span and rate.
# A fixed window (not one around the log's median) gives the same answer for every chunk of a streamed log.
FIRST_YEAR, END_YEAR = 1970, 2100


def bound_times(frame: pd.DataFrame, notes: list[str]) -> pd.DataFrame:
    """Timestamps outside ``FIRST_YEAR`` .. ``END_YEAR`` become missing (the rows stay; a note counts them)."""
    if "timestamp" not in frame.columns or not len(frame):
        return frame
    times = frame["timestamp"]
    start = pd.Timestamp(f"{FIRST_YEAR}-01-01", tz="UTC")
    end = pd.Timestamp(f"{END_YEAR}-01-01", tz="UTC")
    outside = times.notna() & ((times < start) | (times >= end))
    count = int(outside.sum())
    if count:
        frame["timestamp"] = times.mask(outside)
        notes.append(f"timestamp: {count:,} times before {FIRST_YEAR} or from {END_YEAR} on were not used (a "
                     "wrong clock or unit?); their requests are kept without a time")
    return frame
