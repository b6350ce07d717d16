"""Every ingest limit at its edge: a log exactly at the cap is read, one unit past it is refused with its message.

Caps tested only far past the limit (1e12, Infinity) let a cap a thousand times too high pass. Each case here
builds the smallest log that reaches a cap and lowers the cap through ``Limits`` (its documented parameter) to
exactly that log, then to one less: the first load keeps every row, the second is a clear ``IngestError``.
"""
from __future__ import annotations

import gzip
import io
import json
import re
from collections.abc import Callable
from pathlib import Path

import pandas as pd
import pytest

from shapeviz.ingest import IngestError, load_log
from shapeviz.ingest.limits import GIB, MIB, Limits, human_bytes

ROWS = 12
CSV = ("input_tokens,output_tokens\n" + "".join(f"{100 + i},{10 + i}\n" for i in range(ROWS))).encode()
JSONL = "".join(json.dumps({"input_tokens": 100 + i, "output_tokens": 10 + i}) + "\n" for i in range(ROWS)).encode()


def _parquet() -> bytes:
    buf = io.BytesIO()
    pd.DataFrame({"input_tokens": range(100, 100 + ROWS), "output_tokens": range(10, 10 + ROWS)}).to_parquet(buf)
    return buf.getvalue()


def _wide(columns: int) -> bytes:
    """A CSV of ``columns`` columns: the two token columns and padding."""
    names = ["input_tokens", "output_tokens"] + [f"x{i}" for i in range(columns - 2)]
    return (",".join(names) + "\n" + ",".join(["100", "10"] + ["0"] * (columns - 2)) + "\n").encode()


def _wide_parquet(columns: int) -> bytes:
    buf = io.BytesIO()
    frame = pd.DataFrame({"input_tokens": [100, 101], "output_tokens": [10, 11]})
    for i in range(columns - 2):
        frame[f"x{i}"] = 0
    frame.to_parquet(buf)
    return buf.getvalue()


def _wide_jsonl(columns: int) -> bytes:
    record = {"input_tokens": 100, "output_tokens": 10, **{f"x{i}": 0 for i in range(columns - 2)}}
    return (json.dumps(record) + "\n").encode() * 2


def _nested(depth: int) -> bytes:
    """JSONL records nested ``depth`` levels deep (the record itself is level 1)."""
    inner: object = 1
    for _ in range(depth - 1):
        inner = {"a": inner}
    return (json.dumps({"input_tokens": 100, "output_tokens": 10, "meta": inner}) + "\n").encode() * 3


def _long_header(length: int) -> bytes:
    """A CSV whose first line is ``length`` bytes before its newline."""
    head = "input_tokens,output_tokens,"
    return (head + "x" * (length - len(head)) + "\n100,10,0\n101,11,0\n").encode()


# name -> (the log's bytes, its file name, the Limits field, the value the log reaches, what the refusal says)
CASES: dict[str, tuple[Callable[[], bytes], str, str, int, str]] = {
    "input bytes, csv": (lambda: CSV, "a.csv", "max_bytes_in", len(CSV), "input limit"),
    "input bytes, gzip": (lambda: gzip.compress(CSV, mtime=0), "a.csv.gz", "max_bytes_in",
                          len(gzip.compress(CSV, mtime=0)), "input limit"),
    "decompressed bytes, gzip": (lambda: gzip.compress(CSV, mtime=0), "a.csv.gz", "max_decompressed_bytes",
                                 len(CSV), "limit"),
    "decompressed bytes, plain": (lambda: CSV, "a.csv", "max_decompressed_bytes", len(CSV), "limit"),
    "rows, csv": (lambda: CSV, "a.csv", "max_rows", ROWS, "rows"),
    "rows, jsonl": (lambda: JSONL, "a.jsonl", "max_rows", ROWS, "rows"),
    "rows, parquet": (_parquet, "a.parquet", "max_rows", ROWS, "rows"),
    "columns, csv": (lambda: _wide(40), "a.csv", "max_columns", 40, "columns"),
    "columns, jsonl": (lambda: _wide_jsonl(40), "a.jsonl", "max_columns", 40, "columns"),
    "columns, parquet": (lambda: _wide_parquet(40), "a.parquet", "max_columns", 40, "columns"),
    "header bytes": (lambda: _long_header(300), "a.csv", "max_header_bytes", 300, "first line"),
    "json depth, jsonl": (lambda: _nested(6), "a.jsonl", "max_json_depth", 6, "nested"),
    "json depth, json array": (lambda: b"[" + b",".join(_nested(6).splitlines()) + b"]", "a.json", "max_json_depth",
                               7, "nested"),
}


def _limits(field: str, value: int) -> Limits:
    # the byte caps bound one another: keep the others out of the way of the one tested
    base = dict(max_bytes_in=1 << 20, max_decompressed_bytes=1 << 21)
    base[field] = value
    return Limits(**base)


@pytest.mark.parametrize("source", ["bytes", "file", "stream"])
@pytest.mark.parametrize("case", CASES)
def test_a_log_exactly_at_a_cap_is_read_and_one_past_it_is_refused(case, source, tmp_path: Path):
    make, name, field, reached, says = CASES[case]
    data = make()
    if source == "file":
        path = tmp_path / name
        path.write_bytes(data)

    def load(value: int):
        given = path if source == "file" else io.BytesIO(data) if source == "stream" else data
        return load_log(given, name=name, limits=_limits(field, value))

    at_cap = load(reached)
    assert at_cap.report.rows_read == at_cap.report.rows_kept == len(at_cap.frame) > 0
    with pytest.raises(IngestError, match=says):
        load(reached - 1)


@pytest.mark.parametrize("column, field", [("input_tokens", "max_input_tokens"),
                                           ("output_tokens", "max_output_tokens")])
def test_a_token_count_at_its_cap_is_kept_and_one_past_it_is_dropped_as_absurd(column, field):
    cap = 5_000
    other = {"input_tokens": 100, "output_tokens": 10}
    rows = [dict(other, **{column: cap}), dict(other, **{column: cap + 1}), other]
    data = pd.DataFrame(rows).to_csv(index=False).encode()
    loaded = load_log(data, name="a.csv", limits=Limits(**{field: cap}))
    assert loaded.frame[column].tolist() == [cap, other[column]]   # the row at the cap and the plain one are kept
    assert loaded.report.dropped == {"absurd_tokens": 1}
    assert any(f"{cap:,}" in note for note in loaded.report.notes)


@pytest.mark.parametrize("field", list(Limits.__dataclass_fields__))
@pytest.mark.parametrize("value", [0, -1, True, 2.0, "10"])
def test_a_limit_that_is_not_a_positive_whole_number_is_refused_by_name(field, value):
    with pytest.raises(ValueError, match=rf"^Limits\.{field} must be a positive integer, got {re.escape(repr(value))}$"):
        Limits(**{field: value})
    assert getattr(Limits(**{field: 1}), field) == 1   # the smallest limit is one


@pytest.mark.parametrize("field", ["max_input_tokens", "max_output_tokens"])
def test_a_token_limit_must_fit_the_canonical_int32(field):
    assert getattr(Limits(**{field: 2**31 - 1}), field) == 2**31 - 1
    says = r"^Limits\.max_input_tokens / max_output_tokens must fit int32 \(<= 2147483647\)$"
    with pytest.raises(ValueError, match=says):
        Limits(**{field: 2**31})


@pytest.mark.parametrize("n, words", [(1023, "1023 B"), (1024, "1.0 KiB"), (1536, "1.5 KiB"), (MIB - 1, "1024.0 KiB"),
                                      (MIB, "1.0 MiB"), (GIB - 1, "1024.0 MiB"), (GIB, "1.0 GiB"),
                                      (2 * GIB, "2.0 GiB")])
def test_sizes_in_messages_read_in_the_largest_whole_unit(n, words):
    assert human_bytes(n) == words


def test_the_refusal_names_the_limit_in_bytes_a_user_can_read():
    data = CASES["input bytes, csv"][0]()
    with pytest.raises(IngestError, match=r"larger than the 1\.0 KiB input limit"):
        load_log(data + b"1,1\n" * 300, name="a.csv", limits=Limits(max_bytes_in=1024))
