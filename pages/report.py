"""Report: the files a capacity meeting takes away (PNG charts, CSV tables, one HTML memo, replay traces)."""
from __future__ import annotations

import json
from dataclasses import astuple

import streamlit as st

from components.classes import classes_key, page_classes
from components.context import PageContext, page_context, workload
from components.fleet import FLEET_DESIGN_KEY
from components.measured import plan_vs_measured
from components.widgets import badge
from shapeviz.outputs.report import Bundle, browser_path, report_files
from shapeviz.text import md_literal

BUILT_KEY = "_report_bundle_key"
MIME: dict[str, str] = {".html": "text/html", ".csv": "text/csv", ".jsonl": "application/jsonl",
                        ".png": "image/png", ".json": "application/json", ".txt": "text/plain"}

ctx = page_context()
s = ctx.settings


@st.cache_resource(max_entries=4, ttl=3600, scope="session", show_spinner=False)
def _bundle(digest: str, settings: tuple, png: bool, _ctx: PageContext, judged: tuple, design_key: str = "",
            _design: dict | None = None) -> tuple[Bundle, bytes]:
    """The bundle and its zip, once per dataset and settings (the key is the digest, the sidebar values and the
    products' classes ``judged``)."""
    bundle = report_files(
        _ctx.report_log, corners=_ctx.settings.corners, deployment=_ctx.deployment, whatif=_ctx.whatif,
        ttft_slo_ms=_ctx.settings.ttft_slo_ms, tpot_slo_ms=_ctx.settings.tpot_slo_ms,
        gpu_hour_usd=_ctx.settings.gpu_hour_usd, png=png, analysis=_ctx.analysis,
        workload=workload(_ctx.dataset.digest, _ctx.dataset.log), fleet_design=_design,
        method="simulated",   # the fleet the Capacity headline gives (a log without timestamps: the estimate)
        classes=_classes(),   # the Capacity page's classes: its own, else the sidebar's pair
    )
    return bundle, bundle.zip()


def _classes() -> dict:
    return page_classes(ctx.dataset.digest, ctx.dataset.log, s.ttft_slo_ms, s.tpot_slo_ms)


def _chosen_design() -> tuple[str, dict | None]:
    """The fleet design made on the Capacity page for this log (its cache key and document), if any."""
    chosen = st.session_state.get(FLEET_DESIGN_KEY)
    if not chosen or chosen.get("digest") != ctx.dataset.digest:
        return "", None
    design = chosen["design"]
    return str(hash(json.dumps(design.get("designs", []), sort_keys=True, default=str))), design


def _mime(name: str) -> str:
    return next((m for ext, m in MIME.items() if name.endswith(ext)), "application/octet-stream")


def _download(column, name: str, data: bytes, label: str, primary: bool = False) -> None:  # noqa: ANN001
    column.download_button(label, data, file_name=name, mime=_mime(name), icon=":material/download:",
                           key=f"report-{name}", on_click="ignore", type="primary" if primary else "secondary",
                           width="stretch")


st.title("Report")
st.caption(f"{md_literal(ctx.dataset.label)} · {md_literal(ctx.deployment.describe())} · SLOs at p90: TTFT {s.ttft_slo_ms:,.0f} ms, "
           f"TPOT {s.tpot_slo_ms:,.0f} ms · the what-if of the sidebar")
st.markdown(
    "One click builds everything the meeting notes need, from the sidebar's settings:\n"
    "- **report.html**: a one-page capacity memo (decision first, then the plane, clusters, pressure before → "
    "after, GPUs and cost, recommendations, assumptions). Self-contained: it opens without network.\n"
    "- **PNG charts**: the plane, clusters, pressure before/after, latency against load, request rate over time "
    "(when the log has timestamps).\n"
    "- **CSV tables**: load report, shapes per product, clusters, capacity plan before/after, latency against "
    "load, recommendations. Cells a spreadsheet would run as formulas are neutralised.\n"
    "- **Replay traces** of the what-if workload: Mooncake/guidellm-style JSONL (`timestamp` ms, `input_length`, "
    "`output_length`, `hash_ids` when kept) and a Vidur-style CSV (`arrived_at`, `num_prefill_tokens`, "
    "`num_decode_tokens`).\n"
    "- **Serving configs** of the plan: launch scripts for vLLM, SGLang and TensorRT-LLM and Kubernetes manifests "
    "(colocated and disaggregated), every value saying where it came from; **plan.json** and the aiperf/guidellm "
    "commands (in the README) that load-test the fleet at the planned rate and at the knee.\n"
    "- **summary.json** and a **README.txt** that says how each file was made."
)

try:
    browser_path()
    has_browser, browser_note = True, ""
except ValueError as exc:
    has_browser, browser_note = False, str(exc)
if not has_browser:
    st.info(f"{md_literal(browser_note)}. The bundle is built without PNG charts; the HTML memo holds the same charts.",
            icon=":material/image_not_supported:")
png = st.toggle("Include PNG charts", value=has_browser, disabled=not has_browser,
                help="Rendered by a headless Chromium: a few seconds more.")

judged = classes_key(_classes())
key = (ctx.dataset.digest, astuple(s), bool(png), judged)
if st.button("Build report bundle", type="primary", icon=":material/inventory_2:"):
    with st.spinner("Building the report bundle…"):
        _bundle(ctx.dataset.digest, astuple(s), bool(png), ctx, judged, *_chosen_design())
    st.session_state[BUILT_KEY] = key

built = st.session_state.get(BUILT_KEY)
if built is None:
    st.caption("Nothing built yet.")
elif built != key:
    st.info("The data or the sidebar changed since the last build: build the bundle again.", icon=":material/sync:")
else:
    bundle, zipped = _bundle(ctx.dataset.digest, astuple(s), bool(png), ctx, judged, *_chosen_design())
    for note in bundle.notes:
        st.caption(md_literal(note))
    after = json.loads(bundle.files["summary.json"])["plan_after"]
    st.markdown(f"**The memo's fleet**: {after['replicas']} × {md_literal(ctx.deployment.describe())} = "
                f"{after['gpus']['colocated']} GPUs ({md_literal(after['provenance'].get('gpus', 'estimated'))}), "
                "the Capacity headline's answer for these settings.")
    _download(st, "shapeviz-report.zip", zipped, f"Download the bundle (zip, {len(zipped) / 1e6:,.1f} MB)",
              primary=True)
    files = bundle.files
    st.subheader("Single files")
    cols = st.columns(3)
    _download(cols[0], "report.html", files["report.html"], "HTML memo")
    _download(cols[1], "replay_mooncake.jsonl", files["replay_mooncake.jsonl"], "Replay trace (JSONL)")
    _download(cols[2], "replay_vidur.csv", files["replay_vidur.csv"], "Replay trace (Vidur CSV)")
    tables = [n for n in files if n.endswith(".csv") and not n.startswith("replay")]
    cols = st.columns(3)
    for i, name in enumerate(tables):
        _download(cols[i % 3], name, files[name], name)
    images = [n for n in files if n.endswith(".png")]
    if images:
        cols = st.columns(3)
        for i, name in enumerate(images):
            _download(cols[i % 3], name, files[name], name)
    badge("estimated")
    st.caption("Every number in the memo says whether it is measured from the log, estimated by the capacity model "
               "or assumed; the assumptions are listed at its end.")

plan_vs_measured(ctx, "report")
