"""Every page in any order, in a real browser: every button of the Capacity page clicked, every other page visited
and the Capacity page visited again, the sidebar's unrelated settings changed; no exception anywhere, ever.

Run on the demo and on an upload of a real trace: a BurstGPT slice as it is published (CSV, relative timestamps,
sessions). Each log costs about three minutes here, so other upload formats are left to the AppTest and ingest tests
(tests/app/test_app.py opens every page on every real trace; the OpenAI usage export has ingest tests of its own).
"""
from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.needs import require_module  # noqa: E402  (skips locally, fails under CI=true)

require_module("playwright.sync_api", "the playwright package drives the browser tests")

from dashboard import FIRST_LOAD_MS, RERUN_MS, Dashboard, OpenDashboard  # noqa: E402
from playwright.sync_api import expect  # noqa: E402

pytestmark = pytest.mark.e2e

CAPACITY = "Capacity what-if"
PAGES = {"Shape": "Workload shape", "Clusters": None, "Sessions & prefix cache": None, "Report": None}
BURSTGPT = "burstgpt/burstgpt3_slice.csv"

Trace = Callable[[str], Path]


def _healthy(app: Dashboard, where: str) -> None:
    """No traceback box and no error text anywhere on the page (sidebar included)."""
    app.settle()
    if app.exceptions.count():
        raise AssertionError(f"{where}: an exception is shown: {app.exceptions.first.inner_text()[:600]}")
    text = app.page.get_by_test_id("stApp").inner_text()
    for word in ("Traceback", "Error:", "Exception"):
        assert word not in text, f"{where}: the page says {word!r}: …{text[max(0, text.find(word) - 200):][:600]}"


def _click_every_button(app: Dashboard) -> list[str]:
    """Click each button and switch of the page once, as it appears (a result can bring new ones); their labels."""
    clicked: list[str] = []
    while True:
        fresh = None
        for role in ("button", "switch"):
            controls = app.main.get_by_role(role)
            for i, (label, clickable) in enumerate(controls.evaluate_all(CONTROLS)):
                if label and label not in clicked and clickable:
                    fresh = (label, controls.nth(i))
                    break
            if fresh is not None:
                break
        if fresh is None:
            return clicked
        label, control = fresh
        clicked.append(label)
        started = time.monotonic()
        control.evaluate("e => e.scrollIntoView({block: 'center'})")   # never under the app's sticky header
        app.click_for_run(control, force=True)   # a switch's label lies over its input
        _healthy(app, f"after clicking {label!r}")
        print(f"{label}: {time.monotonic() - started:.1f} s")   # shown with -s or on a failure


# Buttons that belong to a widget (an expander's header, a chart's toolbar, a table's menu, a selectbox, an uploader,
# a number's −/+ steps) are not the page's own actions; downloads change nothing on the page (the PNGs and CSVs have
# tests of their own).
IN_WIDGET = ("[data-testid=stExpander] summary, .modebar, [data-testid=stDataFrame], "
             "[data-testid=stDataFrameResizable], [data-testid=stSelectbox], [data-testid=stMultiSelect], "
             "[data-testid=stFileUploader], [data-testid=stElementToolbar], [data-testid=stTooltipIcon], "
             "[data-testid=stNumberInput], [data-testid=stDownloadButton]")
# Every control a role matched, read in one round trip to the browser: [label, clickable]. The label is the last
# line of its aria-label or text (a button's text starts with its icon's name, "play_arrow"); clickable is
# playwright's own enabled and visible (no :disabled, no aria-disabled; visible with a non-empty box) and not part
# of a widget. Asking playwright element by element took five round trips per control per click: on the Capacity
# page's hundreds of chart and table buttons, most of the sweep's time.
CONTROLS = """els => els.map(e => {
    const lines = (e.getAttribute('aria-label') || e.innerText || '').trim().split(/\\r?\\n/);
    const label = (lines[lines.length - 1] || '').trim();
    const enabled = !e.matches(':disabled') && !e.closest('[aria-disabled=true]');
    const box = e.getBoundingClientRect();
    const visible = e.checkVisibility() && getComputedStyle(e).visibility === 'visible' && box.width > 0
        && box.height > 0;
    return [label, enabled && visible && !e.closest('%s')];
})""" % IN_WIDGET


def _choose(app: Dashboard, label: str, option: str) -> None:
    """Pick ``option`` in the sidebar selectbox ``label``."""
    app.settle()
    combo = app.sidebar.get_by_role("combobox", name=label, exact=True)
    combo.evaluate("e => e.scrollIntoView({block: 'center'})")
    combo.click(timeout=RERUN_MS)
    combo.press_sequentially(option)   # as a keyboard user picks: type to filter, Enter to choose
    combo.press("Enter")
    expect(combo).to_have_value(option, timeout=RERUN_MS)


# The demo's sweep of every button runs without a browser (tests/app/test_every_page_app.py); here, in a real
# browser, the real BurstGPT upload (about 3 minutes a log: the two together put CI over its 25 minutes).
@pytest.mark.parametrize("log", ["burstgpt"])
def test_no_page_ever_shows_an_exception(open_dashboard: OpenDashboard, trace: Trace, log: str) -> None:
    app = open_dashboard()
    if log == "burstgpt":
        app.upload_path(trace(BURSTGPT))
    if log != "demo":
        expect(app.sidebar.get_by_role("radio", name="Your upload")).to_be_checked(timeout=FIRST_LOAD_MS)
    _healthy(app, "the Shape page")
    app.go(CAPACITY)
    # the page may rerun once more (the log's own prefix-cache share becomes the slider's value): its last section
    # drawn, every button is there
    expect(app.main.get_by_role("button", name="Compare all deployments")).to_be_visible(timeout=FIRST_LOAD_MS)
    _healthy(app, CAPACITY)
    clicked = _click_every_button(app)
    assert "Design the fleet" in clicked and "Compare all deployments" in clicked, clicked
    # the design's result, not its button (a caption drawn with the table: the table's own cells are painted on a
    # canvas, and a column beyond the grid's width is not in the page at all, as on the demo's five products)
    designs = app.main.get_by_text("Every design is judged as the headline is")
    expect(designs.first).to_be_attached(timeout=RERUN_MS)
    for link, title in PAGES.items():
        app.go(link, title)
        _healthy(app, link)
        _click_every_button(app)
        app.go(CAPACITY)
        _healthy(app, f"{CAPACITY}, back from {link}")
        expect(designs.first).to_be_attached(timeout=RERUN_MS)   # the result held, not lost on the way
    _choose(app, "Speculative decoding", "EAGLE-3 head")
    _healthy(app, "after turning on speculative decoding")
    _choose(app, "KV cache", "fp8")
    _healthy(app, "after setting the KV cache to FP8")
    app.go("Shape", "Workload shape")
    app.go(CAPACITY)
    _healthy(app, f"{CAPACITY} after the sidebar changes")


# A page of the controls the sweep meets, each kind once: what the sweep reads of them in one round trip must be
# what playwright says of each (its label, is_enabled, is_visible) and whether it sits in a widget.
SWEEP_PAGE = """<main>
  <button><span style="display: block">play_arrow</span><div>Design the fleet</div></button>
  <button aria-label="Compare all deployments">compare</button>
  <button disabled>Disabled</button>
  <button aria-disabled="true">Aria disabled</button>
  <fieldset disabled><button>In a disabled fieldset</button></fieldset>
  <button style="visibility: hidden">Invisible</button>
  <button style="width: 0; height: 0; padding: 0; border: 0; overflow: hidden">No box</button>
  <button style="opacity: 0">Transparent</button>
  <div class="modebar"><button>Zoom</button></div>
  <div data-testid="stDownloadButton"><button>Download</button></div>
  <details data-testid="stExpander"><summary><span role="button">Expander</span></summary></details>
  <div role="button">A div acting as a button</div>
  <button></button>
  <label><input type="checkbox" role="switch" aria-label="Plan it">Plan it</label>
  <input type="checkbox" role="switch" disabled aria-label="Off">
</main>"""


def test_the_sweep_reads_each_control_as_playwright_does(browser) -> None:
    page = browser.new_page()
    try:
        page.set_content(SWEEP_PAGE)
        for role in ("button", "switch"):
            controls = page.get_by_role("main").get_by_role(role)
            expected = []
            for control in controls.all():
                lines = (control.get_attribute("aria-label") or control.inner_text()).strip().splitlines()[-1:]
                widget = control.evaluate(f"e => !!e.closest({IN_WIDGET!r})")
                expected.append([lines[0].strip() if lines else "",
                                 control.is_enabled() and control.is_visible() and not widget])
            assert controls.evaluate_all(CONTROLS) == expected, role
        clickable = [label for role in ("button", "switch")
                     for label, ok in page.get_by_role("main").get_by_role(role).evaluate_all(CONTROLS) if ok and label]
        assert clickable == ["Design the fleet", "Compare all deployments", "Transparent", "A div acting as a button",
                             "Plan it"], clickable
    finally:
        page.close()
