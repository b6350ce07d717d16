"""What `summary`'s speed-ups of issue 40 must not change: the same sessions sampled, the same turns, the same labels,
on the real traces (a faster path that answers differently is a bug, however fast)."""
from __future__ import annotations

from dataclasses import replace

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

from shapeviz.ingest import load_log
from shapeviz.workload.sketch import SessionSample


@pytest.mark.parametrize("max_rows", [40, 150, 300])
def test_a_bounded_session_sample_keeps_the_sessions_bounding_every_row_keeps(trace, max_rows):
    frame, report = load_log(trace("burstgpt/burstgpt3_slice.csv"))
    whole = SessionSample.from_frame(frame, report, max_rows=10**9)
    assert len(whole.frame) > max_rows   # the bound bites
    expected = replace(whole, max_rows=max_rows)._bounded()
    got = SessionSample.from_frame(frame, report, max_rows=max_rows)
    assert got.threshold == expected.threshold
    pd.testing.assert_frame_equal(got.frame, expected.frame)
    # with a running sketch's threshold passed in too
    half = expected.threshold // 2 + whole.threshold // 4
    expected = replace(SessionSample.from_frame(frame, report, max_rows=10**9, threshold=half),
                       max_rows=max_rows)._bounded()
    got = SessionSample.from_frame(frame, report, max_rows=max_rows, threshold=half)
    assert got.threshold == expected.threshold
    pd.testing.assert_frame_equal(got.frame, expected.frame)


def test_labels_read_in_blocks_keep_their_names_order_and_gaps(tmp_path):
    from shapeviz.ingest.frame import _categorical

    # every block has its own dictionary (as the streaming CSV reader gives), with gaps where a label is missing
    blocks = [pa.array(["b", None, "a", "b"]).dictionary_encode(), pa.array(["c", "a", None]).dictionary_encode(),
              pa.array([None, None]).cast(pa.string()).dictionary_encode(), pa.array(["d"]).dictionary_encode()]
    chunked = pa.chunked_array(blocks)
    got = _categorical(chunked)
    pd.testing.assert_series_equal(got, chunked.to_pandas())
    assert got.isna().tolist() == [False, True, False, False, False, False, True, True, True, False]
    # and a real log's sessions, read in many blocks, are the sessions of its rows
    log = tmp_path / "sessions.csv"
    ids = [f"s{i % 977}" if i % 13 else "" for i in range(700_000)]   # 8 MB: two blocks
    log.write_text("input_tokens,output_tokens,session_id\n" + "".join(f"10,5,{s}\n" for s in ids))
    frame, _ = load_log(log)
    assert frame["session_id"].astype(object).where(frame["session_id"].notna(), "").tolist() == ids


def test_every_token_count_falls_in_the_bin_of_the_published_grid():
    from shapeviz.workload.binning import BINS_PER_DECADE, N_BINS, bin_index

    tokens = np.arange(0, 2_500_001, dtype=np.int64)   # past the look-up table (2^20) into the formula
    expected = np.clip(np.floor(np.log10(np.maximum(tokens, 1).astype(np.float64)) * BINS_PER_DECADE), 0, N_BINS - 1)
    for kind in (np.int64, np.int32, np.float64):
        np.testing.assert_array_equal(bin_index(tokens.astype(kind)), expected.astype(np.int16), err_msg=str(kind))
    # the edges themselves: 10 tokens opens bin 16, 9 is the last of bin 15
    assert bin_index(np.array([0, 1, 9, 10, 99, 100, 20_000_000])).tolist() == [0, 0, 15, 16, 31, 32, N_BINS - 1]


def test_cached_tokens_keep_their_gaps_and_are_clipped_to_the_prompt(tmp_path):
    log = tmp_path / "cached.csv"
    log.write_text("input_tokens,output_tokens,cached_tokens\n100,5,\n100,5,-3\n100,5,250\n100,5,40.6\n100,5,0\n")
    frame, report = load_log(log)
    assert str(frame["cached_tokens"].dtype) == "Int32"
    assert frame["cached_tokens"].tolist() == [pd.NA, pd.NA, 100, 41, 0]
    assert any("clipped" in note for note in report.notes)


def test_requests_without_a_time_are_left_out_of_the_minutes_and_counted(trace):
    from shapeviz.workload.sketch import WorkloadSketch

    frame, report = load_log(trace("azure_llm_2023/AzureLLMInferenceTrace_conv.csv"))
    frame.loc[frame.index[::5], "timestamp"] = pd.NaT
    sketch = WorkloadSketch.from_frame(frame, report)
    timed = frame[frame["timestamp"].notna()]
    assert sketch.untimed == len(frame) - len(timed)
    per_minute = timed.groupby(timed["timestamp"].dt.floor("min")).size()
    assert sketch.per_minute()[sketch.per_minute() > 0].tolist() == per_minute.tolist()
    assert int(sketch.timeline["input_tokens"].sum()) == int(timed["input_tokens"].sum())
