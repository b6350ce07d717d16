"""One analysis of a log: every analysis the dashboard and the command line show, run once.

``analyze`` runs the shape profile, clusters, sessions, prefix reuse and the planner's rules on a loaded log;
``analyze_paths`` loads (streamed) and analyses, from every row while the log fits, else from the workload sketch.
``shapeviz.outputs.summary`` turns the result into the stable ``summary --json`` document.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from shapeviz.analyses.clusters import (
    ClusterResult,
    clusters_from_sketch,
    find_clusters,
)
from shapeviz.analyses.prefix import PrefixReuse, infer_block_size_from_totals, prefix_reuse
from shapeviz.analyses.sessions import AgentVerdict, detect_agents, session_summary
from shapeviz.analyses.shapes import (
    DEFAULT_CORNERS,
    OVERALL,
    Corners,
    ShapeProfile,
    request_gpu_time,
    resolve_deployment,
    shape_profile,
    shape_profile_from_sketch,
)
from shapeviz.analyses.traffic import Traffic, traffic, traffic_from_sketch
from shapeviz.ingest import LoadedLog, LoadReport, combine, load_log
from shapeviz.progress import Progress, analysis_stage, silent
from shapeviz.recommend import Recommendation, recommend
from shapeviz.workload.distributed import sketch_paths
from shapeviz.workload.sketch import SketchedLog, WorkloadSketch, merge_all, sketch_log


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


def _prefix_from_blocks(sketch: WorkloadSketch) -> PrefixReuse | None:
    """Block-hash reuse from the sketch's bottom-k sample of block ids (None when the log has no hashes)."""
    blocks = sketch.blocks
    if blocks is None or blocks.hit_ratio_blocks is None:
        return None
    exact = blocks.rate >= 1.0
    # the sketch keeps totals only: the block size the log's Σ input tokens and Σ hashes allow
    size = infer_block_size_from_totals(blocks.input_tokens, blocks.accesses, blocks.with_hashes)
    return PrefixReuse(
        method="block_hashes", provenance="simulated" if exact else "estimated",
        definition=(f"Share of prompt blocks ({size} tokens each) whose prefix hash appeared in an "
                    "earlier request, through an ideal cache that starts empty and never evicts; token-weighted "
                    "≈ reused blocks × block size / input tokens."),
        hit_ratio_blocks=float(blocks.hit_ratio_blocks), hit_ratio_tokens=blocks.hit_ratio_tokens(size),
        requests=blocks.with_hashes, block_size=size,
        block_size_source="inferred from Σ input tokens / Σ hashes (workload sketch)",
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
    if engine == "dask":

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


