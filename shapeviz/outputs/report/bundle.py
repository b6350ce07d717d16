"""The bundle: what leaves a capacity meeting: safe CSVs, PNG charts, one self-contained HTML memo, replay traces, the bundle.

``report_files`` runs the analyses once and returns every file of the bundle as ``{filename: bytes}``;
``write_report`` writes them into a folder, ``build_bundle`` zips them in memory for the dashboard, and
``write_report_from_args`` is ``python -m shapeviz report``. The same input gives the same bytes: fixed zip
timestamps and order, fixed plotly div ids, seeded samples and arrivals, no run dates in the content.

Safety, because these files are opened by people who did not write the log:
- every CSV cell a spreadsheet would run as a formula (``=``, ``+``, ``-``, ``@``, tab, carriage return) gets a
  leading single quote, headers included; numbers (and text that is a plain number) stay numbers;
- every string that came from the user's data is HTML-escaped in the memo, and the plotly JSON embedded in
  ``<script>`` has ``<``, ``>`` and ``&`` written as ``\\u003c``-style escapes, so nothing can close the script;
- the memo opens without network: plotly.js inline exactly once, no CDN, no web fonts;
- written into a folder, each file replaces whatever link is at its name instead of writing through it.
"""
from __future__ import annotations

import io
import json
import os
import stat
import tempfile
import zipfile
from dataclasses import asdict, dataclass
from pathlib import Path, PurePosixPath
from typing import Any, Mapping, Sequence

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from shapeviz.analyses.shapes import DEFAULT_CORNERS, Corners, resolve_deployment
from shapeviz.analyses.traffic import rate_over_time
from shapeviz.analysis import analyze
from shapeviz.fleet.pools import fleet_from_dict
from shapeviz.fleet.autoscale import POLICIES, POLICY_LABELS, autoscale, sized_by_simulation, traffic_windows
from shapeviz.fleet.growth import ALL, Growth, project
from shapeviz.ingest import LoadedLog
from shapeviz.outputs.deploy.autoscaler import autoscaling_tables, keda_scaled_object
from shapeviz.outputs.deploy.bundle import deploy_files
from shapeviz.outputs.deploy.fleet import fleet_configs
from shapeviz.outputs.figures import (
    clusters_figure,
    fleet_over_time_figure,
    load_curve_figure,
    plane_figure,
    pressure_figure,
    product_colors,
    rate_figure,
)
from shapeviz.outputs.report.csv import safe_csv_bytes
from shapeviz.outputs.report.html import _Memo, inert_figure, memo_html, whatif_words
from shapeviz.outputs.report.png import figures_to_png
from shapeviz.outputs.report.replay import replay_jsonl, replay_trace, replay_vidur_csv
from shapeviz.outputs.report.tables import (
    clusters_table,
    load_report_table,
    plan_table,
    products_table,
    recommendations_table,
)
from shapeviz.outputs.summary import summary_document
from shapeviz.physics import DEFAULT_TPOT_SLO_MS, Deployment, balance_ratio
from shapeviz.serving import DEFAULT_TTFT_SLO_MS, WhatIf, Workload, load_curve
from shapeviz.fleet.sizing import DEFAULT_SLO_WINDOW_S, fleet_answer
from shapeviz.serving.compare import WhatIfComparison, compare_whatif
from shapeviz.serving.products import SloClass

# --- the bundle ---------------------------------------------------------------------------------------------------
LOAD_MULTIPLIERS = (0.25, 0.5, 0.75, 1.0, 1.25, 1.5, 1.75, 2.0, 2.5, 3.0, 4.0)
ZIP_DATE = (1980, 1, 1, 0, 0, 0)  # the earliest a zip can say: a bundle carries no build date

MEMO_GROWTH = 0.08   # assumed: the example monthly growth, for the memo's next-quarter table


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
        f"What-if: {whatif_words(m.whatif)}",
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
    fleet_design: Mapping[str, Any] | None = None,
    method: str = "analytic",
    slo_window_s: float = DEFAULT_SLO_WINDOW_S,
    classes: Mapping[str, SloClass] | None = None,
) -> Bundle:
    """Every file of the report bundle as ``{filename: bytes}`` (PNGs, CSVs, HTML memo, replay traces, README).

    ``analysis`` and ``workload`` may be passed in when the caller has them cached (the dashboard); otherwise
    they are computed here. Without a browser the PNGs are left out and the README says why; everything else
    is still built. ``method="simulated"`` sizes the fleet before and after the what-if by replaying the log
    (``shapeviz.fleet.sizing.fleet_answer``, what ``plan`` and ``config`` print); "analytic" keeps the estimate.
    ``classes``: every product's SLO class (None: the TTFT/TPOT pair for every product, as ``plan`` without --slo).
    """
    if not isinstance(whatif, WhatIf):
        raise ValueError(f"whatif must be a shapeviz.serving.WhatIf, got {type(whatif).__name__}")
    dep = resolve_deployment(deployment)
    ttft = DEFAULT_TTFT_SLO_MS if ttft_slo_ms is None else float(ttft_slo_ms)
    tpot = DEFAULT_TPOT_SLO_MS if tpot_slo_ms is None else float(tpot_slo_ms)
    if analysis is None:
        analysis = analyze(log, corners=corners, deployment=dep)
    w = workload if workload is not None else Workload.from_frame(log.frame, rate_rps=rate_rps)
    sized: dict[str, Any] = {}
    today = None   # the fleet after the what-if as the one engine sizes it: growth's month 0
    if method != "analytic":
        rows = log.frame if "timestamp" in log.frame.columns else None   # a sketch's sample has no timestamps
        kwargs = dict(ttft_slo_ms=ttft, tpot_slo_ms=tpot, gpu_hour_usd=gpu_hour_usd, method=method,
                      slo_window_s=slo_window_s, classes=classes)
        answer = fleet_answer(w, dep, rows, whatif=whatif, **kwargs)
        sized["after"], today = answer[0], answer[1]
        sized["before"] = (sized["after"] if whatif.is_identity
                           else fleet_answer(w, dep, rows, whatif=WhatIf(), **kwargs)[0])
    cmp = compare_whatif(w, dep, whatif, ttft, tpot, gpu_hour_usd, **sized)
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
    fleet = _fleet_over_time(log, dep, whatif, ttft, tpot, gpu_hour_usd, notes, method, today, slo_window_s, classes)
    if fleet is not None:
        figures["fleet_over_time"], captions["fleet_over_time"] = fleet[0], fleet[1]
        tables.update(fleet[2])
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
    if fleet is not None:
        files["keda_scaledobject.yaml"] = fleet[3].encode("utf-8")
    deploy = _deploy_files(log, w, dep, cmp.after, whatif, ttft, tpot, notes, getattr(analysis, "prefix", None))
    if deploy is not None:
        files.update(deploy.files)
    if fleet_design is not None:
        files.update(_fleet_files(log, fleet_design, whatif, notes))
    readme = _readme(["README.txt", *files], memo, notes, deploy).encode("utf-8")
    return Bundle({"README.txt": readme, **files}, tuple(notes))


def _fleet_over_time(log: LoadedLog, dep: Deployment, whatif: WhatIf, ttft: float, tpot: float,
                     gpu_hour_usd: float | None, notes: list[str],
                     method: str = "analytic", today: Any = None,
                     slo_window_s: float = DEFAULT_SLO_WINDOW_S,
                     classes: Mapping[str, SloClass] | None = None) -> tuple[Any, str, dict, str] | None:
    """The fleet over time for the memo and bundle: the chart, its caption, the tables and a KEDA ScaledObject
    (``today``: the headline's ``Sizing``, growth's month 0 when the months are sized by the one engine, with the
    same ``classes``)."""
    frame = log.frame
    if "timestamp" not in frame.columns or frame["timestamp"].notna().sum() < 2:
        return None
    try:
        tw = traffic_windows(frame, dep, whatif=whatif, ttft_slo_ms=ttft, tpot_slo_ms=tpot, gpu_hour_usd=gpu_hour_usd)
        if method == "simulated":   # the windows plan --autoscale prints: sized by the one engine
            tw = sized_by_simulation(frame, tw, whatif=whatif)
        results = {p: autoscale(tw, p) for p in POLICIES}
    except ValueError as exc:
        notes.append(f"No autoscaling plan in this bundle: {exc}.")
        return None
    slo = results["slo"]
    caption = (f"{tw.n_windows} windows of {tw.window_s / 60:.0f} min, each sized at its own rate and shape"
               + (f" (scaled by simulation: {tw.sized_by['replicas']} replicas replayed meet the busiest hour)"
                  if tw.sized_by.get("scale") else "") + "; a new "
               f"replica serves {slo.startup.delay_s:.0f} s after it is asked for. Predicted SLO attainment: "
               f"{slo.gpu_hours:,.1f} GPU-hours against {slo.baseline_gpu_hours:,.1f} held at peak "
               f"({slo.saving:.0%} saved), {int(slo.windows['missed'].sum())} of {tw.n_windows} windows missed "
               "(estimated). keda_scaledobject.yaml carries it to KEDA.")
    figure = fleet_over_time_figure({p: r.windows for p, r in results.items()}, POLICY_LABELS, dep.tp)
    tables = autoscaling_tables(tw, slo)
    try:  # next quarter at the example rate, labelled assumed: the command line and page take the user's
        growth = project(frame, dep, Growth({ALL: MEMO_GROWTH}, {}, 3), whatif=whatif, ttft_slo_ms=ttft,
                         tpot_slo_ms=tpot, gpu_hour_usd=gpu_hour_usd, method=method, today=today,
                         slo_window_s=slo_window_s, classes=classes)
        tables["growth_months"] = growth.months
        caption += (f" Next quarter at an assumed +{MEMO_GROWTH:.0%}/month for every product"
                    + (" (each month replayed on the one sizing engine, month 0 the fleet above): "
                       if growth.method == "simulated" else " (analytic estimate): ")
                    + (f"today's {growth.replicas_now} replica(s) run out of headroom in month {growth.runs_out_month}."
                       if growth.runs_out_month is not None else
                       f"today's {growth.replicas_now} replica(s) hold for three months."))
    except ValueError as exc:
        notes.append(f"No growth projection in this bundle: {exc}.")
    return figure, caption, tables, keda_scaled_object(slo, tw, model=dep.model.id)


def _deploy_files(log: LoadedLog, w: Workload, dep: Deployment, after: Any, whatif: WhatIf, ttft: float,
                  tpot: float, notes: list[str], prefix_reuse: Any = None) -> Any:
    """Engine configs, manifests, plan.json and load-test commands (shapeviz.outputs.deploy); a note if they cannot be built."""
    try:
        deploy = deploy_files(log.frame, w, dep, after, whatif=whatif, ttft_slo_ms=ttft, tpot_slo_ms=tpot,
                              prefix_reuse=prefix_reuse)
    except ValueError as exc:
        notes.append(f"No serving configs or load-test commands in this bundle: {exc}.")
        return None
    return deploy


def _fleet_files(log: LoadedLog, design: Mapping[str, Any], whatif: WhatIf, notes: list[str]) -> dict[str, bytes]:
    """The chosen fleet design (every design searched, the best one's fleet) and one config per pool of it."""
    def dump(doc: Any) -> bytes:
        return (json.dumps(doc, indent=2, allow_nan=False, ensure_ascii=False) + "\n").encode("utf-8")

    files = {"fleet_design.json": dump(design)}
    if not design.get("designs"):
        notes.append("The fleet design found no design; fleet_design.json says why.")
        return files
    best = design["designs"][0]
    files["fleet.json"] = dump(best["fleet"])
    try:
        configs = fleet_configs(log.frame, fleet_from_dict(best["fleet"]), whatif=whatif, k8s=True)
    except ValueError as exc:
        notes.append(f"No configs for the fleet design: {exc}.")
        return files
    files["fleet_configs.json"] = dump(configs)
    return files


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
    return write_bundle(report_files(log, corners=corners, deployment=deployment, whatif=whatif, ttft_slo_ms=ttft_slo_ms,
                               tpot_slo_ms=tpot_slo_ms, gpu_hour_usd=gpu_hour_usd, png=png, **kwargs), out_dir)


def write_bundle(bundle: Bundle, out_dir: str | Path) -> list[Path]:
    """Write a bundle's files into ``out_dir`` (created if needed); their paths in bundle order."""
    folder = Path(out_dir)
    if folder.exists() and not folder.is_dir():
        raise ValueError(f"--out {str(folder)!r} is a file; give a folder for the report (it is created if missing)")
    folder.mkdir(parents=True, exist_ok=True)
    return [_write_new(folder, name, data) for name, data in bundle.files.items()]


def _write_new(folder: Path, name: str, data: bytes) -> Path:
    """Write ``data`` at ``folder/name`` without following a link planted there.

    The bytes go to a fresh temporary file in the same folder (created exclusively, never an existing one) that is
    then renamed onto the name: a symlink (or hard link) already at the name is replaced, its target untouched. A
    subfolder of the bundle must be a real folder, not a link out of ``folder``.
    """
    parts = PurePosixPath(name).parts
    if not parts or PurePosixPath(name).is_absolute() or any(p in (".", "..") for p in parts):
        raise ValueError(f"a report file may not be named {name!r}")
    parent = folder
    for part in parts[:-1]:
        parent = parent / part
        try:
            os.mkdir(parent, 0o755)
        except FileExistsError:
            if not stat.S_ISDIR(os.lstat(parent).st_mode):   # lstat: a symlink is not a folder here
                raise ValueError(f"{str(parent)!r} is a link or a file, not a folder; remove it or give another "
                                 "--out folder") from None
    target = parent / parts[-1]
    fd, tmp = tempfile.mkstemp(dir=parent, prefix=f".{parts[-1]}.", suffix=".tmp")
    try:
        os.fchmod(fd, 0o644)   # a report is for reading: the same mode the zip gives its entries
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return target


