"""The Capacity page's verdict on dropped load-test results says what ``check`` says: met, missed, or unknown when
a level has no finite p90 (before, the page said nothing at all where the command line said "unknown")."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from tests.app.dashboard import open_page

ROOT = Path(__file__).resolve().parents[2]
AIPERF = ROOT / "tests" / "data" / "measured" / "aiperf_0.13.0_planned.json"


@pytest.fixture(scope="module")
def page() -> AppTest:
    return open_page("pages/capacity.py")


def _verdicts(at: AppTest) -> list[str]:
    return [m.value for m in at.markdown if m.value.startswith("**The fleet ") or m.value.startswith("**Unknown ")]


@pytest.mark.parametrize("p90", ["Infinity", None])
def test_a_result_without_a_finite_ttft_p90_gets_the_unknown_verdict_on_the_page(page: AppTest, p90) -> None:
    doc = json.loads(AIPERF.read_text())
    doc["inter_token_latency"]["p90"] = 1.0   # TPOT well within the demo plan's class: only the TTFT is in doubt
    if p90 is None:
        del doc["time_to_first_token"]["p90"]
        data = json.dumps(doc)
    else:
        doc["time_to_first_token"]["p90"] = "__P90__"
        data = json.dumps(doc).replace('"__P90__"', p90)
    page.file_uploader(key="measured-capacity").set_value([("run.json", data.encode(), "application/json")])
    page.run()
    assert not page.exception, page.exception
    assert _verdicts(page) == ["**Unknown whether the fleet met its p90 SLOs: some measured level has no finite TTFT "
                               "or TPOT p90.**"]
