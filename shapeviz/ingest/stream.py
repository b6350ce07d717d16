"""Streaming ingest: a log read in record batches, with the row, byte and decompression limits enforced while reading.

A path is never read into one bytes object: the file is opened, decompressed as a stream (gzip, bz2, zstd) through
a counter that stops at ``Limits.max_decompressed_bytes``, and parsed by pyarrow's streaming readers (CSV/TSV and
JSONL in blocks, Parquet by row group). Every batch adds to the row count, so a log past ``Limits.max_rows`` is
refused at the first batch over it: a gzip that inflates to 2 GB of tiny rows costs one batch of memory, not 2 GB.

Formats that cannot be streamed (a JSON array or document, UTF-16 text, irregular lines that need the tolerant
Python parser, a column whose type changes after the first block) fall back to ``readers``' whole-buffer path,
which is bounded by the same limits.
"""
from __future__ import annotations

import bz2
import contextlib
import gzip
import io
import os
import queue
import sys
import threading
import time
import zlib
from typing import Any, BinaryIO, Iterator, TypeVar

import numpy as np
import pyarrow as pa
import pyarrow.csv as pa_csv
import pyarrow.json as pa_json
import pyarrow.parquet as pq

from shapeviz.ingest.errors import IngestError
from shapeviz.ingest.exports import looks_like_aiperf_records
from shapeviz.ingest.limits import Limits, human_bytes
from shapeviz.ingest.projection import cut_long_labels, parquet_projection, row_group_bytes
from shapeviz.ingest.readers import (
    _EXCEL_SEP,
    _HEAD,
    _LABEL_TYPE,
    RawTable,
    Source,
    _blank,
    _check_not_binary,
    _first_line,
    _flatten,
    _label_columns,
    _needs_python,
    checked_path,
    decode_text,
    delimited_columns,
    read_table,
    rewind,
    sniff_delimiter,
    sniff_format,
    too_big,
    too_many_columns,
    unreadable,
)

# text parsed per block: bounds memory per batch, whatever the file's size. Parsing costs several times the
# block in memory for short rows (a 16 MiB block of 9-byte rows peaked at ~900 MB, a 4 MiB block at ~300 MB)
BATCH_BYTES = 4 << 20
BATCH_ROWS = 1 << 20              # Parquet rows per batch
_READ = 1 << 20                   # compressed bytes read per step


_T = TypeVar("_T")
READ_AHEAD = 2                    # batches parsed ahead of the consumer (each one block: memory stays bounded)


class _Restart(Exception):
    """Raised inside the stream when it must start again another way (Latin-1, or the whole-buffer parser)."""

    def __init__(self, how: str) -> None:
        super().__init__(how)
        self.how = how


class _Counted(io.RawIOBase):
    """A readable stream that counts what passes and refuses more than ``limit`` bytes (one clear line)."""

    def __init__(self, inner: BinaryIO, limit: int, label: str, what: str) -> None:
        self.inner, self.limit, self.label, self.what, self.total = inner, limit, label, what, 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        data = self.inner.read(len(buffer))
        n = len(data)
        self.total += n
        if self.total > self.limit:
            raise IngestError(self.label, self.what, "split the log, or raise the limit (shapeviz.ingest.Limits)")
        buffer[:n] = data
        return n


def _magic_compression(head: bytes) -> str:
    if head[:2] == b"\x1f\x8b":
        return "gzip"
    if head[:3] == b"BZh":
        return "bz2"
    if head[:4] == b"\x28\xb5\x2f\xfd":
        return "zstd"
    return "none"


def _open_raw(source: Source, label: str, limits: Limits) -> tuple[BinaryIO, int | None]:
    """A binary stream over the source's bytes as stored (compressed or not), and its size when known."""
    if isinstance(source, (bytes, bytearray, memoryview)):
        if len(source) > limits.max_bytes_in:
            raise too_big(label, limits)
        return io.BytesIO(source), len(source)
    if isinstance(source, (str, os.PathLike)):
        path, size = checked_path(source, label, limits)
        try:
            return open(path, "rb"), size
        except OSError as exc:
            raise unreadable(label, exc) from None
    if hasattr(source, "read"):
        rewind(source)
        counted = _Counted(source, limits.max_bytes_in, label,
                           f"is larger than the {human_bytes(limits.max_bytes_in)} input limit")
        return io.BufferedReader(counted, buffer_size=_READ), None
    raise IngestError(label, f"unsupported source type {type(source).__name__}",
                      "pass a path, bytes or a binary file object")


def _decompressing(raw: BinaryIO, compression: str, label: str) -> BinaryIO:
    """The decompressed stream (``gzip``/``bz2``: every member; ``zstd``: every frame)."""
    if compression == "gzip":
        return gzip.GzipFile(fileobj=raw, mode="rb")
    if compression == "bz2":
        return bz2.BZ2File(raw, mode="rb")
    if compression == "zstd":
        import zstandard

        return zstandard.ZstdDecompressor().stream_reader(raw, read_across_frames=True)
    return raw


class _Opened:
    """An opened log: the decompressed, size-limited stream and its first bytes (for sniffing)."""

    def __init__(self, source: Source, label: str, limits: Limits) -> None:
        self.raw, self.size = _open_raw(source, label, limits)
        peek = self.raw.read(8)   # the compression's magic bytes
        self.compression = _magic_compression(peek) if peek else "none"
        if self.raw.seekable():
            self.raw.seek(0)
        elif peek:
            self.raw = _Prefixed(peek, self.raw)
        inner = _decompressing(self.raw, self.compression, label)
        if self.compression == "none":
            what = (f"{human_bytes(self.size or 0)} exceeds the {human_bytes(limits.max_decompressed_bytes)} limit"
                    if self.size else f"exceeds the {human_bytes(limits.max_decompressed_bytes)} limit")
        else:
            what = (f"{self.compression} data expands past the {human_bytes(limits.max_decompressed_bytes)} "
                    "decompression limit (a decompression bomb, or a log too large for one load)")
        if self.compression == "none" and self.size is not None and self.size > limits.max_decompressed_bytes:
            raise IngestError(label, what, "split the log or raise Limits.max_decompressed_bytes")
        counted = io.BufferedReader(_Counted(inner, limits.max_decompressed_bytes, label, what), buffer_size=_READ)
        self.head = _read_head(counted, self.compression, label)
        # the head goes back in front, so every reader sees the stream from its first byte
        self.stream = io.BufferedReader(_Prefixed(self.head, counted), buffer_size=_READ)

    def close(self) -> None:
        try:
            self.raw.close()
        except (OSError, ValueError):
            pass


class _Prefixed(io.RawIOBase):
    """A non-seekable stream with the bytes already taken from it put back in front."""

    def __init__(self, prefix: bytes, inner: BinaryIO) -> None:
        self.prefix, self.inner = prefix, inner

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        if self.prefix:
            n = min(len(buffer), len(self.prefix))
            buffer[:n], self.prefix = self.prefix[:n], self.prefix[n:]
            return n
        data = self.inner.read(len(buffer))
        buffer[:len(data)] = data
        return len(data)


@contextlib.contextmanager
def _corrupt_if_broken(label: str, compression: str) -> Iterator[None]:
    """Reads inside become the log's "broken compression" message when the stream is corrupt or cut short."""
    try:
        yield
    except (EOFError, OSError, zlib.error) as exc:
        raise _corrupt(label, compression, exc) from None
    except Exception as exc:   # zstandard.ZstdError
        if type(exc).__name__ == "ZstdError":
            raise _corrupt(label, compression, exc) from None
        raise


def _read_head(stream: io.BufferedReader, compression: str, label: str) -> bytes:
    parts, size = [], 0
    with _corrupt_if_broken(label, compression):
        while size < _HEAD:
            chunk = stream.read(_HEAD - size)
            if not chunk:
                break
            parts.append(chunk)
            size += len(chunk)
    return b"".join(parts)


def _corrupt(label: str, compression: str, exc: BaseException) -> IngestError:
    if isinstance(exc, IngestError):
        return exc
    return IngestError(label, f"the {compression} stream is truncated or corrupt (the file ends early)",
                       "re-download or re-compress the file")


def _too_many_rows(label: str, rows: int, limits: Limits) -> IngestError:
    return IngestError(label, f"{rows:,} rows read so far exceed the limit of {limits.max_rows:,} "
                       "(reading stopped at the first batch past it)",
                       "split the log, sample it, raise Limits.max_rows, or use the dask engine for logs this big")


def iter_tables(source: Source, label: str, limits: Limits,
                mapping: dict[str, str] | None = None) -> Iterator[RawTable]:
    """A log as consecutive ``RawTable`` batches (one, for formats that cannot be streamed); limits enforced.

    ``mapping`` (the user's ``--map``) says which columns a Parquet log must read besides the detected ones.
    """
    opened = _Opened(source, label, limits)
    try:
        for raw in _iter_opened(opened, source, label, limits, mapping):
            # labels read dictionary-encoded (CSV, Parquet) are cut as each batch comes: held short, not whole
            if isinstance(raw.table, pa.Table):
                raw.table, _ = cut_long_labels(raw.table, limits.max_name_chars)   # bound_names says so
            yield raw
    finally:
        opened.close()


def released(stream: Any, refs: int, timeout_s: float = 1.0) -> bool:
    """Wait until arrow has let go of the Python ``stream`` it read (``refs``: the stream's reference count before
    arrow had it); False if it still holds it after ``timeout_s``.

    A closed streaming reader can live on for a moment in a callback on arrow's I/O thread, and that thread then drops
    the last reference to the reader and with it to the Python file it wraps, whose destructor takes the GIL. If the
    interpreter is shutting down by then (a command that ended right after reading, e.g. on a wrong file), Python
    ends the thread inside C++ code that may not be unwound and the process aborts: "terminate called without an
    active exception", exit 134, seen under load after `summary`'s one-line error (arrow's issue 34314). Waiting here
    until arrow's references are gone keeps that destructor inside the read."""
    deadline = time.monotonic() + timeout_s
    while sys.getrefcount(stream) > refs + 1:   # + 1: this function's own reference, ``stream``
        if time.monotonic() > deadline:
            return False
        time.sleep(0.001)   # the GIL is released, so arrow's thread can drop its reference
    return True


def read_ahead(batches: Iterator[_T], depth: int = READ_AHEAD) -> Iterator[_T]:
    """``batches`` produced on a thread of their own, at most ``depth`` ahead of the consumer, in the same order.

    pyarrow parses without the GIL, so the next blocks are parsed on a second core while the consumer frames and
    sketches the last ones. The limits are still checked at every batch (by the producer, as it reads); an error
    reaches the consumer after the batches that came before it; a consumer that stops early (its own error, or
    enough rows) stops the producer and closes the stream.
    """
    items: queue.Queue = queue.Queue(maxsize=depth)
    stop = threading.Event()
    end = object()

    def put(item: Any) -> bool:
        while not stop.is_set():
            try:
                items.put(item, timeout=0.05)
                return True
            except queue.Full:
                continue
        return False

    def produce() -> None:
        try:
            for batch in batches:
                if not put((batch, None)):
                    return
            put((end, None))
        except BaseException as exc:   # handed to the consumer, raised there as if read there
            put((end, exc))
        finally:
            close = getattr(batches, "close", None)
            if close is not None:
                close()   # a generator stopped early runs its own finally (the file and the parser closed) here

    producer = threading.Thread(target=produce, name="shapeviz-read-ahead", daemon=True)
    producer.start()
    try:
        while True:
            item, exc = items.get()
            if item is end:
                if exc is not None:
                    raise exc
                return
            yield item
    finally:
        stop.set()
        producer.join()


def _iter_opened(opened: _Opened, source: Source, label: str, limits: Limits,
                 mapping: dict[str, str] | None = None) -> Iterator[RawTable]:
    head, compression = opened.head, opened.compression
    if _blank(head):
        # an empty file, or one whose first 64 KiB are blank: the whole-buffer path says which
        yield _whole(source, label, limits)
        return
    if head[:4] == b"PAR1":
        yield from _iter_parquet(opened, source, label, compression, limits, mapping)
        return
    text_head = head[3:] if head.startswith(b"\xef\xbb\xbf") else head
    utf16 = decode_text(text_head, label, []) is not text_head   # UTF-16, with or without a BOM
    if utf16 or _binary(text_head, label):
        yield _whole(source, label, limits)   # UTF-16 needs transcoding; binary gets the whole-buffer messages
        return
    fmt = sniff_format(text_head, single_line=b"\n" not in text_head.strip())
    if fmt == "csv":
        yield from _csv_attempts(opened, source, label, limits)
    elif fmt == "jsonl" and looks_like_aiperf_records(text_head):
        yield _whole(source, label, limits)   # aiperf's records: each metric carries its unit (ingest.exports)
    elif fmt == "jsonl":
        yield from _attempt(_iter_jsonl(opened, label, limits), source, label, limits)
    else:
        yield _whole(source, label, limits)   # a JSON array or document: the tolerant whole-buffer reader


def _binary(head: bytes, label: str) -> bool:
    try:
        _check_not_binary(head, label)
    except IngestError:
        return True
    return False


def _attempt(batches: Iterator[RawTable], source: Source, label: str, limits: Limits) -> Iterator[RawTable]:
    """Stream ``batches``; if the reader gives up before yielding anything, read the whole buffer instead."""
    yielded = False
    try:
        for table in batches:
            yielded = True
            yield table
        return
    except _Restart:
        if yielded:
            raise   # the consumer already has batches: it starts again from scratch (see ``read_table_streamed``)
    yield _whole(source, label, limits)


def _csv_attempts(opened: _Opened, source: Source, label: str, limits: Limits) -> Iterator[RawTable]:
    """UTF-8 first; invalid UTF-8 before the first batch means Latin-1 (a fresh read); else the whole buffer."""
    yielded = False
    try:
        for table in _iter_csv(opened, label, limits, "utf8"):
            yielded = True
            yield table
        return
    except _Restart as restart:
        if yielded:
            raise
        how = restart.how
    if how == "latin1":
        again = _Opened(source, label, limits)
        try:
            yield from _attempt(_iter_csv(again, label, limits, "latin1"), source, label, limits)
        finally:
            again.close()
        return
    yield _whole(source, label, limits)


def _whole(source: Source, label: str, limits: Limits) -> RawTable:
    """The whole-buffer reader of ``readers`` (bounded by the same limits)."""
    return read_table(source, label, limits)


# ---------------------------------------------------------------------------------------------- CSV / TSV

def _iter_csv(opened: _Opened, label: str, limits: Limits, encoding: str) -> Iterator[RawTable]:
    head, compression = opened.head, opened.compression
    stream = opened.stream
    notes: list[str] = []
    skip = 1
    if head.startswith(b"\xef\xbb\xbf"):
        stream.read(3)
        head = head[3:]
        notes.append("encoding: UTF-8 with BOM (BOM removed)")
    excel = _EXCEL_SEP.match(head[:64])
    if excel:
        delimiter = excel.group(1).decode("latin-1")
        head = head[excel.end():]
        skip = 2
        notes.append(f"delimiter: {delimiter!r} from Excel's sep= line")
    else:
        delimiter = sniff_delimiter(head)
    fmt, names = delimited_columns(head, delimiter, bool(excel), label, notes, limits)
    if encoding == "latin1":
        notes.append("encoding: not valid UTF-8, read as Latin-1 (Windows exports often are)")
    malformed = [0]

    def skip_row(row: Any) -> str:
        malformed[0] += 1
        return "skip"

    refs = sys.getrefcount(stream)
    try:
        reader = pa_csv.open_csv(
            stream,
            read_options=pa_csv.ReadOptions(column_names=names, skip_rows=skip, encoding=encoding,
                                            block_size=BATCH_BYTES),
            # a quote in the head may open a field with a newline in it: then the exact (slower) parser
            parse_options=pa_csv.ParseOptions(delimiter=delimiter, invalid_row_handler=skip_row,
                                              newlines_in_values=b'"' in head),
            convert_options=pa_csv.ConvertOptions(strings_can_be_null=True, timestamp_parsers=[pa_csv.ISO8601],
                                                  column_types={n: _LABEL_TYPE for n in _label_columns(names)}),
        )
    except (EOFError, OSError, zlib.error) as exc:
        raise _corrupt(label, compression, exc) from None
    except pa.ArrowInvalid as exc:
        raise _Restart(_restart_kind(exc, encoding)) from None
    try:
        rows = 0
        reported = 0   # malformed rows already put in a batch (the parser counts them as it reads ahead)
        any_rows = False
        while True:
            try:
                batch = reader.read_next_batch()
            except StopIteration:
                break
            except (EOFError, zlib.error, gzip.BadGzipFile) as exc:
                raise _corrupt(label, compression, exc) from None
            except IngestError:
                raise
            except pa.ArrowInvalid as exc:
                raise _Restart(_restart_kind(exc, encoding)) from None
            except OSError as exc:
                raise _corrupt(label, compression, exc) from None
            except Exception as exc:
                if type(exc).__name__ == "ZstdError":
                    raise _corrupt(label, compression, exc) from None
                raise
            for column in batch.schema:
                if pa.types.is_binary(column.type) or pa.types.is_large_binary(column.type):
                    raise _Restart("latin1" if encoding == "utf8" else "whole")
            bad = malformed[0] - reported
            reported = malformed[0]
            rows += batch.num_rows + bad
            if rows > limits.max_rows:
                raise _too_many_rows(label, rows, limits)
            any_rows = any_rows or batch.num_rows > 0 or bad > 0
            yield RawTable(pa.Table.from_batches([batch]), fmt, compression, bad, list(notes))
            notes = []
        if malformed[0] > reported:
            yield RawTable(reader.schema.empty_table(), fmt, compression, malformed[0] - reported, list(notes))
            any_rows = True
    finally:
        reader.close()   # stop the parser's threads now, not at interpreter exit
        del reader
        released(stream, refs)
    if not any_rows:
        raise IngestError(label, f"has a header ({', '.join(names[:8])}) but no data rows",
                          "export the log again with its rows")


def _restart_kind(exc: BaseException, encoding: str) -> str:
    text = str(exc).lower()
    if ("utf8" in text or "utf-8" in text) and encoding == "utf8":
        return "latin1"
    return "whole"   # e.g. a column typed from the first block that changes type later: the whole-buffer parser


# ---------------------------------------------------------------------------------------------- JSONL

class _DepthGuard(io.RawIOBase):
    """Checks JSON nesting on the bytes as they stream past: pyarrow's parser recurses, so depth is checked first."""

    def __init__(self, inner: BinaryIO, limit: int, label: str) -> None:
        self.inner, self.limit, self.label = inner, limit, label
        self.depth, self.in_string, self.prev = 0, 0, 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        data = self.inner.read(len(buffer))
        n = len(data)
        if n:
            self._scan(np.frombuffer(data, dtype=np.uint8))
        buffer[:n] = data
        return n

    def _scan(self, b: np.ndarray) -> None:
        # the same structural scan as ``readers.scan_json``, carried across chunks
        idx = np.flatnonzero((b == 34) | (b == 91) | (b == 93) | (b == 123) | (b == 125))
        c = b[idx]
        before = np.where(idx > 0, b[np.maximum(idx - 1, 0)], self.prev)
        self.prev = int(b[-1])
        quote = (c == 34) & (before != 92)
        parity = (np.cumsum(quote, dtype=np.int64) + self.in_string) & 1
        outside = (parity == 0) & ~quote
        running = self.depth + np.cumsum((outside & ((c == 123) | (c == 91))).astype(np.int64)
                                         - (outside & ((c == 125) | (c == 93))))
        if running.size:
            deepest = int(running.max())
            if deepest > self.limit:
                raise IngestError(self.label, f"JSON is nested more than {self.limit} levels deep, past the limit "
                                  f"of {self.limit}", "flatten the records, or raise Limits.max_json_depth")
            self.depth, self.in_string = max(int(running[-1]), 0), int(parity[-1])


def _iter_jsonl(opened: _Opened, label: str, limits: Limits) -> Iterator[RawTable]:
    stream = io.BufferedReader(_DepthGuard(opened.stream, limits.max_json_depth, label), buffer_size=_READ)
    refs = sys.getrefcount(stream)
    try:
        reader = pa_json.open_json(stream, read_options=pa_json.ReadOptions(block_size=BATCH_BYTES))
    except (EOFError, OSError, zlib.error) as exc:
        raise _corrupt(label, opened.compression, exc) from None
    except pa.ArrowException:
        raise _Restart("whole") from None
    try:
        rows = 0
        while True:
            try:
                batch = reader.read_next_batch()
            except StopIteration:
                break
            except IngestError:
                raise
            except pa.ArrowException:
                raise _Restart("whole") from None   # irregular lines or types: the tolerant Python path counts them
            except (EOFError, OSError, zlib.error) as exc:
                raise _corrupt(label, opened.compression, exc) from None
            table = pa.Table.from_batches([batch])
            if _needs_python(table):
                raise _Restart("whole")
            rows += table.num_rows
            if rows > limits.max_rows:
                raise _too_many_rows(label, rows, limits)
            yield RawTable(_flatten(table), "jsonl", opened.compression, 0, [])
    finally:
        reader.close()   # stop the parser's threads now, not at interpreter exit
        del reader
        released(stream, refs)


# ---------------------------------------------------------------------------------------------- Parquet

def _all_bytes(stream: BinaryIO, compression: str, label: str) -> memoryview:
    """Every byte left in ``stream``, in one growing buffer (no second copy to join pieces)."""
    buffer = io.BytesIO()
    with _corrupt_if_broken(label, compression):
        while chunk := stream.read(_READ):
            buffer.write(chunk)
    return buffer.getbuffer()


def _iter_parquet(opened: _Opened, source: Source, label: str, compression: str,
                  limits: Limits, mapping: dict[str, str] | None = None) -> Iterator[RawTable]:
    if isinstance(source, (str, os.PathLike)):
        seekable: Any = source
    elif isinstance(source, (bytes, bytearray, memoryview)):
        seekable = pa.BufferReader(pa.py_buffer(source))   # the bytes as they are, not a copy
    elif hasattr(source, "seek") and getattr(source, "seekable", lambda: False)():
        seekable = source   # an upload widget's buffer: read in place, so its size is checked here
        size = source.seek(0, io.SEEK_END)
        source.seek(0)
        if size > limits.max_bytes_in:
            raise IngestError(label, f"{human_bytes(size)} is larger than the {human_bytes(limits.max_bytes_in)} "
                              "input limit", "split the log, compress it, or raise Limits.max_bytes_in")
    else:
        seekable = None
    if compression != "none" or seekable is None:
        # Parquet needs random access (its footer is at the end): a compressed Parquet, or a one-way stream, is
        # decompressed into one buffer (counted against the decompression budget as it comes; uploads never go to
        # disk), then read like any Parquet file: the columns a mapping can use, row group by row group
        seekable = pa.BufferReader(pa.py_buffer(_all_bytes(opened.stream, compression, label)))
    source = seekable
    try:
        parquet = pq.ParquetFile(source)
        rows = parquet.metadata.num_rows
        if rows > limits.max_rows:
            raise IngestError(label, f"{rows:,} rows exceed the limit of {limits.max_rows:,}",
                              "split the log, sample it, raise Limits.max_rows, or use the dask engine")
        names = parquet.schema_arrow.names
        if len(names) > limits.max_columns:
            raise too_many_columns(label, len(names), limits)
        # only what a mapping can use is read, labels as categories (projection.py says why)
        columns, strings, skipped = parquet_projection(parquet.schema_arrow, mapping)
        if strings:
            parquet = pq.ParquetFile(source, read_dictionary=strings)
        notes = [f"Parquet: {len(skipped):,} text columns no mapping uses were not read "
                 f"({', '.join(repr(n) for n in skipped[:5])}{', …' if len(skipped) > 5 else ''})"] if skipped else []
        # the footer's row count may lie: the limits count what is actually read, batch by batch
        rows_read = bytes_read = 0
        empty = True
        too_big = IngestError(label, f"decompresses past the {human_bytes(limits.max_decompressed_bytes)} limit "
                              "(the columns read)", "split the log, or raise the limit (shapeviz.ingest.Limits)")
        for group in range(parquet.metadata.num_row_groups):
            # what the footer announces is refused before it is read; what is read is counted anyway
            if bytes_read + row_group_bytes(parquet.metadata, group, columns) > limits.max_decompressed_bytes:
                raise too_big
            for batch in parquet.iter_batches(batch_size=BATCH_ROWS, row_groups=[group], columns=columns):
                empty = False
                rows_read += batch.num_rows
                bytes_read += batch.nbytes
                if rows_read > limits.max_rows:
                    raise _too_many_rows(label, rows_read, limits)
                if bytes_read > limits.max_decompressed_bytes:
                    raise too_big
                yield RawTable(_flatten(pa.Table.from_batches([batch])), "parquet", compression, 0, notes)
        if empty:
            yield RawTable(_flatten(parquet.schema_arrow.empty_table()), "parquet", compression)
    except IngestError:
        raise
    except (pa.ArrowException, OSError, ValueError) as exc:
        raise IngestError(label, f"is not a readable Parquet file ({_first_line(exc)})",
                          "write it again with pyarrow or pandas, or export CSV") from None


def read_table_streamed(source: Source, label: str, limits: Limits,
                        mapping: dict[str, str] | None = None) -> RawTable:
    """The whole log as one ``RawTable``, read batch by batch (limits checked at every batch)."""
    for attempt in range(2):
        try:
            parts = list(iter_tables(source, label, limits, mapping))
            break
        except _Restart:
            if attempt:
                raise
            # the stream had to change its mind after the first batch (a late Latin-1 byte, a column changing
            # type): read it once more with the whole-buffer parser
            return _whole(source, label, limits)
    try:
        return join_batches(parts)
    except pa.ArrowException:
        return _whole(source, label, limits)


def join_batches(parts: list[RawTable]) -> RawTable:
    """Consecutive batches of one log as one ``RawTable``: malformed rows added, each note once (a Parquet log says
    what it left unread on every batch). ``pa.ArrowException`` when the batches' column types cannot be joined."""
    if len(parts) == 1:
        return parts[0]
    first = parts[0]
    table = pa.concat_tables([p.table for p in parts], promote_options="permissive")
    notes = list(dict.fromkeys(n for p in parts for n in p.notes))
    return RawTable(table, first.format, first.compression, sum(p.malformed_rows for p in parts), notes)


def columns_seen(source: Source, label: str, limits: Limits) -> list[str]:
    """The log's column names, for a mapping editor: Parquet's from its schema (nothing read), else the first batch's.

    Every column is listed, the ones a load leaves unread too, so the user can map any of them.
    """
    data = source if isinstance(source, (bytes, bytearray, memoryview)) else None
    if data is not None and bytes(data[:4]) == b"PAR1":
        try:
            schema = pq.ParquetFile(pa.BufferReader(pa.py_buffer(data))).schema_arrow
        except (pa.ArrowException, OSError, ValueError) as exc:
            raise IngestError(label, f"is not a readable Parquet file ({_first_line(exc)})",
                              "write it again with pyarrow or pandas, or export CSV") from None
        return [str(c) for c in _flatten(schema.empty_table()).column_names]
    batches = iter_tables(source, label, limits)
    try:
        return next(batches).columns
    except _Restart:
        return read_table(source, label, limits).columns
    finally:
        batches.close()


__all__ = ["iter_tables", "read_ahead", "read_table_streamed", "join_batches", "columns_seen", "BATCH_BYTES", "BATCH_ROWS"]
