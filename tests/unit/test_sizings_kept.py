"""The Capacity headline keeps the sizings of the latest settings only (``components.fleet_answer``): a bounded
table, so slider steps never pile up sizings (each holds its replays' results) for as long as the server runs."""
from __future__ import annotations

from collections import OrderedDict

from components import fleet_answer


def test_the_sizings_table_keeps_the_latest_settings_and_a_step_back_finds_its_own(monkeypatch) -> None:
    monkeypatch.setattr(fleet_answer, "_RESULTS", OrderedDict())
    monkeypatch.setattr(fleet_answer, "MAX_ENTRIES", 3)
    # a stand-in for the replays: the sizing of a TTFT SLO is that SLO (the table is what is judged here)
    monkeypatch.setattr(fleet_answer, "fleet_answer", lambda *a, **k: (None, k["ttft_slo_ms"]))

    def step(slo: float):  # noqa: ANN202 - a Future
        return fleet_answer.submit(("log", slo), None, None, None, None, slo, 50.0, 1.0, None)

    sized = {slo: step(slo) for slo in (100.0, 200.0, 300.0, 400.0, 500.0, 600.0)}   # six settings in a row
    assert list(fleet_answer._RESULTS) == [("log", 400.0), ("log", 500.0), ("log", 600.0)]
    assert [sized[slo].result(timeout=30) for slo in (400.0, 500.0, 600.0)] == [400.0, 500.0, 600.0]
    # a step back to a setting still kept is the same sizing, not a second one, and is the newest again
    assert step(400.0) is sized[400.0]
    assert list(fleet_answer._RESULTS) == [("log", 500.0), ("log", 600.0), ("log", 400.0)]
