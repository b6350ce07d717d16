"""The workload view: one table of requests for every analysis, from every row or from a sketch's cells.

From rows every figure is the exact one (the published means and medians of the real traces); from a sketch the
request counts and token totals are still exact, quantiles within one bin, and each analysis is the same code.
"""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from shapeviz.analyses.clusters import find_clusters
from shapeviz.analyses.shapes import shape_profile
from shapeviz.analyses.traffic import rate_over_time, traffic
from shapeviz.ingest import load_log
from shapeviz.serving.planner import Workload
from shapeviz.workload.binning import BINS_PER_DECADE, bin_index
from shapeviz.workload.sketch import SketchedLog, WorkloadSketch, sketch_log
from shapeviz.workload.view import WorkloadView, as_view, per_minute_rates

CODE = "azure_llm_2023/AzureLLMInferenceTrace_code.csv"
CONV = "azure_llm_2023/AzureLLMInferenceTrace_conv.csv"
TRACES = [CODE, CONV, "burstgpt/burstgpt_slice.csv", "mooncake_fast25/conversation_trace.jsonl.gz",
          "vidur_arxiv_summarization/arxiv_summarization_stats_llama2_tokenizer_filtered_v2.csv"]


@pytest.mark.parametrize("relative", TRACES)
def test_the_sketch_view_keeps_every_request_and_token_of_the_rows(trace, relative):
    frame, report = load_log(trace(relative))
    rows = WorkloadView.from_frame(frame, report)
    cells = WorkloadView.from_sketch(WorkloadSketch.from_frame(frame, report))
    assert rows.exact and not cells.exact
    assert len(cells.input_tokens) < len(rows.input_tokens)            # cells, not rows
    assert rows.n_requests == cells.n_requests == len(frame)
    for axis in ("input", "output", "cached"):
        assert cells.totals(axis).sum() == rows.totals(axis).sum(), axis   # exact sums, not means × counts
    per_rows = np.bincount(rows.product, minlength=len(rows.products))
    per_cells = cells.count(cells.product, len(cells.products))
    assert dict(zip(rows.products, per_rows)) == dict(zip(cells.products, per_cells))
    assert rows.arrivals.requests == cells.arrivals.requests
    # quantiles per product: exact from rows, the same log bin from cells
    qs = [50, 90, 99]
    for axis in ("input", "output"):
        exact, exact_per = rows.quantiles(axis, qs)
        binned, binned_per = cells.quantiles(axis, qs)
        values = frame[f"{axis}_tokens"].to_numpy()
        np.testing.assert_array_equal(exact, np.percentile(values, qs))
        near = np.abs(np.log10(np.maximum(binned, 1)) - np.log10(np.maximum(exact, 1)))
        assert (near < 2 / BINS_PER_DECADE).all(), (axis, exact, binned)   # nearest-rank vs linear: one bin more
        order = [cells.products.index(p) for p in rows.products]
        assert np.all(np.abs(bin_index(binned_per[order].ravel()).astype(int) - bin_index(exact_per.ravel())) <= 1)


def test_the_published_means_and_medians_hold_from_both_views(trace):
    # SOURCE.md (Azure LLM inference trace 2023): code prompt mean 2047.8, output 27.9; p50 1469 / 13 tokens
    frame, _ = load_log(trace(CODE))
    for view in (WorkloadView.from_frame(frame), WorkloadView.from_sketch(WorkloadSketch.from_frame(frame))):
        profile = shape_profile(view)
        assert profile.overall.input["mean"] == pytest.approx(2047.8, abs=0.05)
        assert profile.overall.output["mean"] == pytest.approx(27.9, abs=0.05)
        if view.exact:
            assert (profile.overall.input["p50"], profile.overall.output["p50"]) == (1469, 13)
        else:
            assert abs(np.log10(profile.overall.input["p50"] / 1469)) < 1 / BINS_PER_DECADE
            assert profile.overall.output["p50"] == 13


def test_one_analysis_takes_a_frame_a_view_or_a_sketch_and_gives_the_same_figures(trace):
    frame, report = load_log(trace(CONV))
    view = WorkloadView.from_frame(frame, report)
    assert as_view(frame).n_requests == as_view(view).n_requests == len(frame)
    assert shape_profile(frame).to_dict() == shape_profile(view).to_dict()
    assert traffic(frame) == traffic(view)
    a, b = Workload.from_frame(frame), Workload.from_view(view)
    np.testing.assert_array_equal(a.input_tokens, b.input_tokens)
    assert (a.rate_rps, a.n_requests) == (b.rate_rps, b.n_requests)
    # a sketch: the same functions, from its cells (profile, workload, traffic) and its sample (clusters)
    sketch = WorkloadSketch.from_frame(frame, report, sample_rows=5_000)
    cells = as_view(sketch)
    assert shape_profile(cells).overall.dominant_shape == shape_profile(view).overall.dominant_shape
    assert Workload.from_view(sketch).rate_rps == pytest.approx(a.rate_rps, rel=0.02)
    t_rows, t_cells = traffic(view), traffic(cells)
    assert t_cells.requests == t_rows.requests and t_cells.peak_rps == pytest.approx(t_rows.peak_rps, rel=0.05)
    clusters = find_clusters(cells)
    assert len(clusters.labels) == len(sketch.sample) < len(frame)        # fitted on the sample's requests
    assert sum(c.requests for c in clusters.clusters) == pytest.approx(len(frame), abs=len(clusters.clusters))
    assert any("uniform sample" in note for note in clusters.notes)


def test_per_minute_rates_are_one_definition_for_rows_and_minutes(trace):
    frame, _ = load_log(trace(CODE))
    start = frame["timestamp"].min().floor("min")
    aligned = frame.assign(timestamp=frame["timestamp"] - (frame["timestamp"].min() - start))  # starts on a minute
    rows = WorkloadView.from_frame(aligned)
    cells = WorkloadView.from_sketch(WorkloadSketch.from_frame(aligned))
    np.testing.assert_array_equal(rows.per_minute_rates(), cells.per_minute_rates())
    np.testing.assert_array_equal(per_minute_rates(aligned["timestamp"]), rows.per_minute_rates())
    # the last, partial minute is left out; a missing timestamp is skipped
    missing = aligned.iloc[:1].assign(timestamp=pd.Series([pd.NaT], dtype=aligned["timestamp"].dtype))
    with_gap = pd.concat([aligned, missing], ignore_index=True)
    np.testing.assert_array_equal(per_minute_rates(with_gap["timestamp"]), rows.per_minute_rates())


def test_rate_over_time_from_a_sketch_counts_whole_minutes_per_product(trace):
    frame, _ = load_log(trace("burstgpt/burstgpt_slice.csv"))
    rows = rate_over_time(frame, "10min")
    cells = rate_over_time(WorkloadView.from_sketch(WorkloadSketch.from_frame(frame)), "10min")
    assert list(cells.columns) == list(rows.columns)
    assert cells.groupby("product")["requests"].sum().to_dict() == rows.groupby("product")["requests"].sum().to_dict()
    with pytest.raises(ValueError, match="whole minutes"):
        rate_over_time(WorkloadView.from_sketch(WorkloadSketch.from_frame(frame)), "90s")


def test_a_streamed_log_becomes_a_view_of_its_rows_while_kept_else_of_its_sketch(trace):
    path = trace(CONV)
    kept, streamed = sketch_log(path), sketch_log(path, keep_frame_rows=1_000)
    assert as_view(kept).exact and as_view(kept).n_requests == kept.sketch.requests
    view = as_view(streamed)
    assert not view.exact and view.sampled and view.rows.exact
    assert view.notes == streamed.notes and view.report is streamed.report
    assert as_view(SketchedLog(streamed.sketch)).n_requests == view.n_requests


def test_an_empty_or_unusable_input_is_a_clear_error():
    with pytest.raises(ValueError, match="output_tokens"):
        WorkloadView.from_frame(pd.DataFrame({"input_tokens": [1, 2]}))
    with pytest.raises(ValueError, match="no requests"):
        shape_profile(pd.DataFrame({"input_tokens": pd.Series([], dtype="int32"),
                                    "output_tokens": pd.Series([], dtype="int32")}))
    with pytest.raises(ValueError, match="loaded log or a workload sketch"):
        as_view([1, 2, 3])
