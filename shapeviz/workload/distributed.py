"""The Dask engine: the workload sketch built per partition on a Dask cluster and merged on this process.

    python -m shapeviz summary 'logs/*.parquet' --engine dask                  # a LocalCluster on this machine
    python -m shapeviz summary 's3://bucket/logs/*.parquet' --engine dask --scheduler tcp://scheduler:8786

Parquet is read by pyarrow on the workers (only the columns the analyses use; a task per file, or per group of
row groups of a big file), straight into the canonical frame; every other format (CSV/TSV, JSONL, compressed) is
one ``dask.delayed`` task per file, streamed in batches by the same reader as the embedded engine. Each task
becomes a ``WorkloadSketch`` on a worker; only sketches (a few hundred KB each) travel back, merged pairwise as a
tree, so the client's memory does not grow with the data. With ``--scheduler`` the same code runs on any existing
cluster (dask-kubernetes, dask-jobqueue, a cloud Dask); ``s3://`` / ``gs://`` URLs need the matching fsspec
package (s3fs, gcsfs) on the client and the workers.
"""
from __future__ import annotations

import contextlib
import glob
import logging
import os
from pathlib import Path
from typing import Any, Iterator, Sequence

import pyarrow as pa
import pyarrow.parquet as pq

from shapeviz.ingest.columns import match_columns
from shapeviz.ingest.frame import build_frame
from shapeviz.ingest.limits import GIB, Limits
from shapeviz.ingest.projection import parquet_projection, row_group_bytes
from shapeviz.ingest.readers import RawTable, _first_line, _flatten
from shapeviz.workload.sketch import WorkloadSketch, sketch_log

# A worker streams a file in batches, so a file's size no longer bounds memory: only a sanity cap remains.
DASK_LIMITS = Limits(max_bytes_in=1024 * GIB, max_decompressed_bytes=4096 * GIB, max_rows=2**40)
_UNUSED = ("hash_ids", "session_id", "turn")   # the sketch needs none of these heavy columns
_PARQUET = (".parquet", ".pq")
# a Parquet task's columns at most this size decompressed (256 MiB, dask.dataframe.read_parquet's default
# blocksize): a 5M-row file of the usual columns is one task, a bigger file is split between its row groups
PIECE_BYTES = 256 * 2**20
TRIM_SETTING = "distributed.nanny.pre-spawn-environ.MALLOC_TRIM_THRESHOLD_"   # unset for the local cluster


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


def _parquet_pieces(files: list[str], columns: list[str]) -> list[tuple[str, list[int] | None]]:
    """The Parquet files as tasks: a file whose columns read take up to ``PIECE_BYTES`` is one task, else its
    row groups in consecutive groups of about that size (as ``dask.dataframe.read_parquet`` partitions: only the
    first file's footer is read on the client when it is small, since the files are parts of one log)."""
    def groups(path: str) -> list[list[int]]:
        with _open(path) as f:
            meta = pq.ParquetFile(f).metadata
        pieces: list[list[int]] = [[]]
        size = 0
        for g in range(meta.num_row_groups):
            part = row_group_bytes(meta, g, columns)
            if pieces[-1] and size + part > PIECE_BYTES:
                pieces.append([])
                size = 0
            pieces[-1].append(g)
            size += part
        return pieces

    first = groups(files[0])
    if len(first) == 1:
        return [(f, None) for f in files]
    return [(f, rows) for f in files for rows in (first if f == files[0] else groups(f))]


def _open(path: str) -> Any:
    """A local path or an fsspec URL, opened for reading bytes."""
    if "://" in path:
        import fsspec

        return fsspec.open(path, "rb").open()
    return open(path, "rb")


def _sketch_parquet(path: str, row_groups: list[int] | None, columns: list[str], label: str,
                    mapping: dict[str, str] | None, seed: int) -> WorkloadSketch:
    """One Parquet file (or some of its row groups) → its sketch, read by pyarrow on the worker (only
    ``columns``, text labels as dictionaries) and framed by the same canonical-frame builder: no pandas frame of
    the source columns is built on the way, and nothing but the sketch leaves the worker."""
    try:
        with _open(path) as f:
            parquet = pq.ParquetFile(f)
            # text labels as dictionaries, as the embedded engine reads them (``parquet_projection``)
            strings = [n for n in parquet_projection(parquet.schema_arrow, mapping)[1] if n in columns]
            if strings:
                parquet = pq.ParquetFile(f, read_dictionary=strings)
            table = (parquet.read(columns=columns) if row_groups is None
                     else parquet.read_row_groups(row_groups, columns=columns))
    except (pa.ArrowException, OSError, KeyError) as exc:
        # a plain ValueError: it travels back from a worker as it is (one line naming the file)
        raise ValueError(f"{path}: is not a readable Parquet file ({_first_line(exc)})") from None
    frame, report = build_frame(RawTable(_flatten(table), "parquet", "none"), label, mapping, DASK_LIMITS)
    return WorkloadSketch.from_frame(frame, report, seed=seed)


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
    """The delayed sketch of ``files``: one task per Parquet file or piece of one, one task per other file."""
    import dask

    parquet = [f for f in files if f.lower().endswith(_PARQUET)]
    others = [f for f in files if f not in parquet]
    parts: list[Any] = []
    if parquet:
        with _open(parquet[0]) as f:
            names = pq.ParquetFile(f).schema_arrow.names
        columns = _columns_used(names, mapping)
        # the files are partitions of one log: a log without a product column is named after their folder
        label = parquet[0].rsplit("/", 1)[-1] if len(parquet) == 1 else (Path(parquet[0]).parent.name or "logs")
        # read and sketch in one task per piece: a 5M-row table never travels between workers, only its sketch
        sketch_parquet = dask.delayed(_sketch_parquet, pure=True)
        parts += [sketch_parquet(f, rows, columns, label, mapping, i)
                  for i, (f, rows) in enumerate(_parquet_pieces(parquet, columns))]
    sketch_file = dask.delayed(_sketch_file, pure=True)
    parts += [sketch_file(f, mapping, len(parts) + i) for i, f in enumerate(others)]
    return _merge_tree(parts)


def sketch_paths(paths: Sequence[str | os.PathLike], *, mapping: dict[str, str] | None = None,
                 scheduler: str | None = None, workers: int | None = None) -> WorkloadSketch:
    """Sketch of every file the paths/globs/URLs name, computed on a Dask cluster (local unless ``scheduler``)."""
    try:
        from distributed import Client
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
    with local_cluster(workers or 2) as client:
        return client.compute(graph).result()


@contextlib.contextmanager
def local_cluster(workers: int) -> Iterator[Any]:
    """A client of a LocalCluster on this machine: ``workers`` processes of one thread each (the sketch is
    pandas/numpy work that holds the GIL part of the time), without distributed's ``MALLOC_TRIM_THRESHOLD_``.

    distributed sets that variable for every worker it spawns; with it glibc maps and unmaps every array past
    128 KiB anew, and a 5M-row Parquet task took about a quarter more CPU (benchmarks/README.md, issue 40).
    A value already in this process's environment (its user's, or an earlier cluster's) is kept.
    """
    import dask
    from distributed import Client, LocalCluster

    with dask.config.set({TRIM_SETTING: None}), LocalCluster(
            n_workers=workers, threads_per_worker=1, processes=True, dashboard_address=None,
            silence_logs=logging.ERROR) as cluster, Client(cluster) as client:
        yield client
