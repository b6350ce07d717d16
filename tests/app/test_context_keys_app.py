"""The page's cached plans, planes and analyses are keyed on every setting of the sidebar's deployment and what-if
(``components.context.SETTINGS_HASH``): a change of precision, GPUs per replica, GPU, engine or lever in the sidebar
reads its own plan, never the previous deployment's. ``test_capacity_figures_app.py`` checks it on the whole page;
this checks the keys themselves, in milliseconds."""
from __future__ import annotations

from dataclasses import replace

from components.context import SETTINGS_HASH
from shapeviz.physics.steps import Deployment
from shapeviz.serving import WhatIf


def test_every_setting_of_the_deployment_and_the_whatif_changes_the_cache_key() -> None:
    key = SETTINGS_HASH[Deployment]
    base = Deployment("llama-3.1-70b", "h100", "fp8", None, 4)
    assert key(base) == key(Deployment("llama-3.1-70b", "h100", "fp8", None, 4))   # same content, same key
    others = [Deployment("llama-3.1-70b", "h100", "bf16", None, 4),
              Deployment("llama-3.1-70b", "h100", "fp8", None, 8),
              Deployment("llama-3.1-70b", "a100-80gb", "fp8", None, 4),
              Deployment("llama-3.1-70b", "h100", "fp8", "bf16", 4),
              Deployment("llama-3.1-70b", "h100", "fp8", None, 4, engine="trtllm"),
              Deployment("llama-3.1-8b", "h100", "fp8", None, 4)]
    assert len({key(base), *map(key, others)}) == 1 + len(others)
    what = SETTINGS_HASH[WhatIf]
    assert len({what(WhatIf()), what(WhatIf(trim_input=0.1)), what(WhatIf(cache_hit=0.5)),
                what(replace(WhatIf(), traffic_multiplier=2.0))}) == 4
