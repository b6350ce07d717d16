"""One browser session of the dashboard, as a user meets it: what they see, what they click, what they download.

Every wait is a playwright ``expect`` with an explicit timeout: a Streamlit rerun takes a second or two, a first
load of a fresh session (demo generated, log analysed) up to half a minute on a busy two-core machine.
"""
from __future__ import annotations

import re
import warnings
from collections.abc import Callable
from pathlib import Path

from playwright.sync_api import Locator, Page, expect
from playwright.sync_api import TimeoutError as PlaywrightTimeoutError

FIRST_LOAD_MS = 90_000  # a fresh session analyses its log before anything is drawn
RERUN_MS = 45_000  # a widget change: rerun and redraw, sometimes a second rerun (measured prefix-cache default)
BUILD_MS = 180_000  # the report bundle renders its PNG charts through a headless chromium of its own
SIZED_MS = 300_000  # the Capacity headline's replays of a log on a busy two-core machine
# Seen once in CI (BurstGPT slice, Capacity to Sessions, after the Capacity page had been read): the click on a
# sidebar link left the previous page on screen for the whole FIRST_LOAD_MS. Not reproduced since: 20 clicks at
# 1-14 s into the Capacity page's sizings, quiet and loaded, and the same test 10 times over. After this long with the
# app idle on another page a user clicks again; ``go`` does so once, with a warning that the run's summary lists, and
# a page that still does not come fails with the app's run state and the page its navigation marks as shown. Seen once
# more (the every-button sweep, a click after "Calibrate" that started no run in 180 s): ``click_for_run`` does the
# same for a button, and says what lay at its centre.
DROPPED_CLICK_MS = 30_000
SIZING_PAGES = ("Capacity what-if",)  # the pages that start sizings on the server's pools (components/fleet_*.py)

# Counts the changes of the app's script-run state from now on (a click's rerun leaves "notRunning" at least once):
# waiting for one replaces a fixed pause, which a loaded machine outlasted before the rerun had even started. Watched
# on the whole document, not on the app's element alone, so an app element drawn anew still counts.
WATCH_RUNS = """() => {
    if (window.__shapevizRunWatch) window.__shapevizRunWatch.disconnect();
    window.__shapevizRunChanges = 0;
    const isApp = n => n.nodeType === 1 && (n.matches('[data-testid=stApp]') || n.querySelector('[data-testid=stApp]'));
    window.__shapevizRunWatch = new MutationObserver(records => {
        for (const r of records) {
            if (r.type === 'attributes' || [...r.addedNodes].some(isApp)) window.__shapevizRunChanges += 1;
        }
    });
    window.__shapevizRunWatch.observe(document.body, {subtree: true, childList: true, attributes: true,
                                                      attributeFilter: ['data-test-script-state']});
}"""
RUN_CHANGED = "() => window.__shapevizRunChanges > 0"
# What lies at a control's centre, for a click that started no run: the control itself, or what covers it.
AT_CENTRE = """e => {
    const box = e.getBoundingClientRect();
    const top = document.elementFromPoint(box.left + box.width / 2, box.top + box.height / 2);
    if (!e.isConnected) return 'the control is no longer in the page';
    if (top === null) return 'nothing at its centre (off screen)';
    if (e === top || e.contains(top) || top.contains(e)) return 'the control itself at its centre';
    return 'covered by ' + top.outerHTML.slice(0, 160);
}"""

class Dashboard:
    """A page of the live app in its own browser context (so its own Streamlit session)."""

    def __init__(self, page: Page, base_url: str, no_sizing: bool = False) -> None:
        self.page = page
        self.base_url = base_url.rstrip("/")
        self.no_sizing = no_sizing   # the test shares its server (conftest.app_server): no page may start a sizing
        self.dropped_click_ms = DROPPED_CLICK_MS
        self.first_load_ms = FIRST_LOAD_MS
        self.build_ms = BUILD_MS

    # --- where the user looks -------------------------------------------------------------------------------
    @property
    def main(self) -> Locator:
        """The page body, right of the sidebar."""
        return self.page.get_by_role("main")

    @property
    def sidebar(self) -> Locator:
        """The shared sidebar: navigation, data source, what-if levers."""
        return self.page.get_by_test_id("stSidebar")

    def heading(self, title: str) -> Locator:
        """A page title (``st.title``)."""
        return self.main.get_by_role("heading", name=title, exact=True)

    def metric(self, label: str) -> Locator:
        """The value of the ``st.metric`` with this label."""
        label_el = self.page.get_by_test_id("stMetricLabel").get_by_text(label, exact=True)
        return self.main.get_by_test_id("stMetric").filter(has=label_el).get_by_test_id("stMetricValue")

    def metric_delta(self, label: str) -> Locator:
        """The delta line under the ``st.metric`` with this label (present only when something moved)."""
        label_el = self.page.get_by_test_id("stMetricLabel").get_by_text(label, exact=True)
        return self.main.get_by_test_id("stMetric").filter(has=label_el).get_by_test_id("stMetricDelta")

    @property
    def caption(self) -> Locator:
        """The first caption of the page: the dataset and its load report on the Shape page."""
        return self.main.get_by_test_id("stCaptionContainer").first

    @property
    def charts(self) -> Locator:
        """Every plotly chart drawn on the page."""
        return self.main.locator(".js-plotly-plot")

    @property
    def errors(self) -> Locator:
        """The text of every ``st.error`` box on the page."""
        return self.main.get_by_test_id("stAlertContentError").get_by_test_id("stMarkdownContainer")

    @property
    def exceptions(self) -> Locator:
        """Streamlit's red traceback box: a user must never see one."""
        return self.page.get_by_test_id("stException")

    # --- what the user does ---------------------------------------------------------------------------------
    def open(self, title: str = "Workload shape") -> Dashboard:
        """Load the app and wait until the first page has drawn its title."""
        self.page.goto(self.base_url + "/", wait_until="domcontentloaded", timeout=FIRST_LOAD_MS)
        self._expect_page(title)
        return self

    def go(self, link: str, title: str | None = None) -> None:
        """Click a page in the sidebar navigation and wait for its title."""
        if self.no_sizing and link in SIZING_PAGES:
            raise AssertionError(f"this test is marked no_sizing and shares its server with other tests, but opens "
                                 f"{link!r}, whose sizings would go on after it and slow the next test's pages: "
                                 f"drop the mark")
        target = self.sidebar.get_by_role("link", name=link, exact=True)
        target.click()
        if not self._shows(title or link, self.dropped_click_ms) and self._idle_elsewhere(target):
            warnings.warn(f"the click on {link!r} left the app idle elsewhere ({self.where()}); clicking again",
                          stacklevel=2)   # in the run's warnings summary, the test passing or not
            target.click()
        self._expect_page(title or link)
        self.settle()

    def _shows(self, title: str, timeout_ms: float) -> bool:
        """Whether the page ``title`` (or a traceback) is on screen within ``timeout_ms``."""
        try:
            expect(self.heading(title).or_(self.exceptions).first).to_be_visible(timeout=timeout_ms)
        except AssertionError:
            return False
        return True

    def _idle_elsewhere(self, target: Locator) -> bool:
        """The app has no run going and its navigation does not mark ``target`` as the page shown."""
        return self._idle() and target.get_attribute("aria-current") != "page"

    def where(self) -> str:
        """The app's script-run state and the page its navigation marks as shown, for a failure message."""
        state = self.page.get_by_test_id("stApp").get_attribute("data-test-script-state")
        shown = self.sidebar.locator("[data-testid=stSidebarNavLink][aria-current=page]")
        page = shown.first.inner_text() if shown.count() else "none"
        return f"script state {state}; the navigation marks {page!r} as shown"

    def _expect_page(self, title: str) -> None:
        # A traceback instead of the page ends the wait at once, with the traceback as the failure message.
        if not self._shows(title, self.first_load_ms):
            raise AssertionError(f"the {title!r} page did not come within {self.first_load_ms / 1000:.0f} s "
                                 f"({self.where()})")
        if self.exceptions.count():
            raise AssertionError(f"the {title!r} page shows an exception: {self.exceptions.first.inner_text()}")

    def click_and_settle(self, control: Locator) -> None:
        """Click a control of the page, then wait until the rerun it asked for has started and finished (however
        long it runs: a comparison of every deployment on a busy machine outlasted a fixed 45 s)."""
        self.settle()
        self.click_for_run(control)

    def click_for_run(self, control: Locator, force: bool = False) -> None:
        """Click a control of a settled page and wait until the rerun it asked for has started, then finished.

        A click that started no run within ``dropped_click_ms``, the app idle, is clicked once more, as a user
        would, with a warning that says what lay at the control's centre (seen once in CI: a click in the every-button
        sweep that started nothing in 180 s). A second click that starts nothing fails with the same."""
        self.page.evaluate(WATCH_RUNS)   # the page is settled: any change of its run state from here is the click's
        control.click(timeout=RERUN_MS, force=force)
        if not self._run_changed(self.dropped_click_ms) and self._idle():
            warnings.warn(f"a click started no run in {self.dropped_click_ms / 1000:.0f} s "
                          f"({control.evaluate(AT_CENTRE)}; {self.where()}); clicking again", stacklevel=2)
            control.click(timeout=RERUN_MS, force=force)
        if not self._run_changed(self.build_ms):
            raise AssertionError(f"a click started no run in {self.build_ms / 1000:.0f} s "
                                 f"({control.evaluate(AT_CENTRE)}; {self.where()})")
        expect(self.page.get_by_test_id("stApp")).to_have_attribute("data-test-script-state", "notRunning",
                                                                    timeout=self.build_ms)

    def _run_changed(self, timeout_ms: float) -> bool:
        """Whether the app's run state has changed since ``WATCH_RUNS`` was evaluated, within ``timeout_ms``."""
        try:
            self.page.wait_for_function(RUN_CHANGED, timeout=timeout_ms)
        except PlaywrightTimeoutError:
            return False
        return True

    def _idle(self) -> bool:
        return self.page.get_by_test_id("stApp").get_attribute("data-test-script-state") == "notRunning"

    def upload(self, name: str, data: bytes, mime: str = "text/csv") -> None:
        """Drop one file into the sidebar's uploader, as a file chooser would."""
        files = [{"name": name, "mimeType": mime, "buffer": data}]
        self.sidebar.locator("input[type=file]").set_input_files(files, timeout=RERUN_MS)

    def upload_path(self, path: Path) -> None:
        """Upload a file from disk (a real trace) under its own name."""
        self.sidebar.locator("input[type=file]").set_input_files(path, timeout=RERUN_MS)

    def pick_data(self, label: str) -> None:
        """Choose a log in the sidebar's "Log to analyse" radio."""
        self.sidebar.get_by_role("radiogroup", name="Log to analyse").get_by_text(label, exact=True).click()

    def move_slider(self, name: str, key: str, shows: str) -> Locator:
        """Press ``key`` on the sidebar slider ``name`` (a hand on the keyboard) until it shows ``shows``."""
        slider = self.sidebar.get_by_role("slider", name=name)
        slider.focus()
        slider.press(key)
        expect(slider).to_have_attribute("aria-valuetext", shows, timeout=RERUN_MS)
        return slider

    def download(self, button: Locator, folder: Path, timeout_ms: float = RERUN_MS) -> Path:
        """Click a download button and save what the browser receives under its suggested name."""
        with self.page.expect_download(timeout=timeout_ms) as info:
            button.click(timeout=RERUN_MS)
        download = info.value
        assert download.failure() is None, f"download of {download.suggested_filename} failed: {download.failure()}"
        target = folder / download.suggested_filename
        download.save_as(target)
        return target

    def download_button(self, label: str) -> Locator:
        """The ``st.download_button`` whose label is exactly this text (its icon is not part of the label)."""
        label_el = self.page.get_by_test_id("stMarkdownContainer").get_by_text(label, exact=True)
        return self.main.get_by_test_id("stDownloadButton").filter(has=label_el).get_by_role("button")

    # --- waiting ----------------------------------------------------------------------------------------------
    def settle(self) -> None:
        """Wait until the script run that the last action started has finished.

        Call it after a positive wait (the new content is on screen): the app then may still rerun once more,
        e.g. when the measured prefix-cache share becomes the slider's default.
        """
        expect(self.page.get_by_test_id("stApp")).to_have_attribute(
            "data-test-script-state", "notRunning", timeout=FIRST_LOAD_MS
        )

    def sized(self) -> None:
        """Wait until the Capacity headline shows the simulated answer of the current what-if (until then it shows the
        analytic estimate, whose replicas and pressure differ), and the page has settled."""
        expect(self.metric("GPUs colocated (simulated)")).to_be_visible(timeout=SIZED_MS)
        self.settle()

    def expect_healthy(self) -> None:
        """No traceback box once the page has settled."""
        self.settle()
        expect(self.exceptions).to_have_count(0, timeout=RERUN_MS)


OpenDashboard = Callable[[], Dashboard]


def ms_p90(text: str) -> float:
    """The p90 of a "p50 / p90" latency metric (ms in its label) as a number; "saturated" is worse than any."""
    p90 = text.split("/")[-1].strip()
    if p90 == "saturated":
        return float("inf")
    match = re.fullmatch(r"([\d,.]+)(?: ms)?", p90)
    assert match, f"not a latency: {text!r}"
    return float(match.group(1).replace(",", ""))


def percent(text: str) -> float:
    """A "12%" metric value as 12.0."""
    match = re.fullmatch(r"(-?[\d,.]+)%", text.strip())
    assert match, f"not a percentage: {text!r}"
    return float(match.group(1).replace(",", ""))
