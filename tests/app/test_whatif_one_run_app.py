"""A trim or traffic step on the Capacity page is one script run, of the headline alone (issue 37, item 7).

The browser reruns the fragment that drew a widget when the widget moves. The step sliders used to be the entry
file's: a step started a full run, and the slider's callback ended it for a keyed rerun of the live fragments, two
runs a step. Now the page's main what-if fragment draws
them into their places in the sidebar, and a step is that fragment's run. AppTest always starts a full run, so a
step is sent here as the browser sends it: a rerun of the slider's own fragment, with the widgets' states.
"""
from __future__ import annotations

import pytest

from tests.app.dashboard import CAPACITY, Browser, as_the_browser, drawn_by, open_page, open_upload

STEPS = ("trim_input_pct", "trim_output_pct", "traffic")


@pytest.fixture
def browser(monkeypatch: pytest.MonkeyPatch) -> Browser:
    return as_the_browser(monkeypatch)


def test_a_capacity_step_is_one_run_of_the_headline_and_shows_the_move(browser: Browser) -> None:
    at = open_page(CAPACITY)
    fragments = {drawn_by(at, key) for key in STEPS}
    assert len(fragments) == 1 and None not in fragments, fragments   # the headline's own sliders
    browser.fragment = fragments.pop()
    at.slider(key="trim_input_pct").set_value(5).run()
    assert not at.exception, at.exception
    assert browser.runs() == [[browser.fragment]]   # one run, of the headline alone: no second run after it
    assert any(c.value == "The what-if: input trimmed 5%." for c in at.caption)
    assert [s.key for s in at.sidebar.slider if s.key in STEPS] == list(STEPS)   # redrawn in their places


def test_the_step_sliders_are_the_same_widgets_in_the_same_place_on_every_page() -> None:
    at = open_page("pages/clusters.py")
    on_clusters = [(s.key, s.id) for s in at.sidebar.slider]
    for page in ("pages/shape.py", CAPACITY, "pages/sessions.py"):
        at.switch_page(page).run()
        assert not at.exception, at.exception
        assert [(s.key, s.id) for s in at.sidebar.slider] == on_clusters, page
    assert [key for key, _ in on_clusters] == ["trim_input_pct", "trim_output_pct", "cache_hit_pct", "traffic"]


def test_a_step_from_a_page_left_meanwhile_reruns_the_page_shown(browser: Browser) -> None:
    # the user left Capacity and moved a slider the browser still showed from it: the step names Capacity's
    # headline, which the page shown does not draw; it reruns that page whole rather than a stale fragment
    at = open_page(CAPACITY)
    capacity_headline = drawn_by(at, "trim_input_pct")
    at.switch_page("pages/shape.py").run()
    assert drawn_by(at, "trim_input_pct") != capacity_headline
    browser.fragment = capacity_headline
    at.slider(key="trim_input_pct").set_value(5).run()
    assert not at.exception, at.exception
    assert browser.runs()[-1] is None   # ended in a full run of the page shown


def test_a_page_stopped_by_a_bad_upload_still_shows_the_step_sliders() -> None:
    at = open_upload("broken.csv", b"not,a,log\n1,2,3\n")
    assert at.error, "the upload's problem is shown"
    assert [s.key for s in at.sidebar.slider] == ["trim_input_pct", "trim_output_pct", "cache_hit_pct", "traffic"]


def test_a_headline_run_after_a_full_run_cut_short_reruns_the_page(browser: Browser) -> None:
    # a full run cut short before the headline drew loses the sliders' places in the sidebar (Streamlit re-places a
    # fragment's outside writes on each full run): a run of the headline alone then (a widget of its own, a keyed
    # rerun) reruns the page instead of drawing the sliders nowhere (an exception where the headline was)
    from components import sidebar

    at = open_page(CAPACITY)
    browser.fragment = drawn_by(at, "trim_input_pct")
    at.session_state[sidebar._LIVE] = None   # what a full run cut short leaves
    at.run()
    assert not at.exception, at.exception
    assert browser.runs() == [[browser.fragment], None]
