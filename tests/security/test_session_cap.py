"""A visitor beyond the server's limit of sessions at once is told so and reads nothing (issue 41, item 1)."""
from __future__ import annotations

from streamlit.runtime.scriptrunner import get_script_run_ctx

from components import data
from tests.app.dashboard import open_app


def test_a_visitor_beyond_the_session_limit_is_told_to_come_back_and_gets_no_page(monkeypatch):
    # MAX_SESSIONS visitors connected before this one are still here
    ahead = [f"visitor-{i}" for i in range(data.MAX_SESSIONS)]
    monkeypatch.setattr(data, "_active_session_ids", lambda: [*ahead, get_script_run_ctx().session_id])

    at = open_app()

    assert not at.exception, at.exception
    assert [e.value for e in at.error] == [
        f"This dashboard is serving its limit of {data.MAX_SESSIONS} visitors at once (each one's logs are kept in "
        "the server's memory while they stay). Reload the page in a minute or two: it opens as soon as someone "
        "leaves."]
    assert not at.get("file_uploader") and not at.get("plotly_chart"), "the page was drawn for a refused visitor"


def test_the_first_visitors_up_to_the_limit_are_served_and_one_leaving_lets_the_next_in():
    connected = [f"visitor-{i}" for i in range(data.MAX_SESSIONS + 1)]
    assert all(data.admitted(sid, connected, data.MAX_SESSIONS) for sid in connected[:-1])
    assert not data.admitted(connected[-1], connected, data.MAX_SESSIONS)
    connected.remove("visitor-3")   # one of the first left
    assert data.admitted(connected[-1], connected, data.MAX_SESSIONS)
