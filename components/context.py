"""What every page starts from: the dataset, its analysis and the deployment, cached by content.

A page calls ``page_context()``; on a bad upload it shows the one-line error and stops the page, so pages only
ever see data that loaded.
"""
from __future__ import annotations

from dataclasses import astuple, dataclass

import numpy as np
import pandas as pd
import plotly.graph_objects as go
import streamlit as st

from components import data, disk_cache, sidebar
from components.classes import classes_key, page_classes
from components.entry import through_entry
from components.progress import progress_bar
from shapeviz.analyses.shapes import Corners
from shapeviz.analyses.traffic import rate_over_time
from shapeviz.analysis import Analysis, analyze
from shapeviz.fleet.sizing import FITS_WORDS, auto_tp
from shapeviz.fleet.speculative import speculative_deployment
from shapeviz.ingest import LoadedLog
from shapeviz.outputs.figures import plane_figure, product_colors, rate_figure
from shapeviz.outputs.report import inert_figure
from shapeviz.physics import Deployment, balance_ratio, get_gpu, get_model
from shapeviz.physics.steps import smallest_tp
from shapeviz.serving import WhatIf, Workload, slo_range
from shapeviz.text import md_literal
from shapeviz.workload.sketch import SketchedLog, full_frame_max_rows, report_log
from shapeviz.workload.view import WorkloadView


@dataclass(frozen=True)
class PageContext:
    """The dataset, its analysis under the sidebar's corners and deployment, and the sidebar values."""

    dataset: data.Dataset
    analysis: Analysis
    deployment: Deployment
    settings: sidebar.Settings
    tp_source: str = "set in the sidebar"   # where the GPUs per replica came from ("auto": fleet.sizing.auto_tp)

    @property
    def frame(self):  # noqa: ANN201 - a pandas DataFrame
        """The canonical frame of the dataset."""
        return self.dataset.log.frame

    @property
    def session_frame(self):  # noqa: ANN201 - a pandas DataFrame
        """Rows for session analyses: every turn of the sketch's sampled sessions when the log is sketch-only."""
        sketch = self.dataset.sketch
        if sketch is not None and sketch.sessions is not None:
            return sketch.sessions.canonical()
        return self.dataset.log.frame

    @property
    def report_log(self) -> LoadedLog:
        """The log the report bundle draws: the dataset's, or for a sketch-only log its sample without timestamps."""
        sketch = self.dataset.sketch
        return report_log(sketch) if sketch is not None else self.dataset.log

    @property
    def whatif(self) -> WhatIf:
        """The what-if levers of the sidebar (the log's own prefix-cache share, untouched, means "as logged")."""
        s = self.settings
        as_logged = st.session_state.get(LOGGED_CACHE_PCT)
        cache_hit = None if as_logged is not None and round(100 * s.cache_hit) == as_logged else s.cache_hit
        return WhatIf(trim_input=s.trim_input, trim_output=s.trim_output, cache_hit=cache_hit,
                      traffic_multiplier=s.traffic)


CLUSTER_K = "cluster_k"
MATERIAL_SHARE_PCT = "material_share_pct"


def _analyze(digest: str, corners: tuple[int, int, int], deployment: Deployment, k: int | None,
             material_share: float, log: LoadedLog) -> Analysis:
    sketch = data.sketch_of(digest)
    # heavy work: at most data.PARSE_SLOTS analyses and parses at once, server-wide
    with progress_bar("Analysing the log") as progress, data.work_slot(progress, "other visitors' logs are analysed"):
        # a log too big to keep whole: every analysis from its sketch
        source = SketchedLog(sketch) if sketch is not None else log
        return analyze(source, corners=Corners(*corners), deployment=deployment, k=k, material_share=material_share,
                       progress=progress)


# The settings' dataclasses hashed by their repr (every field, nested ones included): Streamlit's own hashing walks
# a Deployment field by field (model, GPU, engine) at ~7 ms a call, and a what-if step on Capacity made about half
# a dozen such calls. Same content, same key; a fraction of a millisecond.
SETTINGS_HASH = {Deployment: repr, WhatIf: repr}


@st.cache_resource(max_entries=16, ttl=6 * 3600, scope="session", show_spinner=False, hash_funcs=SETTINGS_HASH)
def _analysis(digest: str, corners: tuple[int, int, int], deployment: Deployment, k: int | None,
              material_share: float, _log: LoadedLog) -> Analysis:
    return _analyze(digest, corners, deployment, k, material_share, _log)


# The demo and scenarios are the same for everyone: their analysis is shared between sessions, so a second
# visitor's first page does not redo it (an upload's stays private to its session, above).
# They are also kept on disk (components/disk_cache.py), so a fresh server's first page reads them.
@st.cache_resource(max_entries=16, ttl=24 * 3600, show_spinner=False, hash_funcs=SETTINGS_HASH)
def _shared_analysis(digest: str, corners: tuple[int, int, int], deployment: Deployment, k: int | None,
                     material_share: float, _log: LoadedLog) -> Analysis:
    return disk_cache.cached("analysis", (digest, corners, deployment, k, material_share),
                             lambda: _analyze(digest, corners, deployment, k, material_share, _log))


@st.cache_resource(max_entries=16, ttl=6 * 3600, scope="session", show_spinner=False)
def workload(digest: str, _log: LoadedLog) -> Workload:
    """The log binned into weighted points, once per dataset: a slider move never touches rows."""
    sketch = data.sketch_of(digest)
    with data.work_slot():
        return Workload.from_view(sketch if sketch is not None else _log.frame)


@st.cache_resource(max_entries=16, ttl=6 * 3600, scope="session", show_spinner=False)
def rate_chart(digest: str, freq: str, _log: LoadedLog) -> go.Figure:
    """Request rate over time per product (inert), once per dataset: it reads every row, never on a slider move."""
    sketch = data.sketch_of(digest)
    with data.work_slot():
        if sketch is not None:
            minutes = max(1, round(pd.Timedelta(freq) / pd.Timedelta(minutes=1)))
            rates = rate_over_time(WorkloadView.from_sketch(sketch), f"{minutes}min")   # a sketch keeps whole minutes
        else:
            rates = rate_over_time(_log.frame, freq)
        return inert_figure(rate_figure(rates, product_colors(rates["product"].unique())))


BALANCE_INPUT_TOKENS = np.logspace(0, 6.5, 60)  # where the plane's prefill = decode line is evaluated


Plane = tuple[go.Figure, pd.DataFrame, dict[str, str]]


def plane(dataset: data.Dataset, corners: tuple[int, int, int], deployment: Deployment, cache_hit: float,
          tpot_slo_ms: float) -> Plane:
    """The plane with the deployment's balance line (inert, ready to draw), each product's p50, product colours.

    Keyed on what changes it, so a trim or traffic step reuses it as it is: the browser receives the same
    figure and keeps the one it drew, instead of redrawing thousands of points. The demo's and scenarios' are
    shared between sessions and kept on disk, as their analysis is.
    """
    build = _shared_plane if dataset.synthetic else _session_plane
    return build(dataset.digest, corners, deployment, cache_hit, tpot_slo_ms, dataset.log)


@st.cache_resource(max_entries=16, ttl=6 * 3600, scope="session", show_spinner="Drawing the plane…", hash_funcs=SETTINGS_HASH)
def _session_plane(digest: str, corners: tuple[int, int, int], deployment: Deployment, cache_hit: float,
                   tpot_slo_ms: float, _log: LoadedLog) -> Plane:
    return _plane(corners, deployment, cache_hit, tpot_slo_ms, _log)


@st.cache_resource(max_entries=16, ttl=24 * 3600, show_spinner="Drawing the plane…", hash_funcs=SETTINGS_HASH)
def _shared_plane(digest: str, corners: tuple[int, int, int], deployment: Deployment, cache_hit: float,
                  tpot_slo_ms: float, _log: LoadedLog) -> Plane:
    return disk_cache.cached("plane", (digest, corners, deployment, cache_hit, tpot_slo_ms),
                             lambda: _plane(corners, deployment, cache_hit, tpot_slo_ms, _log))


def _plane(corners: tuple[int, int, int], deployment: Deployment, cache_hit: float, tpot_slo_ms: float,
           _log: LoadedLog) -> Plane:
    with data.work_slot():
        return _draw_plane(corners, deployment, cache_hit, tpot_slo_ms, _log)


def _draw_plane(corners: tuple[int, int, int], deployment: Deployment, cache_hit: float, tpot_slo_ms: float,
                _log: LoadedLog) -> Plane:
    frame = _log.frame
    colors = product_colors(frame["product"].astype(str).unique())
    x = BALANCE_INPUT_TOKENS
    ratio = balance_ratio(deployment, x, cache_hit * x, tpot_slo_ms=tpot_slo_ms)
    fig = plane_figure(frame, corners=Corners(*corners), colors=colors, balance=(x, ratio * x),
                       balance_label=f"prefill = decode GPU-time ({deployment.describe()})")
    p50 = frame.groupby("product", observed=True)[["input_tokens", "output_tokens"]].median()
    return inert_figure(fig), p50, colors


@st.cache_resource(max_entries=16, ttl=6 * 3600, show_spinner="Choosing the GPUs per replica…", hash_funcs=SETTINGS_HASH)
def _auto_tp(digest: str, fits: Deployment, layout: str, judged: tuple, _log: LoadedLog,
             _classes: dict) -> tuple[Deployment, str]:
    """"auto" GPUs per replica for this log and these classes: ``plan``'s choice (``fleet.sizing.auto_tp``)."""
    def build(tp: int) -> Deployment:
        return deployment_for(fits.model.id, fits.gpu.id, fits.precision, fits.kv_precision, tp, layout, fits.engine)

    dep, words, _ = auto_tp(_log.frame, fits, build, _classes)
    return dep, words


@st.cache_resource(max_entries=64)
def deployment_for(model: str, gpu: str, precision: str, kv_precision: str | None, tp: int | None,
                   layout: str = "tp", engine: str | None = None) -> Deployment:
    """The deployment the sidebar describes; TP 'auto' is the smallest that fits with room for KV.

    ``layout``: "tp", "tp+ep" (experts over all the replica's GPUs) or "dep" (attention-DP with that EP).
    """
    adp = layout == "dep" and get_model(model).is_moe
    expert_parallel = layout in ("tp+ep", "dep") and get_model(model).is_moe
    if tp is None:
        tp = smallest_tp(model, gpu, precision, kv_precision, ep=None if expert_parallel else 1, attention_dp=adp)
    return Deployment(get_model(model), get_gpu(gpu), precision, kv_precision, tp=tp,
                      ep=tp if expert_parallel else 1, attention_dp=adp, engine=engine)


def _stop() -> None:
    """Stop the page, the sidebar's step sliders drawn first (its main what-if fragment, which draws them, will not
    run)."""
    sidebar.steps_unless_drawn()
    st.stop()


def page_context() -> PageContext:
    """Load (cached), analyse (cached) and return; on a user error show it and stop the page."""
    through_entry()
    s = sidebar.settings()
    try:
        dataset = data.current_dataset()
    except ValueError as exc:   # IngestError, or a server path outside the allowed roots: one line, no traceback
        st.error(md_literal(exc), icon=":material/error:")
        st.info("Fix the file, map the columns by hand under **Column mapping** in the load report, or pick the "
                "demo in the sidebar.")
        _mapping_editor_for_failed_upload()
        _stop()
    if dataset is None:
        st.info("Upload a request log in the sidebar, or pick the demo or a scenario.")
        _stop()
    sidebar.follow_log_model(dataset.digest, dataset.log.frame)   # the log's model column, as `plan` reads it
    try:
        dep = deployment_for(s.model, s.gpu, s.precision, s.kv_precision, s.tp, s.layout, s.engine)
        tp_source = "set in the sidebar" + (f"; {dep.node_note}" if dep.node_note else "")
        if s.tp is None and dataset.sketch is None:   # the smallest TP whose requests reach every product's class
            classes = page_classes(dataset.digest, dataset.log, s.ttft_slo_ms, s.tpot_slo_ms)
            dep, tp_source = _auto_tp(dataset.digest, dep, s.layout, classes_key(classes), dataset.log, classes)
        elif s.tp is None:
            tp_source = FITS_WORDS
        if s.speculative != "none":
            dep = speculative_deployment(dep, workload(dataset.digest, dataset.log), s.speculative, s.draft_tokens,
                                         s.acceptance_length, s.corners)
    except ValueError as exc:
        st.error(f"Deployment: {md_literal(exc)}", icon=":material/memory:")
        _stop()
    # Cluster settings live on the Clusters page but shape every page's analysis, so they are kept in plain
    # session keys (a widget's own key is dropped when its page is not shown).
    k = st.session_state.get(CLUSTER_K)
    material = st.session_state.get(MATERIAL_SHARE_PCT, 15) / 100
    try:
        analyse = _shared_analysis if dataset.synthetic else _analysis
        analysis = analyse(dataset.digest, astuple(s.corners), dep, k, material, dataset.log)
    except ValueError as exc:  # e.g. every row of an upload was dropped: say why, keep the mapping editor
        st.error(md_literal(exc), icon=":material/error:")
        _mapping_editor_for_failed_upload()
        _stop()
    _sync_cache_default(dataset.digest, analysis, workload(dataset.digest, dataset.log))
    _show_slo_hint(analysis.profile.overall.dominant_shape)
    if dataset.sketch is not None:
        st.info(f"{dataset.sketch.requests:,} requests: more than {full_frame_max_rows():,}, so this page works from "
                f"the log's workload sketch (binned counts and token sums; quantiles within one 15 % bin). Points, "
                f"clusters and the report's rows come from a uniform sample of {len(dataset.log.frame):,} "
                "requests; sessions are left out.", icon=":material/insights:")
    return PageContext(dataset, analysis, dep, s, tp_source)


def _show_slo_hint(shape: str) -> None:
    slot = st.session_state.get(sidebar.SLO_HINT_SLOT)
    if slot is None:
        return
    lo_ttft, hi_ttft, lo_tpot, hi_tpot = slo_range(shape)
    slot.caption(sidebar.slo_hint(shape, (lo_ttft, hi_ttft), (lo_tpot, hi_tpot),
                                  float(sidebar.value("ttft_slo_ms")), float(sidebar.value("tpot_slo_ms"))))


LOGGED_CACHE_PCT = "_logged_cache_pct"


def _sync_cache_default(digest: str, analysis: Analysis, w: Workload) -> None:
    """The log's own prefix-hit ratio becomes the what-if default, once per dataset.

    When the log reports cached tokens, the default is the share it reports, so the default what-if is the log
    as it is; with block hashes it is the reuse they show. A reuse estimated from sessions is not applied: it is
    offered beside the slider, one click away (a lever nobody set never moves the plan).
    """
    prefix = analysis.prefix
    if st.session_state.get("_cache_default_for") != digest:
        st.session_state["_cache_default_for"] = digest
        logged = w.mean(w.cached_tokens) / max(w.mean(w.input_tokens), 1e-12)
        estimated = logged <= 0 and prefix.method == "session_estimate"
        measured = logged if logged > 0 else None if estimated else prefix.hit_ratio_tokens
        value = int(round(100 * measured)) if measured is not None else 0
        st.session_state[LOGGED_CACHE_PCT] = int(round(100 * logged))   # "as logged": 0 when it reports none
        if value != st.session_state.get("cache_hit_pct"):
            st.session_state[sidebar.PENDING_CACHE_HIT] = value
            st.rerun()  # the sidebar slider was drawn with the old value
    if prefix.method == "session_estimate" and prefix.hit_ratio_tokens is not None:
        sidebar.offer_cache_estimate(int(round(100 * prefix.hit_ratio_tokens)), "the log's sessions")


def _mapping_editor_for_failed_upload() -> None:
    from components.mapping import mapping_editor

    mapping_editor(None)
