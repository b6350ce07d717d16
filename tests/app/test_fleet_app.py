"""The Capacity page's per-product SLO classes and what each product gets (AppTest, no browser)."""
from __future__ import annotations

from pathlib import Path

from streamlit.testing.v1 import AppTest

APP = str(Path(__file__).resolve().parents[2] / "app.py")


def test_each_product_has_an_editable_class_and_its_own_outcome() -> None:
    at = AppTest.from_file(APP, default_timeout=300)
    at.run()
    at.switch_page("pages/capacity.py").run()
    assert not at.exception, at.exception
    at.button(key="simulate_fleet").click().run()
    assert not at.exception, at.exception
    outcome = next(d.value for d in at.dataframe if "ttft_slo_ms" in d.value.columns)
    # the demo's five products, each judged against its own class (autocomplete tighter than RAG)
    assert len(outcome) == 5
    slo = dict(zip(outcome["product"], outcome["ttft_slo_ms"]))
    assert slo["ide-autocomplete"] < slo["doc-search"]
    assert set(outcome["meets"]) <= {"yes", "NO"}
