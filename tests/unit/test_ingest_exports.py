"""Logs as teams export them: serving benchmarks, tracing tools by their own semantics, model names as written.

The fixtures (tests/data/ingest, see its README) are written from each format's documentation and source.
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from shapeviz.fleet.sizing import model_of_log, other_models
from shapeviz.ingest import IngestError, load_log
from shapeviz.outputs.measured import parse_result
from shapeviz.outputs.summary import summarize, summary_text
from shapeviz.physics.catalogue import get_model

DATA = Path(__file__).resolve().parents[1] / "data" / "ingest"
VLLM = DATA / "vllm_bench_serve.json"


def _vllm() -> dict:
    return json.loads(VLLM.read_text())


def _balanced(report) -> None:
    assert report.rows_read == report.rows_kept + sum(report.dropped.values())


# ------------------------------------------------------------------------------------------- serving benchmarks

def test_vllm_bench_result_is_one_row_per_request_with_its_measured_latencies():
    doc = _vllm()
    frame, report = load_log(VLLM)
    _balanced(report)
    assert report.rows_read == 8 and report.rows_kept == 7 and report.dropped == {"failed_request": 1}
    assert frame["input_tokens"].tolist() == [n for n, e in zip(doc["input_lens"], doc["errors"]) if not e]
    # the same means vLLM printed for the run: TTFT over the served requests, TPOT over those with 2+ tokens
    assert frame["ttft_ms"].mean() == pytest.approx(doc["mean_ttft_ms"], rel=1e-5)
    assert frame["tpot_ms"].dropna().mean() == pytest.approx(doc["mean_tpot_ms"], rel=1e-5)
    assert frame["e2e_ms"].iloc[0] == pytest.approx((doc["ttfts"][0] + sum(doc["itls"][0])) * 1e3, rel=1e-5)
    assert frame["model"].iloc[0] == "meta-llama/Llama-3.1-70B-Instruct"


def test_sglang_bench_serving_runs_one_per_line():
    frame, report = load_log(DATA / "sglang_bench_serving.jsonl")
    _balanced(report)
    assert report.rows_kept == 10 and frame["ttft_ms"].notna().all() and (frame["tpot_ms"] > 0).all()
    assert any("2 benchmark runs" in n for n in report.notes)


def _variant(change) -> tuple[pd.DataFrame, object]:
    doc = _vllm()
    change(doc)
    return load_log(json.dumps(doc).encode(), name="bench.json")


def test_unequal_arrays_keep_every_good_request_and_say_which_array_is_short():
    frame, report = _variant(lambda d: d["output_lens"].pop())
    _balanced(report)
    assert report.rows_read == 8 and report.dropped == {"failed_request": 1, "missing_tokens": 1}
    assert len(frame) == 6
    assert any(n.startswith("output_lens is 1 entries shorter") for n in report.notes), report.notes


def test_a_null_ttft_keeps_the_request_without_its_ttft():
    def null_first(d):
        d["ttfts"][0] = None
    frame, report = _variant(null_first)
    assert report.rows_kept == 7 and np.isnan(frame["ttft_ms"].iloc[0]) and frame["ttft_ms"].iloc[1:].notna().all()
    assert any("1 null entries" in n for n in report.notes)


def test_an_error_marks_a_failed_request_even_with_tokens():
    def timeout(d):
        d["errors"][0] = "TimeoutError"
    frame, report = _variant(timeout)
    _balanced(report)
    assert report.dropped == {"failed_request": 2} and frame["input_tokens"].iloc[0] != 812


def test_a_missing_latency_array_keeps_every_row_and_says_so():
    frame, report = _variant(lambda d: d.pop("ttfts"))
    assert report.rows_kept == 7 and frame["ttft_ms"].isna().all() and frame["tpot_ms"].notna().any()
    assert any(n.startswith("no ttfts array") for n in report.notes)


@pytest.mark.parametrize("drop, match", [
    (("input_lens",), "no input_lens array"),
    (("input_lens", "output_lens", "ttfts", "itls", "errors", "generated_texts"), "only the run's summary"),
])
def test_a_result_without_its_token_arrays_names_the_flag_that_saves_them(drop, match):
    doc = _vllm()
    for key in drop:
        doc.pop(key)
    with pytest.raises(IngestError) as info:
        load_log(json.dumps(doc).encode(), name="bench.json")
    message = str(info.value)
    assert match in message and "--save-detailed" in message, message


def test_check_reads_a_vllm_result_as_the_run_it_measured():
    doc = _vllm()
    (level,) = parse_result(VLLM.read_bytes(), VLLM.name)
    assert level.tool == "vllm" and level.requests == doc["completed"]
    assert level.ttft_p50_ms == pytest.approx(doc["median_ttft_ms"])
    assert level.tpot_p50_ms == pytest.approx(doc["median_tpot_ms"])
    assert level.rate_rps == pytest.approx(doc["completed"] / doc["duration"])
    summary_only = {k: v for k, v in doc.items() if k not in ("input_lens", "output_lens", "ttfts", "itls",
                                                                "errors", "generated_texts")}
    (level,) = parse_result(json.dumps(summary_only).encode(), "summary.json")
    assert level.ttft_p50_ms == pytest.approx(doc["median_ttft_ms"]) and level.rate_rps == doc["request_throughput"]


def test_check_reads_each_sglang_run_as_a_level():
    levels = parse_result((DATA / "sglang_bench_serving.jsonl").read_bytes(), "sglang.jsonl")
    assert [lv.tool for lv in levels] == ["sglang", "sglang"] and [lv.rate_rps for lv in levels] == [1.0, 4.0]


# ------------------------------------------------------------------------------------------- tracing tools

def test_langfuse_observations_by_langfuse_semantics():
    frame, report = load_log(DATA / "langfuse_observations.json")
    _balanced(report)
    assert set(frame["product"]) == {"support-chat", "doc-summarise"}
    assert frame["ttft_ms"].iloc[0] == pytest.approx(412.0) and frame["e2e_ms"].iloc[0] == pytest.approx(3212.0)
    assert frame["tpot_ms"].iloc[0] == pytest.approx((3212.0 - 412.0) / 140)
    assert frame["tpot_ms"].notna().sum() == 5 and not any("negative" in n for n in report.notes)
    assert frame["session_id"].dropna().unique().tolist() == ["sess-a", "sess-b"]


def test_langfuse_latency_and_time_to_first_token_are_seconds():
    doc = json.loads((DATA / "langfuse_observations.json").read_text())
    for row in doc["data"]:
        row.pop("completionStartTime")
        row.pop("endTime")
    frame, report = load_log(json.dumps(doc).encode(), name="langfuse.json")
    assert frame["ttft_ms"].iloc[0] == pytest.approx(412.0) and frame["e2e_ms"].iloc[0] == pytest.approx(3212.0)
    assert (frame["tpot_ms"].dropna() > 0).all() and frame["tpot_ms"].notna().sum() == 5


# ------------------------------------------------------------------------------------------- model names

@pytest.mark.parametrize("name, model", [
    ("meta-llama/Llama-3.1-70B-Instruct", "llama-3.1-70b"), ("llama-3.1-70b-instruct-fp8", "llama-3.1-70b"),
    ("Llama-3.1-70B-Instruct-AWQ", "llama-3.1-70b"), ("meta-llama/Meta-Llama-3.1-70B-Instruct-Turbo", "llama-3.1-70b"),
    ("neuralmagic/Meta-Llama-3.1-70B-Instruct-FP8-dynamic", "llama-3.1-70b"), ("Qwen/Qwen3-32B-FP8", "qwen3-32b"),
    ("Qwen/Qwen2.5-72B-Instruct-GPTQ-Int4", "qwen2.5-72b"), ("deepseek-ai/DeepSeek-V3-0324", "deepseek-v3"),
    ("mistralai/Mistral-7B-Instruct-v0.3", "mistral-7b"), ("openai/gpt-oss-120b", "gpt-oss-120b"),
])
def test_model_names_as_people_write_them(name, model):
    assert get_model(name).id == model


def _one_model(name: str) -> pd.DataFrame:
    return pd.DataFrame({"model": pd.Categorical([name] * 3), "product": pd.Categorical(["chat"] * 3)})


def test_the_mapping_of_a_log_model_name_is_shown():
    model, source = model_of_log(_one_model("Llama-3.1-70B-Instruct-AWQ"))
    assert model == "llama-3.1-70b" and "'Llama-3.1-70B-Instruct-AWQ' → Llama-3.1-70B" in source


def test_a_hosted_model_is_planned_on_a_stand_in_said_openly():
    model, source = model_of_log(_one_model("claude-sonnet-4-20250514"))
    assert model == "llama-3.1-70b"
    assert source.startswith("planned as if served by Llama-3.1-70B") and "claude-sonnet-4-20250514" in source
    text = summary_text(summarize([DATA / "anthropic_messages_usage.jsonl"]))
    assert "model: planned as if served by Llama-3.1-70B: the log's model 'claude-sonnet-4-20250514'" in text


def test_an_open_model_named_like_a_hosted_one_stays_itself():
    assert model_of_log(_one_model("gpt-oss-20b"))[0] == "gpt-oss-20b"


def test_a_unit_that_contradicts_the_format_is_kept_and_said():
    def milliseconds(d):
        d["ttfts"] = [t * 1000 for t in d["ttfts"]]
    frame, report = _variant(milliseconds)
    assert report.rows_kept == 7 and frame["ttft_ms"].notna().all()
    assert any("implausible for a first token" in n and "divide by 1000" in n for n in report.notes), report.notes


def test_a_log_served_by_the_planned_model_under_another_name_is_the_planned_model():
    names = ["meta-llama/Llama-3.1-70B-Instruct", "llama-3.1-70b-instruct-fp8", "claude-sonnet-4-20250514"]
    assert other_models(names, "llama-3.1-70b") == ["claude-sonnet-4-20250514"]


def test_langsmith_runs_by_langsmith_semantics():
    frame, report = load_log(DATA / "langsmith_runs.jsonl")
    _balanced(report)
    # the chain runs' tokens are their LLM runs' sums: three LLM runs are the requests, nothing planned twice
    assert report.rows_kept == 3 and frame["input_tokens"].tolist() == [900, 1300, 400]
    # session_id is the project (one for every run): the threads in the metadata are the sessions
    assert frame["session_id"].tolist() == ["th-1", "th-1", "th-2"] and frame["turn"].tolist() == [0, 1, 0]
    assert set(frame["product"]) == {"support-prod"} and set(frame["model"]) == {"gpt-4o-mini"}
    assert frame["ttft_ms"].tolist() == pytest.approx([500.0] * 3)


def test_helicone_requests_by_helicone_semantics():
    frame, report = load_log(DATA / "helicone_requests.jsonl")
    _balanced(report)
    assert report.dropped == {"failed_request": 1}   # the 504
    assert frame["session_id"].tolist() == ["s-1", "s-1", "s-2", "s-2"]
    assert frame["product"].tolist() == ["Trip Planner", "Trip Planner", "Support", "Support"]
    assert frame["e2e_ms"].tolist() == pytest.approx([3920.0, 3105.0, 1710.0, 2460.0])
    assert frame["cached_tokens"].tolist() == [0, 1792, 0, 1024]


def test_helicone_small_ttfts_stay_milliseconds():
    # a fast model's first tokens in a few ms: a guess from the size would take them for seconds
    rows = [json.loads(line) for line in (DATA / "helicone_requests.jsonl").read_text().splitlines()]
    for row, ttft in zip(rows, (6.0, 8.0, 7.0, None, 9.0)):
        row["time_to_first_token"] = ttft
    frame, report = load_log("\n".join(json.dumps(r) for r in rows).encode(), name="helicone.jsonl")
    assert frame["ttft_ms"].tolist() == pytest.approx([6.0, 8.0, 7.0, 9.0])


# ------------------------------------------------------------------------------------------- load-test records
# guidellm 0.8.1 and aiperf 0.13.0 wrote these files themselves (tests/data/ingest/README.md, tests/data/measured).

GUIDELLM = DATA / "guidellm_0.8.1_report.json"
AIPERF = DATA.parent / "measured" / "aiperf_0.13.0_records.jsonl"


def _guidellm() -> dict:
    return json.loads(GUIDELLM.read_text())


def _guidellm_variant(change) -> tuple[pd.DataFrame, object]:
    doc = _guidellm()
    change(doc["benchmarks"][0]["requests"])
    return load_log(json.dumps(doc).encode(), name="guidellm.json")


def test_guidellm_report_is_one_row_per_request_with_its_measured_latencies():
    successful = _guidellm()["benchmarks"][0]["requests"]["successful"]
    frame, report = load_log(GUIDELLM)
    _balanced(report)
    assert report.rows_kept == 12 and "guidellm" in report.format
    assert frame["input_tokens"].tolist() == [r["prompt_tokens"] for r in successful]
    assert frame["ttft_ms"].tolist() == pytest.approx([r["time_to_first_token_ms"] for r in successful])
    assert frame["tpot_ms"].tolist() == pytest.approx([r["inter_token_latency_ms"] for r in successful])
    # request_latency is seconds in guidellm's schema
    assert frame["e2e_ms"].tolist() == pytest.approx([r["request_latency"] * 1e3 for r in successful])
    assert frame["session_id"].nunique() == 12 and frame["model"].iloc[0] == "llama-3.1-8b-instruct"
    start = pd.Timestamp(successful[0]["request_start_time"], unit="s", tz="UTC")
    assert abs(frame["timestamp"].iloc[0] - start) < pd.Timedelta(milliseconds=1)


def test_guidellm_errored_and_incomplete_requests_are_dropped_and_counted():
    def fail_two(requests):
        requests["errored"].append(requests["successful"].pop())
        requests["incomplete"].append(requests["successful"].pop())
    frame, report = _guidellm_variant(fail_two)
    _balanced(report)
    assert report.rows_read == 12 and report.rows_kept == 10 and report.dropped == {"failed_request": 2}
    assert any("1 errored and 1 incomplete" in n for n in report.notes), report.notes


def test_guidellm_missing_field_and_null_latency_keep_every_good_request():
    def damage(requests):
        requests["successful"][0].pop("prompt_tokens")
        requests["successful"][1]["time_to_first_token_ms"] = None
    frame, report = _guidellm_variant(damage)
    _balanced(report)
    assert report.rows_kept == 11 and report.dropped == {"missing_tokens": 1}
    assert np.isnan(frame["ttft_ms"].iloc[0]) and frame["ttft_ms"].iloc[1:].notna().all()
    assert any("1 requests without a prompt_tokens" in n and "missing_tokens" in n for n in report.notes)
    assert any("1 requests without a time_to_first_token_ms" in n and "no TTFT" in n for n in report.notes)


def test_guidellm_latency_in_the_wrong_unit_is_kept_and_said():
    def milliseconds(requests):
        for r in requests["successful"]:
            r["request_latency"] *= 1000
    frame, report = _guidellm_variant(milliseconds)
    assert report.rows_kept == 12
    assert any(n.startswith("request_latency: median") and "divide by 1000" in n for n in report.notes), report.notes


def test_aiperf_records_are_one_row_per_request_with_sessions_and_arrival_times():
    records = [json.loads(line) for line in AIPERF.read_text().splitlines()]
    frame, report = load_log(AIPERF)
    _balanced(report)
    assert report.rows_kept == len(records) and "aiperf" in report.format
    assert frame["ttft_ms"].tolist() == pytest.approx([r["metrics"]["time_to_first_token"]["value"] for r in records])
    assert frame["input_tokens"].tolist() == [r["metrics"]["input_sequence_length"]["value"] for r in records]
    assert frame["session_id"].tolist() == [r["metadata"]["conversation_id"] for r in records]
    start = pd.Timestamp(records[0]["metadata"]["request_start_ns"], unit="ns", tz="UTC")
    assert abs(frame["timestamp"].iloc[0] - start) < pd.Timedelta(milliseconds=1)


def _aiperf_variant(change) -> tuple[pd.DataFrame, object]:
    records = [json.loads(line) for line in AIPERF.read_text().splitlines()]
    change(records)
    return load_log("\n".join(json.dumps(r) for r in records).encode(), name="profile_export.jsonl")


def test_aiperf_metrics_are_read_in_the_unit_each_carries():
    def seconds(records):
        records[0]["metrics"]["time_to_first_token"] = {"value": 0.25, "unit": "s"}
        records[1]["metrics"]["request_latency"]["unit"] = "tokens"      # no time unit: not guessed
        records[2]["metrics"]["time_to_first_token"]["value"] = None
        records[3]["metrics"].pop("output_sequence_length")
        records[4]["error"] = {"code": 500, "message": "boom"}
    frame, report = _aiperf_variant(seconds)
    _balanced(report)
    assert report.rows_read == 33 and report.dropped == {"missing_tokens": 1, "failed_request": 1}
    assert frame["ttft_ms"].iloc[0] == pytest.approx(250.0)
    assert np.isnan(frame["e2e_ms"].iloc[1]) and np.isnan(frame["ttft_ms"].iloc[2])
    assert any("1 request_latency values in unit 'tokens'" in n for n in report.notes), report.notes
    assert any("1 records without a time_to_first_token value" in n for n in report.notes)
    assert any("1 records without a output_sequence_length value" in n for n in report.notes)


def test_a_genai_perf_export_is_refused_for_its_missing_token_counts():
    doc = {"experiments": [{"experiment": {"mode": "concurrency", "value": 1}, "requests": [
        {"timestamp": 1, "request_inputs": {"payload": "{}"}, "response_timestamps": [2, 3],
         "response_outputs": [{"response": "data: {}"}]}]}], "version": ""}
    with pytest.raises(IngestError) as info:
        load_log(json.dumps(doc).encode(), name="profile_export.json")
    assert "genai-perf" in str(info.value) and "no token counts" in str(info.value)


def test_check_reads_a_guidellm_report_from_the_requests_load_log_reads():
    frame, _ = load_log(GUIDELLM)
    (level,) = parse_result(GUIDELLM.read_bytes(), GUIDELLM.name)
    # one log, one answer: the level's TTFT and TPOT are those of the rows the log path keeps
    assert level.ttft_p50_ms == pytest.approx(float(np.percentile(frame["ttft_ms"], 50)))
    assert level.tpot_p90_ms == pytest.approx(float(np.percentile(frame["tpot_ms"], 90)))
    assert level.requests == len(frame)
