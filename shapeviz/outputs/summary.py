"""The ``summary --json`` document (stable keys; keys only ever get added) and its short text form."""
from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

from shapeviz.analyses.shapes import SHAPES, ShapeStats
from shapeviz.analysis import Analysis, analyze_paths
from shapeviz.fleet.sizing import PLANNED_AS_IF, default_deployment_for
from shapeviz.plain import json_safe
from shapeviz.text import plain_phase_phrase

SCHEMA_VERSION = 1


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


def summarize(paths: Sequence[str | Path], mapping: dict[str, str] | None = None, **kwargs: Any) -> dict[str, Any]:
    """``summary`` of the command line: load (streamed), analyse, document; GPU-time on the deployment ``plan``
    uses by default (the log's model at its checkpoint's precision, the smallest TP that holds it)."""
    sources: dict[str, Any] = {}

    def deployment_of(frame: Any) -> Any:
        dep, sources["model_source"], sources["precision_source"] = default_deployment_for(frame)
        sources["deployment_detail"] = {"model": dep.model.id, "gpu": dep.gpu.id, "precision": dep.precision,
                                        "tp": dep.tp}
        return dep

    document = summary_document(analyze_paths(paths, mapping, deployment_of=deployment_of, **kwargs))
    document.update(sources)
    return document


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
    lines.append(f"overall: {o['dominant_shape']} shape, GPU-time {plain_phase_phrase(o['phase'])} "
                 f"({o['prefill_gpu_share']:.0%} prefill) on {document['deployment']}")
    source = str(document.get("model_source") or "")
    if source.startswith(PLANNED_AS_IF) or "→" in source:
        lines.append(f"model: {source}")   # a hosted model's stand-in, or how the log's name became a catalogue one
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
    # what the load did to the log (products counted together, times not used, names cut) is said here too
    lines.extend(f"note: {n}" for n in document["notes"])
    return "\n".join(lines)

