"""The Capacity page's per-product SLO classes and what each product gets (AppTest, no browser)."""
from __future__ import annotations

from components import fleet_answer
from tests.app.dashboard import open_page


def test_each_product_has_an_editable_class_and_its_own_outcome() -> None:
    at = open_page(timeout=300)
    assert not at.exception, at.exception
    at.button(key="simulate_fleet").click().run()
    assert not at.exception, at.exception
    outcome = next(d.value for d in at.dataframe if "ttft_slo_ms" in d.value.columns)
    # the demo's five products, each judged against its own class (autocomplete tighter than RAG)
    assert len(outcome) == 5
    slo = dict(zip(outcome["product"], outcome["ttft_slo_ms"]))
    assert slo["ide-autocomplete"] < slo["doc-search"]
    assert set(outcome["meets"]) <= {"yes", "NO"}


def test_the_fleet_design_section_shows_designs_against_the_baseline() -> None:
    at = open_page(timeout=900)
    fleet_answer.wait_all(timeout=900)   # the headline's simulated fleet, which the designs are listed beside
    at.multiselect(key="fleet_gpus").set_value(["h100-sxm", "b200"]).run()
    at.button(key="fleet_design").click().run()
    assert not at.exception, at.exception
    designs = next(d.value for d in at.dataframe if "$/hour" in d.value.columns)
    # the baseline is always shown, by its name (the raw id "shared_fcfs" was what the page showed before)
    assert "one shared pool (first come, first served)" in set(designs["design"])
    # first the headline's fleet (the one sizing function's answer), then each design's cost difference from it
    headline, others = designs.iloc[0], designs.iloc[1:]
    sizing = list(fleet_answer._RESULTS.values())[-1].result()
    assert headline["design"].startswith("The headline") and headline["GPUs"].startswith(f"{sizing.replicas * 4}×")
    assert (others["vs the headline $/hour"] - (others["$/hour"] - headline["$/hour"])).abs().max() < 0.01
    assert set(others["meets every class"]) <= {"yes", "NO"}
    assert not designs.isin(["None", "nan"]).any().any()
