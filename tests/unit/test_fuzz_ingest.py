"""Property-based fuzzing of the ingest path: random CSV, JSON, JSONL and byte bodies with good and bad cells.

Whatever the body, ``load_log`` either raises ``IngestError`` (one line) or returns a frame whose report balances
(read == kept + dropped) and whose kept rows all have non-negative, in-limit token counts of the schema's dtypes.
"""
from __future__ import annotations

import csv
import gzip
import io
import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shapeviz.ingest import DEFAULT_LIMITS, INTERNAL, IngestError, load_log
from shapeviz.schema import DTYPES

COLUMNS = ["prompt_tokens", "completion_tokens", "Request tokens", "Response tokens", "Total tokens", "timestamp",
           "session_id", "model", "status", "ttft_ms", "latency", "cached_tokens", "turn", "hash_ids", "notes",
           "usage.prompt_tokens", "input_tokens", "cache_read_input_tokens"]

awkward_text = st.sampled_from(["", "NaN", "nan", "inf", "-inf", "null", "None", "1,234", "12.5", "1e3", "error", "ok",
                     "2024-05-01T10:00:00Z", "2023-11-16 18:17:03.9799600", "yesterday", "é", '"', "a\nb", ";", "|",
                     "1000", "99999-01-01", "1e400"])
exact_cells = st.one_of(st.integers(min_value=-10, max_value=5_000),
                        st.integers(min_value=-(2**63), max_value=2**63 - 1), awkward_text, st.text(max_size=8))
cells = st.one_of(exact_cells, st.floats(allow_nan=True, allow_infinity=True))

json_values = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(min_value=-(2**53), max_value=2**53),
              st.floats(allow_nan=False, allow_infinity=False), st.text(max_size=6)),
    lambda children: st.one_of(st.lists(children, max_size=3),
                               st.dictionaries(st.sampled_from(["prompt_tokens", "completion_tokens", "value", "x"]),
                                               children, max_size=3)),
    max_leaves=8,
)

# mostly plausible token counts, so that many bodies load and the accounting is exercised, not only refusals
good = st.integers(min_value=1, max_value=5_000)
mostly_good = st.one_of(good, good, good, cells)
json_cell = st.one_of(good, good, exact_cells, json_values)   # JSON has no NaN/inf: json_values brings floats

records = st.lists(
    st.fixed_dictionaries({"prompt_tokens": json_cell, "completion_tokens": json_cell},
                          optional={"model": json_cell, "session_id": json_cell, "timestamp": json_cell,
                                    "usage": json_values, "cached_tokens": json_cell, "status": json_cell,
                                    "hash_ids": json_values}),
    max_size=12)
random_records = st.lists(st.dictionaries(st.sampled_from(COLUMNS), json_cell, max_size=6), max_size=12)

FUZZ = settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _check(data: bytes, name: str) -> None:
    try:
        frame, report = load_log(data, name=name)
    except IngestError as error:
        assert "\n" not in str(error) and str(error).startswith(name)
        assert INTERNAL not in str(error), str(error)   # the safety net must never be what catches a fuzz input
        return
    assert report.rows_read == report.rows_kept + sum(report.dropped.values())
    assert report.rows_kept == len(frame)
    assert all(count > 0 for count in report.dropped.values())
    assert (frame["input_tokens"] >= 0).all() and (frame["output_tokens"] >= 0).all()
    assert (frame["input_tokens"] <= DEFAULT_LIMITS.max_input_tokens).all()
    assert (frame["output_tokens"] <= DEFAULT_LIMITS.max_output_tokens).all()
    for column in frame.columns:
        assert str(frame[column].dtype) == DTYPES[column], column
    if "cached_tokens" in frame:
        cached = frame["cached_tokens"].dropna()
        assert (cached >= 0).all() and (cached <= frame.loc[cached.index, "input_tokens"]).all()


@FUZZ
@given(extra=st.lists(st.sampled_from(COLUMNS), max_size=4),
       rows=st.lists(st.lists(mostly_good, min_size=2, max_size=7), max_size=15),
       delimiter=st.sampled_from([",", ";", "\t", "|"]),
       compress=st.booleans())
def test_random_delimited_bodies(extra, rows, delimiter, compress):
    header = ["prompt_tokens", "completion_tokens", *extra]
    buffer = io.StringIO()
    writer = csv.writer(buffer, delimiter=delimiter)
    writer.writerow(header)
    writer.writerows(rows)
    data = buffer.getvalue().encode("utf-8")
    _check(gzip.compress(data) if compress else data, "fuzz.csv")


@FUZZ
@given(body=records, as_lines=st.booleans())
def test_random_json_and_jsonl_bodies(body, as_lines):
    if as_lines:
        data = b"".join(json.dumps(r).encode() + b"\n" for r in body)
    else:
        data = json.dumps(body).encode()
    _check(data, "fuzz.jsonl" if as_lines else "fuzz.json")


@FUZZ
@given(body=random_records, as_lines=st.booleans())
def test_random_json_with_any_columns(body, as_lines):
    data = b"".join(json.dumps(r).encode() + b"\n" for r in body) if as_lines else json.dumps(body).encode()
    _check(data, "any.jsonl" if as_lines else "any.json")


@FUZZ
@given(body=records)
def test_random_jsonl_with_broken_lines(body):
    lines = [json.dumps(r) for r in body]
    for i in range(0, len(lines), 3):
        lines[i] = lines[i][: len(lines[i]) // 2]   # cut every third line in half
    _check("\n".join(lines).encode(), "broken.jsonl")


@FUZZ
@given(data=st.binary(max_size=400))
def test_random_bytes(data):
    _check(data, "noise.bin")


@FUZZ
@given(prefix=st.sampled_from([b"\x1f\x8b", b"BZh", b"\x28\xb5\x2f\xfd", b"PAR1", b"\xff\xfe", b"\xef\xbb\xbf", b"[",
                               b"{"]),
       data=st.binary(max_size=200))
def test_random_bytes_behind_a_magic_number(prefix, data):
    _check(prefix + data, "magic.log")


@pytest.mark.parametrize("body", [b"prompt_tokens,completion_tokens\n\xff\xfe\x00,1\n", b"\x00" * 64, b"[" * 10 + b"]"])
def test_examples_the_fuzzer_should_never_lose(body):
    _check(body, "edge.csv")


# Valid logs must load whole: a loader that refused every input would pass every test above, so the same shapes of
# body, with only good cells, must come back with every row kept and every token count as written.
valid_rows = st.lists(st.tuples(good, good), min_size=1, max_size=40)   # 0 output tokens is a failed request


def _check_whole(data: bytes, name: str, rows: list[tuple[int, int]]) -> None:
    frame, report = load_log(data, name=name)
    assert report.rows_read == report.rows_kept == len(rows) and not report.dropped, report
    assert frame["input_tokens"].tolist() == [i for i, _ in rows]
    assert frame["output_tokens"].tolist() == [o for _, o in rows]


@FUZZ
@given(rows=valid_rows, delimiter=st.sampled_from([",", ";", "\t", "|"]), compress=st.booleans())
def test_valid_delimited_logs_load_with_every_row(rows, delimiter, compress):
    buffer = io.StringIO()
    writer = csv.writer(buffer, delimiter=delimiter)
    writer.writerow(["prompt_tokens", "completion_tokens"])
    writer.writerows(rows)
    data = buffer.getvalue().encode("utf-8")
    _check_whole(gzip.compress(data) if compress else data, "valid.csv", rows)


@FUZZ
@given(rows=valid_rows, as_lines=st.booleans(), nested=st.booleans())
def test_valid_json_logs_load_with_every_row(rows, as_lines, nested):
    body = [{"usage": {"prompt_tokens": i, "completion_tokens": o}} if nested
            else {"prompt_tokens": i, "completion_tokens": o} for i, o in rows]
    data = b"".join(json.dumps(r).encode() + b"\n" for r in body) if as_lines else json.dumps(body).encode()
    _check_whole(data, "valid.jsonl" if as_lines else "valid.json", rows)
