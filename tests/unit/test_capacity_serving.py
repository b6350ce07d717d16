"""The serving plan and its what-if: demand, pressure, TTFT/TPOT, GPUs and cost behave as a planner expects."""
from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from shapeviz.analyses.traffic import rate_over_time
from shapeviz.ingest import load_log
from shapeviz.physics import Deployment, default_deployment
from shapeviz.serving import WhatIf, Workload, load_curve, plan

AZURE_CONV = "azure_llm_2023/AzureLLMInferenceTrace_conv.csv"
AZURE_CONV_MEAN_RPS = 5.53  # SOURCE.md: 19,366 requests over 3,501.7 s


@pytest.fixture
def azure_conv(trace) -> pd.DataFrame:
    return load_log(trace(AZURE_CONV)).frame


@pytest.fixture
def conv_workload(azure_conv: pd.DataFrame) -> Workload:
    return Workload.from_frame(azure_conv)


def rag(rate: float = 2.0) -> Workload:
    return Workload.fixed(6_000, 150, rate_rps=rate)


def reasoning(rate: float = 2.0) -> Workload:
    return Workload.fixed(800, 2_500, rate_rps=rate)


def test_binning_keeps_token_totals_and_measures_the_peak_rate(azure_conv: pd.DataFrame, conv_workload: Workload) -> None:
    w = conv_workload
    assert w.n_requests == len(azure_conv) == 19_366
    assert w.weight.size < 2_000 and w.weight.sum() == pytest.approx(1.0)
    # each point is its bin's mean, so the demand in tokens is exact
    assert w.mean_input * w.n_requests == pytest.approx(azure_conv["input_tokens"].sum(), rel=1e-9)
    assert w.mean_output * w.n_requests == pytest.approx(azure_conv["output_tokens"].sum(), rel=1e-9)
    # the observed peak (p99 of per-minute rates) sits above the published mean rate, not absurdly so
    assert w.rate_source == "measured"
    assert AZURE_CONV_MEAN_RPS < w.rate_rps < 3 * AZURE_CONV_MEAN_RPS
    assert "p99 of per-minute" in w.rate_note


def test_a_user_rate_wins_and_a_log_without_timestamps_is_labelled_assumed(azure_conv: pd.DataFrame) -> None:
    assert Workload.from_frame(azure_conv, rate_rps=12.0).rate_source == "set by user"
    no_time = Workload.from_frame(azure_conv.drop(columns=["timestamp"]))
    assert no_time.rate_source == "assumed" and "--rate" in no_time.rate_note
    with pytest.raises(ValueError, match="positive"):
        Workload.from_frame(azure_conv, rate_rps=0)
    with pytest.raises(ValueError, match="input_tokens"):
        Workload.from_frame(azure_conv.drop(columns=["input_tokens"]))


def test_cached_tokens_of_a_log_are_binned_with_their_requests() -> None:
    frame = pd.DataFrame({
        "input_tokens": np.array([1_000, 1_000, 8_000, 8_000], dtype=np.int32),
        "output_tokens": np.array([100, 100, 50, 50], dtype=np.int32),
        "cached_tokens": pd.array([600, None, 4_000, 8_000], dtype="Int32"),  # a missing count means none
    })
    w = Workload.from_frame(frame, rate_rps=1.0)
    # uncached tokens are a binning axis: a fully cached prompt is not averaged with an uncached one
    assert w.weight.size == 4
    assert sorted(w.input_tokens - w.cached_tokens) == [0, 400, 1_000, 4_000]
    assert w.mean_cached == pytest.approx((600 + 0 + 4_000 + 8_000) / 4)
    p = plan(w, default_deployment())
    assert p.prefill.demand_tokens_per_s == pytest.approx((18_000 - 12_600) / 4)


def test_rate_over_time_counts_every_timestamped_request(azure_conv: pd.DataFrame) -> None:
    rates = rate_over_time(azure_conv, "1min")
    assert list(rates.columns) == ["timestamp", "product", "requests", "rate_rps"]
    assert rates["requests"].sum() == len(azure_conv)
    assert rates["rate_rps"].max() == pytest.approx(rates["requests"].max() / 60)
    assert 55 <= rates["timestamp"].nunique() <= 60  # the log spans 58.4 minutes
    with pytest.raises(ValueError, match="timestamp"):
        rate_over_time(azure_conv.drop(columns=["timestamp"]))


def test_trimming_input_halves_prefill_demand_and_leaves_decode_alone(conv_workload: Workload) -> None:
    dep = default_deployment()
    base = plan(conv_workload, dep)
    trimmed = plan(conv_workload, dep, WhatIf(trim_input=0.5))
    assert trimmed.prefill.demand_tokens_per_s == pytest.approx(base.prefill.demand_tokens_per_s / 2)
    assert trimmed.decode.demand_tokens_per_s == pytest.approx(base.decode.demand_tokens_per_s)
    assert trimmed.ttft_ms.p90 < base.ttft_ms.p90


def test_trimming_output_halves_decode_demand_and_leaves_prefill_alone(conv_workload: Workload) -> None:
    dep = default_deployment()
    base = plan(conv_workload, dep)
    trimmed = plan(conv_workload, dep, WhatIf(trim_output=0.5))
    assert trimmed.decode.demand_tokens_per_s == pytest.approx(base.decode.demand_tokens_per_s / 2)
    assert trimmed.prefill.demand_tokens_per_s == pytest.approx(base.prefill.demand_tokens_per_s)
    assert trimmed.decode.gpu_seconds_per_s < base.decode.gpu_seconds_per_s


def test_prefix_hits_cut_prefill_demand_and_ttft() -> None:
    dep = default_deployment()
    w = rag(rate=3.0)
    base = plan(w, dep)
    cached = plan(w, dep, WhatIf(cache_hit=0.6))
    assert cached.prefill.demand_tokens_per_s == pytest.approx(0.4 * base.prefill.demand_tokens_per_s)
    assert cached.ttft_ms.p50 < 0.6 * base.ttft_ms.p50
    assert cached.gpus["colocated"] <= base.gpus["colocated"]
    # cached tokens the log reports are kept unless the what-if overrides them
    logged = Workload.fixed(6_000, 150, rate_rps=3.0, cached_tokens=3_600)
    assert plan(logged, dep).prefill.demand_tokens_per_s == pytest.approx(cached.prefill.demand_tokens_per_s)


def test_more_traffic_needs_more_gpus_and_the_slos_hold(conv_workload: Workload) -> None:
    dep = default_deployment()
    gpus = []
    for mult in (0.5, 1.0, 2.0, 4.0):
        p = plan(conv_workload, dep, WhatIf(traffic_multiplier=mult))
        assert p.meets_slo and p.ttft_ms.p90 <= 1000 and p.tpot_ms.p90 <= 50
        gpus.append(p.gpus["colocated"])
        assert p.gpus["colocated"] % dep.tp == 0
    assert gpus == sorted(gpus) and gpus[-1] > gpus[0]


def test_the_seed_cases_land_on_opposite_phases() -> None:
    dep = default_deployment()
    r, q = plan(rag(), dep), plan(reasoning(), dep)
    assert r.dominant_phase == "prefill" and q.dominant_phase == "decode"
    # split pools follow the phase: the RAG prefill pool outweighs its decode pool, and the reverse
    assert r.gpus["prefill"] > r.gpus["decode"]
    assert q.gpus["decode"] >= q.gpus["prefill"]


def test_ttft_rises_sharply_as_prefill_pressure_nears_one() -> None:
    dep = default_deployment()
    # long prompts, short answers: prefill is what fills up
    curve = load_curve(Workload.fixed(6_000, 20, rate_rps=1.0), dep, multipliers=np.linspace(0.2, 2.4, 23), replicas=1)
    live = curve[~curve["saturated"]]
    assert live["prefill_utilization"].max() > 0.9
    assert np.isfinite(live["decode_utilization"]).all() and live["decode_utilization"].max() < 1e3
    assert live["ttft_p90_ms"].is_monotonic_increasing
    low = live.loc[live["prefill_utilization"] < 0.35, "ttft_p90_ms"].iloc[-1]
    high = live["ttft_p90_ms"].iloc[-1]
    assert high > 5 * low
    # past full prefill utilisation the queue never drains: saturated, no latency figure
    assert curve.loc[curve["prefill_utilization"] >= 1, "saturated"].all()
    assert curve.loc[curve["saturated"], "ttft_p90_ms"].isna().all()


def test_decode_batch_grows_tpot_with_load_until_the_kv_pool_or_slo_caps_it() -> None:
    dep = default_deployment()
    curve = load_curve(reasoning(rate=1.0), dep, multipliers=[0.5, 1, 2, 4, 8, 16, 32], replicas=1)
    live = curve[~curve["saturated"]]
    assert live["tpot_p50_ms"].is_monotonic_increasing and live["tpot_p90_ms"].ge(live["tpot_p50_ms"]).all()
    assert curve["saturated"].iloc[-1]


def test_an_slo_below_the_prefill_time_is_reported_not_hidden() -> None:
    p = plan(rag(), default_deployment(), ttft_slo_ms=50)
    assert not p.meets_slo
    assert any("TTFT SLO" in note for note in p.notes)
    assert p.gpus["colocated"] is not None  # still sized (for a utilisation target), and says so
    assert any("utilisation" in note for note in p.notes)


def test_cost_follows_gpus_and_price() -> None:
    dep = default_deployment()
    p = plan(reasoning(), dep, gpu_hour_usd=4.0)
    assert p.cost["usd_per_gpu_hour"] == 4.0
    assert p.cost["usd_per_hour"] == pytest.approx(4.0 * p.gpus["colocated"])
    tokens_per_hour = 2.0 * (800 + 2_500) * 3600
    assert p.cost["usd_per_million_tokens"] == pytest.approx(p.cost["usd_per_hour"] / tokens_per_hour * 1e6)
    assert plan(reasoning(), dep).cost["usd_per_gpu_hour"] == dep.gpu.usd_per_gpu_hour
    assert "assumption" in plan(reasoning(), dep).assumptions["price_source"]


def test_plan_is_json_safe_and_badges_every_figure(conv_workload: Workload) -> None:
    p = plan(conv_workload, default_deployment(), WhatIf(traffic_multiplier=50))
    doc = json.loads(json.dumps(p.to_dict(), allow_nan=False))
    for key in ("prefill", "decode", "ttft_ms", "tpot_ms", "gpus", "cost", "assumptions", "provenance"):
        assert key in doc
    assert set(doc["provenance"].values()) <= {"measured", "estimated", "assumed"}
    assert doc["provenance"]["rate_rps"] == "measured" and doc["provenance"]["ttft_ms"] == "estimated"
    assert doc["assumptions"]["efficiency"]["mfu"]["source"]


def test_fp8_on_a100_is_stated_in_the_assumptions() -> None:
    dep = Deployment("llama-3.1-70b", "a100-80gb", "fp8", tp=4)
    p = plan(reasoning(), dep)
    assert "BF16" in p.assumptions["fp8_note"] and any("FP8" in note for note in p.notes)


@pytest.mark.parametrize("kwargs", [{"trim_input": 1.0}, {"trim_output": -0.1}, {"cache_hit": 1.5},
                                    {"traffic_multiplier": 0}, {"traffic_multiplier": float("inf")}])
def test_what_if_ranges_are_validated(kwargs: dict[str, float]) -> None:
    with pytest.raises(ValueError):
        WhatIf(**kwargs)


def test_a_cache_hit_equal_to_the_logs_own_changes_nothing_and_keeps_who_is_cached() -> None:
    """An agent's long prompts are cached, a one-off prompt is not: a set hit share scales, never flattens, that."""
    dep = Deployment("llama-3.1-70b", "h100-sxm", "fp8", tp=2)
    w = Workload.from_points([100_000, 2_000], [300, 300], [95_000, 0], rate_rps=2.0)
    own_share = (95_000) / (102_000)
    same = w.apply(WhatIf(cache_hit=own_share))
    np.testing.assert_allclose(same.cached_tokens, w.cached_tokens)
    assert plan(w, dep, WhatIf(cache_hit=own_share)).ttft_ms.p90 == pytest.approx(plan(w, dep).ttft_ms.p90)
    more = w.apply(WhatIf(cache_hit=0.5))
    assert more.cached_tokens[1] == 0 and more.cached_tokens[0] == pytest.approx(51_000)


def test_a_fleet_sized_by_latency_says_so_and_a_throughput_bound_one_does_not() -> None:
    """A plan at a few percent pressure must say what the extra GPUs buy (the demo: a TTFT p90 set by long
    agent prompts), and a plan whose GPUs are busy must not claim it."""
    from shapeviz.workload.synth import generate

    demo = plan(Workload.from_frame(generate(20_000, seed=0)), default_deployment())
    assert demo.meets_slo and demo.prefill.utilization < 0.2
    sized = [n for n in demo.notes if n.startswith("sized by the")]
    assert len(sized) == 1 and "TTFT p90 SLO, not by throughput" in sized[0]
    busy = plan(Workload.fixed(1000, 200, rate_rps=40.0), default_deployment())
    assert busy.meets_slo and not any(n.startswith("sized by the") for n in busy.notes)
