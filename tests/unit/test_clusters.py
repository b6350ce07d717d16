"""Clusters of the token plane, mixed products and mixed pools, on the seed scenarios and the real traces."""
from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
from sklearn.metrics import silhouette_score

from shapeviz.analyses.clusters import (
    ClusterResult,
    find_clusters,
    pairwise_distances,
    silhouette_from_distances,
)
from shapeviz.ingest import combine, load_log
from shapeviz.workload import synth

AZURE_CODE = "azure_llm_2023/AzureLLMInferenceTrace_code.csv"
AZURE_CONV = "azure_llm_2023/AzureLLMInferenceTrace_conv.csv"
MOONCAKE_CONV = "mooncake_fast25/conversation_trace.jsonl.gz"


def tight_frame(p50_in: float, p50_out: float, n: int = 5000, sigma: float = 0.2, seed: int = 0,
                product: str = "p") -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    return pd.DataFrame({
        "input_tokens": np.maximum(rng.lognormal(np.log(p50_in), sigma, n), 1).astype(np.int32),
        "output_tokens": np.maximum(rng.lognormal(np.log(p50_out), sigma, n), 1).astype(np.int32),
        "product": pd.Categorical([product] * n),
    })


def share_in(result: ClusterResult, shapes: set[str]) -> float:
    """Share of requests in clusters whose centre sits in one of ``shapes``."""
    return sum(c.share for c in result.clusters if c.shape in shapes)


def check_consistent(result: ClusterResult, n_rows: int) -> None:
    """What every result promises: ids in order, labels aligned, shares that add up."""
    assert result.labels.dtype == np.int8 and len(result.labels) == n_rows
    assert [c.id for c in result.clusters] == list(range(result.k))
    counts = np.bincount(result.labels, minlength=result.k)
    assert [c.requests for c in result.clusters] == counts.tolist()
    shares = [c.share for c in result.clusters]
    assert shares == sorted(shares, reverse=True)
    assert sum(shares) == pytest.approx(1.0)
    assert sum(c.gpu_share for c in result.clusters) == pytest.approx(1.0)
    for c in result.clusters:
        assert sum(c.products.values()) == pytest.approx(1.0)


# ── one shape, two shapes ──────────────────────────────────────────────────────────────────────────────────


def test_a_single_tight_shape_is_one_cluster() -> None:
    frame = tight_frame(1000, 120)
    result = find_clusters(frame)
    check_consistent(result, len(frame))
    assert result.k == 1 and result.k_source == "one_shape"
    assert result.clusters[0].shape == "chat"
    assert result.clusters[0].input_center == pytest.approx(1000, rel=0.05)
    assert result.clusters[0].output_center == pytest.approx(120, rel=0.05)
    assert result.silhouette is None and result.notes  # says why it is one shape
    assert not result.mixed_products and not result.mixed_pools


@pytest.mark.parametrize(("name", "corner"), [("rag_search", "rag"), ("coding_agent", "reasoning")])
def test_a_seed_product_alone_sits_in_its_corner(name: str, corner: str) -> None:
    frame = synth.scenario(name, 8000, 0)
    result = find_clusters(frame)
    check_consistent(result, len(frame))
    # one wide shape: one cluster, or clusters that all sit in the product's corner; never "mixed"
    assert result.k == 1 or share_in(result, {corner}) == pytest.approx(1.0)
    assert result.clusters[0].shape == corner
    assert not result.mixed_products and not result.mixed_pools


def test_two_separate_shapes_are_two_clusters_with_their_centres() -> None:
    frame = pd.concat([tight_frame(6000, 150, n=3000, product="rag"),
                       tight_frame(800, 2500, n=2000, seed=1, product="agent")], ignore_index=True)
    frame["product"] = frame["product"].astype("category")
    result = find_clusters(frame)
    check_consistent(result, len(frame))
    assert result.k == 2 and result.k_source == "auto"
    assert result.silhouette is not None and result.silhouette > 0.7
    assert result.k_scores[2] == result.silhouette  # the score shown is the one that chose k
    big, small = result.clusters
    assert (big.shape, small.shape) == ("rag", "reasoning")
    assert big.share == pytest.approx(0.6) and small.share == pytest.approx(0.4)
    assert big.input_center == pytest.approx(6000, rel=0.05) and big.output_center == pytest.approx(150, rel=0.05)
    assert small.input_p50 == pytest.approx(800, rel=0.05) and small.output_p50 == pytest.approx(2500, rel=0.05)
    assert big.products == {"rag": 1.0} and small.products == {"agent": 1.0}
    assert (big.phase, small.phase) == ("prefill", "decode")
    # every row carries its own cluster
    assert (result.labels[:3000] == 0).all() and (result.labels[3000:] == 1).all()


def test_shared_pool_is_flagged_with_a_reason_naming_both_products() -> None:
    frame = synth.scenario("shared_pool", 10000, 0)
    result = find_clusters(frame)
    check_consistent(result, len(frame))
    assert {"rag", "reasoning"} <= {c.shape for c in result.clusters}
    assert not result.mixed_products  # each product alone is one shape
    [pool] = result.mixed_pools
    assert pool.kind == "pool" and pool.scope == "overall"
    assert set(pool.corners) == {"rag", "reasoning"}
    assert pool.corners["rag"].products == ["rag-search"]
    assert pool.corners["reasoning"].products == ["coding-agent"]
    for needle in ("rag-search", "coding-agent", "rag", "reasoning", "%"):
        assert needle in pool.reason
    assert 0.0 < pool.mixed_mass <= 0.5


def two_mode_assistant(n: int = 10000) -> pd.DataFrame:
    """One product with a chat mode (60 %) and a RAG mode (40 %), spread 0.5 in log-tokens: two clear peaks.

    (Issue 31: the demo scenario ``mixed_product`` overlaps its chat and RAG parts into one peak with a shoulder,
    which is one mode, so it no longer stands for a mixed product here.)
    """
    frame = pd.concat([tight_frame(800, 250, int(0.6 * n), 0.5, 0, "assistant"),
                       tight_frame(8000, 200, n - int(0.6 * n), 0.5, 1, "assistant")], ignore_index=True)
    frame["product"] = frame["product"].astype("category")
    return frame


def test_a_product_mixed_inside_itself_is_flagged() -> None:
    frame = two_mode_assistant()
    result = find_clusters(frame)
    check_consistent(result, len(frame))
    [flag] = result.mixed_products
    assert flag.kind == "product" and flag.scope == "assistant"
    assert {"chat", "rag"} <= set(flag.corners)
    for corner, info in flag.corners.items():
        assert max(info.requests, info.gpu_time) >= 0.15
        assert f"{corner} around" in flag.reason
    # issue 31: the flag names the product's modes, not the k-means clusters it spans
    assert flag.reason.startswith("Product 'assistant' has ")
    assert not result.mixed_pools  # one product is no pool of products


def test_material_share_is_a_parameter() -> None:
    frame = two_mode_assistant(6000)
    [flag] = find_clusters(frame).mixed_products
    largest = max(max(info.requests, info.gpu_time) for info in flag.corners.values())
    assert not find_clusters(frame, material_share=min(0.99, largest + 0.01)).mixed_products


def test_a_wide_product_cut_by_the_log_clusters_is_not_called_mixed() -> None:
    # One wide search product straddles the chat/rag boundary; with a decode-heavy product beside it and k=3,
    # k-means cuts the wide one in two clusters in different corners. On its own it is one shape, so it must
    # not be flagged mixed merely because the clusters of the whole log cut through it.
    rng = np.random.default_rng(7)
    n = 6000
    wide = pd.DataFrame({
        "product": "wide-search",
        "input_tokens": np.exp(rng.normal(np.log(4096), 0.9, n)).astype("int32") + 1,
        "output_tokens": np.exp(rng.normal(np.log(150), 0.3, n)).astype("int32") + 1,
    })
    frame = pd.concat([wide, synth.scenario("coding_agent", 3000, 0)[["product", "input_tokens", "output_tokens"]]],
                      ignore_index=True)
    frame["product"] = frame["product"].astype("category")
    result = find_clusters(frame, k=3)
    check_consistent(result, len(frame))
    by_cluster = result.product_mix["wide-search"]
    corners = {result.clusters[c].shape for c, shares in by_cluster.items() if shares["requests"] >= 0.15}
    assert corners == {"chat", "rag"}  # the situation the rule guards against
    assert find_clusters(frame[frame["product"] == "wide-search"]).k_source == "one_shape"
    assert "wide-search" not in {f.scope for f in result.mixed_products}


def test_each_model_pool_is_judged_on_its_own() -> None:
    shared = synth.scenario("shared_pool", 6000, 0).assign(model="pool-a")
    alone = synth.scenario("rag_search", 3000, 1).assign(model="pool-b", product="rag-search-eu")
    frame = pd.concat([shared, alone], ignore_index=True)
    frame["model"] = frame["model"].astype("category")
    frame["product"] = frame["product"].astype(str).astype("category")
    result = find_clusters(frame)
    scopes = [p.scope for p in result.mixed_pools]
    assert "overall" in scopes and "pool-a" in scopes and "pool-b" not in scopes
    pool_a = next(p for p in result.mixed_pools if p.scope == "pool-a")
    assert pool_a.reason.startswith("Model pool 'pool-a'")
    assert 0.0 < pool_a.gpu_share < 1.0


# ── the user's k, determinism, odd inputs ───────────────────────────────────────────────────────────────────


def test_user_k_is_obeyed() -> None:
    frame = synth.scenario("shared_pool", 5000, 0)
    three = find_clusters(frame, k=3)
    check_consistent(three, len(frame))
    assert three.k == 3 and three.k_source == "user" and three.silhouette is not None
    one = find_clusters(frame, k=1)
    assert one.k == 1 and (one.labels == 0).all()


def test_same_input_same_clusters_and_labels() -> None:
    frame = synth.scenario("mixed_product", 8000, 2)
    first, second = find_clusters(frame), find_clusters(frame.copy())
    assert first.to_dict() == second.to_dict()
    assert np.array_equal(first.labels, second.labels)


def test_random_state_is_the_only_source_of_randomness() -> None:
    frame = synth.generate(12000, 1)
    a = find_clusters(frame, random_state=7, sample_size=5000)
    b = find_clusters(frame, random_state=7, sample_size=5000)
    assert np.array_equal(a.labels, b.labels)
    assert a.sample_size == 5000


def test_identical_requests_are_one_cluster() -> None:
    frame = pd.DataFrame({"input_tokens": np.full(500, 2000, np.int32), "output_tokens": np.full(500, 200, np.int32),
                          "product": pd.Categorical(["p"] * 500)})
    result = find_clusters(frame)
    assert result.k == 1 and result.clusters[0].input_center == pytest.approx(2000)
    assert find_clusters(frame, k=4).k == 1  # cannot split identical points


@pytest.mark.parametrize("bad", [dict(k=0), dict(k=13), dict(material_share=1.5), dict(k_range=(1, 5)),
                                 dict(sample_size=10)])
def test_bad_parameters_are_refused(bad: dict) -> None:
    with pytest.raises(ValueError):
        find_clusters(tight_frame(1000, 100, n=300), **bad)


def test_silhouette_matches_scikit_learn() -> None:
    rng = np.random.default_rng(0)
    points = np.vstack([rng.normal(0, 1, (300, 2)), rng.normal(3, 1, (200, 2))])
    labels = np.r_[np.zeros(300, int), np.ones(200, int)]
    labels[::17] = 2  # a noisy third cluster
    ours = silhouette_from_distances(pairwise_distances(points), labels)
    assert ours == pytest.approx(silhouette_score(points, labels), abs=1e-9)
    assert silhouette_from_distances(pairwise_distances(points), np.zeros(500, int)) == -1.0


def test_result_is_json_ready_and_has_a_product_table() -> None:
    result = find_clusters(synth.scenario("shared_pool", 4000, 0))
    document = json.loads(json.dumps(result.to_dict(), allow_nan=False))
    assert document["k"] == result.k and len(document["clusters"]) == result.k
    assert document["mixed_pools"][0]["reason"] == result.mixed_pools[0].reason
    table = result.product_table()
    assert set(table["product"]) == {"rag-search", "coding-agent"}
    assert table.groupby("product")["request_share"].sum().to_numpy() == pytest.approx([1.0, 1.0])


# ── the real traces ────────────────────────────────────────────────────────────────────────────────────────


def test_azure_code_trace_clusters_are_mostly_autocomplete(trace) -> None:
    frame = load_log(trace(AZURE_CODE)).frame
    result = find_clusters(frame)
    check_consistent(result, len(frame))
    assert result.clusters[0].shape == "autocomplete"
    assert share_in(result, {"autocomplete"}) > 0.6
    assert not result.mixed_pools  # one product


def test_azure_conversation_trace_clusters_are_chat(trace) -> None:
    frame = load_log(trace(AZURE_CONV)).frame
    result = find_clusters(frame)
    check_consistent(result, len(frame))
    assert share_in(result, {"chat"}) > 0.8
    assert not result.mixed_products


def test_mooncake_conversation_trace_is_long_input_clusters(trace) -> None:
    frame = load_log(trace(MOONCAKE_CONV)).frame
    result = find_clusters(frame)
    check_consistent(result, len(frame))
    assert share_in(result, {"rag", "agent"}) > 0.85
    assert result.clusters[0].shape == "rag"


def test_two_real_traces_on_one_pool_are_a_mixed_pool(trace) -> None:
    combined = combine([load_log(trace(AZURE_CODE)), load_log(trace(MOONCAKE_CONV))]).frame
    result = find_clusters(combined)
    check_consistent(result, len(combined))
    assert {"autocomplete", "rag"} <= {c.shape for c in result.clusters}
    [pool] = [p for p in result.mixed_pools if p.scope == "overall"]
    assert {"autocomplete", "rag"} <= set(pool.corners)
    products = [str(p) for p in combined["product"].cat.categories]
    for product in products:
        assert product in pool.reason
    # the long Mooncake prompts hold most of the GPU-time, the short code requests a good share of the requests
    assert pool.corners["rag"].gpu_time > pool.corners["autocomplete"].gpu_time
    assert pool.corners["autocomplete"].requests > 0.3
