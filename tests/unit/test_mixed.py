"""A mixed product has two modes or more in different corners (issue 31); one-mode products of any spread are not."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from shapeviz.analyses.clusters import find_clusters
from shapeviz.analyses.shapes import shape_profile
from shapeviz.ingest import load_log
from shapeviz.recommend import recommend


def lognormal(rng: np.random.Generator, n: int, p50_in: float, p50_out: float, sigma: float) -> pd.DataFrame:
    """n requests of one lognormal mode (sigma in log-tokens on each axis)."""
    return pd.DataFrame({"input_tokens": np.maximum(rng.lognormal(np.log(p50_in), sigma, n), 1).astype(np.int64),
                         "output_tokens": np.maximum(rng.lognormal(np.log(p50_out), sigma, n), 1).astype(np.int64)})


def product(name: str, *parts: pd.DataFrame) -> pd.DataFrame:
    frame = pd.concat(parts, ignore_index=True)
    frame["product"] = name
    return frame


def log_of(*products: pd.DataFrame) -> pd.DataFrame:
    frame = pd.concat(products, ignore_index=True)
    frame["product"] = frame["product"].astype("category")
    return frame


def load_generator(n: int = 6000, seed: int = 0) -> pd.DataFrame:
    """The issue's single product: input N(4000, 300) clipped to 3,500-4,500, output N(1000, 80) to 900-1,100."""
    rng = np.random.default_rng(seed)
    return product("loadgen", pd.DataFrame({
        "input_tokens": np.rint(np.clip(rng.normal(4000, 300, n), 3500, 4500)).astype(np.int64),
        "output_tokens": np.rint(np.clip(rng.normal(1000, 80, n), 900, 1100)).astype(np.int64)}))


def rag_and_agent(seed: int = 1, n: int = 8000) -> pd.DataFrame:
    """RAG (6k in / 300 out) and a coding agent (20k in / 2k out) in one product, 62 % / 38 %, spread 0.5."""
    rng = np.random.default_rng(seed)
    n_agent = int(0.38 * n)
    return product("assistant", lognormal(rng, n - n_agent, 6000, 300, 0.5), lognormal(rng, n_agent, 20000, 2000, 0.5))


def autocomplete_and_chat(seed: int = 2, n: int = 8000) -> pd.DataFrame:
    """Autocomplete (1.5k in / 16 out) and chat (800 in / 250 out) in one product, half and half, spread 0.5."""
    rng = np.random.default_rng(seed)
    return product("ide", lognormal(rng, n // 2, 1500, 16, 0.5), lognormal(rng, n - n // 2, 800, 250, 0.5))


def six_one_mode_products(seed: int = 3) -> list[pd.DataFrame]:
    """Six one-mode products of different shapes and spreads, some straddling corner borders."""
    rng = np.random.default_rng(seed)
    n = 4000
    return [
        product("chat", lognormal(rng, n, 800, 250, 0.8)),
        product("search", lognormal(rng, n, 8000, 200, 0.5)),
        product("thinker", lognormal(rng, n, 600, 3000, 0.3)),
        product("wide", lognormal(rng, n, 4096, 1024, 1.2)),
        product("flat", pd.DataFrame({"input_tokens": rng.integers(1000, 8000, n),
                                      "output_tokens": rng.integers(100, 2000, n)})),
        load_generator(n, seed),
    ]


def flagged(frame: pd.DataFrame) -> dict[str, object]:
    return {f.scope: f for f in find_clusters(frame).mixed_products}


def test_the_issue_load_generator_log_is_one_mode_and_not_queued_by_shape() -> None:
    frame = load_generator()
    result = find_clusters(frame)
    # the k-means bubbles still cut it across corners: the situation in which it was flagged before
    assert len({c.shape for c in result.clusters}) >= 2
    assert not result.mixed_products
    assert any("one mode" in note for note in result.notes)
    recs = recommend(shape_profile(frame), result)
    assert "priority_queues" not in {r.lever for r in recs}


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_the_load_generator_is_one_mode_whatever_the_seed(seed: int) -> None:
    assert not find_clusters(load_generator(seed=seed), random_state=seed).mixed_products


def test_a_wide_lognormal_across_four_corners_is_one_mode() -> None:
    frame = product("wide", lognormal(np.random.default_rng(4), 10000, 4096, 1024, 1.2))
    frame["product"] = frame["product"].astype("category")
    assert not find_clusters(frame).mixed_products


def test_rag_and_coding_agent_in_one_product_are_two_modes_with_their_shares() -> None:
    frame = log_of(rag_and_agent())
    [flag] = find_clusters(frame).mixed_products
    assert flag.scope == "assistant"
    assert [m.shape for m in flag.modes] == ["rag", "agent"]
    assert [m.share for m in flag.modes] == pytest.approx([0.62, 0.38], abs=0.03)
    assert flag.modes[0].input_center == pytest.approx(6000, rel=0.15)
    assert flag.modes[1].output_center == pytest.approx(2000, rel=0.15)
    assert flag.reason.startswith("Product 'assistant' has two modes: rag around")
    assert "62%" in flag.reason or "61%" in flag.reason or "63%" in flag.reason
    # the agent mode's long prompts hold most of the product's GPU-time
    assert flag.modes[1].gpu_share > flag.modes[1].share
    assert set(flag.corners) == {"rag", "agent"}


def test_autocomplete_and_chat_in_one_product_are_two_modes() -> None:
    [flag] = find_clusters(log_of(autocomplete_and_chat())).mixed_products
    assert {m.shape for m in flag.modes} == {"autocomplete", "chat"}
    assert [m.share for m in flag.modes] == pytest.approx([0.5, 0.5], abs=0.03)


def test_two_mode_products_are_found_among_eight_and_only_they() -> None:
    frame = log_of(rag_and_agent(), autocomplete_and_chat(), *six_one_mode_products())
    result = find_clusters(frame)
    assert {f.scope for f in result.mixed_products} == {"assistant", "ide"}
    ide = next(f for f in result.mixed_products if f.scope == "ide")
    assert {m.shape for m in ide.modes} == {"autocomplete", "chat"}


def test_the_modes_are_in_the_json_and_the_recommendations() -> None:
    frame = log_of(rag_and_agent())
    result = find_clusters(frame)
    [doc] = result.to_dict()["mixed_products"]
    assert [m["shape"] for m in doc["modes"]] == ["rag", "agent"]
    assert {"corners", "mixed_mass", "gpu_share", "reason"} <= set(doc)  # the keys before modes, kept
    recs = recommend(shape_profile(frame), result)
    [queue] = [r for r in recs if r.lever == "priority_queues" and r.scope == "assistant"]
    assert "two modes" in queue.reason


def test_modes_leaning_on_different_phases_get_chunked_prefill() -> None:
    rng = np.random.default_rng(5)
    # a long-prompt short-answer mode (prefill) beside a short-prompt long-answer mode (decode)
    frame = log_of(product("mixed", lognormal(rng, 5000, 8000, 100, 0.4), lognormal(rng, 5000, 300, 3000, 0.4)))
    result = find_clusters(frame)
    [flag] = result.mixed_products
    assert {m.phase for m in flag.modes} == {"prefill", "decode"}
    recs = recommend(shape_profile(frame), result)
    assert any(r.lever == "chunked_prefill" and r.scope == "mixed" for r in recs)


def test_the_modes_are_the_same_every_run() -> None:
    frame = log_of(autocomplete_and_chat())
    first, second = find_clusters(frame).mixed_products, find_clusters(frame).mixed_products
    assert [f.to_dict() for f in first] == [f.to_dict() for f in second]


# ── the real traces ────────────────────────────────────────────────────────────────────────────────────────


def test_mooncake_synthetic_trace_is_short_chat_prompts_beside_long_rag_prompts(trace) -> None:
    # its input lengths have two clear peaks: ~20-40 tokens and ~10k-30k tokens
    frame = load_log(trace("mooncake_fast25/synthetic_trace.jsonl")).frame
    [flag] = find_clusters(frame).mixed_products
    assert {"rag", "chat"} <= {m.shape for m in flag.modes}
    short = next(m for m in flag.modes if m.shape == "chat")
    assert short.input_center < 200 and 0.2 < short.share < 0.45
    assert short.gpu_share < 0.05  # short prompts, a sliver of the GPU-time


@pytest.mark.parametrize("relative", [
    "azure_llm_2023/AzureLLMInferenceTrace_code.csv",
    "mooncake_fast25/conversation_trace.jsonl.gz",
    "vidur_arxiv_summarization/arxiv_summarization_stats_llama2_tokenizer_filtered_v2.csv",
])
def test_one_mode_real_traces_are_not_mixed(trace, relative: str) -> None:
    result = find_clusters(load_log(trace(relative)).frame)
    assert not result.mixed_products
    assert not any(" modes, all in " in note for note in result.notes)


def test_azure_conversation_modes_share_the_chat_corner_and_are_named_not_flagged(trace) -> None:
    # its lengths pile up at a few prompt sizes (~170, ~350, ~1,000, ~3,200 tokens), all in the chat corner
    result = find_clusters(load_log(trace("azure_llm_2023/AzureLLMInferenceTrace_conv.csv")).frame)
    assert not result.mixed_products
    assert any("modes, all in chat; not flagged mixed" in note for note in result.notes)


def test_a_hundred_requests_are_too_few_to_show_modes(trace) -> None:
    # BurstGPT's GPT-4 slice has 95 requests: a kernel estimate of so few shows valleys that are noise
    frame = load_log(trace("burstgpt/burstgpt3_slice.csv")).frame
    result = find_clusters(frame)
    assert not result.mixed_products
    assert not any(" modes, all in " in note for note in result.notes)


def test_a_product_too_small_to_test_says_so_rather_than_one_mode() -> None:
    rng = np.random.default_rng(7)
    # 300 requests, half long-prompt short-answer, half short-prompt long-answer: two shapes, too few to test
    n = 150
    frame = log_of(product("tiny", lognormal(rng, n, 15000, 15, 0.3), lognormal(rng, n, 200, 2500, 0.3)))
    result = find_clusters(frame)
    assert not result.mixed_products
    assert any("'tiny'" in note and "too few" in note and "300" in note for note in result.notes)
    assert not any("one mode" in note for note in result.notes)
