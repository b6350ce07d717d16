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
