"""The dashboard as a user meets it, driven by Streamlit's AppTest (no browser)."""
from __future__ import annotations

import json
import re

import pytest
from streamlit.testing.v1 import AppTest

from tests.app.dashboard import CAPACITY, as_the_browser, drawn_by, open_app, open_page


def _shown(markdown: str) -> str:
    """What the browser shows for markdown whose log-derived parts are escaped (backslash escapes resolved)."""
    return re.sub(r"\\([!-/:-@\[-`{-~])", r"\1", markdown).replace("\u2060", "")


def _metric(at: AppTest, label: str) -> str:
    for m in at.metric:
        if m.label == label:
            return m.value
    raise AssertionError(f"no metric {label!r} among {[m.label for m in at.metric]}")


def _plotly_titles(at: AppTest) -> list[str]:
    titles = []
    for chart in at.get("plotly_chart"):
        spec = json.loads(chart.proto.spec)
        titles.append(str(spec.get("layout", {}).get("title", {}).get("text", "")))
    return titles


def _upload(at: AppTest, name: str, data: bytes, mime: str = "text/csv") -> AppTest:
    at.file_uploader(key="uploads").set_value((name, data, mime))
    at.run()
    return at


def test_opens_on_the_demo_with_the_plane_and_the_load_report() -> None:
    at = open_app()
    assert not at.exception, at.exception
    assert at.title[0].value == "Workload shape"
    assert int(_metric(at, "Requests").replace(",", "")) > 10_000
    assert any("input vs output" in t for t in _plotly_titles(at))
    assert any(e.label.startswith("Load report") for e in at.expander)
    # The demo holds all five shapes: the corner table lists them all with a share.
    assert any("Reasoning" in str(df.value) for df in at.dataframe)


def test_uploading_a_real_trace_shows_its_plane_and_rows(trace) -> None:
    path = trace("azure_llm_2023/AzureLLMInferenceTrace_conv.csv")
    at = _upload(open_app(), path.name, path.read_bytes())
    assert not at.exception, at.exception
    assert _metric(at, "Requests") == "19,366"
    assert path.name in _shown(at.caption[0].value)
    assert "19,366 rows read" in _shown(at.caption[0].value)
    assert any("input vs output" in t for t in _plotly_titles(at))
    assert "Chat" in at.markdown[0].value or any("chat" in m.value.lower() for m in at.markdown)
    # reading and analysing drew a progress bar while they ran; none is left once the page is done
    assert not at.get("progress")


def test_a_wrong_file_gets_one_clear_line_and_the_app_stays_up() -> None:
    png = b"\x89PNG\r\n\x1a\n" + b"\x00" * 200
    at = _upload(open_app(), "holiday.png", png, "image/png")
    assert not at.exception, at.exception
    assert at.error, "a wrong file must show an error"
    message = _shown(at.error[0].value)
    assert "holiday.png" in message and "\n" not in message.strip()
    # The user can go back to the demo in one click.
    at.radio(key="dataset").set_value("demo").run()
    assert not at.error and at.title[0].value == "Workload shape"


@pytest.mark.parametrize("page", ["pages/clusters.py", "pages/capacity.py", "pages/sessions.py"])
def test_every_page_runs_on_the_demo(page: str) -> None:
    at = open_app()
    at.switch_page(page).run()
    assert not at.exception, at.exception
    assert at.get("plotly_chart"), f"{page} draws no chart"


def test_trimming_input_lowers_prefill_pressure_on_the_capacity_page() -> None:
    at = open_page(CAPACITY)
    before = _metric(at, "Prefill pressure")
    at.slider(key="trim_input_pct").set_value(60).run()
    assert not at.exception, at.exception
    after = _metric(at, "Prefill pressure")
    assert int(after.rstrip("%")) < int(before.rstrip("%"))


def test_the_measured_prefix_hit_becomes_the_sidebar_default(trace) -> None:
    path = trace("mooncake_fast25/conversation_trace.jsonl.gz")
    at = _upload(open_app(), path.name, path.read_bytes(), "application/gzip")
    assert not at.exception, at.exception
    # SOURCE.md: token-weighted ideal hit ratio 37.36 %.
    assert at.slider(key="cache_hit_pct").value == 37


def test_two_sessions_with_different_uploads_never_see_each_others_data(trace) -> None:
    code = trace("azure_llm_2023/AzureLLMInferenceTrace_code.csv")
    conv = trace("azure_llm_2023/AzureLLMInferenceTrace_conv.csv")
    a = _upload(open_app(), code.name, code.read_bytes())
    b = _upload(open_app(), conv.name, conv.read_bytes())
    a.run()
    assert _metric(a, "Requests") == "8,819" and _metric(b, "Requests") == "19,366"
    assert conv.name not in _shown(a.caption[0].value) and code.name not in _shown(b.caption[0].value)


def test_untouched_levers_change_nothing() -> None:
    """The prefix-cache slider starts at the share the log reports, so the default what-if is the log as it is."""
    at = open_page(CAPACITY)
    assert not at.exception, at.exception
    gpus = next(m for m in at.metric if m.label.startswith("GPUs colocated"))
    assert not gpus.delta, f"default what-if moved the plan: {gpus.delta}"
    assert not [m.value for m in at.metric if "None" in m.value or "nan" in m.value.lower()]


def test_the_user_sets_k_on_the_clusters_page_and_it_holds_across_pages() -> None:
    at = open_app()
    at.switch_page("pages/clusters.py").run()
    at.segmented_control(key="_k_widget").set_value(4).run()
    assert not at.exception, at.exception
    assert "k = 4 (set by you" in at.caption[0].value
    at.switch_page("pages/shape.py").run()
    at.switch_page("pages/clusters.py").run()
    assert "k = 4 (set by you" in at.caption[0].value


def test_kv_cache_precision_is_set_on_its_own() -> None:
    """BF16 weights (the checkpoint's, the default) with an FP8 KV cache: a session's KV per token halves, the
    weights stay BF16."""
    at = open_app()
    assert at.selectbox(key="precision").value == "bf16"
    at.switch_page("pages/sessions.py").run()
    assert any("Llama-3.1-70B at BF16 KV: 320 KiB per token" in c.value for c in at.caption)
    at.selectbox(key="kv_precision").set_value("fp8").run()
    assert not at.exception, at.exception
    assert any("Llama-3.1-70B at FP8 KV: 160 KiB per token" in c.value for c in at.caption)
    assert at.selectbox(key="precision").value == "bf16"


TRACES = [
    "azure_llm_2023/AzureLLMInferenceTrace_code.csv",
    "mooncake_fast25/synthetic_trace.jsonl",
    "burstgpt/burstgpt_slice.csv",
    "burstgpt/burstgpt3_slice.csv",
    "tracelab_example/round_trace.jsonl",
    "vidur_arxiv_summarization/arxiv_summarization_stats_llama2_tokenizer_filtered_v2.csv",  # no timestamps
]
PAGES = ["pages/shape.py", "pages/clusters.py", "pages/capacity.py", "pages/sessions.py", "pages/report.py"]


@pytest.mark.parametrize("relative", TRACES)
def test_every_page_works_on_every_real_trace(trace, relative: str) -> None:
    path = trace(relative)
    at = _upload(open_app(), path.name, path.read_bytes(), "application/octet-stream")
    for page in PAGES:
        at.switch_page(page).run()
        assert not at.exception, f"{page} on {path.name}: {at.exception}"
        assert not at.error, f"{page} on {path.name}: {[e.value for e in at.error]}"


def test_the_report_bundle_builds_on_click_and_offers_every_file() -> None:
    at = open_app()
    at.switch_page("pages/report.py").run()
    at.toggle[0].set_value(False).run()  # PNGs are covered by the report and browser tests; this is the page
    at.button[0].click().run()
    assert not at.exception, at.exception
    labels = [b.label for b in at.get("download_button")]
    assert any(label.startswith("Download the bundle (zip") for label in labels)
    for name in ("HTML memo", "Replay trace (JSONL)", "Replay trace (Vidur CSV)", "recommendations.csv"):
        assert name in labels, labels


def test_comparing_deployments_names_winners_and_counts_those_that_meet_the_slos() -> None:
    at = open_page(CAPACITY)
    next(b for b in at.button if b.label == "Compare all deployments").click().run()
    assert not at.exception, at.exception
    assert any(m.value.startswith("**") and "configurations meet both SLOs" in m.value for m in at.markdown)
    # each winner in a line of its own, its GPU's whole name (a metric clipped it: "Cheapest 4× GeForce RTX 3…")
    winners = {m.value.split("**")[1]: m.value for m in at.markdown if m.value.startswith("**")}
    assert {"Cheapest", "Lowest latency", "Fewest GPUs"} <= set(winners)
    for title in ("Cheapest", "Lowest latency", "Fewest GPUs"):
        assert "× " in winners[title] and "/ 1M tokens" in winners[title] and "…" not in winners[title]


def test_a_log_whose_rows_are_all_dropped_says_why_in_one_line() -> None:
    at = _upload(open_app(), "broken.csv", b"input_tokens,output_tokens\n-5,10\nabc,3\n")
    assert not at.exception, at.exception
    [error] = at.error
    message = _shown(error.value)
    assert "broken.csv" in message and "negative_tokens 1" in message and "not_a_number 1" in message


def test_a_log_over_the_full_frame_threshold_runs_every_page_from_its_sketch(trace, monkeypatch) -> None:
    from shapeviz.workload.sketch import FULL_FRAME_ENV

    monkeypatch.setenv(FULL_FRAME_ENV, "5000")   # the conv trace's 19,366 rows are then "too big to keep"
    path = trace("azure_llm_2023/AzureLLMInferenceTrace_conv.csv")
    at = _upload(open_app(), path.name, path.read_bytes())
    assert not at.exception, at.exception
    assert _metric(at, "Requests") == "19,366"                      # every request, not the sample
    assert "19,366 rows read" in _shown(at.caption[0].value)
    assert any("workload sketch" in i.value for i in at.info)
    for page in ("pages/clusters.py", "pages/capacity.py", "pages/sessions.py", "pages/report.py"):
        at.switch_page(page).run()
        assert not at.exception, (page, at.exception)
        assert any("workload sketch" in i.value for i in at.info), page


def test_logs_on_the_server_only_under_the_allowed_roots(trace, tmp_path, monkeypatch) -> None:
    from shapeviz.ingest.roots import ROOTS_ENV

    root = tmp_path / "logs"
    root.mkdir()
    source = trace("azure_llm_2023/AzureLLMInferenceTrace_code.csv")
    (root / source.name).write_bytes(source.read_bytes())
    assert "server" not in open_app().radio(key="dataset").options      # off unless the operator allows a root
    monkeypatch.setenv(ROOTS_ENV, str(root))
    at = open_app()
    at.text_input(key="server_pattern").set_value("*.csv").run()
    assert not at.exception, at.exception
    assert _metric(at, "Requests") == "8,819"
    at.text_input(key="server_pattern").set_value("/etc/passwd").run()
    # refused before anything is listed (issue 30; this pinned "no log file matches", said after walking)
    assert not at.exception and at.error and "outside the allowed roots" in _shown(at.error[0].value)


def test_the_sidebar_offers_the_layouts_and_precisions_that_fit_the_model_and_gpu() -> None:
    """A MoE model on H200 can be planned as DEP8; B200 offers NVFP4; gpt-oss opens in its native MXFP4."""
    at = open_app()
    assert "layout" not in [s.key for s in at.selectbox]  # dense Llama: no MoE layout to choose
    at.selectbox(key="model").set_value("qwen3-235b-a22b").run()
    at.selectbox(key="gpu").set_value("h200").run()
    assert "nvfp4" not in at.selectbox(key="precision").options  # Hopper has no FP4 tensor cores
    at.selectbox(key="tp").set_value(8).run()
    at.selectbox(key="layout").set_value("dep").run()
    at.switch_page("pages/capacity.py").run()
    assert not at.exception, at.exception
    assert not at.error, [e.value for e in at.error]
    assert any("DEP8" in _shown(str(m.value)) for m in at.markdown) or any("DEP8" in _shown(str(c.value))
                                                                             for c in at.caption)
    at.selectbox(key="gpu").set_value("b200").run()
    assert "nvfp4" in at.selectbox(key="precision").options
    at.selectbox(key="model").set_value("gpt-oss-120b").run()
    at.selectbox(key="gpu").set_value("h100-sxm").run()
    assert at.selectbox(key="precision").value == "mxfp4"
    assert not at.exception, at.exception


def test_the_sessions_page_of_a_sketch_only_log_shows_its_sampled_sessions(trace, monkeypatch) -> None:
    from shapeviz.workload.sketch import FULL_FRAME_ENV

    monkeypatch.setenv(FULL_FRAME_ENV, "100")   # the BurstGPT slice (400 rows, 134-135 sessions) only as a sketch
    path = trace("burstgpt/burstgpt3_slice.csv")
    at = _upload(open_app(), path.name, path.read_bytes())
    at.switch_page("pages/sessions.py").run()
    assert not at.exception, at.exception
    assert any("workload sketch" in i.value for i in at.info)
    assert not any("no session or conversation ids" in i.value for i in at.info)
    assert at.get("plotly_chart")


def test_the_sidebar_keeps_the_users_values_when_streamlit_drops_their_widget_state(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # A polling fragment that fires while the user switches pages can make Streamlit drop every other widget's state
    # (streamlit#10805): the next run must keep the user's values, neither failing nor resetting them to defaults.
    browser = as_the_browser(monkeypatch)
    at = open_page(CAPACITY)
    at.number_input(key="ttft_slo_ms").set_value(800).run()
    browser.fragment = drawn_by(at, "traffic")   # a traffic step, as the browser sends it: the headline's run
    at.slider(key="traffic").set_value(1.5).run()
    browser.fragment = at._fragment_storage.resolve_target("whatif_assumptions")[0]   # another fragment's run
    at.run()
    browser.fragment = None
    for key in ("traffic", "ttft_slo_ms", "tpot_slo_ms", "model"):
        del at.session_state[key]
    at.switch_page("pages/shape.py").run()
    assert not at.exception, at.exception
    assert at.slider(key="traffic").value == 1.5 and at.number_input(key="ttft_slo_ms").value == 800


def test_the_serving_engine_is_chosen_in_the_sidebar_and_the_capacity_page_says_where_its_efficiency_comes_from(
) -> None:
    """vLLM by default (what config writes); TensorRT-LLM on H100 at FP8 runs at the efficiency fitted on MLPerf."""
    at = open_page(CAPACITY)
    assert at.selectbox(key="serving_engine").value == "vllm"
    assert any("Serving engine: no published vLLM rows" in _shown(c.value) for c in at.caption)
    at.selectbox(key="precision").set_value("fp8")
    at.selectbox(key="serving_engine").set_value("trtllm").run()
    assert not at.exception, at.exception
    assert any("Serving engine: TensorRT-LLM on Hopper, FP8" in _shown(c.value) and "v50-h200-offline"
               in _shown(c.value) for c in at.caption)
