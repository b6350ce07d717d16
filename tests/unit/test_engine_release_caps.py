"""The serving engine, the rest of issue 36: a power-capped card's compute, the engine's software release, the
engine's own sequence cap, and the engine named wherever a replay's settings or a design's pools are written."""
from __future__ import annotations

import json

import pytest

from shapeviz.cli import main
from shapeviz.cli.simulate import simulate_text
from shapeviz.fleet.design import design_fleet
from shapeviz.fleet.pools import Fleet, Pool, fleet_from_dict, pool_deployment
from shapeviz.physics.engines import engine_efficiency
from shapeviz.physics.steps import Deployment
from shapeviz.serving.products import resolve_classes
from shapeviz.workload import synth
from tests.mlperf import MLPERF, bench_mlperf


def test_a_power_capped_card_runs_compute_at_its_power_share_of_the_full_power_part() -> None:
    """H100 NVL (400 W) and H100 SXM (700 W) are the same GH100: under matmul-bound work the NVL sustains at most the
    SXM's achievable rate × 400/700, not its datasheet boost peak; H200 NVL (600 W) barely moves (its datasheet peak
    already sits at its power share of the H200's)."""
    rate = {g: Deployment("llama-2-70b", g, "fp8", None, 1 if g != "h100-sxm" else 2, engine="trtllm").matmul_rate("fp8")
            for g in ("h100-sxm", "h100-nvl", "h200", "h200-nvl")}
    assert rate["h100-nvl"] == pytest.approx(rate["h100-sxm"] * 400 / 700, rel=1e-9)
    assert 0.84 < rate["h200-nvl"] / rate["h200"] <= 600 / 700 + 1e-9
    nvl = Deployment("llama-2-70b", "h200-nvl", "fp8", None, 1, engine="trtllm")
    datasheet = 1670.5e12 * nvl.eff.mamf_fraction_default * nvl.eff.mfu
    assert 0.99 * datasheet < rate["h200-nvl"] <= datasheet


def test_the_engines_older_release_predicts_amds_older_mlperf_round() -> None:
    """AMD's MLPerf v4.1 8× MI300X under vLLM ran older software than its v5.0 8× MI325X: each round has its own
    CDNA3 × vLLM row, the newest is what a plan uses, and the benchmark predicts the v4.1 Offline row with the v4.1
    release (with the v5.0 one it read 1.44× the published)."""
    newest = engine_efficiency("mi300x", "vllm", "fp8")
    older = engine_efficiency("mi300x", "vllm", "fp8", "v4.1")
    assert newest is not None and older is not None
    assert newest.release == "v5.0" and older.release == "v4.1" and older.fitted_on == "v41-mi300x-offline"
    assert engine_efficiency("mi300x", "vllm", "fp8", "v4.0") == newest   # no row of its own: the newest
    assert Deployment("llama-2-70b", "mi300x", "fp8", None, 1).engine_efficiency == newest
    row = MLPERF.loc["v41-mi300x-offline"]
    predicted = bench_mlperf().predict(row)
    assert predicted == pytest.approx(float(row["tokens_per_s"]), rel=0.10), predicted


def _simulate(capsys, engine: str, gpu: str) -> dict:
    assert main(["simulate", "--isl", "120", "--osl", "60", "--all-at-once", "--requests", "2500", "--model",
                 "llama-3.1-8b", "--gpu", gpu, "--precision", "fp8", "--serving-engine", engine, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_vllm_runs_at_its_own_sequence_cap_and_simulate_json_names_the_engine(capsys) -> None:
    """vLLM's default max_num_seqs (1,024 on a GPU of 70 GiB or more, 256 on smaller ones and A100s) bounds the
    replay's running batch: offered 2,500 short requests at once on one H200, vLLM decodes at most 1,024 at a time
    (a shorter step, a longer queue) where TensorRT-LLM's 2,048 admits them nearly all; simulate --json says which
    engine ran and where its cap comes from."""
    docs = {engine: _simulate(capsys, engine, "h200") for engine in ("vllm", "trtllm")}
    vllm, trt = docs["vllm"]["settings"], docs["trtllm"]["settings"]
    assert (vllm["engine"], vllm["max_num_seqs"], vllm["engine_max_num_seqs"]) == ("vllm", 1024, 1024)
    assert "max_num_seqs" in vllm["engine_max_num_seqs_source"] and "vLLM on" not in vllm["engine_efficiency"]
    assert (trt["engine"], trt["max_num_seqs"]) == ("trtllm", 2048)
    assert docs["vllm"]["tpot_ms"]["p50"] < 0.8 * docs["trtllm"]["tpot_ms"]["p50"], (docs["vllm"]["tpot_ms"],
                                                                                     docs["trtllm"]["tpot_ms"])
    assert docs["vllm"]["ttft_ms"]["p90"] > docs["trtllm"]["ttft_ms"]["p90"]
    assert ("serving engine: vLLM (set by user), at most 1,024 running sequences per replica (the engine's default)"
            in simulate_text(docs["vllm"]))
    small = _simulate(capsys, "vllm", "l40s")["settings"]
    assert (small["max_num_seqs"], small["engine_max_num_seqs"]) == (256, 256)


def test_design_pools_carry_the_engine_they_were_sized_with() -> None:
    """A design for TensorRT-LLM names it on every pool it writes, and the fleet file replays with it; a pool
    without an engine runs vLLM (what config writes) and says so; an unknown engine is refused by name."""
    frame = synth.generate(600, seed=0, with_hashes=False)
    classes = resolve_classes(frame, {"*": (2000.0, 100.0)})
    doc = design_fleet(frame, classes, gpus=["h200"], prices={"h200": 3.5}, model="llama-3.1-8b", precision="fp8",
                       families=("shared",), top=1, search_requests=300, serving_engine="trtllm")
    for entry in [doc["baseline"], *doc["designs"]]:
        for raw in entry["fleet"]["pools"]:
            assert raw["engine"] == "trtllm", raw
            assert pool_deployment(fleet_from_dict(entry["fleet"]).pools[0], "llama-3.1-8b").engine == "trtllm"
    plain = Fleet((Pool("p", gpu="h200"),), "llama-3.1-8b").to_dict()
    assert plain["pools"][0]["engine"] == "vllm"
    with pytest.raises(ValueError, match=r"pools\[0\]\.engine: serving engine 'tgi' is not known"):
        fleet_from_dict({"pools": [{"gpu": "h200", "engine": "tgi"}]})
