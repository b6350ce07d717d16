"""Sessions, context growth and agent recognition on the real traces (BurstGPT, TraceLab, Mooncake)."""
from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from shapeviz.analyses.sessions import (
    detect_agents,
    has_sessions,
    session_summary,
    session_table,
    session_turns,
    ttft_by_turn,
    turn_profile,
)
from shapeviz.ingest import load_log

BURST_3 = "burstgpt/burstgpt3_slice.csv"
TRACELAB = "tracelab_example/round_trace.jsonl"
MOONCAKE_CONV = "mooncake_fast25/conversation_trace.jsonl.gz"
KV_BYTES = 327_680.0  # Llama-3-70B-like: 80 layers × 8 KV heads × 128 dims × 2 (K, V) × 2 bytes


@pytest.fixture(scope="module")
def burst(traces) -> pd.DataFrame:
    return load_log(traces / BURST_3).frame


@pytest.fixture(scope="module")
def tracelab(traces) -> pd.DataFrame:
    return load_log(traces / TRACELAB).frame


def _prefill_ms(input_tokens: np.ndarray, cached_tokens: np.ndarray) -> np.ndarray:
    """A toy prefill model: linear in uncached tokens plus causal attention over the whole context."""
    return 0.02 * (input_tokens - cached_tokens) + 2e-6 * (input_tokens**2 - cached_tokens**2)


def _agent_frame(sessions: int = 40, turns: int = 8, seed: int = 3) -> pd.DataFrame:
    """Tool loops: each round resends the history plus the last answer and a tool result."""
    rng = np.random.default_rng(seed)
    rows = []
    for s in range(sessions):
        context = 2_000 + int(rng.integers(0, 500))  # system prompt and tool schemas
        for t in range(turns):
            out = int(rng.integers(100, 400))
            rows.append((f"agent-{s}", t, context, out))
            context += out + int(rng.integers(200, 1_500))
    frame = pd.DataFrame(rows, columns=["session_id", "turn", "input_tokens", "output_tokens"])
    frame["product"] = "swe-agent"
    return frame.astype({"session_id": "category", "product": "category", "turn": "Int32"})


def _chat_frame(n: int = 300, seed: int = 4) -> pd.DataFrame:
    """Single-turn sessions: a question, an answer, never a follow-up."""
    rng = np.random.default_rng(seed)
    return pd.DataFrame(
        {
            "session_id": pd.Categorical([f"chat-{i}" for i in range(n)]),
            "input_tokens": rng.integers(50, 2_000, n).astype(np.int32),
            "output_tokens": rng.integers(50, 600, n).astype(np.int32),
            "product": pd.Categorical(["support-chat"] * n),
        }
    )


# --------------------------------------------------------------------------------------------- BurstGPT
def test_burstgpt_has_134_sessions_median_2_turns_longest_24(burst):
    summary = session_summary(burst)
    assert summary["count"] == 134  # SOURCE.md: 135 sessions, 134 after the failed zero-input row is dropped
    assert summary["turns_p50"] == 2
    table = session_table(burst)
    assert table["turns"].max() == 24
    assert table["turns"].sum() == 393 == burst["session_id"].notna().sum()  # API-log rows are not sessions


def test_burstgpt_chat_is_not_an_agent(burst):
    verdicts = detect_agents(burst)
    assert set(verdicts) == {"ChatGPT", "GPT-4"}
    for verdict in verdicts.values():
        assert not verdict.is_agent
        assert verdict.growing_session_share < 0.5
        assert "sessions" in verdict.reason and verdict.reason.endswith(".")


def test_burstgpt_turn_profile_counts_every_session_once_at_turn_zero(burst):
    profile = turn_profile(burst)
    first = profile[profile["turn"] == 0]
    assert first["sessions"].sum() == 134
    for _, rows in profile.groupby("product", observed=True):
        assert rows["sessions"].is_monotonic_decreasing  # a session reaching turn k reached every turn before
        assert (rows["input_tokens_p10"] <= rows["input_tokens_p50"]).all()
        assert (rows["input_tokens_p50"] <= rows["input_tokens_p90"]).all()
    assert first["growth_tokens_p50"].isna().all()


def test_session_estimate_shortens_later_turns(burst):
    cold = ttft_by_turn(burst, _prefill_ms, cached="none", max_turn=4)
    warm = ttft_by_turn(burst, _prefill_ms, cached="session_estimate", max_turn=4)
    later = cold["turn"] >= 1
    assert (warm.loc[later, "ttft_ms_p50"].to_numpy() < cold.loc[later, "ttft_ms_p50"].to_numpy()).all()
    # turn 0 has nothing to reuse: identical either way
    assert np.allclose(warm.loc[~later, "ttft_ms_p50"], cold.loc[~later, "ttft_ms_p50"])


# --------------------------------------------------------------------------------------------- TraceLab
def test_tracelab_two_sessions_grow_every_round_and_are_agents(tracelab):
    table = session_table(tracelab).set_index("product")
    assert table.loc["claude-opus-4-8", "turns"] == 10 and table.loc["gpt-5.4", "turns"] == 9  # SOURCE.md
    assert (table["last_input_tokens"] > table["first_input_tokens"]).all()
    assert (table["growth_tokens_per_turn"] > 0).all()
    verdicts = detect_agents(tracelab)
    assert all(v.is_agent for v in verdicts.values())
    assert all("grows" in v.reason for v in verdicts.values())
    summary = session_summary(tracelab)
    assert summary["count"] == 2 and summary["turns_p50"] == 9.5 and summary["growth_tokens_per_turn_p50"] > 0


def test_tracelab_context_follows_round_index_and_repeats_the_previous_round(tracelab, trace):
    turns = session_turns(tracelab)
    raw = pd.read_json(trace(TRACELAB), lines=True)
    for session, rows in turns.groupby("session_id", observed=True):
        expected = raw[raw["session_id"] == session].sort_values("round_index")["input_tokens_total"].to_numpy()
        assert rows["input_tokens"].tolist() == expected.tolist()
    later = turns[turns["turn"] > 0]
    # an agent resends almost all of its history: most of each round repeats the previous context
    assert later["repeated_share"].median() > 0.8


def test_tracelab_later_rounds_take_longer_without_a_cache_and_less_with_the_reported_one(tracelab):
    cold = ttft_by_turn(tracelab, _prefill_ms, cached="none")
    warm = ttft_by_turn(tracelab, _prefill_ms, cached="reported")
    assert set(cold.columns) == {"product", "turn", "requests", "ttft_ms_p50", "ratio_to_turn_1"}
    for product, rows in cold.groupby("product", observed=True):
        assert rows.loc[rows["turn"] == 0, "ratio_to_turn_1"].item() == 1.0
        assert rows["ratio_to_turn_1"].iloc[-1] > 1.0  # the last round prefills more than the first
    assert (warm["ttft_ms_p50"].to_numpy() < cold["ttft_ms_p50"].to_numpy()).all()


def test_tracelab_kv_peak_is_the_largest_context_times_bytes_per_token(tracelab, trace):
    table = session_table(tracelab, kv_bytes_per_token=KV_BYTES).set_index("session_id")
    raw = [json.loads(line) for line in trace(TRACELAB).read_text().splitlines()]
    for session in table.index:
        peak = max(r["input_tokens_total"] + r["output_tokens"] for r in raw if r["session_id"] == session)
        assert table.loc[session, "kv_gb_peak"] == pytest.approx(peak * KV_BYTES / 1e9)
    profile = turn_profile(tracelab, kv_bytes_per_token=KV_BYTES)
    assert {"kv_gb_p50", "kv_gb_p90"} <= set(profile.columns)


# --------------------------------------------------------------------------------------- generated frames
def test_generated_agent_frame_is_an_agent_and_single_turn_chat_is_not():
    agent = detect_agents(_agent_frame())["swe-agent"]
    assert agent.is_agent and agent.sessions == 40 and agent.turns_p50 == 8
    assert agent.growth_tokens_per_turn_p50 > 0
    chat = detect_agents(_chat_frame())["support-chat"]
    assert not chat.is_agent and chat.turns_p50 == 1
    assert "single turn" in chat.reason


def test_agent_thresholds_are_parameters():
    frame = _agent_frame(turns=8)
    assert not detect_agents(frame, min_turns=9)["swe-agent"].is_agent  # no session runs 9 turns
    assert not detect_agents(frame, min_growth_tokens=50_000)["swe-agent"].is_agent
    with pytest.raises(ValueError, match="min_turns=1"):
        detect_agents(frame, min_turns=1)


def test_a_shrinking_context_is_not_an_agent():
    frame = _agent_frame()
    # reverse the order of every session: context now shrinks turn after turn
    frame["turn"] = (7 - frame["turn"].astype(int)).astype("Int32")
    verdict = detect_agents(frame)["swe-agent"]
    assert not verdict.is_agent and verdict.growth_tokens_per_turn_p50 < 0
    assert "does not grow" in verdict.reason


# ------------------------------------------------------------------------------------- ordering, edge cases
def test_turn_order_comes_from_turn_then_timestamp_then_file_order():
    ts = pd.to_datetime(["2024-01-01 00:00:10", "2024-01-01 00:00:00", "2024-01-01 00:00:05"], utc=True)
    base = pd.DataFrame(
        {
            "session_id": pd.Categorical(["s", "s", "s"]),
            "input_tokens": np.array([300, 100, 200], dtype=np.int32),
            "output_tokens": np.array([10, 10, 10], dtype=np.int32),
        }
    )
    assert session_turns(base)["input_tokens"].tolist() == [300, 100, 200]  # file order
    timed = base.assign(timestamp=ts)
    assert session_turns(timed)["input_tokens"].tolist() == [100, 200, 300]  # by time
    turned = timed.assign(turn=pd.array([0, 2, 1], dtype="Int32"))
    assert session_turns(turned)["input_tokens"].tolist() == [300, 200, 100]  # the log's turn wins


def test_repeated_share_is_previous_context_capped_at_the_new_input():
    frame = pd.DataFrame(
        {
            "session_id": pd.Categorical(["a", "a", "b", "b"]),
            "turn": pd.array([0, 1, 0, 1], dtype="Int32"),
            "input_tokens": np.array([100, 400, 100, 120], dtype=np.int32),
            "output_tokens": np.array([50, 10, 50, 10], dtype=np.int32),
        }
    )
    turns = session_turns(frame).set_index(["session_id", "turn"])
    assert turns.loc[("a", 1), "repeated_tokens"] == 150 and turns.loc[("a", 1), "repeated_share"] == 0.375
    assert turns.loc[("b", 1), "repeated_tokens"] == 120 and turns.loc[("b", 1), "repeated_share"] == 1.0
    assert turns.loc[("a", 1), "growth_tokens"] == 300 and turns.loc[("b", 1), "growth_tokens"] == 20
    assert turns.loc[("a", 0), "repeated_tokens"] == 0 and np.isnan(turns.loc[("a", 0), "growth_tokens"])


def test_a_log_without_sessions_says_so(traces):
    frame = load_log(traces / MOONCAKE_CONV).frame
    assert not has_sessions(frame) and session_summary(frame) is None
    verdict = detect_agents(frame)["conversation_trace"]
    assert not verdict.is_agent and "no session ids" in verdict.reason
    with pytest.raises(ValueError, match="no session_id"):
        session_turns(frame)


def test_bad_inputs_raise_one_clear_line(tracelab):
    with pytest.raises(ValueError, match="kv_bytes_per_token=0"):
        session_table(tracelab, kv_bytes_per_token=0)
    with pytest.raises(ValueError, match="cached='warm'"):
        ttft_by_turn(tracelab, _prefill_ms, cached="warm")
    with pytest.raises(ValueError, match="prefill_ms returned shape"):
        ttft_by_turn(tracelab, lambda n, c: np.ones(2))
