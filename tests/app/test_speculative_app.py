"""Speculative decoding on the Capacity page: the sidebar lever, the speed-up against load and where it stops paying."""
from __future__ import annotations

import re

from streamlit.testing.v1 import AppTest

from tests.app.dashboard import open_page


def _shown(markdown: str) -> str:
    """What the browser shows for escaped markdown (backslash escapes resolved)."""
    return re.sub(r"\\([!-/:-@\[-`{-~])", r"\1", markdown).replace("\u2060", "")


def _metric(at: AppTest, label: str):  # noqa: ANN202 - a streamlit Metric element
    for m in at.metric:
        if m.label == label:
            return m
    raise AssertionError(f"no metric {label!r} among {[m.label for m in at.metric]}")


def test_choosing_eagle3_shows_the_gain_and_the_load_where_it_stops_paying() -> None:
    at = open_page(timeout=180)
    assert not at.exception, at.exception
    assert not [m for m in at.metric if m.label == "Stops paying above"], "the section shows numbers with the lever off"
    tpot_off = _metric(at, "TPOT p50 / p90 (ms)").value
    at.selectbox(key="speculative").set_value("eagle3").run()
    assert not at.exception, at.exception
    assert at.number_input(key="draft_tokens").value == 3        # EAGLE-3's own default draft length
    speedup = _metric(at, "TPOT speed-up here").value
    assert speedup.startswith("×") and float(speedup[1:]) > 1.0   # the demo runs at modest batches: a gain
    stop = _metric(at, "Stops paying above")
    assert stop.value.endswith("req/s") or stop.value == "—"
    assert _metric(at, "TPOT p50 / p90 (ms)").value != tpot_off  # the whole page plans with the lever on
    said = " ".join(_shown(m.value) for m in at.markdown)
    assert "speculative decoding (eagle3, 3 drafts" in said and ("stops paying" in said or "pays at every" in said)
    # a user-measured acceptance replaces the assumed one
    at.number_input(key="acceptance_length").set_value(1.2).run()
    assert not at.exception, at.exception
    assert float(_metric(at, "TPOT speed-up here").value[1:]) < float(speedup[1:])
