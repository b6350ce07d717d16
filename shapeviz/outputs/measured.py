"""Plan vs measured: read load-test results (aiperf, guidellm) and the log's own latencies, hold them against the plan.

Formats read (each file is untrusted text: parsed as JSON, never evaluated; a file that is not one of these gets
one clear line):

- **aiperf** ``profile_export_aiperf.json`` (schema 1.x, written by aiperf 0.13.0 with ``schema_version`` "1.4"):
  top-level metrics ``time_to_first_token``, ``inter_token_latency`` ({unit, avg, p50, p90, ...}),
  ``request_throughput`` and ``output_token_throughput`` ({unit, avg}), ``request_count``.
- **aiperf** ``profile_export.jsonl`` (aiperf 0.13.0): one record per request, ``{"metadata": {request_start_ns,
  request_end_ns, benchmark_phase, ...}, "metrics": {time_to_first_token, inter_token_latency,
  output_sequence_length, request_latency, ...: {value, unit}}, "error": null | {...}}``. The level is computed
  as aiperf computes its summary: the successful records of the profiling phase, numpy's linear percentiles,
  throughput over the span from the first request's start to the last one's end.
- **guidellm** benchmark report JSON (guidellm 0.8.1 ``--output kind=json``; metadata version 2):
  ``benchmarks[].config.strategy`` ({type_, rate}) and ``benchmarks[].metrics.<name>.successful``
  ({mean, median, percentiles: {p50, p90, ...}}) for ``time_to_first_token_ms``, ``inter_token_latency_ms``,
  ``output_token_count`` (total_sum), ``request_totals``, and the benchmark's ``duration`` (s); one level per
  benchmark, its rate = completed requests / duration.
  When the report keeps its per-request records (``benchmarks[].requests``), the level comes from the same
  requests ``load_log`` reads from the file (``ingest.exports.guidellm_table``): numpy's linear percentiles of the
  successful requests' TTFT and TPOT (their ITL), completed requests / duration.
- **vLLM** ``bench serve --save-result`` and **SGLang** ``bench_serving`` results: with their per-request arrays
  (``--save-detailed`` / ``--output-details``), one level per run from the requests ``load_log`` reads from the same
  file (``ingest.exports``); without them, the run's own ``median_``/``p90_`` ``ttft_ms``/``tpot_ms`` and
  ``request_throughput``.
- the **log**: ``ttft_ms`` / ``tpot_ms`` of the canonical frame, per band of per-minute request rate.

The plan side is a *plan reference* (``plan_reference``): the planned p50/p90 TTFT and TPOT on the planned
fleet over a fine grid of request rates, so a measured level at any rate meets the plan's figure at that rate.
TPOT is compared with the tools' inter-token latency (the decode step time, first token excluded).
"""
from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any, Iterable, Iterator, Mapping

import numpy as np
import pandas as pd

from shapeviz.ingest.documents import read_capped
from shapeviz.ingest.errors import IngestError
from shapeviz.ingest.exports import (
    SUMMARY_KEYS,
    bench_tool,
    benchmark_requests,
    guidellm_table,
    has_request_arrays,
    is_benchmark_table,
    looks_like_benchmark,
    parse_runs,
)
from shapeviz.outputs.figures import _escape, load_curve_figure
from shapeviz.physics.steps import Deployment
from shapeviz.plain import json_safe
from shapeviz.plotstyle import refit_header
from shapeviz.serving.planner import Plan, WhatIf, Workload, load_curve
from shapeviz.workload.view import per_minute_rates

PLAN_KIND = "shapeviz-plan-reference"
PLAN_VERSION = 1
CURVE_GRID = np.geomspace(0.02, 20.0, 241)    # traffic multipliers of the planned curve (±3% steps)
ON_PLAN = 0.20                                # measured within ±20% of the plan counts as on plan
MAX_RESULT_BYTES = 256 * 2**20                # a result file larger than this is refused, not parsed
# A JSON document becomes one Python object per JSON object or array (~80 bytes each, empty): 85M empty objects in
# a 255 MiB file took 6.9 GB. A real guidellm report or aiperf summary holds thousands; JSON Lines are read a line
# at a time and keep only the figures they need, so this bounds the documents only.
MAX_RESULT_CONTAINERS = 2_000_000
LOG_RATE_BANDS = 4                            # the log's minutes are split into this many bands of request rate
MIN_LOG_REQUESTS = 20                         # a band with fewer requests gives no percentile
_UNIT_MS = {"ms": 1.0, "s": 1000.0, "sec": 1000.0, "us": 1e-3, "ns": 1e-6}
METRICS = ("ttft_p50_ms", "ttft_p90_ms", "tpot_p50_ms", "tpot_p90_ms")


# --- the plan side ------------------------------------------------------------------------------------------------
def plan_reference(workload: Workload, dep: Deployment, the_plan: Plan, *, whatif: WhatIf = WhatIf(),
                   ttft_slo_ms: float, tpot_slo_ms: float, knee_rps: float | None = None) -> dict[str, Any]:
    """The plan as ``check`` reads it: planned latencies vs request rate on the planned colocated fleet."""
    replicas = int(the_plan.replicas or 1)
    curve = load_curve(workload, dep, CURVE_GRID, whatif, ttft_slo_ms, tpot_slo_ms, replicas=replicas)
    w = workload.apply(whatif)
    rows = curve[["rate_rps", "ttft_p50_ms", "ttft_p90_ms", "tpot_p50_ms", "tpot_p90_ms"]].copy()
    rows["output_tokens_per_s"] = rows["rate_rps"] * w.mean_output
    return json_safe({
        "kind": PLAN_KIND, "version": PLAN_VERSION,
        "deployment": dep.describe(), "model": dep.model.id, "gpu": dep.gpu.id, "tp": dep.tp,
        "precision": dep.precision, "kv_precision": dep.kv_precision,
        "replicas": replicas, "gpus": replicas * dep.tp,
        "rate_rps": the_plan.rate_rps, "rate_source": the_plan.rate_source, "knee_rps": knee_rps,
        "mean_input_tokens": w.mean_input, "mean_output_tokens": w.mean_output,
        "slo": {"ttft_p90_ms": ttft_slo_ms, "tpot_p90_ms": tpot_slo_ms},
        "planned": {"ttft_ms": asdict(the_plan.ttft_ms), "tpot_ms": asdict(the_plan.tpot_ms)},
        "layout": "colocated",
        "disaggregated_point": {k: (the_plan.disaggregated or {}).get(k)
                                for k in ("prefill_replicas", "decode_replicas", "ttft_ms", "tpot_ms")},
        "source": "estimated: shapeviz capacity model on the planned colocated fleet (M/G/1 prefill queue per "
                  "replica, Little's law and a Poisson decode batch); null past saturation",
        "curve": rows.to_dict(orient="records"),
    })


@dataclass(frozen=True)
class PlanReference:
    """A plan read back from JSON: the planned curve (or only the planned point) and the SLOs."""

    description: str
    rate_rps: float
    replicas: int | None
    gpus: int | None
    ttft_slo_ms: float
    tpot_slo_ms: float
    mean_output_tokens: float | None
    curve: pd.DataFrame                 # rate_rps + METRICS; may be a single row (the planned point)
    point_only: bool
    disaggregated: Mapping[str, Any] | None = None   # the split pools' planned point, when the plan has one

    def at(self, rate_rps: float | None) -> dict[str, float | None]:
        """Planned p50/p90 TTFT and TPOT at a request rate (None past saturation or off a point-only plan)."""
        out: dict[str, float | None] = {m: None for m in METRICS}
        rate = self.rate_rps if rate_rps is None else rate_rps
        if not (rate and math.isfinite(rate) and rate > 0):
            return out
        c = self.curve
        if self.point_only:
            if abs(rate / self.rate_rps - 1.0) <= 0.1:
                out.update({m: _num(c[m].iloc[0]) for m in METRICS})
            return out
        r = c["rate_rps"].to_numpy(dtype=np.float64)
        for m in METRICS:
            v = c[m].to_numpy(dtype=np.float64)
            ok = np.isfinite(v) & (r > 0)
            if ok.sum() < 2 or rate < r[ok].min() or rate > r[ok].max():
                continue  # beyond the last finite point the plan says the fleet saturates
            out[m] = float(np.exp(np.interp(np.log(rate), np.log(r[ok]), np.log(np.maximum(v[ok], 1e-9)))))
        return out

    def output_tokens_per_s(self, rate_rps: float | None) -> float | None:
        """Planned output tokens/s at a rate: the rate times the mean output."""
        if rate_rps is None or self.mean_output_tokens is None:
            return None
        return rate_rps * self.mean_output_tokens


def _num(value: Any) -> float | None:
    if isinstance(value, bool):
        return None
    try:
        v = float(value)
    except (TypeError, ValueError, OverflowError):   # a 400-digit integer does not fit a float: no number
        return None
    return v if math.isfinite(v) else None


def _count_or_none(value: Any) -> int | None:
    """A replica or GPU count from a plan: a whole number ≥ 1 below a million, else unknown."""
    v = _num(value)
    return int(v) if v is not None and v == int(v) and 1 <= v < 1e6 else None


def read_plan_reference(document: Mapping[str, Any], name: str = "plan") -> PlanReference:
    """A plan reference from a ``config --json`` document, its ``plan`` part, ``plan --json`` or a bundle's summary."""
    if not isinstance(document, Mapping):
        raise ValueError(f"{name}: expected a JSON object with a shapeviz plan")
    doc: Any = document
    if doc.get("kind") != PLAN_KIND and isinstance(doc.get("plan_reference"), Mapping):
        doc = doc["plan_reference"]
    if doc.get("kind") == PLAN_KIND:
        curve = pd.DataFrame(doc.get("curve") or [])
        needed = ["rate_rps", *METRICS]
        if curve.empty or any(c not in curve.columns for c in needed):
            raise ValueError(f"{name}: the plan reference has no curve with {', '.join(needed)}")
        curve = curve[needed].map(_num).astype(np.float64)
        _no_negative(curve, name)
        slo = doc.get("slo") if isinstance(doc.get("slo"), Mapping) else {}
        split = doc.get("disaggregated_point")
        return PlanReference(str(doc.get("deployment", ""))[:200], _req_num(doc.get("rate_rps"), name, "rate_rps"),
                             _count_or_none(doc.get("replicas")), _count_or_none(doc.get("gpus")),
                             _req_num(slo.get("ttft_p90_ms"), name, "slo"),
                             _req_num(slo.get("tpot_p90_ms"), name, "slo"), _num(doc.get("mean_output_tokens")),
                             curve, False, split if isinstance(split, Mapping) else None)
    plan_doc = doc.get("plan_after") if isinstance(doc.get("plan_after"), Mapping) else doc
    if isinstance(plan_doc.get("ttft_ms"), Mapping) and "rate_rps" in plan_doc:
        slo = _dig(plan_doc, ("assumptions", "slo")) or doc.get("slo")
        slo = slo if isinstance(slo, Mapping) else {}
        tpot = plan_doc.get("tpot_ms") if isinstance(plan_doc.get("tpot_ms"), Mapping) else {}
        row = {"rate_rps": _req_num(plan_doc.get("rate_rps"), name, "rate_rps"),
               "ttft_p50_ms": _num(plan_doc["ttft_ms"].get("p50")), "ttft_p90_ms": _num(plan_doc["ttft_ms"].get("p90")),
               "tpot_p50_ms": _num(tpot.get("p50")), "tpot_p90_ms": _num(tpot.get("p90"))}
        curve = pd.DataFrame([row]).astype(np.float64)
        _no_negative(curve, name)
        mean_out = _num(doc.get("workload", {}).get("mean_output_tokens")) if isinstance(doc.get("workload"), Mapping) else None
        gpus = plan_doc.get("gpus", {}).get("colocated") if isinstance(plan_doc.get("gpus"), Mapping) else None
        return PlanReference(str(plan_doc.get("deployment", ""))[:200], row["rate_rps"],
                             _count_or_none(plan_doc.get("replicas")), _count_or_none(gpus),
                             _req_num(slo.get("ttft_p90_ms"), name, "slo"), _req_num(slo.get("tpot_p90_ms"), name, "slo"),
                             mean_out, curve, True)
    raise ValueError(f"{name}: not a shapeviz plan; give the plan.json of a report bundle or the output of "
                     "`python -m shapeviz config --json` (or `plan --json`)")


def _req_num(value: Any, name: str, what: str) -> float:
    v = _num(value)
    if v is None:
        raise ValueError(f"{name}: the plan has no numeric {what}")
    if v <= 0:
        raise ValueError(f"{name}: the plan's {what} must be positive, got {v:g}")
    return v


def _no_negative(curve: pd.DataFrame, name: str) -> None:
    """A rate or a latency below zero is no measurement: the whole file is refused (it would flip a verdict)."""
    values = curve.to_numpy(dtype=np.float64)
    bad = np.argwhere(values < 0)
    if bad.size:
        row, col = bad[0]
        raise ValueError(f"{name}: {curve.columns[col]} is {values[row, col]:g}; rates and latencies cannot be negative")


# --- the measured side --------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class MeasuredLevel:
    """One measured load level: achieved rate, p50/p90 TTFT and TPOT, output throughput, and where it came from."""

    tool: str                        # aiperf | guidellm | log | simulator
    source: str                      # the file (name only) or "log"
    label: str                       # e.g. "poisson 2 req/s", "rate band 3 of 4"
    rate_rps: float | None           # achieved request throughput
    ttft_p50_ms: float | None
    ttft_p90_ms: float | None
    tpot_p50_ms: float | None
    tpot_p90_ms: float | None
    output_tokens_per_s: float | None
    requests: int | None
    version: str | None = None


def _to_ms(metric: Mapping[str, Any], key: str) -> float | None:
    unit = str(metric.get("unit", "ms")).strip().lower()
    factor = _UNIT_MS.get(unit)
    v = _num(metric.get(key))
    return None if v is None or factor is None else v * factor


def parse_aiperf(document: Mapping[str, Any], source: str = "aiperf") -> list[MeasuredLevel]:
    """The one level of an aiperf ``profile_export_aiperf.json``."""
    ttft, itl = document.get("time_to_first_token"), document.get("inter_token_latency")
    thr = document.get("request_throughput")
    if not isinstance(thr, Mapping) or not (isinstance(ttft, Mapping) or isinstance(itl, Mapping)):
        raise ValueError(f"{source}: not an aiperf profile export (no request_throughput and time_to_first_token)")
    ttft, itl = ttft if isinstance(ttft, Mapping) else {}, itl if isinstance(itl, Mapping) else {}
    out_thr = document.get("output_token_throughput")
    count = document.get("request_count")
    schedule = "its own timing"
    # aiperf 0.13 records the load phases it ran in input_config.phases ({type, rate, ...}).
    phases = _dig(document, ("input_config", "phases"))
    profiling = [p for p in phases if isinstance(p, Mapping) and p.get("kind", "profiling") == "profiling"] \
        if isinstance(phases, list) else []
    if profiling:
        kind, rate = profiling[0].get("type"), _num(profiling[0].get("rate"))
        schedule = f"{kind} {rate:g} req/s target" if rate else str(kind or schedule)
    return [MeasuredLevel(
        tool="aiperf", source=source, label=f"aiperf, {schedule}",
        rate_rps=_num(thr.get("avg")),
        ttft_p50_ms=_to_ms(ttft, "p50"), ttft_p90_ms=_to_ms(ttft, "p90"),
        tpot_p50_ms=_to_ms(itl, "p50"), tpot_p90_ms=_to_ms(itl, "p90"),
        output_tokens_per_s=_num(out_thr.get("avg")) if isinstance(out_thr, Mapping) else None,
        requests=int(count["avg"]) if isinstance(count, Mapping) and _num(count.get("avg")) is not None else None,
        version=str(document.get("aiperf_version")) if document.get("aiperf_version") else None,
    )]


def _dig(tree: Any, path: Iterable[str]) -> Any:
    for key in path:
        if not isinstance(tree, Mapping):
            return None
        tree = tree.get(key)
    return tree


def _successful(metrics: Mapping[str, Any], name: str) -> Mapping[str, Any]:
    value = metrics.get(name)
    if isinstance(value, Mapping) and isinstance(value.get("successful"), Mapping):
        return value["successful"]
    return {}


def parse_guidellm(document: Mapping[str, Any], source: str = "guidellm") -> list[MeasuredLevel]:
    """One level per benchmark of a guidellm report JSON."""
    benchmarks = document.get("benchmarks")
    if not isinstance(benchmarks, list) or not benchmarks:
        raise ValueError(f"{source}: not a guidellm report (no 'benchmarks' list)")
    version = _dig(document, ("metadata", "guidellm_version"))
    levels = []
    for i, b in enumerate(benchmarks):
        if not isinstance(b, Mapping) or not isinstance(b.get("metrics"), Mapping):
            raise ValueError(f"{source}: benchmark {i} has no metrics")
        m = b["metrics"]
        strategy = _dig(b, ("config", "strategy")) or _dig(b, ("args", "strategy")) or {}
        kind = str(strategy.get("type_", "benchmark")) if isinstance(strategy, Mapping) else "benchmark"
        rate = _num(strategy.get("rate")) if isinstance(strategy, Mapping) else None
        streams = strategy.get("streams") if isinstance(strategy, Mapping) else None
        label = f"guidellm {kind}" + (f" {rate:g} req/s" if rate else f" {streams} streams" if streams else "")
        ttft, itl = _successful(m, "time_to_first_token_ms"), _successful(m, "inter_token_latency_ms")
        totals = m.get("request_totals")
        done = _num(totals.get("successful")) if isinstance(totals, Mapping) else None
        duration = _num(b.get("duration"))
        # Achieved rate: completed requests over the measured window (guidellm's own requests_per_second mean
        # is a mean over its time buckets; it is the fallback).
        rate_rps = (done / duration if done is not None and duration else
                    _num(_successful(m, "requests_per_second").get("mean")))
        out_sum = _num(_successful(m, "output_token_count").get("total_sum"))
        out_tps = (out_sum / duration if out_sum is not None and duration else
                   _num(_successful(m, "output_tokens_per_second").get("mean")))
        level = MeasuredLevel(
            tool="guidellm", source=source, label=label,
            rate_rps=rate_rps,
            ttft_p50_ms=_num(_dig(ttft, ("percentiles", "p50"))) or _num(ttft.get("median")),
            ttft_p90_ms=_num(_dig(ttft, ("percentiles", "p90"))),
            tpot_p50_ms=_num(_dig(itl, ("percentiles", "p50"))) or _num(itl.get("median")),
            tpot_p90_ms=_num(_dig(itl, ("percentiles", "p90"))),
            output_tokens_per_s=out_tps,
            requests=int(done) if done is not None else None,
            version=str(version) if version else None,
        )
        levels.append(_guidellm_from_requests(b, level, duration, source))
    return levels


def _guidellm_from_requests(benchmark: Mapping[str, Any], level: MeasuredLevel, duration: float | None,
                            source: str) -> MeasuredLevel:
    """A guidellm benchmark's level from its per-request records when the report has them: the same requests, and
    so the same TTFT and TPOT, that ``load_log`` reads from the file (numpy's linear percentiles)."""
    found = guidellm_table({"benchmarks": [benchmark]}, source)
    if found is None:
        return level
    figures, failed = _requests_figures(found[0].to_pandas(), duration)
    if not figures["requests"]:
        return level
    if not duration:   # no window to divide by: the report's own rate and throughput stand
        figures.update(rate_rps=level.rate_rps, output_tokens_per_s=level.output_tokens_per_s)
    return replace(level, label=level.label + _left_out(failed), **figures)


def _requests_figures(rows: pd.DataFrame, duration: float | None) -> tuple[dict[str, Any], int]:
    """A level's figures from one run's requests (``ingest.exports``' rows), and how many failed and were left out.

    Only successful requests with output count: numpy's linear percentiles of their TTFT and TPOT, their number over
    the run's duration as the achieved rate (None without a duration or a successful request).
    """
    ok = rows[(rows["status"] == "ok") & (rows["output_tokens"] > 0)]
    ttft, tpot = ok["ttft_ms"].to_numpy(np.float64), ok["tpot_ms"].to_numpy(np.float64)
    figures = dict(rate_rps=len(ok) / duration if duration and len(ok) else None,
                   ttft_p50_ms=_percentile(ttft, 50), ttft_p90_ms=_percentile(ttft, 90),
                   tpot_p50_ms=_percentile(tpot, 50), tpot_p90_ms=_percentile(tpot, 90),
                   output_tokens_per_s=float(ok["output_tokens"].sum()) / duration if duration and len(ok) else None,
                   requests=len(ok))
    return figures, len(rows) - len(ok)


def _left_out(failed: int) -> str:
    return f" ({failed:,} failed left out)" if failed else ""


_GIVE = ("give aiperf's profile_export_aiperf.json or profile_export.jsonl, guidellm's JSON report, or a vLLM / "
         "SGLang serving benchmark result")


def _percentile(values: np.ndarray, q: float) -> float | None:
    values = values[np.isfinite(values)]
    return float(np.percentile(values, q)) if values.size else None


def _benchmark_levels(data: bytes, name: str) -> list[MeasuredLevel] | None:
    """One level per run of a vLLM / SGLang serving benchmark with per-request arrays; None when it is not one.

    The requests are the ones ``load_log`` reads from the same file (``ingest.exports``): the level's percentiles
    are those of the successful requests' TTFT and TPOT, its rate the completed requests over the run's duration.
    """
    if not looks_like_benchmark(data):
        return None
    runs = parse_runs(data.removeprefix(b"\xef\xbb\xbf"))
    if runs is None or not is_benchmark_table(runs) or not has_request_arrays(runs):
        return None   # not a benchmark, or its summary only (read from the document below)
    try:
        requests = benchmark_requests(runs, name)
    except IngestError as exc:
        raise ValueError(str(exc)) from None
    levels = []
    for run, (duration, tool, target) in enumerate(zip(requests.durations_s, requests.tools, requests.targets), 1):
        figures, failed = _requests_figures(requests.frame[requests.frame["run"] == run], duration)
        label = f"{tool} bench" + (f" run {run}" if len(requests.durations_s) > 1 else "") + \
            (f", {target}" if target else "") + _left_out(failed)
        levels.append(MeasuredLevel(tool=tool, source=name, label=label, **figures))
    return levels


def parse_bench_summary(document: Mapping[str, Any], source: str = "bench") -> list[MeasuredLevel]:
    """The one level of a vLLM / SGLang benchmark saved without its per-request arrays (its own percentiles)."""
    tool = bench_tool(document.get("backend"))
    return [MeasuredLevel(
        tool=tool, source=source, label=f"{tool} bench summary",
        rate_rps=_num(document.get("request_throughput")),
        ttft_p50_ms=_num(document.get("median_ttft_ms")), ttft_p90_ms=_num(document.get("p90_ttft_ms")),
        tpot_p50_ms=_num(document.get("median_tpot_ms")), tpot_p90_ms=_num(document.get("p90_tpot_ms")),
        output_tokens_per_s=_num(document.get("output_throughput")),
        requests=int(document["completed"]) if _num(document.get("completed")) is not None else None)]


def _record_value(metrics: Mapping[str, Any], name: str) -> float:
    """One per-request metric of an aiperf record in ms (or its own unit for counts); NaN when absent."""
    metric = metrics.get(name)
    if not isinstance(metric, Mapping):
        return math.nan
    v = _num(metric.get("value"))
    if v is None:
        return math.nan
    unit = str(metric.get("unit", "ms")).strip().lower()
    return v * _UNIT_MS[unit] if unit in _UNIT_MS else v


def _aiperf_records(lines: Iterable[bytes], name: str) -> list[MeasuredLevel] | None:
    """The level of an aiperf ``profile_export.jsonl`` (one record per request); None when it is not one."""
    rows, failed, warmup = [], 0, 0
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except (UnicodeDecodeError, json.JSONDecodeError, RecursionError):
            if rows or failed or warmup:
                raise ValueError(f"{name}: line {number} is not JSON; an aiperf profile_export.jsonl has one JSON "
                                 "record per line") from None
            return None
        if not isinstance(record, Mapping) or not isinstance(record.get("metadata"), Mapping) \
                or "metrics" not in record:
            if rows or failed or warmup:
                raise ValueError(f"{name}: line {number} is not an aiperf record (no metadata and metrics)")
            return None
        meta, metrics = record["metadata"], record.get("metrics")
        if str(meta.get("benchmark_phase", "profiling")) != "profiling":
            warmup += 1     # aiperf's summary counts the profiling phase only
            continue
        if record.get("error") or meta.get("was_cancelled") or not isinstance(metrics, Mapping):
            failed += 1
            continue
        start, end = _num(meta.get("request_start_ns")), _num(meta.get("request_end_ns"))
        latency = _record_value(metrics, "request_latency")
        if start is None or (end is None and math.isnan(latency)):
            failed += 1
            continue
        e2e_ms = (end - start) / 1e6 if end is not None else latency
        rows.append((start / 1e9, _record_value(metrics, "time_to_first_token"),
                     _record_value(metrics, "inter_token_latency"),
                     _record_value(metrics, "output_sequence_length"), e2e_ms,
                     _record_value(metrics, "input_sequence_length")))
    if not rows:
        if failed or warmup:
            raise ValueError(f"{name}: an aiperf profile_export.jsonl without a successful request of the profiling "
                             f"phase ({failed:,} failed or cancelled, {warmup:,} warm-up)")
        return None
    frame = pd.DataFrame(rows, columns=["arrival_s", "ttft_ms", "itl_ms", "output_tokens", "e2e_ms", "input_tokens"])
    (level,) = parse_aiperf(aiperf_export(frame, tool_version=""), name)
    label = f"aiperf, {len(frame):,} per-request records" + (f" ({failed:,} failed left out)" if failed else "")
    return [replace(level, label=label, version=None)]


def parse_result(data: bytes, name: str) -> list[MeasuredLevel]:
    """The load levels of one result file (aiperf JSON or JSONL, guidellm JSON); ValueError with one line otherwise."""
    if len(data) > MAX_RESULT_BYTES:
        raise ValueError(f"{name}: {len(data) / 2**20:,.0f} MiB is larger than the {MAX_RESULT_BYTES // 2**20} MiB "
                         f"a result file can be; {_GIVE}")
    if _containers(data) > MAX_RESULT_CONTAINERS and not _json_lines(data):
        raise ValueError(f"{name}: holds more than {MAX_RESULT_CONTAINERS:,} JSON objects and arrays, far more than "
                         f"a load-test report has; {_GIVE}")
    benchmark = _benchmark_levels(data, name)
    if benchmark is not None:
        return _checked(benchmark, name)
    try:
        document = json.loads(data.decode("utf-8-sig"))
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:
        # aiperf's per-request export is JSON Lines: one record per line, not one document
        levels = _aiperf_records(_lines(data.removeprefix(b"\xef\xbb\xbf")), name) \
            if isinstance(exc, json.JSONDecodeError) and exc.msg == "Extra data" else None
        if levels is not None:
            return _checked(levels, name)
        reason = "too deeply nested" if isinstance(exc, RecursionError) else f"not JSON ({type(exc).__name__})"
        raise ValueError(f"{name}: {reason}; {_GIVE}") from None
    if not isinstance(document, Mapping):
        raise ValueError(f"{name}: expected a JSON object, got a {type(document).__name__}")
    if isinstance(document.get("metadata"), Mapping) and "metrics" in document:   # a one-record profile_export.jsonl
        return _checked(_aiperf_records([data], name) or [], name)
    if "benchmarks" in document:
        return _checked(parse_guidellm(document, name), name)
    if any(k in document for k in SUMMARY_KEYS):
        return _checked(parse_bench_summary(document, name), name)
    if "request_throughput" in document or "time_to_first_token" in document:
        return _checked(parse_aiperf(document, name), name)
    raise ValueError(f"{name}: neither an aiperf profile export nor a guidellm report (no 'benchmarks' or "
                     "'request_throughput' key)")


def _lines(data: bytes) -> Iterator[bytes]:
    """The lines of ``data`` one at a time (a list of 85M short lines would cost GBs before the first is read)."""
    start = 0
    while start < len(data):
        end = data.find(b"\n", start)
        end = len(data) if end < 0 else end
        yield data[start:end]
        start = end + 1


def _containers(data: bytes) -> int:
    """At most how many JSON objects and arrays ``data`` holds (brackets inside strings count too: an upper bound)."""
    return data.count(b"{") + data.count(b"[")


def _json_lines(data: bytes) -> bool:
    """True when the first non-empty line is a whole JSON object and more follows (JSON Lines, read line by line)."""
    text = data.removeprefix(b"\xef\xbb\xbf").strip()
    for line in text.split(b"\n", 64)[:64]:
        if line.strip():
            if len(line.strip()) == len(text):
                return False   # one line is the whole document
            try:
                return isinstance(json.loads(line), Mapping)
            except (UnicodeDecodeError, json.JSONDecodeError, RecursionError):
                return False
    return False


def _checked(levels: list[MeasuredLevel], name: str) -> list[MeasuredLevel]:
    """The levels, unless one has a negative latency or a rate ≤ 0: that file is refused in one line."""
    for lv in levels:
        for m in METRICS:
            v = getattr(lv, m)
            if v is not None and v < 0:
                raise ValueError(f"{name}: {lv.label[:60]} has {m} = {v:g}; latencies cannot be negative")
        if lv.rate_rps is not None and lv.rate_rps <= 0:
            raise ValueError(f"{name}: {lv.label[:60]} has a request rate of {lv.rate_rps:g}; it must be positive")
    return levels


def log_levels(frame: pd.DataFrame, bands: int = LOG_RATE_BANDS, source: str = "log") -> list[MeasuredLevel]:
    """The log's own latencies per band of per-minute request rate (one level without timestamps)."""
    has = [c for c in ("ttft_ms", "tpot_ms") if c in frame.columns and frame[c].notna().any()]
    if not has:
        return []

    def level(rows: pd.DataFrame, rate: float | None, label: str, span_s: float | None) -> MeasuredLevel:
        q = {}
        for col, key in (("ttft_ms", "ttft"), ("tpot_ms", "tpot")):
            v = rows[col].dropna().to_numpy(dtype=np.float64) if col in rows.columns else np.array([])
            ok = v.size >= MIN_LOG_REQUESTS
            q[f"{key}_p50_ms"] = float(np.percentile(v, 50)) if ok else None
            q[f"{key}_p90_ms"] = float(np.percentile(v, 90)) if ok else None
        out = float(rows["output_tokens"].sum()) / span_s if span_s else None
        return MeasuredLevel("log", source, label, rate, output_tokens_per_s=out, requests=int(len(rows)), **q)

    if "timestamp" not in frame.columns or frame["timestamp"].notna().sum() < 2:
        return [level(frame, None, "the log (no timestamps: rate unknown)", None)]
    ts = frame["timestamp"]
    valid = ts.notna().to_numpy()
    rows = frame.loc[valid]
    minute = ((rows["timestamp"] - rows["timestamp"].min()) // pd.Timedelta(minutes=1)).to_numpy(dtype=np.int64)
    rates = per_minute_rates(rows["timestamp"])
    if rates.size < 2:  # under two minutes: one level at the mean rate
        span = max((rows["timestamp"].max() - rows["timestamp"].min()) / pd.Timedelta(seconds=1), 1.0)
        return [level(rows, len(rows) / span, "the log", span)]
    complete = minute < rates.size   # the last, partial minute is left out (as in the plan's rate)
    rows, minute = rows.loc[complete], minute[complete]
    busy = np.flatnonzero(rates > 0)
    band_of_minute = np.full(rates.size, -1)
    distinct = np.unique(rates[busy])
    if distinct.size <= bands:   # few distinct rates: one band each
        band_of_minute[busy] = np.searchsorted(distinct, rates[busy])
    else:                        # equal numbers of minutes per band, by rank of their rate
        order = busy[np.argsort(rates[busy], kind="stable")]
        band_of_minute[order] = np.arange(order.size) * bands // order.size
    n_bands = int(band_of_minute.max()) + 1
    out = []
    for b in range(n_bands):
        mins = np.flatnonzero(band_of_minute == b)
        sel = rows.loc[np.isin(minute, mins)]
        if len(sel) == 0:
            continue
        out.append(level(sel, float(rates[mins].mean()), f"log, rate band {b + 1} of {n_bands} "
                                                         f"({mins.size} min)", float(mins.size * 60.0)))
    return out


# --- the comparison -----------------------------------------------------------------------------------------------
def compare(reference: PlanReference, levels: list[MeasuredLevel]) -> pd.DataFrame:
    """One row per measured level: measured and planned p50/p90 TTFT and TPOT, their ratios, throughput, SLO."""
    rows = []
    for lv in levels:
        planned = reference.at(lv.rate_rps)
        row: dict[str, Any] = {"tool": lv.tool, "source": lv.source, "level": lv.label, "requests": lv.requests,
                               "rate_rps": lv.rate_rps}
        for m in METRICS:
            meas, plan_v = getattr(lv, m), planned[m]
            row[f"measured_{m}"] = meas
            row[f"planned_{m}"] = plan_v
            row[f"ratio_{m}"] = meas / plan_v if meas is not None and plan_v else None
        row["measured_output_tokens_per_s"] = lv.output_tokens_per_s
        row["planned_output_tokens_per_s"] = reference.output_tokens_per_s(lv.rate_rps)
        row["meets_ttft_slo"] = None if lv.ttft_p90_ms is None else bool(lv.ttft_p90_ms <= reference.ttft_slo_ms)
        row["meets_tpot_slo"] = None if lv.tpot_p90_ms is None else bool(lv.tpot_p90_ms <= reference.tpot_slo_ms)
        rows.append(row)
    return pd.DataFrame(rows)


def summarize(table: pd.DataFrame) -> dict[str, Any]:
    """Median measured/planned ratio per metric over the levels that have both, and how far off that is."""
    out: dict[str, Any] = {}
    for m in METRICS:
        col = f"ratio_{m}"
        v = pd.to_numeric(table.get(col), errors="coerce").dropna() if col in table else pd.Series(dtype=float)
        if v.empty:
            out[m] = None
            continue
        ratio = float(v.median())
        out[m] = {"median_ratio": ratio, "levels": int(v.size), "min_ratio": float(v.min()), "max_ratio": float(v.max()),
                  "verdict": verdict(ratio)}
    return out


def verdict(ratio: float) -> str:
    """'on plan' within ±20%; otherwise which way the plan was off and by how much."""
    if abs(ratio - 1.0) <= ON_PLAN:
        return f"on plan ({ratio:.2f}x)"
    if ratio > 1.0:
        return f"plan optimistic: measured {ratio:.2f}x the plan ({(ratio - 1.0):.0%} slower)"
    return f"plan pessimistic: measured {ratio:.2f}x the plan ({(1.0 - ratio):.0%} faster)"


def check_document(reference: PlanReference, levels: list[MeasuredLevel], notes: Iterable[str] = ()) -> dict[str, Any]:
    """The ``check`` JSON: the plan, one row per level, the median ratios and what they say."""
    table = compare(reference, levels)
    summary = summarize(table)
    lines = []
    names = {"ttft_p50_ms": "TTFT p50", "ttft_p90_ms": "TTFT p90", "tpot_p50_ms": "TPOT p50", "tpot_p90_ms": "TPOT p90"}
    for m, s in summary.items():
        if s is not None:
            lines.append(f"{names[m]}: {s['verdict']} over {s['levels']} level(s)")
    fleet_ok = slo_verdict(table)
    calibration = {k: (summary[k]["median_ratio"] if summary.get(k) else None) for k in ("ttft_p90_ms", "tpot_p50_ms")}
    notes = list(notes)
    d = reference.disaggregated or {}
    if d.get("prefill_replicas") and isinstance(d.get("ttft_ms"), Mapping) and isinstance(d.get("tpot_ms"), Mapping):
        notes.append(
            f"planned figures are for the colocated fleet; a disaggregated fleet ({d['prefill_replicas']} prefill + "
            f"{d['decode_replicas']} decode replicas) was planned at {reference.rate_rps:,.3g} req/s for TTFT p90 "
            f"{_fmt(d['ttft_ms'].get('p90'))} ms and TPOT p90 {_fmt(d['tpot_ms'].get('p90'))} ms")
    return json_safe({
        "command": "check",
        "plan": {"deployment": reference.description, "rate_rps": reference.rate_rps, "replicas": reference.replicas,
                 "gpus": reference.gpus, "slo": {"ttft_p90_ms": reference.ttft_slo_ms, "tpot_p90_ms": reference.tpot_slo_ms},
                 "point_only": reference.point_only},
        "levels": table.to_dict(orient="records"),
        "summary": summary,
        "verdict": lines,
        "meets_slo_at_every_level": fleet_ok,
        "calibration_hint": {
            "ttft_ratio": calibration["ttft_p90_ms"], "tpot_ratio": calibration["tpot_p50_ms"],
            "meaning": "measured / planned: a TTFT ratio above 1 says prefill runs slower than the model assumes "
                       "(lower its MFU by that factor); a TPOT ratio above 1 says the decode step is slower "
                       "(lower its MBU); refit with benchmarks/bench_calibration.py",
        },
        "notes": list(notes),
    })


def slo_verdict(table: pd.DataFrame) -> bool | None:
    """False when some level missed a p90 SLO; True only when every level shows both p90s within them; else None.

    A level without a finite TTFT or TPOT p90 (missing, ``Infinity``) is one nobody can say met its SLOs, so the
    fleet's verdict is unknown unless another level shows a miss.
    """
    if table.empty:
        return None
    met = table[["meets_ttft_slo", "meets_tpot_slo"]].astype(object)
    if (met == False).any().any():   # noqa: E712 - the values are True, False or None
        return False
    if met.isna().any().any():
        return None
    return True


def fleet_verdict(document: Mapping[str, Any]) -> str | None:
    """The fleet's verdict over every measured level of a ``check`` document, in one sentence (met, missed, or
    unknown when a level has no finite p90); None without levels. ``check`` prints it and the pages show it."""
    ok = document.get("meets_slo_at_every_level")
    if ok is not None:
        return ("the fleet met both p90 SLOs at every measured level" if ok
                else "the fleet missed a p90 SLO at some measured level")
    if document["levels"]:
        return "unknown whether the fleet met its p90 SLOs: some measured level has no finite TTFT or TPOT p90"
    return None


def _fmt(v: Any) -> str:
    x = _num(v)
    return "n/a" if x is None else f"{x:,.0f}"


def check_text(document: Mapping[str, Any]) -> str:
    """A short human table of a ``check`` document."""
    p = document["plan"]
    lines = [f"plan: {p['deployment']} | {p['rate_rps']:,.3g} req/s planned on {p.get('replicas') or '?'} replica(s) | "
             f"SLO p90 TTFT {p['slo']['ttft_p90_ms']:,.0f} ms, TPOT {p['slo']['tpot_p90_ms']:,.0f} ms"]
    head = f"{'level':<34} {'req/s':>8}  {'TTFT p50 meas/plan':>20}  {'TTFT p90 meas/plan':>20}  {'TPOT p90 meas/plan':>20}"
    lines += [head, "-" * len(head)]

    def pair(row: Mapping[str, Any], m: str) -> str:
        a, b = row.get(f"measured_{m}"), row.get(f"planned_{m}")
        fa = "-" if a is None else f"{a:,.1f}"
        fb = "sat." if b is None and row.get("rate_rps") else "-" if b is None else f"{b:,.1f}"
        return f"{fa} / {fb}"

    for row in document["levels"]:
        rate = "-" if row.get("rate_rps") is None else f"{row['rate_rps']:,.3g}"
        lines.append(f"{str(row['level'])[:34]:<34} {rate:>8}  {pair(row, 'ttft_p50_ms'):>20}  "
                     f"{pair(row, 'ttft_p90_ms'):>20}  {pair(row, 'tpot_p90_ms'):>20}")
    lines += document.get("verdict") or ["no level has both a measured and a planned figure to compare"]
    overall = fleet_verdict(document)
    if overall is not None:
        lines.append(overall)
    lines += [f"note: {n}" for n in document.get("notes", [])]
    return "\n".join(lines)


# --- writing a run in aiperf's format (the simulator's round trip) ----------------------------------------------
def aiperf_export(requests: pd.DataFrame, *, schema_version: str = "1.4", tool_version: str = "shapeviz-simulated"
                  ) -> dict[str, Any]:
    """A per-request run (arrival_s, ttft_ms, itl_ms or tpot_ms, output_tokens, e2e_ms) as aiperf's summary JSON.

    Percentiles are numpy's linear ones, as aiperf computes them; throughput is over the span from the first
    arrival to the last completion.
    """
    itl_col = "itl_ms" if "itl_ms" in requests.columns else "tpot_ms"
    need = ["arrival_s", "ttft_ms", itl_col, "output_tokens", "e2e_ms"]
    missing = [c for c in need if c not in requests.columns]
    if missing or len(requests) == 0:
        raise ValueError(f"a run needs requests with columns {need}; missing {missing or 'rows'}")
    arrival = requests["arrival_s"].to_numpy(dtype=np.float64)
    end = arrival + requests["e2e_ms"].to_numpy(dtype=np.float64) / 1000.0
    span = max(float(end.max() - arrival.min()), 1e-9)

    def dist(values: np.ndarray, unit: str) -> dict[str, Any]:
        v = values[np.isfinite(values)]
        if v.size == 0:
            return {"unit": unit}
        pct = {f"p{p}": float(np.percentile(v, p)) for p in (1, 5, 10, 25, 50, 75, 90, 95, 99)}
        return {"unit": unit, "avg": float(v.mean()), **pct, "min": float(v.min()), "max": float(v.max()),
                "std": float(v.std()), "count": int(v.size), "sum": float(v.sum())}

    out_tokens = requests["output_tokens"].to_numpy(dtype=np.float64)
    doc: dict[str, Any] = {
        "schema_version": schema_version, "aiperf_version": tool_version,
        "request_throughput": {"unit": "requests/sec", "avg": len(requests) / span},
        "request_count": {"unit": "requests", "avg": float(len(requests))},
        "request_latency": dist(requests["e2e_ms"].to_numpy(dtype=np.float64), "ms"),
        "time_to_first_token": dist(requests["ttft_ms"].to_numpy(dtype=np.float64), "ms"),
        "inter_token_latency": dist(requests[itl_col].to_numpy(dtype=np.float64), "ms"),
        "output_token_throughput": {"unit": "tokens/sec", "avg": float(out_tokens.sum()) / span},
        "output_sequence_length": dist(out_tokens, "tokens"),
    }
    if "input_tokens" in requests.columns:
        doc["input_sequence_length"] = dist(requests["input_tokens"].to_numpy(dtype=np.float64), "tokens")
    return json_safe(doc)


def read_results(paths: Iterable[str | Path]) -> list[MeasuredLevel]:
    """Levels of every result file given on the command line (a directory: its aiperf summary, else its records)."""
    levels: list[MeasuredLevel] = []
    for raw in paths:
        path = Path(raw)
        if path.is_dir():   # aiperf's artifact folder: its summary, else its per-request records
            inner = next((path / f for f in ("profile_export_aiperf.json", "profile_export.jsonl")
                          if (path / f).is_file()), None)
            if inner is None:
                raise ValueError(f"{path}: a directory without profile_export_aiperf.json or profile_export.jsonl; "
                                 "give the result file")
            path = inner
        levels.extend(parse_result(read_capped(path, "result file", MAX_RESULT_BYTES), path.name))
    return levels


# --- the chart ----------------------------------------------------------------------------------------------------
_TOOL_MARKERS = {"aiperf": "diamond", "guidellm": "square", "log": "circle", "simulator": "x"}


def measured_figure(curve: pd.DataFrame, document: Mapping[str, Any], planned_rps: float, ttft_slo_ms: float,
                    tpot_slo_ms: float) -> Any:
    """The planned latency-vs-load chart with each measured level drawn at its rate (× the planned rate)."""

    fig = load_curve_figure(curve, ttft_slo_ms, tpot_slo_ms)
    rows = [r for r in document.get("levels", []) if r.get("rate_rps")]
    for tool, symbol in _TOOL_MARKERS.items():
        mine = [r for r in rows if r.get("tool") == tool]
        if not mine:
            continue
        x = [r["rate_rps"] / planned_rps for r in mine]
        labels = [_escape(f"{r['level']} ({r['source']})") for r in mine]
        for col, metric in ((1, "ttft"), (2, "tpot")):
            for q, filled in (("p50", False), ("p90", True)):
                y = [r.get(f"measured_{metric}_{q}_ms") for r in mine]
                fig.add_scatter(
                    x=x, y=y, mode="markers", name=f"measured {q} ({tool})", legendgroup=f"m-{tool}-{q}",
                    showlegend=col == 1, text=labels,
                    marker=dict(symbol=symbol if filled else f"{symbol}-open", size=10, color="#D55E00"),
                    hovertemplate=f"%{{text}}<br>×%{{x:.2f}} of the planned rate: measured {metric.upper()} {q} "
                                  "%{y:,.1f} ms<extra></extra>",
                    xaxis="x" if col == 1 else f"x{col}", yaxis="y" if col == 1 else f"y{col}")  # its panels
    return refit_header(fig, panel_titles=True)  # the measured markers' names lengthen the legend
