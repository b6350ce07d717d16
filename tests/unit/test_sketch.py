"""The workload sketch: merge is addition (associative, equal to the one-shot sketch), quantiles within one bin
on the real traces, analyses from the sketch agree with the analyses from rows, streaming keeps every row
accounted for."""
from __future__ import annotations

import gzip

import numpy as np
import pandas as pd
import pytest

from shapeviz.analyses.shapes import shape_profile
from shapeviz.analyses.traffic import rate_over_time
from shapeviz.analysis import analyze
from shapeviz.ingest import IngestError, Limits, load_log
from shapeviz.outputs.summary import summary_document
from shapeviz.serving.planner import Workload
from shapeviz.workload.binning import BINS_PER_DECADE, bin_index
from shapeviz.workload.sketch import (
    SketchedLog,
    WorkloadSketch,
    merge_all,
    quantiles_from_bins,
    sketch_log,
)
from shapeviz.workload.view import WorkloadView

TRACES = [
    "azure_llm_2023/AzureLLMInferenceTrace_code.csv",
    "azure_llm_2023/AzureLLMInferenceTrace_conv.csv",
    "burstgpt/burstgpt_slice.csv",
    "mooncake_fast25/conversation_trace.jsonl.gz",
    "vidur_arxiv_summarization/arxiv_summarization_stats_llama2_tokenizer_filtered_v2.csv",
]


def _parts(frame: pd.DataFrame, n: int) -> list[pd.DataFrame]:
    bounds = np.linspace(0, len(frame), n + 1).astype(int)
    return [frame.iloc[a:b].reset_index(drop=True) for a, b in zip(bounds, bounds[1:])]


def _same(a: WorkloadSketch, b: WorkloadSketch, *, sample: bool = True) -> None:
    assert a.products == b.products
    for name in ("counts", "input_sum", "output_sum", "cached_sum"):
        np.testing.assert_array_equal(getattr(a, name), getattr(b, name), err_msg=name)
    assert sorted(a.latency) == sorted(b.latency)
    for name in a.latency:
        np.testing.assert_array_equal(a.latency[name], b.latency[name])
    pd.testing.assert_frame_equal(a.timeline.reset_index(drop=True), b.timeline.reset_index(drop=True),
                                  check_dtype=False)
    assert (a.report.rows_read, a.report.rows_kept, a.report.dropped) == (b.report.rows_read, b.report.rows_kept,
                                                                          b.report.dropped)
    if sample:
        pd.testing.assert_frame_equal(a.sample, b.sample)


def test_merge_is_associative_and_equals_the_one_shot_sketch(trace):
    frame, report = load_log(trace("azure_llm_2023/AzureLLMInferenceTrace_conv.csv"))
    a, b, c = (WorkloadSketch.from_frame(p, seed=i, sample_rows=3_000) for i, p in enumerate(_parts(frame, 3)))
    left, right = a.merge(b).merge(c), a.merge(b.merge(c))
    _same(left, right)                       # the sample too: the smallest keys of the union, whatever the grouping
    _same(c.merge(a).merge(b), left)         # and in any order
    one_shot = WorkloadSketch.from_frame(frame)
    _same(left, one_shot, sample=False)      # one-shot draws other keys; every count and sum is the same
    assert left.requests == len(frame) and len(left.sample) == 3_000
    assert set(left.sample["_key"]) <= set(a.sample["_key"]) | set(b.sample["_key"]) | set(c.sample["_key"])


def test_products_of_different_partitions_line_up_by_name(trace):
    frame, _ = load_log(trace("burstgpt/burstgpt_slice.csv"))
    products = frame["product"].cat.categories
    assert len(products) >= 2
    only_first = WorkloadSketch.from_frame(frame[frame["product"] == products[0]])
    the_rest = WorkloadSketch.from_frame(frame[frame["product"] != products[0]])
    merged = only_first.merge(the_rest)
    whole = WorkloadSketch.from_frame(frame)
    _same(merged, whole, sample=False)


@pytest.mark.parametrize("relative", TRACES)
def test_quantiles_from_bins_are_within_one_bin_of_exact_on_the_real_traces(trace, relative):
    frame, _ = load_log(trace(relative))
    sketch = WorkloadSketch.from_frame(frame)
    scopes = [None, *sketch.products]
    for product in scopes:
        rows = frame if product is None else frame[frame["product"] == product]
        for axis in ("input", "output"):
            values = rows[f"{axis}_tokens"].to_numpy()
            for q in (50, 90, 99):
                exact = float(np.percentile(values, q, method="inverted_cdf"))   # the nearest-rank quantile
                estimate = float(sketch.quantile(axis, q, product)[0])
                # the stated bound: the same log bin as the exact quantile, so < 1/16 decade apart
                assert bin_index(np.array([estimate]))[0] == bin_index(np.array([exact]))[0], (product, axis, q)
                assert abs(np.log10(max(estimate, 1)) - np.log10(max(exact, 1))) < 1 / BINS_PER_DECADE


def test_published_medians_are_within_one_bin(trace):
    # SOURCE.md of the Azure code trace: p50 input 1,469 and output 13 tokens
    frame, _ = load_log(trace("azure_llm_2023/AzureLLMInferenceTrace_code.csv"))
    sketch = WorkloadSketch.from_frame(frame)
    assert abs(np.log10(sketch.quantile("input", 50)[0] / 1469)) < 1 / BINS_PER_DECADE
    assert sketch.quantile("output", 50)[0] == 13   # a bin below 16 tokens holds one whole number


def test_quantiles_of_an_empty_histogram_are_nan_not_an_error():
    assert np.isnan(quantiles_from_bins(np.zeros(112), np.array([50.0]))).all()


def test_profile_from_the_sketch_agrees_with_the_profile_from_rows(trace):
    frame, _ = load_log(trace("azure_llm_2023/AzureLLMInferenceTrace_code.csv"))
    rows = shape_profile(frame)
    bins = shape_profile(WorkloadView.from_sketch(WorkloadSketch.from_frame(frame)))
    for a, b in zip(rows.scopes(), bins.scopes()):
        assert (a.scope, a.requests, a.dominant_shape, a.phase) == (b.scope, b.requests, b.dominant_shape, b.phase)
        assert b.input["mean"] == pytest.approx(a.input["mean"]) and b.output["mean"] == pytest.approx(a.output["mean"])
        # cells straddling a corner boundary go to the corner of their mean: shares move by a few percent at most
        for corner, share in a.request_share.items():
            assert b.request_share[corner] == pytest.approx(share, abs=0.03)
        assert b.prefill_gpu_share == pytest.approx(a.prefill_gpu_share, abs=0.02)


def test_workload_from_the_sketch_keeps_token_totals_and_the_planning_rate(trace):
    frame, _ = load_log(trace("azure_llm_2023/AzureLLMInferenceTrace_conv.csv"))
    sketch = WorkloadSketch.from_frame(frame)
    rows, bins = Workload.from_frame(frame), Workload.from_view(sketch)
    assert bins.n_requests == rows.n_requests == len(frame)
    assert bins.mean_input == pytest.approx(rows.mean_input, rel=1e-9)
    assert bins.mean_output == pytest.approx(rows.mean_output, rel=1e-9)
    assert bins.rate_source == "measured"
    assert bins.rate_rps == pytest.approx(rows.rate_rps, rel=0.02)
    view = WorkloadView.from_sketch(sketch)
    assert view.n_requests == len(frame) and view.totals("input").sum() == frame["input_tokens"].sum()


def test_rate_over_time_from_the_sketch_equals_the_rows(trace):
    frame, _ = load_log(trace("azure_llm_2023/AzureLLMInferenceTrace_code.csv"))
    rows = rate_over_time(frame, "1min")
    bins = rate_over_time(WorkloadView.from_sketch(WorkloadSketch.from_frame(frame)), "1min")
    assert bins["requests"].sum() == rows["requests"].sum() == len(frame)
    # every minute of every product holds the same count, not only the total and the busiest bucket
    key = ["timestamp", "product"] if "product" in rows.columns and "product" in bins.columns else ["timestamp"]
    by_rows = rows.groupby(key, observed=True)["requests"].sum()
    by_bins = bins.groupby(key, observed=True)["requests"].sum()
    by_rows, by_bins = by_rows[by_rows > 0], by_bins[by_bins > 0]
    assert len(by_rows) >= 40   # the trace's busy minutes, one by one
    pd.testing.assert_series_equal(by_bins.sort_index(), by_rows.sort_index(), check_dtype=False,
                                   check_index_type=False)
    with pytest.raises(ValueError, match="whole minutes"):
        rate_over_time(WorkloadView.from_sketch(WorkloadSketch.from_frame(frame)), "10s")


def test_sketch_only_summary_keeps_the_document_and_says_what_it_left_out(trace):
    path = trace("azure_llm_2023/AzureLLMInferenceTrace_conv.csv")
    full = summary_document(analyze(load_log(path)))
    streamed = sketch_log(path, keep_frame_rows=1_000)
    assert streamed.frame is None
    doc = summary_document(analyze(streamed))
    assert doc["rows"] == full["rows"]
    assert set(doc) >= set(full) - {"sessions", "agent_products", "prefix_cache"}
    assert doc["overall"]["dominant_shape"] == full["overall"]["dominant_shape"]
    assert doc["overall"]["phase"] == full["overall"]["phase"]
    assert doc["traffic"]["peak_rps"] == pytest.approx(full["traffic"]["peak_rps"], rel=0.05)
    assert any("sketch" in note for note in doc["notes"])
    assert sum(c["share"] for c in doc["clusters"]) == pytest.approx(1.0)


def test_streaming_in_batches_accounts_for_every_row_like_a_whole_load(tmp_path):
    rng = np.random.default_rng(1)
    n = 400_000
    body = pd.DataFrame({"prompt_tokens": rng.integers(1, 9000, n), "completion_tokens": rng.integers(0, 900, n),
                         "model": rng.choice(["a", "b"], n)})
    path = tmp_path / "big.csv.gz"
    with gzip.open(path, "wt") as f:
        body.to_csv(f, index=False)
    whole = WorkloadSketch.from_frame(load_log(path).frame)
    streamed = sketch_log(path, keep_frame_rows=10_000)   # past this, batches are sketched and dropped
    assert streamed.frame is None
    assert streamed.report.rows_read == n
    assert streamed.report.dropped == {"failed_request": int((body["completion_tokens"] == 0).sum())}
    np.testing.assert_array_equal(streamed.sketch.counts, whole.counts)
    np.testing.assert_array_equal(streamed.sketch.input_sum, whole.input_sum)
    # one sketch per parsed block, merged at the end, is the same sketch as one per chunk of blocks
    per_block = sketch_log(path, keep_frame_rows=10_000, chunk_rows=1)
    assert per_block.report.rows_read == n and per_block.report.dropped == streamed.report.dropped
    np.testing.assert_array_equal(per_block.sketch.counts, streamed.sketch.counts)
    np.testing.assert_array_equal(per_block.sketch.output_sum, whole.output_sum)
    small = sketch_log(path)                              # under the threshold: the exact frame is kept
    assert small.frame is not None and len(small.frame) == whole.requests


def test_the_row_limit_stops_a_compressed_log_at_the_first_batch_past_it(tmp_path):
    # a small cousin of the 2 GB gzip bomb: identical tiny rows, compressed 1000:1
    path = tmp_path / "bomb.csv.gz"
    with gzip.open(path, "wb", compresslevel=9) as f:
        f.write(b"input_tokens,output_tokens\n")
        f.write(b"100,20\n" * 3_000_000)
    limits = Limits(max_rows=200_000)
    for load in (lambda: load_log(path, limits=limits), lambda: sketch_log(path, limits=limits)):
        with pytest.raises(IngestError, match="exceed the limit of 200,000") as error:
            load()
        message = str(error.value)
        assert "\n" not in message and "reading stopped" in message
        read = int(message.split(": ")[1].split(" rows")[0].replace(",", ""))
        assert read < 3_000_000   # stopped early, not after parsing everything


def test_merge_all_needs_at_least_one_sketch():
    with pytest.raises(ValueError, match="no sketches"):
        merge_all([])


def test_a_log_sketched_in_parts_reports_every_row_of_the_whole(trace, tmp_path):
    """Two halves of a file streamed into sketches and merged: rows read, kept and dropped by reason add up to the
    whole file's load report (BurstGPT drops its failed requests)."""
    path = trace("burstgpt/burstgpt_slice.csv")
    whole = load_log(path).report
    assert whole.dropped and whole.rows_read > whole.rows_kept   # the case where the counts can disagree
    lines = path.read_text().splitlines(keepends=True)
    middle = 1 + (len(lines) - 1) // 2
    halves = []
    for i, body in enumerate((lines[1:middle], lines[middle:])):
        part = tmp_path / f"part{i}.csv"
        part.write_text(lines[0] + "".join(body))
        halves.append(sketch_log(part, keep_frame_rows=0).sketch)
    merged = SketchedLog(halves[0].merge(halves[1]))
    assert merged.report.rows_read == whole.rows_read and merged.report.rows_kept == whole.rows_kept
    assert merged.report.dropped == whole.dropped
    assert merged.sketch.requests == whole.rows_kept


def test_a_column_that_changes_type_after_the_first_block_still_loads_every_row(tmp_path):
    # the streaming parser types columns from its first 4 MiB block; a later "n/a" must not lose the log
    n = 700_000
    lines = [f"{i % 5000 + 1},{i % 300 + 1},{i % 7}" for i in range(n - 1)] + ["10,2,n/a"]
    path = tmp_path / "late_text.csv"
    path.write_text("prompt_tokens,completion_tokens,cached_tokens\n" + "\n".join(lines) + "\n")
    frame, report = load_log(path)
    assert report.rows_read == report.rows_kept == n and frame["cached_tokens"].isna().sum() == 1
    streamed = sketch_log(path, keep_frame_rows=1_000)
    assert streamed.report.rows_read == n and streamed.sketch.requests == n


def test_block_reuse_from_the_sketch_matches_the_published_mooncake_figure(trace):
    from shapeviz.workload.sketch import BlockSample

    frame, _ = load_log(trace("mooncake_fast25/conversation_trace.jsonl.gz"))
    parts = [WorkloadSketch.from_frame(p, seed=i) for i, p in enumerate(_parts(frame, 4))]
    merged = merge_all(parts)
    assert merged.blocks.rate == 1.0                                         # small enough: every id kept
    assert merged.blocks.hit_ratio_blocks == pytest.approx(0.3664, abs=5e-5)  # SOURCE.md: 36.64 %
    # a bounded sample (SHARDS, bottom-k) estimates it, and merges the same in any grouping
    small = [BlockSample.from_frame(p, max_ids=3_000) for p in _parts(frame, 4)]
    left = small[0].merge(small[1]).merge(small[2]).merge(small[3])
    right = small[0].merge(small[1].merge(small[2].merge(small[3])))
    np.testing.assert_array_equal(left.ids, right.ids)
    np.testing.assert_array_equal(left.requests, right.requests)
    assert len(left.ids) == 3_000 and left.rate < 1.0
    assert left.hit_ratio_blocks == pytest.approx(0.3664, abs=0.05)
    doc = summary_document(analyze(SketchedLog(merged)))
    assert doc["prefix_cache"]["method"] == "block_hashes"
    assert doc["prefix_cache"]["hit_ratio_blocks"] == pytest.approx(0.3664, abs=5e-5)
    assert doc["prefix_cache"]["hit_ratio_tokens"] == pytest.approx(0.3736, abs=0.02)   # SOURCE.md: 37.36 %


@pytest.mark.parametrize("relative", TRACES + ["tracelab_example/round_trace.jsonl", "burstgpt/burstgpt3_slice.csv",
                                               "mooncake_fast25/synthetic_trace.jsonl"])
def test_every_real_trace_streams_into_the_same_sketch_as_its_frame(trace, relative):
    path = trace(relative)
    log = load_log(path)
    streamed = sketch_log(path, keep_frame_rows=0)   # batch by batch, nothing kept whole
    assert streamed.frame is None
    r, s = log.report, streamed.report
    assert (s.rows_read, s.rows_kept, s.dropped) == (r.rows_read, r.rows_kept, r.dropped)
    whole = WorkloadSketch.from_frame(log.frame, r)
    np.testing.assert_array_equal(streamed.sketch.counts, whole.counts)
    np.testing.assert_array_equal(streamed.sketch.output_sum, whole.output_sum)
    assert streamed.sketch.per_minute().sum() == whole.per_minute().sum()


def test_sessions_from_the_sketch_keep_every_turn_of_the_sampled_sessions(trace):
    from shapeviz.analyses.sessions import session_summary
    from shapeviz.workload.sketch import SessionSample

    frame, report = load_log(trace("burstgpt/burstgpt3_slice.csv"))
    exact = session_summary(frame)
    parts = [WorkloadSketch.from_frame(p, report, seed=i) for i, p in enumerate(_parts(frame, 3))]
    merged = merge_all(parts)
    assert merged.sessions.rate == 1.0
    doc = summary_document(analyze(SketchedLog(merged)))
    # a session split across partitions is whole again after the merge: the same count and turns as from rows
    assert doc["sessions"]["count"] == exact["count"] and doc["sessions"]["turns_p50"] == exact["turns_p50"]
    # bounded: fewer rows than the log, whole sessions only, an estimated count near the truth
    small = [SessionSample.from_frame(p, report, max_rows=150) for p in _parts(frame, 3)]
    left, right = small[0].merge(small[1]).merge(small[2]), small[0].merge(small[1].merge(small[2]))
    pd.testing.assert_frame_equal(left.frame.sort_values(["_h", "input_tokens"]).reset_index(drop=True),
                                  right.frame.sort_values(["_h", "input_tokens"]).reset_index(drop=True))
    assert len(left.frame) <= 150 and left.rate < 1.0
    sampled = left.canonical()
    from shapeviz.workload.sketch import _session_hash

    kept = frame[np.isin(_session_hash(frame["session_id"]), sampled["session_id"].astype("uint64").to_numpy())]
    assert len(kept) == len(sampled)                     # every turn of every sampled session
    estimate = sampled["session_id"].nunique() / left.rate
    assert estimate == pytest.approx(exact["count"], rel=0.35)


def test_an_uploaded_parquet_streams_by_row_group_and_keeps_the_byte_limit(tmp_path):
    import io

    import pyarrow as pa
    import pyarrow.parquet as pq

    n = 300_000
    table = pa.table({"prompt_tokens": np.arange(1, n + 1) % 7000 + 1, "completion_tokens": np.arange(n) % 500 + 1})
    buffer = io.BytesIO()
    pq.write_table(table, buffer, row_group_size=50_000)

    class Upload(io.BytesIO):
        name = "week.parquet"

    upload = Upload(buffer.getvalue())
    streamed = sketch_log(upload, keep_frame_rows=60_000)
    assert streamed.frame is None and streamed.report.rows_read == n and streamed.sketch.requests == n
    with pytest.raises(IngestError, match="input limit"):
        load_log(Upload(buffer.getvalue()), limits=Limits(max_bytes_in=10_000))
