"""Replay traces of the log after the what-if: Mooncake/guidellm JSONL and a Vidur CSV, for load-testing the plan."""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from shapeviz.serving import WhatIf


# --- replay traces ------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Replay:
    """The what-if workload, request by request, in arrival order, for load generators."""

    timestamp_ms: np.ndarray       # int64, ms from the first request
    input_tokens: np.ndarray       # int64, after the input trim (min 1)
    output_tokens: np.ndarray      # int64, after the output trim (min 1)
    hash_ids: pd.Series | None     # per request, numpy int64 arrays; None when omitted
    arrivals: str                  # "timestamps" or "poisson"
    notes: tuple[str, ...] = ()

    def __len__(self) -> int:
        return int(self.timestamp_ms.size)


def _scaled_tokens(values: np.ndarray, trim: float) -> np.ndarray:
    """Tokens after a trim: rounded half up, at least 1 (a load generator cannot send an empty prompt)."""
    return np.maximum(np.floor(values.astype(np.float64) * (1.0 - trim) + 0.5), 1.0).astype(np.int64)


def replay_trace(frame: pd.DataFrame, whatif: WhatIf = WhatIf(), *, rate_rps: float | None = None,
                 seed: int = 0) -> Replay:
    """The what-if applied to every request: trims scale tokens, the traffic multiplier compresses arrivals.

    ×2 traffic replays the same requests with inter-arrival times halved (twice as dense); requests are not
    replicated. Logs without timestamps get Poisson arrivals at ``rate_rps`` (the plan's rate after the
    what-if) from a generator seeded with ``seed``. ``hash_ids`` are kept when the log has them and the input
    is not trimmed (a trimmed prompt has other blocks); an output trim leaves the prompts, hence the hashes, as is.
    """
    if not isinstance(whatif, WhatIf):
        raise ValueError(f"whatif must be a shapeviz.serving.WhatIf, got {type(whatif).__name__}")
    n = len(frame)
    if n == 0:
        raise ValueError("the log has no requests to replay")
    notes: list[str] = []
    inp = _scaled_tokens(frame["input_tokens"].to_numpy(), whatif.trim_input)
    out = _scaled_tokens(frame["output_tokens"].to_numpy(), whatif.trim_output)
    keep = np.ones(n, dtype=bool)
    has_ts = "timestamp" in frame.columns and int(frame["timestamp"].notna().sum()) >= 2
    if has_ts:
        ts = frame["timestamp"]
        keep = ts.notna().to_numpy()
        ns = (ts - ts.min()).to_numpy(dtype="timedelta64[ns]").astype(np.int64)
        offset_ms = np.where(keep, ns, 0) / 1e6 / whatif.traffic_multiplier
        if not keep.all():
            notes.append(f"{int((~keep).sum()):,} requests without a timestamp are left out of the replay.")
        arrivals = "timestamps"
        factor = whatif.traffic_multiplier
        notes.append("Arrival times are the log's, relative to its first request"
                     + ("" if factor == 1 else f", with inter-arrival times divided by the traffic multiplier "
                                               f"×{factor:g} (same requests, {factor:g}× as dense; none replicated)")
                     + ".")
    else:
        if rate_rps is None or not (math.isfinite(rate_rps) and rate_rps > 0):
            raise ValueError(f"the log has no timestamps: a positive rate_rps is needed for Poisson arrivals, "
                             f"got {rate_rps!r}")
        rng = np.random.default_rng(seed)
        gaps = rng.exponential(1000.0 / rate_rps, size=n)
        gaps[0] = 0.0
        offset_ms = np.cumsum(gaps)
        arrivals = "poisson"
        notes.append(f"The log has no timestamps: arrivals are Poisson at {rate_rps:,.3g} req/s (the plan's rate "
                     f"after the what-if), drawn with seed {seed}; requests keep the log's order.")
    timestamp = np.floor(offset_ms + 0.5).astype(np.int64)
    idx = np.flatnonzero(keep)
    idx = idx[np.argsort(offset_ms[idx], kind="stable")]  # exact arrival order, ties in log order
    hashes: pd.Series | None = None
    if "hash_ids" in frame.columns:
        if whatif.trim_input == 0:
            hashes = frame["hash_ids"].iloc[idx].reset_index(drop=True)
            notes.append("hash_ids (prefix-block hashes) are the log's, kept because prompts are not trimmed.")
        else:
            notes.append("hash_ids are omitted: the input trim changes every prompt, so the log's block hashes "
                         "no longer describe them.")
    if whatif.cache_hit is not None:
        notes.append(f"The prefix-cache hit rate of the what-if ({whatif.cache_hit:.0%}) is a property of the server, "
                     "not of the requests: a replay reaches it only if the prompts share prefixes.")
    return Replay(timestamp[idx], inp[idx], out[idx], hashes, arrivals, tuple(notes))


def _lit(text: str) -> pa.Scalar:
    return pa.scalar(text, pa.large_string())


def _int_strings(values: np.ndarray) -> pa.Array:
    return pc.cast(pa.array(np.asarray(values, dtype=np.int64)), pa.large_string())


def _concat_lines(lines: pa.Array) -> bytes:
    """The bytes of a string array without nulls, end to end (its data buffer between the first and last offset)."""
    lines = lines.cast(pa.large_string())
    if lines.null_count:
        raise ValueError("internal: a replay line is missing")
    if isinstance(lines, pa.ChunkedArray):
        lines = lines.combine_chunks()
    offsets = np.frombuffer(lines.buffers()[1], dtype=np.int64)[lines.offset: lines.offset + len(lines) + 1]
    return memoryview(lines.buffers()[2])[int(offsets[0]): int(offsets[-1])].tobytes()


def replay_jsonl(replay: Replay) -> bytes:
    """Mooncake/guidellm-style JSON lines: ``timestamp`` (ms), ``input_length``, ``output_length``[, ``hash_ids``]."""
    if len(replay) == 0:
        return b""
    # pyarrow builds the lines in C: a million requests take about a second, not a Python loop per row.
    parts: list[Any] = [_lit('{"timestamp":'), _int_strings(replay.timestamp_ms), _lit(',"input_length":'),
                        _int_strings(replay.input_tokens), _lit(',"output_length":'),
                        _int_strings(replay.output_tokens)]
    if replay.hash_ids is not None:
        lists = pa.array(replay.hash_ids.to_numpy(dtype=object), type=pa.large_list(pa.int64()), from_pandas=True)
        valid = pc.is_valid(lists)
        joined = pc.binary_join(pc.cast(lists.fill_null([]) if lists.null_count else lists,
                                        pa.large_list(pa.large_string())), _lit(","))
        field_text = pc.binary_join_element_wise(_lit(',"hash_ids":['), joined, _lit("]"), _lit(""))
        parts.append(pc.if_else(valid, field_text, _lit("")))
    parts.append(_lit("}\n"))
    lines = pc.binary_join_element_wise(*parts, _lit(""))
    return _concat_lines(lines)


def replay_vidur_csv(replay: Replay) -> bytes:
    """Vidur-style trace CSV: ``arrived_at`` (seconds), ``num_prefill_tokens``, ``num_decode_tokens``."""
    seconds = replay.timestamp_ms // 1000
    millis = replay.timestamp_ms % 1000
    # Exact millisecond decimals ("12.345"), never a float's long tail.
    arrived = pc.binary_join_element_wise(_int_strings(seconds), _lit("."),
                                          pc.utf8_lpad(_int_strings(millis), 3, "0"), _lit(""))
    lines = pc.binary_join_element_wise(arrived, _lit(","), _int_strings(replay.input_tokens), _lit(","),
                                        _int_strings(replay.output_tokens), _lit("\n"), _lit(""))
    header = b"arrived_at,num_prefill_tokens,num_decode_tokens\n"
    return header + (_concat_lines(lines) if len(replay) else b"")


