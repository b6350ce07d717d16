"""`plan` judges every product against its own SLO class on the planned shared fleet (analytic), issue #19."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from shapeviz.cli import main

AZURE_CODE = "azure_llm_2023/AzureLLMInferenceTrace_code.csv"
AZURE_CONV = "azure_llm_2023/AzureLLMInferenceTrace_conv.csv"
CODE, CONV = "AzureLLMInferenceTrace_code", "AzureLLMInferenceTrace_conv"


def _plan(capsys: pytest.CaptureFixture[str], *argv: str) -> dict[str, Any]:
    # the analytic judgement on the estimate's fleet (issue #27 sizes the default answer by replay: tests/unit/test_sizing.py),
    # on TP4 replicas: "auto" GPUs per replica moves with a class no TP4 replica reaches (tests/unit/test_sizing.py), and
    # these tests judge several classes on one fleet
    assert main(["plan", *argv, "--tp", "4", "--method", "analytic", "--json"]) == 0
    return json.loads(capsys.readouterr().out)


@pytest.fixture(scope="module")
def logs(traces: Path) -> list[str]:
    """The real Azure 2023 code and conversation traces: two products of one fleet."""
    return [str(traces / AZURE_CODE), str(traces / AZURE_CONV)]


def test_tight_ttft_class_fails_where_a_loose_one_passes_on_real_traces(logs: list[str], capsys) -> None:
    doc = _plan(capsys, *logs, "--slo", f"{CODE}=300:60", "--slo", f"{CONV}=2000:60")
    products = doc["products"]
    assert set(products) == {CODE, CONV}
    code, conv = products[CODE], products[CONV]
    assert code["class"] == {"ttft_ms": 300.0, "tpot_ms": 60.0, "percentile": 90, "corner": code["class"]["corner"],
                             "source": "set by user (--slo)"}
    # the code trace's TTFT p90 on the planned fleet is above 300 ms and below 2 s: the tight class misses...
    assert 300.0 < code["ttft_p90_ms"] < 2000.0
    assert not code["meets"] and conv["meets"]
    # ...and each product's TTFT is its own (longer code prompts wait longer); TPOT is the shared decode batch's
    assert code["ttft_p90_ms"] > conv["ttft_p90_ms"]
    assert code["tpot_p90_ms"] == pytest.approx(conv["tpot_p90_ms"])
    assert code["requests"] + conv["requests"] == doc["workload"]["requests"]
    assert any("analytic" in n and "simulate" in n and CODE in n for n in doc["notes"])

    # the same product, same fleet, a loose class: now it meets (the verdict follows the product's own class)
    loose = _plan(capsys, *logs, "--slo", "*=2000:60")["products"]
    assert loose[CODE]["meets"] and loose[CONV]["meets"]
    assert loose[CODE]["ttft_p90_ms"] == pytest.approx(code["ttft_p90_ms"])


def test_products_leave_the_plan_unchanged(logs: list[str], capsys) -> None:
    plain = _plan(capsys, *logs)
    judged = _plan(capsys, *logs, "--slo", f"{CODE}=300:60")
    assert "products" in plain    # every log gets the block: the TTFT/TPOT pair is every product's default class
    for key in set(plain) - {"products", "notes"}:
        assert judged[key] == plain[key], key
    assert judged["notes"][:-1] == plain["notes"][:-1]


def test_one_product_is_judged_on_the_plans_own_queue(traces: Path, capsys) -> None:
    doc = _plan(capsys, str(traces / AZURE_CONV), "--slo", "*=1000:50")
    (only,) = doc["products"].values()
    # one product alone is the whole fleet: its p90s are the plan's (the same evaluator, no second queue model)
    assert only["ttft_p90_ms"] == pytest.approx(doc["ttft_ms"]["p90"], rel=1e-9)
    assert only["tpot_p90_ms"] == pytest.approx(doc["tpot_ms"]["p90"], rel=1e-9)
    assert only["meets"] == doc["meets_slo"]


def test_plan_text_has_a_line_per_product(logs: list[str], capsys) -> None:
    assert main(["plan", *logs, "--slo", f"{CODE}=300:60", "--slo", f"{CONV}=2000:60", "--method", "analytic"]) == 0
    out = capsys.readouterr().out
    lines = {name: next(line for line in out.splitlines() if line.strip().startswith(name)) for name in (CODE, CONV)}
    assert "MISSES its class" in lines[CODE] and "/ 300 ms" in lines[CODE]
    assert "meets its class" in lines[CONV] and "/ 2,000 ms" in lines[CONV]


def test_slo_needs_products_of_a_log(logs: list[str], capsys) -> None:
    assert main(["plan", "--isl", "2048", "--osl", "256", "--slo", "*=500:50"]) == 2
    assert "--slo names products of a LOG" in capsys.readouterr().err
    assert main(["plan", *logs, "--slo", "ghost=500:50"]) == 2
    assert "not in the log" in capsys.readouterr().err
    assert main(["plan", *logs, "--slo", f"{CODE}=fast"]) == 2
    assert "PRODUCT=TTFT_MS:TPOT_MS" in capsys.readouterr().err


def test_products_are_judged_with_the_reuse_the_router_keeps(trace, capsys) -> None:
    # Mooncake's block hashes: the prefix-aware router's cache hits shorten every prefill of the plan; the
    # product (the whole log here) must be judged on the same shortened prefills, not on the log's raw prompts
    doc = _plan(capsys, str(trace("mooncake_fast25/synthetic_trace.jsonl")), "--router", "prefix")
    assert doc["prefix"]["hit_ratio_tokens"] > 0.05
    (only,) = doc["products"].values()
    assert only["ttft_p90_ms"] == pytest.approx(doc["ttft_ms"]["p90"], rel=1e-9)
