"""Issue 30, row 9: a header built to make column matching slow is refused before matching, and matching is linear."""
from __future__ import annotations

import json

import pytest

from shapeviz.ingest import DEFAULT_LIMITS, IngestError, load_log
from shapeviz.ingest import columns as column_matching
from shapeviz.ingest.readers import delimited_columns


def test_a_csv_whose_header_is_a_million_duplicate_names_is_refused():
    data = (",".join(["a"] * 1_000_000) + "\n" + ",".join(["1"] * 1_000_000) + "\n").encode()
    assert len(data) > 2_000_000
    with pytest.raises(IngestError, match="first line is longer than 64.0 KiB"):
        load_log(data, name="wide.csv")


def test_a_header_with_more_columns_than_the_limit_is_refused_before_matching():
    head = (",".join(f"c{i}" for i in range(DEFAULT_LIMITS.max_columns + 1)) + "\n").encode()
    assert len(head) < DEFAULT_LIMITS.max_header_bytes
    with pytest.raises(IngestError, match=f"has {DEFAULT_LIMITS.max_columns + 1:,} columns"):
        delimited_columns(head, ",", False, "wide.csv", [], DEFAULT_LIMITS)


def test_json_records_wider_than_the_limit_are_refused():
    record = {"input_tokens": 100, "output_tokens": 10, **{f"attr_{i}": i for i in range(DEFAULT_LIMITS.max_columns)}}
    with pytest.raises(IngestError, match="columns, more than the"):
        load_log(json.dumps([record, record]).encode(), name="wide.json")


def test_column_matching_does_work_in_proportion_to_the_columns(monkeypatch):
    calls = [0]
    real = column_matching.norm

    def counting(name):
        calls[0] += 1
        return real(name)
    monkeypatch.setattr(column_matching, "norm", counting)
    columns = [f"attributes.span.field_{i}" for i in range(5_000)] + ["usage.prompt_tokens", "usage.completion_tokens"]
    found = column_matching.match_columns(columns)
    assert found["input_tokens"][0] == "usage.prompt_tokens" and found["output_tokens"][0] == "usage.completion_tokens"
    # a handful of normalisations per column (its name, its parts), never one per column and alias
    assert calls[0] < 10 * len(columns) + 10 * len(column_matching.ALIAS_TABLE)
