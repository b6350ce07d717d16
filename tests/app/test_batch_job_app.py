"""The Capacity page's batch job (issue 36, item 4): the same fleet as ``plan LOG --deadline``, one function."""
from __future__ import annotations

import json

from shapeviz.cli import main
from tests.app.dashboard import open_upload


def test_the_pages_batch_job_is_plan_deadlines_answer(trace, capsys) -> None:
    path = trace("azure_llm_2023/AzureLLMInferenceTrace_conv.csv")
    at = open_upload(path.name, path.read_bytes())
    at.number_input(key="batch_deadline_h").set_value(0.5).run()
    at.button(key="batch_job_button").click().run()
    assert not at.exception, at.exception
    metrics = {m.label: m.value for m in at.metric}
    said = next(m.value for m in at.markdown if "requests finish in" in m.value)
    # the command line on the page's deployment (named in the page's sentence) gives the same fleet
    dep = at.session_state["gpu"], at.session_state["model"]
    assert main(["plan", str(path), "--deadline", "30m", "--gpu", dep[0], "--model", dep[1], "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    b = doc["batch_job"]
    assert doc["deployment"].replace("×", "") in said.replace("\\", "").replace("×", "")
    assert metrics["GPUs"] == f"{b['gpus']:,}"
    assert f"on {b['replicas']} replica(s)" in said and f"({b['one_fewer']['replicas']})" in said
