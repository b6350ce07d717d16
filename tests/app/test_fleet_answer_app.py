"""The Capacity headline (issue #27): the analytic estimate at once, labelled, then the simulated answer of the one
sizing function, without the page waiting for it (AppTest on the demo)."""
from __future__ import annotations

import re
from pathlib import Path

import pandas as pd

from components import fleet_answer
from components.fleet_answer import answer_line
from shapeviz.fleet.sizing import fleet_answer as size
from shapeviz.ingest import load_log
from shapeviz.physics.steps import Deployment
from shapeviz.serving.planner import Workload
from tests.app.dashboard import open_page


def _text(at) -> str:
    return " ".join([m.value for m in at.markdown] + [c.value for c in at.caption])


def test_headline_shows_the_estimate_then_the_simulated_fleet() -> None:
    at = open_page()
    assert "GPUs colocated (estimate)" in [m.label for m in at.metric]
    fleet_answer.wait_all(timeout=900)   # the page never waits; the test does, then reruns as the poll would
    at.run()
    assert not at.exception, at.exception
    text = _text(at)
    sizing = list(fleet_answer._RESULTS.values())[-1].result()   # the settings the page drew last
    assert sizing.method == "simulated" and sizing.estimate is not None
    # the line on the page is that sizing's: its replicas against the estimate, the p90 classes, no pending note
    assert f"{sizing.replicas} × TP" in text and "p90 class" in text
    assert (f"the estimate said {sizing.estimate}" in text) if sizing.meets_others else ("No fleet size meets" in text)
    assert "replaying the log" not in text
    # the demo's swe-agent prompts cannot meet a 1 s TTFT on any number of replicas: named, with why, the rest sized
    assert sizing.meets_others and "swe-agent" in {u["product"] for u in sizing.unreachable}
    shown = re.sub(r"\\([!-/:-@\[-`{-~])", r"\1", text)   # what the browser shows of the escaped log text
    assert "No fleet size serves swe-agent" in shown and "prefill alone" in shown and "every other product" in shown


def test_answer_line_says_the_simulated_fleet_and_one_fewer(traces: Path) -> None:
    # the page's sentence for a sizing: the first 20 minutes of the Azure code trace on the deployment
    frame = load_log(traces / "azure_llm_2023/AzureLLMInferenceTrace_code.csv").frame
    frame = frame[frame["timestamp"] < frame["timestamp"].min() + pd.Timedelta(minutes=20)]
    dep = Deployment("llama-3.1-70b", "h100", "fp8", None, 2)
    _, sizing, estimate, _ = size(Workload.from_frame(frame), dep, frame)
    line = answer_line(sizing, dep.tp)
    assert sizing.meets and sizing.replicas > estimate.replicas
    assert f"Simulated: {sizing.replicas} × TP2 = {2 * sizing.replicas} GPUs" in line
    assert f"the estimate said {estimate.replicas}" in line and f"; {sizing.replicas - 1} replica(s) miss" in line
