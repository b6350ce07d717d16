"""Logs as tools export them: serving benchmarks' per-request arrays, tracing tools' columns by their own meaning.

A serving benchmark writes one JSON object per run whose per-request results are parallel arrays, not records:

- **vLLM** ``vllm bench serve --save-result --save-detailed`` (and the older ``benchmarks/benchmark_serving.py
  --save-result``): ``input_lens``, ``output_lens`` (tokens), ``ttfts`` (seconds), ``itls`` (one list of seconds
  per request: the gaps between streamed chunks after the first), ``generated_texts``, ``errors`` (``""`` when the
  request succeeded), beside the run's ``duration`` (s), ``completed``, ``model_id`` and summary statistics.
- **SGLang** ``python -m sglang.bench_serving --output-file ... --output-details``: the same six arrays, one run per
  JSON line (the file is appended to).

The units are the tools' own (their source computes them with ``time.perf_counter()``, seconds), so they are
taken from the format and never guessed. Per request, as vLLM computes its own summary: TTFT = ``ttfts``;
E2E = TTFT + the sum of ``itls`` (vLLM's ``latency`` is the time of the last chunk); TPOT = sum of ``itls`` /
(output tokens − 1), NaN for one-token replies. A request with a non-empty ``errors`` entry is a failed request
(the frame's ``status``): it is dropped and counted, as every failure is.

Bad variants keep every good row and say what they are: arrays of unequal length (the requests past the shorter
token arrays have no token counts and are dropped as ``missing_tokens``; past a shorter latency array they keep
no latency), a null entry (that request has no such latency), a missing latency array (no such latency at all),
a missing token array (refused: nothing to plan on, with the flag that writes it).
"""
from __future__ import annotations

import io
import json
from dataclasses import dataclass, field

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pa_json

from shapeviz.ingest.columns import Alias, norm
from shapeviz.ingest.errors import IngestError

BENCHMARK_FORMAT = "serving benchmark (vLLM / SGLang per-request arrays)"
TOKEN_ARRAYS = ("input_lens", "output_lens")
LATENCY_ARRAYS = ("ttfts", "itls")
ARRAYS = (*TOKEN_ARRAYS, *LATENCY_ARRAYS, "errors")
# summary keys only vLLM / SGLang benchmark results carry (a run saved without its per-request arrays)
SUMMARY_KEYS = ("mean_ttft_ms", "median_ttft_ms", "mean_tpot_ms", "mean_itl_ms")
_DETAIL_FIX = ("save the per-request results: vllm bench serve --save-result --save-detailed, "
               "or sglang.bench_serving --output-details")
# A ttfts median above this many seconds is not a plausible first-token time: probably milliseconds written
# where the format says seconds. The format's unit is kept (it is documented), and the note says so.
_IMPLAUSIBLE_TTFT_S = 120.0


_ARRAY_SCHEMA = pa.schema([(name, pa.list_(pa.float64())) for name in ("input_lens", "output_lens", "ttfts")]
                          + [("itls", pa.list_(pa.list_(pa.float64()))), ("errors", pa.list_(pa.string())),
                             ("generated_texts", pa.list_(pa.string()))])


def looks_like_benchmark(data: bytes) -> bool:
    """True when a JSON document may be a serving benchmark's result (a cheap byte search, no parse)."""
    return any(data.find(b'"%s"' % key.encode()) >= 0 for key in (*TOKEN_ARRAYS, "ttfts", *SUMMARY_KEYS[:2]))


def has_request_arrays(table: pa.Table) -> bool:
    """True when some run carries per-request token arrays (not only the run's summary)."""
    return any(name in table.column_names and not pa.types.is_null(table.schema.field(name).type)
               and table.column(name).null_count < table.num_rows for name in TOKEN_ARRAYS)


def parse_runs(data: bytes) -> pa.Table | None:
    """The benchmark document(s) as an arrow table, one row per run (lists stay columnar: no Python floats).

    One object per line (SGLang appends runs) or one object, pretty-printed or not; None when arrow cannot read
    it (the caller's tolerant JSON path then takes over).
    """
    options = pa_json.ReadOptions(block_size=min(max(len(data) + 1, 1 << 20), (1 << 31) - 1))
    try:
        # the arrays' types are given: inferred, a list starting with null came back misaligned (pyarrow 2x)
        return pa_json.read_json(io.BytesIO(data), read_options=options, parse_options=pa_json.ParseOptions(
            newlines_in_values=True, explicit_schema=_ARRAY_SCHEMA, unexpected_field_behavior="infer"))
    except (pa.ArrowException, OSError):
        return None


def is_benchmark_table(table: pa.Table | pd.DataFrame) -> bool:
    """True when a raw table's columns are a serving benchmark's per-request arrays (one row per run)."""
    names = set(table.column_names if isinstance(table, pa.Table) else map(str, table.columns))
    return bool(names & set(TOKEN_ARRAYS)) and bool(names & {"ttfts", "itls", "errors", *TOKEN_ARRAYS}) and \
        _list_column(table, next(iter(names & set(TOKEN_ARRAYS))))


def _list_column(table: pa.Table | pd.DataFrame, name: str) -> bool:
    if isinstance(table, pa.Table):
        t = table.schema.field(name).type
        return pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_null(t)
    cells = table[name].dropna()
    return len(cells) > 0 and isinstance(cells.iloc[0], (list, tuple, np.ndarray))


@dataclass
class BenchmarkRequests:
    """The requests of one or more benchmark runs, one row each, with what reading them assumed."""

    frame: pd.DataFrame          # input_tokens, output_tokens, ttft_ms, tpot_ms, e2e_ms, status, run (+ model_id)
    durations_s: list[float | None]
    tools: list[str]             # per run: vllm | sglang | the backend it names
    targets: list[str]           # per run: the load it was asked for ("2 req/s", "concurrency 8", "")
    notes: list[str] = field(default_factory=list)


def _cell_array(table: pa.Table | pd.DataFrame, name: str, run: int) -> pa.Array | None:
    """One run's array ``name`` (None when the run has no such array)."""
    if isinstance(table, pa.Table):
        if name not in table.column_names:
            return None
        scalar = table.column(name)[run]
        if not scalar.is_valid or pa.types.is_null(scalar.type):
            return None
        return scalar.values
    if name not in table.columns:
        return None
    cell = table[name].iloc[run]
    if not isinstance(cell, (list, tuple, np.ndarray)):
        return None
    try:
        return pa.array(list(cell))
    except (pa.ArrowException, TypeError, ValueError, OverflowError):
        return pa.array([None] * len(cell), type=pa.float64())


def _scalar(table: pa.Table | pd.DataFrame, name: str, run: int) -> object:
    if isinstance(table, pa.Table):
        return table.column(name)[run].as_py() if name in table.column_names else None
    return table[name].iloc[run] if name in table.columns else None


def _floats(array: pa.Array | None, n: int) -> np.ndarray:
    """An array as n float64 values: NaN for nulls, for text that is no number and past its end."""
    out = np.full(n, np.nan)
    if array is None:
        return out
    if not (pa.types.is_integer(array.type) or pa.types.is_floating(array.type)):
        array = pa.array(pd.to_numeric(pd.Series(array.to_pylist(), dtype="object"), errors="coerce"))
    values = array.to_numpy(zero_copy_only=False).astype("float64", copy=False)
    out[: min(n, len(values))] = values[:n]
    return out


def _itl_sums(array: pa.Array | None, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Per request, the sum of its inter-token gaps and whether it has a (non-null) list of them."""
    sums, present = np.zeros(n), np.zeros(n, dtype=bool)
    if array is None or not (pa.types.is_list(array.type) or pa.types.is_large_list(array.type)):
        return np.full(n, np.nan), present
    m = min(n, len(array))
    array = array.slice(0, m)
    present[:m] = array.is_valid().to_numpy(zero_copy_only=False)
    values = pc.list_flatten(array)
    if len(values):
        parents = pc.list_parent_indices(array).to_numpy(zero_copy_only=False)
        gaps = _floats(values, len(values))
        bad = np.bincount(parents, weights=np.isnan(gaps), minlength=m) > 0
        sums[:m] = np.bincount(parents, weights=np.nan_to_num(gaps), minlength=m)
        present[:m] &= ~bad[:m]
    return np.where(present, sums, np.nan), present


def _failed(array: pa.Array | None, n: int) -> np.ndarray:
    """True where a request's ``errors`` entry is a non-empty text (vLLM writes "" on success)."""
    out = np.zeros(n, dtype=bool)
    if array is None:
        return out
    text = pd.Series(array.slice(0, min(n, len(array))).to_pylist(), dtype="object")
    failed = text.map(lambda e: e is not None and str(e).strip() != "").to_numpy(dtype=bool)
    out[: len(failed)] = failed
    return out


def benchmark_requests(table: pa.Table | pd.DataFrame, label: str) -> BenchmarkRequests:
    """Every request of every run of a serving benchmark's result, with its measured TTFT, TPOT and E2E."""
    runs = table.num_rows if isinstance(table, pa.Table) else len(table)
    frames, durations, notes = [], [], []
    tools, targets = [], []
    short: dict[str, int] = {}
    missing: set[str] = set()
    null_ttft = 0
    for run in range(runs):
        arrays = {name: _cell_array(table, name, run) for name in ARRAYS}
        lengths = {name: len(a) for name, a in arrays.items() if a is not None}
        absent = [name for name in TOKEN_ARRAYS if name not in lengths]
        if absent:
            what = "only the run's summary" if not lengths else f"no {' or '.join(absent)} array"
            raise IngestError(label, f"is a serving benchmark result with {what} (run {run + 1}): no per-request "
                              "token counts to plan on", _DETAIL_FIX)
        n = max(lengths.values())
        for name, length in lengths.items():
            if length < n:
                short[name] = short.get(name, 0) + n - length
        missing |= {name for name in LATENCY_ARRAYS if name not in lengths}
        output = _floats(arrays["output_lens"], n)
        ttft_s = _floats(arrays["ttfts"], n)
        null_ttft += int(np.isnan(ttft_s[: lengths.get("ttfts", 0)]).sum())
        itl_sum, _ = _itl_sums(arrays["itls"], n)
        with np.errstate(invalid="ignore", divide="ignore"):
            tpot_s = np.where(output > 1, itl_sum / (output - 1), np.nan)
        failed = _failed(arrays["errors"], n)
        frame = pd.DataFrame({
            "input_tokens": _floats(arrays["input_lens"], n), "output_tokens": output,
            "ttft_ms": ttft_s * 1e3, "tpot_ms": tpot_s * 1e3, "e2e_ms": (ttft_s + itl_sum) * 1e3,
            "status": np.where(failed, "failed", "ok"), "run": np.full(n, run + 1, dtype=np.int32)})
        model = _scalar(table, "model_id", run) or _scalar(table, "model", run)
        if isinstance(model, str) and model:
            frame["model_id"] = model
        frames.append(frame)
        duration = _scalar(table, "duration", run)
        durations.append(float(duration) if isinstance(duration, (int, float)) and duration > 0 else None)
        tools.append(bench_tool(_scalar(table, "backend", run)))
        targets.append(_target(table, run))
    if runs > 1:
        notes.append(f"{runs} benchmark runs (one per JSON line) read one after another")
    for name, count in short.items():
        consequence = ("those requests have no token counts (dropped as missing_tokens)" if name in TOKEN_ARRAYS
                       else "those requests keep no TTFT" if name == "ttfts"
                       else "those requests keep no TPOT or E2E" if name == "itls"
                       else "those requests are taken as successful")
        notes.append(f"{name} is {count:,} entries shorter than the longest per-request array: {consequence}")
    for name in sorted(missing):
        notes.append(f"no {name} array: " + ("TTFT and E2E were not measured" if name == "ttfts"
                                               else "TPOT and E2E were not measured"))
    if null_ttft:
        notes.append(f"ttfts: {null_ttft:,} null entries (those requests keep no TTFT)")
    frame = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()
    served = frame.loc[frame["status"] == "ok", "ttft_ms"].dropna() / 1e3 if len(frame) else pd.Series(dtype=float)
    if len(served) and float(served.median()) > _IMPLAUSIBLE_TTFT_S:
        notes.append(f"ttfts: median {float(served.median()):g} s, implausible for a first token; the format "
                     "writes seconds and they are read as seconds: if this file holds milliseconds, divide by 1000")
    notes.insert(0, "serving benchmark: one row per request from its input_lens/output_lens/ttfts/itls/errors "
                    "arrays (seconds, as the tools write them); TPOT = sum(itls) / (output - 1), E2E = TTFT + "
                    "sum(itls), requests with an error are failed requests")
    return BenchmarkRequests(frame, durations, tools, targets, notes)


def bench_tool(backend: object) -> str:
    """``sglang`` when a run says so (SGLang writes its own ``backend``, e.g. "sglang"), else ``vllm``."""
    return "sglang" if isinstance(backend, str) and backend.lower().startswith("sglang") else "vllm"


def _target(table: pa.Table | pd.DataFrame, run: int) -> str:
    """The load a run was asked for: its request rate (inf: all at once) or its concurrency cap."""
    rate, concurrency = _scalar(table, "request_rate", run), _scalar(table, "max_concurrency", run)
    parts = []
    if isinstance(rate, (int, float)) and not isinstance(rate, bool):
        parts.append(f"{rate:g} req/s" if np.isfinite(rate) else "all at once")
    elif isinstance(rate, str) and rate:
        parts.append("all at once" if rate.lower() == "inf" else f"{rate[:12]} req/s")
    if isinstance(concurrency, (int, float)) and not isinstance(concurrency, bool) and concurrency > 0:
        parts.append(f"concurrency {concurrency:g}")
    return ", ".join(parts)


def benchmark_table(table: pa.Table | pd.DataFrame, label: str) -> tuple[pa.Table, list[str]]:
    """A benchmark's runs → an arrow table of requests, named so that the alias table reads them (and their ms)."""
    requests = benchmark_requests(table, label)
    return pa.Table.from_pandas(requests.frame, preserve_index=False), requests.notes


# ---------------------------------------------------------------------------------------------- tracing tools

@dataclass
class ToolColumns:
    """Columns a tracing tool's export means in its own way: chosen over the generic aliases, with notes."""

    tool: str
    chosen: dict[str, tuple[str, Alias]]
    dropped: tuple[str, ...]    # canonical columns the generic aliases would take that the tool means otherwise
    notes: list[str]
    kind: str | None = None     # the column saying what a row is (LangSmith's run_type), when only some are requests
    requests: str | None = None  # the value of ``kind`` that is a request ("llm")

    def not_requests(self, raw_kind: pd.Series) -> np.ndarray:
        """Rows that are not model requests (a chain or tool run, whose token counts are its LLM runs' sums)."""
        text = raw_kind.astype("object").where(raw_kind.notna(), "").astype(str).str.strip().str.lower()
        return (text != self.requests).to_numpy(dtype=bool)


def _by_norm(columns: list[str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for column in columns:
        out.setdefault(norm(column), column)
    return out


# Langfuse's public API (ObservationsView in its OpenAPI spec) documents ``latency`` and ``timeToFirstToken`` in
# seconds, ``startTime``/``completionStartTime``/``endTime`` as date-times, ``usageDetails`` as token counts by
# kind, ``name`` as the observation's name; the UI's export adds the trace's ``traceName`` and ``sessionId``.
_LANGFUSE_MARKS = ("completionstarttime", "timetofirsttoken", "usagedetailsinput", "calculatedtotalcost",
                   "promptname", "tracename", "observationid", "parentobservationid")


def langfuse_columns(columns: list[str]) -> ToolColumns | None:
    """Langfuse observation / generation exports read by Langfuse's semantics; None for any other log."""
    keys = _by_norm(columns)
    if not ({"traceid", "tracename"} & set(keys)) or not any(m in keys for m in _LANGFUSE_MARKS):
        return None
    chosen: dict[str, tuple[str, Alias]] = {}
    dropped: list[str] = []
    notes: list[str] = []
    product = next((keys[k] for k in ("tracename", "name", "observationname") if k in keys), None)
    if product is not None:
        chosen["product"] = (product, Alias("product", product, "langfuse", None))
        notes.append(f"Langfuse export: product from {product!r} (before the model)")
    for canonical, stamp, seconds in (("ttft_ms", "completionstarttime", "timetofirsttoken"),
                                      ("e2e_ms", "endtime", "latency")):
        if stamp in keys and "starttime" in keys:
            dropped.append(canonical)   # from the event times: _add_times derives it from the helper column
            helper = "first_token_time" if canonical == "ttft_ms" else "end_time"
            chosen[helper] = (keys[stamp], Alias(helper, keys[stamp], "langfuse", None))
        elif seconds in keys:
            chosen[canonical] = (keys[seconds], Alias(canonical, keys[seconds], "langfuse", "s"))
    if "starttime" in keys:
        chosen["timestamp"] = (keys["starttime"], Alias("timestamp", keys["starttime"], "langfuse", None))
    notes.append("Langfuse export: latency and timeToFirstToken are seconds (Langfuse API); TTFT and E2E from "
                 "completionStartTime and endTime minus startTime where the export has them")
    return ToolColumns("langfuse", chosen, tuple(dropped), notes)


# LangSmith's run schema (langsmith.schemas.Run): ``session_id`` / ``session_name`` are the *project* a run was
# traced into, not a conversation; LangSmith groups a conversation's runs into a thread by the metadata key
# ``thread_id``, ``session_id`` or ``conversation_id``; ``run_type`` is llm, chain, tool, retriever, ...; a chain's
# ``prompt_tokens``/``completion_tokens`` are the sums of the LLM runs below it; ``ls_model_name`` (metadata) is
# the model; ``first_token_time`` and ``end_time`` are date-times.
_THREAD_KEYS = ("extrametadatathreadid", "extrametadatasessionid", "extrametadataconversationid",
                "metadatathreadid", "metadatasessionid", "metadataconversationid", "threadid")


def langsmith_columns(columns: list[str]) -> ToolColumns | None:
    """LangSmith run exports read by LangSmith's semantics; None for any other log."""
    keys = _by_norm(columns)
    if "dottedorder" not in keys and not ({"runtype", "traceid"} <= set(keys)):
        return None
    chosen: dict[str, tuple[str, Alias]] = {}
    dropped: list[str] = []
    notes: list[str] = []
    thread = next((keys[k] for k in _THREAD_KEYS if k in keys), None)
    if thread is not None:
        chosen["session_id"] = (thread, Alias("session_id", thread, "langsmith", None))
        notes.append(f"LangSmith export: sessions from the thread key {thread!r}")
    else:
        dropped.append("session_id")
        if "sessionid" in keys:
            notes.append("LangSmith export: session_id is the project a run was traced into, not a conversation "
                         "(no thread_id in the runs' metadata, so no sessions)")
    if "sessionname" in keys:
        chosen["product"] = (keys["sessionname"], Alias("product", keys["sessionname"], "langsmith", None))
        notes.append("LangSmith export: product from the project ('session_name')")
    model = next((keys[k] for k in ("extrametadatalsmodelname", "metadatalsmodelname",
                                    "extrainvocationparamsmodel", "extrainvocationparamsmodelname") if k in keys), None)
    if model is not None:
        chosen["model"] = (model, Alias("model", model, "langsmith", None))
    kind = keys.get("runtype")
    if kind is not None:
        notes.append("LangSmith export: only LLM runs (run_type llm) are requests; a chain's tokens are its LLM runs' "
                     "sums, so other runs are counted as missing_tokens, not planned twice")
    return ToolColumns("langsmith", chosen, tuple(dropped), notes, kind, "llm" if kind else None)


# Helicone's request schema (HeliconeRequest in its OpenAPI spec; ``npx @helicone/export`` writes it as JSON, JSONL
# or CSV): ``request_created_at``, ``delay_ms`` (the request's latency, ms), ``time_to_first_token`` (ms),
# ``prompt_tokens``, ``completion_tokens``, ``prompt_cache_read_tokens``, ``request_properties`` (the custom
# properties: a session is the ``Helicone-Session-Id`` header, its kind ``Helicone-Session-Name``).
def helicone_columns(columns: list[str]) -> ToolColumns | None:
    """Helicone request exports read by Helicone's semantics; None for any other log."""
    keys = _by_norm(columns)
    if "requestcreatedat" not in keys or not ({"delayms", "responsecreatedat", "requestproperties"} & set(keys)
                                              or any(k.startswith("requestproperties") for k in keys)):
        return None
    chosen: dict[str, tuple[str, Alias]] = {}
    notes = ["Helicone export: delay_ms and time_to_first_token are milliseconds (Helicone's request schema)"]
    for canonical, key, unit in (("e2e_ms", "delayms", "ms"), ("ttft_ms", "timetofirsttoken", "ms"),
                                 ("cached_tokens", "promptcachereadtokens", None)):
        if key in keys:
            chosen[canonical] = (keys[key], Alias(canonical, keys[key], "helicone", unit))
    for canonical, key in (("session_id", "heliconesessionid"), ("product", "heliconesessionname")):
        column = next((keys[k] for k in keys if k.endswith(key) and k.startswith(("requestproperties", "properties"))),
                      None)
        if column is not None:
            chosen[canonical] = (column, Alias(canonical, column, "helicone", None))
            notes.append(f"Helicone export: {canonical.replace('_id', '')} from the property {column!r}")
    return ToolColumns("helicone", chosen, (), notes)


def tool_columns(columns: list[str]) -> ToolColumns | None:
    """The tracing tool whose export this is, read by its documented semantics (None: generic aliases only)."""
    return langfuse_columns(columns) or langsmith_columns(columns) or helicone_columns(columns)


# ---------------------------------------------------------------------------------------------- load-test records
# guidellm and aiperf write one record per request; each becomes a row named so the alias table reads it.

GUIDELLM_FORMAT = "guidellm benchmark report (per-request records)"
AIPERF_FORMAT = "aiperf profile_export.jsonl (per-request records)"
# guidellm 0.8.1 (guidellm.schemas.base.request_stats.GenerativeRequestStats, serialised with its computed fields):
# prompt_tokens / output_tokens (tokens), time_to_first_token_ms and inter_token_latency_ms (ms, as named; ITL =
# (last token - first token) / (output - 1)), request_latency (s), request_start_time (Unix s), info.conversation_id
# and info.turn_index; benchmarks[].requests holds them as {successful, incomplete, errored}.
_GUIDELLM_STATUSES = ("successful", "incomplete", "errored")
# a request_latency (s) this many times the TTFT + ITL x (output - 1) it contains is milliseconds written as seconds
_UNIT_CONTRADICTION = 100.0


def looks_like_guidellm(data: bytes) -> bool:
    """True when a JSON document may be a guidellm report with per-request records (a byte search, no parse)."""
    return data.find(b'"benchmarks"') >= 0 and data.find(b'"generative_request_stats"') >= 0


def _num_or_nan(value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return np.nan
    return float(value)


def guidellm_table(document: object, label: str) -> tuple[pa.Table, list[str]] | None:
    """A guidellm report's requests, one row each: tokens, TTFT, TPOT (its ITL), E2E, start time, session, turn.

    Successful requests are ``ok``; incomplete and errored ones are failed requests (dropped and counted). None when
    the document has no per-request records (a report saved without them: ``check`` reads its summary).
    """
    if not isinstance(document, dict) or not isinstance(document.get("benchmarks"), list):
        return None
    rows: list[tuple] = []
    counts = dict.fromkeys(_GUIDELLM_STATUSES, 0)
    missing: dict[str, int] = {}
    for run, bench in enumerate(document["benchmarks"], 1):
        requests = bench.get("requests") if isinstance(bench, dict) else None
        if not isinstance(requests, dict):
            continue
        model = _dig_str(bench, ("config", "backend", "model"))
        for status in _GUIDELLM_STATUSES:
            records = requests.get(status)
            for record in records if isinstance(records, list) else ():
                if not isinstance(record, dict):
                    continue
                counts[status] += 1
                values = {}
                for key in ("prompt_tokens", "output_tokens", "time_to_first_token_ms", "inter_token_latency_ms",
                            "request_latency", "request_start_time"):
                    values[key] = _num_or_nan(record.get(key))
                    if np.isnan(values[key]):
                        missing[key] = missing.get(key, 0) + 1
                info = record.get("info") if isinstance(record.get("info"), dict) else {}
                session = info.get("conversation_id")
                turn = _num_or_nan(info.get("turn_index"))
                rows.append((values["prompt_tokens"], values["output_tokens"], values["time_to_first_token_ms"],
                             values["inter_token_latency_ms"], values["request_latency"] * 1e3,
                             values["request_start_time"], str(session) if session is not None else None, turn,
                             "ok" if status == "successful" else "failed", run, model))
    if not sum(counts.values()):
        return None
    frame = pd.DataFrame(rows, columns=["input_tokens", "output_tokens", "ttft_ms", "tpot_ms", "e2e_ms",
                                        "timestamp", "session_id", "turn", "status", "run", "model"])
    notes = [f"guidellm report: one row per request of {frame['run'].nunique()} benchmark(s) (prompt_tokens, "
             "output_tokens, time_to_first_token_ms, inter_token_latency_ms as TPOT, request_latency in seconds, "
             "request_start_time, info.conversation_id / turn_index as guidellm writes them)"]
    if counts["incomplete"] or counts["errored"]:
        notes.append(f"guidellm: {counts['errored']:,} errored and {counts['incomplete']:,} incomplete requests are "
                     "failed requests (dropped and counted)")
    for key, count in missing.items():
        if key in ("prompt_tokens", "output_tokens"):
            consequence = "those requests have no token counts (dropped as missing_tokens)"
        elif key == "request_start_time":
            consequence = "those requests have no arrival time"
        else:
            consequence = f"those requests keep no {_LATENCY_OF[key]}"
        notes.append(f"guidellm: {count:,} requests without a {key} (missing or null): {consequence}")
    notes.extend(_seconds_contradiction(frame, "request_latency", "guidellm writes seconds"))
    if frame["model"].isna().all():
        frame = frame.drop(columns="model")
    return pa.Table.from_pandas(frame, preserve_index=False), notes


_LATENCY_OF = {"time_to_first_token_ms": "TTFT", "inter_token_latency_ms": "TPOT", "request_latency": "E2E",
               "time_to_first_token": "TTFT", "inter_token_latency": "TPOT"}


def _dig_str(tree: object, path: tuple[str, ...]) -> str | None:
    for key in path:
        tree = tree.get(key) if isinstance(tree, dict) else None
    return tree if isinstance(tree, str) and tree else None


def _seconds_contradiction(frame: pd.DataFrame, field_name: str, unit_said: str) -> list[str]:
    """A note when an E2E is ~1000x the TTFT and decode it contains: milliseconds written where seconds are meant."""
    parts = frame["ttft_ms"] + frame["tpot_ms"].fillna(0) * (frame["output_tokens"] - 1).clip(lower=0)
    ratio = (frame["e2e_ms"] / parts.where(parts > 0)).dropna()
    if len(ratio) and float(ratio.median()) > _UNIT_CONTRADICTION:
        return [f"{field_name}: median {float(ratio.median()):,.0f}x the TTFT and decode it contains; {unit_said} "
                "and they are read as such: if this file holds milliseconds there, divide by 1000"]
    return []


# aiperf 0.13.0 (aiperf.common.models.record_models: MetricRecordInfo): one JSON line per request,
# {"metadata": {conversation_id, turn_index, request_start_ns, request_end_ns, benchmark_phase, was_cancelled, ...},
#  "metrics": {name: {"value", "unit"}}, "error": null | {...}}; the per-request metrics shapeviz reads are
# input_sequence_length / output_sequence_length (tokens), time_to_first_token, inter_token_latency and
# request_latency (each with its own unit, "ms" as aiperf writes them).
_TIME_UNITS_MS = {"ns": 1e-6, "us": 1e-3, "µs": 1e-3, "ms": 1.0, "s": 1e3, "sec": 1e3}
_AIPERF_METRICS = (("input_tokens", "input_sequence_length", None), ("output_tokens", "output_sequence_length", None),
                   ("ttft_ms", "time_to_first_token", "ms"), ("tpot_ms", "inter_token_latency", "ms"),
                   ("e2e_ms", "request_latency", "ms"))


def looks_like_aiperf_records(data: bytes) -> bool:
    """True when JSON Lines look like aiperf's per-request records (the first record's keys, no parse)."""
    head = data[:4096].lstrip(b"\xef\xbb\xbf \t\r\n")
    return head.startswith(b'{"metadata"') and head.find(b'"metrics"') >= 0 and head.find(b'"request_start_ns"') >= 0


def aiperf_table(data: bytes, label: str) -> tuple[pa.Table, int, list[str]]:
    """aiperf's ``profile_export.jsonl``: one row per record, each metric converted from the unit it carries.

    A record with an ``error`` or cancelled is a failed request; a time metric in a unit that is no time unit keeps
    no value (said); warm-up records are requests too and are kept (``check`` counts the profiling phase only).
    """
    rows, malformed, warmup = [], 0, 0
    missing: dict[str, int] = {}
    bad_unit: dict[tuple[str, str], int] = {}
    for line in data.removeprefix(b"\xef\xbb\xbf").splitlines():
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except (UnicodeDecodeError, ValueError, RecursionError):
            malformed += 1
            continue
        if not isinstance(record, dict) or not isinstance(record.get("metadata"), dict):
            malformed += 1
            continue
        meta = record["metadata"]
        metrics = record.get("metrics") if isinstance(record.get("metrics"), dict) else {}
        row: dict[str, object] = {}
        for canonical, name, unit in _AIPERF_METRICS:
            metric = metrics.get(name)
            value = _num_or_nan(metric.get("value")) if isinstance(metric, dict) else np.nan
            if np.isnan(value):
                missing[name] = missing.get(name, 0) + 1
            elif unit is not None:
                said = str(metric.get("unit", unit)).strip().lower()
                if said not in _TIME_UNITS_MS:
                    bad_unit[(name, said[:20])] = bad_unit.get((name, said[:20]), 0) + 1
                    value = np.nan
                else:
                    value *= _TIME_UNITS_MS[said]
            row[canonical] = value
        start = _num_or_nan(meta.get("request_start_ns"))
        row["timestamp"] = start / 1e9
        session = meta.get("conversation_id")
        row["session_id"] = str(session) if session is not None else None
        row["turn"] = _num_or_nan(meta.get("turn_index"))
        failed = bool(record.get("error")) or bool(meta.get("was_cancelled"))
        row["status"] = "failed" if failed else "ok"
        if str(meta.get("benchmark_phase", "profiling")) != "profiling":
            warmup += 1
        rows.append(row)
    if not rows:
        raise IngestError(label, "looks like an aiperf profile_export.jsonl but holds no readable record",
                          "give the profile_export.jsonl aiperf wrote, one JSON record per line")
    frame = pd.DataFrame(rows)
    notes = ["aiperf records: one row per request (input/output_sequence_length, time_to_first_token, "
             "inter_token_latency as TPOT, request_latency, each in the unit it carries; request_start_ns; "
             "conversation_id / turn_index as sessions)"]
    if warmup:
        notes.append(f"aiperf: {warmup:,} warm-up records kept as requests (check counts the profiling phase only)")
    for (name, unit), count in bad_unit.items():
        notes.append(f"aiperf: {count:,} {name} values in unit {unit!r}, which is no time unit: those requests keep "
                     f"no {_LATENCY_OF.get(name, 'E2E')}")
    for name, count in missing.items():
        consequence = ("those requests have no token counts (dropped as missing_tokens)" if name.endswith("_length")
                       else f"those requests keep no {_LATENCY_OF.get(name, 'E2E')}")
        notes.append(f"aiperf: {count:,} records without a {name} value (missing or null): {consequence}")
    return pa.Table.from_pandas(frame, preserve_index=False), malformed, notes


def genai_perf_refusal(data: bytes, label: str) -> None:
    """genai-perf's profile_export.json keeps payloads and response timestamps but no token counts: refuse clearly."""
    if data.find(b'"experiments"') >= 0 and data.find(b'"response_timestamps"') >= 0:
        raise IngestError(label, "is a genai-perf profile export: it keeps each request's payload and response "
                          "timestamps but no token counts (genai-perf counts them with the model's tokenizer when it "
                          "analyses the run), so shapeviz cannot plan on it without guessing",
                          "give a per-request export with token counts, such as aiperf's profile_export.jsonl "
                          "(input/output_sequence_length)")
