"""The simulator's compiled loop, shared prefix blocks in the KV pool, and the least-tokens signal after preemption.

The compiled loop (``serving/sim_core.py``) must give the Python loop's results bit for bit on every mode it
takes; a shared prefix must be held once in a replica's KV pool (the workload of issue 28: 100 groups sharing a
3.6k-token system prompt on 4 × TP4 70B replicas with 141k tokens of KV each); a preempted sequence's recompute
must be counted in the least-tokens router's signal.
"""
from __future__ import annotations

import dataclasses

import numpy as np
import pandas as pd
import pytest

from shapeviz.ingest import load_log
from shapeviz.physics.speculative import Speculative
from shapeviz.physics.steps import Deployment
from shapeviz.serving import routers, sim_core, simulator
from shapeviz.serving.planner import WhatIf
from shapeviz.serving.parallel import run_parallel
from shapeviz.serving.simulator import Requests, simulate
from shapeviz.workload.synth import shared_prefix_log

SMALL = Deployment("llama-3.1-8b", "h100-sxm", "fp8", None, 1)
TP2 = Deployment("llama-3.1-70b", "h100-sxm", "fp8", None, 2)
TP4 = Deployment("llama-3.1-70b", "h100-sxm", "bf16", None, 4)


def _lognormal(n: int, rate_rps: float, seed: int = 1, ttft_targets: bool = False) -> Requests:
    rng = np.random.default_rng(seed)
    inp = np.exp(rng.normal(np.log(1000.0), 1.0, n)).astype(np.int64).clip(1, 8_000)
    out = np.exp(rng.normal(np.log(200.0), 1.0, n)).astype(np.int64).clip(1, 2_000)
    arrival = np.cumsum(rng.exponential(1.0 / rate_rps, n))
    target = np.where(inp > 2_000, 3_000.0, 300.0) if ttft_targets else None
    return Requests(inp, out, np.zeros(n, dtype=np.int64), arrival - arrival[0], ttft_target_ms=target)


def _both(req: Requests | pd.DataFrame, dep: Deployment, **kwargs) -> tuple:
    simulator.COMPILED = False
    try:
        reference = simulate(req, dep, **kwargs)
    finally:
        simulator.COMPILED = True
    return reference, simulate(req, dep, **kwargs)


CASES = {
    "round-robin, 7 replicas": (dict(replicas=7), 28.0),
    "least tokens, preempting": (dict(replicas=3, router="least_tokens", kv_fraction=0.01), 9.0),
    "shortest prompt first, preempting": (dict(replicas=2, scheduler="priority", kv_fraction=0.01), 6.0),
    "max utilization (TensorRT-LLM), preempting": (dict(replicas=2, admission="max_utilization", kv_fraction=0.01),
                                                   6.0),
    "guaranteed no evict (TensorRT-LLM)": (dict(replicas=2, admission="guaranteed_no_evict", kv_fraction=0.01,
                                                router="least_tokens"), 6.0),
    "earliest deadline first": (dict(replicas=2, scheduler="deadline"), 9.0),
    "whole prompts (no chunking)": (dict(replicas=2, chunked_prefill=False, max_num_batched_tokens=2048), 9.0),
    "closed loop": (dict(replicas=2, concurrency=48), 9.0),
    "replicas joining and draining": (dict(replicas=3, replica_schedule=(np.array([0.0, 30.0, 60.0]),
                                                                          np.array([1, 3, 2]))), 9.0),
    "random, 7 replicas": (dict(replicas=7, router="random", seed=3), 28.0),
    "random, preempting, replicas joining": (dict(replicas=3, router="random", kv_fraction=0.01, replica_schedule=(
        np.array([0.0, 20.0, 40.0]), np.array([1, 3, 2]))), 9.0),
    # prefill then decode pools: the KV transfer, the decode pool's own router and its preemptions
    "disaggregated 2:3, least tokens": (dict(disaggregate="2:3", router="least_tokens"), 20.0),
    "disaggregated 1:2, random, preempting in the decode pool": (dict(disaggregate=(1, 2), router="random",
                                                                      kv_fraction=0.01, seed=2), 9.0),
    "disaggregated 2:2, closed loop, shortest prompt first": (dict(disaggregate="2:2", concurrency=48,
                                                                   scheduler="priority"), 9.0),
}


@pytest.mark.parametrize("case", CASES)
def test_the_compiled_loop_gives_the_python_loops_results(case):
    kwargs, rate = CASES[case]
    dep = SMALL if "kv_fraction" in kwargs else TP2
    req = _lognormal(600, rate, ttft_targets=kwargs.get("scheduler") == "deadline")
    reference, compiled = _both(req, dep, **kwargs)
    pd.testing.assert_frame_equal(compiled.requests, reference.requests, check_exact=True)
    pd.testing.assert_frame_equal(compiled.utilization, reference.utilization, check_exact=True)
    assert compiled.preemptions == reference.preemptions
    assert compiled.kv_peak_share == reference.kv_peak_share
    assert compiled.summary()["ttft_ms"] == reference.summary()["ttft_ms"]
    if kwargs.get("admission") == "guaranteed_no_evict":   # every admitted sequence's output was reserved
        assert compiled.preemptions == 0 and compiled.kv_peak_share > 0.5
    elif "kv_fraction" in kwargs:   # the cases meant to preempt do
        assert compiled.preemptions > 20


@pytest.mark.parametrize("dep", [Deployment("gpt-oss-120b", "h100-sxm", "mxfp4", None, 2, attention_dp=True),
                                 Deployment("deepseek-r1", "h200-sxm", "fp8", None, 8)], ids=lambda d: d.describe())
def test_the_compiled_loop_gives_the_python_loops_results_on_experts_and_windowed_attention(dep):
    """Mixture-of-experts weight reads, attention-DP and sliding-window layers come through the physics tables."""
    reference, compiled = _both(_lognormal(400, 6.0), dep, replicas=2)
    pd.testing.assert_frame_equal(compiled.requests, reference.requests, check_exact=True)


SPECULATIVE = {
    "EAGLE-3": Deployment("llama-3.1-8b", "h100-sxm", "fp8", None, 1,
                          speculative=Speculative.from_length("eagle3", 3, 2.5)),
    "draft model": Deployment("llama-3.1-70b", "h100-sxm", "fp8", None, 2,
                              speculative=Speculative.from_length("draft", 4, 2.8, draft_model="llama-3.1-8b")),
    "MTP": Deployment("deepseek-r1", "h200-sxm", "fp8", None, 8, speculative=Speculative.from_length("mtp", 1, 1.8)),
}


@pytest.mark.parametrize("method", SPECULATIVE)
def test_the_compiled_loop_gives_the_python_loops_results_with_speculative_decoding(trace, method):
    """Azure's conversations at 8× their rate: iterations that prefill beside decodes charge the draft passes and
    the target verifying k + 1 tokens per sequence, decode-only runs the speculative time per token."""
    dep = SPECULATIVE[method]
    assert sim_core.supports(dep, dep.engine_max_seqs)   # the replay takes the compiled loop
    frame = load_log(trace("azure_llm_2023/AzureLLMInferenceTrace_conv.csv")).frame.iloc[:500]
    reference, compiled = _both(frame, dep, replicas=2, whatif=WhatIf(traffic_multiplier=8.0))
    pd.testing.assert_frame_equal(compiled.requests, reference.requests, check_exact=True)
    pd.testing.assert_frame_equal(compiled.utilization, reference.utilization, check_exact=True)
    plain = simulate(frame, dataclasses.replace(dep, speculative=None), replicas=2, whatif=WhatIf(traffic_multiplier=8.0))
    # the drafts change every decode's time (an 8B draft for a 70B target on TP2 does not pay at this load)
    assert compiled.summary()["tpot_ms"]["p50"] != plain.summary()["tpot_ms"]["p50"]


def test_least_tokens_signal_counts_a_preempted_prompts_recompute(monkeypatch):
    """A preempted sequence is prefilled again: the router's signal must get that work back, never go negative,
    and end at zero once everything is served, so load stays balanced."""
    seen: list[int] = []
    fleets: list = []
    pick = routers.LeastTokens.pick

    def spy(self, rid, candidates, fleet):
        seen.append(min(fleet[j].outstanding for j in candidates))
        fleets.append(fleet)
        return pick(self, rid, candidates, fleet)

    monkeypatch.setattr(routers.LeastTokens, "pick", spy)
    monkeypatch.setattr(simulator, "COMPILED", False)   # the Python loop lets the test read the signal
    result = simulate(_lognormal(900, 6.0), SMALL, replicas=3, router="least_tokens", kv_fraction=0.01)
    assert result.preemptions > 20
    assert min(seen) >= 0
    assert [r.outstanding for r in fleets[-1]] == [0, 0, 0]
    share = result.requests["replica"].value_counts(normalize=True)
    assert len(share) == 3 and share.max() < 0.4


# --- shared prefixes on a small KV pool (issue 28) ---------------------------------------------------------


def _kv_fraction(tokens: int) -> float:
    """The share of the free memory that gives ``tokens`` of KV per replica on TP4."""
    return tokens / (TP4.kv_pool_bytes_per_gpu(1.0) / float(TP4.kv_bytes_per_gpu(1.0)))


def test_prefix_router_keeps_a_shared_prefix_cached_at_high_load_on_a_small_kv_pool():
    """Running sequences of one group share their system prompt's blocks: held once, the 141k-token pool keeps
    every group's prefix, so the prefix-aware router stays fast at 20 req/s (charged once per sequence, the pool
    overflowed: preemptions, evictions and TTFT p90 of seconds)."""
    frame = shared_prefix_log(20.0, 2000)
    runs = {router: simulate(frame, TP4, replicas=4, router=router, block_size=64, kv_fraction=_kv_fraction(141_000))
            for router in ("prefix", "random", "round_robin", "least_tokens")}
    assert runs["prefix"].settings["kv_pool_tokens_per_replica"] == 141_000
    cached = {k: r.prefix["hit_ratio_tokens"] for k, r in runs.items()}
    p90 = {k: r.summary()["ttft_ms"]["p90"] for k, r in runs.items()}
    assert cached["prefix"] >= 0.9
    assert runs["prefix"].preemptions == 0
    assert p90["prefix"] < 0.2 * min(p90["random"], p90["round_robin"], p90["least_tokens"])
    assert cached["prefix"] > 2 * max(cached["random"], cached["round_robin"])   # the baselines scatter each group


def test_a_block_shared_by_running_sequences_is_charged_once():
    """Two requests opening with the same 32 blocks, admitted together: the pool holds the 32 shared blocks once
    and each request's own 2 blocks (charged per sequence it would hold 2 × 34 blocks)."""
    hashes = [np.r_[np.arange(32), 1000 + 10 * i + np.arange(2)].astype(np.int64) for i in range(2)]
    frame = pd.DataFrame({"timestamp": pd.Timestamp("2025-01-01", tz="UTC") + pd.to_timedelta([0.0, 0.0], unit="s"),
                          "input_tokens": 34 * 64, "output_tokens": 2, "hash_ids": hashes})
    result = simulate(frame, SMALL, replicas=1, block_size=64)
    held = result.kv_peak_share * result.settings["kv_pool_tokens_per_replica"]
    assert held == pytest.approx((32 + 2 * 2) * 64)


def test_the_random_router_runs_compiled_with_the_python_routers_draws(monkeypatch):
    """The compiled loop takes the random router and draws Python's stream, even when it runs short of words."""
    req = _lognormal(400, 20.0)
    assert simulator._compiled(TP2, 256, None, req, "random")
    monkeypatch.setattr(simulator, "RANDOM_WORDS_PER_REQUEST", 0)   # 64 words for 400 draws: it must run again
    reference, compiled = _both(req, TP2, replicas=5, router="random", seed=11)
    pd.testing.assert_frame_equal(compiled.requests, reference.requests, check_exact=True)
    counts = np.bincount(compiled.requests["replica"], minlength=5)
    assert counts.min() > 40   # spread over every replica, not one


def test_independent_replays_in_processes_give_the_same_results_in_the_same_order():
    from shapeviz.fleet.routing import routed_run

    req = _lognormal(300, 8.0)
    jobs = [(req, TP2, rate, k, "least_tokens", 1000.0, 50.0) for rate, k in ((8.0, 2), (4.0, 1), (12.0, 3))]
    here = [routed_run(*job) for job in jobs]
    apart = run_parallel(routed_run, jobs, workers=2)
    assert [r.settings["replicas"] for r in apart] == [2, 1, 3]
    for a, b in zip(apart, here):
        pd.testing.assert_frame_equal(a.requests, b.requests, check_exact=True)
