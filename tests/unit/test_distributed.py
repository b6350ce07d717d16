"""The Dask engine: the same sketch as the embedded engine, on a LocalCluster, from globs of Parquet and CSV."""
from __future__ import annotations

import json

import numpy as np
import pyarrow.csv as pa_csv
import pyarrow.parquet as pq
import pandas as pd
import pytest

from tests.needs import require_module

require_module("distributed", "the Dask engine runs on a distributed LocalCluster")

from shapeviz.cli import main  # noqa: E402
from shapeviz.ingest import load_log  # noqa: E402
from shapeviz.workload.distributed import expand_paths, sketch_paths  # noqa: E402
from shapeviz.workload.sketch import WorkloadSketch  # noqa: E402


@pytest.fixture(scope="module")
def parts(traces, tmp_path_factory):
    source = traces / "azure_llm_2023/AzureLLMInferenceTrace_conv.csv"
    table = pa_csv.read_csv(source)
    folder = tmp_path_factory.mktemp("logs")
    n = table.num_rows
    bounds = np.linspace(0, n, 4).astype(int)
    for i, (a, b) in enumerate(zip(bounds, bounds[1:])):
        piece = table.slice(a, b - a)
        if i < 2:
            pq.write_table(piece, folder / f"part{i}.parquet")
        else:
            pa_csv.write_csv(piece, folder / f"part{i}.csv")
    return source, folder


def test_dask_sketch_of_parquet_and_csv_parts_equals_the_embedded_sketch(parts):
    source, folder = parts
    frame, report = load_log(source)
    whole = WorkloadSketch.from_frame(frame, report)
    sketch = sketch_paths([str(folder / "*.parquet"), str(folder / "*.csv")], workers=1)
    assert sketch.report.rows_read == report.rows_read and sketch.report.rows_kept == report.rows_kept
    assert sketch.requests == whole.requests
    np.testing.assert_array_equal(sketch.counts.sum(axis=0), whole.counts.sum(axis=0))
    np.testing.assert_array_equal(sketch.input_sum.sum(axis=0), whole.input_sum.sum(axis=0))
    assert sketch.per_minute().sum() == whole.per_minute().sum()


def test_summary_and_plan_with_the_dask_engine_on_the_command_line(parts, capsys):
    _, folder = parts
    assert main(["summary", str(folder / "*.parquet"), "--engine", "dask", "--workers", "1", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["rows"]["kept"] == doc["traffic"]["requests"] > 0
    assert any("sketch" in note for note in doc["notes"])
    assert main(["plan", str(folder / "*.parquet"), "--engine", "dask", "--workers", "1", "--json"]) == 0
    plan = json.loads(capsys.readouterr().out)
    # the plan is for every kept request, counted by the cluster
    assert plan["workload"]["requests"] == plan["workload"]["rows_kept"] == doc["rows"]["kept"]


def test_report_with_the_dask_engine_writes_the_bundle_from_the_sketch(parts, capsys, tmp_path):
    _, folder = parts
    out = tmp_path / "bundle"
    assert main(["report", str(folder / "*.parquet"), "--engine", "dask", "--workers", "1", "--out", str(out)]) == 0
    names = {p.name for p in out.iterdir()}
    assert "shapes_per_product.csv" in names and any(n.endswith(".html") for n in names)
    table = pd.read_csv(out / "load_report.csv")
    value = dict(zip(table["section"] + ":" + table["item"], table["value"]))
    kept = int(value["rows:kept"])
    in_files = sum(pq.ParquetFile(p).metadata.num_rows for p in folder.glob("*.parquet"))
    assert int(value["rows:read"]) == kept == in_files   # every row of the two Parquet parts, none lost
    notes = table.loc[table["section"] == "note", "value"]
    # the figures come from the sketch's bounded sample, and the report says of how many of every kept request
    assert notes.str.contains(rf"report drawn from a uniform sample of [\d,]+ of {kept:,} requests").any(), notes


def test_bad_engine_options_are_one_line(capsys, tmp_path):
    assert main(["summary", "x.csv", "--scheduler", "tcp://127.0.0.1:1"]) == 2
    assert "--scheduler and --workers need --engine dask" in capsys.readouterr().err
    assert main(["summary", str(tmp_path / "*.parquet"), "--engine", "dask"]) == 2
    err = capsys.readouterr().err
    assert "no file matches" in err and "\n" == err[-1] and err.count("\n") == 1


def test_globs_and_folders_expand_to_sorted_files(parts):
    _, folder = parts
    assert [p.rsplit("/", 1)[-1] for p in expand_paths([str(folder)])] == ["part0.parquet", "part1.parquet",
                                                                           "part2.csv"]
