"""The Capacity page's "Traffic over time" section on its own (``components.fleet_time``), on a small log.

``test_fleet_time_app.py`` drives it on the demo inside the whole Capacity page (its headline's replays included).
This draws the section alone on the demo's two short products (260 requests over a day), which one replica
serves: the five policies, the notice that they cannot differ at one replica, the chosen policy's minute-by-minute
chart, and next quarter's months replayed by the one sizing engine, in seconds. The mutation check names it first.
"""
from __future__ import annotations

from streamlit.testing.v1 import AppTest

from components import fleet_time
from shapeviz.ingest import LoadedLog
from shapeviz.physics import default_deployment
from shapeviz.workload import synth
from tests.app.dashboard import chart_titles, replay_growth


def _section(log: "LoadedLog", dep: object) -> None:   # its source runs as the page: annotations stay strings
    import streamlit as st

    from components import fleet_time as section
    from shapeviz.serving import WhatIf

    st.session_state.setdefault("fleet_time_on", True)
    section.render_traffic_over_time("a-small-log", log, dep, WhatIf(), 1000.0, 50.0, 2.0)


def test_the_section_shows_the_policies_the_one_replica_notice_the_minutes_and_the_replayed_months() -> None:
    frame = synth.generate(400, seed=3, with_hashes=False)
    log = LoadedLog(frame[frame["product"].isin(["support-chat", "ide-autocomplete"])].reset_index(drop=True), None)
    at = AppTest.from_function(_section, args=(log, default_deployment()), default_timeout=120)
    at.run()
    assert not at.exception, at.exception
    policies = next(f.value for f in at.dataframe if "saving vs peak" in f.value.columns)
    assert len(policies) == 5
    # one replica serves every window: the policies cannot differ, and the section says so
    assert fleet_time.MINIMUM_FLEET in [i.value for i in at.info]
    titles = chart_titles(at)
    assert any(t.startswith("Replicas minute by minute") for t in titles), titles
    # next quarter: the estimate at once, then each month replayed by the one sizing engine when asked
    months = replay_growth(at, 1, timeout=300)
    assert (months["method"] == "simulated").all() and len(months) == 2, months
