"""The Capacity page's "Simulate this fleet" section, as a user meets it (AppTest, no browser)."""
from __future__ import annotations

import json
import re

from streamlit.testing.v1 import AppTest

from tests.app.dashboard import open_page, open_upload


def _table_with(at: AppTest, column: str):  # noqa: ANN202 - a pandas DataFrame
    return next(d.value for d in at.dataframe if column in d.value.columns)


def test_simulate_this_fleet_draws_labelled_simulated_figures() -> None:
    at = open_page(timeout=240)
    assert not at.exception, at.exception
    before = len(at.get("plotly_chart"))
    at.button(key="simulate_fleet").click().run()
    assert not at.exception, at.exception
    metrics = {m.label: m.value for m in at.metric}
    assert metrics["Simulated TTFT p90"].endswith(" ms") and metrics["Queue at today's load"] in ("stable", "grows")
    assert not [v for v in metrics.values() if "None" in v or "nan" in v.lower()]
    titles = [str(json.loads(c.proto.spec).get("layout", {}).get("title", {}).get("text", ""))
              for c in at.get("plotly_chart")]
    assert len(titles) == before + 4   # + each product against its own class
    assert sum(t.startswith("Simulated") for t in titles) == 3 and any("goodput" in t for t in titles)
    assert any(t.startswith("Each product against its own class") for t in titles), titles
    cells = _table_with(at, "TTFT p90 simulated")
    assert list(cells["traffic"]) == ["×0.5", "×1", "×1.5", "×2", "×3"]
    assert not cells.isin(["None", "nan"]).any().any()
    # a slider move changes the settings: the old simulation is not shown as if it were the new one
    at.slider(key="trim_input_pct").set_value(50).run()
    assert "Simulated TTFT p90" not in {m.label for m in at.metric}


def test_the_levers_are_sized_by_simulation_on_the_page() -> None:
    at = open_page(timeout=300)
    at.button(key="simulate_fleet").click().run()
    at.button(key="simulate_levers").click().run()
    assert not at.exception, at.exception
    levers = _table_with(at, "lever")
    assert list(levers["lever"])[0] == "today: FCFS, colocated" and len(levers) == 5
    assert not levers.isin(["None", "nan"]).any().any()
    assert any("simulated:" in m.value.replace("\\", "") for m in at.markdown)  # escapes resolved
    # each lever's fleet in the headline's terms once its answer is replayed: replicas × TP, GPUs, the offset
    # from the answer, the cost at the sidebar's price
    from components import fleet_answer

    fleet_answer.wait_all(timeout=300)
    at.run()
    levers = _table_with(at, "lever")
    fleets = [v for v in levers["GPUs"] if v != "cannot meet"]
    assert fleets and all(re.fullmatch(r"\d+ × TP\d+ = \d+ GPUs, the answer (itself|[+−] \d+), \$[\d,.]+/h", v)
                          for v in fleets), fleets
    captions = [c.value.replace("\\", "") for c in at.caption]
    assert any(c.startswith("This search's baseline (today's FCFS colocated fleet): ") and ", the answer" in c
               for c in captions), captions


def test_a_log_with_latencies_is_calibrated_on_the_page(trace) -> None:
    path = trace("burstgpt/burstgpt3_slice.csv")
    at = open_upload(path.name, path.read_bytes())
    at.button(key="calibrate_to_log").click().run()
    assert not at.exception, at.exception
    assert any(m.value.startswith("calibrated to your log: compute efficiency ×") for m in at.markdown)
    fit = _table_with(at, "measured p50")
    assert set(fit["fit"]) == {"before", "calibrated to your log"} and not fit.isin(["None", "nan"]).any().any()


def test_routers_are_compared_on_the_demo_with_reuse_as_a_result() -> None:
    """The demo carries block hashes: each router's simulated hit ratio, TTFT and GPUs, and the scale-out chart."""
    at = open_page(timeout=600)
    assert not at.exception, at.exception
    assert at.selectbox(key="capacity_router").value == "prefix"
    at.button(key="compare_routers").click().run()
    assert not at.exception, at.exception
    routers = _table_with(at, "GPUs meeting the SLOs")
    assert len(routers) == 5 and routers["router"].iloc[0] == "round-robin"
    assert "random (seeded)" in set(routers["router"])   # the baseline every routing benchmark reports
    assert not routers.isin(["None", "nan"]).any().any()
    hit = {m.label: m.value for m in at.metric}["Prefix hit ratio"]
    assert hit.endswith("%")
    titles = [str(json.loads(c.proto.spec).get("layout", {}).get("title", {}).get("text", ""))
              for c in at.get("plotly_chart")]
    assert any(t.startswith("Prefix hit ratio against replicas") for t in titles)
