"""Column aliases of every log family in PRODUCT.md, user mapping overrides, detect_columns and combine."""
from __future__ import annotations

import json
import tomllib
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from shapeviz.ingest import (
    ALIASES,
    DEFAULT_LIMITS,
    IngestError,
    combine,
    detect_columns,
    load_log,
)


def _csv(rows: list[dict]) -> bytes:
    return pd.DataFrame(rows).to_csv(index=False).encode()


def _jsonl(rows: list[dict]) -> bytes:
    return b"".join(json.dumps(r).encode() + b"\n" for r in rows)


# one small log per family: (name, bytes, expected canonical values of the first row)
FAMILIES = {
    "azure": (_csv([{"TIMESTAMP": "2023-11-16 18:17:03.9799600", "ContextTokens": 4808, "GeneratedTokens": 10}]),
              {"input_tokens": 4808, "output_tokens": 10}),
    "burstgpt": (_csv([{"Timestamp": 5, "Session ID": "s", "Elapsed time": 3, "Model": "GPT-4", "Request tokens": 472,
                        "Response tokens": 18, "Total tokens": 490, "Log Type": "Conversation log"}]),
                 {"input_tokens": 472, "output_tokens": 18, "e2e_ms": 3000.0, "model": "GPT-4", "session_id": "s"}),
    "mooncake": (_jsonl([{"timestamp": 27, "input_length": 600, "output_length": 5, "hash_ids": [4, 5]}]),
                 {"input_tokens": 600, "output_tokens": 5}),
    "vidur": (_csv([{"arrived_at": 1.5, "num_prefill_tokens": 3772, "num_decode_tokens": 54}]),
              {"input_tokens": 3772, "output_tokens": 54}),
    "openai_chat": (_jsonl([{"model": "gpt-4o", "usage": {"prompt_tokens": 1200, "completion_tokens": 150,
                                                          "prompt_tokens_details": {"cached_tokens": 1024},
                                                          "completion_tokens_details": {"reasoning_tokens": 0}}}]),
                    {"input_tokens": 1200, "output_tokens": 150, "cached_tokens": 1024, "model": "gpt-4o"}),
    "openai_responses": (_jsonl([{"model": "o3", "usage": {"input_tokens": 900, "output_tokens": 2000,
                                                           "input_tokens_details": {"cached_tokens": 512}}}]),
                         {"input_tokens": 900, "output_tokens": 2000, "cached_tokens": 512}),
    "anthropic": (_jsonl([{"model": "claude-sonnet-4", "usage": {"input_tokens": 12, "output_tokens": 300,
                                                                 "cache_read_input_tokens": 4000,
                                                                 "cache_creation_input_tokens": 600}}]),
                  {"input_tokens": 4612, "output_tokens": 300, "cached_tokens": 4000}),
    "otel": (_jsonl([{"attributes": {"gen_ai.usage.input_tokens": 700, "gen_ai.usage.output_tokens": 80,
                                     "gen_ai.usage.cache_read.input_tokens": 512,
                                     "gen_ai.request.model": "llama", "gen_ai.response.model": "llama-3.1-8b",
                                     "gen_ai.conversation.id": "conv-1",
                                     "gen_ai.latency.time_to_first_token": 0.12, "gen_ai.latency.e2e": 1.5}}]),
             {"input_tokens": 700, "output_tokens": 80, "cached_tokens": 512, "model": "llama-3.1-8b",
              "session_id": "conv-1", "ttft_ms": 120.0, "e2e_ms": 1500.0}),
    "otel_old": (_csv([{"gen_ai.usage.prompt_tokens": 70, "gen_ai.usage.completion_tokens": 8}]),
                 {"input_tokens": 70, "output_tokens": 8}),
    "openinference": (_csv([{"llm.token_count.prompt": 333, "llm.token_count.completion": 44,
                             "llm.model_name": "gpt-4o-mini", "session.id": "abc"}]),
                      {"input_tokens": 333, "output_tokens": 44, "model": "gpt-4o-mini", "session_id": "abc"}),
    "langfuse": (_csv([{"start_time": "2024-06-01T10:00:00.000Z", "completion_start_time": "2024-06-01T10:00:00.450Z",
                        "end_time": "2024-06-01T10:00:02.450Z", "usage_details.input": 900,
                        "usage_details.output": 101, "session_id": "u1", "provided_model_name": "gpt-4o"}]),
                 {"input_tokens": 900, "output_tokens": 101, "ttft_ms": 450.0, "e2e_ms": 2450.0,
                  "tpot_ms": 20.0, "model": "gpt-4o"}),
    "langfuse_camel": (_csv([{"promptTokens": 9, "completionTokens": 3}]), {"input_tokens": 9, "output_tokens": 3}),
    "helicone": (_csv([{"request_created_at": "2024-06-01 10:00:00+00", "prompt_tokens": 50, "completion_tokens": 5,
                        "latency": 800, "time_to_first_token": 240, "model": "gpt-4o"}]),
                 {"input_tokens": 50, "output_tokens": 5, "e2e_ms": 800.0, "ttft_ms": 240.0}),
    "langsmith": (_csv([{"start_time": "2024-06-01T10:00:00Z", "first_token_time": "2024-06-01T10:00:01Z",
                         "prompt_tokens": 10, "completion_tokens": 20, "thread_id": "t9"}]),
                  {"input_tokens": 10, "output_tokens": 20, "ttft_ms": 1000.0, "session_id": "t9"}),
    "aiperf": (_jsonl([{"metadata": {"conversation_id": "c", "turn_index": 2},
                        "metrics": {"input_sequence_length": {"value": 550, "unit": "tokens"},
                                    "output_sequence_length": {"value": 120, "unit": "tokens"},
                                    "time_to_first_token": {"value": 0.2, "unit": "s"},
                                    "inter_token_latency": {"value": 12.5, "unit": "ms"}}}]),
               {"input_tokens": 550, "output_tokens": 120, "ttft_ms": 200.0, "tpot_ms": 12.5, "turn": 2}),
    "aiperf_flat": (_csv([{"input_sequence_length": 5, "output_sequence_length": 6, "time_to_first_token": 35.0,
                           "inter_token_latency": 9.0, "conversation_id": "c", "turn_index": 0}]),
                    {"input_tokens": 5, "output_tokens": 6, "ttft_ms": 35.0, "tpot_ms": 9.0}),
    "llmperf": (_csv([{"number_input_tokens": 512, "number_output_tokens": 128, "ttft_s": 0.25,
                       "inter_token_latency_s": 0.02, "end_to_end_latency_s": 2.8}]),
                {"input_tokens": 512, "output_tokens": 128, "ttft_ms": 250.0, "tpot_ms": 20.0, "e2e_ms": 2800.0}),
    "tracelab": (_jsonl([{"session_id": "claude:1", "round_index": 3, "model": "claude-opus", "input_tokens_total": 32272,
                          "prefix_tokens": 27217, "newly_append_tokens": 5055, "output_tokens": 931,
                          "claude_cache_read_input_tokens": 27217, "turn_id": "x7",
                          "timing_events": [{"event_type": "user_message", "timestamp": "2026-06-01T05:40:20.151Z"},
                                            {"event_type": "text", "timestamp": "2026-06-01T05:40:29.887Z"}]}]),
                 {"input_tokens": 32272, "output_tokens": 931, "cached_tokens": 27217, "turn": 3,
                  "session_id": "claude:1", "timestamp": pd.Timestamp("2026-06-01T05:40:20.151Z")}),
}


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_each_family_maps_without_help(family):
    data, expected = FAMILIES[family]
    frame, report = load_log(data, name=f"{family}.log")
    assert report.rows_kept == 1, report
    row = frame.iloc[0]
    for column, value in expected.items():
        if isinstance(value, float):
            assert row[column] == pytest.approx(value, rel=1e-5), column
        else:
            assert row[column] == value, column


def test_anthropic_input_adds_cache_reads_and_writes_and_says_so():
    _, report = load_log(FAMILIES["anthropic"][0], name="messages.jsonl")
    assert report.mapping["input_tokens"] == ("usage.input_tokens + usage.cache_read_input_tokens"
                                              " + usage.cache_creation_input_tokens")
    assert any("Anthropic" in n for n in report.notes)


def test_openai_responses_input_tokens_already_include_cached_ones():
    frame, report = load_log(FAMILIES["openai_responses"][0], name="responses.jsonl")
    assert frame["input_tokens"].iloc[0] == 900 and "+" not in report.mapping["input_tokens"]


def test_output_derived_from_total_minus_input():
    data = _csv([{"prompt": 100, "Total tokens": 130}, {"prompt": 50, "Total tokens": 40}])
    frame, report = load_log(data, name="totals.csv", mapping={"input_tokens": "prompt"})
    assert frame["output_tokens"].tolist() == [30]
    assert report.dropped == {"negative_tokens": 1}
    assert report.mapping["output_tokens"] == "Total tokens - prompt"


def test_matching_ignores_case_spaces_and_punctuation():
    detected = detect_columns(["REQUEST-TOKENS", "response tokens", "session id", "Model"])
    assert detected == {"input_tokens": "REQUEST-TOKENS", "output_tokens": "response tokens",
                        "session_id": "session id", "model": "Model"}


def test_tracelab_turn_id_is_not_a_turn_index():
    assert "turn" not in detect_columns(["input_tokens", "output_tokens", "turn_id"])


def test_every_product_md_alias_is_in_the_table():
    names = {name for names in ALIASES.values() for name in names}
    product_md = ["TIMESTAMP", "ContextTokens", "GeneratedTokens", "Session ID", "Elapsed time", "Model",
                  "Request tokens", "Response tokens", "Total tokens", "input_length", "output_length", "hash_ids",
                  "arrived_at", "num_prefill_tokens", "num_decode_tokens", "usage.prompt_tokens",
                  "usage.completion_tokens", "prompt_tokens_details.cached_tokens", "input_tokens", "output_tokens",
                  "input_tokens_details.cached_tokens", "cache_read_input_tokens", "cache_creation_input_tokens",
                  "gen_ai.usage.input_tokens", "gen_ai.usage.output_tokens", "gen_ai.usage.prompt_tokens",
                  "gen_ai.usage.completion_tokens", "gen_ai.usage.cache_read.input_tokens", "gen_ai.request.model",
                  "gen_ai.response.model", "gen_ai.conversation.id", "gen_ai.latency.time_to_first_token",
                  "gen_ai.latency.e2e", "llm.token_count.prompt", "llm.token_count.completion", "llm.model_name",
                  "session.id", "start_time", "completion_start_time", "time_to_first_token", "usage_details.input",
                  "usage_details.output", "promptTokens", "completionTokens", "session_id", "provided_model_name",
                  "request_created_at", "prompt_tokens", "completion_tokens", "latency", "model", "first_token_time",
                  "thread_id", "input_sequence_length", "output_sequence_length", "inter_token_latency",
                  "conversation_id", "turn_index", "number_input_tokens", "number_output_tokens", "ttft_s",
                  "inter_token_latency_s", "input_tokens_total", "prefix_tokens", "round_index"]
    missing = [n for n in product_md if n.lower() not in {x.lower() for x in names}]
    assert missing == []


# ------------------------------------------------------------------------------------------- overrides

def test_mapping_override_wins_and_is_reported():
    data = _csv([{"ctx": 100, "gen": 10, "prompt_tokens": 1, "completion_tokens": 1}])
    frame, report = load_log(data, name="x.csv", mapping={"input_tokens": "ctx", "output_tokens": "GEN"})
    assert frame["input_tokens"].tolist() == [100] and frame["output_tokens"].tolist() == [10]
    assert report.mapping["input_tokens"] == "ctx" and report.mapping["output_tokens"] == "gen"


def test_override_naming_a_missing_column_lists_the_columns_seen():
    data = _csv([{"ctx": 100, "gen": 10}])
    with pytest.raises(IngestError) as info:
        load_log(data, name="x.csv", mapping={"input_tokens": "context"})
    message = str(info.value)
    assert "'context'" in message and "[ctx, gen]" in message and "\n" not in message


def test_override_with_an_unknown_canonical_name():
    with pytest.raises(IngestError, match="not a canonical column"):
        load_log(_csv([{"prompt_tokens": 1, "completion_tokens": 2}]), name="x.csv", mapping={"inputs": "a"})


def test_override_can_switch_a_detected_column_off():
    data = _csv([{"prompt_tokens": 1, "completion_tokens": 2, "session_id": "a"}])
    frame, report = load_log(data, name="x.csv", mapping={"session_id": ""})
    assert "session_id" not in frame.columns and "session_id" not in report.mapping


# ------------------------------------------------------------------------------------------- combine

def test_combine_keeps_products_apart_and_sums_reports():
    a = load_log(_csv([{"prompt_tokens": 6000, "completion_tokens": 150}] * 3), name="rag.csv")
    b = load_log(_csv([{"prompt_tokens": 800, "completion_tokens": 2500}] * 2
                      + [{"prompt_tokens": 5, "completion_tokens": 0}]), name="agent.csv.gz")
    frame, report = combine([a, b])
    assert frame["product"].value_counts().to_dict() == {"rag": 3, "agent": 2}
    assert report.rows_read == 6 and report.rows_kept == 5 and report.dropped == {"failed_request": 1}
    assert str(frame["product"].dtype) == "category" and str(frame["input_tokens"].dtype) == "int32"


def test_combine_two_files_with_the_same_name_keeps_two_products():
    one = load_log(_csv([{"prompt_tokens": 1, "completion_tokens": 1}]), name="trace.csv")
    two = load_log(_csv([{"prompt_tokens": 2, "completion_tokens": 2}]), name="trace.csv")
    frame, _ = combine([one, two])
    assert frame["product"].nunique() == 2


def test_combine_uses_each_files_own_product_column():
    a = load_log(_csv([{"prompt_tokens": 1, "completion_tokens": 1, "service": "chat"}]), name="a.csv")
    b = load_log(_csv([{"prompt_tokens": 2, "completion_tokens": 2}]), name="b.csv")
    frame, report = combine([a, b])
    assert frame["product"].tolist() == ["chat", "b"]
    assert "a.csv: service" in report.mapping["product"]


def test_combine_needs_a_log():
    with pytest.raises(ValueError):
        combine([])


# ------------------------------------------------------------------------------------------- limits ↔ UI

def test_streamlit_upload_limit_matches_ingest_byte_limit():
    config = tomllib.loads((Path(__file__).resolve().parents[2] / ".streamlit" / "config.toml").read_text())
    assert config["server"]["maxUploadSize"] * (1 << 20) == DEFAULT_LIMITS.max_bytes_in
    assert config["browser"]["gatherUsageStats"] is False and config["server"]["headless"] is True


def test_epoch_units_are_decided_by_magnitude():
    base = 1_717_000_000
    for scale, unit in ((1, "s"), (1_000, "ms"), (1_000_000, "us"), (1_000_000_000, "ns")):
        frame, report = load_log(_csv([{"ts": base * scale, "prompt_tokens": 1, "completion_tokens": 1}]),
                                 name="e.csv")
        assert frame["timestamp"].iloc[0] == pd.Timestamp(base, unit="s", tz="UTC"), unit
        assert any(f"epoch {unit}" in n for n in report.notes)


def test_hash_ids_are_arrays_even_from_irregular_json():
    lines = [{"input_length": 1000, "output_length": 3, "hash_ids": [1, 2]},
             {"input_length": "x", "output_length": 3, "hash_ids": [3]},
             {"input_length": 100, "output_length": 3, "hash_ids": [4]}]
    frame, _ = load_log(_jsonl(lines), name="m.jsonl")
    assert [h.tolist() for h in frame["hash_ids"]] == [[1, 2], [4]]
    assert all(h.dtype == np.int64 for h in frame["hash_ids"])


def test_turns_follow_time_inside_each_session_even_when_the_file_is_not_sorted():
    data = b"session_id,timestamp,prompt_tokens,completion_tokens\na,3,1,1\nb,1,1,1\na,2,1,1\n,4,1,1\na,1,1,1\n"
    frame, report = load_log(data, name="s.csv")
    assert frame["turn"].tolist() == [2, 0, 1, pd.NA, 0]
    assert report.mapping["turn"] == "derived: order inside session_id by timestamp"


def test_relative_offsets_start_at_the_epoch_and_say_so():
    frame, report = load_log(FAMILIES["vidur"][0], name="vidur.csv")
    assert frame["timestamp"].iloc[0] == pd.Timestamp("1970-01-01 00:00:01.5", tz="UTC")
    assert any("relative offsets, read as s" in n for n in report.notes)
    frame, report = load_log(FAMILIES["mooncake"][0], name="mooncake.jsonl")
    assert frame["timestamp"].iloc[0] == pd.Timestamp("1970-01-01 00:00:00.027", tz="UTC")
    assert any("relative offsets, read as ms" in n for n in report.notes)
