"""The dashboard opened in Streamlit's AppTest (no browser): on the demo, then on a page."""
from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pandas as pd
import pytest
from streamlit.runtime.scriptrunner_utils.script_requests import RerunData
from streamlit.testing.v1 import AppTest, local_script_runner

APP = str(Path(__file__).resolve().parents[2] / "app.py")
CAPACITY = "pages/capacity.py"


def open_app(timeout: float = 120) -> AppTest:
    """The app run once on the demo, as a new visitor meets it."""
    at = AppTest.from_file(APP, default_timeout=timeout)
    at.run()
    return at


def open_page(page: str = CAPACITY, timeout: float = 120) -> AppTest:
    """The app on the demo, switched to ``page``; nothing raised on the way."""
    at = open_app(timeout)
    at.switch_page(page).run()
    assert not at.exception, at.exception
    return at


def open_upload(name: str, data: bytes, page: str = CAPACITY, mime: str = "text/csv",
                timeout: float = 300) -> AppTest:
    """The app with one file uploaded, switched to ``page``; nothing raised on the way."""
    at = open_app(timeout)
    at.file_uploader(key="uploads").set_value((name, data, mime))
    at.run()
    at.switch_page(page).run()
    assert not at.exception, at.exception
    return at


def headline_sizing(digest: str | None = None):  # noqa: ANN201 - a shapeviz.fleet.sizing.Sizing
    """The Capacity headline's sizing of the settings the page drew last (of the log ``digest`` when given; not the
    cache-aware router's lever, whose key ends with its router)."""
    from components import fleet_answer

    with fleet_answer._LOCK:
        items = list(fleet_answer._RESULTS.items())
    return next(f.result() for key, f in reversed(items)
                if key[-1] not in ("prefix", "session") and digest in (None, key[0]))


def chart_titles(at: AppTest) -> list[str]:
    """The title of every plotly chart drawn ("" for one without)."""
    return [json.loads(c.proto.spec).get("layout", {}).get("title", {}).get("text", "") for c in at.get("plotly_chart")]


def growth_months(at: AppTest) -> pd.DataFrame:
    """The "Traffic over time" section's table of next quarter's months."""
    return next(f.value for f in at.dataframe if {"month", "estimate_replicas"} <= set(f.value.columns))


def replay_growth(at: AppTest, months: int, timeout: float) -> pd.DataFrame:
    """Next quarter's months replayed: estimates until asked, then ``months`` months each sized by the one sizing
    engine (the section's button, waited for); the table it then shows."""
    from components import fleet_time

    assert (growth_months(at)["method"] == "estimate").all()
    at.number_input(key="fleet_months").set_value(months).run()
    at.button(key="fleet_growth_replay").click().run()
    fleet_time.wait_growth(timeout=timeout)
    at.run()
    assert not at.exception, at.exception
    return growth_months(at)


class Browser:
    """The script runs each ``AppTest.run`` started, and a run sent as a browser sends a widget's or a poll's in a
    fragment: the fragment's alone (``fragment``; AppTest itself always starts a full run)."""

    def __init__(self) -> None:
        self.runners: list[local_script_runner.LocalScriptRunner] = []
        self.fragment: str | None = None

    def runs(self) -> list[list[str] | None]:
        """The last ``AppTest.run``'s script runs: the fragments each ran, None for a full run."""
        runner = self.runners[-1]
        return [data.get("fragment_ids_this_run") for event, data in zip(runner.events, runner.event_data)
                if event.name == "SCRIPT_STARTED"]

    def sent(self, kind: str) -> list:
        """The messages of one kind (``auto_rerun``: a fragment's poll timer set; ``stop_auto_rerun``: timers
        cancelled) the last ``AppTest.run``'s script runs sent to the browser."""
        runner = self.runners[-1]
        return [data["forward_msg"] for event, data in zip(runner.events, runner.event_data)
                if event.name == "ENQUEUE_FORWARD_MSG" and data["forward_msg"].WhichOneof("type") == kind]


def as_the_browser(monkeypatch: pytest.MonkeyPatch) -> Browser:
    """AppTest's runs recorded, and sent as a fragment's run whenever ``Browser.fragment`` is set."""
    seen = Browser()
    plain = local_script_runner.LocalScriptRunner.request_rerun

    def request_rerun(self: local_script_runner.LocalScriptRunner, data: RerunData) -> bool:
        seen.runners.append(self)
        accepted = plain(self, data)
        if seen.fragment is not None:   # the pending run becomes the fragment's, as a browser asks for it
            self._requests._rerun_data = replace(self._requests._rerun_data, fragment_id_queue=[seen.fragment])
        return accepted

    monkeypatch.setattr(local_script_runner.LocalScriptRunner, "request_rerun", request_rerun)
    return seen


def drawn_by(at: AppTest, key: str) -> str | None:
    """The fragment that drew a widget (None: the page's full run), as the browser's rerun request names it."""
    widget = next(w for w in at.get("slider") if w.key == key)
    return at._session_state._state._new_widget_state.widget_metadata[widget.id].fragment_id
