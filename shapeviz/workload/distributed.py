"""The Dask engine: the workload sketch built per partition on a Dask cluster and merged on this process.

    python -m shapeviz summary 'logs/*.parquet' --engine dask                  # a LocalCluster on this machine
    python -m shapeviz summary 's3://bucket/logs/*.parquet' --engine dask --scheduler tcp://scheduler:8786

Parquet is read with ``dask.dataframe.read_parquet`` (only the columns the analyses use; a partition per file or
row-group group); every other format (CSV/TSV, JSONL, compressed) is one ``dask.delayed`` task per file, streamed
in batches by the same reader as the embedded engine. Each partition becomes a ``WorkloadSketch`` on a
worker; only sketches (a few hundred KB each) travel back, merged pairwise as a tree, so the client's memory
does not grow with the data. With ``--scheduler`` the same code runs on any existing cluster (dask-kubernetes,
dask-jobqueue, a cloud Dask); ``s3://`` / ``gs://`` URLs need the matching fsspec package (s3fs, gcsfs) on
the client and the workers.
"""
from __future__ import annotations

import glob
import logging
import os
from pathlib import Path
from typing import Any, Sequence

import pandas as pd

from shapeviz.ingest.columns import match_columns
from shapeviz.ingest.frame import build_frame
from shapeviz.ingest.limits import GIB, Limits
from shapeviz.ingest.readers import RawTable, _flatten
from shapeviz.workload.sketch import WorkloadSketch, sketch_log

# A worker streams a file in batches, so a file's size no longer bounds memory: only a sanity cap remains.
DASK_LIMITS = Limits(max_bytes_in=1024 * GIB, max_decompressed_bytes=4096 * GIB, max_rows=2**40)
_UNUSED = ("hash_ids", "session_id", "turn")   # the sketch needs none of these heavy columns
_PARQUET = (".parquet", ".pq")


def expand_paths(paths: Sequence[str | os.PathLike]) -> list[str]:
    """Globs and folders → the files they name (local or fsspec URLs); one clear line when nothing matches."""
    files: list[str] = []
    for raw in paths:
        text = str(raw)
        if "://" in text:
            import fsspec

            fs, _, found = fsspec.get_fs_token_paths(text)
            protocol = fs.protocol[0] if isinstance(fs.protocol, (tuple, list)) else fs.protocol
            files += [f if "://" in f else f"{protocol}://{f}" for f in sorted(found)]
            if not found:
                raise ValueError(f"{text}: no file matches")
            continue
        if Path(text).is_dir():
            found = sorted(str(p) for p in Path(text).iterdir() if p.is_file() and not p.name.startswith("."))
        else:
            found = sorted(glob.glob(text)) if any(c in text for c in "*?[") else [text]
        if not found:
            raise ValueError(f"{text}: no file matches")
        for f in found:
            if not Path(f).exists():
                raise ValueError(f"{f}: file not found; check the path")
        files += found
    return files


def _columns_used(names: list[str], mapping: dict[str, str] | None) -> list[str]:
    chosen = {canonical: column for canonical, (column, _) in match_columns(names).items()}
    chosen.update({k: v for k, v in (mapping or {}).items() if v})
    keep = {column for canonical, column in chosen.items() if canonical not in _UNUSED}
    # Anthropic's input count leaves cached tokens in sibling columns that build_frame adds back
    return [n for n in names if n in keep or n.split(".")[0] in keep or "cache" in n.lower()]


def _sketch_partition(part: Any, label: str, mapping: dict[str, str] | None, seed: int) -> WorkloadSketch:
    """One pandas partition (source columns) → its sketch, through the same canonical-frame builder."""
    import pyarrow as pa


    table = _flatten(pa.Table.from_pandas(part, preserve_index=False))
    frame, report = build_frame(RawTable(table, "parquet", "none"), label, mapping, DASK_LIMITS)
    return WorkloadSketch.from_frame(frame, report, seed=seed)


def _sketch_series(part: Any, label: str, mapping: dict[str, str] | None,
                   partition_info: dict | None = None) -> Any:
    """``map_partitions`` form of ``_sketch_partition``: a one-item Series holding the partition's sketch."""
    seed = int((partition_info or {}).get("number", 0))
    return pd.Series([_sketch_partition(part, label, mapping, seed)], dtype=object)


def _only(series: Any) -> WorkloadSketch:
    """The sketch inside a one-item Series."""
    return series.iloc[0]


def _sketch_file(path: str, mapping: dict[str, str] | None, seed: int) -> WorkloadSketch:
    """One file of any format, streamed in batches on a worker (``keep_frame_rows=0``: nothing kept whole)."""

    if "://" in path:
        import fsspec

        with fsspec.open(path, "rb") as stream:
            return sketch_log(stream, name=path.rsplit("/", 1)[-1], mapping=mapping, limits=DASK_LIMITS,
                              keep_frame_rows=0, seed=seed).sketch
    return sketch_log(path, mapping=mapping, limits=DASK_LIMITS, keep_frame_rows=0, seed=seed).sketch


def _merge_tree(sketches: list[Any]) -> Any:
    """Pairwise merges as a balanced tree of delayed tasks (merges run on the workers; one sketch comes back)."""
    import dask

    merge = dask.delayed(WorkloadSketch.merge, pure=True)
    level = list(sketches)
    while len(level) > 1:
        level = [merge(level[i], level[i + 1]) if i + 1 < len(level) else level[i] for i in range(0, len(level), 2)]
    return level[0]


def sketch_graph(files: list[str], mapping: dict[str, str] | None = None) -> Any:
    """The delayed sketch of ``files``: ``dask.dataframe`` partitions for Parquet, one task per other file."""
    import dask

    parquet = [f for f in files if f.lower().endswith(_PARQUET)]
    others = [f for f in files if f not in parquet]
    parts: list[Any] = []
    if parquet:
        import dask.dataframe as dd
        import pyarrow.parquet as pq

        if "://" in parquet[0]:
            import fsspec

            with fsspec.open(parquet[0], "rb") as f:
                names = pq.ParquetFile(f).schema_arrow.names
        else:
            names = pq.ParquetFile(parquet[0]).schema_arrow.names
        columns = _columns_used(names, mapping)
        frame = dd.read_parquet(parquet, columns=columns)
        # the files are partitions of one log: a log without a product column is named after their folder
        label = parquet[0].rsplit("/", 1)[-1] if len(parquet) == 1 else (Path(parquet[0]).parent.name or "logs")
        # read and sketch in one task per partition (blockwise fusion): a 5M-row frame never travels between
        # workers, only its sketch does
        sketches = frame.map_partitions(_sketch_series, label, mapping, meta=pd.Series(dtype=object),
                                        enforce_metadata=False)
        parts += [dask.delayed(_only)(part) for part in sketches.to_delayed()]
    sketch_file = dask.delayed(_sketch_file, pure=True)
    parts += [sketch_file(f, mapping, len(parts) + i) for i, f in enumerate(others)]
    return _merge_tree(parts)


def sketch_paths(paths: Sequence[str | os.PathLike], *, mapping: dict[str, str] | None = None,
                 scheduler: str | None = None, workers: int | None = None) -> WorkloadSketch:
    """Sketch of every file the paths/globs/URLs name, computed on a Dask cluster (local unless ``scheduler``)."""
    try:
        from distributed import Client, LocalCluster
    except ImportError:
        raise ValueError("--engine dask needs dask and distributed: pip install 'dask[dataframe]' distributed") from None
    files = expand_paths(paths)
    graph = sketch_graph(files, mapping)
    if scheduler:
        try:
            client = Client(scheduler, timeout="20s")
        except (OSError, TimeoutError) as exc:
            raise ValueError(f"cannot reach the Dask scheduler at {scheduler} ({exc})") from None
        with client:
            return client.compute(graph).result()
    # processes, one thread each: the sketch is pandas/numpy work that holds the GIL part of the time
    with LocalCluster(n_workers=workers or 2, threads_per_worker=1, processes=True, dashboard_address=None,
                      silence_logs=logging.ERROR) as cluster, Client(cluster) as client:
        return client.compute(graph).result()
