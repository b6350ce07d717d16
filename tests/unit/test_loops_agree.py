"""The compiled loop against the Python loop, on workloads and settings hypothesis generates: frames equal bit for bit.

The pinned cases of ``test_simulator_core.py`` and ``test_sim_core_prefix.py`` each take a few branches at once;
here every example draws its own mix (reported cached tokens, a KV pool small enough to preempt, every router and
scheduler, prefix caches on block hashes or sessions, closed loops, replica schedules, ``duration_s`` / ``requests``
windows, whole-prompt scheduling, a mixture-of-experts deployment with windowed attention, disaggregated prefill and
decode pools with a fast or a slow KV link, speculative decoding by each kind of draft), so a bug on a path the
pinned cases never combine gives different frames here.

CI runs a bounded, derandomised profile (the same 300 examples per test on every run, so a mutant is killed or not
the same way each time, and CI never fails on a case nobody changed code for), and reports a failing example
unshrunk. ``make fuzz`` runs many more, random and shrunk, with hypothesis' example database (``.hypothesis/``,
ignored by git) keeping what it finds for the next run: ``SHAPEVIZ_FUZZ_EXAMPLES=N`` sets the number of examples
per test, ``SHAPEVIZ_FUZZ_RANDOM=1`` draws them at random and shrinks what fails.
"""
from __future__ import annotations

import dataclasses
import os

import numpy as np
import pandas as pd
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from shapeviz.physics.speculative import Speculative
from shapeviz.physics.steps import Deployment
from shapeviz.serving import simulator
from shapeviz.serving.planner import WhatIf
from shapeviz.serving.simulator import Requests, SimResult, simulate

SMALL = Deployment("llama-3.1-8b", "h100-sxm", "fp8", None, 1)
# experts (weights read per active expert), attention-DP and sliding-window layers: other rows of the physics tables
MOE = Deployment("gpt-oss-120b", "h100-sxm", "mxfp4", None, 2, attention_dp=True)
# a KV link 50x slower than the calibrated one: a disaggregated pool's transfers take longer than its prefills
SLOW_LINK = Deployment("llama-3.1-8b", "h100-sxm", "fp8", None, 1,
                       efficiency=SMALL.eff.replace(kv_transfer_gbps=SMALL.eff.kv_transfer_gbps / 50))
# speculative decoding by each kind of draft: an EAGLE head, n-gram lookup (no draft pass), a draft model, an MTP module
SPECULATIVE = {
    "eagle3": dataclasses.replace(SMALL, speculative=Speculative.from_length("eagle3", 3, 2.5)),
    "ngram": dataclasses.replace(SMALL, speculative=Speculative.from_length("ngram", 4, 1.8)),
    "draft model": dataclasses.replace(Deployment("llama-3.1-70b", "h100-sxm", "fp8", None, 2),
                                       speculative=Speculative.from_length("draft", 4, 2.8, draft_model="llama-3.1-8b")),
    "eagle3 moe": dataclasses.replace(MOE, speculative=Speculative.from_length("eagle3", 2, 2.0)),
    "mtp": dataclasses.replace(Deployment("deepseek-r1", "h200-sxm", "fp8", None, 8),
                               speculative=Speculative.from_length("mtp", 1, 1.8)),
}
DEPLOYMENTS = {"small": SMALL, "moe": MOE, "slow link": SLOW_LINK, **SPECULATIVE}

RANDOM = os.environ.get("SHAPEVIZ_FUZZ_RANDOM") == "1"
EXAMPLES = int(os.environ.get("SHAPEVIZ_FUZZ_EXAMPLES", "300"))
FUZZ = settings(
    max_examples=EXAMPLES,
    deadline=None,   # the first example of a kind may wait for the compiled loop to load from numba's cache
    derandomize=not RANDOM,
    # CI reports the first failing example as found: shrinking one can take minutes of replays (five, on the bug
    # this file found), which the mutation check would pay on every mutant it kills; `make fuzz` shrinks
    phases=[Phase.explicit, Phase.reuse, Phase.generate] + ([Phase.shrink] if RANDOM else []),
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

ROW = st.tuples(
    st.integers(1, 3_000),                        # input tokens
    st.integers(1, 300),                          # output tokens
    st.sampled_from([0.0, 0.0, 0.25, 0.9, 1.0]),  # share of the prompt the log reports cached
    st.sampled_from([0.0, 0.0, 0.001, 0.02, 0.1, 0.5]),   # gap to the next arrival, s (ties included)
    st.integers(-1, 3),                           # session (-1: none) or prefix group of the block hashes
    st.integers(0, 2),                            # product: its TTFT class for the deadline scheduler
)


@st.composite
def runs(draw: st.DrawFn, blocks: str, split: bool = False, speculative: bool = False) -> tuple[Requests, str, dict]:
    """One log (``blocks``: "none", "sessions" or "hashes") and the simulate() settings it is replayed with
    (``split``: on P prefill and D decode replicas instead of colocated ones; ``speculative``: on a deployment
    with speculative decoding, colocated or split)."""
    rows = draw(st.lists(ROW, min_size=2, max_size=40))   # two timestamps at least: a timeline
    # a name: a falsifying example prints short
    name = draw(st.sampled_from(list(SPECULATIVE) if speculative
                                else ["small", "small", "moe"] + (["slow link"] if split else [])))
    if speculative:
        split = draw(st.booleans())
    dep = DEPLOYMENTS[name]
    n_in = np.array([r[0] for r in rows], dtype=np.int64)
    frame = pd.DataFrame({
        "timestamp": pd.Timestamp("2025-01-01", tz="UTC")
        + pd.to_timedelta(np.cumsum([0.0] + [r[3] for r in rows[:-1]]), unit="s"),
        "input_tokens": n_in.astype(np.int32),
        "output_tokens": np.array([r[1] for r in rows], dtype=np.int32),
        "cached_tokens": pd.array(np.floor(n_in * [r[2] for r in rows]).astype(np.int32), dtype="Int32"),
    })
    block_size = None
    if blocks == "sessions":
        frame["session_id"] = pd.Categorical([f"s{r[4]}" if r[4] >= 0 else None for r in rows])
    elif blocks == "hashes":
        block_size = draw(st.sampled_from([16, 64]))
        # a prefix shared by the rows of a group, then blocks of the row's own
        hashes = []
        for i, r in enumerate(rows):
            total = -(-r[0] // block_size)
            shared = min(total, (r[4] + 1) * 3) if r[4] >= 0 else 0
            hashes.append(np.r_[r[4] * 1_000 + np.arange(shared), 10**6 + i * 1_000 + np.arange(total - shared)]
                          .astype(np.int64))
        frame["hash_ids"] = hashes
    whatif = WhatIf(cache_hit=draw(st.sampled_from([None, None, 0.0, 0.4])),
                    traffic_multiplier=draw(st.sampled_from([1.0, 5.0])))
    req = simulator.requests_from_frame(frame, whatif, block_size=block_size)
    replicas = draw(st.integers(1, 4))
    scheduler = draw(st.sampled_from(simulator.SCHEDULERS))
    router = draw(st.sampled_from(["round_robin", "random", "least_tokens"] if blocks == "none"
                                  else ["round_robin", "random", "least_tokens", "session", "prefix"]))
    if scheduler == "deadline":   # each product's own TTFT target, in request order
        classes = np.array([200.0, 1_000.0, 5_000.0])[np.array([r[5] for r in rows])]
        req = dataclasses.replace(req, ttft_target_ms=classes[np.argsort(frame["timestamp"].to_numpy(),
                                                                         kind="stable")])
    longest = int(np.max(req.input_tokens + req.output_tokens))
    per_token = float(dep.kv_bytes_per_gpu(1.0))
    pool_tokens = draw(st.sampled_from([None, 1.05, 1.5, 3.0]))   # KV pool: the engines' or a few longest requests
    kv_fraction = (None if pool_tokens is None
                   else (longest * pool_tokens + 64) / (dep.kv_pool_bytes_per_gpu(1.0) / per_token))
    kwargs = dict(replicas=replicas, scheduler=scheduler, router=router, kv_fraction=kv_fraction, seed=draw(
        st.integers(0, 3)), max_num_seqs=draw(st.sampled_from([None, 1, 3, 16])),
        max_num_batched_tokens=draw(st.sampled_from([8192, 2048, 256])), chunked_prefill=draw(st.booleans()),
        whatif=whatif, block_size=block_size)
    if draw(st.booleans()):
        kwargs.update(arrivals="closed", concurrency=draw(st.integers(1, 6)))
    else:
        kwargs["arrivals"] = "trace"
        window = draw(st.sampled_from([None, "duration", "requests"]))
        if window == "duration":
            kwargs["duration_s"] = float(req.arrival_s[-1]) * draw(st.sampled_from([0.0, 0.5]))
        elif window == "requests":
            kwargs["requests"] = draw(st.integers(1, len(req)))
    # how a replica admits into its KV pool (vLLM's watermark is the default engine's; TensorRT-LLM's two others)
    kwargs["admission"] = draw(st.sampled_from([None, None, "guaranteed_no_evict", "max_utilization"]))
    if split:   # the prefill pool keeps the prefix caches and takes the router; the decode pool a load router
        kwargs["disaggregate"] = (draw(st.integers(1, 3)), draw(st.integers(1, 3)))
    elif replicas > 1 and draw(st.booleans()):
        times = np.cumsum([0.0] + draw(st.lists(st.sampled_from([0.0, 0.01, 0.1, 1.0]), min_size=1, max_size=3)))
        kwargs["replica_schedule"] = (times, np.array(draw(st.lists(st.integers(1, replicas), min_size=times.size,
                                                                    max_size=times.size))))
    return req, name, kwargs


def _both(req: Requests, name: str, kwargs: dict) -> tuple[SimResult, SimResult]:
    """The Python loop's run, then the compiled loop's, checking the second did take the compiled loop."""
    kwargs = {k: v for k, v in kwargs.items() if k not in ("whatif", "block_size")}  # already in the requests
    dep = DEPLOYMENTS[name]
    simulator.COMPILED = False
    try:
        reference = simulate(req, dep, **kwargs)
    finally:
        simulator.COMPILED = True
    took = []
    replay = simulator._replay_compiled

    def spy(*args, **kw):
        took.append(True)
        return replay(*args, **kw)

    simulator._replay_compiled = spy
    try:
        compiled = simulate(req, dep, **kwargs)
    finally:
        simulator._replay_compiled = replay
    assert took, "the run did not take the compiled loop"
    return reference, compiled


def _assert_same(compiled: SimResult, reference: SimResult) -> None:
    pd.testing.assert_frame_equal(compiled.requests, reference.requests, check_exact=True)
    pd.testing.assert_frame_equal(compiled.utilization, reference.utilization, check_exact=True)
    assert compiled.preemptions == reference.preemptions
    assert compiled.kv_peak_share == reference.kv_peak_share
    assert compiled.prefix == reference.prefix
    assert compiled.notes == reference.notes


@FUZZ
@given(runs("none"))
def test_the_loops_agree_without_prefix_blocks(run):
    """Reported cached tokens, preemption, every load router and scheduler, closed loops, schedules, windows."""
    _assert_same(*reversed(_both(*run)))


@FUZZ
@given(runs("sessions"))
def test_the_loops_agree_with_session_prefix_caches(run):
    _assert_same(*reversed(_both(*run)))


@FUZZ
@given(runs("hashes"))
def test_the_loops_agree_with_block_hash_prefix_caches(run):
    _assert_same(*reversed(_both(*run)))


@settings(FUZZ, max_examples=max(EXAMPLES // 3, 1))   # a third: the pinned cases cover each branch once already
@given(st.sampled_from(["none", "sessions", "hashes"]).flatmap(lambda blocks: runs(blocks, split=True)))
def test_the_loops_agree_on_disaggregated_pools(run):
    """Prefill then decode pools: the KV transfer, the decode pool's router and preemption, prefix caches on the
    prefill replicas."""
    _assert_same(*reversed(_both(*run)))


@settings(FUZZ, max_examples=max(EXAMPLES // 3, 1))
@given(st.sampled_from(["none", "sessions", "hashes"]).flatmap(lambda blocks: runs(blocks, speculative=True)))
def test_the_loops_agree_with_speculative_decoding(run):
    """Mixed steps charge the draft passes and the verification of k + 1 tokens per decode; decode-only runs read
    the speculative time per token."""
    _assert_same(*reversed(_both(*run)))


def test_a_closed_loop_with_prefix_caches_routes_round_robin_in_the_order_clients_send():
    """Found by the property above: the compiled loop precomputed round-robin picks in request order, but a closed
    loop's client whose reply comes first sends request 2 before the other client's first request 1 is sent."""
    frame = pd.DataFrame({"timestamp": pd.Timestamp("2025-01-01", tz="UTC") + pd.to_timedelta(np.zeros(6), unit="s"),
                          "input_tokens": np.ones(6, dtype=np.int32),
                          "output_tokens": np.array([1, 1, 1, 1, 1, 13], dtype=np.int32),
                          "session_id": pd.Categorical(["s0"] * 6)})
    req = simulator.requests_from_frame(frame)
    reference, compiled = _both(req, "small", dict(replicas=2, router="round_robin", arrivals="closed",
                                                   concurrency=2))
    assert reference.requests["replica"].tolist()[:3] == [0, 0, 1]   # request 2 was routed before request 1
    _assert_same(compiled, reference)
