"""Speculative decoding as a decode lever: the step model, its published speed-ups, the plan, the simulator, the configs."""
from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from shapeviz.cli import main
from shapeviz.datadir import DATA_DIR
from shapeviz.fleet.speculative import speculative_deployment, speculative_effect
from shapeviz.ingest import load_log
from shapeviz.outputs.deploy import check_args, check_yaml_keys, deployment_bundle
from shapeviz.physics.speculative import (
    Speculative,
    acceptance_length,
    dataset_alpha,
    speedup,
)
from shapeviz.physics.steps import Deployment, load_efficiency
from shapeviz.serving import Workload
from shapeviz.serving.simulator import fixed_requests, simulate
from tests.needs import require_module

yaml = require_module("yaml", "the TensorRT-LLM options are checked by parsing them as YAML")


def _dep(spec: Speculative | None = None, **kw) -> Deployment:
    return Deployment("llama-3.1-8b", "h100-sxm", "bf16", "bf16", 1, speculative=spec, **kw)


@pytest.mark.parametrize("alpha", [0.3, 0.6, 0.8, 0.95])
@pytest.mark.parametrize("k", [1, 3, 6])
def test_batch_one_with_a_free_draft_is_the_textbook_speedup(alpha: float, k: int) -> None:
    # n-gram drafts cost no GPU time; with sampling free too, the verification of k+1 tokens at batch 1 reads the
    # weights and the KV once, exactly as a decode step: the speed-up is the expected tokens per step.
    free = load_efficiency().replace(sequence_overhead_us=0.0)
    dep = _dep(Speculative("ngram", k, alpha), efficiency=free)
    expected = (1 - alpha ** (k + 1)) / (1 - alpha)
    assert float(speedup(dep, 1.0, 512.0)) == pytest.approx(expected, rel=1e-9)
    assert float(acceptance_length(alpha, k)) == pytest.approx(expected, rel=1e-12)


def test_the_gain_shrinks_with_the_batch_and_turns_into_a_slowdown() -> None:
    dep = _dep(Speculative("eagle3", 3, dataset_alpha("eagle3", "mt-bench")))
    gains = speedup(dep, np.array([1.0, 16.0, 64.0, 256.0]), 700.0)
    assert gains[0] > 1.6                       # memory-bound: ~τ minus the draft's cost
    assert np.all(np.diff(gains) < 0)           # verifying k+1 tokens per sequence fills the compute
    assert gains[-1] < 0.9                      # compute-bound: it costs more than it saves


def _published_rows() -> pd.DataFrame:
    """The published speed-ups with the model's prediction beside each."""
    rows = pd.read_csv(DATA_DIR / "speculative_measurements.csv")
    predicted = []
    for _, r in rows.iterrows():
        spec = Speculative(r.method, int(r.draft_tokens), dataset_alpha(r.method, r.dataset))
        dep = Deployment(r.model, r.gpu, r.precision, r.kv_precision, int(r.tp), speculative=spec)
        predicted.append(float(speedup(dep, float(r.batch), float(r.context_tokens))))
    rows["predicted"] = predicted
    return rows


def test_published_speedups_are_reproduced_on_the_rows_that_set_nothing() -> None:
    rows = _published_rows()
    assert set(rows["gpu"]) >= {"h100-sxm", "rtx-3090"} and set(rows["engine"]) >= {"sglang", "vllm"}
    judged = rows[rows.role == "judge"]
    assert len(judged) >= 30
    assert float(np.median(np.abs(judged.predicted / judged.speedup - 1))) < 0.15


_GROUPS = sorted({(r.engine, r.gpu, r.method) for r in pd.read_csv(DATA_DIR / "speculative_measurements.csv")
                  .itertuples()})
_SGLANG_EAGLE_MISS = ("documented miss (benchmarks/README.md, #23): SGLang v0.4.4's EAGLE-1 gain falls under "
                      "1.1x at batch 16, the model's only at 48")


@pytest.mark.parametrize("engine, gpu, method", [
    pytest.param(*g, marks=pytest.mark.xfail(strict=True, reason=_SGLANG_EAGLE_MISS))
    if (g[0], g[2]) == ("sglang", "eagle") else g for g in _GROUPS])
def test_the_gain_falls_under_1_1x_within_one_batch_step_of_the_measured_batch(engine: str, gpu: str,
                                                                             method: str) -> None:
    rows = _published_rows()
    g = rows[(rows.engine == engine) & (rows.gpu == gpu) & (rows.method == method)].sort_values("batch")
    firsts = [np.flatnonzero(g[c].to_numpy() < 1.1) for c in ("speedup", "predicted")]
    if firsts[0].size == 0:
        assert firsts[1].size == 0, (engine, gpu, method)
    else:
        assert firsts[1].size and abs(int(firsts[0][0]) - int(firsts[1][0])) <= 1, (engine, gpu, method)


def test_the_simulator_sees_the_gain_at_low_load_and_the_slowdown_at_high_load() -> None:
    plain = _dep()
    spec = _dep(Speculative("eagle3", 3, dataset_alpha("eagle3", "mt-bench")))
    tpot = {}
    for concurrency in (8, 320):
        for name, dep in (("plain", plain), ("spec", spec)):
            res = simulate(fixed_requests(1000, 400, 4 * concurrency), dep, concurrency=concurrency, seed=0)
            tpot[name, concurrency] = res.summary()["tpot_ms"]["p50"]
    low = tpot["plain", 8] / tpot["spec", 8]
    assert low == pytest.approx(float(speedup(spec, 8.0, 1200.0)), rel=0.1)
    assert tpot["spec", 320] > tpot["plain", 320]


def test_simulate_on_the_command_line_runs_with_the_lever(capsys) -> None:
    runs = {}
    for method in ("none", "ngram"):
        code = main(["simulate", "--isl", "1000", "--osl", "300", "--concurrency", "4", "--requests", "40",
                     "--model", "llama-3.1-8b", "--precision", "bf16", "--speculative", method, "--json"])
        out, err = capsys.readouterr()
        assert code == 0, err
        runs[method] = json.loads(out)
    assert runs["none"]["settings"]["speculative"] is None
    assert runs["ngram"]["settings"]["speculative"]["method"] == "ngram"
    assert runs["ngram"]["tpot_ms"]["p50"] < runs["none"]["tpot_ms"]["p50"]


def test_the_draft_takes_memory_so_fewer_sequences_fit() -> None:
    context = 4096.0
    base = Deployment("llama-3.1-70b", "h100-sxm", "fp8", None, 2)
    w = Workload.fixed(800, 2500, rate_rps=1.0)
    eagle = speculative_deployment(base, w, "eagle3")
    draft = speculative_deployment(base, w, "draft")
    assert draft.speculative.draft_model == "llama-3.1-8b"
    fits = [float(d.max_batch_kv(context)) for d in (base, eagle, draft)]
    assert fits[0] > fits[1] > fits[2] > 0
    # the 8B draft's FP8 weights (~8 GB) sit beside the target's, split over the replica's 2 GPUs
    extra_gib = (draft.weight_bytes_per_gpu - base.weight_bytes_per_gpu) / 2**30
    assert 3.0 < extra_gib < 5.0
    # a draft model keeps its own KV per sequence: the target's pool shrinks by more than the weights explain
    assert draft.kv_pool_bytes_per_gpu() < base.kv_pool_bytes_per_gpu() - extra_gib * 2**30 * 0.9


def _plan(capsys, *argv: str) -> tuple[int, dict | None, str]:
    # the lever's analytic effect on the estimate's fleet (the replayed answer is tests/unit/test_sizing.py's)
    code = main(["plan", *argv, "--method", "analytic"])
    out, err = capsys.readouterr()
    return code, (json.loads(out) if code == 0 else None), err


def test_plan_on_a_real_chat_log_says_what_the_lever_buys_and_where_it_stops(capsys, traces) -> None:
    log = str(traces / "azure_llm_2023" / "AzureLLMInferenceTrace_conv.csv")
    code, off, _ = _plan(capsys, log, "--json")
    code, on, err = _plan(capsys, log, "--speculative", "eagle3", "--json")
    assert code == 0, err
    assert off["speculative"] is None
    s = on["speculative"]
    assert {"method", "draft_tokens", "acceptance_length", "tpot_speedup", "throughput_speedup"} <= set(s)
    assert s["method"] == "eagle3" and s["draft_tokens"] == 3
    assert s["provenance"]["acceptance_length"] == "assumed" and "mt-bench" in s["acceptance_source"]
    # a chat log (98 % of its output tokens in the chat corner) is assumed to accept as MT-bench does
    assert s["acceptance_rate"] == pytest.approx(dataset_alpha("eagle3", "mt-bench"), abs=0.01)
    # chat at this log's rate: a real TPOT gain, and the plan itself decodes faster
    assert s["tpot_speedup"] > 1.3
    assert s["throughput_speedup"] == pytest.approx(s["gpus"]["without"] / s["gpus"]["with"])
    assert on["tpot_ms"]["p50"] < off["tpot_ms"]["p50"]
    # and the load where it stops paying lies above today's, on the same fleet
    stop = s["stops_paying_above"]
    assert stop["rate_rps"] > on["rate_rps"] and stop["traffic_multiplier"] > 1
    assert "stops paying above" in s["summary"]
    # a measured acceptance replaces the assumption, and lower acceptance buys less
    code, low, _ = _plan(capsys, log, "--speculative", "eagle3", "--acceptance-length", "1.3", "--json")
    assert low["speculative"]["acceptance_source"] == "set by user"
    assert low["speculative"]["tpot_speedup"] < s["tpot_speedup"]


def test_the_effect_beyond_the_stop_is_a_slowdown_on_the_same_fleet(traces) -> None:
    w = Workload.from_frame(load_log(traces / "azure_llm_2023" / "AzureLLMInferenceTrace_conv.csv").frame)
    dep = speculative_deployment(Deployment("llama-3.1-70b", "h100-sxm", "fp8", None, 2), w, "eagle3")
    effect = speculative_effect(w, dep)
    curve = effect.curve
    stop = effect.stops_paying["rate_rps"]
    assert stop is not None and stop > w.rate_rps
    below = curve[curve.rate_rps < 0.95 * stop]
    assert (below.tpot_p50_ms_with < below.tpot_p50_ms_without).all()
    # above it, wherever the fleet without the lever still keeps up, the lever is slower or saturated
    above = curve[(curve.rate_rps > 1.05 * stop) & curve.tpot_p50_ms_without.notna()]
    assert len(above) and not (above.tpot_p50_ms_with < above.tpot_p50_ms_without).any()


@pytest.mark.parametrize("argv, says", [
    (["--speculative", "ngram", "--draft-tokens", "3", "--acceptance-length", "9"], "between 1 and 4"),
    (["--speculative", "mtp"], "no multi-token-prediction layers"),
    (["--draft-tokens", "3"], "need --speculative"),
    (["--model", "deepseek-v3", "--gpu", "h200", "--tp", "8", "--speculative", "draft"], "no draft model"),
])
def test_impossible_speculative_options_end_with_one_line(capsys, argv: list[str], says: str) -> None:
    code, _, err = _plan(capsys, "--isl", "800", "--osl", "2500", "--rate", "2", *argv)
    assert code == 2 and says in err and len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("engine", ["vllm", "sglang", "trtllm"])
@pytest.mark.parametrize("model, gpu, tp, method", [
    ("llama-3.3-70b", "h100-sxm", 2, "eagle3"),
    ("llama-3.1-70b", "h100-sxm", 2, "draft"),
    ("llama-3.1-70b", "h100-sxm", 2, "ngram"),
    ("deepseek-v3", "h200", 8, "mtp"),
])
def test_every_engine_gets_its_own_flags_for_the_lever(engine: str, model: str, gpu: str, tp: int, method: str) -> None:
    w = Workload.fixed(800, 2500, rate_rps=2.0)
    dep = speculative_deployment(Deployment(model, gpu, "fp8", None, tp), w, method)
    bundle = deployment_bundle(w, dep, engine=engine, ttft_slo_ms=1000, tpot_slo_ms=50, max_context_tokens=3300,
                               context_source="assumed", layout="colocated")
    config = bundle.configs["colocated"][0]
    assert check_args(engine, config.argv()) == []   # every flag and value as the engine's CLI reads them
    if engine == "vllm":
        flag = dict(zip(config.argv(), config.argv()[1:]))["--speculative-config"]
        doc = json.loads(flag)
        assert doc["method"] == {"eagle3": "eagle3", "draft": "draft_model", "ngram": "ngram", "mtp": "deepseek_mtp"}[method]
        assert doc["num_speculative_tokens"] == dep.speculative.draft_tokens
    elif engine == "sglang":
        argv = config.argv()
        algo = argv[argv.index("--speculative-algorithm") + 1]
        assert algo == {"eagle3": "EAGLE3", "draft": "STANDALONE", "ngram": "NGRAM", "mtp": "NEXTN"}[method]
        assert argv[argv.index("--speculative-num-draft-tokens") + 1] == str(dep.speculative.draft_tokens + 1)
    else:
        options = yaml.safe_load(config.trtllm_yaml())
        assert check_yaml_keys(engine, options) == []
        spec = options["speculative_config"]
        assert spec["decoding_type"] == {"eagle3": "Eagle3", "draft": "Draft_Target", "ngram": "NGram", "mtp": "MTP"}[method]
