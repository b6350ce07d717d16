"""Fleet design measured as the headline is (issue 27): the same window, the same verdict, the same fleet.

On the Azure 2023 code trace (an hour, 8,819 requests, bursts inside the minute), design's one shared pool of a
deployment is the fleet ``fleet_answer`` (plan's and the Capacity headline's one sizing function) gives that
deployment, with the same proof that one replica fewer misses; and the fleet a design lists as meeting meets when
``simulate --fleet`` replays the log on it.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from shapeviz.cli import main
from shapeviz.cli.plan import plan_text
from shapeviz.fleet.design import design_fleet
from shapeviz.fleet.pools import Fleet, Pool, fleet_from_dict, fleet_requests, pool_deployment, simulate_fleet
from shapeviz.fleet.sizing import fleet_answer, slo_window
from shapeviz.ingest import load_log
from shapeviz.outputs.report.tables import plan_table
from shapeviz.serving.planner import Workload
from shapeviz.serving.products import SloClass, beyond_context, resolve_classes
from shapeviz.serving.simulator import simulate
from shapeviz.workload import synth

AZURE_CODE = "azure_llm_2023/AzureLLMInferenceTrace_code.csv"
MODEL = "llama-3.1-70b"
CLASS = {"*": (1000.0, 50.0)}   # the pair: TTFT p90 1 s, TPOT p90 50 ms


@pytest.fixture(scope="module")
def code(traces: Path) -> pd.DataFrame:
    return load_log(traces / AZURE_CODE).frame


@pytest.fixture(scope="module")
def designed(code: pd.DataFrame) -> tuple[dict[str, SloClass], dict[str, Any]]:
    """One shared pool on H100 FP8 (FCFS and deadline order), designed for the issue's class."""
    classes = resolve_classes(code, CLASS)
    doc = design_fleet(code, classes, gpus=["h100-sxm"], prices={"h100-sxm": 2.79}, model=MODEL, precision="fp8",
                       families=("shared",), top=2)
    return classes, doc


def test_designs_shared_pool_of_a_deployment_is_the_headlines_fleet(code: pd.DataFrame, designed) -> None:
    classes, doc = designed
    assert doc["sized_on"]["whole_log"] and doc["sized_on"]["requests"] == len(code) == 8_819
    pool = fleet_from_dict(doc["baseline"]["fleet"]).pools[0]
    dep = pool_deployment(pool, MODEL)
    _, sizing, estimate, _ = fleet_answer(Workload.from_frame(code), dep, code, classes=classes)
    assert sizing.method == "simulated" and sizing.meets
    assert sizing.replicas > estimate.replicas   # bursty: the queue estimate is short, both replays see it
    assert pool.replicas == sizing.replicas, (pool, sizing.replicas)
    assert doc["sized_on"]["window"] == sizing.sized_on["window"]
    fewer = doc["baseline"]["one_fewer"]
    assert fewer["replicas"] == sizing.one_fewer.replicas == pool.replicas - 1
    assert fewer["meets"] is False and fewer["pool"] == pool.name
    assert doc["baseline"]["answer"]["ttft_ms"]["p90"] == pytest.approx(sizing.answer.ttft_ms["p90"], rel=1e-9)


def test_a_design_listed_as_meeting_meets_when_simulate_replays_it(tmp_path: Path, traces: Path, designed,
                                                                   capsys) -> None:
    _, doc = designed
    best = doc["designs"][0]
    assert best["meets"] and best["one_fewer"] is not None
    fleet = best["fleet"]
    fewer = {**fleet, "pools": [{**fleet["pools"][0], "replicas": best["one_fewer"]["replicas"]}]}
    for shown, meets in ((fleet, True), (fewer, False)):
        path = tmp_path / "fleet.json"
        path.write_text(json.dumps(shown))   # the design's own classes travel in the fleet file
        assert main(["simulate", str(traces / AZURE_CODE), "--fleet", str(path), "--json"]) == 0
        sim = json.loads(capsys.readouterr().out)
        assert sim["meets"] is meets, (shown["pools"][0]["replicas"], sim["products"])
        if meets:
            (name, o), = sim["products"].items()
            assert o["ttft_p90_ms"] == pytest.approx(best["products"][name]["ttft_p90_ms"], rel=1e-9)


def test_plans_disaggregated_gpus_are_labelled_the_estimate_beside_the_simulated_fleet(traces: Path, capsys) -> None:
    """The colocated count is the replay's answer; the prefill/decode split next to it is still the analytic queue,
    and the JSON, the text and the report's plan table say so."""
    assert main(["plan", str(traces / AZURE_CODE), "--model", MODEL, "--gpu", "h100", "--precision", "fp8",
                 "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["method"] == "simulated" and doc["replicas"] > doc["estimate"]["replicas"]
    assert doc["gpus_method"] == {"colocated": "simulated", "prefill": "estimate", "decode": "estimate",
                                  "disaggregated": "estimate"}
    source = plan_table(doc, doc).set_index("figure")["source"]
    assert source["GPUs colocated"] == "simulated"
    for figure in ("GPUs prefill pool (disaggregated)", "GPUs decode pool (disaggregated)", "GPUs disaggregated",
                   "cost per hour (disaggregated)"):
        assert source[figure] == "estimated", figure
    assert "[simulated: the log replayed on the fleet]; disaggregated" in plan_text(doc)


def test_a_fleets_pool_replays_a_log_with_sessions_as_the_headlines_sizing_does() -> None:
    """The demo's products squeezed into five minutes (sessions whose turns reuse their context): one pool of four
    replicas replayed by ``simulate --fleet``'s path gives the p90s the headline's sizing replay gives the same
    deployment, prefix caches included (they were dropped from the pools' replays)."""
    frame = synth.generate(600, seed=0, with_hashes=False)
    start = frame["timestamp"].min()
    frame["timestamp"] = start + (frame["timestamp"] - start) / 288.0
    classes = resolve_classes(frame, CLASS)
    pool = Pool("all", ("*",), "b200", 4, 4, router="round_robin")
    fleet = simulate_fleet(fleet_requests(frame), Fleet((pool,), MODEL), classes).requests
    req, _ = slo_window(frame, pool_deployment(pool, MODEL))
    refused = beyond_context(req, pool_deployment(pool, MODEL))   # the agent's 256k contexts: both refuse them
    req = req.take(np.flatnonzero(~refused))
    headline = simulate(req, pool_deployment(pool, MODEL), replicas=4, router="round_robin", max_num_seqs=None).requests
    assert refused.sum() > 0 and len(fleet) == len(headline) == len(frame) - refused.sum()
    for metric in ("ttft_ms", "tpot_ms"):
        assert fleet[metric].quantile(0.9) == pytest.approx(headline[metric].quantile(0.9), rel=1e-9), metric


def test_on_a_log_longer_than_the_window_design_judges_the_headlines_window() -> None:
    """A day of the demo's traffic, windows of 30 minutes: which half hour is the busiest depends on the deployment
    (its GPU-work), and design judges every candidate on the headline deployment's (the page passes it)."""
    frame = synth.generate(4000, seed=0, with_hashes=False)
    classes = resolve_classes(frame, CLASS)
    dep = pool_deployment(Pool("headline", precision="fp8"), MODEL, "b200", 4)
    req, plan_window = slo_window(frame, dep, slo_window_s=1800)   # size_fleet's window (plan's sized_on)
    refused = int(beyond_context(req, dep).sum())   # and the requests size_fleet refuses (the agent's 256k contexts)
    plan_window = {**plan_window, "refused": refused, "requests": plan_window["requests"] - refused}
    _, h100_window = slo_window(frame, pool_deployment(Pool("h100", precision="fp8"), MODEL, "h100-sxm"),
                                slo_window_s=1800)
    assert plan_window["start_s"] != h100_window["start_s"]   # the premise: another deployment, another half hour
    doc = design_fleet(frame, classes, gpus=["h100-sxm"], prices={"h100-sxm": 2.79}, model=MODEL,
                       precision="fp8", families=("shared",), top=1, slo_window_s=1800, reference=dep)
    assert doc["sized_on"] == pytest.approx(plan_window)
    assert not doc["sized_on"]["whole_log"] and doc["search"]["judged_requests"] == plan_window["requests"]


def test_design_plans_the_deployment_plan_plans_and_judges_its_default_class(code: pd.DataFrame, tmp_path: Path,
                                                                               capsys) -> None:
    """Without --model/--precision, design's pools serve what plan plans (the log's model, here none: the default
    model, at its checkpoint's BF16) and judge each product against the --ttft-slo-ms/--tpot-slo-ms pair."""
    log = tmp_path / "code_5min.csv"
    first = code["timestamp"].min()
    rows = code[code["timestamp"] < first + pd.Timedelta(minutes=5)]
    rows.assign(timestamp=rows["timestamp"].dt.strftime("%Y-%m-%d %H:%M:%S.%f")).to_csv(log, index=False)
    assert main(["design", str(log), "--gpus", "h100", "--top", "1", "--ttft-slo-ms", "700", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    pools = [p for d in doc["designs"] for p in d["fleet"]["pools"]]
    assert pools and {p["precision"] for p in pools} == {"bf16"}
    assert {(c["ttft_ms"], c["tpot_ms"]) for c in doc["classes"].values()} == {(700.0, 50.0)}
