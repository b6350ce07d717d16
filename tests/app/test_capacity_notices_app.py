"""The Capacity page says when a comparison cannot differ, which router its citation is about, and which levers
the fleet design takes (AppTest, no browser)."""
from __future__ import annotations

from pathlib import Path

from components.fleet_time import MINIMUM_FLEET
from components.routing import SINGLE_REPLICA
from shapeviz.serving.routers import LABELS
from tests.app.dashboard import open_page, open_upload


def _prefix_citations(at) -> list[str]:
    said = [m.value.replace("\\", "") for m in at.markdown]   # markdown-escaped text, read as shown
    lines = [m for m in said if "simulated: the" in m and "router keeps" in m]
    assert lines, said
    return lines


def test_one_replica_says_the_routers_cannot_differ_and_the_citation_is_the_selected_router() -> None:
    at = open_page(timeout=600)
    at.selectbox(key="gpu").set_value("b200").run()
    at.slider(key="traffic").set_value(0.25).run()
    at.run()   # the traffic step reran the live fragments alone: the whole page once more
    at.button(key="compare_routers").click().run()
    assert not at.exception, at.exception
    assert any("on 1 replicas" in c.value for c in at.caption)
    assert SINGLE_REPLICA in [i.value for i in at.info]
    for router in ("session", "round_robin"):
        at.selectbox(key="capacity_router").set_value(router).run()
        assert not at.exception, at.exception
        assert all(f"the {LABELS[router]} router keeps" in line for line in _prefix_citations(at))


def test_the_fleet_design_says_which_levers_it_leaves_out() -> None:
    at = open_page(timeout=600)
    at.selectbox(key="speculative").set_value("eagle3").run()
    assert not at.exception, at.exception
    said = next(c.value for c in at.caption if "Leaves out" in c.value).replace("\\", "")
    assert "speculative decoding (EAGLE-3 head)" in said and "prefix-cache hit" in said and "KV cache" in said


def _burstgpt_on_capacity(trace):
    """The Capacity page on the BurstGPT slice, uploaded."""
    path: Path = trace("burstgpt/burstgpt_slice.csv")
    return open_upload(path.name, path.read_bytes(), timeout=600)


def test_a_log_that_needs_one_replica_says_no_policy_can_save(trace) -> None:
    at = _burstgpt_on_capacity(trace)
    at.toggle(key="fleet_time_on").set_value(True).run()
    assert not at.exception, at.exception
    policies = next(d.value for d in at.dataframe if "saving vs peak" in d.value.columns)
    assert (policies["saving vs peak"] == 0).all() and (policies["most replicas"] == 1).all()
    assert MINIMUM_FLEET in [i.value for i in at.info]


def test_gpus_per_replica_set_beyond_a_node_says_it_spans_nodes(trace) -> None:
    at = _burstgpt_on_capacity(trace)
    at.selectbox(key="tp").set_value(16).run()
    assert not at.exception, at.exception
    said = [e.value.replace("\\", "") for e in (*at.markdown, *at.caption)]
    line = next((s for s in said if "GPUs per replica:" in s), None)
    assert line is not None and "TP16 spans 2 nodes of 8 H100" in line, line
