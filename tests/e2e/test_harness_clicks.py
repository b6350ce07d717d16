"""The browser harness's page change (``Dashboard.go``) on static pages: a dropped click is clicked again once, a
page that is still on its way is waited for and never clicked twice (a second click would start its run again)."""
from __future__ import annotations

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
