"""Saturation as an engine saturates (issue 36, items 2 and 5).

Offered everything at once, a replica admits what its KV pool holds as the engine does (vLLM's watermark by
default), so it runs at its best throughput: at least what it serves under MLPerf's Server limits, and faster than
greedy admission, which preempts and recomputes. ``saturated`` means the queue grows: the verdict for a given rate
does not change with the run's length, on a steady log and on a staged one (the real Azure conversation trace's
lengths, request by request, on Poisson arrivals).
"""
from __future__ import annotations

import numpy as np
import pytest

from shapeviz.ingest import load_log
from shapeviz.physics.steps import Deployment
from shapeviz.serving.mlperf import LIMITS_MS, openorca_requests
from shapeviz.serving.simulator import Requests, simulate
from shapeviz.serving.stages import saturated_stages

H200 = Deployment("llama-2-70b", "h200", "fp8", None, 1)
TP2 = Deployment("llama-3.1-70b", "h100-sxm", "fp8", None, 2)
TTFT_P99_MS, TPOT_P99_MS = LIMITS_MS["Server"]


def _long_prompts(n: int, seed: int = 1) -> Requests:
    """Seeded lognormal lengths with a long tail (input mean ~900, up to 3,000; output mean ~290): prompts long
    enough that a pool offered them all at once overflows under greedy admission. Not OpenOrca's (mean 225)."""
    rng = np.random.default_rng(seed)
    isl = np.clip(np.round(rng.lognormal(np.log(700.0), 0.8, n)), 20, 3000).astype(np.int64)
    osl = np.clip(np.round(rng.lognormal(np.log(220.0), 0.8, n)), 2, 1024).astype(np.int64)
    return Requests(isl, osl, np.zeros(n, dtype=np.int64))


def _output_tps(result) -> float:
    return result.summary()["throughput"]["output_tokens_per_s"]


def test_offered_everything_at_once_a_replica_serves_at_least_its_server_throughput():
    req = openorca_requests(1500)
    offline = simulate(req, H200, all_at_once=True)
    server = simulate(req, H200, rate_rps=6.0)      # a Poisson rate within MLPerf's Server limits
    s = server.summary()
    assert s["ttft_ms"]["p99"] <= TTFT_P99_MS and s["tpot_ms"]["p99"] <= TPOT_P99_MS
    assert offline.settings["arrivals"] == "all_at_once" and offline.settings["admission"] == "watermark"
    assert (offline.requests["arrival_s"] == 0).all()
    assert _output_tps(offline) >= _output_tps(server)
    assert offline.summary()["makespan_s"] == pytest.approx(offline.requests["e2e_ms"].max() / 1000.0)


def test_the_watermark_admits_what_the_pool_holds_instead_of_preempting_and_recomputing():
    req = _long_prompts(1500)
    runs = {a: simulate(req, H200, all_at_once=True, admission=a)
            for a in ("watermark", "guaranteed_no_evict", "max_utilization")}
    greedy = runs["max_utilization"]
    assert greedy.preemptions > 50                                   # greedy admission overflows and recomputes
    assert runs["guaranteed_no_evict"].preemptions == 0              # TensorRT-LLM's default never evicts
    assert runs["watermark"].preemptions <= greedy.preemptions // 20
    for a in ("watermark", "guaranteed_no_evict"):
        assert _output_tps(runs[a]) >= 1.03 * _output_tps(greedy)


def test_an_unknown_admission_policy_is_named():
    with pytest.raises(ValueError, match="admission='fifo' must be one of"):
        simulate(_long_prompts(10), H200, all_at_once=True, admission="fifo")


@pytest.fixture(scope="module")
def azure_lengths(traces) -> tuple[np.ndarray, np.ndarray]:
    real = load_log(traces / "azure_llm_2023" / "AzureLLMInferenceTrace_conv.csv").frame
    return real["input_tokens"].to_numpy().astype(np.int64), real["output_tokens"].to_numpy().astype(np.int64)


def _steady(lengths, rate: float, seconds: float):
    inp, out = lengths
    n = int(rate * seconds) + 50
    req = Requests(inp[:n], out[:n], np.zeros(n, dtype=np.int64))
    return simulate(req, TP2, rate_rps=rate, duration_s=seconds, seed=3)


@pytest.mark.parametrize("rate, seconds, verdict", [
    (7.0, (60, 120, 240, 600, 1200), False),    # below the knee: the batches fill, the queue does not grow
    (12.0, (60, 120, 240, 600, 1200), True),    # past it: the queue grows, however long the run
])
def test_saturated_means_the_queue_grows_whatever_the_runs_length(azure_lengths, rate, seconds, verdict):
    assert [_steady(azure_lengths, rate, s).saturated for s in seconds] == [verdict] * len(seconds)


def test_a_staged_logs_verdicts_do_not_change_with_the_stages_length(azure_lengths):
    inp, out = azure_lengths
    verdicts = []
    for seconds in (120.0, 600.0):
        rng = np.random.default_rng(0)
        parts, t = [], 0.0
        for rate in (7.0, 12.0):
            x = t + np.cumsum(rng.exponential(1.0 / rate, size=int(rate * seconds * 1.5) + 50))
            parts.append(x[x < t + seconds])
            t += seconds
        arrival = np.concatenate(parts)
        n = arrival.size
        res = simulate(Requests(inp[:n], out[:n], np.zeros(n, dtype=np.int64), arrival), TP2, seed=3)
        verdicts.append(saturated_stages(res.requests))
    assert verdicts == [[False, True], [False, True]]
