"""The Capacity page's "Simulate this fleet" section, as a user meets it (AppTest, no browser)."""
from __future__ import annotations

import json
from pathlib import Path

from streamlit.testing.v1 import AppTest

APP = str(Path(__file__).resolve().parents[2] / "app.py")


def test_simulate_this_fleet_draws_labelled_simulated_figures() -> None:
    at = AppTest.from_file(APP, default_timeout=240)
    at.run()
    at.switch_page("pages/capacity.py").run()
    assert not at.exception, at.exception
    before = len(at.get("plotly_chart"))
    at.button(key="simulate_fleet").click().run()
    assert not at.exception, at.exception
    metrics = {m.label: m.value for m in at.metric}
    assert metrics["Simulated TTFT p90"].endswith(" ms") and metrics["Queue at today's load"] in ("stable", "grows")
    assert not [v for v in metrics.values() if "None" in v or "nan" in v.lower()]
    titles = [str(json.loads(c.proto.spec).get("layout", {}).get("title", {}).get("text", ""))
              for c in at.get("plotly_chart")]
    assert len(titles) == before + 3
    assert sum(t.startswith("Simulated") for t in titles) == 3 and any("goodput" in t for t in titles)
    cells = at.dataframe[-1].value
    assert not cells.isin(["None", "nan"]).any().any()
    # a slider move changes the settings: the old simulation is not shown as if it were the new one
    at.slider(key="trim_input_pct").set_value(50).run()
    assert "Simulated TTFT p90" not in {m.label for m in at.metric}
