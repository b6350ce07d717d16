"""One analysis of a log: every analysis the dashboard and the command line show, run once.

``analyze`` runs the shape profile, clusters, sessions, prefix reuse and the planner's rules on a loaded log;
``analyze_paths`` loads (streamed) and analyses, from every row while the log fits, else from the workload sketch.
``shapeviz.outputs.summary`` turns the result into the stable ``summary --json`` document.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Sequence

from shapeviz.analyses.clusters import ClusterResult, find_clusters
from shapeviz.analyses.prefix import PrefixReuse, prefix_reuse_of
from shapeviz.analyses.sessions import AgentVerdict, detect_agents, session_summary
from shapeviz.analyses.shapes import (
    DEFAULT_CORNERS,
    OVERALL,
    Corners,
    ShapeProfile,
    request_gpu_time,
    resolve_deployment,
    shape_profile,
)
from shapeviz.analyses.traffic import Traffic, traffic
from shapeviz.ingest import LoadedLog, LoadReport, combine
from shapeviz.plain import from_plain, to_plain
from shapeviz.progress import Progress, analysis_stage, silent
from shapeviz.recommend import Recommendation, recommend
from shapeviz.workload.distributed import sketch_paths
from shapeviz.workload.sketch import SketchedLog, merge_all, sketch_log
from shapeviz.workload.view import WorkloadView, as_view

if TYPE_CHECKING:
    import pandas as pd


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

    def to_plain(self, frames: list[Any]) -> dict[str, Any]:
        """This analysis as JSON values (DataFrames appended to ``frames``), for a store that never runs code."""
        return to_plain(Analysis, self, frames)

    @classmethod
    def from_plain(cls, data: Any, frames: Sequence[Any]) -> Analysis:
        """The analysis ``to_plain`` described, built from its declared types only; ValueError when it does not fit."""
        return from_plain(cls, data, frames)


def analyze(
    data: LoadedLog | SketchedLog | WorkloadView,
    *,
    corners: Corners = DEFAULT_CORNERS,
    deployment: object | None = None,
    k: int | None = None,
    material_share: float = 0.15,
    kv_bytes_per_token: float | None = None,
    progress: Progress = silent,
) -> Analysis:
    """Run every analysis of a log once (shape, clusters, sessions, prefix reuse, recommendations).

    ``data``: a loaded log (every row), a sketched log (every row while it was kept, else its workload sketch)
    or a ``WorkloadView``. From a sketch the profile and GPU-time come from its cells, clusters from its uniform
    sample, block-hash prefix reuse from its sampled block ids (else reported cached tokens in the sample),
    sessions and agents from its hash-sampled sessions; the report's notes say which.
    """
    view = as_view(data)
    if view.n_requests == 0:
        raise _no_usable_rows(view.report)
    n = view.n_requests
    analysis_stage(progress, "shapes", n)
    gpu_time = request_gpu_time(view, deployment)
    profile = shape_profile(view, corners, deployment, gpu_time=gpu_time)
    analysis_stage(progress, "clusters", n)
    clusters = find_clusters(view, k, corners=corners, deployment=deployment, material_share=material_share,
                             gpu_time=None if view.sampled else gpu_time)
    if kv_bytes_per_token is None:
        kv_bytes_per_token = resolve_deployment(deployment).kv_bytes_per_token
    analysis_stage(progress, "sessions", n)
    sessions, agents, said = _sessions(view)
    analysis_stage(progress, "prefix reuse", n)
    prefix = prefix_reuse_of(view, kv_bytes_per_token=kv_bytes_per_token)
    analysis_stage(progress, "recommendations", n)
    recs = _recommendations(profile, clusters, prefix, agents)
    report = view.report
    notes = [*view.notes, *said]
    if notes:
        report = LoadReport(report.source, report.format, report.compression, report.rows_read, report.rows_kept,
                            dict(report.dropped), dict(report.mapping), [*report.notes, *notes])
    return Analysis(report, traffic(view), profile, clusters, prefix, sessions, agents, recs)


def _sessions(view: WorkloadView) -> tuple[dict[str, Any] | None, dict[str, AgentVerdict], list[str]]:
    """Session summary and agent verdicts of the view's session rows, and what a note must say about them."""
    rows, rate = view.session_rows()
    if rows is None:
        return None, {}, []
    sessions = session_summary(rows)
    agents = detect_agents(rows)
    if view.exact:
        return sessions, agents, []
    if sessions is not None and rate < 1.0:
        sessions["count"] = int(round(sessions["count"] / rate))
        return sessions, agents, [f"sessions estimated from every turn of a hash sample of "
                                  f"{rows['session_id'].nunique():,} sessions ({rate:.1%} of them)"]
    return sessions, agents, ["sessions from every turn of every session (workload sketch)"]


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
    return recommend(profile, clusters, prefix_hit_ratio=hit, prefix_method=prefix.method,
                     agent_products=[p for p, a in agents.items() if a.is_agent])


def analyze_paths(paths: Sequence[str | Path], mapping: dict[str, str] | None = None, *, engine: str = "embedded",
                  scheduler: str | None = None, workers: int | None = None, progress: Progress = silent,
                  deployment_of: Callable[[pd.DataFrame | None], object] | None = None, **kwargs: Any) -> Analysis:
    """Load and analyse logs: every row while they fit (``sketch.FULL_FRAME_MAX_ROWS``), else from the sketch.

    ``engine="dask"`` builds the sketch per partition on a Dask cluster (``scheduler`` address, else a local
    cluster of ``workers`` processes) and merges on this process. ``deployment_of``: the deployment from the
    loaded rows (None: a sketch), when ``deployment`` is not given (``summary``: the log's model, as ``plan``).
    """
    def costed(frame: pd.DataFrame | None) -> dict[str, Any]:
        if deployment_of is None or kwargs.get("deployment") is not None:
            return kwargs
        return {**kwargs, "deployment": deployment_of(frame)}

    if engine == "dask":

        sketch = sketch_paths(paths, mapping=mapping, scheduler=scheduler, workers=workers)
        where = f"the Dask cluster at {scheduler}" if scheduler else "a local Dask cluster"
        return analyze(SketchedLog(sketch, None, [f"{sketch.requests:,} requests: analysed from the workload "
                                                  f"sketch, built per partition on {where}"]),
                       progress=progress, **costed(None))
    if engine != "embedded":
        raise ValueError(f"unknown engine {engine!r}: use 'embedded' or 'dask'")
    sketched = [sketch_log(p, mapping=mapping or None, progress=progress) for p in paths]
    if all(s.frame is not None for s in sketched):
        logs = [LoadedLog(s.frame, s.report) for s in sketched]
        log = logs[0] if len(logs) == 1 else combine(logs)
        return analyze(log, progress=progress, **costed(log.frame))
    merged = merge_all(s.sketch for s in sketched)
    return analyze(SketchedLog(merged, None, [n for s in sketched for n in s.notes]), progress=progress,
                   **costed(None))


