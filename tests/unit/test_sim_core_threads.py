"""Replays at once on several threads give each one the results it gives alone (issue 37).

The headline's sizings run on the server's worker threads (``components.work_pool.FairPool``, a thread per core),
two sessions' sizings at once, and a sizing replays one log's request arrays on every candidate fleet. Nothing the
replays share may be written or drawn from: the test runs four of them together on one request object and compares
each with its run alone. (The compiled loop holds the GIL; compiled without it, the replays would truly overlap.
That was measured and not shipped, benchmarks/README.md, issue 37 round 6, and this test is what it would rely on.)
"""
from __future__ import annotations

import threading

import numpy as np
import pandas as pd
import pytest

from shapeviz.physics.steps import Deployment
from shapeviz.serving import sim_core
from shapeviz.serving.simulator import Requests, requests_from_frame, simulate
from shapeviz.workload.synth import shared_prefix_log
from tests.needs import skip_or_fail

TP2 = Deployment("llama-3.1-70b", "h100-sxm", "fp8", None, 2)
TP4 = Deployment("llama-3.1-70b", "h100-sxm", "bf16", None, 4)


@pytest.fixture(scope="module", autouse=True)
def compiled() -> None:
    if sim_core.loop() is None:
        skip_or_fail("numba is not installed (the compiled loop)")


def _requests(n: int, rate_rps: float, seed: int = 1) -> Requests:
    """Log-normal prompts and outputs, Poisson arrivals, a third of each prompt reported cached (as a log says)."""
    rng = np.random.default_rng(seed)
    inp = np.exp(rng.normal(np.log(1000.0), 1.0, n)).astype(np.int64).clip(1, 8_000)
    out = np.exp(rng.normal(np.log(200.0), 1.0, n)).astype(np.int64).clip(1, 2_000)
    arrival = np.cumsum(rng.exponential(1.0 / rate_rps, n))
    return Requests(inp, out, inp // 3, arrival - arrival[0])


CONCURRENT = {
    "prefix-aware, prefix caches": (dict(router="prefix"), TP4, True),
    "random, prefix caches": (dict(router="random", seed=3), TP4, True),
    "least tokens, preempting": (dict(router="least_tokens", kv_fraction=0.02), TP2, False),
}


@pytest.mark.parametrize("case", CONCURRENT)
def test_replays_at_once_on_threads_give_each_ones_results_alone(case: str) -> None:
    """Four fleet sizes replayed at once on four threads (a sizing's candidates, two sessions' sizings), all on one
    request object (a sizing replays one log's arrays on every candidate): each gives exactly what it gives
    replayed alone on arrays of its own, prefix caches, routers and preemptions included. The loop writes a
    request's cached tokens (its simulated hit, the prompt kept by a preempted one) into a copy: written into the
    shared arrays, each replay read the others'."""
    options, dep, blocks = CONCURRENT[case]
    frame = shared_prefix_log(20.0, 1_500)

    def requests() -> Requests:
        return requests_from_frame(frame, block_size=64) if blocks else _requests(1_500, 9.0)

    kwargs = [dict(replicas=k, **options) for k in (2, 3, 4, 5)]
    alone = [simulate(requests(), dep, **kw) for kw in kwargs]
    assert sum(r.preemptions for r in alone) > 0 if not blocks else all(r.prefix for r in alone)
    shared = requests()
    together: list = [None] * len(kwargs)
    start = threading.Barrier(len(kwargs))

    def replay(i: int) -> None:
        start.wait()
        together[i] = simulate(shared, dep, **kwargs[i])

    threads = [threading.Thread(target=replay, args=(i,)) for i in range(len(kwargs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for a, b in zip(alone, together):
        pd.testing.assert_frame_equal(b.requests, a.requests, check_exact=True)
        assert b.prefix == a.prefix
