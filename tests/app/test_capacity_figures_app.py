"""The Capacity headline's charts follow the plan they draw: a trim step redraws them for the new plan, the simulated
answer's replace the estimate's when its replays land, a step back shows the earlier plan's charts again (held, not
rebuilt), and another deployment is another plan (the settings are told apart by every field, not only the
model's)."""
from __future__ import annotations

import json

from streamlit.testing.v1 import AppTest

from tests.app.dashboard import open_page


def _load_curve(at: AppTest) -> dict:
    """The load-curve chart's data as the browser receives it (the chart whose x axis is the traffic multiplier)."""
    for chart in at.get("plotly_chart"):
        spec = json.loads(chart.proto.spec)
        if "traffic multiplier" in json.dumps(spec.get("layout", {}).get("xaxis", {})):
            return spec["data"]
    raise AssertionError("no load-curve chart on the page")


def _metric_labels(at: AppTest) -> set[str]:
    return {m.label for m in at.metric}


def _settled(at: AppTest) -> None:
    """The headline's replays landed and the page redrawn with them (the charts then draw the simulated answer)."""
    from components import fleet_answer

    fleet_answer.wait_all(timeout=600)
    at.run()
    assert not at.exception, at.exception


def test_the_headline_charts_follow_each_step_and_each_deployment() -> None:
    at = open_page()
    _settled(at)
    today = _load_curve(at)
    at.slider(key="trim_input_pct").set_value(50).run()   # a what-if step: the headline's fragment reruns
    assert not at.exception, at.exception
    assert _metric_labels(at) >= {"GPUs colocated (estimate)"}   # its replays just queued: the estimate's plan
    estimated = _load_curve(at)
    assert estimated != today   # the trimmed plan's curve, not the one drawn before
    _settled(at)
    assert _metric_labels(at) >= {"GPUs colocated (simulated)"}
    trimmed = _load_curve(at)
    assert trimmed != estimated   # the answer's curve (its fleet) replaces the estimate's of the same step
    assert trimmed != today   # and it is the trimmed answer's, not today's
    at.slider(key="trim_input_pct").set_value(0).run()
    assert _load_curve(at) == today   # back: the same plan, the same chart
    at.run()
    at.selectbox(key="precision").set_value("fp8").run()   # another deployment: another plan, not a cached one
    _settled(at)
    assert _load_curve(at) != today
