"""The read-ahead of a streamed log (``ingest.stream.read_ahead``): parsing on its own thread changes nothing a user
sees: every batch in order, a bad block's error after the good ones, the file closed when the reader stops early."""
from __future__ import annotations

import threading

import pytest

from shapeviz.ingest import IngestError
from shapeviz.ingest.limits import Limits
from shapeviz.ingest.stream import read_ahead
from shapeviz.workload.sketch import sketch_log


def test_every_batch_arrives_once_in_order() -> None:
    assert list(read_ahead(iter(range(1000)), depth=2)) == list(range(1000))


def test_an_error_mid_stream_reaches_the_reader_after_the_batches_before_it() -> None:
    def batches():
        yield from range(5)
        raise IngestError("log.csv", "has a broken block", "fix it")

    seen = []
    with pytest.raises(IngestError, match="has a broken block"):
        for batch in read_ahead(batches(), depth=2):
            seen.append(batch)
    assert seen == [0, 1, 2, 3, 4]   # nothing lost before the error, and the error not swallowed as an end


def test_a_reader_that_stops_early_closes_the_stream_and_its_thread() -> None:
    closed = threading.Event()

    def batches():
        try:
            yield from range(10**9)
        finally:
            closed.set()   # where iter_tables closes the file and the parser's threads

    source = batches()   # held here, so only read_ahead can close it
    ahead = read_ahead(source, depth=2)
    assert next(ahead) == 0
    ahead.close()
    assert closed.is_set()
    assert not any(t.name == "shapeviz-read-ahead" for t in threading.enumerate())


def test_a_log_past_the_row_limit_is_refused_with_its_row_count(tmp_path) -> None:
    log = tmp_path / "long.csv"
    log.write_text("input_tokens,output_tokens\n" + "100,20\n" * 1_500_000)
    with pytest.raises(IngestError, match="rows read so far exceed the limit of 1,000,000"):
        sketch_log(log, limits=Limits(max_rows=1_000_000), keep_frame_rows=0)
