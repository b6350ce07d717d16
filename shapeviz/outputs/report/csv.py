"""CSV tables that a spreadsheet opens safely: every cell it would run as a formula is neutralised."""
from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pandas as pd

# --- CSV: formulas neutralised ---------------------------------------------------------------------------------
# A spreadsheet runs a cell starting with these as a formula (OWASP "CSV injection").
FORMULA_PREFIXES: tuple[str, ...] = ("=", "+", "-", "@", "\t", "\r")
# Text that is a plain number ("-5", "+1.5e3") cannot be a formula: it stays as it is.
_PLAIN_NUMBER = r"[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?"
_PLAIN_NUMBER_RE = re.compile(_PLAIN_NUMBER)


def neutralise(text: str) -> str:
    """One cell: a leading single quote when a spreadsheet would run it as a formula."""
    if text.startswith(FORMULA_PREFIXES) and not _PLAIN_NUMBER_RE.fullmatch(text):
        return "'" + text
    return text


def _safe_text(series: pd.Series) -> pd.Series:
    """Neutralise the text cells of a column, vectorised; non-text cells (numbers, missing) are left alone."""
    if isinstance(series.dtype, pd.CategoricalDtype):
        # A handful of categories, possibly a million rows: neutralise the categories, then index them.
        cats = np.array([neutralise(c) if isinstance(c, str) else c for c in series.cat.categories], dtype=object)
        codes = series.cat.codes.to_numpy()
        values = np.where(codes >= 0, cats[np.maximum(codes, 0)] if len(cats) else None, None)
        return pd.Series(values, index=series.index, name=series.name, dtype=object)
    if not (pd.api.types.is_string_dtype(series.dtype) or series.dtype == object):
        return series  # numbers, booleans, datetimes: a negative number is not text
    if series.dtype == object and pd.api.types.infer_dtype(series, skipna=True) not in ("string", "empty"):
        # numbers beside missing cells (a growth month no fleet meets has no count): only the text cells are text
        return pd.Series([neutralise(v) if isinstance(v, str) else v for v in series], index=series.index,
                         name=series.name, dtype=object)
    starts = series.str.startswith(FORMULA_PREFIXES, na=False)
    if not starts.any():
        return series
    number = series.str.fullmatch(_PLAIN_NUMBER, na=False)
    risky = (starts & ~number).to_numpy(dtype=bool)
    out = series.astype(object)
    out[risky] = "'" + series[risky].astype(str)
    return out


def safe_frame(frame: pd.DataFrame) -> pd.DataFrame:
    """A copy of ``frame`` whose text cells and headers a spreadsheet will not run as formulas."""
    if not isinstance(frame, pd.DataFrame):
        raise ValueError(f"safe_frame needs a pandas DataFrame, got {type(frame).__name__}")
    out = pd.DataFrame({i: _safe_text(frame.iloc[:, i]) for i in range(frame.shape[1])}, index=frame.index)
    out.columns = [neutralise(str(c)) for c in frame.columns]
    return out


def safe_csv_bytes(frame: pd.DataFrame) -> bytes:
    """UTF-8 CSV of a table (index left out), with spreadsheet formulas neutralised in every cell and header.

    Lines end in CRLF (RFC 4180), so a cell holding a bare carriage return is quoted instead of breaking its row.
    """
    return safe_frame(frame).to_csv(index=False, lineterminator="\r\n").encode("utf-8")


def write_csv(frame: pd.DataFrame, path: str | Path) -> Path:
    """Write ``safe_csv_bytes(frame)`` to ``path`` and return the path."""
    target = Path(path)
    target.write_bytes(safe_csv_bytes(frame))
    return target


