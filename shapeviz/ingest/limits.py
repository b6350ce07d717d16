"""Every ingest limit in one place: input size, decompressed size, rows, JSON nesting, columns, token counts.

The defaults suit a 24 GB machine: a 2 GiB decompressed log of ~20M requests parses in a few GB of memory.
The Streamlit upload limit (``.streamlit/config.toml`` ``server.maxUploadSize``, in MB) equals ``max_bytes_in``.
"""
from __future__ import annotations

from dataclasses import dataclass

MIB = 1 << 20
GIB = 1 << 30


@dataclass(frozen=True)
class Limits:
    """Bounds on what one ``load_log`` call accepts; anything past them is a clear ``IngestError``."""

    max_bytes_in: int = 1 * GIB             # bytes as uploaded or on disk (compressed or not)
    max_decompressed_bytes: int = 2 * GIB   # decompression stops here, so a bomb costs at most this much memory
    max_rows: int = 20_000_000              # requests per file
    max_json_depth: int = 64                # nesting of JSON objects/arrays (pyarrow's parser recurses)
    max_columns: int = 2_000                # columns of a log (OTLP spans flattened hold a few hundred)
    max_header_bytes: int = 64 << 10        # a delimited log's first line, which must fit the sniffed head
    max_input_tokens: int = 10_000_000      # above this a request is counted as `absurd_tokens` and dropped
    max_output_tokens: int = 1_000_000      # idem for output tokens
    max_products: int = 100                 # products kept by name (the busiest); the rest are counted together
    max_name_chars: int = 256               # a product, model, session or status name is cut past this

    def __post_init__(self) -> None:
        for field, value in self.__dict__.items():
            if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
                raise ValueError(f"Limits.{field} must be a positive integer, got {value!r}")
        # int32 is the canonical token dtype: a larger limit would let values overflow it
        if max(self.max_input_tokens, self.max_output_tokens) > 2**31 - 1:
            raise ValueError("Limits.max_input_tokens / max_output_tokens must fit int32 (<= 2147483647)")


DEFAULT_LIMITS = Limits()


def human_bytes(n: int) -> str:
    """``2147483648`` → ``"2.0 GiB"``, for messages."""
    for unit, size in (("GiB", GIB), ("MiB", MIB), ("KiB", 1 << 10)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{n} B"
