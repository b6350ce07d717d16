"""Which columns of a Parquet log are read: the ones a mapping can use, never a payload no analysis reads.

Parquet is columnar, so a column that is not read costs nothing. A text (or binary) column that neither
auto-detection nor the user's mapping picks (prompts, responses, a 4,000-byte label repeated on 5M rows) is left
on disk; every other column is read (numbers, lists and structs are cheap, and the frame's helpers look at some
of them by name: a ``.unit`` next to a ``.value``, Anthropic's cache counters, TraceLab's timing events). Label
columns (product, model, session, status) are read dictionary-encoded, as categories: one string per distinct
name, not one per row.
"""
from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from shapeviz.ingest.columns import detect_columns, find_column

LABELS: tuple[str, ...] = ("product", "model", "session_id", "status")


def _is_text(t: pa.DataType) -> bool:
    if pa.types.is_dictionary(t):
        t = t.value_type
    return (pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_binary(t)
            or pa.types.is_large_binary(t) or pa.types.is_string_view(t) or pa.types.is_binary_view(t))


def parquet_projection(schema: pa.Schema, mapping: dict[str, str] | None) -> tuple[list[str], list[str], list[str]]:
    """(columns to read, label columns to read as dictionaries, text columns left unread)."""
    names = [str(n) for n in schema.names]
    detected = detect_columns(names)
    mapped = {}
    for canonical, wanted in (mapping or {}).items():
        if wanted is not None and str(wanted).strip():
            column = find_column(names, str(wanted))
            if column is not None:
                mapped[canonical] = column
    wanted_columns = set(detected.values()) | set(mapped.values())
    read, skipped = [], []
    for field in schema:
        if _is_text(field.type) and field.name not in wanted_columns and not field.name.endswith(".unit"):
            skipped.append(field.name)
        else:
            read.append(field.name)
    chosen = {**detected, **{k: v for k, v in mapped.items()}}
    labels = list(dict.fromkeys(chosen[c] for c in LABELS if c in chosen))
    strings = [n for n in labels if n in read and _is_text(schema.field(n).type)
               and not pa.types.is_dictionary(schema.field(n).type)]
    return read, strings, skipped


def row_group_bytes(metadata: pq.FileMetaData, group: int, columns: list[str]) -> int:
    """What the footer says the ``columns`` of one row group take once decompressed (checked before reading)."""
    wanted = set(columns)
    chunks = metadata.row_group(group)
    return sum(chunks.column(j).total_uncompressed_size for j in range(chunks.num_columns)
               if chunks.column(j).path_in_schema.split(".")[0] in wanted)


def cut_long_labels(table: pa.Table | pa.RecordBatch, max_chars: int) -> tuple[pa.Table | pa.RecordBatch, int]:
    """Dictionary-encoded text whose values are longer than ``max_chars + 1`` cut to that, as soon as it is read.

    A batch of 50,000 distinct 4,000-character names would otherwise be held as 200 MB until the frame is built;
    cut here, ``names.bound_names`` still sees them as too long, cuts them to ``max_chars`` and says so.
    Returns the table (or batch) and how many dictionary values were cut.
    """
    cut = 0
    arrays = list(table.columns)
    for i, column in enumerate(arrays):
        if not (pa.types.is_dictionary(column.type) and pa.types.is_string(column.type.value_type)):
            continue
        chunks = column.chunks if isinstance(column, pa.ChunkedArray) else [column]
        counts = [pc.sum(pc.greater(pc.utf8_length(c.dictionary), max_chars + 1)).as_py() or 0 for c in chunks]
        if not any(counts):
            continue
        # every chunk re-encoded the same way, so the column keeps one type
        short = [pc.dictionary_encode(pc.take(pc.utf8_slice_codeunits(c.dictionary, 0, max_chars + 1), c.indices))
                 for c in chunks]
        arrays[i] = pa.chunked_array(short) if isinstance(column, pa.ChunkedArray) else short[0]
        cut += sum(counts)
    if not cut:
        return table, 0
    names = table.schema.names
    if isinstance(table, pa.RecordBatch):
        return pa.RecordBatch.from_arrays(arrays, names=names), cut
    return pa.Table.from_arrays(arrays, names=names), cut
