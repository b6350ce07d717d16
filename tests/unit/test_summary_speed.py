"""What `summary`'s speed-ups of issue 40 must not change: the same sessions sampled, the same turns, the same labels,
on the real traces (a faster path that answers differently is a bug, however fast)."""
from __future__ import annotations

from dataclasses import replace

import pandas as pd
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
