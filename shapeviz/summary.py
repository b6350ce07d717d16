"""One analysis of a log, and the ``summary --json`` document built from it.

``analyze`` runs every analysis the dashboard and the command line show (shape profile, clusters, sessions,
prefix reuse, recommendations) once; ``summary_document`` turns the result into the stable JSON of
``python -m shapeviz summary --json``. Keys only ever get added.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

import numpy as np
import pandas as pd

from shapeviz.ingest import LoadedLog, LoadReport, combine, load_log
from shapeviz.plain import json_safe
from shapeviz.progress import Progress, analysis_stage, silent
from shapeviz.shapes import (DEFAULT_CORNERS, OVERALL, SHAPES, Corners, ShapeProfile, ShapeStats, request_gpu_time,
                             resolve_deployment, shape_profile)

if TYPE_CHECKING:   # imported where used: a sketch-only summary never loads scikit-learn's k-means machinery twice
    from shapeviz.clusters import ClusterResult
    from shapeviz.prefix import PrefixReuse
    from shapeviz.recommend import Recommendation
    from shapeviz.sessions import AgentVerdict
    from shapeviz.sketch import SketchedLog

SCHEMA_VERSION = 1


@dataclass(frozen=True)
class Traffic:
    """When the requests came: span and rates measured from the timestamps (None without timestamps)."""

    requests: int
    start: str | None
    end: str | None
    span_s: float | None
    mean_rps: float | None
    peak_rps: float | None        # busiest minute
    p99_minute_rps: float | None  # 99th percentile of per-minute rates: the planning rate

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-ready dict."""
        return dict(self.__dict__)


def traffic(frame: pd.DataFrame) -> Traffic:
    """Span and request rates of a canonical frame, from ``timestamp`` when it has one."""
    n = len(frame)
    if "timestamp" not in frame.columns or frame["timestamp"].notna().sum() < 2:
        return Traffic(n, None, None, None, None, None, None)
    from shapeviz.capacity.serving import per_minute_rates

    ts = frame["timestamp"].dropna()
    start, end = ts.min(), ts.max()
    span = (end - start).total_seconds()
    if span <= 0:
        return Traffic(n, start.isoformat(), end.isoformat(), 0.0, None, None, None)
    per_minute = per_minute_rates(ts)
    return Traffic(
        requests=n, start=start.isoformat(), end=end.isoformat(), span_s=float(span),
        mean_rps=float(len(ts) / span), peak_rps=float(per_minute.max()),
        p99_minute_rps=float(np.quantile(per_minute, 0.99)),
    )


@dataclass
class Analysis:
    """Everything the pages and the reports read about one log, computed once."""

    report: LoadReport
    traffic: Traffic
    profile: ShapeProfile
    clusters: ClusterResult
    prefix: PrefixReuse
    sessions: dict[str, Any] | None
    agents: dict[str, AgentVerdict]
    recommendations: list[Recommendation]


def analyze(
    log: LoadedLog,
    *,
    corners: Corners = DEFAULT_CORNERS,
    deployment: object | None = None,
    k: int | None = None,
    material_share: float = 0.15,
    kv_bytes_per_token: float | None = None,
    progress: Progress = silent,
) -> Analysis:
    """Run every analysis of a loaded log once (shape, clusters, sessions, prefix reuse, recommendations)."""
    from shapeviz.clusters import find_clusters
    from shapeviz.prefix import prefix_reuse
    from shapeviz.sessions import detect_agents, session_summary

    frame = log.frame
    if len(frame) == 0:
        raise _no_usable_rows(log.report)
    n = len(frame)
    analysis_stage(progress, "shapes", n)
    gpu_time = request_gpu_time(frame, deployment)
    profile = shape_profile(frame, corners, deployment, gpu_time=gpu_time)
    analysis_stage(progress, "clusters", n)
    clusters = find_clusters(frame, k, corners=corners, deployment=deployment, material_share=material_share,
                             gpu_time=gpu_time)
    if kv_bytes_per_token is None:
        kv_bytes_per_token = resolve_deployment(deployment).kv_bytes_per_token
    analysis_stage(progress, "sessions", n)
    sessions = session_summary(frame)
    agents = detect_agents(frame)
    analysis_stage(progress, "prefix reuse", n)
    prefix = prefix_reuse(frame, kv_bytes_per_token=kv_bytes_per_token)
    analysis_stage(progress, "recommendations", n)
    recs = _recommendations(profile, clusters, prefix, agents)
    return Analysis(log.report, traffic(frame), profile, clusters, prefix, sessions, agents, recs)


def _no_usable_rows(r: LoadReport) -> ValueError:
    """One line for a log none of whose rows is a usable request: the drop reasons and the token mapping."""
    reasons = ", ".join(f"{k} {v:,}" for k, v in r.dropped.items()) or "no rows"
    mapped = ", ".join(f"{k}={v}" for k, v in r.mapping.items() if k in ("input_tokens", "output_tokens"))
    return ValueError(f"{r.source}: none of its {r.rows_read:,} rows is a usable request ({reasons}); "
                      f"check the token columns ({mapped}) or map others (--map input_tokens=<column>)")


def _recommendations(profile: ShapeProfile, clusters: ClusterResult, prefix: PrefixReuse,
                     agents: dict[str, AgentVerdict]) -> list[Recommendation]:
    from shapeviz.recommend import recommend

    hit = None
    if prefix.hit_ratio_tokens is not None:
        hit = {p: d["hit_ratio_tokens"] for p, d in prefix.per_product.items() if d.get("hit_ratio_tokens") is not None}
        hit[OVERALL] = prefix.hit_ratio_tokens
    return recommend(profile, clusters, prefix_hit_ratio=hit,
                     agent_products=[p for p, a in agents.items() if a.is_agent])


def analyze_sketch(
    sketched: SketchedLog,
    *,
    corners: Corners = DEFAULT_CORNERS,
    deployment: object | None = None,
    k: int | None = None,
    material_share: float = 0.15,
    kv_bytes_per_token: float | None = None,
    progress: Progress = silent,
) -> Analysis:
    """Every analysis from a workload sketch (a log too big to keep whole): the same ``Analysis``, from bins.

    Shape profile and GPU-time come from the bins, clusters from the bounded sample, block-hash prefix reuse from
    the sampled block ids (else reported cached tokens in the sample), sessions and agents from the hash-sampled
    sessions (a note says which).
    """
    from shapeviz.prefix import prefix_reuse
    from shapeviz.sketch import clusters_from_sketch, shape_profile_from_sketch, traffic_from_sketch

    sketch = sketched.sketch
    if sketch.requests == 0:
        raise _no_usable_rows(sketch.report)
    n = int(sketch.requests)
    analysis_stage(progress, "shapes", n)
    profile = shape_profile_from_sketch(sketch, corners, deployment)
    analysis_stage(progress, "clusters", n)
    clusters = clusters_from_sketch(sketch, k, corners=corners, deployment=deployment, material_share=material_share)
    if kv_bytes_per_token is None:
        kv_bytes_per_token = resolve_deployment(deployment).kv_bytes_per_token
    analysis_stage(progress, "prefix reuse", n)
    prefix = _prefix_from_blocks(sketch) or prefix_reuse(sketch.sample_frame(), kv_bytes_per_token=kv_bytes_per_token)
    sessions, agents = None, {}
    left_out: str | None = None   # the log has no session ids: nothing is left out
    if sketch.sessions is not None:
        from shapeviz.sessions import detect_agents, session_summary

        sampled = sketch.sessions.canonical()
        sessions = session_summary(sampled)
        agents = detect_agents(sampled)
        if sessions is not None and sketch.sessions.rate < 1.0:
            sessions["count"] = int(round(sessions["count"] / sketch.sessions.rate))
            left_out = (f"sessions estimated from every turn of a hash sample of "
                        f"{sampled['session_id'].nunique():,} sessions ({sketch.sessions.rate:.1%} of them)")
        else:
            left_out = "sessions from every turn of every session (workload sketch)"
    analysis_stage(progress, "recommendations", n)
    recs = _recommendations(profile, clusters, prefix, agents)
    report = sketch.report
    report = LoadReport(report.source, report.format, report.compression, report.rows_read, report.rows_kept,
                        dict(report.dropped), dict(report.mapping),
                        [*report.notes, *sketched.notes, *([left_out] if left_out else [])])
    return Analysis(report, traffic_from_sketch(sketch), profile, clusters, prefix, sessions, agents, recs)


def _stats_dict(stats: ShapeStats, mixed: set[str], name_key: bool) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "requests": stats.requests,
        "input": stats.input,
        "output": stats.output,
        "shape_share": stats.request_share,
        "token_share": stats.token_share,
        "gpu_share": stats.gpu_share,
        "dominant_shape": stats.dominant_shape,
        "phase": stats.phase,
        "prefill_gpu_share": stats.prefill_gpu_share,
        "mixed": stats.scope in mixed,
    }
    return ({"name": stats.scope} | doc) if name_key else doc


def summary_document(analysis: Analysis) -> dict[str, Any]:
    """The ``summary --json`` document: stable keys, plain JSON values."""
    report = analysis.report
    mixed_products = {f.scope for f in analysis.clusters.mixed_products}
    pool_mixed = any(f.scope == "overall" for f in analysis.clusters.mixed_pools)
    overall = _stats_dict(analysis.profile.overall, set(), name_key=False)
    overall["mixed"] = pool_mixed
    document: dict[str, Any] = {
        "schema_version": SCHEMA_VERSION,
        "source": report.source,
        "rows": {"read": report.rows_read, "kept": report.rows_kept, "dropped": dict(report.dropped)},
        "mapping": dict(report.mapping),
        "notes": list(report.notes),
        "corners": analysis.profile.to_dict()["corners"],
        "deployment": analysis.profile.deployment,
        "traffic": analysis.traffic.to_dict(),
        "overall": overall,
        "products": [_stats_dict(s, mixed_products, name_key=True) for s in analysis.profile.products.values()],
        "clusters": [
            {"id": c.id, "share": c.share, "gpu_share": c.gpu_share, "input_center": c.input_center,
             "output_center": c.output_center, "input_p50": c.input_p50, "output_p50": c.output_p50,
             "shape": c.shape, "phase": c.phase, "products": c.products}
            for c in analysis.clusters.clusters
        ],
        "clustering": {"k": analysis.clusters.k, "k_source": analysis.clusters.k_source,
                       "silhouette": analysis.clusters.silhouette},
        "mixed": [f.to_dict() for f in (*analysis.clusters.mixed_products, *analysis.clusters.mixed_pools)],
        "recommendations": [
            {"lever": r.lever, "metric": r.metric, "scope": r.scope, "reason": r.reason}
            for r in analysis.recommendations
        ],
    }
    if analysis.prefix.method != "none":
        document["prefix_cache"] = analysis.prefix.to_dict()
    if analysis.sessions is not None:
        document["sessions"] = dict(analysis.sessions)
    agent_list = [p for p, a in analysis.agents.items() if a.is_agent]
    if agent_list:
        document["agent_products"] = agent_list
    return json_safe(document)


def _prefix_from_blocks(sketch: Any) -> PrefixReuse | None:
    """Block-hash reuse from the sketch's bottom-k sample of block ids (None when the log has no hashes)."""
    from shapeviz.prefix import DEFAULT_BLOCK_SIZE, PrefixReuse

    blocks = sketch.blocks
    if blocks is None or blocks.hit_ratio_blocks is None:
        return None
    exact = blocks.rate >= 1.0
    return PrefixReuse(
        method="block_hashes", provenance="simulated" if exact else "estimated",
        definition=(f"Share of prompt blocks ({DEFAULT_BLOCK_SIZE} tokens each) whose prefix hash appeared in an "
                    "earlier request, through an ideal cache that starts empty and never evicts; token-weighted "
                    "≈ reused blocks × block size / input tokens."),
        hit_ratio_blocks=float(blocks.hit_ratio_blocks), hit_ratio_tokens=blocks.hit_ratio_tokens(DEFAULT_BLOCK_SIZE),
        requests=blocks.with_hashes, block_size=DEFAULT_BLOCK_SIZE,
        notes=[("every block id counted (workload sketch)" if exact else
                f"estimated from a SHARDS sample of {len(blocks.ids):,} block ids ({blocks.rate:.2%} of ids) in the "
                "workload sketch"), "no capacity curve from a sketch: it needs the order of every access"],
    )


def load_logs(paths: Sequence[str | Path], mapping: dict[str, str] | None = None) -> LoadedLog:
    """One or several log files as one loaded log (several files keep their products apart)."""
    logs = [load_log(p, mapping=mapping or None) for p in paths]
    return logs[0] if len(logs) == 1 else combine(logs)


def analyze_paths(paths: Sequence[str | Path], mapping: dict[str, str] | None = None, *, engine: str = "embedded",
                  scheduler: str | None = None, workers: int | None = None, progress: Progress = silent,
                  **kwargs: Any) -> Analysis:
    """Load and analyse logs: every row while they fit (``sketch.FULL_FRAME_MAX_ROWS``), else from the sketch.

    ``engine="dask"`` builds the sketch per partition on a Dask cluster (``scheduler`` address, else a local
    cluster of ``workers`` processes) and merges on this process.
    """
    from shapeviz.sketch import SketchedLog, merge_all, sketch_log

    if engine == "dask":
        from shapeviz.distributed import sketch_paths

        sketch = sketch_paths(paths, mapping=mapping, scheduler=scheduler, workers=workers)
        where = f"the Dask cluster at {scheduler}" if scheduler else "a local Dask cluster"
        return analyze_sketch(SketchedLog(sketch, None, [f"{sketch.requests:,} requests: analysed from the workload "
                                                         f"sketch, built per partition on {where}"]),
                              progress=progress, **kwargs)
    if engine != "embedded":
        raise ValueError(f"unknown engine {engine!r}: use 'embedded' or 'dask'")
    sketched = [sketch_log(p, mapping=mapping or None, progress=progress) for p in paths]
    if all(s.frame is not None for s in sketched):
        logs = [LoadedLog(s.frame, s.report) for s in sketched]
        return analyze(logs[0] if len(logs) == 1 else combine(logs), progress=progress, **kwargs)
    merged = merge_all(s.sketch for s in sketched)
    return analyze_sketch(SketchedLog(merged, None, [n for s in sketched for n in s.notes]), progress=progress,
                          **kwargs)


def summarize(paths: Sequence[str | Path], mapping: dict[str, str] | None = None, **kwargs: Any) -> dict[str, Any]:
    """``summary`` of the command line: load (streamed), analyse, document."""
    return summary_document(analyze_paths(paths, mapping, **kwargs))


def _q(d: dict[str, float]) -> str:
    return f"p50 {d['p50']:,.0f} / p90 {d['p90']:,.0f} / p99 {d['p99']:,.0f}"


def summary_text(document: dict[str, Any]) -> str:
    """A short human summary of a ``summary_document``."""
    rows = document["rows"]
    lines = [f"{document['source']}: {rows['read']:,} rows read, {rows['kept']:,} kept"
             + (f", dropped {', '.join(f'{k} {v:,}' for k, v in rows['dropped'].items())}" if rows["dropped"] else "")]
    t = document["traffic"]
    if t.get("span_s"):
        lines.append(f"span {t['span_s'] / 3600:.1f} h, mean {t['mean_rps']:.2f} req/s, "
                     f"peak minute {t['peak_rps']:.2f} req/s")
    o = document["overall"]
    lines.append(f"overall: {o['dominant_shape']} shape, {o['phase']}-dominated GPU-time "
                 f"({o['prefill_gpu_share']:.0%} prefill) on {document['deployment']}")
    lines.append(f"  input  {_q(o['input'])} tokens")
    lines.append(f"  output {_q(o['output'])} tokens")
    lines.append("  corners: " + ", ".join(f"{s} {o['shape_share'][s]:.0%}" for s in SHAPES if o["shape_share"][s] > 0))
    if len(document["products"]) > 1:
        lines.append("products:")
        for p in document["products"]:
            flag = "  [mixed]" if p["mixed"] else ""
            lines.append(f"  {p['name']}: {p['requests']:,} req, {p['dominant_shape']}, {p['phase']}, "
                         f"p50 {p['input']['p50']:,.0f} in / {p['output']['p50']:,.0f} out{flag}")
    for flag in document["mixed"]:
        lines.append(f"mixed: {flag['reason']}")
    if "prefix_cache" in document:
        pc = document["prefix_cache"]
        lines.append(f"prefix cache ({pc['method']}): {pc['hit_ratio_tokens']:.1%} of input tokens reusable")
    if document["recommendations"]:
        lines.append("recommendations:")
        for r in document["recommendations"]:
            lines.append(f"  [{r['lever']} → {r['metric']}, {r['scope']}] {r['reason']}")
    return "\n".join(lines)
