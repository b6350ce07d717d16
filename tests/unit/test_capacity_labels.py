"""Labels on the Capacity page and in the memo that say what a figure is: time as the log has it, a prefix-hit
figure named by how it was found, the phase of a balanced log, the router a citation is about (issue 29)."""
from __future__ import annotations

import re

import numpy as np
import pandas as pd
import pytest

from shapeviz.analyses.clusters import find_clusters
from shapeviz.analyses.shapes import shape_profile
from shapeviz.analyses.traffic import rate_over_time
from shapeviz.analysis import analyze
from shapeviz.fleet.levers import lever_citations
from shapeviz.fleet.routing import router_citation
from shapeviz.ingest import load_log, relative_times
from shapeviz.outputs.figures import fleet_over_time_figure, rate_figure
from shapeviz.outputs.report import report_files
from shapeviz.recommend import recommend
from shapeviz.serving.routers import LABELS

BURSTGPT = "burstgpt/burstgpt_slice.csv"          # Timestamp: seconds from the trace's start; balanced phases
BURSTGPT_SESSIONS = "burstgpt/burstgpt3_slice.csv"  # with Session ID: reuse estimated from sessions
AZURE = "azure_llm_2023/AzureLLMInferenceTrace_code.csv"   # wall-clock dates of November 2023


def _x_years(fig) -> set[int]:
    years = set()
    for trace in fig.data:
        x = pd.Series(trace.x)
        if pd.api.types.is_numeric_dtype(x):
            continue
        years |= set(pd.to_datetime(x).dt.year)
    return years


def test_relative_timestamps_are_drawn_as_elapsed_time_and_dates_stay_dates(trace) -> None:
    burst = load_log(trace(BURSTGPT)).frame
    azure = load_log(trace(AZURE)).frame
    assert relative_times(burst["timestamp"]) and not relative_times(azure["timestamp"])
    fig = rate_figure(rate_over_time(burst, "1min"))
    span_h = (burst["timestamp"].max() - burst["timestamp"].min()).total_seconds() / 3600
    assert _x_years(fig) == set()                          # no date at all, so no 1970
    assert "from the log's start" in fig.layout.xaxis.title.text
    last = max(float(np.nanmax(np.asarray(t.x, dtype=float))) for t in fig.data)
    unit = 1 if "hours" in fig.layout.xaxis.title.text else 60
    assert last == pytest.approx(span_h * unit, rel=0.05, abs=1 / unit)   # elapsed, in the unit the axis names
    assert _x_years(rate_figure(rate_over_time(azure, "1min"))) == {2023}
    windows = pd.DataFrame({"start": pd.Series(burst["timestamp"].sort_values().iloc[::50].to_numpy()),
                            "rate_rps": 1.0, "replicas": 1, "replicas_needed": 1, "missed": False})
    over_time = fleet_over_time_figure({"peak": windows})
    assert _x_years(over_time) == set()
    assert "from the log's start" in over_time.layout.xaxis2.title.text


def test_a_prefix_hit_figure_is_named_by_how_it_was_found(trace) -> None:
    log = load_log(trace(BURSTGPT_SESSIONS))
    analysis = analyze(log)
    assert analysis.prefix.method == "session_estimate"
    reasons = [r.reason for r in analysis.recommendations if r.lever == "prefix_cache"]
    assert reasons and all("estimated prefix-hit potential" in r and "measured" not in r for r in reasons)
    frame = log.frame
    reported = recommend(shape_profile(frame), find_clusters(frame), prefix_hit_ratio=0.4,
                         prefix_method="reported_cached_tokens")
    assert any("a measured prefix-hit ratio of 40%" in r.reason for r in reported)


def test_the_memo_says_balanced_phases_in_words(trace) -> None:
    log = load_log(trace(BURSTGPT))
    html = report_files(log, png=False).files["report.html"].decode()
    decision = html[html.index('<div class="decision">'):]
    assert "balanced between prefill and decode" in decision
    assert not re.search(r"balanced</strong>-dominated|balanced-dominated", html)


def test_the_router_citation_is_about_the_selected_router() -> None:
    table = pd.DataFrame({
        "router": ["round_robin", "least_tokens", "session", "prefix"],
        "label": [LABELS[r] for r in ("round_robin", "least_tokens", "session", "prefix")],
        "replicas_today": 4, "hit_ratio_tokens": [0.20, 0.22, 0.61, 0.58],
        "gpus": pd.array([12, 12, 8, 8], dtype="Int64"), "source": "sessions"})
    assert router_citation(table, "prefix").startswith(f"simulated: the {LABELS['prefix']} router keeps 58%")
    assert "against 20% round-robin" in router_citation(table, "prefix")
    assert router_citation(table, "round_robin").startswith(f"simulated: the {LABELS['round_robin']} router")
    assert f"the {LABELS['session']} router" in router_citation(table)   # none selected: the fewest GPUs


def test_the_levers_fleets_are_said_against_the_headlines_answer() -> None:
    """"8 → 12 GPUs" beside a headline of 4 GPUs told two stories: each lever's fleet now says replicas × TP, how this
    search's baseline stands to the answer, and what the change costs at the headline's price."""
    table = pd.DataFrame({
        "lever": ["baseline", "priority_queues", "chunked_prefill", "split_pools", "disaggregate"],
        "label": ["today: FCFS, colocated", "priority queues", "prefill chunk 2,048 tokens", "one pool per corner",
                  "disaggregated prefill / decode"],
        "gpus": pd.array([8, 12, 8, 4, None], dtype="Int64"), "detail": ["", "shortest uncached prompt first", "", "replicas: rag 1", "none"]})
    cites = lever_citations(table, tp=4, answer=1, gpu_hour_usd=2.5)
    assert cites["priority_queues"] == ("simulated: priority queues costs 2 → 3 × TP4 = 8 → 12 GPUs (+$10/h) "
                                        "against this search's FCFS baseline (the answer + 1) at the same p90 SLOs (shortest uncached prompt first)")
    assert "saves 2 → 1 × TP4 = 4 GPUs" not in cites["split_pools"]
    assert "saves 2 → 1 × TP4 = 8 → 4 GPUs (−$10/h)" in cites["split_pools"]
    assert "changes nothing: 2 × TP4 = 8 GPUs either way against this search's FCFS baseline (the answer + 1)" in \
        cites["chunked_prefill"]
    assert cites["disaggregate"].startswith("simulated: disaggregated prefill / decode cannot meet")
    # the answer not replayed yet: no offset claimed
    assert "(the answer" not in lever_citations(table, tp=4, answer=None, gpu_hour_usd=2.5)["priority_queues"]
    # the router's citation in the same units
    routers = pd.DataFrame({
        "router": ["round_robin", "prefix"], "label": [LABELS["round_robin"], LABELS["prefix"]],
        "replicas_today": 4, "hit_ratio_tokens": [0.20, 0.58], "gpus": pd.array([12, 8], dtype="Int64"),
        "source": "sessions"})
    assert router_citation(routers, "prefix", tp=4).endswith(
        "meets the p90 SLOs on 2 × TP4 = 8 GPUs instead of 3 × TP4 = 12 GPUs")
