"""Bytes → a raw table: source, compression, encoding and format are all detected from the content.

The raw table keeps the source's own column names (nested JSON flattened to dotted names); mapping them to the
canonical frame is the job of ``columns`` and ``frame``. pyarrow does the parsing wherever it can, since it is
an order of magnitude faster than Python; the Python paths are fallbacks for irregular JSON.
"""
from __future__ import annotations

import bz2
import csv
import io
import json
import os
import re
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO, Iterator

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.csv as pa_csv
import pyarrow.json as pa_json
import pyarrow.parquet as pq

from shapeviz.ingest.columns import detect_columns
from shapeviz.ingest.errors import IngestError
from shapeviz.ingest.exports import (
    AIPERF_FORMAT,
    GUIDELLM_FORMAT,
    aiperf_table,
    genai_perf_refusal,
    guidellm_table,
    is_benchmark_table,
    looks_like_aiperf_records,
    looks_like_benchmark,
    looks_like_guidellm,
    parse_runs,
)
from shapeviz.ingest.limits import Limits, human_bytes

Source = str | os.PathLike | bytes | bytearray | memoryview | BinaryIO

_CHUNK = 8 << 20                       # streamed decompression step: bounds the overshoot past the limit
_HEAD = 64 << 10                       # bytes sniffed for format and delimiter
_DELIMITERS = (",", "\t", ";", "|")
_FORMAT_FIX = "export the log as CSV, TSV, JSON, JSONL or Parquet (optionally gzip, bz2 or zstd)"

# magic bytes of files people upload by mistake, with what to do instead
_WRONG_FILES: tuple[tuple[bytes, str, str], ...] = (
    (b"\x89PNG", "a PNG image, not a request log", _FORMAT_FIX),
    (b"\xff\xd8\xff", "a JPEG image, not a request log", _FORMAT_FIX),
    (b"GIF8", "a GIF image, not a request log", _FORMAT_FIX),
    (b"%PDF", "a PDF document, not a request log", _FORMAT_FIX),
    (b"PK\x03\x04", "a zip archive (or an Excel workbook)", "extract the log, or save the sheet as CSV"),
    (b"\xfd7zXZ\x00", "xz-compressed, which is not supported", "recompress with gzip or zstd"),
    (b"7z\xbc\xaf\x27\x1c", "a 7-Zip archive", "extract the log first"),
    (b"SQLite format 3\x00", "an SQLite database", "export the requests table as CSV or Parquet"),
    (b"ARROW1", "an Arrow IPC file", "write it as Parquet instead"),
)


@dataclass
class RawTable:
    """A parsed log before mapping: source columns, plus what was assumed to read it."""

    table: pa.Table | pd.DataFrame     # pyarrow on the fast paths, pandas from the Python JSON fallback
    format: str                        # csv, tsv, parquet, json, jsonl
    compression: str                   # none, gzip, bz2, zstd
    malformed_rows: int = 0            # rows the parser could not read (wrong field count, bad JSON line)
    notes: list[str] = field(default_factory=list)

    @property
    def columns(self) -> list[str]:
        """Source column names, in file order."""
        return [str(c) for c in (self.table.column_names if isinstance(self.table, pa.Table) else self.table.columns)]

    @property
    def num_rows(self) -> int:
        """Rows parsed (the malformed ones excluded)."""
        return self.table.num_rows if isinstance(self.table, pa.Table) else len(self.table)

    def column(self, name: str) -> pd.Series:
        """One source column as a pandas Series (converted on demand: only mapped columns pay for it)."""
        if isinstance(self.table, pa.Table):
            return self.table.column(name).to_pandas()
        return self.table[name].reset_index(drop=True)

    def arrow(self, name: str) -> pa.ChunkedArray | None:
        """One source column as arrow, when the table is arrow (for list/struct columns)."""
        return self.table.column(name) if isinstance(self.table, pa.Table) else None


def display_name(source: Source, name: str | None) -> str:
    """The file name shown in messages and used for the fallback product."""
    if name:
        return Path(str(name)).name
    if isinstance(source, (str, os.PathLike)):
        return Path(source).name
    stream_name = getattr(source, "name", None)
    if isinstance(stream_name, str) and stream_name:
        return Path(stream_name).name
    return "uploaded log"


def too_big(label: str, limits: Limits, size: int | None = None) -> IngestError:
    """The one line for a source over ``max_bytes_in`` (its size when known)."""
    what = f"{human_bytes(size)} " if size is not None else ""
    return IngestError(label, f"{what}is larger than the {human_bytes(limits.max_bytes_in)} input limit",
                       "split the log, compress it, or raise Limits.max_bytes_in")


def checked_path(source: str | os.PathLike, label: str, limits: Limits) -> tuple[Path, int]:
    """A log file that exists, is a file and is within ``max_bytes_in``: its path and size."""
    path = Path(source)
    if not path.exists():
        raise IngestError(label, f"file not found at {str(path)!r}", "check the path")
    if path.is_dir():
        raise IngestError(label, "is a folder, not a file", "pass the log file itself")
    size = path.stat().st_size
    if size > limits.max_bytes_in:
        raise too_big(label, limits, size)
    return path, size


def unreadable(label: str, exc: OSError) -> IngestError:
    """The one line for a file the process may not read."""
    return IngestError(label, f"cannot be read ({exc.strerror or exc})", "check the file's permissions")


def rewind(source: BinaryIO) -> None:
    """Back to the start of a stream that may have been read before (Streamlit's UploadedFile), where it can."""
    if hasattr(source, "seek"):
        try:
            source.seek(0)
        except (OSError, ValueError):
            pass


def read_bytes(source: Source, label: str, limits: Limits) -> bytes:
    """All bytes of a path, bytes object or binary stream, refusing more than ``max_bytes_in``."""
    if isinstance(source, (bytes, bytearray, memoryview)):
        data = bytes(source)
    elif isinstance(source, (str, os.PathLike)):
        path, _ = checked_path(source, label, limits)
        try:
            data = path.read_bytes()
        except OSError as exc:
            raise unreadable(label, exc) from None
    elif hasattr(source, "read"):
        rewind(source)
        data = source.read(limits.max_bytes_in + 1)
        if isinstance(data, str):
            data = data.encode("utf-8")
    else:
        raise IngestError(label, f"unsupported source type {type(source).__name__}",
                          "pass a path, bytes or a binary file object")
    if len(data) > limits.max_bytes_in:
        raise too_big(label, limits)
    return data


def decompress(data: bytes, label: str, limits: Limits) -> tuple[bytes, str]:
    """Undo gzip/bz2/zstd (detected by magic bytes), streamed and stopped at ``max_decompressed_bytes``."""
    if data[:2] == b"\x1f\x8b":
        return _bounded(_gunzip_chunks(data, label), label, "gzip", limits), "gzip"
    if data[:3] == b"BZh":
        return _bounded(_bunzip_chunks(data, label), label, "bz2", limits), "bz2"
    if data[:4] == b"\x28\xb5\x2f\xfd":
        return _bounded(_unzstd_chunks(data, label), label, "zstd", limits), "zstd"
    if len(data) > limits.max_decompressed_bytes:
        raise IngestError(label, f"{human_bytes(len(data))} exceeds the {human_bytes(limits.max_decompressed_bytes)}"
                          " limit", "split the log or raise Limits.max_decompressed_bytes")
    return data, "none"


def _bounded(chunks: Iterator[bytes], label: str, kind: str, limits: Limits) -> bytes:
    parts: list[bytes] = []
    total = 0
    for chunk in chunks:
        total += len(chunk)
        if total > limits.max_decompressed_bytes:
            raise IngestError(label, f"{kind} data expands past the {human_bytes(limits.max_decompressed_bytes)}"
                              " decompression limit (a decompression bomb, or a log too large for one load)",
                              "split the log or raise Limits.max_decompressed_bytes")
        parts.append(chunk)
    return b"".join(parts)


def _truncated(label: str, kind: str) -> IngestError:
    return IngestError(label, f"the {kind} stream is truncated or corrupt (the file ends early)",
                       "re-download or re-compress the file")


def _gunzip_chunks(data: bytes, label: str) -> Iterator[bytes]:
    # gzip files may hold several members back to back (e.g. concatenated daily logs): read them all
    rest = data
    while rest:
        engine = zlib.decompressobj(wbits=31)
        pending = rest
        try:
            while not engine.eof:
                # max_length bounds each step's output, so a bomb never materialises past the limit
                chunk = engine.decompress(pending, _CHUNK)
                pending = engine.unconsumed_tail
                if not chunk and not pending:
                    break
                yield chunk
        except zlib.error:
            raise _truncated(label, "gzip") from None
        if not engine.eof:
            raise _truncated(label, "gzip")
        rest = engine.unused_data
        if rest.strip(b"\x00") == b"":   # some writers pad the last member with zeros
            break


def _bunzip_chunks(data: bytes, label: str) -> Iterator[bytes]:
    rest = data
    while rest:
        engine = bz2.BZ2Decompressor()
        try:
            yield engine.decompress(rest, _CHUNK)
            while not engine.eof and not engine.needs_input:
                yield engine.decompress(b"", _CHUNK)
        except (OSError, ValueError, EOFError):
            raise _truncated(label, "bz2") from None
        if not engine.eof:
            raise _truncated(label, "bz2")
        rest = engine.unused_data


def _unzstd_chunks(data: bytes, label: str) -> Iterator[bytes]:
    import zstandard

    # zstd has no output cap per call, so feed small inputs while the expansion ratio is high: one step then
    # yields at most ~_CHUNK bytes, even for a bomb; ordinary logs (ratio ~10) are fed 1 MiB at a time
    position, feed = 0, 1 << 10
    while position < len(data):
        engine = zstandard.ZstdDecompressor().decompressobj()
        try:
            while position < len(data) and not engine.eof:
                piece = data[position:position + feed]
                position += len(piece)
                out = engine.decompress(piece)
                ratio = len(out) / len(piece)
                feed = int(min(1 << 20, max(1 << 10, _CHUNK / max(ratio, 1.0))))
                yield out
        except zstandard.ZstdError:
            raise _truncated(label, "zstd") from None
        if not engine.eof:
            raise _truncated(label, "zstd")
        # bytes past the end of a frame belong to the next frame (concatenated frames are valid zstd)
        position -= len(engine.unused_data)


def _check_not_binary(head: bytes, label: str) -> None:
    for magic, what, fix in _WRONG_FILES:
        if head.startswith(magic):
            raise IngestError(label, f"looks like {what}", fix)
    if len(head) >= 4 and (head[257:262] == b"ustar"):
        raise IngestError(label, "looks like a tar archive", "extract the log first")
    sample = np.frombuffer(head[:4096], dtype=np.uint8)
    if sample.size == 0:
        return
    # control bytes other than tab/newline/CR do not occur in text logs (UTF-16 is decoded before this check)
    control = (sample < 32) & ~np.isin(sample, (9, 10, 13))
    if control.mean() > 0.05:
        raise IngestError(label, "is binary data, not a text or Parquet request log", _FORMAT_FIX)


def decode_text(data: bytes, label: str, notes: list[str]) -> bytes:
    """Normalise the text to UTF-8 bytes: strip a UTF-8 BOM, transcode UTF-16; Latin-1 is handled at parse time."""
    if data.startswith(b"\xef\xbb\xbf"):
        notes.append("encoding: UTF-8 with BOM (BOM removed)")
        return data[3:]
    for bom, codec in ((b"\xff\xfe", "utf-16-le"), (b"\xfe\xff", "utf-16-be")):
        if data.startswith(bom):
            notes.append(f"encoding: UTF-16 ({codec[-2:].upper()}, from its BOM), converted to UTF-8")
            return _transcode(data[2:], codec, label)
    head = data[:4096]
    if len(head) >= 4:
        # UTF-16 without a BOM: ASCII text leaves every other byte zero
        even_zero = head[0::2].count(0) / max(1, len(head[0::2]))
        odd_zero = head[1::2].count(0) / max(1, len(head[1::2]))
        if odd_zero > 0.4 and even_zero < 0.05:
            notes.append("encoding: UTF-16 LE assumed (no BOM, every other byte zero), converted to UTF-8")
            return _transcode(data, "utf-16-le", label)
        if even_zero > 0.4 and odd_zero < 0.05:
            notes.append("encoding: UTF-16 BE assumed (no BOM, every other byte zero), converted to UTF-8")
            return _transcode(data, "utf-16-be", label)
    return data


def _transcode(data: bytes, codec: str, label: str) -> bytes:
    try:
        return data.decode(codec).encode("utf-8")
    except UnicodeDecodeError:
        raise IngestError(label, f"is not valid {codec.upper()} text", "save the log as UTF-8") from None


def _is_utf8(data: bytes) -> bool:
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def sniff_format(text_head: bytes, single_line: bool = False) -> str:
    """``csv``, ``json`` or ``jsonl`` from the first bytes of decoded text (Parquet is checked before)."""
    stripped = text_head.lstrip()
    if stripped.startswith(b"["):
        return "json"
    if stripped.startswith(b"{"):
        if single_line:
            return "json"   # one object: a record, or a container such as {"data": [...]}
        first_line = stripped.split(b"\n", 1)[0].strip()
        try:
            return "jsonl" if isinstance(json.loads(first_line), dict) else "json"
        except (ValueError, RecursionError):
            return "json"   # an object spread over several lines (pretty-printed), or absurdly deep
    return "csv"


def sniff_delimiter(text_head: bytes) -> str:
    """The delimiter that splits the first lines into the same, largest number of fields."""
    text = text_head.decode("utf-8", errors="replace")
    lines = text.splitlines()[:50]
    if len(text_head) >= _HEAD and len(lines) > 1:
        lines = lines[:-1]   # the last line of a cut head is probably partial
    best, best_score = ",", (0, 0)
    for delimiter in _DELIMITERS:
        try:
            counts = [len(row) for row in csv.reader(lines, delimiter=delimiter) if row]
        except csv.Error:
            continue
        if not counts or counts[0] < 2:
            continue
        consistent = sum(c == counts[0] for c in counts)
        score = (consistent, counts[0])
        if score > best_score:
            best, best_score = delimiter, score
    return best


_NON_SPACE = re.compile(rb"\S")


def _blank(data: bytes) -> bool:
    # no copy of a large buffer: the search stops at the first visible character
    return _NON_SPACE.search(data) is None


def _single_line(data: bytes) -> bool:
    first = _NON_SPACE.search(data)
    newline = data.find(b"\n", first.start()) if first else -1
    return newline < 0 or _NON_SPACE.search(data, newline) is None


def read_table(source: Source, label: str, limits: Limits) -> RawTable:
    """Any supported log → ``RawTable`` (size, decompression and nesting limits enforced)."""
    raw = read_bytes(source, label, limits)
    if _blank(raw):
        raise IngestError(label, "the file is empty", "export the log again, with its header row")
    data, compression = decompress(raw, label, limits)
    del raw
    if _blank(data):
        raise IngestError(label, f"the file is empty once decompressed ({compression})",
                          "export the log again, with its header row")
    if data[:4] == b"PAR1":
        return _read_parquet(data, label, compression, limits)
    notes: list[str] = []
    data = decode_text(data, label, notes)
    _check_not_binary(data[:_HEAD], label)
    fmt = sniff_format(data[:_HEAD], single_line=_single_line(data))
    if fmt == "csv":
        return _read_delimited(data, label, compression, limits, notes)
    return _read_json(data, label, compression, fmt, limits, notes)


# ---------------------------------------------------------------------------------------------- Parquet

def _read_parquet(data: bytes, label: str, compression: str, limits: Limits) -> RawTable:
    try:
        parquet = pq.ParquetFile(pa.BufferReader(data))
        rows = parquet.metadata.num_rows
        if rows > limits.max_rows:
            raise _too_many_rows(label, rows, limits)
        names = parquet.schema_arrow.names
        strings = [n for n in _label_columns(names) if _is_text(parquet.schema_arrow.field(n).type)]
        if strings:
            parquet = pq.ParquetFile(pa.BufferReader(data), read_dictionary=strings)
        table = parquet.read()
    except IngestError:
        raise
    except (pa.ArrowException, OSError, ValueError) as exc:
        raise IngestError(label, f"is not a readable Parquet file ({_first_line(exc)})",
                          "write it again with pyarrow or pandas, or export CSV") from None
    return RawTable(_flatten(table), "parquet", compression)


# ---------------------------------------------------------------------------------------------- CSV / TSV

def delimited_columns(head: bytes, delimiter: str, excel: bool, label: str, notes: list[str],
                      limits: Limits) -> tuple[str, list[str]]:
    """The format (csv/tsv) and unique column names of a delimited log's header, or one line saying why it has none.

    Shared by the whole-buffer reader and the streaming one, so both name the same columns and say the same.
    The header's size and its number of columns are checked before a name is matched or renamed.
    """
    fmt = {"\t": "tsv"}.get(delimiter, "csv")
    if delimiter not in (",", "\t") and not excel:
        notes.append(f"delimiter: {delimiter!r} detected")
    first_line = head.find(b"\n", 0, limits.max_header_bytes + 1)
    if first_line < 0 and len(head) >= limits.max_header_bytes:
        raise IngestError(label, f"its first line is longer than {human_bytes(limits.max_header_bytes)}, too long "
                          "for a header of column names", "export only the columns the log needs")
    header = _header(head, delimiter)
    if len(header) > limits.max_columns:
        raise too_many_columns(label, len(header), limits)
    if not header or not any(header):
        raise IngestError(label, "has no header row", "export the log with column names in the first line")
    if all(_NUMBER.fullmatch(name) for name in header):
        raise IngestError(label, f"the first line holds numbers ({', '.join(header[:6])}), not column names",
                          "add a header row (e.g. input_tokens,output_tokens)")
    names, renamed = _unique_names(header)
    if renamed:
        notes.append(f"duplicated or empty column names renamed: {', '.join(renamed)}")
    return fmt, names


def _read_delimited(data: bytes, label: str, compression: str, limits: Limits, notes: list[str]) -> RawTable:
    excel = _EXCEL_SEP.match(data[:64])
    if excel:
        # Excel's "sep=;" first line names the delimiter; the header follows it
        delimiter = excel.group(1).decode("latin-1")
        data = data[excel.end():]
        notes.append(f"delimiter: {delimiter!r} from Excel's sep= line")
    else:
        delimiter = sniff_delimiter(data[:_HEAD])
    fmt, names = delimited_columns(data, delimiter, bool(excel), label, notes, limits)
    malformed: list[int] = [0]

    def skip_row(row: Any) -> str:
        malformed[0] += 1
        return "skip"

    def parse(encoding: str) -> pa.Table:
        malformed[0] = 0
        return pa_csv.read_csv(
            io.BytesIO(data),
            read_options=pa_csv.ReadOptions(column_names=names, skip_rows=1, encoding=encoding,
                                            block_size=16 << 20),
            parse_options=pa_csv.ParseOptions(delimiter=delimiter, invalid_row_handler=skip_row,
                                               # quoted newlines need the slower, exact parser
                                               newlines_in_values=b'"' in data),
            convert_options=pa_csv.ConvertOptions(strings_can_be_null=True,
                                                  timestamp_parsers=[pa_csv.ISO8601],
                                                  # labels are hashed once, by the parser's threads
                                                  column_types={n: _LABEL_TYPE for n in _label_columns(names)}),
        )

    try:
        try:
            table = parse("utf8")
            _validate_utf8(table)
        except pa.ArrowInvalid as exc:
            if "utf8" not in str(exc).lower() and "utf-8" not in str(exc).lower():
                raise
            notes.append("encoding: not valid UTF-8, read as Latin-1 (Windows exports often are)")
            table = parse("latin1")
    except pa.ArrowException as exc:
        raise IngestError(label, f"cannot be parsed as {fmt.upper()} ({_first_line(exc)})",
                          "check that every line has the header's number of fields") from None
    if table.num_rows + malformed[0] > limits.max_rows:
        raise _too_many_rows(label, table.num_rows + malformed[0], limits)
    if table.num_rows == 0 and malformed[0] == 0:
        raise IngestError(label, f"has a header ({', '.join(names[:8])}) but no data rows",
                          "export the log again with its rows")
    return RawTable(table, fmt, compression, malformed[0], notes)


_EXCEL_SEP = re.compile(rb"sep=([,;\t|])[ \t]*\r?\n")
_NUMBER = re.compile(r"[-+]?\d+(?:\.\d*)?(?:[eE][-+]?\d+)?")
_LABEL_TYPE = pa.dictionary(pa.int32(), pa.string())


def _is_text(t: pa.DataType) -> bool:
    return pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_string_view(t)


def _label_columns(names: list[str]) -> list[str]:
    """Source columns auto-detection maps to a label (product, model, session, status): read them as categories."""
    detected = detect_columns(names)
    return list(dict.fromkeys(detected[c] for c in ("product", "model", "session_id", "status") if c in detected))


def _validate_utf8(table: pa.Table) -> None:
    # pyarrow's CSV reader types a column with invalid UTF-8 as binary instead of failing
    for column in table.schema:
        if pa.types.is_binary(column.type) or pa.types.is_large_binary(column.type):
            raise pa.ArrowInvalid(f"column {column.name!r} is not valid UTF8")


def too_many_columns(label: str, columns: int, limits: Limits) -> IngestError:
    """The one line for a log wider than ``Limits.max_columns``."""
    return IngestError(label, f"has {columns:,} columns, more than the {limits.max_columns:,} a request log can have",
                       "export only the columns the log needs")


def _header(data: bytes, delimiter: str) -> list[str]:
    head = data[:_HEAD].decode("utf-8", errors="replace")
    if not _is_utf8(data[:_HEAD]):
        head = data[:_HEAD].decode("latin-1")
    try:
        row = next(csv.reader(io.StringIO(head), delimiter=delimiter), [])
    except csv.Error:
        row = head.splitlines()[0].split(delimiter) if head else []
    return [cell.strip() for cell in row]


def _unique_names(header: list[str]) -> tuple[list[str], list[str]]:
    """pandas-style ``name.1`` for repeated names and ``column_<i>`` for empty ones."""
    seen: dict[str, int] = {}
    names, renamed = [], []
    for i, name in enumerate(header):
        new = name or f"column_{i + 1}"
        if new in seen:
            seen[new] += 1
            new = f"{new}.{seen[name]}"
        seen.setdefault(new, 0)
        if new != name:
            renamed.append(f"{name or '(empty)'} → {new}")
        names.append(new)
    return names, renamed


# ---------------------------------------------------------------------------------------------- JSON / JSONL

def _read_json(data: bytes, label: str, compression: str, fmt: str, limits: Limits, notes: list[str]) -> RawTable:
    shape = scan_json(data)
    depth = shape.max_depth
    if depth > limits.max_json_depth:
        raise IngestError(label, f"JSON is nested {depth} levels deep, past the limit of {limits.max_json_depth}",
                          "flatten the records, or raise Limits.max_json_depth")
    if looks_like_benchmark(data):
        # a serving benchmark's result: a few objects of long per-request arrays, read columnar (a 100k-request
        # vLLM result as Python floats would cost gigabytes); build_frame turns each run into its requests
        runs = parse_runs(data)
        if runs is not None and is_benchmark_table(runs):
            if runs.num_rows > limits.max_rows:
                raise _too_many_rows(label, runs.num_rows, limits)
            return RawTable(runs, fmt, compression, 0, notes)
    records_table = _load_test_records(data, label, limits)
    if records_table is not None:
        table, fmt_said, malformed, more = records_table
        return RawTable(table, f"{fmt}: {fmt_said}", compression, malformed, [*notes, *more])
    if fmt == "jsonl":
        table = _arrow_jsonl(data)
        if table is not None and not _needs_python(table):
            if table.num_rows > limits.max_rows:
                raise _too_many_rows(label, table.num_rows, limits)
            return RawTable(_flatten(table), "jsonl", compression, 0, notes)
        records, malformed = _python_jsonl(data, label, notes)
    else:
        table = _arrow_array(data, shape) if data.lstrip()[:1] == b"[" else None
        if table is not None and not _needs_python(table):
            if table.num_rows > limits.max_rows:
                raise _too_many_rows(label, table.num_rows, limits)
            return RawTable(_flatten(table), "json", compression, 0, notes)
        records, malformed = _python_json(data, label, notes)
    if len(records) + malformed > limits.max_rows:
        raise _too_many_rows(label, len(records) + malformed, limits)
    if not records and not malformed:
        raise IngestError(label, "holds no records", "export at least one request")
    return RawTable(_records_table(records), fmt, compression, malformed, notes)


def _load_test_records(data: bytes, label: str, limits: Limits) -> tuple[pa.Table, str, int, list[str]] | None:
    """guidellm reports and aiperf per-request records as one row per request (``exports``); genai-perf refused."""
    genai_perf_refusal(data, label)
    if looks_like_aiperf_records(data):
        table, malformed, more = aiperf_table(data, label)
        fmt_said = AIPERF_FORMAT
    elif looks_like_guidellm(data):
        try:
            document = json.loads(data.decode("utf-8-sig"))
        except (UnicodeDecodeError, ValueError, RecursionError):
            return None   # the tolerant JSON path says what is wrong
        found = guidellm_table(document, label)
        if found is None:
            return None
        (table, more), malformed, fmt_said = found, 0, GUIDELLM_FORMAT
    else:
        return None
    if table.num_rows > limits.max_rows:
        raise _too_many_rows(label, table.num_rows, limits)
    return table, fmt_said, malformed, more


@dataclass
class JsonShape:
    """What one vectorised pass over JSON text finds: nesting depth and the top-level array's record boundaries."""

    max_depth: int
    separators: np.ndarray   # offsets of the commas between top-level array items
    brackets: np.ndarray     # offsets of the outer [ and ]


def scan_json(data: bytes) -> JsonShape:
    """Depth and top-level structure of JSON text, looking only at structural bytes (quotes, brackets, commas)."""
    depth, in_string, prev = 0, 0, 0
    max_depth = 0
    separators: list[np.ndarray] = []
    brackets: list[np.ndarray] = []
    for start in range(0, len(data), _CHUNK):
        b = np.frombuffer(data, dtype=np.uint8, count=min(_CHUNK, len(data) - start), offset=start)
        idx = np.flatnonzero((b == 34) | (b == 44) | (b == 91) | (b == 93) | (b == 123) | (b == 125))
        c = b[idx]
        before = np.where(idx > 0, b[np.maximum(idx - 1, 0)], prev)
        prev = int(b[-1])
        # a quote after a backslash is escaped (a rare ``\\"`` pair is miscounted: it only shifts the depth)
        quote = (c == 34) & (before != 92)
        parity = (np.cumsum(quote, dtype=np.int64) + in_string) & 1
        outside = (parity == 0) & ~quote
        opening = outside & ((c == 123) | (c == 91))
        closing = outside & ((c == 125) | (c == 93))
        running = depth + np.cumsum(opening.astype(np.int64) - closing)
        if running.size:
            max_depth = max(max_depth, int(running.max()))
            depth = int(running[-1])
            in_string = int(parity[-1])
        separators.append(start + idx[outside & (c == 44) & (running == 1)])
        brackets.append(start + idx[(outside & (c == 91) & (running == 1)) | (outside & (c == 93) & (running == 0))])
    empty = np.zeros(0, dtype=np.int64)
    return JsonShape(max_depth, np.concatenate(separators) if separators else empty,
                     np.concatenate(brackets) if brackets else empty)


def json_depth(data: bytes) -> int:
    """Maximum nesting of ``{``/``[`` outside strings (pyarrow's parser crashes on absurdly deep input)."""
    return scan_json(data).max_depth


def _array_as_lines(data: bytes, shape: JsonShape) -> bytearray:
    """``[{..},{..}]`` → ``{..}\\n{..}``: the top-level commas become newlines, so pyarrow can read the records."""
    out = bytearray(data)
    view = np.frombuffer(out, dtype=np.uint8)
    view[shape.separators] = 10
    view[shape.brackets] = 32
    return out


def _arrow_jsonl(data: bytes) -> pa.Table | None:
    try:
        return pa_json.read_json(io.BytesIO(data), read_options=pa_json.ReadOptions(block_size=16 << 20))
    except (pa.ArrowException, OSError):
        return None   # irregular lines or types: the tolerant Python path counts them one by one


def _arrow_array(data: bytes, shape: JsonShape) -> pa.Table | None:
    lines = _array_as_lines(data, shape)
    try:
        table = pa_json.read_json(pa.BufferReader(pa.py_buffer(lines)), read_options=pa_json.ReadOptions(
            block_size=16 << 20), parse_options=pa_json.ParseOptions(newlines_in_values=True))
    except (pa.ArrowException, OSError):
        return None   # items that are not objects, or irregular types: the Python path sorts them out
    return table


def _needs_python(table: pa.Table) -> bool:
    # OpenTelemetry's OTLP JSON keeps attributes as [{"key":..., "value": {...}}]: unpack those in Python
    for column in table.schema:
        t = column.type
        if pa.types.is_list(t) and pa.types.is_struct(t.value_type):
            names = {t.value_type.field(i).name for i in range(t.value_type.num_fields)}
            if {"key", "value"} <= names:
                return True
    return False


def _python_jsonl(data: bytes, label: str, notes: list[str]) -> tuple[list[dict], int]:
    text = _decode_python(data, notes)
    records: list[dict] = []
    malformed = 0
    for line in text.splitlines():
        if not line.strip():
            continue
        try:
            value = json.loads(line)
        except (ValueError, RecursionError):
            malformed += 1
            continue
        if isinstance(value, dict):
            records.append(_flatten_record(value))
        else:
            malformed += 1
    if malformed:
        notes.append(f"{malformed:,} JSONL lines were not JSON objects")
    return records, malformed


def _python_json(data: bytes, label: str, notes: list[str]) -> tuple[list[dict], int]:
    text = _decode_python(data, notes)
    try:
        document = json.loads(text)
    except RecursionError:
        raise IngestError(label, "JSON is nested too deeply", "flatten the records") from None
    except ValueError as exc:
        raise IngestError(label, f"is not valid JSON ({_first_line(exc)})",
                          "check the file is complete, or export JSONL (one object per line)") from None
    records, where = _find_records(document)
    if records is None:
        raise IngestError(label, "JSON holds no array of request records",
                          "export an array of objects, or one object per line (JSONL)")
    if where:
        notes.append(f"records read from the JSON key {where!r}")
    out = []
    for record in records:
        if isinstance(record, dict):
            out.append(_flatten_record(record))
    if len(out) < len(records):
        notes.append(f"{len(records) - len(out):,} array items were not objects (counted as malformed rows)")
    return out, len(records) - len(out)


def _decode_python(data: bytes, notes: list[str]) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        notes.append("encoding: not valid UTF-8, read as Latin-1")
        return data.decode("latin-1")


_RECORD_KEYS = ("data", "records", "rows", "items", "results", "requests", "traces", "spans", "observations",
                "runs", "events", "logs", "generations")


def _find_records(document: Any) -> tuple[list | None, str]:
    """The list of records in a JSON document: the document itself, a well-known key, or OTLP's spans."""
    if isinstance(document, list):
        return document, ""
    if not isinstance(document, dict):
        return None, ""
    if _looks_like_record(document):
        return [document], ""   # one request (its lists, e.g. timing_events, are fields, not records)
    found, where = _find_container(document)
    return (found, where) if found is not None else ([document], "")


def _looks_like_record(document: dict) -> bool:
    detected = detect_columns(list(_flatten_record(document)))
    return "input_tokens" in detected or "output_tokens" in detected


def _find_container(document: dict, depth: int = 0) -> tuple[list | None, str]:
    if "resourceSpans" in document:   # OpenTelemetry OTLP JSON export
        # each span keeps its resource (service.name lives there), flattened beside the span's own attributes
        spans = [span | {"resource": resource.get("resource") or {}}
                 for resource in document.get("resourceSpans") or []
                 for scope in (resource.get("scopeSpans") or resource.get("instrumentationLibrarySpans") or [])
                 for span in scope.get("spans") or [] if isinstance(span, dict)]
        return spans, "resourceSpans[].scopeSpans[].spans"
    keys = [k for k in _RECORD_KEYS if isinstance(document.get(k), list)]
    keys += [k for k, v in document.items() if k not in keys and isinstance(v, list) and v and isinstance(v[0], dict)]
    if keys:
        return document[keys[0]], keys[0]
    if depth < 2:
        for key, value in document.items():   # a level or two down, e.g. {"result": {"data": [...]}}
            if isinstance(value, dict):
                found, where = _find_container(value, depth + 1)
                if found is not None:
                    return found, f"{key}.{where}"
    return None, ""


def _unwrap_otlp_value(value: Any) -> Any:
    # OTLP AnyValue: {"intValue": "12"} / {"stringValue": "x"} / {"doubleValue": 1.5} ...
    if isinstance(value, dict) and len(value) == 1:
        (kind, inner), = value.items()
        if kind == "intValue":
            try:
                return int(inner)
            except (TypeError, ValueError):
                return inner
        if kind in ("stringValue", "doubleValue", "boolValue"):
            return inner
    return value


def _flatten_record(record: dict, prefix: str = "", out: dict | None = None) -> dict:
    """``{"usage": {"prompt_tokens": 1}}`` → ``{"usage.prompt_tokens": 1}``; OTLP attribute lists become keys."""
    out = {} if out is None else out
    for key, value in record.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            _flatten_record(value, f"{name}.", out)
        elif (isinstance(value, list) and value and all(isinstance(v, dict) and "key" in v and "value" in v
                                                         for v in value)):
            for item in value:
                out[f"{name}.{item['key']}"] = _unwrap_otlp_value(item["value"])
        else:
            out[name] = value
    return out


def _records_table(records: list[dict]) -> pa.Table | pd.DataFrame:
    """Flat records → arrow when the types are regular, else a pandas frame of objects (mixed types kept)."""
    try:
        return _flatten(pa.Table.from_pylist(records))
    except (pa.ArrowException, TypeError, ValueError, OverflowError):
        return pd.DataFrame.from_records(records)


def _flatten(table: pa.Table) -> pa.Table:
    """Struct columns → dotted columns, recursively (``usage`` → ``usage.prompt_tokens``)."""
    while any(pa.types.is_struct(f.type) for f in table.schema):
        table = table.flatten()
    return table


def _too_many_rows(label: str, rows: int, limits: Limits) -> IngestError:
    return IngestError(label, f"{rows:,} rows exceed the limit of {limits.max_rows:,}",
                       "split the log, sample it, or raise Limits.max_rows")


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return re.sub(r"\s+", " ", text[0])[:200] if text else type(exc).__name__
