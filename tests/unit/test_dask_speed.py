"""What the Dask engine's speed-ups of issue 40 must not change: every row of a big Parquet file counted once when
it is split between tasks, and cached tokens read from an integer column as from the same numbers in decimals."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.csv as pa_csv
import pyarrow.parquet as pq

from shapeviz.ingest import load_log
from tests.needs import require_module


def test_a_parquet_log_split_between_tasks_by_row_groups_counts_every_request_once(trace, tmp_path, monkeypatch):
    require_module("dask", "the Dask engine's task graph")
    import dask

    from shapeviz.workload import distributed
    from shapeviz.workload.sketch import WorkloadSketch

    table = pa_csv.read_csv(trace("azure_llm_2023/AzureLLMInferenceTrace_conv.csv"))
    half = table.num_rows // 2
    folder = tmp_path / "logs"
    folder.mkdir()
    # two parts of one log, with different row groups: 4 in the first, 7 in the second
    pq.write_table(table.slice(0, half), folder / "part0.parquet", row_group_size=-(-half // 4))
    pq.write_table(table.slice(half), folder / "part1.parquet", row_group_size=-(-(table.num_rows - half) // 7))
    files = distributed.expand_paths([str(folder / "*.parquet")])
    columns = distributed._columns_used(pq.ParquetFile(files[0]).schema_arrow.names, None)
    meta = pq.ParquetFile(files[0]).metadata
    two = sum(distributed.row_group_bytes(meta, g, columns) for g in (0, 1))
    monkeypatch.setattr(distributed, "PIECE_BYTES", two)   # two row groups a task, as a big file's are
    pieces = distributed._parquet_pieces(files, columns)
    assert pieces[0] == (files[0], [0, 1]) and len(pieces) > 2
    for f, groups in ((files[0], 4), (files[1], 7)):   # each file's own row groups, every one once, in order
        assert [g for path, rows in pieces if path == f for g in rows] == list(range(groups))
    sketch = dask.compute(distributed.sketch_graph(files), scheduler="sync")[0]
    frame, report = load_log(trace("azure_llm_2023/AzureLLMInferenceTrace_conv.csv"))
    whole = WorkloadSketch.from_frame(frame, report)
    assert sketch.report.rows_read == report.rows_read == table.num_rows
    assert sketch.report.rows_kept == report.rows_kept
    np.testing.assert_array_equal(sketch.counts.sum(axis=0), whole.counts.sum(axis=0))
    np.testing.assert_array_equal(sketch.input_sum.sum(axis=0), whole.input_sum.sum(axis=0))
    np.testing.assert_array_equal(sketch.per_minute().to_numpy(), whole.per_minute().to_numpy())


def test_cached_tokens_from_an_integer_column_are_those_of_the_same_numbers_in_decimals(trace, tmp_path):
    table = pa_csv.read_csv(trace("azure_llm_2023/AzureLLMInferenceTrace_conv.csv"))
    n = table.num_rows
    prompt = table.column("ContextTokens").to_numpy()
    i = np.arange(n)
    # a real log's prompts with cached prefixes: most under the prompt, some missing, negative or above it
    cached = np.where(i % 7 == 0, prompt + 5, prompt // 3).astype(np.int64)
    cached[i % 11 == 0] = -4
    generated = table.column("GeneratedTokens").to_numpy().copy()
    generated[i % 13 == 0] = 0   # failed requests: dropped, so the cached tokens of the kept rows only are read
    base = table.set_column(table.schema.get_field_index("GeneratedTokens"), "GeneratedTokens", pa.array(generated))
    missing = pa.array(i % 17 == 0)
    as_int = base.append_column("cached_tokens", pa.array(cached, pa.int32(), mask=missing.to_numpy(zero_copy_only=False)))
    as_float = base.append_column("cached_tokens", pa.array(cached.astype(np.float64), mask=missing.to_numpy(
        zero_copy_only=False)))
    for kind, log in (("int", as_int), ("float", as_float)):   # one name, so one product named after it
        (tmp_path / kind).mkdir()
        pq.write_table(log, tmp_path / kind / "conv.parquet")
    int_frame, int_report = load_log(tmp_path / "int" / "conv.parquet")
    float_frame, float_report = load_log(tmp_path / "float" / "conv.parquet")
    assert int_report.rows_kept < n   # the failed requests were dropped
    pd.testing.assert_frame_equal(int_frame, float_frame)
    assert int_report.notes == float_report.notes
    assert any("clipped" in note for note in int_report.notes)
    got = int_frame["cached_tokens"]
    assert got.isna().sum() > 0 and got.min() == 0 and (got.fillna(0) <= int_frame["input_tokens"]).all()


def test_the_local_clusters_workers_run_without_distributeds_malloc_trim(monkeypatch):
    require_module("distributed", "the Dask engine runs on a distributed LocalCluster")
    import os

    from shapeviz.workload.distributed import local_cluster

    # with glibc trimming at 64 KiB (distributed's default for its workers) every task's arrays were mapped and
    # unmapped anew: about a quarter more CPU per 5M-row Parquet task
    monkeypatch.delenv("MALLOC_TRIM_THRESHOLD_", raising=False)
    with local_cluster(1) as client:
        seen = client.run(lambda: os.environ.get("MALLOC_TRIM_THRESHOLD_"))
    assert list(seen.values()) == [None]
