"""Corners and the shape profile: what a planner reads first, on the seed scenarios and the real traces."""
from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shapeviz.analyses.shapes import (
    DEFAULT_CORNERS,
    SHAPES,
    Corners,
    ShapeProfile,
    classify,
    classify_codes,
    corner_of,
    phase_of,
    request_gpu_time,
    shape_profile,
    shape_shares,
)
from shapeviz.ingest import load_log
from shapeviz.workload import synth

AZURE_CODE = "azure_llm_2023/AzureLLMInferenceTrace_code.csv"
AZURE_CONV = "azure_llm_2023/AzureLLMInferenceTrace_conv.csv"
MOONCAKE_CONV = "mooncake_fast25/conversation_trace.jsonl.gz"


def frame_of(input_tokens, output_tokens, product: str | list[str] = "p") -> pd.DataFrame:
    """A canonical frame from token arrays (one product unless given per row)."""
    inp = np.asarray(input_tokens, dtype=np.int32)
    products = [product] * len(inp) if isinstance(product, str) else product
    return pd.DataFrame({
        "input_tokens": inp,
        "output_tokens": np.asarray(output_tokens, dtype=np.int32),
        "product": pd.Categorical(products),
    })


def lognormal_frame(p50_in: float, p50_out: float, n: int = 4000, sigma: float = 0.3, seed: int = 0,
                    product: str = "p") -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    return frame_of(np.maximum(rng.lognormal(np.log(p50_in), sigma, n), 1),
                    np.maximum(rng.lognormal(np.log(p50_out), sigma, n), 1), product)


# ── corners (the existing contract others rely on) ────────────────────────────────────────────────────────


@pytest.mark.parametrize(
    ("inp", "out", "corner"),
    [(6000, 150, "rag"), (800, 2500, "reasoning"), (1500, 15, "autocomplete"), (1000, 130, "chat"),
     (20000, 2000, "agent")],
)
def test_seed_cases_land_in_their_corner(inp: int, out: int, corner: str) -> None:
    assert corner_of(inp, out) == corner
    assert SHAPES[int(classify_codes(np.array([inp]), np.array([out]))[0])] == corner


def test_moving_a_boundary_moves_the_request() -> None:
    # 6k in / 150 out is rag by default; with long input starting at 8k it is a chat request
    assert corner_of(6000, 150, Corners(long_input_tokens=8192)) == "chat"
    assert list(classify(np.array([6000]), np.array([150]), Corners(long_input_tokens=8192))) == ["chat"]


def test_shares_sum_to_one_and_follow_weights() -> None:
    inp, out = np.array([6000, 6000, 800]), np.array([150, 150, 2500])
    by_requests = shape_shares(inp, out)
    assert sum(by_requests.values()) == pytest.approx(1.0)
    assert by_requests["rag"] == pytest.approx(2 / 3)
    by_weight = shape_shares(inp, out, weights=np.array([1.0, 1.0, 8.0]))
    assert by_weight["reasoning"] == pytest.approx(0.8)


@pytest.mark.parametrize("bad", [dict(long_input_tokens=0), dict(short_output_tokens=2000), dict(long_output_tokens=1.5)])
def test_bad_corner_boundaries_are_refused(bad: dict) -> None:
    with pytest.raises(ValueError):
        Corners(**bad)


# ── phase ──────────────────────────────────────────────────────────────────────────────────────────────────


def test_phase_has_a_balanced_middle_set_by_the_threshold() -> None:
    assert phase_of(0.9) == "prefill"
    assert phase_of(0.1) == "decode"
    assert phase_of(0.55) == "balanced"
    assert phase_of(0.75, threshold=0.8) == "balanced"
    with pytest.raises(ValueError, match="threshold"):
        phase_of(0.5, threshold=0.4)


# ── the profile on the seed scenarios ──────────────────────────────────────────────────────────────────────


def test_rag_search_is_rag_and_prefill_bound() -> None:
    profile = shape_profile(synth.scenario("rag_search", 5000, 0))
    overall = profile.overall
    assert overall.dominant_shape == "rag"
    assert overall.phase == "prefill"
    assert overall.input["p50"] > 4096 and overall.output["p50"] < 1024


def test_coding_agent_is_decode_bound() -> None:
    overall = shape_profile(synth.scenario("coding_agent", 5000, 0)).overall
    assert overall.dominant_shape == "reasoning"
    assert overall.phase == "decode"
    assert overall.gpu_share["reasoning"] > 0.5


def test_shared_pool_keeps_each_product_in_its_own_corner() -> None:
    profile = shape_profile(synth.scenario("shared_pool", 6000, 1))
    assert set(profile.products) == {"rag-search", "coding-agent"}
    rag, agent = profile.products["rag-search"], profile.products["coding-agent"]
    assert (rag.dominant_shape, rag.phase) == ("rag", "prefill")
    assert (agent.dominant_shape, agent.phase) == ("reasoning", "decode")
    # products partition the log
    assert rag.requests + agent.requests == profile.overall.requests
    assert rag.share_of_requests + agent.share_of_requests == pytest.approx(1.0)
    assert rag.share_of_gpu + agent.share_of_gpu == pytest.approx(1.0)
    assert rag.gpu_seconds + agent.gpu_seconds == pytest.approx(profile.overall.gpu_seconds)
    # the overall mix of two opposite products leans on neither phase as hard as either product does
    assert agent.prefill_gpu_share < profile.overall.prefill_gpu_share < rag.prefill_gpu_share


def test_every_scope_has_shares_summing_to_one() -> None:
    profile = shape_profile(synth.generate(6000, 3))
    assert len(profile.products) >= 3
    for stats in profile.scopes():
        for shares in (stats.request_share, stats.token_share, stats.gpu_share):
            assert set(shares) == set(SHAPES)
            assert sum(shares.values()) == pytest.approx(1.0)
        assert stats.input["p50"] <= stats.input["p90"] <= stats.input["p99"]
        assert stats.output["p50"] <= stats.output["p90"] <= stats.output["p99"]


def test_products_are_listed_busiest_first() -> None:
    frame = pd.concat([lognormal_frame(1000, 100, n=300, product="small"),
                       lognormal_frame(1000, 100, n=900, product="big")], ignore_index=True)
    frame["product"] = frame["product"].astype("category")
    assert list(shape_profile(frame).products) == ["big", "small"]


def test_token_share_weighs_long_requests_more_than_request_share() -> None:
    # 90 short chat requests and 10 huge RAG requests: RAG is a tenth of the requests but most of the tokens
    frame = frame_of([1000] * 90 + [60000] * 10, [100] * 90 + [200] * 10)
    overall = shape_profile(frame).overall
    assert overall.dominant_shape == "chat"
    assert overall.request_share["rag"] == pytest.approx(0.1)
    assert overall.token_share["rag"] > 0.8
    assert overall.gpu_share["rag"] > 0.8


def test_phase_threshold_is_a_parameter() -> None:
    frame = synth.scenario("rag_search", 3000, 0)
    strict = shape_profile(frame, phase_threshold=0.999)
    assert strict.overall.phase == "balanced"
    assert strict.phase_threshold == 0.999
    with pytest.raises(ValueError, match="threshold"):
        shape_profile(frame, phase_threshold=1.5)


def test_moved_corners_change_the_dominant_shape() -> None:
    frame = lognormal_frame(6000, 150, sigma=0.1)
    assert shape_profile(frame).overall.dominant_shape == "rag"
    moved = shape_profile(frame, Corners(long_input_tokens=16384))
    assert moved.overall.dominant_shape == "chat"
    assert moved.corners.long_input_tokens == 16384


def test_cached_tokens_cut_prefill_time() -> None:
    frame = lognormal_frame(8000, 150, sigma=0.2)
    cold = shape_profile(frame).overall
    warm_frame = frame.assign(cached_tokens=pd.array((frame["input_tokens"] * 0.9).astype(int), dtype="Int32"))
    warm = shape_profile(warm_frame).overall
    assert warm.gpu_seconds < cold.gpu_seconds
    assert warm.prefill_gpu_share < cold.prefill_gpu_share


def test_gpu_time_follows_the_deployment_given() -> None:
    from shapeviz.physics import default_deployment

    frame = lognormal_frame(3000, 300)
    prefill_s, decode_s = request_gpu_time(frame)
    assert prefill_s.shape == decode_s.shape == (len(frame),)
    assert (prefill_s > 0).all() and (decode_s > 0).all()
    # passing the default explicitly is the same computation
    explicit = shape_profile(frame, deployment=default_deployment())
    assert explicit.overall.gpu_seconds == pytest.approx(shape_profile(frame).overall.gpu_seconds)
    # precomputed GPU-time is used as given: doubling decode moves the phase balance towards decode
    doubled = shape_profile(frame, gpu_time=(prefill_s, decode_s * 2))
    assert doubled.overall.prefill_gpu_share < explicit.overall.prefill_gpu_share


def test_a_smaller_deployment_costs_the_same_requests_less() -> None:
    from shapeviz.physics import Deployment

    frame = lognormal_frame(3000, 300)
    default = shape_profile(frame)
    small = shape_profile(frame, deployment=Deployment(model="llama-3.1-8b", gpu="h100-sxm", tp=1))
    assert small.overall.gpu_seconds < default.overall.gpu_seconds / 3
    assert "8B" in small.deployment and small.deployment != default.deployment
    # the shape is the log's, whatever hardware serves it
    assert small.overall.dominant_shape == default.overall.dominant_shape
    assert small.overall.request_share == default.overall.request_share


def test_profile_is_json_ready() -> None:
    profile = shape_profile(synth.scenario("shared_pool", 2000, 0))
    document = json.loads(json.dumps(profile.to_dict(), allow_nan=False))
    assert document["overall"]["scope"] == "overall"
    assert set(document["products"]) == {"rag-search", "coding-agent"}
    assert document["corners"] == {"long_input_tokens": DEFAULT_CORNERS.long_input_tokens,
                                   "long_output_tokens": DEFAULT_CORNERS.long_output_tokens,
                                   "short_output_tokens": DEFAULT_CORNERS.short_output_tokens}
    assert isinstance(profile, ShapeProfile) and document["deployment"]


def test_frame_without_product_column_is_one_product() -> None:
    frame = lognormal_frame(1000, 100).drop(columns="product")
    profile = shape_profile(frame)
    assert len(profile.products) == 1
    assert next(iter(profile.products.values())).requests == len(frame)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 300_000), st.integers(1, 30_000), st.sampled_from(["a", "b", "c"])),
                min_size=1, max_size=80))
def test_any_log_is_partitioned_by_products_and_corners(rows: list[tuple[int, int, str]]) -> None:
    inp, out, products = (list(col) for col in zip(*rows))
    frame = frame_of(inp, out, products)
    profile = shape_profile(frame)
    assert sum(p.requests for p in profile.products.values()) == profile.overall.requests == len(rows)
    assert profile.overall.request_share == pytest.approx(shape_shares(np.array(inp), np.array(out)))
    for stats in profile.scopes():
        top = max(stats.request_share.values())
        assert stats.request_share[stats.dominant_shape] == top
        assert stats.phase == phase_of(stats.prefill_gpu_share)
        assert stats.input["p50"] <= stats.input["p99"] <= max(inp)


@pytest.mark.parametrize(
    ("frame", "message"),
    [
        (pd.DataFrame({"output_tokens": [1, 2]}), "input_tokens"),
        (pd.DataFrame({"input_tokens": pd.Series([], dtype="int32"), "output_tokens": pd.Series([], dtype="int32")}),
         "no requests"),
        (pd.DataFrame({"input_tokens": [10, -3], "output_tokens": [1, 2]}), "negative"),
        (pd.DataFrame({"input_tokens": [10, None], "output_tokens": [1, 2]}), "missing"),
    ],
)
def test_bad_frames_get_one_clear_line(frame: pd.DataFrame, message: str) -> None:
    with pytest.raises(ValueError, match=message) as info:
        shape_profile(frame)
    assert "\n" not in str(info.value)


# ── the real traces ────────────────────────────────────────────────────────────────────────────────────────


def test_azure_code_trace_is_autocomplete(trace) -> None:
    profile = shape_profile(load_log(trace(AZURE_CODE)).frame)
    overall = profile.overall
    assert overall.dominant_shape == "autocomplete"
    assert overall.phase == "prefill"
    # SOURCE.md: 8,819 rows; ContextTokens p50 1,469, p90 5,187.6, mean 2,047.8; GeneratedTokens p50 13, p99 251.46
    assert overall.requests == 8819
    assert overall.input["p50"] == pytest.approx(1469)
    assert overall.input["p90"] == pytest.approx(5187.6, abs=0.1)
    assert overall.input["mean"] == pytest.approx(2047.8, abs=0.1)
    assert overall.output["p50"] == pytest.approx(13)
    assert overall.output["p99"] == pytest.approx(251.46, abs=0.01)


def test_azure_conversation_trace_is_chat(trace) -> None:
    overall = shape_profile(load_log(trace(AZURE_CONV)).frame).overall
    assert overall.dominant_shape == "chat"
    # SOURCE.md: ContextTokens p50 1,020, GeneratedTokens p50 129, p90 424, mean 211.1
    assert overall.input["p50"] == pytest.approx(1020)
    assert overall.output["p50"] == pytest.approx(129)
    assert overall.output["p90"] == pytest.approx(424)
    assert overall.output["mean"] == pytest.approx(211.1, abs=0.1)


def test_mooncake_conversation_trace_is_long_input(trace) -> None:
    overall = shape_profile(load_log(trace(MOONCAKE_CONV)).frame).overall
    assert overall.dominant_shape == "rag"
    assert overall.phase == "prefill"
    # SOURCE.md: input_length p50 6,909, mean 12,035.1; output_length p50 350, mean 342.6
    assert overall.input["p50"] == pytest.approx(6909)
    assert overall.input["mean"] == pytest.approx(12035.1, abs=0.1)
    assert overall.output["p50"] == pytest.approx(350)
    assert overall.output["mean"] == pytest.approx(342.6, abs=0.1)
