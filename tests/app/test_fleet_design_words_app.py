"""What the Fleet design section says it takes and leaves out of the sidebar (``components.fleet.levers_taken``),
on the sidebar's settings alone: ``test_capacity_notices_app.py`` checks the same caption on the whole Capacity
page; this checks the words, in milliseconds."""
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
