"""The dashboard in a real browser against a live server: what a user sees, moves, uploads and takes away.

Row counts and medians of the Azure traces come from their SOURCE.md (published / independently computed), not
from shapeviz.
"""
from __future__ import annotations

import re
import struct
from collections.abc import Callable
from pathlib import Path

import pandas as pd
import pytest

from tests.needs import require_module  # noqa: E402  (skips locally, fails under CI=true)

require_module("playwright.sync_api", "the playwright package drives the browser tests")

from dashboard import BUILD_MS, FIRST_LOAD_MS, RERUN_MS, Dashboard, OpenDashboard, ms_p90, percent  # noqa: E402
from playwright.sync_api import expect  # noqa: E402

pytestmark = pytest.mark.e2e

CODE = "azure_llm_2023/AzureLLMInferenceTrace_code.csv"
CONV = "azure_llm_2023/AzureLLMInferenceTrace_conv.csv"
CODE_ROWS, CONV_ROWS = "8,819", "19,366"  # SOURCE.md: the notebook's "[8819 rows x 3 columns]" and 19366
CODE_INPUT_P50, CODE_OUTPUT_P50 = 1469, 13  # SOURCE.md: ContextTokens / GeneratedTokens p50 of the code trace
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"

Trace = Callable[[str], Path]


@pytest.mark.no_sizing
def test_opens_on_the_demo_with_the_plane(open_dashboard: OpenDashboard) -> None:
    app = open_dashboard()
    plane = app.charts.first
    expect(plane).to_be_visible(timeout=FIRST_LOAD_MS)
    expect(plane.locator(".gtitle")).to_contain_text("input vs output", timeout=RERUN_MS)
    # Its axes say what the plane is (the text of plotly's SVG).
    expect(plane).to_contain_text("input tokens", timeout=RERUN_MS)
    expect(plane).to_contain_text("output tokens", timeout=RERUN_MS)
    expect(app.caption).to_contain_text("Demo mix", timeout=RERUN_MS)
    app.expect_healthy()
    expect(app.errors).to_have_count(0)


@pytest.mark.no_sizing
def test_uploading_a_real_trace_shows_its_rows_and_plane(open_dashboard: OpenDashboard, trace: Trace) -> None:
    path = trace(CONV)
    app = open_dashboard()
    app.upload_path(path)
    expect(app.metric("Requests")).to_have_text(CONV_ROWS, timeout=FIRST_LOAD_MS)
    expect(app.caption).to_contain_text(path.name, timeout=RERUN_MS)
    expect(app.caption).to_contain_text(f"{CONV_ROWS} rows read", timeout=RERUN_MS)
    expect(app.sidebar.get_by_role("radio", name="Your upload")).to_be_checked(timeout=RERUN_MS)
    plane = app.charts.first
    expect(plane).to_be_visible(timeout=RERUN_MS)
    expect(plane.locator(".gtitle")).to_contain_text(f"{CONV_ROWS} requests", timeout=RERUN_MS)
    app.expect_healthy()


def test_trimming_input_lowers_prefill_pressure_and_ttft(open_dashboard: OpenDashboard) -> None:
    app = open_dashboard()
    app.go("Capacity what-if")
    prefill, ttft = app.metric("Prefill pressure"), app.metric("TTFT p50 / p90 (ms)")
    expect(prefill).to_have_text(re.compile(r"^\d+%$"), timeout=RERUN_MS)
    # the figures compared are the simulated answer's, before and after: the estimate shown while the replays run
    # has other replicas (the demo's: 4 estimated, 1 simulated), so its pressure per replica is another number
    app.sized()
    prefill_before, ttft_before = percent(prefill.inner_text()), ms_p90(ttft.inner_text())

    app.move_slider("Trim input %", "End", "90")
    # The page redrew with the what-if: the TTFT figure carries a before -> after delta now.
    expect(app.metric_delta("TTFT p50 / p90 (ms)")).to_contain_text("ms p90", timeout=RERUN_MS)
    app.sized()

    ttft_after = ms_p90(ttft.inner_text())
    assert ttft_after < ttft_before, f"trimming 90 % of the input left TTFT p90 at {ttft_after} ms ({ttft_before})"
    prefill_after = percent(prefill.inner_text())
    assert prefill_after < prefill_before, f"trimming 90 % of the input left prefill pressure at {prefill_after} %"
    expect(app.metric_delta("Prefill pressure")).to_contain_text("-", timeout=RERUN_MS)
    # A trim step reruns only the page's what-if fragment, but the slider lives in the shared sidebar: the trim
    # survives going to another page and back.
    app.go("Shape", "Workload shape")
    expect(app.sidebar.get_by_role("slider", name="Trim input %")).to_have_attribute("aria-valuetext", "90",
                                                                                     timeout=RERUN_MS)
    app.go("Capacity what-if")
    app.sized()
    assert percent(app.metric("Prefill pressure").inner_text()) == prefill_after
    app.expect_healthy()


def test_a_trim_step_redraws_a_shown_result_and_never_leaves_it_stale(open_dashboard: OpenDashboard) -> None:
    # A step reruns only the Capacity sections that show something the levers move: one showing a result must
    # go with it (a comparison planned for the old trim would read as the new one's), one showing only its button
    # stays as it is.
    app = open_dashboard()
    app.go("Capacity what-if")
    # the simulated answer drawn first: the headline reruns the page once its replayed fleet is ready, and a click
    # during that rerun can be lost
    app.sized()
    compare = app.main.get_by_role("button", name="Compare all deployments")
    app.click_and_settle(compare)   # every deployment compared, however long that takes on a busy machine
    verdict = app.main.get_by_text(re.compile(r"configurations meet both SLOs"))
    expect(verdict).to_be_visible(timeout=RERUN_MS)
    simulate = app.main.get_by_role("button", name="Simulate this fleet")
    expect(simulate).to_be_visible(timeout=RERUN_MS)

    app.move_slider("Trim input %", "ArrowRight", "5")
    expect(app.metric_delta("TTFT p50 / p90 (ms)")).to_contain_text("ms p90", timeout=RERUN_MS)
    app.settle()
    expect(verdict).to_have_count(0, timeout=RERUN_MS)
    expect(compare).to_be_visible()
    expect(simulate).to_be_visible()

    # The assumptions are drawn when opened (their two tables), not before.
    assumptions = app.main.get_by_test_id("stExpander").filter(has_text="Assumptions and where each number")
    expect(assumptions.get_by_test_id("stDataFrame")).to_have_count(0)
    assumptions.get_by_text("Assumptions and where each number comes from").click()
    expect(assumptions.get_by_test_id("stDataFrame")).to_have_count(2, timeout=RERUN_MS)
    app.expect_healthy()


@pytest.mark.no_sizing
def test_closed_expanders_draw_their_content_when_opened(open_dashboard: OpenDashboard) -> None:
    # The Shape page's load report and its recommendations past the first five cost the first page nothing: they
    # are drawn when opened.
    app = open_dashboard()
    expect(app.main.get_by_text("Column mapping")).to_have_count(0)
    app.main.get_by_text(re.compile(r"^Load report")).click()
    expect(app.main.get_by_text("Column mapping")).to_be_visible(timeout=RERUN_MS)

    protects = app.main.get_by_text(re.compile(r", protects"))
    expect(protects).to_have_count(5, timeout=RERUN_MS)
    app.main.get_by_text(re.compile(r"^\d+ more, product by product")).click()
    expect(protects).not_to_have_count(5, timeout=RERUN_MS)  # the remaining ones, drawn now
    app.expect_healthy()


@pytest.mark.no_sizing
def test_per_product_csv_of_a_real_trace(open_dashboard: OpenDashboard, trace: Trace, tmp_path: Path) -> None:
    path = trace(CODE)
    app = open_dashboard()
    app.upload_path(path)
    expect(app.metric("Requests")).to_have_text(CODE_ROWS, timeout=FIRST_LOAD_MS)
    app.settle()

    saved = app.download(app.download_button("CSV").first, tmp_path)
    assert saved.name.endswith(".csv")
    table = pd.read_csv(saved)
    # "input p50" or "input_p50": a spreadsheet reader sees the same column either way.
    table.columns = [str(c).replace("_", " ") for c in table.columns]
    for column in ("product", "requests", "share of requests", "shape", "phase", "input p50", "output p50"):
        assert column in table.columns, f"{column!r} missing from {saved.name}: {list(table.columns)}"
    rows = table.set_index("product")
    # The whole log first, then its one product (named after the file): both are all of the trace.
    assert "overall" in rows.index and len(rows) == 2, list(rows.index)
    product = next(p for p in rows.index if p != "overall")
    assert "AzureLLMInferenceTrace_code" in product
    for scope in ("overall", product):
        assert f"{rows.loc[scope, 'requests']:,}" == CODE_ROWS
        assert rows.loc[scope, "input p50"] == CODE_INPUT_P50
        assert rows.loc[scope, "output p50"] == CODE_OUTPUT_P50
    assert rows.loc[product, "share of requests"] == pytest.approx(1.0)


def _assert_png(path: Path) -> None:
    data = path.read_bytes()
    assert data[:8] == PNG_SIGNATURE, f"{path.name} is not a PNG: starts {data[:8]!r}"
    # The first chunk of a PNG is IHDR: length, type, then width and height as big-endian uint32.
    length, kind, width, height = struct.unpack(">I4sII", data[8:24])
    assert kind == b"IHDR" and length == 13, f"{path.name}: first chunk {kind!r}"
    assert width > 0 and height > 0, f"{path.name}: {width} x {height}"


@pytest.mark.no_sizing
def test_the_plane_downloads_as_a_png(open_dashboard: OpenDashboard, tmp_path: Path) -> None:
    app = open_dashboard()
    expect(app.charts.first).to_be_visible(timeout=FIRST_LOAD_MS)
    app.settle()
    # The button under the plane, the page's first chart; the PNG is rendered on the server on click.
    saved = app.download(app.download_button("PNG").first, tmp_path, timeout_ms=BUILD_MS)
    assert saved.suffix == ".png", saved.name
    _assert_png(saved)
    app.expect_healthy()


@pytest.mark.no_sizing
def test_report_page_downloads_a_png_chart(open_dashboard: OpenDashboard, tmp_path: Path) -> None:
    app = open_dashboard()
    app.go("Report")
    include_png = app.main.get_by_role("switch", name="Include PNG charts")
    expect(include_png).to_be_checked(timeout=RERUN_MS)  # the system chromium is there to render them
    app.main.get_by_role("button", name="Build report bundle").click(timeout=RERUN_MS)
    plane_png = app.download_button("plane.png")
    expect(plane_png).to_be_visible(timeout=BUILD_MS)
    app.settle()

    saved = app.download(plane_png, tmp_path)
    assert saved.name == "plane.png"
    _assert_png(saved)
    app.expect_healthy()


@pytest.mark.no_sizing
def test_two_sessions_see_only_their_own_upload(open_dashboard: OpenDashboard, trace: Trace) -> None:
    code, conv = trace(CODE), trace(CONV)
    a = open_dashboard()
    a.upload_path(code)
    expect(a.metric("Requests")).to_have_text(CODE_ROWS, timeout=FIRST_LOAD_MS)
    expect(a.caption).to_contain_text(code.name, timeout=RERUN_MS)

    b = open_dashboard()
    # A's upload is not B's data: B starts on the demo, and its uploader is empty.
    expect(b.caption).to_contain_text("Demo mix", timeout=RERUN_MS)
    expect(b.caption).not_to_contain_text(code.name)
    expect(b.sidebar.get_by_role("button", name=re.compile(r"^Remove "))).to_have_count(0)
    b.upload_path(conv)
    expect(b.metric("Requests")).to_have_text(CONV_ROWS, timeout=FIRST_LOAD_MS)
    expect(b.caption).to_contain_text(conv.name, timeout=RERUN_MS)
    expect(b.caption).not_to_contain_text(code.name)

    # A reruns after B's upload (two page switches): still its own trace, everywhere it looks.
    a.go("Clusters")
    expect(a.caption).to_contain_text(f"applied to all {CODE_ROWS}", timeout=RERUN_MS)
    a.go("Shape", "Workload shape")
    expect(a.metric("Requests")).to_have_text(CODE_ROWS, timeout=RERUN_MS)
    expect(a.caption).to_contain_text(code.name, timeout=RERUN_MS)
    expect(a.caption).not_to_contain_text(conv.name)
    # Its uploader holds its one file, never the other session's.
    expect(a.sidebar.get_by_role("button", name=re.compile(r"^Remove "))).to_have_count(1)
    expect(a.sidebar.get_by_role("button", name=f"Remove {code.name}")).to_have_count(1)

    b.go("Clusters")
    expect(b.caption).to_contain_text(f"applied to all {CONV_ROWS}", timeout=RERUN_MS)
    a.expect_healthy()
    b.expect_healthy()


@pytest.mark.no_sizing
def test_a_wrong_file_gets_one_clear_line_and_the_app_stays_usable(open_dashboard: OpenDashboard) -> None:
    app = open_dashboard()
    app.upload("holiday.png", PNG_SIGNATURE + bytes(200), "image/png")
    expect(app.errors).to_have_count(1, timeout=FIRST_LOAD_MS)
    expect(app.errors).to_contain_text("holiday.png", timeout=RERUN_MS)
    app.expect_healthy()
    message = app.errors.inner_text().strip()
    assert "\n" not in message, f"the error should be one line: {message!r}"
    assert "Traceback" not in message

    app.pick_data("Demo mix (synthetic)")
    expect(app.heading("Workload shape")).to_be_visible(timeout=FIRST_LOAD_MS)
    expect(app.errors).to_have_count(0, timeout=RERUN_MS)
    expect(app.charts.first).to_be_visible(timeout=RERUN_MS)
    app.expect_healthy()


def test_a_test_sharing_its_server_cannot_open_the_capacity_page() -> None:
    """The tests marked no_sizing share one server (conftest.app_server); the Capacity page's sizings would outlive
    such a test and slow the next one's pages, so a shared test that opens it fails at once, saying why."""
    app = Dashboard(None, "http://127.0.0.1:1", no_sizing=True)   # refused before anything is clicked
    with pytest.raises(AssertionError, match="marked no_sizing.*'Capacity what-if'"):
        app.go("Capacity what-if")
