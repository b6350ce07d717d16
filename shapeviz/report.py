"""What leaves a capacity meeting: safe CSVs, PNG charts, one self-contained HTML memo, replay traces, the bundle.

``report_files`` runs the analyses once and returns every file of the bundle as ``{filename: bytes}``;
``write_report`` writes them into a folder, ``build_bundle`` zips them in memory for the dashboard, and
``write_report_from_args`` is ``python -m shapeviz report``. The same input gives the same bytes: fixed zip
timestamps and order, fixed plotly div ids, seeded samples and arrivals, no run dates in the content.

Safety, because these files are opened by people who did not write the log:
- every CSV cell a spreadsheet would run as a formula (``=``, ``+``, ``-``, ``@``, tab, carriage return) gets a
  leading single quote, headers included; numbers (and text that is a plain number) stay numbers;
- every string that came from the user's data is HTML-escaped in the memo, and the plotly JSON embedded in
  ``<script>`` has ``<``, ``>`` and ``&`` written as ``\\u003c``-style escapes, so nothing can close the script;
- the memo opens without network: plotly.js inline exactly once, no CDN, no web fonts.
"""
from __future__ import annotations

import asyncio
import html
import io
import json
import math
import os
import re
import shutil
import sys
import threading
import zipfile
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import numpy as np
import pandas as pd
import plotly.graph_objects as go
import plotly.io as pio
import pyarrow as pa
import pyarrow.compute as pc

from shapeviz.capacity import (
    DEFAULT_TPOT_SLO_MS,
    DEFAULT_TTFT_SLO_MS,
    Deployment,
    WhatIf,
    Workload,
    balance_ratio,
    load_curve,
    rate_over_time,
)
from shapeviz.capacity.compare import WhatIfComparison, compare_whatif
from shapeviz.figures import (
    clusters_figure,
    fmt_tokens,
    load_curve_figure,
    plane_figure,
    pressure_figure,
    product_colors,
    rate_figure,
)
from shapeviz.ingest import LoadedLog
from shapeviz.recommend import LEVER_LABELS
from shapeviz.shapes import DEFAULT_CORNERS, SHAPE_LABELS, Corners, resolve_deployment

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


# --- PNG: kaleido driving the system chromium ---------------------------------------------------------------
PNG_WIDTH = 1200        # px at scale 1: wide enough for a slide, the figures set their own height
PNG_SCALE = 2           # crisp on a projector; the PNG is PNG_WIDTH·scale × height·scale pixels
PNG_TIMEOUT_S = 90.0    # per figure, inside one browser session
CHROMIUM_HINT = "install the `chromium` package (e.g. apt-get install chromium) or set BROWSER_PATH to a Chrome/Chromium"


def browser_path() -> str:
    """The Chromium kaleido drives: ``$BROWSER_PATH``, else ``chromium`` on the PATH; ValueError if neither.

    Kaleido could download a browser of its own; it never does here (a report must not fetch software).
    """
    env = os.environ.get("BROWSER_PATH")
    if env:
        if Path(env).is_file() and os.access(env, os.X_OK):
            return env
        raise ValueError(f"PNG export: BROWSER_PATH={env!r} is not an executable browser; {CHROMIUM_HINT}")
    for name in ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable"):
        found = shutil.which(name)
        if found:
            return found
    raise ValueError(f"PNG export needs a Chromium browser and none was found: {CHROMIUM_HINT}")


def _transient_errors() -> tuple[type[BaseException], ...]:
    """Errors of a browser session worth one retry (e.g. ``JavascriptError: kaleido_scopes is not defined``)."""
    from kaleido.errors import BrowserClosedError, BrowserFailedError, JavascriptError, KaleidoError

    return (JavascriptError, KaleidoError, BrowserFailedError, BrowserClosedError, asyncio.TimeoutError,
            TimeoutError, ConnectionError)


def _in_thread(make: Callable[[], Any]) -> Any:
    """Run a coroutine to completion on a fresh event loop in its own thread (safe under Streamlit or a loop)."""
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["value"] = asyncio.run(make())
        except BaseException as exc:  # noqa: BLE001 - handed back to the caller's thread
            box["error"] = exc

    thread = threading.Thread(target=target, name="shapeviz-png", daemon=True)
    thread.start()
    thread.join()
    if "error" in box:
        raise box["error"]
    return box["value"]


def _svg_points(fig: go.Figure) -> go.Figure:
    """The same picture with WebGL scatters drawn as SVG: a headless browser has no GPU and software WebGL is
    slow (3-4 s per scatter at scale 2), while SVG draws the few thousand points of a figure in a fraction."""
    if not any(getattr(t, "type", None) == "scattergl" for t in fig.data):
        return fig
    spec = fig.to_plotly_json()
    for trace in spec["data"]:
        if trace.get("type") == "scattergl":
            trace["type"] = "scatter"
    return go.Figure(spec)


def _png_opts(fig: go.Figure, width: int, scale: float) -> dict[str, Any]:
    height = fig.layout.height or 500
    return {"format": "png", "width": int(width), "height": int(height), "scale": scale}


def figures_to_png(
    figures: Mapping[str, go.Figure], *, width: int = PNG_WIDTH, scale: float = PNG_SCALE
) -> dict[str, bytes]:
    """Render several figures to PNG in one browser session (one start costs seconds); one retry on a flake.

    Raises ValueError with one line when no browser is installed or rendering fails twice.
    """
    if not figures:
        return {}
    import kaleido

    path = browser_path()
    items = list(figures.items())
    done: dict[str, bytes] = {}

    async def render() -> None:
        async with kaleido.Kaleido(n=1, timeout=PNG_TIMEOUT_S, mathjax=False, path=path) as k:
            for name, fig in items:
                if name not in done:  # a retry renders only what the failed session had not
                    done[name] = await k.calc_fig(_svg_points(fig), opts=_png_opts(fig, width, scale))

    transient = _transient_errors()
    for attempt in (1, 2):
        try:
            _in_thread(render)
            break
        except transient as exc:
            if attempt == 2:
                raise ValueError(f"PNG export failed after a retry ({type(exc).__name__}: {_first_line(exc)}); "
                                 f"the browser at {path} may be starved on a busy machine: try again") from None
        except Exception as exc:  # noqa: BLE001 - e.g. ChromeNotFoundError: one line, not a traceback
            raise ValueError(f"PNG export failed ({type(exc).__name__}: {_first_line(exc)}); {CHROMIUM_HINT}") from None
    return {name: done[name] for name, _ in items}


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0][:200] if text else "no message"


def png_size(data: bytes) -> tuple[int, int]:
    """(width, height) of a PNG from its IHDR chunk; ValueError if the bytes are not a PNG."""
    if len(data) < 24 or data[:8] != b"\x89PNG\r\n\x1a\n" or data[12:16] != b"IHDR":
        raise ValueError("not a PNG image (bad signature or no IHDR chunk)")
    return int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")


# --- figures with user strings made inert --------------------------------------------------------------------
def inert_figure(fig: go.Figure) -> go.Figure:
    """A copy whose trace names (product names from the log) are HTML-escaped.

    plotly.js reads trace names as its small HTML dialect and decodes entities, so an escaped name still reads as
    typed, while a name like ``<img src=x onerror=...>`` can never become markup. Hover templates are escaped by
    ``shapeviz.figures`` already.
    """
    out = go.Figure(fig)
    for trace in out.data:
        name = getattr(trace, "name", None)
        if isinstance(name, str) and name:
            trace.name = html.escape(name, quote=False)
    return out


def _script_json(fig: go.Figure) -> str:
    """Figure JSON that is safe inside ``<script>``: no ``<``, ``>`` or ``&`` survives as itself."""
    text = pio.to_json(fig, validate=False, pretty=False)
    return (text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")
            .replace("\u2028", "\\u2028").replace("\u2029", "\\u2029"))


# --- tables -----------------------------------------------------------------------------------------------------
def load_report_table(log: LoadedLog) -> pd.DataFrame:
    """How the rows were counted: read, kept, dropped by reason, the column mapping and the notes."""
    r = log.report
    rows: list[tuple[str, str, object]] = [
        ("source", "file", r.source), ("source", "format", r.format), ("source", "compression", r.compression),
        ("rows", "read", r.rows_read), ("rows", "kept", r.rows_kept),
    ]
    rows += [("rows", f"dropped: {reason}", count) for reason, count in r.dropped.items()]
    rows += [("mapping", canonical, column) for canonical, column in r.mapping.items()]
    rows += [("note", str(i + 1), note) for i, note in enumerate(r.notes)]
    return pd.DataFrame(rows, columns=["section", "item", "value"])


def products_table(analysis: Any) -> pd.DataFrame:
    """Shape and phase of the whole log and of each product: percentiles, corner, phase, shares."""
    mixed = {f.scope for f in analysis.clusters.mixed_products}
    rows = []
    for s in analysis.profile.scopes():
        rows.append({
            "product": s.scope, "requests": s.requests, "share_of_requests": s.share_of_requests,
            "shape": s.dominant_shape, "phase": s.phase, "prefill_share_of_gpu_time": s.prefill_gpu_share,
            "share_of_gpu_time": s.share_of_gpu,
            "input_p50": s.input["p50"], "input_p90": s.input["p90"], "input_p99": s.input["p99"],
            "output_p50": s.output["p50"], "output_p90": s.output["p90"], "output_p99": s.output["p99"],
            "mixed": s.scope in mixed,
        })
    return pd.DataFrame(rows)


def clusters_table(analysis: Any) -> pd.DataFrame:
    """The clusters found on the token plane: corner, phase, centre, p50, shares, rate and products."""
    rate = analysis.traffic.mean_rps
    rows = []
    for c in analysis.clusters.clusters:
        rows.append({
            "cluster": f"C{c.id}", "corner": c.shape, "phase": c.phase, "requests": c.requests,
            "share_of_requests": c.share, "share_of_gpu_time": c.gpu_share,
            "input_center": c.input_center, "output_center": c.output_center,
            "input_p50": c.input_p50, "output_p50": c.output_p50,
            "mean_rate_rps": None if rate is None else c.share * rate,
            "products": "; ".join(f"{p} {share:.0%}" for p, share in c.products.items()),
        })
    return pd.DataFrame(rows)


# (label, unit, getter, provenance key) of the capacity plan table, in reading order
_PLAN_ROWS: tuple[tuple[str, str, Callable[[dict], Any], str], ...] = (
    ("request rate", "req/s", lambda p: p["rate_rps"], "rate_rps"),
    ("prefill demand (uncached input tokens)", "tokens/s", lambda p: p["prefill"]["demand_tokens_per_s"],
     "prefill.demand_tokens_per_s"),
    ("decode demand (output tokens)", "tokens/s", lambda p: p["decode"]["demand_tokens_per_s"],
     "decode.demand_tokens_per_s"),
    ("prefill pressure", "share", lambda p: p["prefill"]["utilization"], "prefill.utilization"),
    ("decode pressure", "share", lambda p: p["decode"]["utilization"], "decode.utilization"),
    ("TTFT p50", "ms", lambda p: p["ttft_ms"]["p50"], "ttft_ms"),
    ("TTFT p90", "ms", lambda p: p["ttft_ms"]["p90"], "ttft_ms"),
    ("TPOT p50", "ms", lambda p: p["tpot_ms"]["p50"], "tpot_ms"),
    ("TPOT p90", "ms", lambda p: p["tpot_ms"]["p90"], "tpot_ms"),
    ("meets both SLOs", "", lambda p: p["meets_slo"], "gpus"),
    ("dominant phase", "", lambda p: p["dominant_phase"], "gpus"),
    ("operating decode batch", "sequences", lambda p: p["operating_batch"], "operating_batch"),
    ("replicas (colocated)", "replicas", lambda p: p["replicas"], "gpus"),
    ("GPUs colocated", "GPUs", lambda p: p["gpus"]["colocated"], "gpus"),
    ("GPUs prefill pool (disaggregated)", "GPUs", lambda p: p["gpus"]["prefill"], "gpus"),
    ("GPUs decode pool (disaggregated)", "GPUs", lambda p: p["gpus"]["decode"], "gpus"),
    ("GPUs disaggregated", "GPUs", lambda p: p["gpus"]["disaggregated"], "gpus"),
    ("price per GPU-hour", "USD", lambda p: p["cost"]["usd_per_gpu_hour"], "cost.usd_per_gpu_hour"),
    ("cost per hour (colocated)", "USD", lambda p: p["cost"]["usd_per_hour"], "cost"),
    ("cost per 1M tokens (colocated)", "USD", lambda p: p["cost"]["usd_per_million_tokens"], "cost"),
    ("cost per 1M output tokens (colocated)", "USD", lambda p: p["cost"]["usd_per_million_output_tokens"], "cost"),
    ("cost per hour (disaggregated)", "USD", lambda p: p["cost"]["disaggregated_usd_per_hour"], "cost"),
)


def _row_source(after: dict, key: str) -> str:
    """measured / estimated / assumed for one figure of the plan after the what-if."""
    source = _prov(after["provenance"].get(key, "estimated"))
    traffic = after["assumptions"].get("whatif", {}).get("traffic_multiplier", 1)
    if key == "rate_rps" and traffic != 1:
        source = "assumed"  # the rate after the what-if is the user's multiple of the measured one
    return source


_ON_FLEET_ROWS: tuple[tuple[str, str, str], ...] = (
    ("prefill pressure on today's fleet", "share", "prefill_utilization"),
    ("decode pressure on today's fleet", "share", "decode_utilization"),
    ("TTFT p90 on today's fleet", "ms", "ttft_p90_ms"),
    ("TPOT p90 on today's fleet", "ms", "tpot_p90_ms"),
)


def _cell(value: Any) -> Any:
    """NaN (saturated) → None, numpy scalars → Python values."""
    if value is None or (isinstance(value, (float, np.floating)) and not math.isfinite(float(value))):
        return None
    return value.item() if isinstance(value, np.generic) else value


def plan_table(before: dict, after: dict, on_fleet: pd.DataFrame | None = None) -> pd.DataFrame:
    """The capacity plan before and after the what-if, one row per figure, with where it comes from.

    ``on_fleet`` (``compare_whatif(...).on_fleet``) adds pressure and p90 latencies of both workloads on
    today's fleet, where a lever shows as relief on the phase it touches.
    """
    rows = []
    for label, unit, get, key in _PLAN_ROWS:
        rows.append({"figure": label, "unit": unit, "before": get(before), "after": get(after),
                     "source": _row_source(after, key)})
    if on_fleet is not None:
        for label, unit, column in _ON_FLEET_ROWS:
            rows.append({"figure": label, "unit": unit, "before": _cell(on_fleet.loc["before", column]),
                         "after": _cell(on_fleet.loc["after", column]), "source": "estimated"})
    frame = pd.DataFrame(rows)
    # Mixed numbers, booleans and text: keep each cell as it is (numbers stay numbers in the CSV).
    frame["before"] = frame["before"].astype(object)
    frame["after"] = frame["after"].astype(object)
    return frame


def recommendations_table(analysis: Any) -> pd.DataFrame:
    """The planner's levers, strongest first, with the metric each protects and the reason with its numbers."""
    labels = LEVER_LABELS
    rows = [{"rank": i + 1, "lever": r.lever, "lever_label": labels.get(r.lever, r.lever.replace("_", " ")),
             "metric": r.metric, "scope": r.scope, "share_of_gpu_time_touched": r.weight, "reason": r.reason}
            for i, r in enumerate(analysis.recommendations)]
    columns = ["rank", "lever", "lever_label", "metric", "scope", "share_of_gpu_time_touched", "reason"]
    return pd.DataFrame(rows, columns=columns)


# --- replay traces ------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Replay:
    """The what-if workload, request by request, in arrival order, for load generators."""

    timestamp_ms: np.ndarray       # int64, ms from the first request
    input_tokens: np.ndarray       # int64, after the input trim (min 1)
    output_tokens: np.ndarray      # int64, after the output trim (min 1)
    hash_ids: pd.Series | None     # per request, numpy int64 arrays; None when omitted
    arrivals: str                  # "timestamps" or "poisson"
    notes: tuple[str, ...] = ()

    def __len__(self) -> int:
        return int(self.timestamp_ms.size)


def _scaled_tokens(values: np.ndarray, trim: float) -> np.ndarray:
    """Tokens after a trim: rounded half up, at least 1 (a load generator cannot send an empty prompt)."""
    return np.maximum(np.floor(values.astype(np.float64) * (1.0 - trim) + 0.5), 1.0).astype(np.int64)


def replay_trace(frame: pd.DataFrame, whatif: WhatIf = WhatIf(), *, rate_rps: float | None = None,
                 seed: int = 0) -> Replay:
    """The what-if applied to every request: trims scale tokens, the traffic multiplier compresses arrivals.

    ×2 traffic replays the same requests with inter-arrival times halved (twice as dense); requests are not
    replicated. Logs without timestamps get Poisson arrivals at ``rate_rps`` (the plan's rate after the
    what-if) from a generator seeded with ``seed``. ``hash_ids`` are kept when the log has them and the input
    is not trimmed (a trimmed prompt has other blocks); an output trim leaves the prompts, hence the hashes, as is.
    """
    if not isinstance(whatif, WhatIf):
        raise ValueError(f"whatif must be a shapeviz.capacity.WhatIf, got {type(whatif).__name__}")
    n = len(frame)
    if n == 0:
        raise ValueError("the log has no requests to replay")
    notes: list[str] = []
    inp = _scaled_tokens(frame["input_tokens"].to_numpy(), whatif.trim_input)
    out = _scaled_tokens(frame["output_tokens"].to_numpy(), whatif.trim_output)
    keep = np.ones(n, dtype=bool)
    has_ts = "timestamp" in frame.columns and int(frame["timestamp"].notna().sum()) >= 2
    if has_ts:
        ts = frame["timestamp"]
        keep = ts.notna().to_numpy()
        ns = (ts - ts.min()).to_numpy(dtype="timedelta64[ns]").astype(np.int64)
        offset_ms = np.where(keep, ns, 0) / 1e6 / whatif.traffic_multiplier
        if not keep.all():
            notes.append(f"{int((~keep).sum()):,} requests without a timestamp are left out of the replay.")
        arrivals = "timestamps"
        factor = whatif.traffic_multiplier
        notes.append("Arrival times are the log's, relative to its first request"
                     + ("" if factor == 1 else f", with inter-arrival times divided by the traffic multiplier "
                                               f"×{factor:g} (same requests, {factor:g}× as dense; none replicated)")
                     + ".")
    else:
        if rate_rps is None or not (math.isfinite(rate_rps) and rate_rps > 0):
            raise ValueError(f"the log has no timestamps: a positive rate_rps is needed for Poisson arrivals, "
                             f"got {rate_rps!r}")
        rng = np.random.default_rng(seed)
        gaps = rng.exponential(1000.0 / rate_rps, size=n)
        gaps[0] = 0.0
        offset_ms = np.cumsum(gaps)
        arrivals = "poisson"
        notes.append(f"The log has no timestamps: arrivals are Poisson at {rate_rps:,.3g} req/s (the plan's rate "
                     f"after the what-if), drawn with seed {seed}; requests keep the log's order.")
    timestamp = np.floor(offset_ms + 0.5).astype(np.int64)
    idx = np.flatnonzero(keep)
    idx = idx[np.argsort(offset_ms[idx], kind="stable")]  # exact arrival order, ties in log order
    hashes: pd.Series | None = None
    if "hash_ids" in frame.columns:
        if whatif.trim_input == 0:
            hashes = frame["hash_ids"].iloc[idx].reset_index(drop=True)
            notes.append("hash_ids (prefix-block hashes) are the log's, kept because prompts are not trimmed.")
        else:
            notes.append("hash_ids are omitted: the input trim changes every prompt, so the log's block hashes "
                         "no longer describe them.")
    if whatif.cache_hit is not None:
        notes.append(f"The prefix-cache hit rate of the what-if ({whatif.cache_hit:.0%}) is a property of the server, "
                     "not of the requests: a replay reaches it only if the prompts share prefixes.")
    return Replay(timestamp[idx], inp[idx], out[idx], hashes, arrivals, tuple(notes))


def _lit(text: str) -> pa.Scalar:
    return pa.scalar(text, pa.large_string())


def _int_strings(values: np.ndarray) -> pa.Array:
    return pc.cast(pa.array(np.asarray(values, dtype=np.int64)), pa.large_string())


def _concat_lines(lines: pa.Array) -> bytes:
    """The bytes of a string array without nulls, end to end (its data buffer between the first and last offset)."""
    lines = lines.cast(pa.large_string())
    if lines.null_count:
        raise ValueError("internal: a replay line is missing")
    if isinstance(lines, pa.ChunkedArray):
        lines = lines.combine_chunks()
    offsets = np.frombuffer(lines.buffers()[1], dtype=np.int64)[lines.offset: lines.offset + len(lines) + 1]
    return memoryview(lines.buffers()[2])[int(offsets[0]): int(offsets[-1])].tobytes()


def replay_jsonl(replay: Replay) -> bytes:
    """Mooncake/guidellm-style JSON lines: ``timestamp`` (ms), ``input_length``, ``output_length``[, ``hash_ids``]."""
    if len(replay) == 0:
        return b""
    # pyarrow builds the lines in C: a million requests take about a second, not a Python loop per row.
    parts: list[Any] = [_lit('{"timestamp":'), _int_strings(replay.timestamp_ms), _lit(',"input_length":'),
                        _int_strings(replay.input_tokens), _lit(',"output_length":'),
                        _int_strings(replay.output_tokens)]
    if replay.hash_ids is not None:
        lists = pa.array(replay.hash_ids.to_numpy(dtype=object), type=pa.large_list(pa.int64()), from_pandas=True)
        valid = pc.is_valid(lists)
        joined = pc.binary_join(pc.cast(lists.fill_null([]) if lists.null_count else lists,
                                        pa.large_list(pa.large_string())), _lit(","))
        field_text = pc.binary_join_element_wise(_lit(',"hash_ids":['), joined, _lit("]"), _lit(""))
        parts.append(pc.if_else(valid, field_text, _lit("")))
    parts.append(_lit("}\n"))
    lines = pc.binary_join_element_wise(*parts, _lit(""))
    return _concat_lines(lines)


def replay_vidur_csv(replay: Replay) -> bytes:
    """Vidur-style trace CSV: ``arrived_at`` (seconds), ``num_prefill_tokens``, ``num_decode_tokens``."""
    seconds = replay.timestamp_ms // 1000
    millis = replay.timestamp_ms % 1000
    # Exact millisecond decimals ("12.345"), never a float's long tail.
    arrived = pc.binary_join_element_wise(_int_strings(seconds), _lit("."),
                                          pc.utf8_lpad(_int_strings(millis), 3, "0"), _lit(""))
    lines = pc.binary_join_element_wise(arrived, _lit(","), _int_strings(replay.input_tokens), _lit(","),
                                        _int_strings(replay.output_tokens), _lit("\n"), _lit(""))
    header = b"arrived_at,num_prefill_tokens,num_decode_tokens\n"
    return header + (_concat_lines(lines) if len(replay) else b"")


# --- the HTML memo ------------------------------------------------------------------------------------------------
PROVENANCE_TEXT: dict[str, str] = {
    "measured": "Measured from the log.",
    "estimated": "Estimated by the capacity model (calibrated on published measurements).",
    "assumed": "An assumption: a default, a catalogue value or a value set by the user.",
}

_CSS = """
:root { color-scheme: light; --ink: #1d2330; --muted: #5b6475; --line: #dde2ea; --accent: #0072B2; }
* { box-sizing: border-box; }
body { margin: 0; background: #f6f7f9; color: var(--ink);
       font: 15px/1.5 -apple-system, "Segoe UI", Roboto, Helvetica, Arial, sans-serif; }
main { max-width: 1240px; margin: 0 auto; padding: 28px 32px 60px; background: #fff; }
h1 { font-size: 26px; margin: 0 0 4px; }
h2 { font-size: 19px; margin: 34px 0 8px; padding-top: 10px; border-top: 1px solid var(--line); }
h3 { font-size: 15px; margin: 18px 0 6px; }
p.sub, .caption { color: var(--muted); font-size: 13px; }
.decision { background: #eef5fb; border-left: 4px solid var(--accent); padding: 12px 18px; margin: 16px 0; }
.decision p { margin: 6px 0; }
.decision ol { margin: 6px 0 4px 20px; padding: 0; }
.verdict-ok { color: #1b7f3b; font-weight: 600; } .verdict-bad { color: #b3261e; font-weight: 600; }
table { border-collapse: collapse; margin: 8px 0 12px; font-size: 13px; }
th, td { border-bottom: 1px solid var(--line); padding: 4px 10px; text-align: left; vertical-align: top; }
th { background: #f1f3f6; font-weight: 600; }
td.num { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
.tag { display: inline-block; font-size: 11px; padding: 0 6px; border-radius: 8px; white-space: nowrap; }
.tag.measured { background: #e3f4e8; color: #1b6e35; } .tag.estimated { background: #e4eefa; color: #1c4f8c; }
.tag.assumed { background: #fdf0dc; color: #8a5200; }
.chart { width: 100%; min-height: 320px; }
.wide { overflow-x: auto; }
code { font-size: 12px; background: #f1f3f6; padding: 0 3px; border-radius: 3px; }
footer { margin-top: 40px; color: var(--muted); font-size: 12px; }
@media print { body { background: #fff; } main { padding: 0; } h2 { break-after: avoid; } .chart { break-inside: avoid; } }
"""

_RENDER_JS = """
document.querySelectorAll("div[data-figure]").forEach(function (div) {
  var spec = JSON.parse(document.getElementById(div.getAttribute("data-figure")).textContent);
  Plotly.newPlot(div, spec.data, spec.layout, {displaylogo: false, responsive: true,
    toImageButtonOptions: {format: "png", scale: 2, filename: div.id}});
});
"""


def _e(value: object) -> str:
    """Every string that reaches the memo goes through here: user data is never markup."""
    return html.escape(str(value), quote=True)


def _tag(kind: str) -> str:
    kind = kind if kind in PROVENANCE_TEXT else "estimated"
    return f'<span class="tag {kind}" title="{_e(PROVENANCE_TEXT[kind])}">{kind}</span>'


def _prov(source: str | None) -> str:
    """Plan provenance words → measured / estimated / assumed."""
    return {"measured": "measured", "assumed": "assumed", "set by user": "assumed"}.get(str(source), "estimated")


def _num(value: object, digits: int = 0, unit: str = "") -> str:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "n/a"
    if isinstance(value, (bool, np.bool_)):
        return "yes" if value else "no"
    if isinstance(value, (int, float, np.integer, np.floating)):
        return f"{float(value):,.{digits}f}{unit}"
    return str(value)


def _pct(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.0%}"


def _ms(value: float | None) -> str:
    return "saturated" if value is None else f"{value:,.0f} ms"


def _usd(value: float | None, digits: int = 0) -> str:
    return "n/a" if value is None else f"${value:,.{digits}f}"


def _html_table(frame: pd.DataFrame, formats: Mapping[str, Callable[[Any], str]] | None = None,
                raw_columns: Sequence[str] = ()) -> str:
    """A table with every header and cell escaped (``raw_columns`` hold markup this module built itself)."""
    formats = formats or {}
    head = "".join(f"<th>{_e(str(c).replace('_', ' '))}</th>" for c in frame.columns)
    body = []
    for row in frame.itertuples(index=False, name=None):  # tables of tens of rows, never the log
        cells = []
        for column, value in zip(frame.columns, row):
            if column in raw_columns:
                cells.append(f"<td>{value}</td>")
                continue
            numeric = isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, bool)
            missing = value is None or (isinstance(value, (float, np.floating)) and not math.isfinite(value))
            if missing:
                text = "n/a"
            elif column in formats:
                text = formats[column](value)
            else:
                text = _num(value, 0 if isinstance(value, (int, np.integer)) else 2)
            cells.append(f'<td class="num">{_e(text)}</td>' if numeric else f"<td>{_e(text)}</td>")
        body.append("<tr>" + "".join(cells) + "</tr>")
    return f'<div class="wide"><table><thead><tr>{head}</tr></thead><tbody>{"".join(body)}</tbody></table></div>'


def _whatif_words(whatif: WhatIf) -> str:
    parts = []
    if whatif.trim_input:
        parts.append(f"input trimmed {whatif.trim_input:.0%}")
    if whatif.trim_output:
        parts.append(f"output trimmed {whatif.trim_output:.0%}")
    if whatif.cache_hit is not None:
        parts.append(f"prefix-cache hit {whatif.cache_hit:.0%}")
    if whatif.traffic_multiplier != 1:
        parts.append(f"traffic ×{whatif.traffic_multiplier:g}")
    return ", ".join(parts) if parts else "no change"


_FIRST_METRIC = {"prefill": "TTFT (prefill) hurts first", "decode": "TPOT (decode) hurts first",
                 "balanced": "TTFT and TPOT both matter"}


@dataclass
class _Memo:
    """Everything the memo reads, computed once by ``report_files``."""

    log: LoadedLog
    analysis: Any
    deployment: Deployment
    whatif: WhatIf
    workload: Workload
    before: dict
    after: dict
    fleet_gpus: int
    ttft_slo_ms: float
    tpot_slo_ms: float
    figures: dict[str, go.Figure]
    captions: dict[str, str]
    tables: dict[str, pd.DataFrame]
    replay: Replay
    notes: list[str] = field(default_factory=list)


def _decision(m: _Memo) -> str:
    o = m.analysis.profile.overall
    b, a = m.before, m.after
    labels = LEVER_LABELS
    shape = SHAPE_LABELS.get(o.dominant_shape, o.dominant_shape)
    lines = [
        f"<p><strong>Mostly {_e(shape)} traffic</strong> ({o.request_share[o.dominant_shape]:.0%} of requests; "
        f"p50 {_e(fmt_tokens(o.input['p50']))} in / {_e(fmt_tokens(o.output['p50']))} out). "
        f"Its GPU-time is <strong>{_e(o.phase)}</strong>-dominated ({o.prefill_gpu_share:.0%} prefill) on "
        f"{_e(m.deployment.describe())}, so {_e(_FIRST_METRIC.get(o.phase, ''))}. {_tag('measured')} {_tag('estimated')}</p>",
    ]

    def verdict(plan_doc: dict) -> str:
        if plan_doc["meets_slo"]:
            return '<span class="verdict-ok">meets both SLOs</span>'
        return '<span class="verdict-bad">cannot meet the SLOs</span>'

    gb, ga = b["gpus"]["colocated"], a["gpus"]["colocated"]
    delta = "" if gb is None or ga is None or gb == ga else f" ({ga - gb:+,} GPUs)"
    lines.append(
        f"<p><strong>GPUs: {_e(_num(gb))} → {_e(_num(ga))}</strong>{_e(delta)}. Today's load, "
        f"{_e(_num(b['rate_rps'], 2))} req/s ({_e(b['rate_source'])}), on {_e(_num(gb))} GPUs {verdict(b)}; "
        f"after the what-if ({_e(_whatif_words(m.whatif))}), {_e(_num(ga))} GPUs {verdict(a)} "
        f"(TTFT p90 ≤ {_e(_num(m.ttft_slo_ms))} ms, TPOT p90 ≤ {_e(_num(m.tpot_slo_ms))} ms). Cost "
        f"{_e(_usd(b['cost']['usd_per_hour']))} → {_e(_usd(a['cost']['usd_per_hour']))} per hour. {_tag('estimated')}</p>"
    )
    if a["notes"]:
        lines.append("<p>" + " ".join(_e(n) + "." if not str(n).endswith(".") else _e(n) for n in a["notes"]) + "</p>")
    recs = m.analysis.recommendations[:3]
    if recs:
        items = "".join(
            f"<li><strong>{_e(labels.get(r.lever, r.lever.replace('_', ' ')))}</strong> for "
            f"{_e('all traffic' if r.scope == 'overall' else r.scope)}, protects {_e(r.metric.upper())}. "
            f"{_e(r.reason)}</li>" for r in recs)
        lines.append(f"<p>What to do first:</p><ol>{items}</ol>")
    else:
        lines.append("<p>Nothing stands out: the traffic is balanced between phases and sits in one corner.</p>")
    return '<div class="decision">' + "".join(lines) + "</div>"


def _key_figures(m: _Memo) -> str:
    o, t = m.analysis.profile.overall, m.analysis.traffic
    prefix = m.analysis.prefix
    q = lambda d: " / ".join(fmt_tokens(d[k]) for k in ("p50", "p90", "p99"))  # noqa: E731
    rows = [
        ("requests kept", f"{m.log.report.rows_kept:,} of {m.log.report.rows_read:,} read", "measured"),
        ("time span", "n/a" if t.span_s is None else f"{t.span_s / 3600:,.2f} h", "measured"),
        ("mean rate / peak minute", "n/a" if t.mean_rps is None else f"{t.mean_rps:,.2f} / {t.peak_rps:,.2f} req/s",
         "measured"),
        ("input tokens p50 / p90 / p99", q(o.input), "measured"),
        ("output tokens p50 / p90 / p99", q(o.output), "measured"),
        ("dominant corner", SHAPE_LABELS.get(o.dominant_shape, o.dominant_shape), "measured"),
        ("phase of GPU-time", f"{o.phase} ({o.prefill_gpu_share:.0%} prefill)", "estimated"),
        ("prefix-cache reuse", "n/a" if prefix.hit_ratio_tokens is None
         else f"{prefix.hit_ratio_tokens:.1%} of input tokens ({prefix.method.replace('_', ' ')})",
         {"measured": "measured", "none": "measured"}.get(prefix.provenance, "estimated")),
    ]
    table = "".join(f"<tr><td>{_e(k)}</td><td>{_e(v)}</td><td>{_tag(p)}</td></tr>" for k, v, p in rows)
    return f"<table><thead><tr><th>figure</th><th>value</th><th>source</th></tr></thead><tbody>{table}</tbody></table>"


def _plan_html(m: _Memo) -> str:
    """The capacity plan table of the memo: the same rows as ``capacity_plan.csv``, formatted for reading."""
    fmt = {"share": _pct, "ms": _ms}
    rows = []
    for label, unit, b, a, source in m.tables["capacity_plan"].itertuples(index=False, name=None):
        if unit in fmt:
            bt, at = fmt[unit](b), fmt[unit](a)
        elif unit == "USD":
            digits = 2 if label.startswith("price") or "1M" in label else 0
            bt, at = _usd(b, digits), _usd(a, digits)
        else:
            digits = 0 if unit in ("GPUs", "replicas", "") else (1 if unit == "sequences" else 2)
            bt, at = _num(b, digits), _num(a, digits)
        unit_text = "" if unit in ("share", "ms", "USD", "") else f" {unit}"
        rows.append(f"<tr><td>{_e(label)}</td><td class=\"num\">{_e(bt + unit_text)}</td>"
                    f"<td class=\"num\">{_e(at + unit_text)}</td><td>{_tag(source)}</td></tr>")
    return ("<table><thead><tr><th>figure</th><th>before</th><th>after the what-if</th><th>source</th></tr></thead>"
            f"<tbody>{''.join(rows)}</tbody></table>")


def _chart(name: str, fig: go.Figure, caption: str) -> str:
    div = f"fig-{name}"
    return (f'<div class="chart" id="{div}" data-figure="{div}-json"></div>'
            f'<script type="application/json" id="{div}-json">{_script_json(fig)}</script>'
            + (f'<p class="caption">{_e(caption)}</p>' if caption else ""))


def _assumptions(m: _Memo) -> str:
    a = m.after["assumptions"]
    r = m.log.report
    prefix = m.analysis.prefix
    clusters = m.analysis.clusters
    corners = m.analysis.profile.corners
    deploy_rows = [
        ("model", f"{a['model']} (source: {a['model_source']})"),
        ("GPU", f"{a['gpu']} (source: {a['gpu_source']})"),
        ("precision", f"weights {str(a['precision']).upper()}, KV {str(a['kv_precision']).upper()}, "
                      f"matmuls {str(a['compute_precision']).upper()}" + (f"; {a['fp8_note']}" if a.get("fp8_note") else "")),
        ("tensor parallelism", f"TP {a['tp']} per replica"),
        ("SLOs (p90)", f"TTFT {m.ttft_slo_ms:,.0f} ms, TPOT {m.tpot_slo_ms:,.0f} ms ({a['slo']['source']})"),
        ("price", f"${a['usd_per_gpu_hour']:,.2f} per GPU-hour ({a['price_source']})"),
        ("request rate", f"{a['rate_rps']:,.3g} req/s after the what-if; {a['rate_note']}"),
        ("what-if", _whatif_words(m.whatif)),
        ("queueing", a["queueing"]),
        ("KV transfer (disaggregated)", f"{a['kv_transfer_gbps']:g} GB/s"),
    ]
    dep_html = "".join(f"<tr><td>{_e(k)}</td><td>{_e(v)}</td><td>{_tag('assumed')}</td></tr>" for k, v in deploy_rows)
    eff = a["efficiency"]
    eff_rows = "".join(f"<tr><td>{_e(name)}</td><td class=\"num\">{_e(_num(d['value'], 3))}</td>"
                       f"<td>{_e(d['source'])}</td></tr>" for name, d in eff.items())
    dropped = ", ".join(f"{reason} {count:,}" for reason, count in r.dropped.items()) or "none"
    data_rows = [
        ("source", f"{r.source} ({r.format}, compression {r.compression})"),
        ("rows", f"{r.rows_read:,} read = {r.rows_kept:,} kept + dropped: {dropped}. Every analysis sees only the "
                 "kept (served) requests."),
        ("column mapping", "; ".join(f"{k} ← {v}" for k, v in r.mapping.items())),
        ("corners", f"long input from {corners.long_input_tokens:,} tokens, long output from "
                    f"{corners.long_output_tokens:,}, short output below {corners.short_output_tokens:,}"),
        ("clusters", f"k-means on standardised log tokens, k = {clusters.k} ({clusters.k_source}), fitted on "
                     f"{clusters.sample_size:,} sampled requests (seed {clusters.random_state})"),
        ("prefix cache", f"{prefix.method.replace('_', ' ')} ({prefix.provenance}): {prefix.definition}"),
        ("rate", f"{m.workload.rate_source}: {m.workload.rate_note}"),
    ]
    data_rows += [("note", n) for n in (*r.notes, *prefix.notes, *clusters.notes)]
    data_html = "".join(f"<tr><td>{_e(k)}</td><td>{_e(v)}</td></tr>" for k, v in data_rows)
    fitted = f" Fitted on: {a['efficiency_fitted_on']}." if a.get("efficiency_fitted_on") else ""
    return (
        "<h3>Deployment and SLOs</h3><table><tbody>" + dep_html + "</tbody></table>"
        f"<h3>Efficiencies of the capacity model</h3><p class=\"caption\">Calibrated on published measurements."
        f"{_e(fitted)}</p><table><thead><tr><th>parameter</th><th>value</th><th>source</th></tr></thead>"
        f"<tbody>{eff_rows}</tbody></table>"
        "<h3>Data definitions</h3><table><tbody>" + data_html + "</tbody></table>"
    )


def memo_html(m: _Memo) -> str:
    """The one-page capacity memo: decision first, then the charts, the numbers and the assumptions."""
    from plotly.offline import get_plotlyjs

    report = m.log.report
    t = m.tables
    sections = [
        f"<header><h1>Capacity memo</h1><p class=\"sub\">{_e(report.source)} · {report.rows_kept:,} requests · "
        f"{_e(m.deployment.describe())} · what-if: {_e(_whatif_words(m.whatif))}</p></header>",
        "<h2 id=\"decision\">Decision</h2>" + _decision(m),
        "<h2 id=\"figures\">Key figures</h2>" + _key_figures(m),
        "<h2 id=\"plane\">The workload shape</h2>" + _chart("plane", m.figures["plane"], m.captions["plane"]),
        "<h3>Shape and phase per product</h3>" + _html_table(
            t["shapes_per_product"],
            {c: _pct for c in ("share_of_requests", "prefill_share_of_gpu_time", "share_of_gpu_time")}
            | {c: (lambda v: fmt_tokens(v)) for c in ("input_p50", "input_p90", "input_p99", "output_p50",
                                                       "output_p90", "output_p99")}
            | {"mixed": lambda v: "mixed" if v else ""}) + f"<p class=\"caption\">{_tag('measured')} token "
        "percentiles and corners; phase and GPU-time shares are " + _tag("estimated") + " on the deployment.</p>",
        "<h2 id=\"clusters\">Clusters</h2>" + _chart("clusters", m.figures["clusters"], m.captions["clusters"])
        + _html_table(t["clusters"], {c: _pct for c in ("share_of_requests", "share_of_gpu_time")}
                      | {c: (lambda v: fmt_tokens(v)) for c in ("input_center", "output_center", "input_p50",
                                                                 "output_p50")}
                      | {"mean_rate_rps": lambda v: _num(v, 3)}),
    ]
    flags = [*m.analysis.clusters.mixed_products, *m.analysis.clusters.mixed_pools]
    if flags:
        sections.append("<ul>" + "".join(f"<li><strong>{_e(f.scope)}</strong> ({_e(f.kind)}): {_e(f.reason)}</li>"
                                         for f in flags) + "</ul>")
    sections += [
        f"<h2 id=\"pressure\">Pressure on each phase, before → after (today's fleet, {m.fleet_gpus:,} GPUs)</h2>"
        + _chart("pressure", m.figures["pressure"], m.captions["pressure"]),
        "<h2 id=\"load\">Latency against load</h2>" + _chart("latency_vs_load", m.figures["latency_vs_load"],
                                                            m.captions["latency_vs_load"]),
    ]
    if "rate_over_time" in m.figures:
        sections.append("<h2 id=\"rate\">Request rate over time</h2>"
                        + _chart("rate_over_time", m.figures["rate_over_time"], m.captions["rate_over_time"]))
    sections += [
        "<h2 id=\"cost\">GPUs and cost</h2>" + _plan_html(m),
        "<h2 id=\"recommendations\">Recommendations</h2>" + _html_table(
            t["recommendations"].drop(columns=["lever"]), {"share_of_gpu_time_touched": _pct})
        + f"<p class=\"caption\">{_tag('estimated')} The planner's rules applied to this log; ordered by the "
        "share of GPU-time each lever touches.</p>",
        "<h2 id=\"assumptions\">Assumptions</h2>" + _assumptions(m),
        "<h2 id=\"replay\">Replay traces</h2><p>" + _e(
            f"replay_mooncake.jsonl and replay_vidur.csv hold the what-if workload, {len(m.replay):,} requests in "
            "arrival order.") + "</p><ul>" + "".join(f"<li>{_e(n)}</li>" for n in m.replay.notes) + "</ul>",
    ]
    if m.notes:
        sections.append("<h2 id=\"notes\">Notes on this report</h2><ul>"
                        + "".join(f"<li>{_e(n)}</li>" for n in m.notes) + "</ul>")
    legend = " ".join(f"{_tag(k)} {_e(v)}" for k, v in PROVENANCE_TEXT.items())
    sections.append(f"<footer><p>{legend}</p><p>Made with shapeviz; opens without a network connection "
                    "(plotly.js is inline).</p></footer>")
    return (
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
        "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n"
        f"<title>Capacity memo: {_e(report.source)}</title>\n<style>{_CSS}</style>\n</head>\n<body>\n<main>\n"
        + "\n".join(sections)
        + "\n</main>\n<script>" + get_plotlyjs() + "</script>\n<script>" + _RENDER_JS + "</script>\n</body>\n</html>\n"
    )


# --- the bundle ---------------------------------------------------------------------------------------------------
LOAD_MULTIPLIERS = (0.25, 0.5, 0.75, 1.0, 1.25, 1.5, 1.75, 2.0, 2.5, 3.0, 4.0)
ZIP_DATE = (1980, 1, 1, 0, 0, 0)  # the earliest a zip can say: a bundle carries no build date


@dataclass(frozen=True)
class Bundle:
    """Every file of a report, in bundle order, and what the reader should know about how it was built."""

    files: dict[str, bytes]
    notes: tuple[str, ...] = ()

    def zip(self) -> bytes:
        """The files as one zip, byte-identical for the same files (fixed dates, order and permissions)."""
        return zip_bytes(self.files)


def zip_bytes(files: Mapping[str, bytes]) -> bytes:
    """A deterministic zip of ``{name: bytes}``: entries in the given order, fixed timestamp and mode."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for name, data in files.items():
            info = zipfile.ZipInfo(name, date_time=ZIP_DATE)
            # PNGs are compressed already: deflating them again costs time and saves nothing.
            info.compress_type = zipfile.ZIP_STORED if name.endswith(".png") else zipfile.ZIP_DEFLATED
            info.external_attr = 0o644 << 16
            info.create_system = 3  # unix, whatever machine builds it
            # Level 1: a million-request replay deflates 4× faster than at level 6 for a ~15% larger file.
            archive.writestr(info, data, compresslevel=1)
    return buffer.getvalue()


def _rate_freq(span_s: float | None) -> str:
    """Bucket width of the rate chart: about a thousand buckets at most."""
    span = span_s or 0.0
    if span <= 6 * 3600:
        return "1min"
    if span <= 3 * 86400:
        return "10min"
    return "1h"


def _figures(log: LoadedLog, analysis: Any, dep: Deployment, whatif: WhatIf, w: Workload, cmp: WhatIfComparison,
             corners: Corners, ttft_slo_ms: float, tpot_slo_ms: float
             ) -> tuple[dict[str, go.Figure], dict[str, str], pd.DataFrame]:
    frame = log.frame
    colors = product_colors(frame["product"].astype(str).unique())
    x = np.logspace(0, 6.5, 60)
    hit = whatif.cache_hit or 0.0
    ratio = balance_ratio(dep, x, hit * x, tpot_slo_ms=tpot_slo_ms)
    figures: dict[str, go.Figure] = {
        "plane": plane_figure(frame, corners=corners, colors=colors, balance=(x, ratio * x),
                              balance_label=f"prefill = decode GPU-time ({dep.describe()})",
                              shift=(whatif.trim_input, whatif.trim_output)),
        "clusters": clusters_figure(frame, analysis.clusters.labels, analysis.clusters.clusters, corners=corners,
                                    rate_rps=analysis.traffic.mean_rps),
        "pressure": pressure_figure(cmp.on_fleet.loc["before"], cmp.on_fleet.loc["after"], ttft_slo_ms, tpot_slo_ms),
    }
    curve = load_curve(w, dep, multipliers=LOAD_MULTIPLIERS, whatif=whatif, ttft_slo_ms=ttft_slo_ms,
                       tpot_slo_ms=tpot_slo_ms, replicas=cmp.after.replicas or None)
    figures["latency_vs_load"] = load_curve_figure(curve, ttft_slo_ms, tpot_slo_ms)
    captions = {
        "plane": "Each point is a request (a density with a sample on top for large logs). Diamonds are each "
                 "product's median request; open diamonds show where the what-if trims move it. Above the dashed "
                 "balance line a request costs more decode than prefill GPU-time.",
        "clusters": "k-means clusters of the token plane; bubble area is proportional to the cluster's request rate.",
        "pressure": f"Prefill and decode pressure and the p90 latencies as a share of their SLO, before and after "
                    f"the what-if, both on today's fleet ({cmp.fleet_gpus:,} GPUs), so a lever shows as relief on "
                    "the phase it touches (estimated).",
        "latency_vs_load": "TTFT and TPOT against traffic on the fleet planned after the what-if; the dotted line "
                           "is the operating point, the gap to the knee is the headroom (estimated).",
    }
    if "timestamp" in frame.columns and frame["timestamp"].notna().sum() >= 2:
        freq = _rate_freq(analysis.traffic.span_s)
        figures["rate_over_time"] = rate_figure(rate_over_time(frame, freq), colors)
        captions["rate_over_time"] = f"Requests per second in {freq} buckets, stacked by product (measured)."
    return {k: inert_figure(v) for k, v in figures.items()}, captions, curve


def _readme(files: Sequence[str], m: _Memo, notes: Sequence[str], deploy: Any = None) -> str:
    describe = {
        "README.txt": "this file: what each file is and how it was made",
        "report.html": "the capacity memo: one self-contained page (opens without network)",
        "summary.json": "the summary document (as `python -m shapeviz summary --json`) and both capacity plans",
        "plane.png": "the input-vs-output token plane",
        "clusters.png": "clusters of the token plane",
        "pressure.png": "prefill/decode pressure and latency vs SLO, before and after the what-if",
        "latency_vs_load.png": "TTFT and TPOT against traffic on the planned fleet",
        "rate_over_time.png": "request rate over time per product",
        "load_report.csv": "rows read, kept and dropped by reason; the column mapping",
        "shapes_per_product.csv": "shape percentiles, corner and phase per product",
        "clusters.csv": "the clusters of the token plane",
        "capacity_plan.csv": "the capacity plan before and after the what-if, with provenance",
        "latency_vs_load.csv": "the latency-vs-load curve behind latency_vs_load.png",
        "recommendations.csv": "the planner's levers, strongest first",
        "replay_mooncake.jsonl": "what-if workload: timestamp (ms), input_length, output_length[, hash_ids]",
        "replay_vidur.csv": "what-if workload: arrived_at (s), num_prefill_tokens, num_decode_tokens",
    }
    lines = [
        "shapeviz report bundle",
        "======================",
        f"Log: {m.log.report.source} ({m.log.report.rows_kept:,} requests kept of {m.log.report.rows_read:,} read)",
        f"Deployment: {m.deployment.describe()}",
        f"What-if: {_whatif_words(m.whatif)}",
        f"SLOs (p90): TTFT {m.ttft_slo_ms:,.0f} ms, TPOT {m.tpot_slo_ms:,.0f} ms",
        "",
        "Files",
        "-----",
        *(f"{name}: {describe.get(name) or (deploy.describe.get(name, '') if deploy else '')}" for name in files),
        "",
        "CSV cells that a spreadsheet would run as a formula (starting with = + - @, tab or carriage return) start",
        "with a single quote; numbers are written as numbers.",
        "",
        "Replay traces",
        "-------------",
        f"{len(m.replay):,} requests of the what-if workload in arrival order: input and output tokens scaled by the",
        "trims (rounded, at least 1); the traffic multiplier compresses inter-arrival times (x2 traffic = the same",
        "requests twice as dense; no request is replicated).",
        *m.replay.notes,
    ]
    if m.replay.hash_ids is None and "hash_ids" not in m.log.frame.columns:
        lines.append("hash_ids are omitted: the log has no prefix-block hashes.")
    if deploy is not None:
        lines += ["", *deploy.readme]
    if notes:
        lines += ["", "Notes", "-----", *notes]
    return "\n".join(lines) + "\n"


def report_files(
    log: LoadedLog,
    *,
    corners: Corners = DEFAULT_CORNERS,
    deployment: Deployment | None = None,
    whatif: WhatIf = WhatIf(),
    ttft_slo_ms: float | None = None,
    tpot_slo_ms: float | None = None,
    gpu_hour_usd: float | None = None,
    rate_rps: float | None = None,
    png: bool = True,
    analysis: Any | None = None,
    workload: Workload | None = None,
    seed: int = 0,
) -> Bundle:
    """Every file of the report bundle as ``{filename: bytes}`` (PNGs, CSVs, HTML memo, replay traces, README).

    ``analysis`` and ``workload`` may be passed in when the caller has them cached (the dashboard); otherwise
    they are computed here. Without a browser the PNGs are left out and the README says why; everything else
    is still built.
    """
    from shapeviz.summary import analyze, summary_document

    if not isinstance(whatif, WhatIf):
        raise ValueError(f"whatif must be a shapeviz.capacity.WhatIf, got {type(whatif).__name__}")
    dep = resolve_deployment(deployment)
    ttft = DEFAULT_TTFT_SLO_MS if ttft_slo_ms is None else float(ttft_slo_ms)
    tpot = DEFAULT_TPOT_SLO_MS if tpot_slo_ms is None else float(tpot_slo_ms)
    if analysis is None:
        analysis = analyze(log, corners=corners, deployment=dep)
    w = workload if workload is not None else Workload.from_frame(log.frame, rate_rps=rate_rps)
    cmp = compare_whatif(w, dep, whatif, ttft, tpot, gpu_hour_usd)
    b, a = cmp.before.to_dict(), cmp.after.to_dict()
    figures, captions, curve = _figures(log, analysis, dep, whatif, w, cmp, corners, ttft, tpot)
    tables = {
        "load_report": load_report_table(log),
        "shapes_per_product": products_table(analysis),
        "clusters": clusters_table(analysis),
        "capacity_plan": plan_table(b, a, cmp.on_fleet),
        "latency_vs_load": curve,
        "recommendations": recommendations_table(analysis),
    }
    replay = replay_trace(log.frame, whatif, rate_rps=cmp.after.rate_rps, seed=seed)
    notes: list[str] = []
    pngs: dict[str, bytes] = {}
    if png:
        try:
            pngs = figures_to_png(figures)
        except ValueError as exc:
            notes.append(f"No PNG charts in this bundle: {exc}. The HTML page, CSVs and replay traces are complete.")
    else:
        notes.append("PNG charts were not requested; the HTML page holds the same charts.")
    memo = _Memo(log, analysis, dep, whatif, w, b, a, cmp.fleet_gpus, ttft, tpot, figures, captions, tables, replay,
                 notes)

    files: dict[str, bytes] = {}
    files["report.html"] = memo_html(memo).encode("utf-8")
    files["summary.json"] = (json.dumps({"summary": summary_document(analysis), "whatif": asdict(whatif),
                                         "plan_before": b, "plan_after": a}, indent=2, allow_nan=False,
                                        ensure_ascii=False) + "\n").encode("utf-8")
    for name, data in pngs.items():
        files[f"{name}.png"] = data
    for name, table in tables.items():
        files[f"{name}.csv"] = safe_csv_bytes(table)
    files["replay_mooncake.jsonl"] = replay_jsonl(replay)
    files["replay_vidur.csv"] = replay_vidur_csv(replay)
    deploy = _deploy_files(log, w, dep, cmp.after, whatif, ttft, tpot, notes, getattr(analysis, "prefix", None))
    if deploy is not None:
        files.update(deploy.files)
    readme = _readme(["README.txt", *files], memo, notes, deploy).encode("utf-8")
    return Bundle({"README.txt": readme, **files}, tuple(notes))


def _deploy_files(log: LoadedLog, w: Workload, dep: Deployment, after: Any, whatif: WhatIf, ttft: float,
                  tpot: float, notes: list[str], prefix_reuse: Any = None) -> Any:
    """Engine configs, manifests, plan.json and load-test commands (shapeviz.deploy); a note if they cannot be built."""
    from shapeviz.deploy.bundle import deploy_files

    try:
        deploy = deploy_files(log.frame, w, dep, after, whatif=whatif, ttft_slo_ms=ttft, tpot_slo_ms=tpot,
                              prefix_reuse=prefix_reuse)
    except ValueError as exc:
        notes.append(f"No serving configs or load-test commands in this bundle: {exc}.")
        return None
    return deploy


def build_bundle(log: LoadedLog, **kwargs: Any) -> bytes:
    """The report bundle as zip bytes in memory (the dashboard's one-click download); see ``report_files``."""
    return report_files(log, **kwargs).zip()


def write_report(
    log: LoadedLog,
    out_dir: str | Path,
    *,
    corners: Corners = DEFAULT_CORNERS,
    deployment: Deployment | None = None,
    whatif: WhatIf = WhatIf(),
    ttft_slo_ms: float | None = None,
    tpot_slo_ms: float | None = None,
    gpu_hour_usd: float | None = None,
    png: bool = True,
    **kwargs: Any,
) -> list[Path]:
    """Write the bundle's files into ``out_dir`` (created if needed) and return their paths in bundle order."""
    return _write(report_files(log, corners=corners, deployment=deployment, whatif=whatif, ttft_slo_ms=ttft_slo_ms,
                               tpot_slo_ms=tpot_slo_ms, gpu_hour_usd=gpu_hour_usd, png=png, **kwargs), out_dir)


def _write(bundle: Bundle, out_dir: str | Path) -> list[Path]:
    folder = Path(out_dir)
    if folder.exists() and not folder.is_dir():
        raise ValueError(f"--out {str(folder)!r} is a file; give a folder for the report (it is created if missing)")
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for name, data in bundle.files.items():
        path = folder / name
        path.write_bytes(data)
        paths.append(path)
    return paths


def write_report_from_args(args: Any, mapping: dict[str, str] | None = None) -> list[Path]:
    """``python -m shapeviz report LOG --out DIR [plan options]``: load, plan, write the bundle, list the files."""
    from shapeviz.summary import load_logs

    if getattr(args, "isl", None) is not None or getattr(args, "osl", None) is not None:
        raise ValueError("--isl/--osl describe a fixed shape for `plan`; `report` reads the shape from the LOG files")
    from shapeviz.capacity.plan_cli import deployment_from_args

    dep, _ = deployment_from_args(args)  # the shared plan options: precision, TP, --ep, --attention-dp
    whatif = WhatIf(trim_input=args.trim_input, trim_output=args.trim_output, cache_hit=args.cache_hit,
                    traffic_multiplier=args.traffic)
    folder = Path(args.out)
    if folder.exists() and not folder.is_dir():
        raise ValueError(f"--out {str(folder)!r} is a file; give a folder for the report (it is created if missing)")
    extra: dict[str, Any] = {}
    if getattr(args, "engine", "embedded") == "dask":
        # logs beyond one machine: analysis and workload from the Dask-built sketch, figures from its sample
        from shapeviz.distributed import sketch_paths
        from shapeviz.sketch import SketchedLog, report_log
        from shapeviz.summary import analyze_sketch

        sketch = sketch_paths(args.logs, mapping=mapping or None, scheduler=args.scheduler, workers=args.workers)
        log = report_log(sketch)
        extra = {"analysis": analyze_sketch(SketchedLog(sketch), deployment=dep),
                 "workload": Workload.from_sketch(sketch, rate_rps=args.rate)}
    else:
        from shapeviz.progress import terminal_progress
        from shapeviz.summary import analyze

        log = load_logs(args.logs, mapping)
        with terminal_progress() as progress:   # stages on stderr when it is a terminal; pipes stay clean
            extra = {"analysis": analyze(log, deployment=dep, progress=progress)}
    bundle = report_files(log, deployment=dep, whatif=whatif, ttft_slo_ms=args.ttft_slo_ms,
                          tpot_slo_ms=args.tpot_slo_ms, gpu_hour_usd=args.gpu_hour_usd, rate_rps=args.rate,
                          **extra)
    for note in bundle.notes:
        print(f"shapeviz report: {note}", file=sys.stderr)
    return _write(bundle, folder)


__all__ = [
    "FORMULA_PREFIXES", "PNG_WIDTH", "PNG_SCALE", "Bundle", "Replay", "browser_path", "build_bundle",
    "figures_to_png", "inert_figure", "memo_html", "neutralise", "png_size", "replay_jsonl", "replay_trace",
    "replay_vidur_csv", "report_files", "safe_csv_bytes", "safe_frame", "write_csv", "write_report",
    "write_report_from_args", "zip_bytes",
]
