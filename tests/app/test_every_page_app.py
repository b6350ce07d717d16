"""Every button of the Capacity page clicked, then every other page visited and the sidebar's unrelated settings
changed: the page comes back whole each time (AppTest, no browser; tests/e2e/test_every_page.py does it in a
browser, on uploads too)."""
from __future__ import annotations

from streamlit.testing.v1 import AppTest

from tests.app.dashboard import CAPACITY, open_page

OTHER_PAGES = ("pages/shape.py", "pages/clusters.py", "pages/sessions.py", "pages/report.py")
RESULTS = {   # what each run shows once it has run (a subheader or table column that only its result draws)
    "compare_routers": "GPUs meeting the SLOs",
    "fleet_design": "$/hour",
    "batch_job_button": "meets the deadline",
}


def _healthy(at: AppTest, where: str) -> None:
    assert not at.exception, f"{where}: {at.exception[0].value}"
    assert not [e for e in at.error if "Traceback" in e.value], where


def _columns(at: AppTest) -> set[str]:
    return {str(c) for frame in at.dataframe for c in frame.value.columns}


def test_the_capacity_page_comes_back_whole_after_every_button() -> None:
    at = open_page(timeout=600)
    at.multiselect(key="fleet_gpus").set_value(["h100-sxm"]).run()   # one GPU type: the design's shortest search
    for key in ("simulate_fleet", "compare_routers", "fleet_design", "batch_job_button"):
        at.button(key=key).click().run()
        _healthy(at, f"after clicking {key}")
    at.toggle(key="fleet_time_on").set_value(True).run()
    at.button(key="fleet_replay").click().run()
    _healthy(at, "after replaying the log")
    assert any("Replayed:" in m.value for m in at.markdown)
    assert any("badge[simulated]" in m.value for m in at.markdown)   # the replay's badge, from the badge table
    shown = _columns(at)
    assert set(RESULTS.values()) <= shown, shown
    for page in OTHER_PAGES:
        at.switch_page(page).run()
        _healthy(at, page)
        at.switch_page(CAPACITY).run()
        _healthy(at, f"back from {page}")
        assert set(RESULTS.values()) <= _columns(at), f"a result vanished on the way back from {page}"
    for key, value in (("speculative", "eagle3"), ("kv_precision", "fp8")):
        at.selectbox(key=key).set_value(value).run()
        _healthy(at, f"after setting {key} to {value}")
