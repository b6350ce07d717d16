"""What a page says, in a real browser: log text shown literally, and no "None", "nan" or cut-off value anywhere.

Streamlit renders markdown; a product or model name from an uploaded log must never become a link, emphasis,
colour or maths on the page. Every metric and table cell on each page is read for every real trace.
"""
from __future__ import annotations

import io
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from tests.needs import require_module

require_module("playwright.sync_api", "the playwright package drives the browser tests")

from dashboard import FIRST_LOAD_MS, RERUN_MS, Dashboard, OpenDashboard  # noqa: E402
from playwright.sync_api import expect  # noqa: E402

pytestmark = pytest.mark.e2e

JOINER = "\u2060"  # the invisible word joiner that stops bare addresses being linked
LINK = "[click me](http://example.invalid/x)"
EMPHASIS = "**bold** _it_"
COLOUR = ":red[alarm]"
MATHS = "$\\LaTeX$"
HOSTILE_PRODUCTS = (f"{LINK} {MATHS}", f"{EMPHASIS} {COLOUR}")
HOSTILE_MODEL = f"<b>m</b> {COLOUR} www.example.invalid"
HOSTILE_FILE = "**report** :blue[q3] $x$.csv"
# The words that would stand alone in <strong>/<em>/<b> if the names above were rendered as markdown or HTML.
EMPHASISED_IF_RENDERED = {"bold", "it", "report", "m", *(f"s{i}" for i in range(40))}


def _hostile_log() -> bytes:
    """Two products split across corners, mostly on one model: mixed-product and mixed-pool warnings name them."""
    rng = np.random.default_rng(7)
    n = 1200   # 600 a product: enough requests for the mixed flag's test of modes (500 at least)
    product = np.repeat(HOSTILE_PRODUCTS, n // 2)
    # The first product is bimodal (long-in/short-out and short-in/long-out), the second sits in the chat corner.
    long_in = rng.random(n) < 0.5
    inputs = np.where(product == HOSTILE_PRODUCTS[0], np.where(long_in, rng.integers(8_000, 30_000, n),
                                                                rng.integers(100, 400, n)), rng.integers(300, 900, n))
    outputs = np.where(product == HOSTILE_PRODUCTS[0], np.where(long_in, rng.integers(5, 30, n),
                                                                 rng.integers(1_500, 4_000, n)), rng.integers(80, 300, n))
    frame = pd.DataFrame({
        "timestamp": pd.Timestamp("2026-01-01", tz="UTC") + pd.to_timedelta(np.sort(rng.uniform(0, 3600, n)), "s"),
        "product": product, "model": np.where(np.arange(n) % 10 == 0, "plain-model", HOSTILE_MODEL),
        "session_id": [f"*s{i % 40}* [x](http://example.invalid/{i % 40})" for i in range(n)],
        "input_tokens": inputs, "output_tokens": outputs,
    })
    buffer = io.StringIO()
    frame.to_csv(buffer, index=False)
    return buffer.getvalue().encode()


def _assert_nothing_rendered(app: Dashboard, where: str) -> None:
    page = app.page
    assert page.locator("a[href*='example.invalid']").count() == 0, f"{where}: a link from the log is live"
    assert app.main.locator("img[src*='example.invalid']").count() == 0, f"{where}: an image from the log"
    assert app.main.locator(".katex, math").count() == 0, f"{where}: maths typeset from the log"
    # The app bolds whole names ("**Pool <name>**"); emphasis *inside* a name would make these words alone bold.
    emphasised = {t.strip() for tag in ("strong", "em", "b", "i") for t in app.main.locator(tag).all_inner_texts()}
    leaked = emphasised & EMPHASISED_IF_RENDERED
    assert not leaked, f"{where}: emphasis made from log text: {leaked}"
    coloured = page.evaluate("""() => [...document.querySelectorAll('[data-testid=stMain] span')]
        .filter(e => /alarm|q3/.test(e.textContent) && e.children.length === 0 && e.getAttribute('style'))
        .map(e => e.textContent)""")
    assert not coloured, f"{where}: coloured text from the log: {coloured}"


def test_names_from_a_log_are_shown_as_typed(open_dashboard: OpenDashboard) -> None:
    app = open_dashboard()
    app.upload(HOSTILE_FILE, _hostile_log())
    expect(app.metric("Requests")).to_have_text("1,200", timeout=FIRST_LOAD_MS)
    app.settle()
    expect(app.main.get_by_test_id("stAlertContentWarning").first).to_be_visible(timeout=RERUN_MS)
    text = app.main.inner_text().replace(JOINER, "")
    # The names read literally where the page names them: caption, warnings, recommendations.
    for literal in (HOSTILE_FILE, HOSTILE_PRODUCTS[0], HOSTILE_PRODUCTS[1]):
        assert literal in text, f"{literal!r} is not shown as typed on the Shape page"
    _assert_nothing_rendered(app, "Shape")
    app.go("Clusters")
    expect(app.main.get_by_test_id("stAlertContentWarning").first).to_be_visible(timeout=RERUN_MS)
    text = app.main.inner_text().replace(JOINER, "")
    for literal in (HOSTILE_PRODUCTS[0], HOSTILE_MODEL):
        assert literal in text, f"{literal!r} is not shown as typed on the Clusters page"
    _assert_nothing_rendered(app, "Clusters")
    # Capacity: the request-rate chart's legend names each product as typed (plotly reads <b>, $...$ as markup)
    app.go("Capacity what-if", "Capacity what-if")
    legend = app.main.locator(".legendtext")
    expect(legend.first).to_be_attached(timeout=RERUN_MS)
    shown = {t.replace(JOINER, "") for t in legend.all_text_contents()}
    for literal in HOSTILE_PRODUCTS:
        assert literal in shown, f"{literal!r} is not in the Capacity page's legend as typed: {shown}"
    _assert_nothing_rendered(app, "Capacity what-if")
    # Sessions: the agent verdicts name each product in a table cell, as typed
    app.go("Sessions & prefix cache", "Sessions & prefix cache")
    tables = app.main.get_by_test_id("stDataFrame")
    expect(tables.first).to_be_visible(timeout=RERUN_MS)
    # the grid fills its accessible cells after it paints: wait for the agent table's rows, then read them all
    expect(tables.first.locator("td").first).to_be_attached(timeout=RERUN_MS)
    cells = set()
    for i in range(tables.count()):
        tables.nth(i).scroll_into_view_if_needed()
        cells |= {c.replace(JOINER, "") for c in tables.nth(i).evaluate(CELLS_JS)}
    for literal in HOSTILE_PRODUCTS:
        assert literal in cells, f"{literal!r} is not in a Sessions table cell as typed"
    _assert_nothing_rendered(app, "Sessions & prefix cache")
    # Report: the caption names the uploaded file as typed
    app.go("Report", "Report")
    assert HOSTILE_FILE in app.main.inner_text().replace(JOINER, ""), "the file name is not shown as typed on Report"
    _assert_nothing_rendered(app, "Report")
    app.expect_healthy()


# --- None / nan / cut-off values on every page, for every real trace -------------------------------------------
REAL_TRACES = (
    "azure_llm_2023/AzureLLMInferenceTrace_code.csv",
    "azure_llm_2023/AzureLLMInferenceTrace_conv.csv",
    "burstgpt/burstgpt_slice.csv",
    "burstgpt/burstgpt3_slice.csv",
    "mooncake_fast25/conversation_trace.jsonl.gz",
    "mooncake_fast25/synthetic_trace.jsonl",
    "tracelab_example/round_trace.jsonl",
    "vidur_arxiv_summarization/arxiv_summarization_stats_llama2_tokenizer_filtered_v2.csv",
)
PAGES = (("Shape", "Workload shape"), ("Clusters", "Clusters"), ("Capacity what-if", "Capacity what-if"),
         ("Sessions & prefix cache", "Sessions & prefix cache"))
MISSING_WORDS = re.compile(r"(?<![\w-])(None|nan|NaN|<NA>|NaT|inf)(?![\w-])")
# Each metric's value and label, and whether either is wider than its box (an ellipsis on screen).
METRICS_JS = """() => [...document.querySelectorAll('[data-testid=stMain] [data-testid=stMetric]')].map(m => {
  const cut = el => !!el && [el, ...el.querySelectorAll('*')].some(e => e.scrollWidth > e.clientWidth + 1);
  const v = m.querySelector('[data-testid=stMetricValue]'), l = m.querySelector('[data-testid=stMetricLabel]');
  return {label: l ? l.innerText : '', value: v ? v.innerText : '', cut: cut(v) || cut(l)}; })"""
# Table cells as the grid's accessible DOM holds them: a null cell is drawn as "None" and is empty here.
CELLS_JS = "table => [...table.querySelectorAll('td')].map(c => c.textContent)"


def _problems(app: Dashboard, page: str) -> tuple[list[str], int]:
    """What reads wrong on the page, and how many table cells were read."""
    found, read = [], 0
    for m in app.page.evaluate(METRICS_JS):
        if m["cut"]:
            found.append(f"{page}: metric {m['label']!r} is cut off ({m['value']!r})")
        if MISSING_WORDS.search(m["value"]) or not m["value"].strip():
            found.append(f"{page}: metric {m['label']!r} reads {m['value']!r}")
    tables = app.main.get_by_test_id("stDataFrame")
    for i in range(tables.count()):
        table = tables.nth(i)
        if not table.is_visible():  # inside a closed expander
            continue
        table.scroll_into_view_if_needed()  # the grid fills its cells once it is on screen
        expect(table.locator("td").first).to_be_attached(timeout=RERUN_MS)
        cells = table.evaluate(CELLS_JS)
        if not cells:   # a drawn table whose cells were not read would pass any check below
            found.append(f"{page}: table {i} is on screen but none of its cells could be read")
        read += len(cells)
        bad = [c for c in cells if not c.strip() or MISSING_WORDS.fullmatch(c.strip())]
        if bad:
            found.append(f"{page}: table {i} has {len(bad)} empty/None/nan cells of {len(cells)}")
    text = app.main.inner_text()
    found += [f"{page}: text {hit.group(0)!r}" for hit in MISSING_WORDS.finditer(text)]
    return found, read


@pytest.mark.parametrize("relative", REAL_TRACES, ids=lambda r: Path(r).stem[:24])
def test_every_metric_and_cell_reads_as_a_value(open_dashboard: OpenDashboard, trace, relative: str) -> None:
    path = trace(relative)
    app = open_dashboard()
    app.upload_path(path)
    expect(app.caption).to_contain_text(path.name, timeout=FIRST_LOAD_MS)
    # The per-product table is drawn (the page may rerun once more for the measured prefix-cache default).
    expect(app.main.get_by_test_id("stDataFrame").first).to_be_visible(timeout=RERUN_MS)
    app.settle()
    expect(app.main.get_by_test_id("stDataFrame").first).to_be_visible(timeout=RERUN_MS)
    problems, read = _problems(app, "Shape")
    assert read > 0, "no table cell was read on the Shape page: the check would pass on anything"
    for link, title in PAGES[1:]:
        app.go(link, title)
        found, _ = _problems(app, title)   # every table on screen must give its cells (checked inside)
        problems += found
    assert not problems, "\n".join(problems)
    app.expect_healthy()
