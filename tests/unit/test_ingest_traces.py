"""Every real public trace loads with the row counts and statistics its SOURCE.md publishes."""
from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from shapeviz.ingest import load_log
from shapeviz.schema import DTYPES

AZURE_CODE = "azure_llm_2023/AzureLLMInferenceTrace_code.csv"
AZURE_CONV = "azure_llm_2023/AzureLLMInferenceTrace_conv.csv"
MOONCAKE_CONV = "mooncake_fast25/conversation_trace.jsonl.gz"
MOONCAKE_SYNTH = "mooncake_fast25/synthetic_trace.jsonl"
BURST_1 = "burstgpt/burstgpt_slice.csv"
BURST_3 = "burstgpt/burstgpt3_slice.csv"
TRACELAB = "tracelab_example/round_trace.jsonl"
VIDUR = "vidur_arxiv_summarization/arxiv_summarization_stats_llama2_tokenizer_filtered_v2.csv"
ALL = [AZURE_CODE, AZURE_CONV, MOONCAKE_CONV, MOONCAKE_SYNTH, BURST_1, BURST_3, TRACELAB, VIDUR]


def _span_s(frame: pd.DataFrame) -> float:
    return (frame["timestamp"].max() - frame["timestamp"].min()).total_seconds()


@pytest.mark.parametrize("relative", ALL)
def test_every_trace_loads_into_the_canonical_schema_with_a_balanced_report(trace, relative):
    frame, report = load_log(trace(relative))
    assert report.balanced and report.rows_read == report.rows_kept + sum(report.dropped.values())
    assert report.rows_kept == len(frame) > 0
    for column in frame.columns:
        assert str(frame[column].dtype) == DTYPES[column], column
    assert (frame["input_tokens"] >= 0).all() and (frame["output_tokens"] > 0).all()
    assert frame["product"].notna().all()
    assert report.mapping["input_tokens"] and report.mapping["output_tokens"]


@pytest.mark.parametrize(
    "relative, rows, in_mean, in_p50, out_mean, out_p50, span_s",
    [
        (AZURE_CODE, 8_819, 2_047.8, 1_469, 27.9, 13, 3_435.9),
        (AZURE_CONV, 19_366, 1_154.7, 1_020, 211.1, 129, 3_501.7),
    ],
)
def test_azure_matches_published_statistics(trace, relative, rows, in_mean, in_p50, out_mean, out_p50, span_s):
    frame, report = load_log(trace(relative))
    assert report.rows_read == report.rows_kept == rows
    assert frame["input_tokens"].mean() == pytest.approx(in_mean, abs=0.05)
    assert frame["input_tokens"].median() == in_p50
    assert frame["output_tokens"].mean() == pytest.approx(out_mean, abs=0.05)
    assert frame["output_tokens"].median() == out_p50
    assert _span_s(frame) == pytest.approx(span_s, abs=0.05)
    # naive datetimes: read as UTC, and the report says so
    assert str(frame["timestamp"].dt.tz) == "UTC"
    assert any("UTC" in note for note in report.notes)
    assert frame["product"].nunique() == 1


def test_azure_first_row_is_the_notebooks_first_row(trace):
    frame, _ = load_log(trace(AZURE_CODE))
    first = frame.iloc[0]
    assert first["timestamp"] == pd.Timestamp("2023-11-16 18:17:03.979960", tz="UTC")
    assert (first["input_tokens"], first["output_tokens"]) == (4808, 10)
    assert frame["product"].iloc[0] == "AzureLLMInferenceTrace_code"


@pytest.mark.parametrize(
    "relative, rows, in_mean, out_mean, in_p50, out_p50, span_ms",
    [
        (MOONCAKE_CONV, 12_031, 12_035.1, 342.6, 6_909, 350, 3_536_999),
        (MOONCAKE_SYNTH, 3_993, 15_325.5, 149.1, 11_587, 69, 1_022_025),
    ],
)
def test_mooncake_matches_published_statistics(trace, relative, rows, in_mean, out_mean, in_p50, out_p50, span_ms):
    frame, report = load_log(trace(relative))
    assert report.rows_kept == report.rows_read == rows
    if relative.endswith(".gz"):
        assert report.compression == "gzip"
    assert report.format == "jsonl"
    assert frame["input_tokens"].mean() == pytest.approx(in_mean, abs=0.05)
    assert frame["output_tokens"].mean() == pytest.approx(out_mean, abs=0.05)
    assert frame["input_tokens"].median() == in_p50
    assert frame["output_tokens"].median() == out_p50
    # timestamps are milliseconds from 0
    assert _span_s(frame) * 1000 == pytest.approx(span_ms, abs=1)
    assert frame["timestamp"].min() == pd.Timestamp(0, tz="UTC")


@pytest.mark.parametrize("relative", [MOONCAKE_CONV, MOONCAKE_SYNTH])
def test_mooncake_hash_ids_are_int64_arrays_of_one_block_per_512_tokens(trace, relative):
    frame, _ = load_log(trace(relative))
    lengths = frame["hash_ids"].map(len).to_numpy()
    assert np.array_equal(lengths, np.ceil(frame["input_tokens"].to_numpy() / 512).astype(int))
    assert all(isinstance(h, np.ndarray) and h.dtype == np.int64 for h in frame["hash_ids"].head(100))


def test_mooncake_conversation_hash_block_totals(trace):
    frame, _ = load_log(trace(MOONCAKE_CONV))
    blocks = np.concatenate(frame["hash_ids"].to_list())
    assert blocks.size == 288_500
    assert np.unique(blocks).size == 182_790


def test_burstgpt_1_drops_failures_with_their_reason(trace):
    frame, report = load_log(trace(BURST_1))
    assert report.rows_read == 400
    assert report.dropped == {"failed_request": 17}
    assert report.rows_kept == len(frame) == 383
    assert frame["input_tokens"].median() == 353
    assert frame["output_tokens"].median() == 238
    assert frame["input_tokens"].mean() == pytest.approx(543.6, abs=0.05)
    assert _span_s(frame) == 37_269
    # the model column is the product: 320 ChatGPT and 80 GPT-4 rows in the file, minus the 17 failures
    counts = frame["product"].value_counts()
    assert counts["ChatGPT"] <= 320 and counts["GPT-4"] <= 80 and counts.sum() == 383
    assert set(frame["product"].cat.categories) == {"ChatGPT", "GPT-4"}


def test_burstgpt_3_sessions_turns_and_elapsed_time(trace):
    frame, report = load_log(trace(BURST_3))
    assert report.rows_read == 400
    assert report.dropped == {"failed_request": 1}
    assert report.rows_kept == 399
    assert frame["input_tokens"].median() == 309
    assert frame["output_tokens"].median() == 101
    # 135 sessions in the file, 134 once the failed (zero-input) row is dropped
    assert frame["session_id"].nunique() == 134
    assert frame["session_id"].notna().sum() == 393
    per_session = frame.dropna(subset=["session_id"]).groupby("session_id", observed=True).size()
    assert per_session.max() == 24
    assert per_session.median() == 2
    # turns derived from timestamp order: 0..n-1 in every session
    turns = frame.dropna(subset=["session_id"]).groupby("session_id", observed=True)["turn"].agg(["min", "max", "size"])
    assert (turns["min"] == 0).all() and (turns["max"] == turns["size"] - 1).all()
    # Elapsed time is end-to-end seconds → e2e_ms
    assert frame["e2e_ms"].max() == pytest.approx(155_000)
    assert frame.loc[frame["model"] == "GPT-4", "e2e_ms"].median() == pytest.approx(22_000, abs=1_000)
    assert _span_s(frame) == 41_453


def test_tracelab_sessions_turns_cached_tokens_and_first_event_time(trace):
    frame, report = load_log(trace(TRACELAB))
    assert report.rows_read == report.rows_kept == 19
    assert frame["session_id"].nunique() == 2
    assert frame["input_tokens"].mean() == pytest.approx(27_053.3, abs=0.05)
    assert frame["input_tokens"].median() == 32_272
    assert frame["output_tokens"].median() == 273
    assert frame["cached_tokens"].sum() / frame["input_tokens"].sum() == pytest.approx(0.921, abs=0.0005)
    sizes = frame.groupby("session_id", observed=True)["turn"].agg(["min", "max"])
    assert sorted(sizes["max"].tolist()) == [8, 9] and (sizes["min"] == 0).all()
    assert frame["timestamp"].min() == pd.Timestamp("2026-03-21T10:05:59.328Z")
    assert set(frame["model"].cat.categories) == {"claude-opus-4-8", "gpt-5.4"}
    assert report.mapping["cached_tokens"] == "prefix_tokens"
    assert report.mapping["turn"] == "round_index"


def test_vidur_arxiv_lengths(trace):
    frame, report = load_log(trace(VIDUR))
    assert report.rows_read == report.rows_kept == 28_257
    assert frame["input_tokens"].median() == 2_730
    assert frame["output_tokens"].median() == 167
    assert frame["input_tokens"].mean() == pytest.approx(2_588.1, abs=0.05)
    assert frame["output_tokens"].mean() == pytest.approx(291.4, abs=0.05)
    assert (frame["input_tokens"] + frame["output_tokens"]).max() == 4_096
    assert "timestamp" not in frame.columns


def test_upload_bytes_and_path_give_the_same_frame(trace):
    path = trace(MOONCAKE_CONV)
    by_path = load_log(path)
    by_bytes = load_log(path.read_bytes(), name=path.name)
    with path.open("rb") as stream:
        by_stream = load_log(stream)
    pd.testing.assert_frame_equal(by_path.frame.drop(columns="hash_ids"), by_bytes.frame.drop(columns="hash_ids"))
    pd.testing.assert_frame_equal(by_path.frame.drop(columns="hash_ids"), by_stream.frame.drop(columns="hash_ids"))
    assert by_bytes.report.source == path.name == by_stream.report.source
    assert math.isclose(by_bytes.frame["input_tokens"].mean(), 12_035.1, abs_tol=0.05)
