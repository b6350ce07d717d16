"""Plan vs measured on the Capacity and Report pages: a user drops load-test results and reads them against
the plan (Streamlit AppTest, no browser)."""
from __future__ import annotations

import json
from pathlib import Path

from streamlit.testing.v1 import AppTest

from tests.app.dashboard import open_page

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "tests" / "data" / "measured"


def _upload(at: AppTest, key: str, files: list[tuple[str, bytes]]) -> AppTest:
    at.file_uploader(key=key).set_value([(name, data, "application/json") for name, data in files])
    at.run()
    assert not at.exception, at.exception
    return at


def test_results_dropped_on_the_capacity_page_are_read_against_the_plan() -> None:
    at = open_page("pages/capacity.py")
    files = [(n, (DATA / n).read_bytes()) for n in ("aiperf_0.13.0_planned.json", "guidellm_0.8.1_report.json")]
    at = _upload(at, "measured-capacity", files)
    tables = [df.value for df in at.dataframe if "TTFT p90 measured" in df.value.columns]
    assert tables, "no plan-vs-measured table"
    shown = tables[0]
    assert list(shown["file"]) == ["aiperf_0.13.0_planned.json", "guidellm_0.8.1_report.json",
                                   "guidellm_0.8.1_report.json"]
    raw = json.loads((DATA / "aiperf_0.13.0_planned.json").read_text())
    assert shown["TTFT p90 measured"].iloc[0] == raw["time_to_first_token"]["p90"]
    # The measured points sit on the latency-vs-load chart, one marker trace per tool and percentile and panel.
    specs = [json.loads(c.proto.spec) for c in at.get("plotly_chart")]
    marked = [s for s in specs if any(str(t.get("name", "")).startswith("measured") for t in s["data"])]
    assert marked and {t["name"] for t in marked[0]["data"] if str(t.get("name", "")).startswith("measured")} == {
        "measured p50 (aiperf)", "measured p90 (aiperf)", "measured p50 (guidellm)", "measured p90 (guidellm)"}


def test_a_file_that_is_not_a_result_gets_one_line_on_the_reportopen_page() -> None:
    at = open_page("pages/report.py")
    at = _upload(at, "measured-report", [("**evil** <b>x</b>.json", b'{"hello": 1}')])
    errors = [e.value for e in at.error]
    assert len(errors) == 1 and "neither an aiperf" in errors[0]
    assert "\\*\\*evil\\*\\*" in errors[0]   # the name is shown literally, not as markdown
    assert "No results yet." in [c.value for c in at.caption]
