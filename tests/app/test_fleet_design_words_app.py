"""The Fleet design section's own parts (``components.fleet``), without the Capacity page around them: what it
says it takes and leaves out of the sidebar (``levers_taken``), the GPU types chosen, kept across a visit to
another page, and the designs' table beside the headline's fleet (from a stand-in search). ``test_fleet_app.py``,
``test_capacity_notices_app.py`` and ``test_every_page_app.py`` check the same on the whole page; these take
milliseconds to a second."""
from __future__ import annotations

from components.fleet import levers_taken
from components.sidebar import Settings
from shapeviz.analyses.shapes import Corners


def test_the_fleet_design_names_the_levers_it_leaves_out_with_their_values() -> None:
    settings = Settings(Corners(), 0.1, 0.0, 0.5, 2.0, "llama-3.1-70b", "h100-sxm", "fp8", "fp8", 4, 1000.0, 50.0,
                        2.5, speculative="eagle3")
    said = levers_taken(settings)
    assert "Leaves out: trims (input 10%, output 0%), the prefix-cache hit (50%)" in said
    assert "speculative decoding (EAGLE-3 head)" in said and "KV cache precision (FP8)" in said
    assert "Traffic ×2" in said and "FP8 weights" in said
    plain = levers_taken(Settings(Corners(), 0.0, 0.0, 0.0, 1.0, "llama-3.1-70b", "h100-sxm", "fp8", None, 4,
                                  1000.0, 50.0, 2.5))
    assert "trims" not in plain and "speculative decoding, " in plain and "(same as the weights)" in plain


def _design_section(settings: "Settings") -> None:   # its source runs as the page: annotations stay strings
    import streamlit as st

    from components import fleet

    if st.session_state.get("on_capacity", True):   # the other pages do not draw the section
        fleet.render_fleet_design("a-log", None, {}, settings)


def test_the_gpu_types_chosen_outlive_a_visit_to_another_page() -> None:
    from streamlit.testing.v1 import AppTest

    settings = Settings(Corners(), 0.0, 0.0, 0.0, 1.0, "llama-3.1-70b", "h100-sxm", "fp8", None, 4, 1000.0, 50.0, 2.5)
    at = AppTest.from_function(_design_section, args=(settings,), default_timeout=30)
    at.run()
    at.multiselect(key="fleet_gpus").set_value(["b200", "h200"]).run()
    at.session_state["on_capacity"] = False   # another page: Streamlit drops the state of the widget not drawn
    at.run()
    at.session_state["on_capacity"] = True
    at.run()
    assert not at.exception, at.exception
    assert at.multiselect(key="fleet_gpus").value == ["b200", "h200"]


def _designed(settings: "Settings", headline: tuple) -> None:   # its source runs as the page
    from components import fleet

    fleet.render_fleet_design("a-log", None, {}, settings, headline=headline, deployment=headline[1])


def test_the_designs_are_listed_beside_the_headline_at_its_price_and_against_its_cost(monkeypatch) -> None:
    from streamlit.testing.v1 import AppTest

    from components import fleet
    from shapeviz.fleet import sizing
    from shapeviz.physics.steps import Deployment

    pool = {"family": "per_product", "cost_per_hour": 25.0, "gpus": {"h100-sxm": 8}, "meets": True,
            "one_fewer": None, "reseeded": {"meets": True}, "summary": "a pool per product", "why": "",
            "products": {"chat": {"ttft_p90_ms": 300.0, "tpot_p90_ms": 30.0, "meets": True}}}
    doc = {"designs": [pool], "baseline": {**pool, "family": "shared_fcfs", "cost_per_hour": 30.0},
           "sized_on": {"window": "the busiest hour"}, "note": "",
           "search": {"judged_requests": 300, "simulations": 4, "requests": 300, "cpu_s": 1.0, "pruned": []}}
    monkeypatch.setattr(fleet, "_design", lambda *args: doc)   # the designs, as the search gives them
    trial = sizing.Trial(3, "window", True, {}, {"p50": 200.0, "p90": 300.0}, {"p50": 20.0, "p90": 30.0}, 0.5, 0.1)
    answer = sizing.Sizing("simulated", 3, True, 3, {"window": "the busiest hour"}, trial, None, [trial])
    dep = Deployment("llama-3.1-70b", "h100", "fp8", None, 4)
    # the sidebar's price for its own GPU type: $1.50, not the list price of data/gpu_prices.csv
    settings = Settings(Corners(), 0.0, 0.0, 0.0, 1.0, "llama-3.1-70b", "h100-sxm", "fp8", None, 4, 1000.0, 50.0, 1.5)
    at = AppTest.from_function(_designed, args=(settings, (answer, dep)), default_timeout=30)
    at.run()
    at.button(key="fleet_design").click().run()
    assert not at.exception, at.exception
    rows = next(d.value for d in at.dataframe if "$/hour" in d.value.columns)
    headline, others = rows.iloc[0], rows.iloc[1:]
    assert headline["design"].startswith("The headline") and headline["$/hour"] == 3 * 4 * 1.5   # 12 GPUs at $1.50
    assert others["vs the headline $/hour"].tolist() == [25.0 - 18.0, 30.0 - 18.0]
