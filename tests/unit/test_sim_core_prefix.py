"""The compiled loop with prefix caches: the Python loop's results bit for bit, on sessions and on block hashes.

Each case is small (a few hundred requests on a small KV pool) and must evict cached blocks and preempt running
sequences, so that a wrong LRU order, a shared block charged twice or a hit not matched again at admission
changes the numbers.
"""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from shapeviz.ingest import load_log
from shapeviz.physics.steps import Deployment
from shapeviz.serving import routers, simulator
from shapeviz.serving.planner import WhatIf
from shapeviz.serving.simulator import SimResult, simulate
from shapeviz.workload.synth import generate

SMALL = Deployment("llama-3.1-8b", "h100-sxm", "fp8", None, 1)


def _both(frame: pd.DataFrame, **kwargs) -> tuple[SimResult, SimResult]:
    """The Python loop's run and the compiled loop's, after checking the second one does take the compiled loop."""
    req = simulator.requests_from_frame(frame, kwargs.get("whatif", WhatIf()), block_size=kwargs.get("block_size"))
    assert req.blocks is not None
    caches = simulator._caches(req.blocks, kwargs["replicas"], kwargs["router"], kwargs.get("replica_schedule"))
    assert simulator._compiled(SMALL, int(SMALL.eff.max_batch), None, req, kwargs["router"], caches, kwargs["replicas"])
    simulator.COMPILED = False
    try:
        reference = simulate(frame, SMALL, **kwargs)
    finally:
        simulator.COMPILED = True
    return reference, simulate(frame, SMALL, **kwargs)


def _assert_same(compiled: SimResult, reference: SimResult) -> None:
    pd.testing.assert_frame_equal(compiled.requests, reference.requests, check_exact=True)
    pd.testing.assert_frame_equal(compiled.utilization, reference.utilization, check_exact=True)
    assert compiled.preemptions == reference.preemptions
    assert compiled.kv_peak_share == reference.kv_peak_share
    assert compiled.prefix == reference.prefix   # hit ratios, evicted and cached blocks per replica
    # the case exercises what it is meant to: reuse, eviction and preemption
    assert reference.prefix["hit_ratio_tokens"] > 0.02
    assert reference.prefix["evicted_blocks"] > 1000
    assert reference.preemptions > 5


@pytest.fixture(scope="module")
def demo_sessions() -> pd.DataFrame:
    """The demo mix's first 400 requests of a day (sessions, no hashes) that fit the small pool."""
    demo = generate(3000, seed=0, with_hashes=False)
    demo = demo[demo["input_tokens"] + demo["output_tokens"] < 16_000]
    return demo.sort_values("timestamp", kind="stable").iloc[:400]


@pytest.mark.parametrize("router", ["session", "prefix", "round_robin", "session, replicas joining"])
def test_compiled_prefix_caches_match_the_python_loop_on_demo_sessions(demo_sessions, router):
    """Round-robin and session affinity number the blocks per replica (static routing); the prefix router, and
    any router under a replica schedule, keep every replica's state over every block."""
    schedule = (np.array([0.0, 3.0]), np.array([1, 2])) if "joining" in router else None
    reference, compiled = _both(demo_sessions, replicas=2, router=router.split(",")[0], kv_fraction=0.02,
                                whatif=WhatIf(traffic_multiplier=200.0), replica_schedule=schedule)
    assert reference.prefix["source"] == "sessions"
    _assert_same(compiled, reference)


@pytest.mark.parametrize("router", ["prefix", "round_robin"])
def test_compiled_prefix_caches_match_the_python_loop_on_mooncake_hashes(trace, router):
    frame = load_log(trace("mooncake_fast25/conversation_trace.jsonl.gz")).frame.iloc[:500]
    # greedy admission (TensorRT-LLM's max-utilization): the pool overflows and preempts with shared blocks held;
    # the other cases run vLLM's watermark, the default
    reference, compiled = _both(frame, replicas=2, router=router, kv_fraction=0.13, admission="max_utilization")
    assert reference.prefix["source"] == "block_hashes"
    _assert_same(compiled, reference)


def test_compiled_session_router_matches_the_python_loop_on_burstgpt_sessions(trace):
    frame = load_log(trace("burstgpt/burstgpt3_slice.csv")).frame
    # the slice's 11 hours squeezed into 14 s: sessions overlap and the pool overflows
    reference, compiled = _both(frame, replicas=2, router="session", kv_fraction=0.024,
                                whatif=WhatIf(traffic_multiplier=3000.0))
    assert reference.prefix["source"] == "sessions"
    _assert_same(compiled, reference)


@pytest.mark.parametrize("router", ["session", "prefix"])
def test_compiled_prefill_pool_caches_match_the_python_loop_disaggregated(demo_sessions, router):
    """Two prefill replicas keep the prefix caches and take the router; three decode replicas, no cache, a load
    router; the prompt's KV crosses between them. The decode pool preempts, the prefill pool evicts."""
    req = simulator.requests_from_frame(demo_sessions, WhatIf(traffic_multiplier=200.0))
    caches = simulator._caches(req.blocks, 2, router, None)
    assert simulator._compiled(SMALL, int(SMALL.eff.max_batch), (2, 3), req, router, caches, 2)
    kwargs = dict(disaggregate="2:3", router=router, kv_fraction=0.02, whatif=WhatIf(traffic_multiplier=200.0))
    simulator.COMPILED = False
    try:
        reference = simulate(demo_sessions, SMALL, **kwargs)
    finally:
        simulator.COMPILED = True
    compiled = simulate(demo_sessions, SMALL, **kwargs)
    assert [r["replica"] for r in reference.prefix["per_replica"]] == [0, 1]   # the prefill pool's caches only
    assert set(reference.requests["replica"]) == {0, 1}
    _assert_same(compiled, reference)


def test_session_affinity_spreads_sessions_over_every_replica():
    """The first sessions of a log (codes 0, 1, 2, ...) are spread over the ring, not all sent to replica 0."""
    share = np.bincount(routers.session_owners(np.arange(400), range(4)), minlength=4) / 400
    assert share.min() > 0.15


def test_compiled_prefix_router_load_guard_matches_the_python_loop():
    """One hot prefix (400 requests in 2 s opening with the same 32 blocks): the load guard spreads them, and the
    compiled loop picks as the Python loop does."""
    n = 400
    frame = pd.DataFrame({
        "timestamp": pd.Timestamp("2025-01-01", tz="UTC") + pd.to_timedelta(np.linspace(0, 2, n), unit="s"),
        "input_tokens": 34 * 64, "output_tokens": 200,
        "hash_ids": [np.r_[np.arange(32), 1000 + 10 * i + np.arange(2)].astype(np.int64) for i in range(n)]})
    reference, compiled = _both(frame, replicas=2, router="prefix", block_size=64)
    pd.testing.assert_frame_equal(compiled.requests, reference.requests, check_exact=True)
    assert compiled.prefix == reference.prefix
    assert reference.requests["replica"].value_counts(normalize=True).min() > 0.25   # the guard fired


def test_the_prefix_router_on_block_hashes_reads_only_what_the_tables_hold(trace, monkeypatch):
    """The compiled loop's own Python body, where numpy checks every index (compiled, none is checked): the prefix
    router on block hashes, where no request has a session pair. It read the request's pair from the empty table, past
    its end: harmless garbage most of the time, once a segfault of a CI worker (BurstGPT's router comparison)."""
    from shapeviz.serving import sim_core

    frame = load_log(trace("mooncake_fast25/conversation_trace.jsonl.gz")).frame.iloc[:120]
    compiled = simulate(frame, SMALL, replicas=2, router="prefix", kv_fraction=0.13)
    assert compiled.prefix["source"] == "block_hashes"
    plain = sim_core.loop
    monkeypatch.setattr(sim_core, "loop", lambda: plain().py_func)
    checked = simulate(frame, SMALL, replicas=2, router="prefix", kv_fraction=0.13)
    pd.testing.assert_frame_equal(checked.requests, compiled.requests, check_exact=True)
    assert checked.prefix == compiled.prefix
    assert compiled.prefix["hit_ratio_tokens"] > 0   # the router had cached prefixes to look up
