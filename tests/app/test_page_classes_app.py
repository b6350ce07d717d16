"""Each product's class on the page (``components.classes.page_classes``): its own targets where the user set them
in the Capacity page's table, the sidebar's pair for every other product. The headline, Compare deployments, Fleet
design and the report all judge with these; ``test_fleet_app.py`` checks that on the demo's replays (a whole page),
this one checks the classes themselves on a small log, in about a second."""
from __future__ import annotations

from streamlit.testing.v1 import AppTest

from shapeviz.ingest import LoadedLog
from shapeviz.workload import synth


def _page(log: "LoadedLog") -> None:   # its source runs as the page: the annotation stays a string
    import streamlit as st

    from components import classes

    st.session_state[classes.OWN_KEY] = {"the-log": {"ide-autocomplete": (300.0, 50.0)}}
    judged = classes.page_classes("the-log", log, 1000.0, 40.0)
    for product, c in judged.items():
        st.text(f"{product}|{c.ttft_ms:g}|{c.tpot_ms:g}|{c.source}")


def test_a_products_own_class_is_judged_and_every_other_product_gets_the_sidebars_pair() -> None:
    from components import classes

    log = LoadedLog(synth.generate(300, seed=0, with_hashes=False), None)
    at = AppTest.from_function(_page, args=(log,), default_timeout=30)
    at.run()
    assert not at.exception, at.exception
    judged = {row[0]: tuple(row[1:]) for row in (t.value.split("|") for t in at.text)}
    assert judged["ide-autocomplete"] == ("300", "50", classes.OWN_SOURCE)
    assert judged["doc-search"] == ("1000", "40", classes.PAIR_SOURCE)
    assert set(judged) == {"support-chat", "ide-autocomplete", "doc-search", "code-assistant", "swe-agent"}
