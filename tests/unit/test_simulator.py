"""The serving simulator against closed forms (single request, M/D/1, Little's law, KV preemption) and published rows."""
from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from shapeviz.cli import main
from shapeviz.physics.steps import (
    Deployment,
    decode_step_s,
    mixed_step_s,
    prefill_time_s,
)
from shapeviz.serving.planner import WhatIf, Workload
from shapeviz.serving.simulator import (
    Requests,
    fixed_requests,
    requests_from_frame,
    simulate,
)

DEP = Deployment("llama-3.1-70b", "h100-sxm", "fp8", None, 2)


@pytest.mark.parametrize("dep", [
    DEP,
    Deployment("qwen3-235b-a22b", "h100-sxm", "fp8", tp=8, ep=8, attention_dp=True),
    Deployment("gpt-oss-120b", "h100-sxm", None, tp=1),
], ids=["dense-tp2", "moe-dep8", "mxfp4-moe"])
def test_mixed_step_reduces_to_the_prefill_and_decode_physics(dep: Deployment) -> None:
    """One source of truth: a lone prompt costs prefill_time_s, a decode-only step costs decode_step_s (any layout)."""
    for n in (16, 500, 4000):
        assert mixed_step_s(dep, np.array([n]), np.array([0]), 0, 0.0) == pytest.approx(float(prefill_time_s(dep, n)))
    for b, c in ((1, 100.0), (32, 2000.0), (300, 9000.0)):
        assert mixed_step_s(dep, np.array([]), np.array([]), b, c) == pytest.approx(float(decode_step_s(dep, b, c)))
    # chunking a prompt costs at least as much as prefilling it at once (each chunk pays the fixed costs)
    whole = mixed_step_s(DEP, np.array([4000]), np.array([0]), 0, 0.0)
    halves = mixed_step_s(DEP, np.array([2000]), np.array([0]), 0, 0.0) + mixed_step_s(DEP, np.array([4000]), np.array([2000]), 0, 0.0)
    assert halves > whole


def test_a_single_request_gets_its_prefill_time_and_batch_one_decode() -> None:
    r = simulate(fixed_requests(3000, 200, 1), DEP, rate_rps=1.0).requests.iloc[0]
    assert r["queue_ms"] == 0
    assert r["ttft_ms"] == pytest.approx(float(prefill_time_s(DEP, 3000)) * 1000, rel=1e-9)
    step = float(decode_step_s(DEP, 1, 3000 + 100)) * 1000
    assert r["tpot_ms"] == pytest.approx(step, rel=0.01)
    assert r["e2e_ms"] == pytest.approx(r["ttft_ms"] + 199 * r["tpot_ms"], rel=1e-9)


def test_cached_prefix_shortens_the_prefill() -> None:
    cold = simulate(fixed_requests(6000, 10, 1), DEP, rate_rps=1.0).requests["ttft_ms"].iloc[0]
    warm = simulate(fixed_requests(6000, 10, 1, cached_tokens=5000), DEP, rate_rps=1.0).requests["ttft_ms"].iloc[0]
    assert warm == pytest.approx(float(prefill_time_s(DEP, 6000, 5000)) * 1000, rel=1e-9)
    assert warm < 0.4 * cold


def test_prefill_queue_waits_like_md1_at_low_load() -> None:
    """Prompts of exactly one token budget, one output token: a deterministic single server (M/D/1)."""
    budget = 8192
    service = float(prefill_time_s(DEP, budget))
    for rho in (0.2, 0.5):
        lam = rho / service
        # three seeds: the mean wait of a few thousand arrivals still scatters by ±10% around the closed form
        wait = np.mean([(simulate(fixed_requests(budget, 1, 5000), DEP, rate_rps=lam, seed=s).requests["ttft_ms"]
                         / 1000 - service).mean() for s in (1, 2, 3)])
        expected = lam * service**2 / (2 * (1 - rho))  # Pollaczek–Khinchine with a deterministic service
        assert wait == pytest.approx(expected, rel=0.1)


def test_decode_batch_obeys_littles_law() -> None:
    """Tiny prompts, long outputs: the mean TPOT is one step at the batch B = λ·E[output]·TPOT."""
    lam, osl = 2.0, 400
    r = simulate(fixed_requests(8, osl, 1500), DEP, rate_rps=lam, seed=1).requests.iloc[300:]
    tpot = r["tpot_ms"].mean() / 1000
    # fixed point of B = λ·osl·t(B) at the mean context
    b = 1.0
    for _ in range(100):
        b = lam * osl * float(decode_step_s(DEP, b, 8 + osl / 2))
    assert tpot == pytest.approx(float(decode_step_s(DEP, b, 8 + osl / 2)), rel=0.05)
    assert b > 10  # a real batch, not one sequence at a time


def test_whole_prompt_scheduling_does_not_share_an_iteration_between_two_long_prompts() -> None:
    """Two 5,000-token prompts queued together: chunked prefill starts the second inside the first one's iteration."""
    # a short request keeps the replica busy so that both long prompts wait for the same next iteration
    req = Requests(np.array([100, 5000, 5000]), np.array([50, 2, 2]), np.zeros(3, dtype=np.int64),
                   np.array([0.0, 0.001, 0.001]))
    alone = float(prefill_time_s(DEP, 5000)) * 1000
    whole = simulate(req, DEP, arrivals="trace", chunked_prefill=False).requests
    chunked = simulate(req, DEP, arrivals="trace").requests
    service = lambda r: (r["ttft_ms"] - r["queue_ms"]).to_numpy()  # noqa: E731 - from first scheduled to first token
    assert service(whole)[1] == pytest.approx(alone, rel=0.05)
    assert whole["ttft_ms"][2] - whole["ttft_ms"][1] == pytest.approx(alone, rel=0.1)
    assert service(chunked)[1] > 1.3 * alone  # it shares its iteration with ~3,000 tokens of the second prompt
    # the same work either way: the second prompt's first token comes at the same time, the first one's later
    assert chunked["ttft_ms"][2] == pytest.approx(whole["ttft_ms"][2], rel=0.01)
    assert chunked["ttft_ms"][1] > 1.5 * whole["ttft_ms"][1]


def test_kv_pool_exhaustion_preempts_and_every_request_still_finishes() -> None:
    small = simulate(fixed_requests(4000, 1500, 60), DEP, concurrency=40, kv_fraction=0.03)
    roomy = simulate(fixed_requests(4000, 1500, 60), DEP, concurrency=40)
    assert small.preemptions > 0 and roomy.preemptions == 0
    assert small.requests["e2e_ms"].notna().all()
    assert small.kv_peak_share <= 1.0
    assert small.requests["e2e_ms"].mean() > roomy.requests["e2e_ms"].mean()


def test_a_prompt_larger_than_the_kv_pool_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="does not fit one replica's KV pool"):
        simulate(fixed_requests(100_000, 10, 2), DEP, rate_rps=1.0, kv_fraction=0.01)


def test_load_beyond_capacity_is_reported_as_saturated() -> None:
    light = simulate(fixed_requests(1000, 200, 400), DEP, rate_rps=1.0)
    heavy = simulate(fixed_requests(1000, 200, 400), DEP, rate_rps=200.0)
    assert not light.saturated and heavy.saturated
    assert heavy.summary()["ttft_ms"]["p90"] > 20 * light.summary()["ttft_ms"]["p90"]


def test_more_replicas_and_routers_share_the_load() -> None:
    req = fixed_requests(2000, 300, 600)
    one = simulate(req, DEP, rate_rps=6.0).summary()
    rr = simulate(req, DEP, rate_rps=6.0, replicas=3)
    lt = simulate(req, DEP, rate_rps=6.0, replicas=3, router="least_tokens")
    assert set(rr.requests["replica"]) == {0, 1, 2}
    assert rr.summary()["tpot_ms"]["mean"] < one["tpot_ms"]["mean"]
    assert lt.requests["replica"].value_counts().min() > 100


def test_priority_scheduling_serves_short_prompts_first_under_load() -> None:
    rng = np.random.default_rng(0)
    n = 800
    inp = np.where(rng.random(n) < 0.8, 200, 12_000)
    req = Requests(inp, np.full(n, 50), np.zeros(n, dtype=np.int64))
    fcfs = simulate(req, DEP, rate_rps=5.0, seed=2).requests
    prio = simulate(req, DEP, rate_rps=5.0, seed=2, scheduler="priority").requests
    short = inp == 200
    assert prio.loc[short, "ttft_ms"].quantile(0.9) < fcfs.loc[short, "ttft_ms"].quantile(0.9)


def test_disaggregation_keeps_long_prefills_out_of_the_decode_steps() -> None:
    rng = np.random.default_rng(1)
    n = 600
    req = Requests(np.where(rng.random(n) < 0.5, 300, 8000), np.full(n, 300), np.zeros(n, dtype=np.int64))
    colocated = simulate(req, DEP, rate_rps=3.0, replicas=2).summary()
    split = simulate(req, DEP, rate_rps=3.0, disaggregate="1:1")
    assert split.summary()["tpot_ms"]["p90"] < colocated["tpot_ms"]["p90"]
    # the first token counts the KV transfer to the decode pool: TTFT is never below the prefill alone
    floor = prefill_time_s(DEP, split.requests["input_tokens"].to_numpy()) * 1000
    assert (split.requests["ttft_ms"].to_numpy() >= floor - 1e-6).all()


def test_trace_arrivals_follow_the_timestamps_and_the_traffic_lever() -> None:
    ts = pd.Timestamp("2024-01-01", tz="UTC") + pd.to_timedelta(np.arange(50) * 2.0, unit="s")
    frame = pd.DataFrame({"timestamp": ts, "input_tokens": 500, "output_tokens": 20})
    base = simulate(frame, DEP).requests["arrival_s"].to_numpy()
    assert np.allclose(np.diff(base), 2.0)
    double = simulate(frame, DEP, whatif=WhatIf(traffic_multiplier=2.0)).requests["arrival_s"].to_numpy()
    assert np.allclose(np.diff(double), 1.0)
    trimmed = requests_from_frame(frame, WhatIf(trim_input=0.5))
    assert (trimmed.input_tokens == 250).all()


def test_a_workload_is_sampled_by_weight() -> None:
    w = Workload.from_points([100, 5000], [50, 50], weight=[0.9, 0.1], rate_rps=2.0)
    r = simulate(w, DEP, arrivals="poisson", requests=2000, seed=4).requests
    assert (r["input_tokens"] == 5000).mean() == pytest.approx(0.1, abs=0.03)


def test_bad_settings_are_one_line_errors() -> None:
    req = fixed_requests(100, 10, 5)
    for kwargs, match in (({"scheduler": "lifo", "rate_rps": 1.0}, "scheduler"),
                          ({"disaggregate": "2-2", "rate_rps": 1.0}, "PREFILL:DECODE"),
                          ({"arrivals": "closed"}, "concurrency"),
                          ({"replicas": 0, "rate_rps": 1.0}, "replicas")):
        with pytest.raises(ValueError, match=match):
            simulate(req, DEP, **kwargs)
    with pytest.raises(ValueError, match="no timestamps"):
        simulate(req, DEP)


# --- published measurements ------------------------------------------------------------------------------
def test_trtllm_online_serving_rows_below_saturation(reference) -> None:
    rows = pd.read_csv(reference / "calibration" / "trtllm_online_serving_h100.csv")
    rows = rows[(rows["qps_offered"] != "inf")]
    rows = rows[rows["qps_offered"].astype(float) * 0.9 <= rows["throughput_req_s"]]
    errors = []
    for r in rows.itertuples(index=False):
        model = "llama-3.1-70b" if "70B" in r.model else "llama-3.1-8b"
        dep = Deployment(model, "h100-sxm", "bf16", None, int(r.tp))
        s = simulate(fixed_requests(int(r.isl), int(r.osl), 500), dep, rate_rps=float(r.qps_offered),
                     chunked_prefill=False).summary()
        errors += [s["ttft_ms"]["mean"] / r.mean_ttft_ms - 1, s["itl_ms"]["mean"] / r.mean_itl_ms - 1]
    assert len(errors) >= 20
    assert float(np.median(np.abs(errors))) <= 0.20


def test_nim_sweep_explodes_past_concurrency_100(reference) -> None:
    pub = pd.read_csv(reference / "calibration" / "published_h100_mlperf_nim.csv")
    nim = pub[pub["source_id"].str.startswith("nim") & (pub["metric"] == "ttft_ms")]
    measured = dict(zip(nim["concurrency_or_batch"].astype(float), nim["value"].astype(float)))
    dep = Deployment("llama-3.3-70b", "h100-sxm", "fp8", None, 2)
    sim = {c: simulate(fixed_requests(5000, 500, max(500, 8 * c)), dep, concurrency=c,
                       chunked_prefill=False).summary()["ttft_ms"]["mean"] for c in (50, 100, 150)}
    assert measured[100.0] > 5 * measured[50.0] and sim[100] > 3 * sim[50]
    assert sim[150] > 3 * sim[100]
    assert sim[150] == pytest.approx(measured[150.0], rel=0.25)


# --- real traces and the command line --------------------------------------------------------------------
@pytest.mark.parametrize("relative", [
    "azure_llm_2023/AzureLLMInferenceTrace_code.csv",
    "burstgpt/burstgpt_slice.csv",
    "mooncake_fast25/conversation_trace.jsonl.gz",
    "tracelab_example/round_trace.jsonl",
    "vidur_arxiv_summarization/arxiv_summarization_stats_llama2_tokenizer_filtered_v2.csv",
])
def test_simulate_command_on_every_real_trace(trace, capsys, relative) -> None:
    code = main(["simulate", str(trace(relative)), "--requests", "300", "--json"])
    assert code == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["method"] == "simulated" and 0 < doc["requests"] <= 300
    for key in ("ttft_ms", "tpot_ms", "e2e_ms"):
        assert set(doc[key]) == {"mean", "p50", "p90", "p99"}
    assert doc["ttft_ms"]["p50"] > 0 and doc["e2e_ms"]["p90"] >= doc["ttft_ms"]["p90"] * 0.99
    assert set(doc["throughput"]) == {"requests_per_s", "output_tokens_per_s"}
    assert 0 <= doc["goodput"] <= 1 and isinstance(doc["saturated"], bool)
    assert 0 <= doc["utilization"] <= 1


def test_simulate_command_fixed_shape_and_user_errors(capsys) -> None:
    assert main(["simulate", "--isl", "467", "--osl", "256", "--rate", "4", "--model", "llama-3.1-70b",
                 "--precision", "bf16", "--tp", "4", "--requests", "100", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["requests"] == 100 and doc["settings"]["arrivals"] == "poisson"
    assert main(["simulate", "--isl", "100", "--osl", "10"]) == 2
    assert "--rate R" in capsys.readouterr().err
    assert main(["simulate", "--isl", "100", "--osl", "10", "--rate", "1", "--concurrency", "4"]) == 2
    assert main(["simulate", "--isl", "100", "--osl", "10", "--rate", "1", "--disaggregate", "x"]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and "PREFILL:DECODE" in err
    assert main(["simulate", "--isl", "100", "--osl", "10", "--concurrency", "3", "--requests", "30"]) == 0
    assert "closed loop of 3 clients" in capsys.readouterr().out


def test_analytic_ttft_follows_the_simulator_towards_the_knee() -> None:
    """The planner's queue must not read half the simulated TTFT as the load nears the knee (467/256, 70B TP4)."""
    from shapeviz.serving.planner import _Evaluator

    dep = Deployment("llama-3.1-70b", "h100-sxm", "bf16", None, 4)
    ev = _Evaluator.build(Workload.fixed(467, 256, rate_rps=1.0), dep)
    for lam in (4.0, 10.0, 14.0):
        sim = simulate(fixed_requests(467, 256, 3000), dep, rate_rps=lam).requests.iloc[500:]
        analytic = ev.evaluate(np.array([lam]))
        assert analytic["ttft_p50_s"][0] * 1000 == pytest.approx(sim["ttft_ms"].median(), rel=0.35)
        assert analytic["tpot_p50_s"][0] * 1000 == pytest.approx(sim["tpot_ms"].median(), rel=0.15)
