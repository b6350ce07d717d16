"""Arrays of a canonical frame: token counts checked once, and category codes of the products present."""
from __future__ import annotations

import numpy as np
import pandas as pd

SINGLE_PRODUCT = "all"


def token_arrays(frame: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """(input_tokens, output_tokens) of a canonical frame as int64 arrays; ValueError names a bad column."""
    if not isinstance(frame, pd.DataFrame):
        raise ValueError(f"expected a canonical request frame (pandas DataFrame), got {type(frame).__name__}")
    arrays = []
    for column in ("input_tokens", "output_tokens"):
        if column not in frame.columns:
            raise ValueError(f"the frame has no {column!r} column; load the log with shapeviz.ingest.load_log or map a column to it")
        values = frame[column]
        if values.isna().any():
            raise ValueError(f"column {column!r} has missing values; drop those rows or fill them before profiling")
        arr = values.to_numpy(dtype=np.int64)
        if arr.size and arr.min() < 0:
            raise ValueError(f"column {column!r} has a negative token count ({arr.min()}); token counts must be ≥ 0")
        arrays.append(arr)
    return arrays[0], arrays[1]


def category_codes(values: pd.Series) -> tuple[np.ndarray, list[str]]:
    """Per-row index into the categories actually present (-1 where missing), and their names."""
    if not isinstance(values.dtype, pd.CategoricalDtype):
        values = values.astype("category")
    codes = values.cat.codes.to_numpy().astype(np.int32)
    categories = [str(c) for c in values.cat.categories]
    # One bincount finds the used categories (cheaper than remove_unused_categories on a million rows).
    used = np.bincount(codes[codes >= 0], minlength=len(categories)) > 0
    if used.all():
        return codes, categories
    remap = np.full(len(categories), -1, dtype=np.int32)
    remap[used] = np.arange(int(used.sum()), dtype=np.int32)
    return np.where(codes >= 0, remap[codes], -1).astype(np.int32), [c for c, u in zip(categories, used) if u]


def product_codes(frame: pd.DataFrame) -> tuple[np.ndarray, list[str]]:
    """Per-row product index and the product names actually present (unused categories dropped)."""
    if "product" not in frame.columns:
        return np.zeros(len(frame), dtype=np.int32), [SINGLE_PRODUCT]
    codes, names = category_codes(frame["product"])
    if (codes < 0).any():
        # A missing product would otherwise vanish from every per-product table: give it a visible name.
        codes = np.where(codes < 0, len(names), codes)
        names.append("(no product)")
    return codes, names

