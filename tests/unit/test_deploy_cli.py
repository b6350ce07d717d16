"""`python -m shapeviz config`: what a user pastes, and one line (exit 2) for every mistake."""
from __future__ import annotations

import json

import pytest

from shapeviz.cli import main
from shapeviz.ingest import load_log
from shapeviz.outputs.deploy.settings import CONTEXT_HEADROOM, CONTEXT_ROUND
from shapeviz.outputs.deploy import check_command, check_yaml_keys


def test_config_prints_scripts_and_a_manifest_that_pass_the_flag_check(capsys):
    assert main(["config", "--isl", "4096", "--osl", "512", "--rate", "8", "--engine", "trtllm", "--k8s",
                 "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert set(doc["layouts"]) <= {"colocated", "disaggregated"} and "colocated" in doc["layouts"]
    assert doc["engine_version_read"] and set(doc["manifests"]) == set(doc["layouts"])
    for configs in doc["layouts"].values():
        for c in configs:
            line = " ".join([c["command"], c["model"]["value"], *c["argv"]])
            assert check_command("trtllm", line) == []
            assert check_yaml_keys("trtllm", c["yaml_options"]) == []
            assert all(a["source"] in ("measured", "estimated", "assumed") for a in c["args"])
    assert doc["plan_reference"]["kind"] == "shapeviz-plan-reference"
    assert main(["config", "--isl", "4096", "--osl", "512", "--rate", "8", "--engine", "sglang"]) == 0
    text = capsys.readouterr().out
    assert "python -m sglang.launch_server" in text and "# estimated:" in text


def test_a_log_config_reads_the_longest_context_off_the_log(trace, capsys):
    path = trace("burstgpt/burstgpt_slice.csv")
    assert main(["config", str(path), "--model", "llama-3.1-8b", "--layout", "colocated", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    max_len = doc["settings"]["max_model_len"]
    assert max_len["source"] == "measured"
    # the value: the log's longest request (input + output) plus the headroom, rounded up, and passed to vLLM
    frame = load_log(path).frame
    longest = int((frame["input_tokens"] + frame["output_tokens"]).max())
    expected = -(-longest * (1 + CONTEXT_HEADROOM) // CONTEXT_ROUND) * CONTEXT_ROUND
    assert longest < max_len["value"] == expected
    for configs in doc["layouts"].values():
        for c in configs:
            assert c["argv"][c["argv"].index("--max-model-len") + 1] == str(int(expected))


@pytest.mark.parametrize("argv, fragment", [
    (["config", "x.csv", "--isl", "10", "--osl", "10"], "not both"),
    (["config", "--isl", "60000", "--osl", "100", "--rate", "1", "--ttft-slo-ms", "100", "--layout", "disaggregated"],
     "disaggregated"),
    (["config", "--isl", "100", "--osl", "100", "--model-path", "a\nb"], "model-path"),
    (["config", "--isl", "100", "--osl", "100", "--app", "Bad_Name", "--k8s"], "DNS label"),
    (["config", "--isl", "100", "--osl", "100", "--port", "0"], "port"),
    (["config"], "LOG"),
])
def test_mistakes_get_one_line_and_exit_2(argv, fragment, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert fragment in err and err.count("\n") == 1
