"""The shared sidebar: data source, corner boundaries and the what-if controls.

It is drawn by ``app.py`` before the page runs, so every value survives page switches; the trim and traffic
sliders are drawn into their places by the page's main what-if fragment, so that a step reruns that fragment alone
(``_draw_steps``; after the page on a page without one). Pages never read widgets directly: they call
``settings()`` and pass plain values into ``shapeviz``.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import streamlit as st
from streamlit.runtime.scriptrunner import get_script_run_ctx
from streamlit.runtime.scriptrunner_utils.script_run_context import ThreadState

from components import data, uploads
from components.work_pool import DRAWS
from shapeviz.analyses.shapes import Corners
from shapeviz.fleet.sizing import checkpoint_precision_source, model_of_log
from shapeviz.ingest import DEFAULT_LIMITS
from shapeviz.ingest.limits import human_bytes
from shapeviz.physics import get_gpu, get_model, list_gpus, list_models
from shapeviz.physics.engines import DEFAULT_ENGINE, ENGINE_NAMES, ENGINES
from shapeviz.physics.speculative import default_draft_tokens
from shapeviz.serving.compare import precisions_for
from shapeviz.text import md_literal

DEFAULTS: dict[str, object] = {
    "trim_input_pct": 0,
    "trim_output_pct": 0,
    "cache_hit_pct": 0,
    "traffic": 1.0,
    "model": "llama-3.1-70b",
    "gpu": "h100-sxm",
    "precision": "bf16",    # the default model's checkpoint, what a team serves; FP8/FP4 are levers (issue 27)
    "kv_precision": "same",
    "tp": "auto",
    "layout": "tp",
    "serving_engine": DEFAULT_ENGINE,   # what `config` writes; its efficiency comes from data/engine_efficiency.csv
    "ttft_slo_ms": 1000,
    "tpot_slo_ms": 50,
    "gpu_hour_usd": None,
    "long_input": 4096,
    "long_output": 1024,
    "short_output": 48,
    "speculative": "none",
    "draft_tokens": 3,
    "acceptance_length": 0.0,
}
SPECULATIVE = {"none": "none", "eagle3": "EAGLE-3 head", "mtp": "MTP layers (DeepSeek)", "ngram": "n-gram (prompt lookup)",
               "draft": "draft model"}


@dataclass(frozen=True)
class Settings:
    """Plain values of every sidebar control, for the model layer."""

    corners: Corners
    trim_input: float
    trim_output: float
    cache_hit: float
    traffic: float
    model: str
    gpu: str
    precision: str
    kv_precision: str | None     # None: the same as the weights
    tp: int | None
    ttft_slo_ms: float
    tpot_slo_ms: float
    gpu_hour_usd: float
    layout: str = "tp"           # "tp", "tp+ep" or "dep" (MoE models only)
    speculative: str = "none"    # none | eagle3 | mtp | ngram | draft
    draft_tokens: int | None = None
    acceptance_length: float | None = None  # None: assumed from the log's corners
    engine: str = DEFAULT_ENGINE            # the serving engine: vllm | sglang | trtllm


PENDING_CACHE_HIT = "_pending_cache_hit_pct"
PENDING_MODEL = "_pending_model"           # the log's model, applied before the model widget is drawn
MODEL_SOURCE = "_model_source"             # where the sidebar's model came from, in words
_MODEL_CHOSEN = "_model_chosen"            # the user picked a model: a new log no longer changes it
_MODEL_FOR = "_model_followed_for"         # the log whose model column was last read
SLO_HINT_SLOT = "_slo_hint_slot"
CACHE_OFFER_SLOT = "_cache_offer_slot"
WHATIF_FRAGMENT = "whatif"                 # the key of a page's main what-if fragment
_LIVE = "_whatif_live_fragments"           # this page's what-if fragments that show what the levers move (None:
                                           # not known, the last full run did not finish: a step reruns the page)
_DRAFT = "_whatif_live_draft"              # the live fragments a full run has drawn so far
# The user's sidebar values as the last full run drew them, under a key no widget owns: a polling fragment that
# fires while the user switches pages can make Streamlit drop the widgets' own state (streamlit#10805), and the
# next run then restores the user's values from here instead of failing or resetting them to the defaults.
_VALUES = "_sidebar_values"
STEP_SLIDERS = ("trim_input_pct", "trim_output_pct", "traffic")   # a step of these reruns the live fragments
_STEP_SLOTS = "_whatif_step_slots"         # their two places in the sidebar (the trims; traffic), made by render()
_STEPS_DRAWN = "_whatif_steps_drawn"       # this full run has drawn them (the page's main what-if fragment or here)
_STEPS_FRAGMENT = "_whatif_steps_fragment"  # the id of the fragment the last full run drew them from (None: the page)


def _on_whatif_step() -> None:
    # A trim or traffic step changes only what the page drew in its live what-if fragments. On a page with a main
    # what-if fragment the sliders are that fragment's (``_draw_steps``): the browser's step already reruns it alone,
    # one script run, and nothing here may add a second (a keyed rerun from a callback is a run of its own after the
    # one it ends). Other live sections, or a fragment a page switch has since removed, need the keyed rerun or the
    # whole page. A step that starts a full run (a page without one, or a step that came with a page switch) stays
    # one: the page it draws is the one asked for.
    live = st.session_state.get(_LIVE)
    ctx = get_script_run_ctx()
    steps_from = (ctx.fragment_ids_this_run or []) if ctx is not None else []   # the step's own fragment run
    if steps_from:
        if live is None or steps_from != [st.session_state.get(_STEPS_FRAGMENT)]:
            # not known (a full run cut short), or a slider of a fragment the last full run no longer drew them
            # from (a page switch raced the step): the whole page, never a stale fragment alone
            st.rerun()
        if not live <= {WHATIF_FRAGMENT}:
            st.rerun(scope=sorted(live | {WHATIF_FRAGMENT}))


def publish_live() -> None:
    """The page's full run finished: the fragments it drew live are what a step reruns from now on (app.py, after
    the page). A run cut short (a step or a click arrived while it drew) never publishes, so a step then reruns the
    whole page rather than a set that misses the fragment the cut run was drawing: that set is how a step was lost
    (the headline's poll reran the page, a slider step cut it inside the headline, and the next step reran every
    section but the headline, whose what-if line stayed a step behind)."""
    draft = st.session_state.get(_DRAFT)
    if draft is not None:
        st.session_state[_LIVE] = set(draft)
        st.session_state[_DRAFT] = None


def _set_cache_hit(pct: int) -> None:
    st.session_state["cache_hit_pct"] = pct


def offer_cache_estimate(pct: int, source: str) -> None:
    """A one-click what-if under the prefix-cache slider: set it to an estimated hit ratio (unless it is there)."""
    slot = st.session_state.get(CACHE_OFFER_SLOT)
    if slot is None or st.session_state.get("cache_hit_pct") == pct:
        return
    slot.button(f"Try {pct}% (estimated from {source})", key="cache_hit_estimate", icon=":material/science:",
                on_click=_set_cache_hit, args=(pct,),
                help="An estimate, not a measurement: each turn of a session is assumed to reuse the previous "
                     "turn's context. Applied only when you click.")


def slo_hint(shape: str, ttft_ms: tuple[float, float], tpot_ms: tuple[float, float], ttft_slo_ms: float,
             tpot_slo_ms: float) -> str:
    """The recommended SLO ranges for the log's shape, read as the p90 targets the app plans for, and where the
    SLOs set sit against them."""
    text = (f"Recommended for **{shape}** traffic (published planner ranges, planned here as p90 targets): TTFT "
            f"{ttft_ms[0]:,.0f}–{ttft_ms[1]:,.0f} ms, TPOT {tpot_ms[0]:,.0f}–{tpot_ms[1]:,.0f} ms.")
    outside = [f"{name} {value:,.0f} ms is {'looser' if value > hi else 'tighter'} than that"
               for name, value, (lo, hi) in (("TTFT", ttft_slo_ms, ttft_ms), ("TPOT", tpot_slo_ms, tpot_ms))
               if not lo <= value <= hi]
    return text + (f" The SLOs set: {'; '.join(outside)}." if outside else "")


def whatif_fragment(draw: Callable[[], bool | None], key: str = WHATIF_FRAGMENT) -> None:
    """Run ``draw`` as a what-if fragment: a trim or traffic step reruns it, not the page, while it is live.

    It is live while its last run drew something the levers move: ``draw`` returns False when it drew none (a
    section showing its button, not yet its result), and a step then leaves it as it is. ``draw`` reads the
    sidebar's values itself (``settings()``), so a fragment rerun sees the new ones. Fragments never read each
    other's results: a step reruns the live ones in no particular order. The page's main one (``key`` left as
    ``WHATIF_FRAGMENT``) draws the step sliders first: a step is its run.
    """
    def run() -> None:
        if key == WHATIF_FRAGMENT:
            _draw_steps()   # its sliders: a step is this fragment's run alone (the browser reruns a widget's fragment)
        with DRAWS.drawing():   # the headline's sizings pause between replays while a step is drawn
            shown = draw() is not False
        # recorded only once ``draw`` is done: a run cut short leaves the last finished run's record as it was
        draft = st.session_state.get(_DRAFT)
        record = draft if draft is not None else st.session_state.get(_LIVE)   # in a full run / a fragment rerun
        if record is not None:
            (record.add if shown else record.discard)(key)

    st.fragment(run, key=key)()


def _init_state() -> None:
    kept = st.session_state.get(_VALUES, {})
    for key, value in DEFAULTS.items():
        if key not in st.session_state:
            st.session_state[key] = kept.get(key, value)
    # A page measured the log's prefix-hit ratio: it becomes the slider's value before the slider is drawn.
    if PENDING_CACHE_HIT in st.session_state:
        st.session_state["cache_hit_pct"] = st.session_state.pop(PENDING_CACHE_HIT)
    # The log named its model: it opens at its checkpoint's precision, as `plan` plans it.
    if PENDING_MODEL in st.session_state:
        st.session_state["model"] = st.session_state.pop(PENDING_MODEL)
        _on_model_change(chosen=False)
    if st.session_state["gpu_hour_usd"] is None:
        st.session_state["gpu_hour_usd"] = float(get_gpu(str(st.session_state["gpu"])).usd_per_gpu_hour or 2.5)


def _on_upload() -> None:
    uploads.on_change()   # a new upload replaces the analysed one; its mapping starts afresh
    if st.session_state.get(data.UPLOAD_KEY):
        st.session_state[data.SOURCE_KEY] = "upload"


def _on_server_pattern() -> None:
    if str(st.session_state.get(data.SERVER_KEY) or "").strip():
        st.session_state[data.SOURCE_KEY] = "server"
        st.session_state[data.MAPPING_KEY] = {}


def _on_gpu_change() -> None:
    price = get_gpu(str(st.session_state["gpu"])).usd_per_gpu_hour
    if price:
        st.session_state["gpu_hour_usd"] = float(price)


def _as_chosen(key: str, options: list | None = None) -> dict[str, Any]:
    """The user's value as the widget's own default (``index=`` or ``value=``).

    A browser re-creates a widget it dropped from its page (a fragment rerun, a reconnect) from the last full run's
    message: at the widget's default when that message did not set it, the first option of a select box, the minimum
    of a number input. It then sends that value back as if the user had chosen it, and the session's state follows:
    a Capacity page came back on Llama-3.1-8B, A100 40GB, TTFT 10 ms and TPOT 1 ms, "no fleet size serves ...".
    With the user's value as the default, a re-created widget shows what the user chose. (The key alone names the
    widget, so its default moving does not make it a new one.)
    """
    value = st.session_state.get(key)
    if options is None:
        return {} if value is None else {"value": value}
    return {"index": options.index(value) if value in options else 0}


def render_data_source() -> None:
    """Scenarios next to the upload: one click shows the idea before anyone uploads."""
    st.sidebar.markdown("### Data")
    roots = data.server_roots()
    options = [k for k in data.DATASETS if (k != "upload" or st.session_state.get(data.UPLOAD_KEY))
               and (k != "server" or roots)]
    if st.session_state.get(data.SOURCE_KEY) not in options:
        st.session_state[data.SOURCE_KEY] = "demo"
    st.sidebar.radio(
        "Log to analyse", options, key=data.SOURCE_KEY, format_func=lambda k: data.DATASETS[k],
        **_as_chosen(data.SOURCE_KEY, options),
        help="The demo and the scenarios are synthetic, generated by shapeviz with published statistics of "
             "real traces. Upload your own log below.",
    )
    st.sidebar.file_uploader(
        "Upload request logs", accept_multiple_files=True, key=data.UPLOAD_KEY, on_change=_on_upload,
        help=("CSV, TSV, Parquet, JSON or JSONL, optionally gzip/bz2/zstd. Files dropped together become several "
              "products; a later upload replaces them (a button analyses every listed file together). "
              "Kept in memory for this session only, never written to disk. Limits: "
              f"{human_bytes(DEFAULT_LIMITS.max_bytes_in)} per file, "
              f"{human_bytes(DEFAULT_LIMITS.max_decompressed_bytes)} decompressed, "
              f"{DEFAULT_LIMITS.max_rows:,} rows."),
    )
    _earlier_uploads()
    if roots:   # only when the operator allowed folders on the server (SHAPEVIZ_ALLOWED_ROOTS or secrets)
        st.sidebar.text_input(
            "Or logs on the server", key=data.SERVER_KEY, on_change=_on_server_pattern,
            placeholder="logs/2024-05-*.parquet",
            help="A file, folder or glob under an allowed root: " + ", ".join(r.name or str(r) for r in roots)
                 + ". Read where they are, streamed; nothing is uploaded.",
        )


def _earlier_uploads() -> None:
    """Say which listed files the pages do not analyse (uploaded before the latest), and offer them all together."""
    files = list(st.session_state.get(data.UPLOAD_KEY) or [])
    earlier = uploads.not_analysed(files)
    if not earlier:
        return
    names = ", ".join(f.name for f in uploads.analysed(files))
    st.sidebar.caption(
        f"Analysing {md_literal(names)}, the latest upload. Uploaded before and not analysed: "
        f"{md_literal(', '.join(f.name for f in earlier))} (× removes a file)."
    )
    st.sidebar.button(f"Analyse all {len(files)} files together", key="analyse_all_uploads",
                      on_click=uploads.analyse_all, help="One product per file, as files dropped together are.")


def render_corners() -> None:
    """The corner boundaries the user can move."""
    with st.sidebar.expander("Corner boundaries", expanded=False):
        st.number_input("Long input from (tokens)", 64, 1_000_000, key="long_input", step=512,
                        **_as_chosen("long_input"))
        st.number_input("Long output from (tokens)", 16, 1_000_000, key="long_output", step=128,
                        **_as_chosen("long_output"))
        st.number_input("Short output below (tokens)", 2, 100_000, key="short_output", step=8,
                        **_as_chosen("short_output"))


KV_PRECISIONS = ["same", "fp8", "bf16"]
TP_CHOICES = ["auto", 1, 2, 4, 8, 16]
LAYOUTS = {"tp": "Tensor parallel (TP)", "tp+ep": "TP + expert parallel (EP)",
           "dep": "Attention-DP + EP (DEP)"}


def _fit_deployment_choices() -> None:
    """Keep the precision and layout valid for the chosen model and GPU (before their widgets are drawn)."""
    # read through ``value``: a runner stopped by a page switch can drop a widget's state just after this run drew it
    # (streamlit#10805; seen once in CI as a KeyError on "model" here), and the page then draws on the user's values
    model, gpu = get_model(str(value("model"))), str(value("gpu"))
    if st.session_state.get("precision") not in precisions_for(model, gpu):
        st.session_state["precision"] = model.checkpoint_precision
    if not model.is_moe:
        st.session_state["layout"] = "tp"


def _on_model_change(chosen: bool = True) -> None:
    # A model opens at its checkpoint's precision (BF16, gpt-oss MXFP4, DeepSeek-V3 FP8): what a team serves, as
    # the command line plans it; a lower precision is a lever the user picks.
    st.session_state["precision"] = get_model(str(st.session_state["model"])).checkpoint_precision
    if chosen:
        st.session_state[_MODEL_CHOSEN] = True
        st.session_state[MODEL_SOURCE] = "chosen in the sidebar"


def follow_log_model(digest: str, frame: object) -> None:
    """The log's model column chooses the model, as ``plan`` does, once per log and unless the user picked one
    (the most requested catalogue model; ``shapeviz.fleet.sizing.model_of_log``). Reruns when it changes it."""
    if st.session_state.get(_MODEL_FOR) == digest:
        return
    st.session_state[_MODEL_FOR] = digest
    if st.session_state.get(_MODEL_CHOSEN):
        return
    model, st.session_state[MODEL_SOURCE] = model_of_log(frame)
    if model != st.session_state.get("model"):
        st.session_state[PENDING_MODEL] = model
        st.rerun()   # the model widget was drawn with the old value


def deployment_sources(s: Settings) -> tuple[str, str]:
    """Where the sidebar's model and precision came from, in words (the log, the user, a default)."""
    model = get_model(s.model)
    source = str(st.session_state.get(MODEL_SOURCE) or "shapeviz default")
    precision = (checkpoint_precision_source(s.precision) + "; FP8/FP4 are levers"
                 if s.precision == model.checkpoint_precision
                 else f"chosen in the sidebar (the checkpoint is {model.checkpoint_precision.upper()})")
    return source, precision


def _on_speculative_change() -> None:
    # Each method starts at its own draft length (MTP drafts 1 token, EAGLE-3 3, ...) and an assumed acceptance.
    method = str(st.session_state["speculative"])
    if method != "none":
        st.session_state["draft_tokens"] = default_draft_tokens(method)
        st.session_state["acceptance_length"] = 0.0


def render_whatif() -> None:
    """Trim, cache, traffic, deployment, SLOs and price: the levers a planning meeting moves."""
    st.sidebar.markdown("### What-if")
    trims = st.sidebar.container()   # Trim input %, Trim output % (``_draw_steps``)
    st.sidebar.slider("Prefix-cache hit %", 0, 95, key="cache_hit_pct", step=1, **_as_chosen("cache_hit_pct"),
                      help="An assumption: the share of input tokens served from a prefix cache, the same on every "
                           "replica whatever the router. Defaults to what the log shows when it carries block "
                           "hashes, cached-token counts or sessions; with hashes or sessions the Capacity page "
                           "simulates the reuse each router really keeps on per-replica caches.")
    # Filled by the page when the log's sessions give a reuse estimate: offered, never applied unasked.
    st.session_state[CACHE_OFFER_SLOT] = st.sidebar.empty()
    traffic = st.sidebar.container()   # Traffic × (``_draw_steps``)
    st.session_state[_STEP_SLOTS] = (trims, traffic)
    with st.sidebar.expander("Deployment", expanded=True):
        st.selectbox("Model", list_models(), key="model", format_func=lambda m: get_model(m).name,
                     on_change=_on_model_change, **_as_chosen("model", list_models()))
        st.selectbox("GPU", list_gpus(), key="gpu", format_func=lambda g: get_gpu(g).name, on_change=_on_gpu_change,
                     **_as_chosen("gpu", list_gpus()))
        _fit_deployment_choices()
        model = get_model(str(value("model")))
        left, right = st.columns(2)
        weights = precisions_for(model, str(value("gpu")))
        left.selectbox("Weights", weights, key="precision", **_as_chosen("precision", weights),
                       help="Weight precision (block scales included: NVFP4 4.5 bits, MXFP4 4.25). 4-bit formats are "
                            "offered where the GPU has FP4 tensor cores, or as the model's own checkpoint "
                            "(gpt-oss MXFP4 on Hopper runs weight-only at the BF16 rate).")
        right.selectbox("KV cache", KV_PRECISIONS, key="kv_precision", **_as_chosen("kv_precision", KV_PRECISIONS),
                        help="KV-cache precision; 'same' follows the weights.")
        st.selectbox("GPUs per replica", TP_CHOICES, key="tp", **_as_chosen("tp", TP_CHOICES),
                     help="Tensor-parallel size; auto is the smallest that holds the weights with room for KV.")
        if model.is_moe:
            st.selectbox("MoE layout", list(LAYOUTS), key="layout", format_func=LAYOUTS.get,
                         **_as_chosen("layout", list(LAYOUTS)),
                         help="TP splits every weight; EP keeps whole experts on each GPU; DEP also gives each GPU "
                              "its own sequences (attention replicated, no MLA KV copies), exchanging tokens with "
                              "the expert layers. DEP needs 2 GPUs or more.")
        st.selectbox("Serving engine", list(ENGINES), key="serving_engine", format_func=ENGINE_NAMES.get,
                     **_as_chosen("serving_engine", list(ENGINES)),
                     help="The engine the replicas run. Its efficiency on this GPU family at this precision comes "
                          "from published results (MLPerf Inference); without one, the generic calibration.")
        st.number_input("$ per GPU-hour", 0.0, 100.0, key="gpu_hour_usd", step=0.1, format="%.2f",
                        **_as_chosen("gpu_hour_usd"),
                        help="An assumption: set your own contract price.")
        st.selectbox("Speculative decoding", list(SPECULATIVE), key="speculative", format_func=SPECULATIVE.get,
                     **_as_chosen("speculative", list(SPECULATIVE)),
                     on_change=_on_speculative_change,
                     help="A draft proposes tokens the model verifies in one step: faster TPOT at small batch, a "
                          "slowdown at high load. The Capacity page shows where it stops paying.")
        if st.session_state["speculative"] != "none":
            left, right = st.columns(2)
            left.number_input("Draft tokens", 1, 8, key="draft_tokens", step=1, **_as_chosen("draft_tokens"))
            right.number_input("Accepted / step", 0.0, 9.0, key="acceptance_length", step=0.1, format="%.1f",
                               **_as_chosen("acceptance_length"),
                               help="Mean tokens kept per step, bonus included, as vLLM/SGLang report it. "
                                    "0: assumed from published benchmarks for the log's corners.")
    with st.sidebar.expander("SLOs (p90)", expanded=True):
        st.number_input("TTFT SLO (ms)", 10, 60_000, key="ttft_slo_ms", step=50, **_as_chosen("ttft_slo_ms"))
        st.number_input("TPOT SLO (ms)", 1, 1_000, key="tpot_slo_ms", step=5, **_as_chosen("tpot_slo_ms"))
        # Filled by the page once it knows the log's dominant shape (recommended ranges per shape).
        st.session_state[SLO_HINT_SLOT] = st.empty()


def _draw_steps() -> None:
    """The step sliders (trims, traffic) in their places in the sidebar, drawn by the page's main what-if fragment
    (a step then reruns that fragment alone, one script run: Streamlit reruns the fragment that drew a widget, even
    into a container made outside it) or, on a page without one, by ``steps_unless_drawn`` after the page.

    Drawn as the entry file's own widgets (its script hash), whoever draws them: a widget's id includes the script
    hash it was drawn under, so the same slider is the same widget on every page and its value and place survive a
    page switch, as the rest of the sidebar's do. A value Streamlit dropped meanwhile comes back from ``_VALUES``."""
    slots = st.session_state.get(_STEP_SLOTS)
    if slots is None:   # no sidebar drawn (a page run on its own, as in a test)
        return
    ctx = get_script_run_ctx()
    fragment = ThreadState.get().fragment_id   # the fragment drawing them, None in the entry file
    if ctx.fragment_ids_this_run:
        if fragment != st.session_state.get(_STEPS_FRAGMENT):
            return   # a fragment a keyed rerun still finds under the key, from a page shown before: not this page's
        if st.session_state.get(_LIVE) is None:
            # the last full run was cut short, maybe before this fragment drew: Streamlit then no longer holds its
            # places in the sidebar (a fragment's writes outside it are re-placed by each full run), so the page
            st.rerun()
    else:
        st.session_state[_STEPS_FRAGMENT] = fragment
    trims, traffic = slots
    for key in STEP_SLIDERS:
        if key not in st.session_state:
            st.session_state[key] = value(key)
    with ctx.run_with_active_hash(ctx.pages_manager.main_script_hash):
        trims.slider("Trim input %", 0, 90, key="trim_input_pct", step=5, on_change=_on_whatif_step,
                     **_as_chosen("trim_input_pct"), help="Better retrieval, summarisation, shorter system prompts.")
        trims.slider("Trim output %", 0, 90, key="trim_output_pct", step=5, on_change=_on_whatif_step,
                     **_as_chosen("trim_output_pct"), help="Tighter prompts, stopping criteria, output budgets.")
        traffic.slider("Traffic ×", 0.25, 10.0, key="traffic", step=0.25, on_change=_on_whatif_step,
                       **_as_chosen("traffic"))
    st.session_state[_STEPS_DRAWN] = True


def steps_unless_drawn() -> None:
    """Draw the step sliders from the entry file when this full run's page has not (it has no main what-if fragment,
    or it stopped or failed before drawing it): called after the page, and by a page before ``st.stop()``. Into a
    container of their own, as a fragment's writes into an outside container are, so they keep their place."""
    if st.session_state.get(_STEPS_DRAWN) or st.session_state.get(_STEP_SLOTS) is None:
        return
    trims, traffic = st.session_state[_STEP_SLOTS]
    st.session_state[_STEP_SLOTS] = (trims.container(), traffic.container())
    _draw_steps()


def render() -> None:
    """Draw the whole sidebar (called once per run by app.py)."""
    _init_state()
    st.session_state[_LIVE] = None    # not known until this run's page has drawn every fragment (publish_live)
    st.session_state[_DRAFT] = set()
    st.session_state[_STEPS_DRAWN] = False
    render_data_source()
    render_whatif()
    render_corners()
    _remember()


def _remember() -> None:
    # a what-if step reruns only the page's fragments: they read settings(), which keeps this copy current too
    kept = st.session_state.setdefault(_VALUES, {})
    kept.update({key: st.session_state[key] for key in DEFAULTS if key in st.session_state})


def value(key: str) -> object:
    """One sidebar value: the widget's, else the last full run's (its state dropped meanwhile), else the default."""
    if key in st.session_state:
        return st.session_state[key]
    return st.session_state.get(_VALUES, {}).get(key, DEFAULTS[key])


def settings() -> Settings:
    """Plain values of the sidebar controls."""
    _remember()
    v = value
    long_output = int(v("long_output"))
    short_output = min(int(v("short_output")), long_output - 1)
    tp = v("tp")
    speculative = str(v("speculative"))
    return Settings(
        corners=Corners(int(v("long_input")), long_output, max(short_output, 1)),
        trim_input=float(v("trim_input_pct")) / 100, trim_output=float(v("trim_output_pct")) / 100,
        cache_hit=float(v("cache_hit_pct")) / 100, traffic=float(v("traffic")),
        model=str(v("model")), gpu=str(v("gpu")), precision=str(v("precision")),
        kv_precision=None if v("kv_precision") == "same" else str(v("kv_precision")),
        tp=None if tp == "auto" else int(tp),
        ttft_slo_ms=float(v("ttft_slo_ms")), tpot_slo_ms=float(v("tpot_slo_ms")),
        gpu_hour_usd=float(v("gpu_hour_usd")),
        layout=str(v("layout")),
        speculative=speculative,
        draft_tokens=int(v("draft_tokens")) if speculative != "none" else None,
        acceptance_length=(float(v("acceptance_length")) or None) if speculative != "none" else None,
        engine=str(v("serving_engine")),
    )
