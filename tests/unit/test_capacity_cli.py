"""``python -m shapeviz plan`` through ``shapeviz.cli.main``: the JSON keys, the text summary, one-line errors."""
from __future__ import annotations

import json

import pytest

from shapeviz.cli import main


def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(["plan", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_plan_for_a_fixed_shape_gives_the_documented_keys(capsys) -> None:
    code, out, _ = run(capsys, "--isl", "2048", "--osl", "256", "--model", "llama-3.1-70b", "--gpu", "h100", "--json")
    assert code == 0
    doc = json.loads(out)
    assert doc["max_output_tokens_per_s"] > 0
    for phase in ("prefill", "decode"):
        assert {"demand_tokens_per_s", "utilization"} <= set(doc[phase])
    for metric in ("ttft_ms", "tpot_ms"):
        assert {"p50", "p90"} <= set(doc[metric])
    assert {"colocated", "prefill", "decode"} <= set(doc["gpus"])
    # no --precision: the checkpoint's own BF16 (it pinned FP8 on TP2 while FP8 was the silent default)
    assert doc["cost"]["usd_per_hour"] > 0 and doc["assumptions"]["tp"] == 4
    assert doc["deployment_detail"]["precision"] == "bf16" and doc["precision_source"].startswith("the checkpoint")
    # no --rate: planned at one replica's offline max throughput, and it says so
    assert doc["workload"]["rate_source"] == "assumed" and "max throughput" in doc["workload"]["rate_note"]
    assert doc["rate_rps"] == pytest.approx(doc["max_output_tokens_per_s"] / 256)


def test_plan_applies_the_what_if_options(capsys) -> None:
    _, base, _ = run(capsys, "--isl", "4000", "--osl", "200", "--rate", "3", "--json")
    _, trimmed, _ = run(capsys, "--isl", "4000", "--osl", "200", "--rate", "3", "--trim-input", "0.5",
                        "--cache-hit", "0.5", "--traffic", "2", "--gpu-hour-usd", "3", "--json")
    b, t = json.loads(base), json.loads(trimmed)
    assert t["prefill"]["demand_tokens_per_s"] == pytest.approx(b["prefill"]["demand_tokens_per_s"] * 0.5 * 0.5 * 2)
    assert t["decode"]["demand_tokens_per_s"] == pytest.approx(b["decode"]["demand_tokens_per_s"] * 2)
    assert t["cost"]["usd_per_gpu_hour"] == 3 and t["assumptions"]["price_source"] == "set by user"


def test_plan_for_a_real_log_measures_its_rate(capsys, trace) -> None:
    code, out, _ = run(capsys, str(trace("azure_llm_2023/AzureLLMInferenceTrace_code.csv")), "--json")
    assert code == 0
    doc = json.loads(out)
    assert doc["workload"]["source"] == "log" and doc["workload"]["requests"] == 8_819
    assert doc["rate_source"] == "measured" and doc["rate_rps"] > 2.57  # above the published mean rate
    assert doc["dominant_phase"] == "prefill"  # code completion: 2k in, 28 out on average


def test_plan_text_is_a_short_summary(capsys) -> None:
    code, out, _ = run(capsys, "--isl", "800", "--osl", "2500", "--rate", "2")
    assert code == 0
    assert "TTFT p50/p90" in out and "GPUs: colocated" in out and len(out.splitlines()) < 15


@pytest.mark.parametrize("argv, fragment", [
    (["--isl", "100", "--osl", "10", "--gpu", "h900"], "unknown GPU 'h900'"),
    (["--isl", "100", "--osl", "10", "--model", "gpt-9"], "unknown model 'gpt-9'"),
    (["--isl", "100", "--osl", "10", "--precision", "bf16", "--tp", "1"], "raise --tp"),
    (["--isl", "100"], "--isl and --osl go together"),
    ([], "give a LOG file"),
    (["--isl", "100", "--osl", "10", "--trim-input", "1.2"], "trim_input"),
])
def test_mistakes_end_with_exit_code_2_and_one_line(capsys, argv: list[str], fragment: str) -> None:
    code, out, err = run(capsys, *argv)
    assert code == 2 and out == ""
    assert fragment in err and len(err.strip().splitlines()) == 1
