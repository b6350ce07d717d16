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


def test_a_step_starts_the_answer_polls_clock_anew_and_a_sized_step_stops_it(browser: Browser) -> None:
    # A step is the headline's run alone, so no full run resets the browser's timers any more: a poll still running
    # from the step before would fire inside this one (the browser keeps a timer whose interval is unchanged), and
    # once the answer is in, a poll left behind would rerun the headline every second for nothing.
    from components import fleet_answer

    at = open_page(CAPACITY)
    fleet_answer.wait_all(timeout=600)
    at.run()   # sized: the page shows the simulated answer
    browser.fragment = drawn_by(at, "trim_input_pct")
    clocks = []
    for pct in (45, 55):   # two what-ifs no test here sizes: the answer line polls, each time on a clock of its own
        at.slider(key="trim_input_pct").set_value(pct).run()
        assert not at.exception, at.exception
        assert browser.runs() == [[browser.fragment]]
        polls = browser.sent("auto_rerun")
        assert len(polls) == 1, polls   # the answer's line (the cache-aware lever's waits for the answer)
        clocks.append({p.auto_rerun.fragment_id: p.auto_rerun.interval for p in polls})
    assert clocks[0].keys() == clocks[1].keys()
    assert all(clocks[0][f] != clocks[1][f] for f in clocks[0]), clocks   # a new interval: a new timer
    fleet_answer.wait_all(timeout=600)
    at.slider(key="trim_input_pct").set_value(0).run()   # back to today's what-if, sized at the start
    assert not at.exception, at.exception
    assert browser.runs() == [[browser.fragment]]
    assert not browser.sent("auto_rerun")
    stopped = {f for m in browser.sent("stop_auto_rerun") for f in m.stop_auto_rerun.fragment_ids}
    assert set(clocks[1]) <= stopped, (clocks, stopped)
    assert any("GPUs colocated (simulated)" == m.label for m in at.metric)
