"""Raw table → canonical frame (``shapeviz.schema``) and the load report that accounts for every row.

Each row ends either in the frame or in ``LoadReport.dropped`` under the first reason that applies, in this order:
``malformed_row`` (the parser could not read it), ``missing_tokens``, ``not_a_number``, ``negative_tokens``,
``absurd_tokens`` (past ``Limits``), ``failed_request`` (no output token, or a status saying it failed).
Unusable timestamps or latencies never drop a row: they become NaT/NaN and a note says how many.
"""
from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, NamedTuple, Sequence

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from shapeviz.ingest.columns import (
    HELPERS,
    RELATIVE_TIME_UNIT,
    Alias,
    find_column,
    match_columns,
    norm,
    unit_from_name,
)
from shapeviz.ingest.errors import IngestError
from shapeviz.ingest.exports import (
    BENCHMARK_FORMAT,
    ToolColumns,
    benchmark_table,
    is_benchmark_table,
    tool_columns,
)
from shapeviz.ingest.limits import DEFAULT_LIMITS, Limits
from shapeviz.ingest.names import bound_names, bound_times, fold_products, folded_note
from shapeviz.ingest.readers import RawTable, too_many_columns
from shapeviz.plain import from_plain, to_plain
from shapeviz.schema import CANONICAL, DTYPES

REASONS: tuple[str, ...] = ("malformed_row", "missing_tokens", "not_a_number", "negative_tokens", "absurd_tokens",
                            "failed_request")
_MAP_FIX = "map one with --map {canonical}=<column> (or in the sidebar)"
_NULL_TEXT = ("", "nan", "null", "none", "na", "n/a", "-", "#n/a")
_FAILED_WORDS = r"error|fail|timeout|timed out|cancel|abort|reject|exception"
_UNIT_TO_MS = {"s": 1e3, "ms": 1.0, "us": 1e-3, "ns": 1e-6}
_UNIT_TO_NS = {"s": 1_000_000_000, "ms": 1_000_000, "us": 1_000, "ns": 1}
# below these medians a latency column without a stated unit is taken as seconds (typical values in ms are larger)
_SECONDS_IF_MEDIAN_BELOW = {"ttft_ms": 10.0, "tpot_ms": 1.0, "e2e_ms": 100.0}
_EXTENSIONS = (".gz", ".gzip", ".bz2", ".zst", ".zstd", ".csv", ".tsv", ".txt", ".json", ".jsonl", ".ndjson",
               ".parquet", ".pq")


@dataclass
class LoadReport:
    """What a load did: rows read = rows kept + rows dropped by reason, the mapping used, what was assumed."""

    source: str
    format: str
    compression: str
    rows_read: int
    rows_kept: int
    dropped: dict[str, int] = field(default_factory=dict)
    mapping: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        if not self.balanced:
            raise ValueError(f"load report of {self.source} does not balance: {self.rows_read} read != "
                             f"{self.rows_kept} kept + {self.rows_dropped} dropped")

    @property
    def rows_dropped(self) -> int:
        """Rows left out of the frame, all reasons together."""
        return int(sum(self.dropped.values()))

    @property
    def balanced(self) -> bool:
        """Every row accounted for: read == kept + dropped."""
        return self.rows_read == self.rows_kept + self.rows_dropped

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-ready dict (the ``summary --json`` and the UI's report panel use it)."""
        return asdict(self) | {"rows_dropped": self.rows_dropped}

    def describe(self) -> str:
        """One line for a caption: ``12,031 rows read, 12,014 kept, 17 dropped (failed_request 17)``."""
        reasons = ", ".join(f"{k} {v:,}" for k, v in self.dropped.items())
        return (f"{self.rows_read:,} rows read, {self.rows_kept:,} kept, {self.rows_dropped:,} dropped"
                + (f" ({reasons})" if reasons else ""))


class LoadedLog(NamedTuple):
    """A canonical frame with the report of how it was loaded (unpacks as ``frame, report``)."""

    frame: pd.DataFrame
    report: LoadReport

    def to_plain(self, frames: list[Any]) -> dict[str, Any]:
        """The report as JSON values and the frame appended to ``frames`` (stored as Parquet by the caller)."""
        return to_plain(LoadedLog, self, frames)

    @classmethod
    def from_plain(cls, data: Any, frames: Sequence[Any]) -> LoadedLog:
        """The log ``to_plain`` described; ValueError when it does not fit (a frame that is not canonical included)."""
        log = from_plain(cls, data, frames)
        missing = {"input_tokens", "output_tokens", "product"} - set(log.frame.columns)
        if missing:
            raise ValueError(f"not a canonical frame: no {', '.join(sorted(missing))}")
        return log


def file_stem(label: str) -> str:
    """``conversation_trace.jsonl.gz`` → ``conversation_trace`` (the product of a log without one)."""
    stem = Path(label).name
    while True:
        lower = stem.lower()
        ext = next((e for e in _EXTENSIONS if lower.endswith(e) and len(stem) > len(e)), None)
        if ext is None:
            return stem
        stem = stem[: -len(ext)]


# ---------------------------------------------------------------------------------------------- mapping

def _resolve_mapping(raw: RawTable, label: str, override: dict[str, str] | None,
                     tool: ToolColumns | None) -> dict[str, tuple[str, Alias | None]]:
    columns = raw.columns
    chosen: dict[str, tuple[str, Alias | None]] = dict(match_columns(columns))
    if tool is not None:   # a tracing tool's export: its own meaning of its columns wins over the generic aliases
        for canonical in tool.dropped:
            chosen.pop(canonical, None)
        chosen.update(tool.chosen)
    allowed = set(CANONICAL) | set(HELPERS)
    for canonical, wanted in (override or {}).items():
        if canonical not in allowed:
            raise IngestError(label, f"cannot map {canonical!r}: not a canonical column",
                              f"use one of {', '.join(sorted(allowed))}")
        if wanted is None or str(wanted).strip() == "":
            chosen.pop(canonical, None)   # the user says: do not use any column for this
            continue
        column = find_column(columns, str(wanted))
        if column is None:
            raise IngestError(label, f"column {wanted!r} mapped to {canonical} is not in the file; columns seen: "
                              f"{_list_columns(columns)}", "pick one of the columns seen")
        chosen[canonical] = (column, None)
    return chosen


def _list_columns(columns: list[str], limit: int = 25) -> str:
    shown = ", ".join(columns[:limit])
    return f"[{shown}{f', … {len(columns) - limit} more' if len(columns) > limit else ''}]"


# ---------------------------------------------------------------------------------------------- values

def _numbers(series: pd.Series) -> tuple[np.ndarray, np.ndarray]:
    """float64 values (NaN where missing or unreadable) and the mask of cells holding text that is not a number."""
    if pd.api.types.is_bool_dtype(series.dtype):
        return np.full(len(series), np.nan), series.notna().to_numpy()
    if pd.api.types.is_numeric_dtype(series.dtype):
        return series.to_numpy(dtype="float64", na_value=np.nan), np.zeros(len(series), dtype=bool)
    if pd.api.types.is_datetime64_any_dtype(series.dtype) or isinstance(series.dtype, pd.CategoricalDtype):
        series = series.astype("object")
    text = series.astype("str") if series.dtype == object else series
    try:
        text = text.str.strip()
    except (AttributeError, TypeError):
        text = series.map(str).str.strip()
    null = series.isna().to_numpy() | text.str.lower().isin(_NULL_TEXT).to_numpy()
    values = pd.to_numeric(text.where(~null), errors="coerce").to_numpy(dtype="float64", na_value=np.nan, copy=True)
    bad = ~null & np.isnan(values)
    if bad.any():
        # thousands separators ("1,234", "1_234") are numbers a human would read without hesitation
        retry = pd.to_numeric(text[bad].str.replace(r"[,_\s]", "", regex=True), errors="coerce")
        values[bad] = retry.to_numpy(dtype="float64", na_value=np.nan)
        bad = ~null & np.isnan(values)
    return values, bad


def _strings(series: pd.Series) -> pd.Series:
    """Text labels (ids, models, products): numbers that are whole become ``"12"``, not ``"12.0"``."""
    if pd.api.types.is_float_dtype(series.dtype):
        whole = series.dropna()
        if len(whole) and (whole == np.round(whole)).all() and (whole.abs() < 2**53).all():
            series = series.astype("Int64")
    out = series.astype("str")
    return out.where(series.notna())


def _labels(raw: RawTable, column: str, keep: np.ndarray, all_kept: bool) -> pd.Series:
    """A label column (product, model, session, status) as a categorical of the kept rows."""
    arrow = raw.arrow(column)
    if arrow is not None and pa.types.is_dictionary(arrow.type) and (
            pa.types.is_string(arrow.type.value_type) or pa.types.is_large_string(arrow.type.value_type)):
        # read dictionary-encoded: the strings were hashed once, inside the parser
        series = _categorical(arrow)
        if not all_kept:
            series = series[keep].reset_index(drop=True)
        return series.cat.remove_unused_categories() if not all_kept else series
    series = _strings(raw.column(column))
    if not all_kept:
        series = series[keep]
    return series.reset_index(drop=True).astype("category")


def _categorical(arrow: pa.ChunkedArray) -> pd.Series:
    """A dictionary-encoded string column as a pandas categorical, as ``to_pandas`` makes it, at half its cost.

    The blocks' dictionaries are unified and the codes taken as they are: ``to_pandas`` does the same and then
    builds the categorical again from its values (a million session ids cost 0.18 s that way, 0.09 s this one).
    """
    if arrow.num_chunks == 0 or any(chunk.dictionary.null_count for chunk in arrow.chunks):
        return arrow.to_pandas()
    whole = arrow.unify_dictionaries().combine_chunks()
    codes = whole.indices.fill_null(-1).to_numpy()
    return pd.Series(pd.Categorical.from_codes(codes, categories=pd.Index(whole.dictionary.to_pandas())))


def _fill_label(series: pd.Series, fallback: str) -> pd.Series:
    """Missing labels take the file's name (a product is never missing)."""
    if not series.isna().any():
        return series
    if fallback not in series.cat.categories:
        series = series.cat.add_categories([fallback])
    return series.fillna(fallback)


def _failed_status(series: pd.Series) -> np.ndarray:
    """True where a status column says the request failed (HTTP >= 400, or words like error/failed/timeout)."""
    if pd.api.types.is_bool_dtype(series.dtype):
        return np.zeros(len(series), dtype=bool)
    values, _ = _numbers(series)
    numeric = (values >= 400) & (values < 600)
    text = series.astype("str").str.lower().str.contains(_FAILED_WORDS, regex=True, na=False)
    return numeric | text.to_numpy(dtype=bool, na_value=False)


def _timestamps(series: pd.Series, column: str, unit: str | None, relative_unit: str,
                notes: list[str]) -> pd.Series:
    """Any timestamp column → datetime64[ns, UTC]; the assumption made is written in ``notes``."""
    if pd.api.types.is_datetime64_any_dtype(series.dtype):
        if getattr(series.dt, "tz", None) is None:
            notes.append(f"timestamp: {column!r} has no time zone; assumed UTC")
            return _in_ns_range(series.dt.tz_localize("UTC"))
        return _in_ns_range(series.dt.tz_convert("UTC"))
    present = series.notna().to_numpy()
    if pd.api.types.is_numeric_dtype(series.dtype) and not pd.api.types.is_bool_dtype(series.dtype):
        return _numeric_timestamps(_numbers(series)[0], column, unit, relative_unit, notes)
    # text: numbers written as text ("1700000000") are still epoch values; decide on a sample, not every row
    sample_values, _ = _numbers(series[present].head(200))
    if present.any() and np.isfinite(sample_values).mean() >= 0.5:
        return _numeric_timestamps(_numbers(series)[0], column, unit, relative_unit, notes)
    text = series.astype("str").where(series.notna())
    present = present & ~text.str.strip().str.lower().isin(_NULL_TEXT).to_numpy()
    text = text.where(present)
    parsed = pd.to_datetime(text, utc=True, format="ISO8601", errors="coerce")
    if parsed.isna().sum() > 0.5 * present.sum():
        parsed = pd.to_datetime(text, utc=True, format="mixed", errors="coerce")
    sample = text.dropna().head(50)
    if len(sample) and not sample.str.contains(r"(?:Z|[+-]\d\d:?\d\d|UTC|GMT)\s*$", regex=True).any():
        notes.append(f"timestamp: {column!r} has no time zone; assumed UTC")
    parsed = _in_ns_range(parsed)
    unparsed = int((parsed.isna().to_numpy() & present).sum())
    if unparsed:
        notes.append(f"timestamp: {unparsed:,} values of {column!r} could not be read as times; rows kept with NaT")
    return parsed


def _in_ns_range(parsed: pd.Series) -> pd.Series:
    """datetime64[ns, UTC], with dates outside its range (years before 1677 or after 2262) as NaT."""
    try:
        return parsed.astype("datetime64[ns, UTC]")
    except (pd.errors.OutOfBoundsDatetime, OverflowError, ValueError):
        inside = (parsed >= pd.Timestamp.min.tz_localize("UTC")) & (parsed <= pd.Timestamp.max.tz_localize("UTC"))
        return parsed.where(inside).astype("datetime64[ns, UTC]")


# A time before 2001-09-09 (1e18 ns since 1970) is an offset from the start of a trace (BurstGPT's seconds,
# Mooncake's milliseconds), kept in the canonical frame as that many seconds after 1970-01-01 UTC.
RELATIVE_BEFORE_NS = 10**18


def relative_times(times: pd.Series) -> bool:
    """True when a timestamp column holds offsets from the trace's start (stored after 1970-01-01), not dates."""
    known = pd.to_datetime(times, utc=True).dropna() if len(times) else times
    return bool(len(known)) and int(known.max().value) < RELATIVE_BEFORE_NS


def _numeric_timestamps(values: np.ndarray, column: str, unit: str | None, relative_unit: str,
                        notes: list[str]) -> pd.Series:
    finite = values[np.isfinite(values)]
    magnitude = float(np.median(np.abs(finite))) if finite.size else 0.0
    if unit not in _UNIT_TO_NS:
        unit = unit_from_name(column)
    if unit not in _UNIT_TO_NS:
        # epoch seconds since 2001 are >= 1e9; ms, us, ns are 1e3, 1e6, 1e9 times larger; smaller is an offset
        unit = next((u for u, floor in (("ns", 1e17), ("us", 1e14), ("ms", 1e11), ("s", 1e9)) if magnitude >= floor),
                    relative_unit)
    # whatever the unit, values before 2001 are offsets from the start of a trace, not wall-clock times
    if magnitude * _UNIT_TO_NS[unit] < RELATIVE_BEFORE_NS:
        notes.append(f"timestamp: {column!r} holds relative offsets, read as {unit} from the log's start (shown as "
                     "elapsed time)")
    else:
        notes.append(f"timestamp: {column!r} read as epoch {unit} (UTC)")
    with np.errstate(invalid="ignore", over="ignore"):
        ns = values * _UNIT_TO_NS[unit]
    ok = np.isfinite(ns) & (np.abs(ns) < 9.2e18)
    out = np.where(ok, np.rint(np.where(ok, ns, 0)), 0).astype("int64").view("datetime64[ns]")
    result = pd.Series(out).dt.tz_localize("UTC")
    result[~ok] = pd.NaT
    return result.astype("datetime64[ns, UTC]")


def _durations_ms(series: pd.Series, canonical: str, column: str, alias: Alias | None, raw: RawTable,
                  notes: list[str]) -> np.ndarray:
    """A latency column → float milliseconds, with its unit from the alias, the name, a sibling unit or the size."""
    if pd.api.types.is_timedelta64_dtype(series.dtype):
        return series.dt.total_seconds().to_numpy(dtype="float64", na_value=np.nan) * 1e3
    values, _ = _numbers(series)
    unit = alias.unit if alias is not None and alias.unit in _UNIT_TO_MS else unit_from_name(column)
    if unit is None:
        unit = _sibling_unit(raw, column)
    if unit is None:
        finite = values[np.isfinite(values)]
        median = float(np.median(finite)) if finite.size else 0.0
        unit = "s" if median < _SECONDS_IF_MEDIAN_BELOW[canonical] else "ms"
        notes.append(f"{canonical}: unit of {column!r} not stated; median {median:g} suggests {unit}")
    return values * _UNIT_TO_MS[unit]


def _sibling_unit(raw: RawTable, column: str) -> str | None:
    # aiperf writes {"value": 18.2, "unit": "ms"}: flattened, the unit sits in "<metric>.unit"
    if not column.endswith(".value") or column[:-6] + ".unit" not in raw.columns:
        return None
    units = raw.column(column[:-6] + ".unit").dropna()
    unit = str(units.iloc[0]).strip().lower() if len(units) else ""
    return {"sec": "s", "seconds": "s", "msec": "ms", "µs": "us"}.get(unit, unit) if unit else None


def _first_event_time(raw: RawTable) -> tuple[str, pd.Series] | None:
    """TraceLab-style ``timing_events[].timestamp``: the first event of each row is its arrival."""
    for column in raw.columns:
        arrow = raw.arrow(column)
        if arrow is None:
            continue
        t = arrow.type
        if not (pa.types.is_list(t) and pa.types.is_struct(t.value_type)
                and t.value_type.get_field_index("timestamp") >= 0):
            continue
        array = arrow.combine_chunks()
        if isinstance(array, pa.ChunkedArray):
            array = array.combine_chunks()
        lengths = pc.fill_null(pc.list_value_length(array), 0).to_numpy(zero_copy_only=False)
        offsets = np.asarray(array.offsets)[:-1] - array.offsets[0].as_py()
        stamps = array.flatten().field("timestamp")
        first = stamps.take(pa.array(np.where(lengths > 0, offsets, 0))).to_pandas()
        if len(stamps) == 0:
            first = pd.Series([None] * len(lengths), dtype="object")
        first = first.where(lengths > 0)
        return f"{column}[0].timestamp", first
    return None


def _hash_arrays(raw: RawTable, column: str, keep: np.ndarray) -> pd.Series:
    """Mooncake ``hash_ids`` → one numpy int64 array per kept row (views into one buffer, no per-row parsing)."""
    arrow = raw.arrow(column)
    if arrow is not None and pa.types.is_list(arrow.type) and pa.types.is_integer(arrow.type.value_type):
        array = arrow.combine_chunks().filter(pa.array(keep))
        offsets = np.asarray(array.offsets) - array.offsets[0].as_py()
        values = array.flatten().to_numpy(zero_copy_only=False).astype("int64", copy=False)
        parts = np.split(values, offsets[1:-1]) if len(array) else []
        out = np.empty(len(array), dtype=object)
        out[:] = parts if len(parts) else []
        return pd.Series(out, dtype="object")
    cells = raw.column(column)[keep].tolist()
    out = np.empty(len(cells), dtype=object)
    for i, cell in enumerate(cells):   # fallback path only: irregular JSON, or hashes written as text in a CSV
        if isinstance(cell, str):
            cell = re.findall(r"-?\d+", cell)   # "[1, 2, 3]" as a CSV cell
        try:
            out[i] = np.asarray(cell if isinstance(cell, (list, tuple, np.ndarray)) else [], dtype="int64")
        except (TypeError, ValueError, OverflowError):
            out[i] = np.empty(0, dtype="int64")
    return pd.Series(out, dtype="object")


# ---------------------------------------------------------------------------------------------- the frame

@dataclass
class _Build:
    """What the steps of ``build_frame`` share: the raw table, the chosen columns, and what they report."""

    raw: RawTable
    label: str
    chosen: dict[str, tuple[str, Alias | None]]
    used: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    def has(self, canonical: str) -> bool:
        return canonical in self.chosen

    def source(self, canonical: str) -> str:
        return self.chosen[canonical][0]

    def series(self, canonical: str) -> pd.Series:
        return self.raw.column(self.source(canonical))

    def use(self, canonical: str, what: str | None = None) -> None:
        """Record in the report's mapping where a canonical column came from."""
        self.used[canonical] = what if what is not None else self.source(canonical)


def build_frame(raw: RawTable, label: str, mapping: dict[str, str] | None, limits: Limits) -> LoadedLog:
    """Map, convert, validate and account: ``RawTable`` → ``LoadedLog``."""
    if len(raw.columns) > limits.max_columns:   # JSON records flattened, Parquet read whole: before matching
        raise too_many_columns(label, len(raw.columns), limits)
    if is_benchmark_table(raw.table):
        raw = _benchmark_rows(raw, label, limits)
    tool = tool_columns(raw.columns)   # a tracing tool's export, recognised once by its columns
    b = _Build(raw, label, _resolve_mapping(raw, label, mapping, tool), notes=list(raw.notes))
    b.notes.extend(tool.notes if tool is not None else [])
    input_v, input_bad, output_v, output_bad = _token_counts(b)
    if tool is not None and tool.kind is not None:
        # rows a tool says are not model requests (LangSmith's chain runs) carry no request of their own
        others = tool.not_requests(raw.column(tool.kind))
        input_v, input_bad = np.where(others, np.nan, input_v), input_bad & ~others
    reason, dropped = _drop_reasons(b, input_v, input_bad, output_v, output_bad, limits)
    keep = reason == 0

    frame: dict[str, Any] = {}
    all_kept = bool(keep.all())   # the usual case: no copy of every column through the mask
    kept_in, kept_out = (input_v, output_v) if all_kept else (input_v[keep], output_v[keep])
    whole_in, whole_out = np.rint(kept_in), np.rint(kept_out)
    fraction = (np.abs(kept_in - whole_in) > 1e-9) | (np.abs(kept_out - whole_out) > 1e-9)
    if fraction.any():
        b.notes.append(f"{int(fraction.sum()):,} fractional token counts rounded to whole tokens")
    frame["input_tokens"] = whole_in.astype("int32")
    frame["output_tokens"] = whole_out.astype("int32")
    _add_times(b, frame, output_v, keep)
    _add_cached(b, frame, keep)
    _add_labels(b, frame, keep)
    if b.has("hash_ids"):
        frame["hash_ids"] = _hash_arrays(raw, b.source("hash_ids"), keep)
        b.use("hash_ids")

    out = _cast(pd.DataFrame({name: (frame[name].reset_index(drop=True) if isinstance(frame[name], pd.Series)
                                     else frame[name]) for name in CANONICAL if name in frame}))
    out = bound_times(bound_names(out, b.notes, limits), b.notes)
    if raw.num_rows and not keep.any():
        b.notes.append("no usable rows: every row was dropped (see dropped)")
    report = LoadReport(source=label, format=raw.format, compression=raw.compression,
                        rows_read=int(raw.num_rows + raw.malformed_rows), rows_kept=int(keep.sum()),
                        dropped=dropped, mapping={k: b.used[k] for k in CANONICAL if k in b.used}, notes=b.notes)
    return LoadedLog(out, report)


def _benchmark_rows(raw: RawTable, label: str, limits: Limits) -> RawTable:
    """A serving benchmark's runs (per-request arrays) → one raw row per request (``exports``)."""
    table, notes = benchmark_table(raw.table, label)
    if table.num_rows > limits.max_rows:
        raise IngestError(label, f"{table.num_rows:,} requests exceed the limit of {limits.max_rows:,} rows",
                          "split the benchmark's runs, or raise Limits.max_rows")
    return RawTable(table, f"{raw.format}: {BENCHMARK_FORMAT}", raw.compression, raw.malformed_rows,
                    [*raw.notes, *notes])


def _token_counts(b: _Build) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Input and output token counts as floats (NaN when missing) and masks of text that is not a number."""
    columns = b.raw.columns
    has_total = b.has("total_tokens")
    if not b.has("input_tokens") and not (b.has("output_tokens") and has_total):
        raise IngestError(b.label, f"no input-token column found among {_list_columns(columns)}",
                          _MAP_FIX.format(canonical="input_tokens"))
    if not b.has("output_tokens") and not (b.has("input_tokens") and has_total):
        raise IngestError(b.label, f"no output-token column found among {_list_columns(columns)}",
                          _MAP_FIX.format(canonical="output_tokens"))
    total_v, total_bad = _numbers(b.series("total_tokens")) if has_total else (None, None)
    if b.has("input_tokens"):
        input_v, input_bad = _numbers(b.series("input_tokens"))
        b.use("input_tokens")
    else:
        output_only, output_only_bad = _numbers(b.series("output_tokens"))
        input_v, input_bad = total_v - output_only, total_bad | output_only_bad
        b.use("input_tokens", f"{b.source('total_tokens')} - {b.source('output_tokens')}")
        b.notes.append("input_tokens derived as total minus output tokens")
    if b.has("output_tokens"):
        output_v, output_bad = _numbers(b.series("output_tokens"))
        b.use("output_tokens")
    else:
        output_v, output_bad = total_v - input_v, total_bad | input_bad
        b.use("output_tokens", f"{b.source('total_tokens')} - {b.used['input_tokens']}")
        b.notes.append("output_tokens derived as total minus input tokens")
    input_v, input_bad = _anthropic_input(b.raw, b.chosen, input_v, input_bad, b.used, b.notes)
    reasoning = [c for c in columns if norm(c.split(".")[-1]) in ("reasoningtokens", "reasoningoutputtokens")]
    if reasoning:
        # OpenAI (completion_tokens) and Codex (output_tokens) already count reasoning tokens as output
        b.notes.append(f"output_tokens include reasoning tokens ({reasoning[0]} is part of them, not added)")
    return input_v, input_bad, output_v, output_bad


def _drop_reasons(b: _Build, input_v: np.ndarray, input_bad: np.ndarray, output_v: np.ndarray,
                  output_bad: np.ndarray, limits: Limits) -> tuple[np.ndarray, dict[str, int]]:
    """Per row, the code of the first reason (``REASONS``) that drops it, 0 to keep it; and the counts."""
    with np.errstate(invalid="ignore"):
        missing = (np.isnan(input_v) & ~input_bad) | (np.isnan(output_v) & ~output_bad)
        not_number = input_bad | output_bad | np.isinf(input_v) | np.isinf(output_v)
        negative = (input_v < 0) | (output_v < 0)
        absurd = (input_v > limits.max_input_tokens) | (output_v > limits.max_output_tokens)
        failed = output_v == 0   # a served generation emits at least one token
    if b.has("status"):
        failed = failed | _failed_status(b.series("status"))
        b.use("status")
    # small integer codes, not strings: 1M-row string arrays cost more than all the checks above
    checks = [missing, not_number, negative, absurd, failed]
    if np.logical_or.reduce(checks).any():
        reason = np.select(checks, np.arange(1, len(REASONS), dtype=np.int8), default=np.int8(0))
    else:   # the usual case, every row kept: no row to choose a reason for
        reason = np.zeros(len(input_v), dtype=np.int8)
    dropped: dict[str, int] = {}
    if b.raw.malformed_rows:
        dropped["malformed_row"] = int(b.raw.malformed_rows)
    counts = np.bincount(reason, minlength=len(REASONS))
    for code, name in enumerate(REASONS[1:], start=1):
        if counts[code]:
            dropped[name] = int(counts[code])
    if dropped.get("failed_request"):
        b.notes.append("failed_request: rows with 0 output tokens" + (" or a failed status" if b.has("status") else "")
                       + " are failed requests and are dropped")
    if dropped.get("absurd_tokens"):
        b.notes.append(f"absurd_tokens: more than {limits.max_input_tokens:,} input or "
                       f"{limits.max_output_tokens:,} output tokens (Limits)")
    return reason, dropped


def _add_times(b: _Build, frame: dict[str, Any], output_v: np.ndarray, keep: np.ndarray) -> None:
    """``timestamp`` and the latencies, direct or derived from event times, for the kept rows."""
    relative_unit = _relative_unit(b.chosen)
    timestamp: pd.Series | None = None
    if b.has("timestamp"):
        column, alias = b.chosen["timestamp"]
        timestamp = _timestamps(b.raw.column(column), column, alias.unit if alias else None, relative_unit, b.notes)
        b.use("timestamp")
    else:
        event = _first_event_time(b.raw)
        if event is not None:
            where, series = event
            timestamp = _timestamps(series, where, None, relative_unit, b.notes)
            b.use("timestamp", where)
    if timestamp is not None:
        frame["timestamp"] = timestamp[keep].reset_index(drop=True)

    latencies: dict[str, np.ndarray] = {}
    for canonical in ("ttft_ms", "tpot_ms", "e2e_ms"):
        if b.has(canonical):
            column, alias = b.chosen[canonical]
            latencies[canonical] = _durations_ms(b.raw.column(column), canonical, column, alias, b.raw, b.notes)
            b.use(canonical)
    for canonical, helper in (("ttft_ms", "first_token_time"), ("e2e_ms", "end_time")):
        if canonical not in latencies and b.has(helper) and timestamp is not None:
            column, alias = b.chosen[helper]
            later = _timestamps(b.raw.column(column), column, alias.unit if alias else None, relative_unit, [])
            latencies[canonical] = (later - timestamp).dt.total_seconds().to_numpy(dtype="float64",
                                                                                   na_value=np.nan) * 1e3
            b.use(canonical, f"{column} - {b.used['timestamp']}")
    if "tpot_ms" not in latencies and "e2e_ms" in latencies and "ttft_ms" in latencies:
        with np.errstate(invalid="ignore", divide="ignore"):
            latencies["tpot_ms"] = np.where(output_v > 1, (latencies["e2e_ms"] - latencies["ttft_ms"])
                                            / (output_v - 1), np.nan)
        b.use("tpot_ms", "(e2e_ms - ttft_ms) / (output_tokens - 1)")
    for canonical, values in latencies.items():
        with np.errstate(invalid="ignore"):
            bad = values < 0
        if bad[keep].any():
            b.notes.append(f"{canonical}: {int(bad[keep].sum()):,} negative values set to NaN")
        frame[canonical] = np.where(bad | ~np.isfinite(values), np.nan, values)[keep].astype("float32")


def _add_cached(b: _Build, frame: dict[str, Any], keep: np.ndarray) -> None:
    """``cached_tokens``: within 0..input_tokens (values above are clipped, with a note)."""
    if not b.has("cached_tokens"):
        return
    all_kept = bool(keep.all())
    integers = _integers(b.raw.arrow(b.source("cached_tokens")))
    if integers is not None:   # Parquet's and most CSVs' integer column: no float copy, nothing to round
        cached, invalid = integers
        cached, invalid = (cached, invalid) if all_kept else (cached[keep], invalid[keep])
        invalid = invalid | (cached < 0)
    else:
        cached = _numbers(b.series("cached_tokens"))[0]
        cached = cached if all_kept else cached[keep]
        with np.errstate(invalid="ignore"):
            invalid = ~np.isfinite(cached) | (cached < 0)
    with np.errstate(invalid="ignore"):
        above = ~invalid & (cached > frame["input_tokens"])
    if above.any():
        b.notes.append(f"cached_tokens: {int(above.sum()):,} values above input_tokens clipped to it")
    cached = np.where(above, frame["input_tokens"], cached)
    if integers is None:
        cached = np.rint(cached)
    # whole numbers in 0..input_tokens (an int32) where valid: built as Int32 directly, not through Float64
    frame["cached_tokens"] = pd.arrays.IntegerArray(np.where(invalid, 0, cached).astype(np.int32), invalid)
    b.use("cached_tokens")


def _integers(arrow: pa.ChunkedArray | None) -> tuple[np.ndarray, np.ndarray] | None:
    """An integer column's values (0 where missing) and its mask of missing cells; None for any other
    type (uint64 too, whose values may not fit), which takes the general path through floats."""
    if arrow is None or not (pa.types.is_signed_integer(arrow.type) or arrow.type in (
            pa.uint8(), pa.uint16(), pa.uint32())):
        return None
    missing = (arrow.is_null().to_numpy(zero_copy_only=False) if arrow.null_count
               else np.zeros(len(arrow), dtype=bool))
    return (pc.fill_null(arrow, 0) if arrow.null_count else arrow).to_numpy(), missing


def _add_labels(b: _Build, frame: dict[str, Any], keep: np.ndarray) -> None:
    """``model``, ``product`` (column, else model, else file name), ``session_id``, ``turn`` and ``status``."""
    stem = file_stem(b.label)
    all_kept = bool(keep.all())

    def labels(canonical: str) -> pd.Series:
        return _labels(b.raw, b.source(canonical), keep, all_kept)

    model = labels("model") if b.has("model") else None
    if model is not None:
        frame["model"] = model
        b.use("model")
    if b.has("product"):
        frame["product"] = _fill_label(labels("product"), stem)
        b.use("product")
    elif model is not None:
        frame["product"] = _fill_label(model, stem)
        b.use("product", f"{b.source('model')} (model column)")
    else:
        frame["product"] = pd.Categorical.from_codes(np.zeros(int(keep.sum()), dtype=np.int8), categories=[stem])
        b.use("product", f"file name: {stem}")
    if b.has("session_id"):
        frame["session_id"] = labels("session_id")
        b.use("session_id")
    if b.has("turn"):
        turn, turn_bad = _numbers(b.series("turn"))
        if turn_bad.any():
            b.notes.append(f"turn: {b.source('turn')!r} is not numeric; ignored")
        else:
            frame["turn"] = pd.array(turn[keep], dtype="Float64").round().astype("Int32")
            b.use("turn")
    if "turn" not in frame and "session_id" in frame:
        frame["turn"] = _derive_turns(frame["session_id"], frame.get("timestamp"))
        b.use("turn", "derived: order inside session_id" + (" by timestamp" if "timestamp" in frame else ""))
    if b.has("status"):
        frame["status"] = labels("status")


def _anthropic_input(raw: RawTable, chosen: dict[str, tuple[str, Alias | None]], input_v: np.ndarray,
                     input_bad: np.ndarray, used: dict[str, str], notes: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """Anthropic's ``input_tokens`` excludes cached tokens: add ``cache_read`` and ``cache_creation`` back."""
    column, alias = chosen.get("input_tokens", (None, None))
    # OpenTelemetry's gen_ai.usage.input_tokens already includes cached tokens: only Anthropic's names qualify
    if alias is None or column is None or norm(column.split(".")[-1]) != "inputtokens" or "genai" in norm(column):
        return input_v, input_bad
    prefix = column[: -len(column.split(".")[-1])]
    extra = [c for c in raw.columns if c.startswith(prefix) and "." not in c[len(prefix):]
             and norm(c[len(prefix):]) in ("cachereadinputtokens", "cachecreationinputtokens")]
    if not extra:
        return input_v, input_bad
    total = input_v.copy()
    for c in extra:
        values, bad = _numbers(raw.column(c))
        total = total + np.nan_to_num(values, nan=0.0)   # an absent cache count means none was cached
        input_bad = input_bad | bad
    used["input_tokens"] = " + ".join([column, *extra])
    notes.append("input_tokens: Anthropic usage counts cached tokens apart, so input_tokens = "
                 + " + ".join([column, *extra]))
    return total, input_bad


def _relative_unit(chosen: dict[str, tuple[str, Alias | None]]) -> str:
    for canonical in ("input_tokens", "output_tokens", "hash_ids"):
        alias = chosen.get(canonical, (None, None))[1]
        if alias is not None and alias.family in RELATIVE_TIME_UNIT:
            return RELATIVE_TIME_UNIT[alias.family]
    return "s"


def _derive_turns(session: pd.Series, timestamp: pd.Series | None) -> pd.Series:
    """0-based position of each request inside its session, by timestamp (stable: file order breaks ties)."""
    codes = session.cat.codes.to_numpy()
    n = len(codes)
    rows = np.arange(n)
    # int64 nanoseconds (NaT sorts first); without timestamps, file order is the order of turns
    times = timestamp.array.asi8 if timestamp is not None else None
    if times is None or bool((np.diff(times) >= 0).all()):
        # logs are usually written in time order: then the running count per session, in file order, is the turn
        turn = pd.Series(codes).groupby(codes, sort=False).cumcount().to_numpy()
    else:
        order = np.lexsort((rows, times, codes))
        sorted_codes = codes[order]
        starts = np.r_[True, sorted_codes[1:] != sorted_codes[:-1]] if n else np.zeros(0, dtype=bool)
        first_of_group = np.maximum.accumulate(np.where(starts, rows, 0)) if n else rows
        turn = np.empty(n, dtype="int64")
        turn[order] = rows - first_of_group
    out = pd.array(turn, dtype="Int32")
    out[codes < 0] = pd.NA
    return pd.Series(out)


def _cast(frame: pd.DataFrame) -> pd.DataFrame:
    """Enforce the schema's dtypes (a no-op when the builders got them right, which they should)."""
    for name in frame.columns:
        dtype = DTYPES[name]
        if str(frame[name].dtype) != dtype:
            frame[name] = frame[name].astype(dtype)
    return frame


# ---------------------------------------------------------------------------------------------- several logs

def combine(logs: list[LoadedLog]) -> LoadedLog:
    """Several loaded logs → one frame (products kept apart) and one summed report."""
    if not logs:
        raise ValueError("combine() needs at least one loaded log; got an empty list")
    if len(logs) == 1:
        return logs[0]
    frames = []
    seen_file_products: dict[str, int] = {}
    for frame, report in logs:
        frame = frame.copy()
        source_product = report.mapping.get("product", "")
        if source_product.startswith("file name: "):
            # two uploads named alike (trace.csv twice) are still two products
            name = str(frame["product"].cat.categories[0]) if len(frame) else file_stem(report.source)
            seen_file_products[name] = seen_file_products.get(name, 0) + 1
            if seen_file_products[name] > 1:
                frame["product"] = pd.Categorical([f"{name} ({seen_file_products[name]})"] * len(frame))
        frames.append(frame)
    notes = _overlay_in_time(frames, [r.source for _, r in logs]) + _separate_sessions(frames)
    merged = pd.concat(frames, ignore_index=True)
    for name in merged.columns:
        merged[name] = merged[name].astype(DTYPES[name]) if DTYPES[name] != "object" else merged[name]
    merged = merged[[c for c in CANONICAL if c in merged.columns]]
    # several logs' busiest products together are still at most the busiest max_products by name
    merged["product"], folded = fold_products(merged["product"], DEFAULT_LIMITS.max_products)
    notes += [folded_note(DEFAULT_LIMITS.max_products)] if folded else []
    reports = [r for _, r in logs]
    dropped: dict[str, int] = {}
    for r in reports:
        for reason, count in r.dropped.items():
            dropped[reason] = dropped.get(reason, 0) + count
    mapping: dict[str, str] = {}
    for canonical in CANONICAL:
        values = [r.mapping[canonical] for r in reports if canonical in r.mapping]
        if values:
            mapping[canonical] = values[0] if len(set(values)) == 1 else "; ".join(
                f"{r.source}: {r.mapping[canonical]}" for r in reports if canonical in r.mapping)
    report = LoadReport(
        source=" + ".join(r.source for r in reports),
        format="+".join(dict.fromkeys(r.format for r in reports)),
        compression="+".join(dict.fromkeys(r.compression for r in reports)),
        rows_read=sum(r.rows_read for r in reports), rows_kept=sum(r.rows_kept for r in reports),
        dropped={k: dropped[k] for k in REASONS if k in dropped},
        mapping=mapping,
        notes=[f"{r.source}: {note}" for r in reports for note in r.notes] + notes,
    )
    return LoadedLog(merged, report)


def _overlay_in_time(frames: list[pd.DataFrame], sources: list[str]) -> list[str]:
    """Shift logs whose time ranges do not overlap so they all start together; return the notes.

    Logs combined into one view are planned as concurrent traffic on one pool. Two logs recorded on different
    days (or one with offsets from 0 and one with dates) would otherwise sit years apart, and every rate
    computed from the timestamps would be meaningless.
    """
    spans = [(f["timestamp"].min(), f["timestamp"].max()) if "timestamp" in f and f["timestamp"].notna().any()
             else None for f in frames]
    timed = [s for s in spans if s is not None]
    if len(timed) < 2:
        return []
    ordered = sorted(timed)
    if all(b[0] <= a[1] for a, b in zip(ordered, ordered[1:])):
        return []  # the logs overlap in time: they already are concurrent traffic
    origin = min(start for start, _ in timed)
    notes = []
    for frame, span, source in zip(frames, spans, sources):
        if span is None or span[0] == origin:
            continue
        frame["timestamp"] = frame["timestamp"] - (span[0] - origin)
        notes.append(f"{source}: timestamps shifted by {span[0] - origin} to start with the other logs "
                     "(the logs do not overlap in time; they are overlaid as concurrent traffic on one pool)")
    return notes


def _separate_sessions(frames: list[pd.DataFrame]) -> list[str]:
    """Keep two logs' sessions apart when they use the same session ids; return the notes."""
    ids = [set(f["session_id"].dropna().astype(str)) if "session_id" in f else set() for f in frames]
    clash = any(ids[i] & ids[j] for i in range(len(ids)) for j in range(i + 1, len(ids)))
    if not clash:
        return []
    for i, frame in enumerate(frames):
        if "session_id" in frame:
            frame["session_id"] = (f"{i + 1}:" + frame["session_id"].astype("string")).astype("category")
    return ["session ids repeat across files, so each file's ids were prefixed with its position (1:, 2:, ...)"]
