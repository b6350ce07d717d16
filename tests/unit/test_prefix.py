"""Prefix-cache reuse on the real traces: Mooncake block hashes, TraceLab cached tokens, BurstGPT sessions."""
from __future__ import annotations

import json
import math
from collections import OrderedDict

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shapeviz.analyses.prefix import (
    block_reuse,
    capacity_blocks_for_gb,
    lru_stack_distances,
    prefix_reuse,
    prefix_savings,
    reported_hit_ratio,
)
from shapeviz.ingest import load_log

MOONCAKE_CONV = "mooncake_fast25/conversation_trace.jsonl.gz"
MOONCAKE_SYNTH = "mooncake_fast25/synthetic_trace.jsonl"
BURST_3 = "burstgpt/burstgpt3_slice.csv"
TRACELAB = "tracelab_example/round_trace.jsonl"
AZURE_CODE = "azure_llm_2023/AzureLLMInferenceTrace_code.csv"
BLOCK = 512


@pytest.fixture(scope="module")
def mooncake(traces):
    """Both Mooncake traces, loaded once for the module."""
    return {name: load_log(traces / name).frame for name in (MOONCAKE_CONV, MOONCAKE_SYNTH)}


def _prefix_cache_reference(frame: pd.DataFrame, capacity: int, block_size: int = BLOCK) -> tuple[int, int, int]:
    """A plain LRU prefix cache of ``capacity`` blocks, request by request: (hit blocks, blocks, hit tokens).

    On arrival a request is served the leading run of its blocks that are in the cache (a prefix cache cannot
    use block k without blocks 0..k-1); then its blocks are touched in order, evicting the least recently used.
    """
    cache: OrderedDict[int, None] = OrderedDict()
    hits = blocks = hit_tokens = 0
    ordered = frame.sort_values("timestamp", kind="stable")
    for ids, n_in in zip(ordered["hash_ids"], ordered["input_tokens"]):
        seen = [int(b) in cache for b in ids]
        h = next((i for i, s in enumerate(seen) if not s), len(seen))
        for b in ids:
            cache[int(b)] = None
            cache.move_to_end(int(b))
            if len(cache) > capacity:
                cache.popitem(last=False)
        hits += h
        blocks += len(ids)
        hit_tokens += min(block_size * h, int(n_in))
    return hits, blocks, hit_tokens


# ------------------------------------------------------------------------------------------ block hashes
@pytest.mark.parametrize(
    "name, blocks, unique, ratio_blocks, ratio_tokens",
    [
        (MOONCAKE_CONV, 288_500, 182_790, 0.3664, 0.3736),  # SOURCE.md: 36.64 % / 37.36 %
        (MOONCAKE_SYNTH, 121_877, 43_924, 0.6396, 0.6512),  # SOURCE.md: 63.96 % / 65.12 %
    ],
)
def test_unbounded_hit_ratio_matches_source_md(mooncake, name, blocks, unique, ratio_blocks, ratio_tokens):
    result = prefix_reuse(mooncake[name])
    assert result.method == "block_hashes" and result.provenance == "simulated"
    assert round(result.hit_ratio_blocks, 4) == ratio_blocks
    assert round(result.hit_ratio_tokens, 4) == ratio_tokens
    assert result.requests == len(mooncake[name])
    detail = block_reuse(mooncake[name], curve=False)
    assert (detail.blocks, detail.unique_blocks) == (blocks, unique)
    # SOURCE.md: seen blocks always form a leading run, so every hit is a prefix hit
    assert detail.leading_run_share == 1.0
    assert "earlier request" in result.definition and "512" in result.definition


def test_hit_ratio_follows_arrival_time_not_file_order(mooncake):
    frame = mooncake[MOONCAKE_SYNTH]
    shuffled = frame.sample(frac=1.0, random_state=7)
    assert block_reuse(shuffled, curve=False).hit_ratio_blocks == block_reuse(frame, curve=False).hit_ratio_blocks


@pytest.mark.parametrize("name", [MOONCAKE_CONV, MOONCAKE_SYNTH])
def test_lru_curve_grows_with_capacity_from_zero_to_the_unbounded_ratio(mooncake, name):
    result = prefix_reuse(mooncake[name], kv_bytes_per_token=327_680)
    curve = pd.DataFrame(result.capacity_curve)
    assert curve["capacity_blocks"].is_monotonic_increasing and len(curve) >= 20
    assert curve["hit_ratio_blocks"].is_monotonic_increasing
    assert curve["hit_ratio_tokens"].is_monotonic_increasing
    first, last = curve.iloc[0], curve.iloc[-1]
    assert first["capacity_blocks"] == 0 and first["hit_ratio_blocks"] == 0 and first["hit_ratio_tokens"] == 0
    assert last["hit_ratio_blocks"] == pytest.approx(result.hit_ratio_blocks, abs=1e-12)
    assert last["hit_ratio_tokens"] == pytest.approx(result.hit_ratio_tokens, abs=1e-12)
    # a cache smaller than the trace's unique blocks cannot reach the unbounded ratio
    small = curve[curve["capacity_blocks"] < 1000]
    assert (small["hit_ratio_blocks"] < result.hit_ratio_blocks).all()
    # GB grow in proportion to blocks: 512 tokens × 327,680 bytes per block
    assert last["capacity_gb"] == pytest.approx(last["capacity_blocks"] * 512 * 327_680 / 1e9)
    assert result.curve_method.startswith("exact")


@pytest.mark.parametrize("name", [MOONCAKE_CONV, MOONCAKE_SYNTH])
@pytest.mark.parametrize("capacity", [1, 16, 300, 2_000, 9_000])
def test_stack_distance_curve_equals_a_plain_lru_prefix_cache(mooncake, name, capacity):
    frame = mooncake[name].iloc[:2500]
    hits, blocks, hit_tokens = _prefix_cache_reference(frame, capacity)
    result = block_reuse(frame, capacities=[capacity])
    point = result.curve.points.iloc[0]
    assert result.curve.method == "exact"
    assert round(point["hit_ratio_blocks"] * blocks) == hits
    assert point["hit_ratio_blocks"] == pytest.approx(hits / blocks, abs=1e-12)
    assert point["hit_ratio_tokens"] == pytest.approx(hit_tokens / frame["input_tokens"].sum(), abs=1e-12)


def test_sampled_curve_stays_within_two_points_of_the_exact_one(mooncake):
    frame = mooncake[MOONCAKE_CONV]
    exact = block_reuse(frame, sample_rate=1.0)
    caps = exact.curve.points["capacity_blocks"].to_numpy()
    sampled = block_reuse(frame, sample_rate=0.1, capacities=caps)
    assert sampled.curve.method == "shards" and "sampled" in sampled.curve.description
    for column in ("hit_ratio_blocks", "hit_ratio_tokens"):
        error = np.abs(sampled.curve.points[column].to_numpy() - exact.curve.points[column].to_numpy())
        assert error.max() <= 0.02, column
    # the sample only shapes the curve: its right end is the exact unbounded ratio
    own_grid = block_reuse(frame, sample_rate=0.1).curve.points
    assert own_grid["hit_ratio_blocks"].iloc[-1] == pytest.approx(exact.hit_ratio_blocks, abs=1e-12)
    assert own_grid["hit_ratio_tokens"].iloc[-1] == pytest.approx(exact.hit_ratio_tokens, abs=1e-12)


def test_large_logs_switch_to_the_sample_and_say_so(mooncake):
    result = prefix_reuse(mooncake[MOONCAKE_CONV], max_exact_accesses=50_000)
    assert "sampled (SHARDS)" in result.curve_method
    assert result.hit_ratio_blocks == pytest.approx(0.3664, abs=5e-5)  # the headline ratio stays exact


def test_stack_distances_of_a_hand_worked_sequence():
    # a b a c b a: 'a' again after {b} -> 1; 'b' after {a, c} -> 2; 'a' after {c, b} -> 2
    assert lru_stack_distances(np.array([1, 2, 1, 3, 2, 1])).tolist() == [-1, -1, 1, -1, 2, 2]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(min_value=0, max_value=12), min_size=0, max_size=80))
def test_stack_distances_agree_with_a_literal_lru_stack(sequence):
    stack: list[int] = []
    expected = []
    for x in sequence:
        expected.append(stack.index(x) if x in stack else -1)
        if x in stack:
            stack.remove(x)
        stack.insert(0, x)
    assert lru_stack_distances(np.array(sequence, dtype=np.int64)).tolist() == expected


def test_per_product_ratios_add_up_to_the_whole(mooncake):
    frame = mooncake[MOONCAKE_CONV].copy()
    frame["product"] = pd.Categorical(np.where(np.arange(len(frame)) % 3 == 0, "a", "b"))
    result = block_reuse(frame, curve=False)
    lengths = frame["hash_ids"].map(len)
    weights = {p: lengths[frame["product"] == p].sum() for p in ("a", "b")}
    combined = sum(result.per_product[p]["hit_ratio_blocks"] * weights[p] for p in "ab") / sum(weights.values())
    assert combined == pytest.approx(result.hit_ratio_blocks)
    assert result.per_product["a"]["requests"] + result.per_product["b"]["requests"] == len(frame)


def test_non_prefix_hashes_and_repeats_inside_a_request_are_reported():
    frame = pd.DataFrame(
        {
            "input_tokens": [2048, 2048, 1024],
            "output_tokens": [10, 10, 10],
            "hash_ids": [np.array([1, 2, 3, 3]), np.array([9, 2, 3]), np.array([1, 1])],
        }
    )
    result = block_reuse(frame, curve=False)
    assert result.repeats_in_request == 2       # the second 3 in row 0 and the second 1 in row 2
    assert result.hit_blocks == 3               # 2 and 3 in row 1, 1 in row 2
    assert result.leading_run_share == pytest.approx(1 / 3)  # only row 2's hit leads its request
    notes = " ".join(prefix_reuse(frame).notes)
    assert "leading run" in notes and "counted once" in notes


def test_rows_without_hashes_are_left_out_and_counted(mooncake):
    frame = mooncake[MOONCAKE_SYNTH].copy()
    frame.loc[frame.index[::4], "hash_ids"] = None  # e.g. a log combined with one that carries no hashes
    result = prefix_reuse(frame)
    assert result.requests == len(frame) - len(frame.index[::4])
    assert any("carry no hash_ids" in note for note in result.notes)
    assert 0 < result.hit_ratio_blocks < 1


def test_hash_ids_that_are_not_lists_of_ids_raise_one_clear_line():
    frame = pd.DataFrame({"input_tokens": [10, 20], "output_tokens": [1, 2], "hash_ids": [[1, "a"], [2]]})
    with pytest.raises(ValueError, match="hash_ids must hold one list of integer block ids"):
        prefix_reuse(frame)


# -------------------------------------------------------------------------------------- reported / sessions
def test_tracelab_reported_cached_tokens_give_92_percent(trace):
    frame = load_log(trace(TRACELAB)).frame
    result = prefix_reuse(frame)
    assert result.method == "reported_cached_tokens" and result.provenance == "measured"
    assert round(result.hit_ratio_tokens, 3) == 0.921  # SOURCE.md: Σprefix / Σinput = 92.1 %
    assert result.hit_ratio_blocks is None and result.capacity_curve == []
    by_model = {p: round(v["hit_ratio_tokens"], 3) for p, v in result.per_product.items()}
    assert by_model == {"claude-opus-4-8": 0.942, "gpt-5.4": 0.830}  # SOURCE.md: claude 94.2 %, codex 83.0 %


def test_burstgpt_sessions_give_a_labelled_estimate(trace):
    frame = load_log(trace(BURST_3)).frame
    result = prefix_reuse(frame)
    assert result.method == "session_estimate" and result.provenance == "estimated"
    assert result.definition.startswith("Estimate")
    assert 0 < result.hit_ratio_tokens < 1 and result.hit_ratio_blocks is None
    assert set(result.per_product) == {"ChatGPT", "GPT-4"}
    json.dumps(result.to_dict())


def test_a_log_without_any_reuse_signal_says_so(trace):
    frame = load_log(trace(AZURE_CODE)).frame
    result = prefix_reuse(frame)
    assert result.method == "none" and result.hit_ratio_tokens is None and result.capacity_curve == []
    assert reported_hit_ratio(frame) is None


def test_hashes_win_over_reported_tokens(mooncake):
    frame = mooncake[MOONCAKE_SYNTH].copy()
    frame["cached_tokens"] = pd.array(np.zeros(len(frame), dtype=np.int32), dtype="Int32")
    assert prefix_reuse(frame).method == "block_hashes"


def test_summary_block_is_plain_json(mooncake):
    document = prefix_reuse(mooncake[MOONCAKE_CONV], kv_bytes_per_token=327_680).to_dict()
    assert set(document) >= {
        "method", "definition", "hit_ratio_blocks", "hit_ratio_tokens", "capacity_curve", "per_product",
    }
    assert set(document["capacity_curve"][0]) == {
        "capacity_blocks", "capacity_gb", "hit_ratio_blocks", "hit_ratio_tokens",
    }
    assert json.loads(json.dumps(document)) == document


# ------------------------------------------------------------------------------------------------ savings
def test_savings_bill_cached_input_at_the_discount():
    saved = prefix_savings([1_000_000, 3_000_000], 0.5, cached_discount=0.5, input_price_per_mtok=2.0)
    assert saved.cached_tokens == 2_000_000 and saved.input_tokens == 4_000_000
    assert saved.input_cost_usd == pytest.approx(8.0)
    assert saved.input_cost_with_cache_usd == pytest.approx(6.0)  # half the tokens at half price
    assert saved.cost_saved_usd == pytest.approx(2.0)
    assert saved.prefill_time_saved_share == pytest.approx(0.5)
    assert saved.prefill_time_basis.startswith("token share")


def test_prefill_model_saves_less_time_than_tokens_on_long_prompts():
    # the new tokens still attend to the cached prefix (attention ∝ n² − p²), so caching half of a long prompt
    # saves less than half of its prefill time
    def prefill_ms(n: np.ndarray, p: np.ndarray) -> np.ndarray:
        return 0.02 * (n - p) + 2e-6 * (n**2 - p**2)

    saved = prefix_savings(np.array([30_000, 60_000]), 0.5, prefill_ms=prefill_ms)
    assert saved.prefill_time_basis == "prefill_ms"
    assert 0.0 < saved.prefill_time_saved_share < 0.5
    linear = prefix_savings(np.array([30_000, 60_000]), 0.5, prefill_ms=lambda n, p: 0.02 * (n - p))
    assert linear.prefill_time_saved_share == pytest.approx(0.5)
    assert saved.input_cost_usd is None


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda: prefix_savings([100], 37), "hit_ratio=37"),
        (lambda: prefix_savings([100], 0.3, cached_discount=2), "cached_discount=2"),
        (lambda: prefix_savings([100], 0.3, prefill_ms=lambda n, p: np.ones(3)), "prefill_ms returned shape"),
        (lambda: capacity_blocks_for_gb(10, kv_bytes_per_token=-1), "kv_bytes_per_token=-1"),
    ],
)
def test_bad_parameters_raise_one_clear_line(call, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(")):
        call()


def test_bad_block_parameters_raise(mooncake):
    frame = mooncake[MOONCAKE_SYNTH]
    with pytest.raises(ValueError, match="block_size=0"):
        prefix_reuse(frame, block_size=0)
    with pytest.raises(ValueError, match="capacities="):
        prefix_reuse(frame, capacities=[-5])
    with pytest.raises(ValueError, match="no hash_ids"):
        block_reuse(frame.drop(columns=["hash_ids"]))


def test_cache_size_in_gb_converts_to_blocks():
    # Llama-3-70B-like KV: 80 layers × 8 KV heads × 128 dims × 2 (K, V) × 2 bytes = 327,680 bytes per token
    assert capacity_blocks_for_gb(10, kv_bytes_per_token=327_680) == math.floor(10e9 / (512 * 327_680))
