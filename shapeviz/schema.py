"""The canonical request frame: the one table every analysis reads.

Every reader ends here, whatever the source format: one row per request, these column names, these dtypes.
Only ``input_tokens`` and ``output_tokens`` are required; the optional columns are present only when the log
carried them (or, for ``product``, always: it falls back to a model column, then to the file name).
"""
from __future__ import annotations

REQUIRED: tuple[str, ...] = ("input_tokens", "output_tokens")

# canonical name -> pandas dtype in the canonical frame
DTYPES: dict[str, str] = {
    "input_tokens": "int32",
    "output_tokens": "int32",
    "timestamp": "datetime64[ns, UTC]",
    "product": "category",
    "session_id": "category",
    "turn": "Int32",          # 0-based position inside the session, when known or derived
    "model": "category",
    "cached_tokens": "Int32",  # input tokens served from a prefix cache, as reported by the log
    "ttft_ms": "float32",
    "tpot_ms": "float32",
    "e2e_ms": "float32",
    "status": "category",
    "hash_ids": "object",     # per request: numpy int64 array of prefix-block hashes (Mooncake style)
}

OPTIONAL: tuple[str, ...] = tuple(c for c in DTYPES if c not in REQUIRED)
CANONICAL: tuple[str, ...] = tuple(DTYPES)
