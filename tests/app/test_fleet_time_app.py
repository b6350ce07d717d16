"""The Capacity page's "Traffic over time" section on the demo, driven by AppTest."""
from __future__ import annotations

from streamlit.testing.v1 import AppTest

from tests.app.dashboard import chart_titles, headline_sizing, open_page, replay_growth


def _capacity() -> AppTest:
    at = open_page(timeout=180)
    assert not at.exception, at.exception
    assert not [f for f in at.dataframe if "saving vs peak" in f.value.columns]   # off until asked for
    at.toggle(key="fleet_time_on").set_value(True).run()
    assert not at.exception, at.exception
    return at


def _policies(at: AppTest):
    for frame in at.dataframe:
        value = frame.value
        if "policy" in value.columns and "saving vs peak" in value.columns:
            return value
    raise AssertionError("no policy table on the Capacity page")


def test_the_page_shows_each_policy_against_the_peak_and_a_slower_start_costs_attainment() -> None:
    at = _capacity()
    assert any("Traffic over time" in h.value for h in at.subheader)
    policies = _policies(at).set_index("policy")
    assert len(policies) == 5   # the queue-depth policy joined the four (issue 27 item 4)
    assert policies.loc["hold at peak", "saving vs peak"] == 0
    assert (policies["GPU-hours"] <= policies.loc["hold at peak", "GPU-hours"] + 1e-9).all()
    titles = chart_titles(at)
    assert "Traffic and replicas over time" in titles and "The pool month by month" in titles
    assert any(t.startswith("Replicas minute by minute") for t in titles)   # the chosen policy's per-minute steps
    before = policies.loc["predicted SLO attainment", "SLO attainment"]
    at.number_input(key="fleet_engine_start_s").set_value(1200.0).run()
    assert not at.exception, at.exception
    after = _policies(at).set_index("policy").loc["predicted SLO attainment", "SLO attainment"]
    assert after < before
    # next quarter's months: the estimate at once, then (asked for) replayed by the one engine while the page
    # goes on, month 0 the headline's own sizing
    months = replay_growth(at, 1, timeout=900)
    assert "one_fewer" in months.columns
    assert (months["method"] == "simulated").all()
    headline = headline_sizing()   # the headline of the settings drawn last
    assert months["replicas"].iloc[0] == headline.replicas
    # the fleet held at peak is said in the answer's terms (replicas × TP, GPUs, and against the answer), not as a
    # second fleet of its own beside the headline's
    peak = int(_policies(at).set_index("policy").loc["hold at peak", "most replicas"])
    shown = " ".join(c.value for c in at.caption)
    d = peak - headline.replicas
    against = "the answer itself" if d == 0 else f"the answer {'+' if d > 0 else '−'} {abs(d)}"
    assert f"Hold at peak: {peak} × TP4 = {peak * 4} GPUs, {against} (the headline's answer is sized" in shown
