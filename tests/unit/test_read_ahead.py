"""The read-ahead of a streamed log (``ingest.stream.read_ahead``): parsing on its own thread changes nothing a user
sees: every batch in order, a bad block's error after the good ones, the file closed when the reader stops early."""
from __future__ import annotations

import sys
import threading
import time

import pytest

from shapeviz.ingest import IngestError
from shapeviz.ingest import stream as stream_module
from shapeviz.ingest.limits import Limits
from shapeviz.ingest.stream import read_ahead, released
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


def test_waiting_for_arrow_to_let_go_of_a_stream_returns_once_it_has() -> None:
    # arrow's I/O thread can drop the last reference to a closed streaming reader (and to the Python file it wraps)
    # a moment after the read ended; if that happens while Python shuts down, the process aborts (exit 134, seen
    # under load after summary's one-line error on a wrong file). The readers wait for it while Python still runs.
    stream, held = object(), []
    refs = sys.getrefcount(stream)
    held.append(stream)                        # arrow's reference, dropped by its thread 50 ms later
    threading.Timer(0.05, held.clear).start()
    start = time.monotonic()
    assert released(stream, refs)
    assert time.monotonic() - start >= 0.04 and not held
    held.append(stream)                        # one never dropped: the wait ends, saying so
    assert not released(stream, refs, timeout_s=0.1)


@pytest.mark.parametrize("relative", ["azure_llm_2023/AzureLLMInferenceTrace_conv.csv",
                                      "mooncake_fast25/conversation_trace.jsonl.gz"])
def test_the_csv_and_jsonl_readers_end_with_arrow_holding_nothing_of_the_file(trace, monkeypatch, relative) -> None:
    waits: list[bool] = []
    wait = stream_module.released

    def recorded(stream, refs, timeout_s=1.0):   # noqa: ANN001, ANN202 - ``stream`` here is one reference more
        waits.append(wait(stream, refs + 1, 0.5))
        return waits[-1]

    monkeypatch.setattr(stream_module, "released", recorded)
    rows = sum(raw.table.num_rows for raw in stream_module.iter_tables(trace(relative), relative, Limits()))
    assert rows > 10_000 and waits == [True]   # one streamed read, and arrow let go of its file before it ended
