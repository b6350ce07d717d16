"""The serving simulator against closed forms (single request, M/D/1, Little's law, KV preemption) and published rows."""
from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from shapeviz.cli import build_parser, main
from shapeviz.cli.plan import deployment_from_args, resolve_model
from shapeviz.ingest import load_log
from shapeviz.physics import default_deployment
from shapeviz.physics.steps import (
    Deployment,
    decode_step_s,
    mixed_step_s,
    prefill_time_s,
)
from shapeviz.serving.planner import WhatIf, Workload
from shapeviz.serving import simulator
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


def test_more_replicas_share_the_load() -> None:
    req = fixed_requests(2000, 300, 600)
    one = simulate(req, DEP, rate_rps=6.0).summary()
    rr = simulate(req, DEP, rate_rps=6.0, replicas=3)
    assert set(rr.requests["replica"]) == {0, 1, 2}
    assert rr.summary()["tpot_ms"]["mean"] < one["tpot_ms"]["mean"]


@pytest.mark.parametrize("loop", ["compiled", "python"])
def test_least_tokens_router_balances_tokens_where_round_robin_cannot(monkeypatch, loop) -> None:
    """Long and short prompts in turn on two replicas: round-robin sends every long prompt to the same replica
    (in both event loops: the compiled one and the Python one that prefix caches take)."""
    monkeypatch.setattr(simulator, "COMPILED", loop == "compiled")
    n = 400
    inp = np.where(np.arange(n) % 2 == 0, 8000, 200)
    req = Requests(inp, np.full(n, 100), np.zeros(n, dtype=np.int64), np.arange(n) * 0.25)
    runs = {router: simulate(req, DEP, arrivals="trace", replicas=2, router=router).requests
            for router in ("round_robin", "least_tokens")}
    tokens = {router: r.groupby("replica")["input_tokens"].sum() for router, r in runs.items()}
    assert tokens["round_robin"].max() > 10 * tokens["round_robin"].min()      # the adversarial case is real
    assert tokens["least_tokens"].max() <= 1.2 * tokens["least_tokens"].min()  # prompt tokens split evenly
    p90 = {router: r["ttft_ms"].quantile(0.9) for router, r in runs.items()}
    assert p90["least_tokens"] < 0.2 * p90["round_robin"]


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
# The stored efficiencies were fitted on the 19 online rows below saturation and on NIM at concurrency 1
# (data/efficiency.json, data.kinds), so those rows are in sample here. The rows judged below are the ones the
# fit skipped: saturated runs (served < 90% of offered, and the unlimited-rate runs) and NIM at concurrency > 1.
# Whole-prompt scheduling (chunked_prefill=False, TensorRT-LLM's default) was chosen while looking at NIM
# C=25/50; benchmarks/bench_leaveout.py refits without any online row and judges all of them.
ONLINE = "trtllm_online_serving_h100.csv"


def _online(reference) -> pd.DataFrame:
    """Every Triton online-serving row, simulated as measured (Poisson at the offered QPS, 500 requests)."""
    rows = pd.read_csv(reference / "calibration" / ONLINE)
    rows["qps"] = pd.to_numeric(rows["qps_offered"])   # "inf" reads as float infinity: all 500 sent at t = 0
    sims = []
    for r in rows.itertuples(index=False):
        model = "llama-3.1-70b" if "70B" in r.model else "llama-3.1-8b"
        dep = Deployment(model, "h100-sxm", "bf16", None, int(r.tp))
        req = fixed_requests(int(r.isl), int(r.osl), 500)
        if np.isinf(r.qps):
            req = Requests(req.input_tokens, req.output_tokens, req.cached_tokens, np.zeros(500))
            s = simulate(req, dep, arrivals="trace", chunked_prefill=False).summary()
        else:
            s = simulate(req, dep, rate_rps=float(r.qps), chunked_prefill=False).summary()
        sims.append((s["ttft_ms"]["mean"], s["itl_ms"]["mean"], s["throughput"]["requests_per_s"]))
    rows[["sim_ttft", "sim_itl", "sim_served"]] = sims
    rows["saturated"] = rows["throughput_req_s"] < 0.9 * rows["qps"]
    return rows


@pytest.fixture(scope="module")
def online(reference) -> pd.DataFrame:
    return _online(reference)


def test_trtllm_online_serving_rows_past_saturation_are_held_out_and_bounded(online) -> None:
    """Saturated finite-rate rows (skipped by the fit): TTFT and ITL median within 20%, every row within 35%."""
    rows = online[online["saturated"] & np.isfinite(online["qps"])]
    assert len(rows) >= 10
    for sim, measured in (("sim_ttft", "mean_ttft_ms"), ("sim_itl", "mean_itl_ms")):
        err = (rows[sim] / rows[measured] - 1).abs()
        assert err.median() <= 0.20, (sim, err.round(3).tolist())
        assert err.max() <= 0.35, (sim, err.round(3).tolist())


def test_saturation_throughput_of_the_unlimited_rate_runs(online) -> None:
    """All 500 requests at once: the served rate is the fleet's capacity (within 12% on the 467-token prompts)."""
    runs = online[np.isinf(online["qps"])]
    assert len(runs) == 6
    # The two 202/214 runs are left out: the measurement serves fewer of these short requests per second than of
    # the 467/256 ones on the same GPUs, so something other than GPU time (the benchmark client or Triton's
    # batching) capped them; benchmarks/README.md reports them as a miss (+58% and +76%).
    long_prompts = runs[runs["isl"] == 467]
    err = (long_prompts["sim_served"] / long_prompts["throughput_req_s"] - 1).abs()
    assert len(long_prompts) == 4 and err.max() <= 0.12, err.round(3).tolist()


def test_the_knee_of_every_published_curve_is_within_one_load_step(online) -> None:
    """Knee: the first offered QPS whose mean TTFT doubles the lightest load's (loads double: 2, 4, ..., 32)."""
    finite = online[np.isfinite(online["qps"])].sort_values("qps")
    curves = 0
    for _, curve in finite.groupby(["model", "tp", "isl", "osl"]):
        def knee(ttft: np.ndarray) -> int:   # index of the knee; len(ttft) when there is none
            hit = np.flatnonzero(ttft >= 2.0 * ttft[0])
            return int(hit[0]) if hit.size else len(ttft)

        sim_ttft = curve["sim_ttft"].to_numpy()
        measured, simulated = knee(curve["mean_ttft_ms"].to_numpy()), knee(sim_ttft)
        where = (curve.iloc[0]["model"], curve.iloc[0]["isl"], curve.iloc[0]["osl"], measured, simulated)
        assert abs(measured - simulated) <= 1, where
        if measured < len(sim_ttft):   # where the measured TTFT has doubled, the simulated one has risen by half
            assert sim_ttft[measured] >= 1.5 * sim_ttft[0], (where, sim_ttft.round(1).tolist())
        else:                          # no measured knee on this curve: no simulated one either
            assert sim_ttft[-1] < 2.0 * sim_ttft[0], (where, sim_ttft.round(1).tolist())
        curves += 1
    assert curves == 6


def test_nim_sweep_explodes_past_the_kv_pool_as_measured(reference) -> None:
    """NIM at C = 50, 100, 150 (the fit saw only C = 1): TTFT jumps once ~88 sequences fill the KV pool."""
    pub = pd.read_csv(reference / "calibration" / "published_h100_mlperf_nim.csv")
    nim = pub[pub["source_id"].str.startswith("nim")]
    measured = {m: dict(zip(g["concurrency_or_batch"].astype(float), g["value"].astype(float)))
                for m, g in nim.groupby("metric")}
    dep = Deployment("llama-3.3-70b", "h100-sxm", "fp8", None, 2)
    sim = {c: simulate(fixed_requests(5000, 500, max(500, 8 * c)), dep, concurrency=c,
                       chunked_prefill=False).summary() for c in (50, 100, 150)}
    ttft = {c: s["ttft_ms"]["mean"] for c, s in sim.items()}
    assert ttft[100] > 3 * ttft[50] and ttft[150] > 3 * ttft[100]
    for c, s in sim.items():
        assert s["ttft_ms"]["mean"] == pytest.approx(measured["ttft_ms"][float(c)], rel=0.30), c
        assert s["itl_ms"]["mean"] == pytest.approx(measured["itl_ms"][float(c)], rel=0.20), c


# --- real traces and the command line --------------------------------------------------------------------
@pytest.mark.parametrize("relative", [
    "azure_llm_2023/AzureLLMInferenceTrace_code.csv",
    "burstgpt/burstgpt_slice.csv",
    "mooncake_fast25/conversation_trace.jsonl.gz",
    "tracelab_example/round_trace.jsonl",
    "vidur_arxiv_summarization/arxiv_summarization_stats_llama2_tokenizer_filtered_v2.csv",
])
def test_simulate_command_on_every_real_trace(trace, capsys, relative) -> None:
    """The JSON is simulate() on the same rows, fleet and deployment: every latency figure equal."""
    path = trace(relative)
    code = main(["simulate", str(path), "--requests", "300", "--json"])
    assert code == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["method"] == "simulated" and 0 < doc["requests"] <= 300
    frame = load_log(path).frame
    # the default deployment is the one a team runs: the default (or the log's) model at its checkpoint's precision
    args = build_parser().parse_args(["simulate", str(path)])
    dep, _ = deployment_from_args(args, resolve_model(args, frame)[0])
    assert dep.precision == dep.model.checkpoint_precision
    assert doc["settings"]["deployment"] == dep.describe()
    settings = doc["settings"]   # a log without timestamps runs Poisson at its workload's rate
    direct = simulate(frame, dep, arrivals=settings["arrivals"], rate_rps=settings["rate_rps"],
                      replicas=settings["replicas"], requests=300).summary()
    assert doc["requests"] == direct["requests"]
    for key in ("ttft_ms", "tpot_ms", "e2e_ms"):
        assert set(doc[key]) == {"mean", "p50", "p90", "p99"}
        for q, value in direct[key].items():
            assert doc[key][q] == pytest.approx(value, rel=1e-9), (key, q)
    assert doc["throughput"] == pytest.approx(direct["throughput"], rel=1e-9)
    assert doc["goodput"] == pytest.approx(direct["goodput"]) and doc["saturated"] == direct["saturated"]
    assert doc["utilization"] == pytest.approx(direct["utilization"])


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
