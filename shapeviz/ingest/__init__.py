"""Ingest: any request log (CSV/TSV/Parquet/JSON/JSONL, plain or gzip/bz2/zstd) → the canonical frame + a report.

    >>> frame, report = load_log("AzureLLMInferenceTrace_code.csv")
    >>> report.rows_read == report.rows_kept + sum(report.dropped.values())
    True

Uploads (bytes plus the uploaded file's name) and command-line paths go through the same ``load_log``.
"""
from __future__ import annotations

from pathlib import Path
from typing import BinaryIO, Sequence

from pyarrow import ArrowException

from shapeviz.ingest.columns import ALIAS_TABLE, ALIASES, detect_columns
from shapeviz.ingest.errors import IngestError
from shapeviz.ingest.frame import REASONS, LoadedLog, LoadReport, build_frame, combine, relative_times
from shapeviz.ingest.limits import DEFAULT_LIMITS, Limits
from shapeviz.ingest.readers import display_name
from shapeviz.ingest.stream import read_table_streamed

INTERNAL = "unexpected error"

__all__ = ["load_log", "load_logs", "combine", "detect_columns", "LoadedLog", "LoadReport", "IngestError", "Limits",
           "DEFAULT_LIMITS", "ALIASES", "ALIAS_TABLE", "REASONS", "INTERNAL", "relative_times"]


def load_log(source: str | Path | bytes | BinaryIO, *, name: str | None = None,
             mapping: dict[str, str] | None = None, limits: Limits = DEFAULT_LIMITS) -> LoadedLog:
    """Read one request log into the canonical frame; every row is kept or counted as dropped by reason."""
    label = display_name(source, name)
    try:
        # streamed: limits are checked at every batch, and a file's bytes are never held whole (see stream.py)
        raw = read_table_streamed(source, label, limits, mapping)
        return build_frame(raw, label, mapping, limits)
    except IngestError:
        raise
    except MemoryError:
        raise IngestError(label, "does not fit in memory", "split the log or load a sample") from None
    except RecursionError:
        raise IngestError(label, "is nested too deeply to read", "flatten the records") from None
    except (ArrowException, ValueError, TypeError, KeyError, IndexError, OverflowError, UnicodeError) as exc:
        # a safety net, so the UI and the command line show one line, never a traceback; the fuzz tests make
        # sure no input they can build ends here
        raise IngestError(label, f"could not be read ({INTERNAL}: {type(exc).__name__}: {exc})",
                          "check the file or map the columns by hand; if the file looks right, report it") from exc


def load_logs(paths: Sequence[str | Path], mapping: dict[str, str] | None = None) -> LoadedLog:
    """One or several log files as one loaded log (several files keep their products apart)."""
    logs = [load_log(p, mapping=mapping or None) for p in paths]
    return logs[0] if len(logs) == 1 else combine(logs)
