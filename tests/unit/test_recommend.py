"""The planner's rules: each rule alone on hand-made facts, then the domain's answers on scenarios and real traces."""
from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from shapeviz.analyses.clusters import find_clusters
from shapeviz.analyses.shapes import (
    DEFAULT_CORNERS,
    SHAPES,
    ShapeProfile,
    ShapeStats,
    shape_profile,
)
from shapeviz.ingest import combine, load_log
from shapeviz.recommend import (
    LEVER_LABELS,
    LEVERS,
    RULES,
    Facts,
    Recommendation,
    Thresholds,
    agents,
    balanced_phases,
    decode_heavy,
    mixed_pools,
    output_cost_line,
    prefill_heavy,
    recommend,
)
from shapeviz.workload import synth

AZURE_CODE = "azure_llm_2023/AzureLLMInferenceTrace_code.csv"
MOONCAKE_CONV = "mooncake_fast25/conversation_trace.jsonl.gz"


# ── hand-made facts: each rule alone, independent of the capacity model ───────────────────────────────────


def stats(scope: str = "overall", *, corner: str = "rag", prefill: float = 0.9, phase: str | None = None,
          p50: tuple[float, float] = (6000, 150), share: float = 1.0, gpu: dict[str, float] | None = None) -> ShapeStats:
    """A scope whose requests all sit in ``corner`` and whose GPU-time is ``prefill`` prefill."""
    one_hot = {s: float(s == corner) for s in SHAPES}
    if phase is None:
        phase = "prefill" if prefill > 0.6 else "decode" if prefill < 0.4 else "balanced"
    return ShapeStats(
        scope=scope, requests=1000,
        input={"p50": p50[0], "p90": 2 * p50[0], "p99": 4 * p50[0], "mean": 1.2 * p50[0]},
        output={"p50": p50[1], "p90": 2 * p50[1], "p99": 4 * p50[1], "mean": 1.2 * p50[1]},
        request_share=one_hot, token_share=one_hot, gpu_share=gpu or one_hot, dominant_shape=corner, phase=phase,
        prefill_gpu_share=prefill, gpu_seconds=100.0 * share, share_of_requests=share, share_of_gpu=share,
    )


def profile_of(overall: ShapeStats, *products: ShapeStats) -> ShapeProfile:
    if not products:
        products = (ShapeStats(**{**overall.__dict__, "scope": "p"}),)
    return ShapeProfile(overall=overall, products={p.scope: p for p in products}, corners=DEFAULT_CORNERS,
                        phase_threshold=0.6, deployment="test")


def levers(recs: list[Recommendation]) -> list[str]:
    return [r.lever for r in recs]


def test_prefill_rule_alone() -> None:
    recs = prefill_heavy(Facts(profile_of(stats(prefill=0.95))))
    assert levers(recs) == ["prefill_capacity", "prefix_cache", "trim_input"]
    assert {r.metric for r in recs} == {"ttft"}
    assert all("95%" in r.reason and "6,000 in / 150 out" in r.reason for r in recs)
    assert prefill_heavy(Facts(profile_of(stats(corner="reasoning", prefill=0.1)))) == []


def test_decode_rule_alone() -> None:
    recs = decode_heavy(Facts(profile_of(stats(corner="reasoning", prefill=0.1, p50=(800, 2500)))))
    assert levers(recs) == ["decode_bandwidth", "stable_decode_batch"]
    assert {r.metric for r in recs} == {"tpot"}
    assert all("90%" in r.reason for r in recs)
    assert decode_heavy(Facts(profile_of(stats(prefill=0.95)))) == []


def test_output_cost_rule_fires_for_reasoning_even_when_balanced() -> None:
    gpu = {**{s: 0.0 for s in SHAPES}, "reasoning": 0.45, "chat": 0.55}
    recs = output_cost_line(Facts(profile_of(stats(corner="chat", prefill=0.5, gpu=gpu))))
    assert levers(recs) == ["trim_output"]
    assert "reasoning corner holds 45%" in recs[0].reason and "cost line" in recs[0].reason
    assert output_cost_line(Facts(profile_of(stats(prefill=0.95)))) == []


def test_balanced_rule_alone() -> None:
    [rec] = balanced_phases(Facts(profile_of(stats(corner="chat", prefill=0.5, p50=(1000, 130)))))
    assert (rec.lever, rec.metric) == ("chunked_prefill", "tpot")
    assert "50% prefill / 50% decode" in rec.reason


def test_agent_rule_alone() -> None:
    [rec] = agents(Facts(profile_of(stats(corner="agent", prefill=0.7, p50=(20000, 1500)))))
    assert (rec.lever, rec.metric) == ("prefix_cache", "ttft")
    assert "KV grows" in rec.reason and "tool schemas" in rec.reason
    # a known agent product is recognised by name, whatever corner it sits in
    chat = stats("bot", corner="chat", prefill=0.5, share=0.5)
    other = stats("search", corner="rag", share=0.5)
    facts = Facts(profile_of(stats(corner="chat"), chat, other), agent_products=frozenset({"bot"}))
    assert [(r.lever, r.scope) for r in agents(facts)] == [("prefix_cache", "bot")]
    assert "known to be an agent" in agents(facts)[0].reason


def test_pool_rule_without_clusters_uses_the_products_corners() -> None:
    rag = stats("search", corner="rag", prefill=0.95, share=0.6)
    agent = stats("coder", corner="reasoning", prefill=0.1, share=0.4)
    facts = Facts(profile_of(stats(corner="rag", prefill=0.6), rag, agent))
    recs = mixed_pools(facts)
    assert levers(recs) == ["split_pools", "priority_queues", "disaggregate"]
    assert all(r.scope == "overall" for r in recs)
    assert "'search' in rag" in recs[0].reason and "'coder' in reasoning" in recs[0].reason
    # the disaggregation threshold is a parameter: 40% mixed mass is below 50%
    high = Facts(facts.profile, thresholds=Thresholds(disaggregate_mass=0.5))
    assert "disaggregate" not in levers(mixed_pools(high))


def test_rules_are_listed_and_recommendations_validated() -> None:
    assert len(RULES) >= 6
    assert set(LEVER_LABELS) == set(LEVERS)  # every lever has a label for the page and the report
    with pytest.raises(ValueError, match="unknown lever"):
        Recommendation("more_gpus", "ttft", "overall", "x")
    with pytest.raises(ValueError, match="metric"):
        Recommendation("trim_input", "latency", "overall", "x")
    with pytest.raises(ValueError, match="threshold"):
        Thresholds(material_share=2.0)


# ── the domain's answers on the seed scenarios ────────────────────────────────────────────────────────────


def run(frame: pd.DataFrame, **kwargs) -> list[Recommendation]:
    return recommend(shape_profile(frame), find_clusters(frame), **kwargs)


def check_well_formed(recs: list[Recommendation]) -> None:
    assert recs, "a log always gets at least one lever"
    weights = [r.weight for r in recs]
    assert weights == sorted(weights, reverse=True)
    assert len({(r.lever, r.scope) for r in recs}) == len(recs)
    for r in recs:
        assert r.lever in LEVERS and r.metric in ("ttft", "tpot")
        assert r.reason.endswith(".") and "%" in r.reason


def test_rag_search_buys_prefill_not_decode() -> None:
    recs = run(synth.scenario("rag_search", 6000, 0))
    check_well_formed(recs)
    assert recs[0].lever == "prefill_capacity" and recs[0].metric == "ttft"
    assert {"prefill_capacity", "prefix_cache", "trim_input"} <= set(levers(recs))
    assert "decode_bandwidth" not in levers(recs)
    assert "stable_decode_batch" not in levers(recs)


def test_coding_agent_buys_decode_bandwidth_and_watches_tpot() -> None:
    recs = run(synth.scenario("coding_agent", 6000, 0))
    check_well_formed(recs)
    by_lever = {r.lever: r for r in recs}
    assert by_lever["decode_bandwidth"].metric == "tpot"
    assert by_lever["stable_decode_batch"].metric == "tpot"
    assert "prefill_capacity" not in by_lever
    assert "trim_output" in by_lever  # long answers: output is the bill
    assert recs[0].metric == "tpot"


def test_shared_pool_splits_pools_first() -> None:
    frame = synth.scenario("shared_pool", 8000, 0)
    profile, clusters = shape_profile(frame), find_clusters(frame)
    recs = recommend(profile, clusters)
    check_well_formed(recs)
    assert levers(recs)[:2] == ["split_pools", "priority_queues"]
    assert all(r.scope == "overall" for r in recs[:2])
    # each product still gets its own phase's levers
    scoped = {(r.lever, r.scope) for r in recs}
    assert ("prefill_capacity", "rag-search") in scoped
    assert ("decode_bandwidth", "coding-agent") in scoped
    # disaggregation is named exactly when the mixed mass reaches the threshold
    mass = clusters.mixed_pools[0].mixed_mass
    assert ("disaggregate" in levers(recs)) == (mass >= Thresholds().disaggregate_mass)
    assert "disaggregate" in levers(recommend(profile, clusters, thresholds=Thresholds(disaggregate_mass=mass)))
    assert "disaggregate" not in levers(recommend(profile, clusters, thresholds=Thresholds(disaggregate_mass=1.0)))


def test_a_mixed_product_gets_priority_queues() -> None:
    # issue 31: a chat mode and a RAG mode with two clear peaks (the demo scenario ``mixed_product`` is one peak
    # with a shoulder, one mode, and is no longer flagged)
    rng = np.random.default_rng(0)
    n = (4800, 3200)
    frame = pd.DataFrame({
        "input_tokens": np.concatenate([rng.lognormal(np.log(800), 0.5, n[0]), rng.lognormal(np.log(8000), 0.5, n[1])]).astype(np.int64) + 1,
        "output_tokens": np.concatenate([rng.lognormal(np.log(250), 0.5, n[0]), rng.lognormal(np.log(200), 0.5, n[1])]).astype(np.int64) + 1,
        "product": pd.Categorical(["assistant"] * sum(n)),
    })
    recs = run(frame)
    check_well_formed(recs)
    queued = [r for r in recs if r.lever == "priority_queues"]
    assert [r.scope for r in queued] == ["assistant"]
    assert "modes" in queued[0].reason  # issue 31: a product is mixed by its modes


def test_reasoning_heavy_output_is_the_cost_line() -> None:
    rng = np.random.default_rng(0)
    n = 3000
    frame = pd.DataFrame({"input_tokens": rng.lognormal(np.log(300), 0.3, n).astype(np.int32),
                          "output_tokens": rng.lognormal(np.log(6000), 0.3, n).astype(np.int32),
                          "product": pd.Categorical(["thinker"] * n)})
    recs = run(frame)
    trim = next(r for r in recs if r.lever == "trim_output")
    assert "dominant cost line" in trim.reason
    assert levers(recs).index("trim_output") < 3


def test_agents_passed_in_get_prefix_cache_for_kv_growth() -> None:
    frame = synth.scenario("shared_pool", 4000, 0)
    recs = run(frame, agent_products=["coding-agent"])
    rec = next(r for r in recs if r.lever == "prefix_cache" and r.scope == "coding-agent")
    assert "KV grows" in rec.reason
    with pytest.raises(ValueError, match="not in the log"):
        run(frame, agent_products=["nobody"])


def test_long_in_long_out_corner_is_treated_as_agents() -> None:
    rng = np.random.default_rng(1)
    n = 3000
    frame = pd.DataFrame({"input_tokens": rng.lognormal(np.log(30000), 0.3, n).astype(np.int32),
                          "output_tokens": rng.lognormal(np.log(2000), 0.3, n).astype(np.int32),
                          "product": pd.Categorical(["swe"] * n)})
    rec = next(r for r in run(frame) if r.lever == "prefix_cache")
    assert "long-in/long-out corner" in rec.reason and "KV grows" in rec.reason


def test_known_prefix_hit_ratio_decides_the_prefix_cache() -> None:
    frame = synth.scenario("rag_search", 4000, 0)
    assert "prefix_cache" not in levers(run(frame, prefix_hit_ratio=0.01))
    rec = next(r for r in run(frame, prefix_hit_ratio=0.4) if r.lever == "prefix_cache")
    assert "40%" in rec.reason
    with pytest.raises(ValueError, match="prefix_hit_ratio"):
        run(frame, prefix_hit_ratio=1.5)


def test_recommendations_are_json_ready() -> None:
    recs = run(synth.scenario("shared_pool", 3000, 0))
    document = json.loads(json.dumps([r.to_dict() for r in recs], allow_nan=False))
    assert set(document[0]) == {"lever", "metric", "scope", "reason", "weight"}


# ── the real traces ────────────────────────────────────────────────────────────────────────────────────────


def test_azure_code_trace_wants_prefill_first(trace) -> None:
    recs = run(load_log(trace(AZURE_CODE)).frame)
    check_well_formed(recs)
    assert recs[0].lever == "prefill_capacity" and recs[0].metric == "ttft"
    assert "decode_bandwidth" not in levers(recs)


def test_two_real_traces_on_one_pool_get_split_pools(trace) -> None:
    combined = combine([load_log(trace(AZURE_CODE)), load_log(trace(MOONCAKE_CONV))]).frame
    recs = run(combined)
    check_well_formed(recs)
    pool_levers = [r.lever for r in recs if r.scope == "overall"]
    assert "split_pools" in pool_levers and "priority_queues" in pool_levers
    split = next(r for r in recs if r.lever == "split_pools")
    for product in combined["product"].cat.categories:
        assert str(product) in split.reason
