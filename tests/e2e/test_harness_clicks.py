"""The browser harness's clicks on static pages: a dropped page change (``Dashboard.go``) or button click
(``Dashboard.click_for_run``) is clicked again once; a page still on its way is waited for and never clicked twice (a
second click would start its run again); a run is seen on an app element drawn anew; a click that lands on something
else says what."""
from __future__ import annotations

import warnings

import pytest

from tests.needs import require_module  # noqa: E402  (skips locally, fails under CI=true)

require_module("playwright.sync_api", "the playwright package drives the browser tests")

from dashboard import Dashboard  # noqa: E402

pytestmark = pytest.mark.e2e

# Streamlit's frame as the harness reads it: the run state on stApp, the sidebar's navigation, the page title. A click
# on "Sessions" is dropped the first DROPS times; after that the navigation marks the page at once (as Streamlit's
# does) and the app shows it RUN_MS later, in the run state STATE meanwhile.
PAGE = """<div data-testid="stApp" data-test-script-state="notRunning">
  <section data-testid="stSidebar"><a data-testid="stSidebarNavLink" href="#" aria-current="page">Capacity</a>
    <a data-testid="stSidebarNavLink" id="to" href="#">Sessions</a></section>
  <main><h1>Capacity</h1></main></div>
<script>
  window.clicks = 0;
  document.getElementById('to').addEventListener('click', event => {
    event.preventDefault();
    window.clicks += 1;
    if (window.clicks <= DROPS) return;
    const app = document.querySelector('[data-testid=stApp]');
    app.setAttribute('data-test-script-state', 'STATE');
    document.querySelector('[aria-current=page]').removeAttribute('aria-current');
    event.target.setAttribute('aria-current', 'page');
    setTimeout(() => {
      document.querySelector('main').innerHTML = '<h1>Sessions</h1>';
      app.setAttribute('data-test-script-state', 'notRunning');
    }, RUN_MS);
  });
</script>"""


def _go(browser, drops: int, run_ms: int, state: str = "running") -> int:
    page = browser.new_page()
    try:
        page.set_content(PAGE.replace("DROPS", str(drops)).replace("RUN_MS", str(run_ms)).replace("STATE", state))
        app = Dashboard(page, "http://127.0.0.1")
        app.dropped_click_ms, app.first_load_ms = 500, 5000
        app.go("Sessions")
        return page.evaluate("window.clicks")
    finally:
        page.close()


def test_a_dropped_click_is_clicked_again(browser) -> None:
    with pytest.warns(UserWarning, match=r"the click on 'Sessions' left the app idle elsewhere .*'Capacity' as shown"):
        assert _go(browser, drops=1, run_ms=0) == 2


def test_a_page_on_its_way_is_waited_for_not_clicked_twice(browser) -> None:
    assert _go(browser, drops=0, run_ms=1500) == 1


def test_a_page_marked_shown_before_its_run_starts_is_not_clicked_twice(browser) -> None:
    assert _go(browser, drops=0, run_ms=1500, state="notRunning") == 1


# A button of the page (``Dashboard.click_for_run``, the every-button sweep's click): dropped the first DROPS times;
# after that its run shows on the app's element, or (REDRAW true) on an app element drawn anew in its place, as a
# rerun that remounts the app would; COVER lays an overlay over it, as a click can land on something else.
BUTTON_PAGE = """<div data-testid="stApp" data-test-script-state="notRunning"><main>
  <button id="go" style="margin: 40px">Design the fleet</button>
  <div id="cover" style="position: absolute; left: 0; top: 0; width: 400px; height: 200px; display: COVER">x</div>
</main></div>
<script>
  window.clicks = 0;
  document.getElementById('go').addEventListener('click', () => {
    window.clicks += 1;
    if (window.clicks <= DROPS) return;
    let app = document.querySelector('[data-testid=stApp]');
    if (REDRAW) {
      const fresh = app.cloneNode(true);
      app.replaceWith(fresh);
      app = fresh;
    }
    app.setAttribute('data-test-script-state', 'running');
    setTimeout(() => app.setAttribute('data-test-script-state', 'notRunning'), 300);
  });
</script>"""


def _click(browser, drops: int = 0, redraw: bool = False, cover: bool = False) -> int:
    page = browser.new_page()
    try:
        page.set_content(BUTTON_PAGE.replace("DROPS", str(drops)).replace("REDRAW", str(redraw).lower())
                         .replace("COVER", "block" if cover else "none"))
        app = Dashboard(page, "http://127.0.0.1")
        app.dropped_click_ms, app.build_ms = 500, 1500
        app.click_for_run(page.get_by_role("button", name="Design the fleet"), force=True)
        return page.evaluate("window.clicks")
    finally:
        page.close()


def test_a_button_click_that_started_no_run_is_clicked_again(browser) -> None:
    with pytest.warns(UserWarning, match=r"a click started no run in 0 s \(the control itself at its centre; "
                                         r"script state notRunning"):
        assert _click(browser, drops=1) == 2


def test_a_run_on_an_app_element_drawn_anew_is_seen_and_not_clicked_twice(browser) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")   # a second click would warn
        assert _click(browser, redraw=True) == 1


def test_a_covered_button_fails_saying_what_covers_it(browser) -> None:
    with pytest.warns(UserWarning), pytest.raises(AssertionError, match=r'covered by <div id="cover"'):
        _click(browser, cover=True)
