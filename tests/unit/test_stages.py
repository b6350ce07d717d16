"""A log whose rate moves in stages (a load test): stages found from its arrivals, reported stage by stage, and
saturation judged per stage instead of across stages.

The staged logs keep the real Azure conversation trace's (input, output) tokens, request by request, and put them
on Poisson stages of equal request counts at 2, 4, 8 and 16 req/s, as a load test's stages would.
"""
from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from shapeviz.cli import main
from shapeviz.ingest import load_log
from shapeviz.physics.steps import Deployment
from shapeviz.serving.simulator import simulate
from shapeviz.serving.stages import detect_stages

STAGE_RPS = (2.0, 4.0, 8.0, 16.0)
PER_STAGE = 600


def _poisson_stages(rates, seconds=None, per_stage=None, seed=0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    out, t = [], 0.0
    for r in rates:
        d = seconds if seconds is not None else per_stage / r
        x = t + np.cumsum(rng.exponential(1.0 / r, size=int(r * d * 1.5) + 50))
        out.append(x[x < t + d])
        t += d
    return np.concatenate(out)


@pytest.fixture(scope="module")
def staged_log(traces, tmp_path_factory) -> pd.DataFrame:
    """The Azure conversation trace's requests on Poisson stages at 2, 4, 8, 16 req/s, 600 requests each."""
    real = load_log(traces / "azure_llm_2023" / "AzureLLMInferenceTrace_conv.csv").frame
    arrival = _poisson_stages(STAGE_RPS, per_stage=PER_STAGE)
    pick = np.arange(arrival.size) % len(real)
    frame = pd.DataFrame({
        "timestamp": pd.Timestamp("2026-01-05", tz="UTC") + pd.to_timedelta(arrival, unit="s"),
        "input_tokens": real["input_tokens"].to_numpy()[pick],
        "output_tokens": real["output_tokens"].to_numpy()[pick],
    })
    path = tmp_path_factory.mktemp("staged") / "loadtest.csv"
    frame.to_csv(path, index=False)
    return frame.assign(path=str(path))


# --- stages from arrivals ---------------------------------------------------------------------------------------
def test_a_load_tests_poisson_stages_are_found_with_their_rates():
    rates = (3.0, 6.0, 9.0, 12.0)
    stages = detect_stages(_poisson_stages(rates, seconds=180.0, seed=3))
    assert len(stages) == 4
    for s, want, start in zip(stages, rates, (0.0, 180.0, 360.0, 540.0)):
        assert s.rate_rps == pytest.approx(want, rel=0.15)
        assert s.start_s == pytest.approx(start, abs=10.0)


@pytest.mark.parametrize("rate, seconds", [(0.5, 3600.0), (10.0, 600.0), (40.0, 1800.0)])
def test_a_steady_poisson_log_is_one_stage(rate, seconds):
    for seed in range(8):
        assert len(detect_stages(_poisson_stages([rate], seconds=seconds, seed=seed))) == 1


def test_a_real_steady_trace_is_one_stage(traces):
    frame = load_log(traces / "mooncake_fast25" / "conversation_trace.jsonl.gz").frame
    arrival = ((frame["timestamp"] - frame["timestamp"].min()) / pd.Timedelta(seconds=1)).to_numpy()
    assert len(detect_stages(arrival)) == 1


# --- saturation judged per stage ----------------------------------------------------------------------------------
def test_a_staged_log_at_low_load_is_not_saturated(staged_log):
    res = simulate(staged_log.drop(columns="path"), Deployment("llama-3.1-8b", "h100-sxm", "fp8", None, 1),
                   replicas=16)
    assert res.summary()["ttft_ms"]["p90"] < 200          # every stage is served at once: nothing queues
    assert res.saturated is False


def test_an_overloaded_staged_log_is_saturated_in_its_top_stages(staged_log, capsys):
    code = main(["simulate", staged_log["path"].iloc[0], "--model", "llama-3.1-70b", "--tp", "2", "--replicas", "1",
                 "--json"])
    assert code == 0
    d = json.loads(capsys.readouterr().out)
    assert d["saturated"] is True
    stages = d["stages"]
    assert len(stages) == 4 and stages[0]["saturated"] is False and stages[-1]["saturated"] is True
    assert stages[-1]["ttft_p90_ms"] > 10_000          # its queue grew: the last stage's requests waited


# --- per-stage results --------------------------------------------------------------------------------------------
def test_simulate_reports_each_stage_beside_a_benchmarks_table(staged_log, capsys):
    path = staged_log["path"].iloc[0]
    args = ["simulate", path, "--model", "llama-3.1-8b", "--precision", "fp8", "--tp", "1", "--replicas", "2",
            "--tpot-slo-ms", "6"]
    assert main(args + ["--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    stages = d["stages"]
    assert [round(s["rate_rps"]) for s in stages] == [2, 4, 8, 16]
    assert [s["requests"] for s in stages] == pytest.approx([PER_STAGE] * 4, rel=0.1)
    assert sum(s["requests"] for s in stages) == d["requests"]
    for s in stages:
        assert s["ttft_p50_ms"] <= s["ttft_p90_ms"] and s["tpot_p50_ms"] <= s["tpot_p90_ms"]
        assert s["goodput_rps"] == pytest.approx(s["goodput"] * s["rate_rps"])
    # one answer: the stages' goodput, weighted by their requests, is the whole replay's
    weighted = sum(s["goodput"] * s["requests"] for s in stages) / d["requests"]
    assert weighted == pytest.approx(d["goodput"], abs=1e-9)
    assert 0.0 < d["goodput"] < 1.0      # the tight TPOT SLO sorts requests both ways
    # the busier the stage, the slower its decode steps: TPOT p90 climbs stage by stage
    tpot = [s["tpot_p90_ms"] for s in stages]
    assert tpot == sorted(tpot) and tpot[-1] > tpot[0]
    assert main(args) == 0
    text = capsys.readouterr().out
    assert "4 stages found from the arrivals" in text and "stage 4:" in text


def test_a_step_up_at_low_load_with_long_replies_is_not_saturated(traces):
    """Replies of ten seconds to minutes: after a step up the requests in service keep growing for that long,
    past the next stage's first fifth, while no request waits. Judged by the waiting ones, that stage keeps up."""
    real = load_log(traces / "azure_llm_2023" / "AzureLLMInferenceTrace_conv.csv").frame
    arrival = np.concatenate([_poisson_stages((2.0,), seconds=300.0, seed=4),
                              300.0 + _poisson_stages((8.0,), seconds=60.0, seed=5)])
    pick = np.arange(arrival.size) % len(real)
    frame = pd.DataFrame({
        "timestamp": pd.Timestamp("2026-01-05", tz="UTC") + pd.to_timedelta(arrival, unit="s"),
        "input_tokens": real["input_tokens"].to_numpy()[pick],
        "output_tokens": np.maximum(real["output_tokens"].to_numpy()[pick], 1) * 20,   # long replies
    })
    res = simulate(frame, Deployment("llama-3.1-8b", "h100-sxm", "fp8", None, 1), replicas=16)
    assert res.summary()["queue_ms"]["p90"] < 100        # nothing waits: both stages keep up
    assert res.summary()["e2e_ms"]["p50"] > 12_000       # replies outlast a fifth of the second stage
    assert res.saturated is False
