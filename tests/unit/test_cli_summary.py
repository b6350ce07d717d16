"""``python -m shapeviz summary``: the JSON a scheduled weekly report reads, on the real traces."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from shapeviz.cli import main

ROOT = Path(__file__).resolve().parents[2]
QUANTILE_KEYS = {"p50", "p90", "p99", "mean"}
SHAPE_IDS = {"chat", "rag", "reasoning", "agent", "autocomplete"}


def _summary(capsys: pytest.CaptureFixture[str], *argv: str) -> dict:
    assert main(["summary", *argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_azure_code_trace_is_autocomplete_with_the_published_rows_and_stable_keys(trace, capsys) -> None:
    path = trace("azure_llm_2023/AzureLLMInferenceTrace_code.csv")
    doc = _summary(capsys, str(path))
    assert doc["rows"] == {"read": 8819, "kept": 8819, "dropped": {}}
    assert doc["mapping"]["input_tokens"] == "ContextTokens"
    assert doc["mapping"]["output_tokens"] == "GeneratedTokens"
    overall = doc["overall"]
    assert set(overall["input"]) >= QUANTILE_KEYS and set(overall["shape_share"]) == SHAPE_IDS
    assert overall["input"]["p50"] == 1469 and overall["output"]["p50"] == 13  # SOURCE.md
    assert overall["dominant_shape"] == "autocomplete" and overall["phase"] == "prefill"
    assert isinstance(overall["mixed"], bool)
    [product] = doc["products"]
    assert product["name"] == "AzureLLMInferenceTrace_code" and product["requests"] == 8819
    assert {"dominant_shape", "phase", "mixed"} <= set(product)
    for cluster in doc["clusters"]:
        assert {"id", "share", "input_center", "output_center", "shape"} <= set(cluster)
    assert sum(c["share"] for c in doc["clusters"]) == pytest.approx(1.0)
    for rec in doc["recommendations"]:
        assert set(rec) == {"lever", "metric", "scope", "reason"} and rec["metric"] in {"ttft", "tpot"}
    assert any(r["lever"] == "prefill_capacity" for r in doc["recommendations"])
    assert "prefix_cache" not in doc and "sessions" not in doc  # the log carries neither


def test_mooncake_trace_reports_its_block_hash_reuse(trace, capsys) -> None:
    doc = _summary(capsys, str(trace("mooncake_fast25/conversation_trace.jsonl.gz")))
    pc = doc["prefix_cache"]
    assert pc["method"] == "block_hashes"
    assert pc["hit_ratio_blocks"] == pytest.approx(0.3664, abs=5e-5)  # SOURCE.md: 36.64 %
    assert pc["hit_ratio_tokens"] == pytest.approx(0.3736, abs=5e-5)  # SOURCE.md: 37.36 %
    curve = pc["capacity_curve"]
    assert len(curve) >= 5 and curve[-1]["hit_ratio_blocks"] == pytest.approx(pc["hit_ratio_blocks"], abs=1e-3)
    assert doc["overall"]["dominant_shape"] == "rag"


def test_burstgpt_sessions_and_failures_are_accounted(trace, capsys) -> None:
    doc = _summary(capsys, str(trace("burstgpt/burstgpt3_slice.csv")))
    rows = doc["rows"]
    assert rows["read"] == 400 and rows["kept"] + sum(rows["dropped"].values()) == 400
    assert rows["dropped"].get("failed_request") == 1  # SOURCE.md: one Response tokens == 0
    assert doc["sessions"]["count"] in (134, 135) and doc["sessions"]["turns_p50"] == 2
    assert {p["name"] for p in doc["products"]} == {"ChatGPT", "GPT-4"}


def test_two_traces_are_two_products_on_one_mixed_pool(trace, capsys) -> None:
    code = trace("azure_llm_2023/AzureLLMInferenceTrace_code.csv")
    conv = trace("mooncake_fast25/conversation_trace.jsonl.gz")
    doc = _summary(capsys, str(code), str(conv))
    assert doc["rows"]["read"] == 8819 + 12031
    assert {p["name"]: p["dominant_shape"] for p in doc["products"]} == {
        "AzureLLMInferenceTrace_code": "autocomplete", "conversation_trace": "rag"}
    assert doc["overall"]["mixed"] is True
    assert {"split_pools", "priority_queues"} & {r["lever"] for r in doc["recommendations"]}


def test_text_mode_and_user_errors_from_a_real_process(trace, tmp_path: Path) -> None:
    path = trace("vidur_arxiv_summarization/arxiv_summarization_stats_llama2_tokenizer_filtered_v2.csv")
    ok = subprocess.run([sys.executable, "-m", "shapeviz", "summary", str(path)], cwd=ROOT,
                        capture_output=True, text=True, timeout=300)
    assert ok.returncode == 0, ok.stderr
    assert "28,257 rows read" in ok.stdout and "input  p50 2,730" in ok.stdout
    wrong = tmp_path / "notes.csv"
    wrong.write_text("name,colour\nada,blue\n")
    bad = subprocess.run([sys.executable, "-m", "shapeviz", "summary", str(wrong)], cwd=ROOT,
                         capture_output=True, text=True, timeout=300)
    assert bad.returncode == 2 and bad.stdout == ""
    lines = bad.stderr.strip().splitlines()
    assert len(lines) == 1 and "notes.csv" in lines[0] and "--map" in lines[0]
    missing = subprocess.run([sys.executable, "-m", "shapeviz", "summary", str(tmp_path / "nope.csv")], cwd=ROOT,
                             capture_output=True, text=True, timeout=300)
    assert missing.returncode == 2 and len(missing.stderr.strip().splitlines()) == 1


def test_map_overrides_a_column_and_the_mapping_says_so(tmp_path: Path, capsys) -> None:
    log = tmp_path / "gateway.csv"
    log.write_text("when,prompt_len,answer_len\n2026-01-01T00:00:00Z,1000,120\n2026-01-01T00:00:01Z,1200,90\n")
    doc = _summary(capsys, str(log), "--map", "input_tokens=prompt_len", "--map", "output_tokens=answer_len")
    assert doc["mapping"]["input_tokens"] == "prompt_len" and doc["mapping"]["output_tokens"] == "answer_len"
    assert doc["rows"]["kept"] == 2


def test_a_log_with_no_usable_row_exits_2_with_the_reasons(tmp_path: Path, capsys) -> None:
    log = tmp_path / "broken.csv"
    log.write_text("input_tokens,output_tokens\n-5,10\nabc,3\n")
    assert main(["summary", str(log)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "broken.csv" in err[0] and "negative_tokens 1" in err[0]


def test_a_balanced_log_is_said_balanced_not_balanced_dominated(trace, capsys) -> None:
    # BurstGPT's slice splits its GPU-time 52% / 48%: the text said "balanced-dominated GPU-time"
    assert main(["summary", str(trace("burstgpt/burstgpt_slice.csv"))]) == 0
    out = capsys.readouterr().out
    assert "GPU-time balanced between prefill and decode (52% prefill)" in out and "balanced-dominated" not in out
