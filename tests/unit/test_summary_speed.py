"""What `summary`'s speed-ups of issue 40 must not change: the same sessions sampled, the same turns, the same labels,
on the real traces (a faster path that answers differently is a bug, however fast)."""
from __future__ import annotations

from dataclasses import replace

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
