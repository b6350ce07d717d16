"""The Fleet design section's own parts (``components.fleet``), without the Capacity page around them: what it
says it takes and leaves out of the sidebar (``levers_taken``), and the GPU types chosen, kept across a visit to
another page. ``test_capacity_notices_app.py`` and ``test_every_page_app.py`` check the same on the whole page;
these take milliseconds to a second."""
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
