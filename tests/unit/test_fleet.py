"""Fleets per product: SLO classes, per-product outcomes, the deadline scheduler, pools on their own GPUs, the designer."""
from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from shapeviz.cli import main
from shapeviz.fleet import design as design_mod
from shapeviz.fleet.design import design_fleet, mix_assignment
from shapeviz.fleet.pools import (
    Fleet,
    Pool,
    Side,
    fleet_from_dict,
    fleet_gpus,
    fleet_requests,
    simulate_fleet,
)
from shapeviz.ingest import combine, load_log
from shapeviz.physics.steps import Deployment
from shapeviz.serving.products import (
    SloClass,
    default_classes,
    parse_slo,
    product_outcomes,
    resolve_classes,
)
from shapeviz.serving.simulator import Requests, simulate
from shapeviz.workload import synth
from tests.unit.logs import squeezed_brief

AZURE_CODE = "azure_llm_2023/AzureLLMInferenceTrace_code.csv"
AZURE_CONV = "azure_llm_2023/AzureLLMInferenceTrace_conv.csv"


@pytest.fixture(scope="module")
def brief() -> pd.DataFrame:
    return squeezed_brief(1200)


@pytest.fixture(scope="module")
def azure(traces: Path) -> pd.DataFrame:
    """The Azure 2023 code and conversation traces as two products of one log (real timestamps)."""
    logs = [load_log(traces / AZURE_CODE), load_log(traces / AZURE_CONV)]
    return combine(logs).frame


# --- SLO classes -------------------------------------------------------------------------------------------
def test_each_product_gets_the_class_of_its_own_corner(brief: pd.DataFrame) -> None:
    classes = default_classes(brief)
    assert classes["rag-search"].corner == "rag"
    assert (classes["rag-search"].ttft_ms, classes["rag-search"].tpot_ms) == (1200.0, 60.0)
    # the coding agent's answers are long: the reasoning corner, whose range is the chat range (assumed, sourced)
    assert classes["coding-agent"].corner == "reasoning"
    assert classes["coding-agent"].ttft_ms < classes["rag-search"].ttft_ms


def test_real_traces_two_products_two_classes(azure: pd.DataFrame) -> None:
    classes = default_classes(azure)
    assert len(classes) == 2
    corners = {c.corner for c in classes.values()}
    assert len(corners) == 2, corners   # code and conversation sit in different corners of the plane


def test_slo_flag_overrides_one_product_and_rejects_unknown_ones(brief: pd.DataFrame) -> None:
    classes = resolve_classes(brief, parse_slo(["rag-search=900:40"]))
    assert (classes["rag-search"].ttft_ms, classes["rag-search"].tpot_ms) == (900.0, 40.0)
    assert classes["rag-search"].source.startswith("set by user")
    assert classes["coding-agent"].source.startswith("default")
    with pytest.raises(ValueError, match="not in the log"):
        resolve_classes(brief, parse_slo(["ghost=1:1"]))
    for bad in ("rag-search=900", "rag-search:900:40", "=1:2", "x=a:b", "x=0:5"):
        with pytest.raises(ValueError, match="PRODUCT=TTFT_MS:TPOT_MS"):
            parse_slo([bad])


def test_product_outcomes_judge_each_product_against_its_own_class() -> None:
    r = pd.DataFrame({"arrival_s": np.arange(20.0), "product": ["a"] * 10 + ["b"] * 10,
                      "ttft_ms": [100.0] * 10 + [900.0] * 10, "tpot_ms": [20.0] * 20, "e2e_ms": [1000.0] * 20})
    classes = {"a": SloClass("a", 200, 30), "b": SloClass("b", 1000, 30)}
    out = product_outcomes(r, classes)
    assert out["a"]["meets"] and out["b"]["meets"]
    assert out["a"]["attainment"] == 1.0
    # the same latencies under one tight class: b misses, a still meets
    tight = {"a": SloClass("a", 200, 30), "b": SloClass("b", 200, 30)}
    out = product_outcomes(r, tight)
    assert out["a"]["meets"] and not out["b"]["meets"]
    assert out["b"]["attainment"] == 0.0 and out["b"]["goodput_rps"] == 0.0


def test_simulate_json_has_products_on_real_traces(azure: pd.DataFrame, traces: Path, capsys) -> None:
    code = main(["simulate", str(traces / AZURE_CODE), str(traces / AZURE_CONV), "--requests", "400",
                 "--replicas", "2", "--slo", "AzureLLMInferenceTrace_code=300:40", "--json"])
    assert code == 0
    doc = json.loads(capsys.readouterr().out)
    products = doc["products"]
    assert set(products) == {"AzureLLMInferenceTrace_code", "AzureLLMInferenceTrace_conv"}
    for o in products.values():
        assert set(o["ttft_ms"]) == {"mean", "p50", "p90", "p99"}
        assert o["meets"] == (o["ttft_p90_ms"] <= o["slo"]["ttft_ms"]
                              and (o["tpot_p90_ms"] is None or o["tpot_p90_ms"] <= o["slo"]["tpot_ms"]))
        assert 0.0 <= o["attainment"] <= 1.0
    assert products["AzureLLMInferenceTrace_code"]["slo"]["ttft_ms"] == 300.0
    assert sum(o["requests"] for o in products.values()) == doc["requests"]


# --- the deadline scheduler ------------------------------------------------------------------------------
def test_deadline_scheduler_serves_the_tight_class_first() -> None:
    """Long RAG prompts and short autocomplete prompts queueing on one replica: the earliest TTFT deadline first
    halves autocomplete's TTFT p90 and costs RAG almost nothing (it cannot pre-empt a prompt already in prefill)."""
    rng = np.random.default_rng(0)
    n = 120
    is_auto = rng.random(n) < 0.5
    inp = np.where(is_auto, 1500, 12000).astype(np.int64)
    out = np.where(is_auto, 16, 150).astype(np.int64)
    arrival = np.sort(rng.uniform(0, 60, n))
    product = np.where(is_auto, "auto", "rag").astype(object)
    target = np.where(is_auto, 200.0, 5000.0)
    req = Requests(inp, out, np.zeros(n, dtype=np.int64), arrival, product, ttft_target_ms=target)
    dep = Deployment("llama-3.1-70b", "h100-sxm", "fp8", None, 4)
    classes = {"auto": SloClass("auto", 200, 50), "rag": SloClass("rag", 5000, 60)}
    res = {s: product_outcomes(simulate(req, dep, arrivals="trace", scheduler=s).requests, classes)
           for s in ("fcfs", "deadline")}
    assert res["deadline"]["auto"]["ttft_p90_ms"] < 0.5 * res["fcfs"]["auto"]["ttft_p90_ms"]
    assert res["deadline"]["rag"]["ttft_p90_ms"] < 1.1 * res["fcfs"]["rag"]["ttft_p90_ms"]


# --- pools ---------------------------------------------------------------------------------------------
def test_fleet_file_round_trips_and_names_bad_fields(tmp_path: Path) -> None:
    fleet = Fleet((Pool("rag", ("rag-search",), "b200", 3, 4),
                   Pool("rest", ("*",), prefill=Side("h100-sxm", 2, 2), decode=Side("h200", 3, 1), kv_link_gbps=50.0)),
                  "llama-3.1-70b", {"rag-search": (1200.0, 60.0)})
    doc = json.loads(json.dumps(fleet.to_dict()))
    assert fleet_from_dict(doc) == fleet
    assert fleet_gpus(fleet) == {"b200": 12, "h100-sxm": 4, "h200": 3}
    bad = {"pools": [{"name": "x", "gpus": "h100"}]}
    with pytest.raises(ValueError, match="unknown field"):
        fleet_from_dict(bad)
    with pytest.raises(ValueError, match="both a prefill and a decode"):
        fleet_from_dict({"pools": [{"prefill": {"gpu": "h100", "replicas": 1}}]})


def test_a_product_no_pool_serves_is_an_error(brief: pd.DataFrame) -> None:
    req = fleet_requests(brief)
    classes = default_classes(brief)
    with pytest.raises(ValueError, match="no pool serves product"):
        simulate_fleet(req, Fleet((Pool("rag", ("rag-search",)),)), classes)


def test_split_pool_decode_gpu_sets_tpot_and_prefill_gpu_sets_ttft(brief: pd.DataFrame) -> None:
    req = fleet_requests(brief)
    classes = default_classes(brief)

    def run(pre: str, dec: str) -> dict:
        fleet = Fleet((Pool("pd", prefill=Side(pre, 3, None), decode=Side(dec, 2, None)),))
        return simulate_fleet(req, fleet, classes).products["coding-agent"]

    h100_dec, b200_dec, b200_pre = run("h100-sxm", "h100-sxm"), run("h100-sxm", "b200"), run("b200", "h100-sxm")
    # the decode side's GPU moves TPOT, not TTFT (the first token comes from the prefill side)
    assert b200_dec["tpot_p90_ms"] < 0.8 * h100_dec["tpot_p90_ms"]
    assert b200_dec["ttft_p90_ms"] == pytest.approx(h100_dec["ttft_p90_ms"], rel=1e-9)
    # the prefill side's GPU moves TTFT
    assert b200_pre["ttft_p90_ms"] < h100_dec["ttft_p90_ms"]


def test_reseeded_requests_keep_each_products_count_and_rate(brief: pd.DataFrame) -> None:
    a, b = fleet_requests(brief, seed=0), fleet_requests(brief, seed=1)
    assert len(a) == len(b)
    assert pd.Series(a.product).value_counts().to_dict() == pd.Series(b.product).value_counts().to_dict()
    assert not np.array_equal(a.arrival_s, b.arrival_s)
    assert np.all(np.diff(b.arrival_s) >= 0)
    assert sorted(a.input_tokens.tolist()) == sorted(b.input_tokens.tolist())


# --- the designer --------------------------------------------------------------------------------------
def test_design_reports_verified_designs_best_first(brief: pd.DataFrame) -> None:
    # RAG at 3 s: this log's p90 prompt (about 20k tokens) makes the default 1.2 s out of reach on these GPUs
    classes = resolve_classes(brief, {"rag-search": (3000.0, 60.0)})
    prices = {"h100-sxm": 2.79, "b200": 6.03}
    doc = design_fleet(brief, classes, gpus=["h100-sxm", "b200"], prices=prices, model="llama-3.1-70b",
                       search_requests=300, families=("shared", "per_product"), top=3)
    designs = doc["designs"]
    assert designs and doc["baseline"] is not None
    costs = [d["cost_per_hour"] for d in designs if d["meets"]]
    assert costs == sorted(costs)
    for d in designs + [doc["baseline"]]:
        assert set(d) >= {"fleet", "cost_per_hour", "gpus", "products"}
        assert d["cost_per_hour"] == pytest.approx(sum(n * prices[g] for g, n in d["gpus"].items()))
        for o in d["products"].values():
            assert set(o) >= {"ttft_p90_ms", "tpot_p90_ms", "meets"}
        # judged as the headline is: every product's p90s on the whole window (the re-seeded replay is a second look)
        assert d["meets"] == all(o["meets"] for o in d["products"].values())
    assert designs[0]["meets"]
    assert doc["baseline"]["family"] == "shared_fcfs"
    assert doc["sized_on"]["whole_log"] and doc["sized_on"]["requests"] == len(brief)   # ten minutes: the whole log
    # the fleet object is what simulate --fleet reads: replaying it on the log gives the same per-product verdicts
    best = designs[0]
    fleet = fleet_from_dict(best["fleet"])
    again = simulate_fleet(fleet_requests(brief), fleet, classes)
    assert again.meets == best["meets"]
    for p, o in again.products.items():   # the same replay: the replicas' prefix caches on both sides
        assert o["ttft_p90_ms"] == pytest.approx(best["products"][p]["ttft_p90_ms"], rel=1e-9), p
    assert {p: o["meets"] for p, o in again.products.items()} == {p: o["meets"] for p, o in best["products"].items()}


def test_mix_milp_puts_each_prompt_size_on_its_cheapest_gpu(brief: pd.DataFrame, monkeypatch) -> None:
    """Short prompts are cheapest on L40S, long ones only fit B200: the integer program mixes both."""
    classes = default_classes(brief)
    s = design_mod._Search(fleet_requests(brief), classes, {"l40s": 1.0, "b200": 6.0}, "llama-3.1-70b", "fp8",
                           lambda *a, **k: None)

    def fake_options(req, gpus, check="both", rate_scale=1.0, name="", best_effort=False):
        long = float(np.median(req.input_tokens)) >= 2048
        if long:
            return [(120.0, "b200", 1, 20)]   # one whole B200 replica per long bucket: no room to spare
        return [(20.0, "l40s", 1, 20), (60.0, "b200", 1, 10)]   # 20 × $1 beats 10 × $6 for short prompts

    monkeypatch.setattr(s, "options", fake_options)
    out = mix_assignment(s, ["l40s", "b200"])
    by_gpu = {g: ranges for g, _, ranges, _ in out}
    assert set(by_gpu) == {"l40s", "b200"}
    assert all(hi <= 2048 for _, hi in by_gpu["l40s"])
    assert all(lo >= 2048 for lo, _ in by_gpu["b200"])


def test_design_cli_json_contract(tmp_path: Path, brief: pd.DataFrame, capsys) -> None:
    path = synth.write_log(brief, tmp_path / "brief.csv")
    code = main(["design", str(path), "--gpus", "h100,b200", "--search-requests", "200", "--top", "2",
                 "--gpu-hour-usd", "h100=2.5", "--slo-window", "5m", "--json"])
    assert code == 0
    doc = json.loads(capsys.readouterr().out)
    # --slo-window as plan means it: the busiest five minutes of this ten-minute log are the window judged
    on = doc["sized_on"]
    assert on["slo_window_s"] == 300 and not on["whole_log"] and on["end_s"] - on["start_s"] == pytest.approx(300)
    assert doc["search"]["judged_requests"] == on["requests"] < len(brief)
    assert doc["prices_usd_per_gpu_hour"]["h100-sxm"] == 2.5
    assert doc["price_sources"]["h100-sxm"].startswith("set by user")
    assert doc["price_sources"]["b200"].startswith("on-demand")
    fleet_file = tmp_path / "fleet.json"
    fleet_file.write_text(json.dumps(doc["designs"][0]["fleet"]))
    code = main(["simulate", str(path), "--fleet", str(fleet_file), "--json"])
    assert code == 0
    sim = json.loads(capsys.readouterr().out)
    assert set(sim["products"]) == set(doc["designs"][0]["products"])
    assert sim["gpus"] == doc["designs"][0]["gpus"]


def test_config_fleet_writes_one_script_per_pool_with_the_fleets_replicas(tmp_path: Path, brief: pd.DataFrame,
                                                                          capsys) -> None:
    path = synth.write_log(brief, tmp_path / "brief.csv")
    fleet = {"model": "llama-3.1-70b", "pools": [
        {"name": "RAG pool", "products": ["rag-search"], "gpu": "b200", "tp": 4, "replicas": 3},
        {"name": "agent", "products": ["*"], "gpu": "h100-sxm", "tp": 2, "replicas": 2}]}
    fleet_file = tmp_path / "fleet.json"
    fleet_file.write_text(json.dumps(fleet))
    assert main(["config", str(path), "--fleet", str(fleet_file), "--k8s", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    pools = {p["name"]: p for p in doc["pools"]}
    assert set(pools) == {"RAG pool", "agent"}
    assert pools["RAG pool"]["configs"][0]["replicas"]["value"] == 3
    assert pools["agent"]["configs"][0]["replicas"]["value"] == 2
    assert "llm-rag-pool" in pools["RAG pool"]["manifest"]   # the pool's name as a DNS label


def test_config_fleet_starts_each_pool_on_the_engine_it_was_sized_on(tmp_path: Path, brief: pd.DataFrame,
                                                                       capsys) -> None:
    """A fleet whose pools run different engines (design --serving-engine, or a hand-edited file) gets each pool's
    launch script for its own engine: the replica count was sized on that engine's efficiency and sequence cap.
    Naming another engine with --engine is refused by the pool's name instead of writing a script the count does
    not hold on."""
    path = synth.write_log(brief, tmp_path / "brief.csv")
    fleet = {"model": "llama-3.1-70b", "pools": [
        {"name": "RAG pool", "products": ["rag-search"], "gpu": "h100-sxm", "tp": 4, "replicas": 3,
         "engine": "sglang"},
        {"name": "agent", "products": ["*"], "gpu": "h100-sxm", "tp": 2, "replicas": 2}]}
    fleet_file = tmp_path / "fleet.json"
    fleet_file.write_text(json.dumps(fleet))
    assert main(["config", str(path), "--fleet", str(fleet_file), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    pools = {p["name"]: p for p in doc["pools"]}
    assert pools["RAG pool"]["engine"] == "sglang" and pools["agent"]["engine"] == "vllm"
    assert doc["engines"] == ["sglang", "vllm"] and doc["engine"] is None
    assert "sglang.launch_server" in pools["RAG pool"]["configs"][0]["shell"]
    assert "vllm serve" in pools["agent"]["configs"][0]["shell"]
    assert main(["config", str(path), "--fleet", str(fleet_file)]) == 0
    text = capsys.readouterr().out
    assert "# ######## pool RAG pool: SGLang ########" in text and "# ######## pool agent: vLLM ########" in text
    assert main(["config", str(path), "--fleet", str(fleet_file), "--engine", "vllm"]) == 2
    err = capsys.readouterr().err
    assert "'RAG pool'" in err and "SGLang" in err and "--serving-engine vllm" in err


def test_config_fleet_writes_both_sides_of_a_split_pool_on_their_own_gpus(tmp_path: Path, brief: pd.DataFrame,
                                                                          capsys) -> None:
    """A prefill/decode split on two GPU types deploys as two configs, each side on its GPU and at the fleet's size,
    whether or not the analytic plan would have split it (the brief log's best design is such a split)."""
    path = synth.write_log(brief, tmp_path / "brief.csv")
    fleet = {"model": "llama-3.1-70b", "pools": [
        {"name": "pd", "products": ["*"], "prefill": {"gpu": "b200", "tp": 2, "replicas": 3},
         "decode": {"gpu": "h100-sxm", "tp": 2, "replicas": 5}}]}
    fleet_file = tmp_path / "fleet.json"
    fleet_file.write_text(json.dumps(fleet))
    assert main(["config", str(path), "--fleet", str(fleet_file), "--k8s", "--json"]) == 0
    pool = json.loads(capsys.readouterr().out)["pools"][0]
    roles = {c["role"]: c for c in pool["configs"]}
    assert set(roles) == {"prefill", "decode"}, pool["notes"]
    assert roles["prefill"]["replicas"]["value"] == 3 and roles["decode"]["replicas"]["value"] == 5
    assert "B200" in json.dumps(roles["prefill"]) and "H100" in json.dumps(roles["decode"])
    assert pool["manifest"]


def test_the_report_bundle_carries_the_chosen_design(brief: pd.DataFrame) -> None:
    import io

    from shapeviz.outputs.report.bundle import report_files

    log = load_log(synth.write_log(brief, io.BytesIO()).getvalue(), name="brief.csv")
    fleet = Fleet((Pool("all", ("*",), "h100-sxm", 2, 2),))
    design = {"designs": [{"family": "shared_fcfs", "fleet": fleet.to_dict(), "cost_per_hour": 11.16}],
              "baseline": None}
    bundle = report_files(log, png=False, fleet_design=design)
    assert json.loads(bundle.files["fleet.json"]) == fleet.to_dict()
    assert json.loads(bundle.files["fleet_design.json"])["designs"][0]["family"] == "shared_fcfs"
    assert json.loads(bundle.files["fleet_configs.json"])["pools"][0]["configs"][0]["replicas"]["value"] == 2


def test_a_design_is_settled_on_the_whole_window_from_either_side(brief: pd.DataFrame) -> None:
    """Too small, it grows until every class is met; too big, it is trimmed; both end at the same fleet, whose one
    replica fewer misses (the proof the headline gives too)."""
    classes = resolve_classes(brief, {"rag-search": (3000.0, 60.0)})
    window = replace(fleet_requests(brief), blocks=None)   # without prefix caches: the simulator's quicker loop
    small = Fleet((Pool("all", ("*",), "b200", 1, 4),), "llama-3.1-70b")
    assert not simulate_fleet(window, small, classes).meets
    up = design_mod.settle(small, window, classes)
    k = up.fleet.pools[0].replicas
    assert up.grown > 0 and up.trial.meets and k > 1
    down = design_mod.settle(Fleet((replace(small.pools[0], replicas=k + 3),), "llama-3.1-70b"), window, classes)
    assert down.trimmed == 3 and down.fleet == up.fleet and down.trial.meets
    for settled in (up, down):
        assert settled.one_fewer is not None and settled.one_fewer.replicas == k - 1
        assert not settled.one_fewer.meets
