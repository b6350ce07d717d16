"""Awkward and hostile inputs: each loads correctly with a complete report, or fails with one clear line."""
from __future__ import annotations

import gzip
import io
import json
import tracemalloc
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from shapeviz.ingest import IngestError, Limits, load_log

DATA = Path(__file__).resolve().parents[1] / "data" / "ingest"


def _fails(source, match: str, **kwargs) -> str:
    """The IngestError message, checked to be one line naming the problem (and never a traceback)."""
    with pytest.raises(IngestError) as info:
        load_log(source, **kwargs)
    message = str(info.value)
    assert "\n" not in message and "Traceback" not in message
    assert match.lower() in message.lower(), message
    return message


def _balanced(report) -> None:
    assert report.rows_read == report.rows_kept + sum(report.dropped.values())


# ------------------------------------------------------------------------------------------- refused, clearly

@pytest.mark.parametrize(
    "name, problem",
    [
        ("empty.csv", "empty"),
        ("header_only.csv", "no data rows"),
        ("unrelated_columns.csv", "no input-token column found among [city, country, population]"),
        ("screenshot.csv", "PNG image"),
        ("truncated.csv.gz", "gzip stream is truncated"),
    ],
)
def test_unusable_files_fail_with_one_line_naming_file_problem_and_fix(name, problem):
    message = _fails(DATA / name, problem)
    assert message.startswith(f"{name}: ")
    assert ";" in message   # the fix follows the problem


def test_binary_noise_is_refused():
    noise = np.random.default_rng(1).integers(0, 256, 20_000, dtype=np.uint8).tobytes()
    _fails(noise, "binary", name="dump.csv")


def test_missing_path_and_folder_are_clear():
    _fails(DATA / "no_such_log.csv", "not found")
    _fails(DATA, "folder")


def test_unrelated_columns_message_tells_how_to_map():
    message = _fails(DATA / "unrelated_columns.csv", "--map input_tokens=")
    assert "sidebar" in message


# ------------------------------------------------------------------------------------------- encodings, delimiters

def test_utf16_with_bom_is_converted_and_noted():
    frame, report = load_log(DATA / "utf16_bom.csv")
    assert frame["input_tokens"].tolist() == [120, 800]
    assert list(frame["product"]) == ["gpt-4o", "o3-mini"]
    assert any("UTF-16" in n for n in report.notes)


def test_latin1_with_semicolons_keeps_accents_and_says_what_it_assumed():
    frame, report = load_log(DATA / "latin1.csv")
    assert list(frame["product"]) == ["café", "résumé"]
    assert any("Latin-1" in n for n in report.notes)
    assert any("';'" in n for n in report.notes)


def test_utf8_bom_tab_separated():
    frame, report = load_log(DATA / "utf8_bom.tsv")
    assert report.format == "tsv"
    assert frame["input_tokens"].tolist() == [10, 20, 30]
    assert frame["session_id"].tolist() == ["s1", "s1", "s2"]
    assert frame["turn"].tolist() == [0, 1, 0]
    assert any("BOM" in n for n in report.notes)


def test_utf16_without_bom_is_detected():
    data = "prompt_tokens,completion_tokens\n5,6\n7,8\n".encode("utf-16-le")
    frame, report = load_log(data, name="nobom.csv")
    assert frame["output_tokens"].tolist() == [6, 8]
    assert any("UTF-16" in n for n in report.notes)


@pytest.mark.parametrize("name", ["semicolon.csv", "pipe.txt"])
def test_other_delimiters(name):
    frame, report = load_log(DATA / name)
    _balanced(report)
    assert report.rows_kept == len(frame) >= 2
    assert any("delimiter" in n for n in report.notes)


def test_llmperf_seconds_become_milliseconds():
    frame, _ = load_log(DATA / "pipe.txt")
    assert frame["ttft_ms"].tolist() == [250.0, 500.0]
    assert frame["tpot_ms"].tolist() == pytest.approx([20.0, 30.0])


def test_quoted_newlines_commas_and_quotes_stay_inside_their_field():
    frame, report = load_log(DATA / "quoted_newlines.csv")
    assert report.rows_read == 3 and report.rows_kept == 3
    assert frame["input_tokens"].tolist() == [10, 30, 50]


def test_duplicated_and_empty_column_names_are_renamed_and_the_first_is_used():
    frame, report = load_log(DATA / "duplicated_columns.csv")
    assert frame["input_tokens"].tolist() == [10, 30]
    assert any("prompt_tokens.1" in n for n in report.notes)


# ------------------------------------------------------------------------------------------- bad cells

def test_every_bad_cell_is_dropped_under_its_reason_and_good_rows_load():
    frame, report = load_log(DATA / "mixed_bad_cells.csv")
    assert report.rows_read == 11
    assert report.dropped == {"malformed_row": 1, "missing_tokens": 2, "not_a_number": 2, "negative_tokens": 1,
                              "absurd_tokens": 1, "failed_request": 2}
    assert report.rows_kept == 2
    assert frame["input_tokens"].tolist() == [100, 200]
    assert report.to_dict()["rows_dropped"] == 9
    assert "9 dropped" in report.describe()


def test_absurd_limit_comes_from_limits():
    data = b"prompt_tokens,completion_tokens\n5000,10\n50,10\n"
    assert load_log(data, name="a.csv").report.rows_kept == 2
    report = load_log(data, name="a.csv", limits=Limits(max_input_tokens=1000)).report
    assert report.dropped == {"absurd_tokens": 1}


def test_mixed_types_in_json_lines_and_broken_lines():
    lines = [b'{"prompt_tokens": 10, "completion_tokens": 5}', b'{"prompt_tokens": "ten", "completion_tokens": 5}',
             b"{not json", b"[1, 2]", b'{"prompt_tokens": 12.0, "completion_tokens": "7"}']
    frame, report = load_log(b"\n".join(lines) + b"\n", name="calls.jsonl")
    assert report.rows_read == 5
    assert report.dropped == {"malformed_row": 2, "not_a_number": 1}
    assert frame["input_tokens"].tolist() == [10, 12] and frame["output_tokens"].tolist() == [5, 7]


def test_unreadable_timestamps_keep_their_rows_with_nat_and_a_note():
    data = b"timestamp,prompt_tokens,completion_tokens\n2024-05-01T10:00:00Z,10,5\nyesterday,20,6\n"
    frame, report = load_log(data, name="t.csv")
    assert report.rows_kept == 2
    assert frame["timestamp"].isna().tolist() == [False, True]
    assert any("could not be read as times" in n for n in report.notes)


# ------------------------------------------------------------------------------------------- compression and limits

def test_decompression_bomb_fails_fast_with_bounded_memory():
    # 10 GiB of zeros claimed in ~10 MB: 100 gzip members of 100 MiB each (members may be concatenated)
    member = gzip.compress(b"\0" * (100 << 20), compresslevel=1)
    bomb = member * 100
    limit = 64 << 20
    tracemalloc.start()
    try:
        _fails(bomb, "decompression limit", name="bomb.csv.gz", limits=Limits(max_decompressed_bytes=limit))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < len(bomb) + 3 * limit


@pytest.mark.parametrize("codec", ["gzip", "bz2", "zstd"])
def test_each_codec_is_detected_from_content_and_truncation_is_clear(codec):
    import bz2

    import zstandard

    body = b"input_length,output_length\n" + b"".join(b"%d,%d\n" % (i * 37 % 9000 + 1, i * 11 % 700 + 1)
                                                      for i in range(30_000))
    packed = {"gzip": gzip.compress, "bz2": bz2.compress, "zstd": zstandard.ZstdCompressor().compress}[codec](body)
    frame, report = load_log(packed, name="trace.dat")   # the name says nothing: content decides
    assert report.compression == codec and report.rows_kept == 30_000
    _fails(packed[: len(packed) // 2], f"{codec} stream is truncated", name="trace.dat")


def test_input_larger_than_the_byte_limit_is_refused_before_reading():
    _fails(b"prompt_tokens,completion_tokens\n" + b"1,2\n" * 1000, "input limit", name="big.csv",
           limits=Limits(max_bytes_in=1000))


def test_row_limit():
    _fails(b"prompt_tokens,completion_tokens\n" + b"1,2\n" * 101, "exceed the limit of 100",
           name="many.csv", limits=Limits(max_rows=100))


def test_deeply_nested_json_is_refused_not_crashed():
    deep = b'{"a":' * 50_000 + b"1" + b"}" * 50_000
    _fails(deep, "nested 50000 levels", name="deep.json")
    _fails(b"\n".join([b'{"prompt_tokens": 1, "completion_tokens": 2}', deep]), "nested", name="deep.jsonl")


def test_a_json_array_of_a_million_records():
    rng = np.random.default_rng(0)
    n = 1_000_000
    prompt, completion = rng.integers(1, 8000, n), rng.integers(0, 900, n)
    body = ",".join(f'{{"model":"m{i % 3}","usage":{{"prompt_tokens":{p},"completion_tokens":{c}}}}}'
                    for i, (p, c) in enumerate(zip(prompt, completion)))
    frame, report = load_log(("[" + body + "]").encode(), name="export.json")
    assert report.rows_read == n
    assert report.dropped == {"failed_request": int((completion == 0).sum())}
    assert len(frame) == int((completion > 0).sum())
    assert frame["input_tokens"].sum() == int(prompt[completion > 0].sum())
    assert sorted(frame["product"].cat.categories) == ["m0", "m1", "m2"]


def test_a_binary_stream_like_an_upload_widget():
    class Upload(io.BytesIO):
        name = "week_12.csv"

    upload = Upload(b"prompt_tokens,completion_tokens\n10,2\n")
    upload.read()   # the UI may have read it already
    frame, report = load_log(upload)
    assert report.source == "week_12.csv" and frame["product"].tolist() == ["week_12"]


# ------------------------------------------------------------------------------------------- JSON shapes

def test_openai_nested_usage_jsonl():
    frame, report = load_log(DATA / "openai_usage.jsonl")
    assert frame["input_tokens"].tolist() == [1200, 300]
    assert frame["output_tokens"].tolist() == [150, 2400]
    assert frame["cached_tokens"].tolist() == [1024, 0]
    assert frame["timestamp"].iloc[0] == pd.Timestamp(1717000000, unit="s", tz="UTC")
    assert report.mapping["cached_tokens"] == "usage.prompt_tokens_details.cached_tokens"
    assert any("reasoning" in n for n in report.notes)


def test_otlp_json_export_with_attribute_lists():
    frame, report = load_log(DATA / "otlp_spans.json")
    assert frame["input_tokens"].tolist() == [6000, 5800]
    assert frame["product"].tolist() == ["rag-search"] * 2
    assert frame["model"].tolist() == ["llama-3.1-70b"] * 2
    assert frame["session_id"].tolist() == ["c1", "c1"] and frame["turn"].tolist() == [0, 1]
    assert frame["e2e_ms"].tolist() == pytest.approx([2500.0, 2000.0])
    assert frame["timestamp"].iloc[0] == pd.Timestamp("2024-05-29T16:26:40Z")


def test_json_object_holding_a_records_array():
    doc = {"meta": {"exported": "2024-06-01"}, "data": [
        {"promptTokens": 10, "completionTokens": 3}, {"promptTokens": 20, "completionTokens": 4}]}
    frame, report = load_log(json.dumps(doc, indent=2).encode(), name="langfuse.json")
    assert frame["input_tokens"].tolist() == [10, 20]
    assert any("'data'" in n for n in report.notes)


def test_json_array_with_non_objects_counts_them():
    frame, report = load_log(b'[1, "x", {"prompt_tokens": 3, "completion_tokens": 4}]', name="odd.json")
    assert report.rows_read == 3 and report.dropped == {"malformed_row": 2} and len(frame) == 1


def test_nan_and_inf_in_json_numbers():
    data = b'[{"prompt_tokens": NaN, "completion_tokens": 1}, {"prompt_tokens": Infinity, "completion_tokens": 1},' \
           b' {"prompt_tokens": 4, "completion_tokens": 1}]'
    frame, report = load_log(data, name="nan.json")
    _balanced(report)
    assert report.rows_kept == 1 and frame["input_tokens"].tolist() == [4]


def test_parquet_with_nested_struct_columns():
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pa.table({"usage": pa.array([{"input_tokens": 10, "output_tokens": 2, "cache_read_input_tokens": 90,
                                          "cache_creation_input_tokens": 0}]),
                      "model": ["claude-sonnet"]})
    sink = io.BytesIO()
    pq.write_table(table, sink)
    frame, report = load_log(sink.getvalue(), name="anthropic.parquet")
    assert report.format == "parquet"
    assert frame["input_tokens"].tolist() == [100] and frame["cached_tokens"].tolist() == [90]


def test_excel_sep_line_names_the_delimiter():
    frame, report = load_log(b"sep=;\r\nprompt_tokens;completion_tokens\r\n1200;30\r\n", name="excel.csv")
    assert frame["input_tokens"].tolist() == [1200]
    assert any("sep=" in n for n in report.notes)


def test_a_csv_without_header_says_so():
    _fails(b"1200,30\n800,2500\n", "not column names", name="noheader.csv")


def test_hash_ids_written_as_text_in_a_csv():
    frame, _ = load_log(b'input_length,output_length,hash_ids\n600,5,"[1, 2]"\n', name="m.csv")
    assert frame["hash_ids"].iloc[0].tolist() == [1, 2]
