"""The simulated fleet curve beside the analytic one, and the demo plan checked against the simulator."""
from __future__ import annotations

import numpy as np
import pandas as pd

from shapeviz.fleet.sweep import (
    dash,
    disagreements,
    distribution_figure,
    goodput_figure,
    latency_load_figure,
    sample_requests,
    simulated_point,
    sweep_table,
)
from shapeviz.physics import default_deployment
from shapeviz.serving import Workload, load_curve, plan
from shapeviz.serving.planner import WhatIf
from shapeviz.workload.synth import generate


def _demo() -> pd.DataFrame:
    return generate(20_000, seed=0)


def test_the_demo_plan_buys_what_the_simulator_needs_not_three_times_more() -> None:
    """The issue's demo: 18 GPUs at 2% prefill pressure. Prefix hits no longer blur the prefill-time spread."""
    frame, dep = _demo(), default_deployment()
    w = Workload.from_frame(frame)
    p = plan(w, dep)
    assert p.meets_slo and p.replicas is not None
    assert p.gpus["colocated"] <= 10
    sim = simulated_point(sample_requests(frame, WhatIf(), 2000), dep, w.rate_rps, p.replicas, 1000, 50).summary()
    assert sim["ttft_ms"]["p90"] <= 1000 and sim["tpot_ms"]["p90"] <= 50 and not sim["saturated"]


def test_sweep_table_and_figures_label_the_simulated_figures() -> None:
    frame, dep = _demo(), default_deployment()
    w = Workload.from_frame(frame)
    curve = load_curve(w, dep, multipliers=(0.5, 1.0, 4.0), replicas=1)
    req = sample_requests(frame, WhatIf(), 600)
    points = {m: simulated_point(req, dep, w.rate_rps * m, 1, 1000, 50) for m in (0.5, 1.0, 4.0)}
    table = sweep_table(points, curve)
    assert list(table["traffic_multiplier"]) == [0.5, 1.0, 4.0]
    assert table["sim_ttft_p90_ms"].iloc[-1] > table["sim_ttft_p90_ms"].iloc[0]
    # one replica already queues at half the traffic; each step up loses goodput, four times loses most of it
    goodput = table["goodput"].to_numpy()
    assert (np.diff(goodput) < 0).all() and goodput[-1] < 0.5 * goodput[0], goodput
    fig = latency_load_figure(table, 1000, 50, dep.tp)
    assert "Simulated" in fig.layout.title.text
    names = {t.name for t in fig.data if t.name}
    assert {"simulated p90", "analytic p90"} <= names
    assert "Simulated" in distribution_figure(points[1.0], 1000, 50).layout.title.text
    assert "goodput" in goodput_figure(table).layout.title.text


def test_disagreements_name_the_gap_and_cells_show_a_dash() -> None:
    table = pd.DataFrame({"traffic_multiplier": [1.0], "sim_ttft_p90_ms": [600.0], "ttft_p90_ms": [1000.0],
                          "sim_tpot_p90_ms": [30.0], "tpot_p90_ms": [np.nan]})
    lines = disagreements(table)
    assert any("TTFT p90: simulated 600 ms vs analytic 1,000 ms (-40%)" in line for line in lines)
    assert any("TPOT p90" in line and "saturated" in line for line in lines)
    close = table.assign(sim_ttft_p90_ms=[950.0], tpot_p90_ms=[31.0])
    assert disagreements(close) == []
    assert dash(None) == dash(float("nan")) == dash(pd.NA) == "–"
    assert dash(1234.5, "{:,.0f} ms") == "1,234 ms"


def test_levers_are_sized_by_simulation_and_cited_by_the_recommendations() -> None:
    from shapeviz.fleet.levers import lever_citations, simulate_levers
    from shapeviz.recommend import Recommendation, cite_simulated

    frame, dep = _demo(), default_deployment()
    w = Workload.from_frame(frame)
    table = simulate_levers(sample_requests(frame, WhatIf(), 800), dep, w.rate_rps, 1000, 50)
    assert list(table["lever"]) == ["baseline", "priority_queues", "chunked_prefill", "disaggregate", "split_pools"]
    base = int(table["gpus"].iloc[0])
    assert 1 <= base <= 10
    # every fleet found meets the SLOs it was sized for (the p90 of its slowest view)
    found = table.dropna(subset=["gpus"])
    assert (found["ttft_p90_ms"] <= 1000).all() and (found["tpot_p90_ms"].fillna(0) <= 50).all()
    cites = lever_citations(table, dep.tp)
    assert set(cites) == {"priority_queues", "chunked_prefill", "disaggregate", "split_pools"}
    for r in table[table["lever"] != "baseline"].itertuples(index=False):
        cite = cites[r.lever]
        if pd.isna(r.gpus):
            assert "cannot meet the p90 SLOs" in cite, cite
            continue
        gpus, tp = int(r.gpus), dep.tp   # the exact change, with the verb of its sign, in replicas × TP and GPUs
        change = f"{base // tp} → {gpus // tp} × TP{tp} = {base} → {gpus} GPUs against this search's FCFS baseline"
        if gpus < base:
            assert f" saves {change} at the same p90 SLOs" in cite, cite
        elif gpus > base:
            assert f" costs {change} at the same p90 SLOs" in cite, cite
        else:
            assert f" changes nothing: {base // tp} × TP{tp} = {base} GPUs either way" in cite, cite
    recs = [Recommendation("split_pools", "ttft", "overall", "Mixed pool.", 0.5),
            Recommendation("trim_input", "ttft", "overall", "Trim.", 0.4)]
    cited = cite_simulated(recs, cites)
    assert cited[0].reason.startswith("Mixed pool. (simulated: one pool per corner") and cited[1] == recs[1]
