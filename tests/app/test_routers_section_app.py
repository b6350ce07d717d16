"""The Capacity page's "Routers and prefix caches" section on its own (``components.routing.render_routers``), on
300 requests of the demo (its sessions and block hashes): at one replica it says the routers cannot differ, its
citation is the selected router's, and a rerun after the comparison replays nothing into a bar it did not make.
``test_capacity_notices_app.py`` and ``test_every_page_app.py`` check the same on the whole page."""
from __future__ import annotations

from streamlit.testing.v1 import AppTest

from components.routing import SINGLE_REPLICA
from shapeviz.ingest import LoadedLog
from shapeviz.physics.steps import Deployment
from shapeviz.serving.routers import LABELS
from shapeviz.workload import synth


def _routers(log: "LoadedLog", dep: object) -> None:   # its source runs as the page: annotations stay strings
    import streamlit as st

    from components import routing
    from shapeviz.recommend import Recommendation
    from shapeviz.serving import WhatIf

    if st.session_state.get("on_capacity", True):   # another page does not draw the section
        cite = [Recommendation("prefix_cache", "ttft", "overall", "prompts share their prefixes")]
        routing.render_routers("a-log", log, dep, WhatIf(), 0.5, 1, 1000.0, 50.0, cite)


def test_one_replica_says_the_routers_cannot_differ_and_cites_the_selected_router() -> None:
    log = LoadedLog(synth.generate(300, seed=0), None)
    at = AppTest.from_function(_routers, args=(log, Deployment("llama-3.1-8b", "h100", "fp8", None, 1)),
                               default_timeout=120)
    at.run()
    at.button(key="compare_routers").click().run()
    assert not at.exception, at.exception
    assert SINGLE_REPLICA in [i.value for i in at.info]
    for router in ("session", "round_robin"):
        at.selectbox(key="capacity_router").set_value(router).run()
        assert not at.exception, at.exception
        said = [m.value.replace("\\", "") for m in at.markdown if "router keeps" in m.value]
        assert said and all(f"the {LABELS[router]} router keeps" in line for line in said), said
    # to another page and back: the comparison is shown again from what was kept, without raising
    at.session_state["on_capacity"] = False
    at.run()
    at.session_state["on_capacity"] = True
    at.run()
    assert not at.exception, at.exception
    assert [d for d in at.dataframe if "router" in " ".join(map(str, d.value.columns)).lower()]
