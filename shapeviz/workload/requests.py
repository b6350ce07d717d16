"""The requests a replay takes, built once per (log, what-if): tokens, reported cached tokens, products, sessions and
prompt blocks as plain arrays, below serving.

``RequestTable.build(frame, whatif)`` reads a canonical frame once: each row's tokens after the what-if's trims, its
reported cached tokens, its arrival (nanoseconds from the log's first timestamp), its product's code, and its prompt
blocks (``PrefixBlocks``: from the log's block hashes, else from sessions). ``table.requests(rows)`` is what the
simulator replays (``Requests``): those rows in arrival order, arrivals from the first of them, the what-if's hit
share set over them. A sizing builds one table and slices it per window (``fleet.sizing.slo_window``); nothing on
the way to the compiled loop reads the frame again.

The what-if (``WhatIf``) lives here because the table applies it; the planner's ``Workload.apply`` applies the same
levers to weighted points.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass, replace
from functools import cached_property, lru_cache

import numpy as np
import pandas as pd

from shapeviz.datadir import DATA_DIR

SOURCES = ("block_hashes", "sessions")
_BLOCK_BITS = 24   # session stream block ids: (session code << 24) | block index

# The Mooncake traces' block size ("hash_ids use a block size of 512", FAST'25 appendix A.2); a parameter
# everywhere, this is only its default.
DEFAULT_BLOCK_SIZE = 512

# Block sizes a log's hashes are tried against when none is given: powers of two from 1 to 1,048,576 tokens
# (engines use 16, 32, 64; Mooncake 512).
_CANDIDATE_BLOCK_SIZES = 2 ** np.arange(0, 21, dtype=np.int64)

_BUILDS = [0]   # tables built in this process (``builds``): a sizing builds one


@dataclass(frozen=True)
class WhatIf:
    """The levers of the sidebar: trim input/output (fractions), prefix-cache hit rate, traffic multiplier.

    ``cache_hit=None`` keeps the cached tokens the log reports (none if it reports none). A number is the
    share of all input tokens served from the prefix cache: when the log reports cached tokens, each request's
    are scaled so the total reaches that share (so the split between long agent contexts and short one-off
    prompts is kept, and the log's own share changes nothing); otherwise every prompt gets that fraction.
    """

    trim_input: float = 0.0
    trim_output: float = 0.0
    cache_hit: float | None = None
    traffic_multiplier: float = 1.0

    def __post_init__(self) -> None:
        for name in ("trim_input", "trim_output", "cache_hit"):
            value = getattr(self, name)
            if value is None and name == "cache_hit":
                continue
            if not isinstance(value, (int, float, np.floating, np.integer)) or not (0.0 <= float(value) < 1.0):
                raise ValueError(f"{name}={value!r} must be a fraction in [0, 1), e.g. 0.3 for 30%")
        m = self.traffic_multiplier
        if not isinstance(m, (int, float, np.floating, np.integer)) or not (math.isfinite(float(m)) and float(m) > 0):
            raise ValueError(f"traffic_multiplier={m!r} must be a positive number, e.g. 2 for twice the traffic")

    @property
    def is_identity(self) -> bool:
        """True when the what-if changes nothing."""
        return self.trim_input == 0 and self.trim_output == 0 and self.cache_hit is None and self.traffic_multiplier == 1


@lru_cache(maxsize=1)
def routing_constants() -> dict:
    """``data/routing.json``: router thresholds and the engine block size, each with its source."""
    return json.loads((DATA_DIR / "routing.json").read_text())


def engine_block_tokens() -> int:
    """The engine's KV block size used when reuse is built from sessions (vLLM's default)."""
    return int(routing_constants()["engine_block_tokens"]["value"])


def has_sessions(frame: pd.DataFrame) -> bool:
    """True when the frame carries at least one session id."""
    return "session_id" in frame.columns and bool(frame["session_id"].notna().any())


def has_hashes(frame: pd.DataFrame) -> bool:
    """True when the frame carries at least one request with ``hash_ids`` blocks."""
    if "hash_ids" not in frame.columns or len(frame) == 0:
        return False
    col = frame["hash_ids"]
    try:
        # stops at the first request with blocks: no pass over a million rows when the column is full
        return any(len(v) for v in col[~col.isna()])
    except TypeError:
        raise ValueError(
            f"hash_ids must hold one list of integer block ids per request, got {type(col.dropna().iloc[0]).__name__} "
            "values; map the log's prefix-hash column, or drop it"
        ) from None


def row_blocks(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per row of a ``hash_ids`` object array, its number of blocks, and every id flattened in row order."""
    present = ~pd.isna(pd.Series(values, dtype=object)).to_numpy()
    lengths = np.zeros(len(values), dtype=np.int64)
    try:
        lengths[present] = np.fromiter(map(len, values[present]), dtype=np.int64, count=int(present.sum()))
        ids = (np.concatenate(values[present]).astype(np.int64, copy=False) if lengths.sum()
               else np.empty(0, np.int64))
    except (TypeError, ValueError, OverflowError) as exc:
        raise ValueError(
            f"hash_ids must hold one list of integer block ids per request ({exc}); "
            "map the log's prefix-hash column, or drop it"
        ) from None
    return lengths, ids


def infer_block_size(frame: pd.DataFrame) -> tuple[int, float]:
    """The block size of the log's hashes, and the share of requests it explains.

    A request of ``n`` tokens with ``L`` hashes of ``B``-token blocks has ``L = ceil(n / B)`` (every block hashed,
    the last one partial, as Mooncake does) or ``L = floor(n / B)`` (only full blocks, as engines hash). The
    answer is the power of two that explains the most requests either way (the smallest among equals); where
    none explains even half of them, the median of ``n / L``.
    """
    lengths, _ = row_blocks(frame["hash_ids"].to_numpy(dtype=object))
    rows = lengths > 0
    if not rows.any():
        return DEFAULT_BLOCK_SIZE, 0.0
    n = frame["input_tokens"].to_numpy(dtype=np.int64)[rows][None, :]
    blocks = lengths[rows][None, :]
    sizes = _CANDIDATE_BLOCK_SIZES[:, None]
    ceil_ok = (-(-n // sizes) == blocks).mean(axis=1)
    floor_ok = ((n // sizes) == blocks).mean(axis=1)
    share = np.maximum(ceil_ok, floor_ok)
    best = int(np.argmax(share))
    if share[best] >= 0.5:
        return int(_CANDIDATE_BLOCK_SIZES[best]), float(share[best])
    return max(int(round(float(np.median(n / blocks)))), 1), float(share[best])


# --- prompt blocks -----------------------------------------------------------------------------------------
@dataclass(frozen=True)
class PrefixBlocks:
    """Per request (in the simulator's order): the prompt blocks looked up at admission and the blocks it leaves.

    Ragged arrays in CSR form: request ``i`` looks up ``look_len[i]`` blocks, ``look_ids[look_ptr[i]:look_ptr[i+1]]``,
    and, when it finishes, leaves ``keep_ids[keep_ptr[i]:keep_ptr[i+1]]`` cached. ``key`` is the affinity key of the
    session router (the session's code; -1: no session).

    Blocks built from sessions hold no ids (``look_ids``/``keep_ids`` None): request ``i``'s are
    ``(key[i] << 24) | 0..n-1``, which ``looked_up()``/``kept()`` build from the pointers and keys the first time
    they are asked (the compiled loop's session runs never ask: at a 1M-request day's busiest hour they are 64M
    look-ups, a gigabyte). ``runs``: known at construction to be session runs (``in_runs``).
    """

    block_size: int
    source: str                 # block_hashes | sessions
    block_size_source: str      # how the block size was chosen (given, inferred, the engine default)
    look_ptr: np.ndarray
    look_ids: np.ndarray | None
    keep_ptr: np.ndarray
    keep_ids: np.ndarray | None
    key: np.ndarray
    runs: bool = False

    def __len__(self) -> int:
        return int(self.look_ptr.size - 1)

    @cached_property
    def look_len(self) -> np.ndarray:
        """Blocks each request looks up."""
        return np.diff(self.look_ptr)

    @cached_property
    def keep_len(self) -> np.ndarray:
        """Blocks each request leaves cached."""
        return np.diff(self.keep_ptr)

    def looked_up(self) -> np.ndarray:
        """Every looked-up block id, request by request (a session stream's built once when not held)."""
        return self.look_ids if self.look_ids is not None else self._look_stream

    def kept(self) -> np.ndarray:
        """Every kept block id, request by request (a session stream's built once when not held)."""
        return self.keep_ids if self.keep_ids is not None else self._keep_stream

    @cached_property
    def _look_stream(self) -> np.ndarray:
        return _stream_ids(self.key, self.look_len)

    @cached_property
    def _keep_stream(self) -> np.ndarray:
        return _stream_ids(self.key, self.keep_len)

    def take(self, index: np.ndarray) -> "PrefixBlocks":
        """The blocks of the requests at ``index`` (a boolean mask or positions), in that order (a subset of session
        runs is session runs: not checked again)."""
        index = np.asarray(index)
        pos = np.flatnonzero(index) if index.dtype == bool else index.astype(np.int64)
        if self.look_ids is None and self.keep_ids is None:   # session streams: pointers and keys only
            look_ptr = np.r_[0, np.cumsum(self.look_len[pos])].astype(np.int64)
            keep_ptr = np.r_[0, np.cumsum(self.keep_len[pos])].astype(np.int64)
            return PrefixBlocks(self.block_size, self.source, self.block_size_source, look_ptr, None, keep_ptr, None,
                                self.key[pos], self.runs)
        look_ptr, look_ids = _take_ragged(self.look_ptr, self.looked_up(), pos)
        keep_ptr, keep_ids = _take_ragged(self.keep_ptr, self.kept(), pos)
        return PrefixBlocks(self.block_size, self.source, self.block_size_source, look_ptr, look_ids,
                            keep_ptr, keep_ids, self.key[pos], self.runs)

    def lists(self) -> tuple[list[list[int]], list[list[int]]]:
        """Per request, the looked-up and the kept block ids as Python lists (what the caches walk)."""
        look = np.split(self.looked_up(), self.look_ptr[1:-1])
        keep = np.split(self.kept(), self.keep_ptr[1:-1])
        return [a.tolist() for a in look], [a.tolist() for a in keep]

    def dense(self, group: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
        """The look-up and kept ids renumbered 0..U-1 (U distinct blocks), and where each looked-up block first
        occurs in its request (the compiled loop keeps its caches' state in arrays over those U blocks).

        ``group`` (per request, e.g. the replica it is routed to): a block is numbered apart in each group, so U
        counts distinct (group, block) pairs (one replica's copy of a block is not another's)."""
        if self.source == "sessions" and self._session_form():
            return self._dense_sessions(group)
        both = np.concatenate([self.looked_up(), self.kept()])
        if group is not None:   # (group, block) pairs: the block's number, offset by its group
            _, ids = np.unique(both, return_inverse=True)
            rows = np.r_[np.repeat(np.arange(len(self)), self.look_len), np.repeat(np.arange(len(self)), self.keep_len)]
            both = np.asarray(group, dtype=np.int64)[rows] * (int(ids.max(initial=0)) + 1) + ids
        distinct, inverse = np.unique(both, return_inverse=True)
        look = inverse[:self.looked_up().size].astype(np.int64)
        row = np.repeat(np.arange(len(self), dtype=np.int64), self.look_len)
        first = np.zeros(look.size, dtype=np.bool_)
        first[np.unique(row * max(distinct.size, 1) + look, return_index=True)[1]] = True
        return look, inverse[self.looked_up().size:].astype(np.int64), first, int(distinct.size)

    def _session_form(self) -> bool:
        """Every block id is ``(its request's session key << 24) | index`` (what ``_dense_sessions`` relies on: an id
        out of that form would index past its state in the compiled loop)."""
        for lengths, ids in ((self.look_len, self.looked_up()), (self.keep_len, self.kept())):
            owner = np.repeat(self.key, lengths)
            if ids.size and not (np.all(owner >= 0) and np.array_equal(np.right_shift(ids, _BLOCK_BITS), owner)):
                return False
        return True

    @cached_property
    def in_runs(self) -> bool:
        """Every request looks up blocks 0..L-1 of its own session's stream and leaves blocks 0..K-1 (what
        ``RequestTable.build`` builds from sessions, ``runs``): the compiled loop can then keep each replica's cache
        as runs of a session's blocks (``sim_core``'s session runs) instead of a cell per block. Otherwise checked
        once per set of blocks (the replays of one sizing share it)."""
        if self.runs:
            return True
        if self.source != "sessions":
            return False
        step = 4096   # requests at a time: the temporaries stay a few MB while the blocks are gigabytes
        for ptr, ids in ((self.look_ptr, self.looked_up()), (self.keep_ptr, self.kept())):
            for lo in range(0, len(self), step):
                hi = min(lo + step, len(self))
                lengths = np.diff(ptr[lo:hi + 1])
                key = np.repeat(self.key[lo:hi], lengths)
                inner = _ragged_range(lengths)[1]
                if np.any(key < 0) or not np.array_equal(ids[ptr[lo]:ptr[hi]], np.left_shift(key, _BLOCK_BITS) | inner):
                    return False
        return True

    def rekeyed(self, key: np.ndarray) -> "PrefixBlocks":
        """Session blocks with new session keys (``key`` per request): each block id moves to its new session's
        stream, ``(key << 24) | index``, the form ``dense`` numbers without a sort."""
        mask = (1 << _BLOCK_BITS) - 1
        key = np.asarray(key, dtype=np.int64)
        look = np.left_shift(np.repeat(np.maximum(key, 0), self.look_len), _BLOCK_BITS) | (self.looked_up() & mask)
        keep = np.left_shift(np.repeat(np.maximum(key, 0), self.keep_len), _BLOCK_BITS) | (self.kept() & mask)
        return replace(self, look_ids=look, keep_ids=keep, key=key)

    def _dense_sessions(self, group: np.ndarray | None) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
        """``dense`` without a sort of the blocks: a session's blocks are 0..its longest context's blocks, so each
        session (in each group) gets a run of dense ids (a turn's blocks are distinct: each occurs once in it)."""
        look_len, keep_len = self.look_len, self.keep_len
        span = np.maximum(look_len, keep_len)
        rows = np.flatnonzero(span > 0)
        key = self.key[rows] if group is None else np.asarray(group, dtype=np.int64)[rows] * (
            int(self.key.max(initial=0)) + 1) + self.key[rows]
        codes, at = np.unique(key, return_inverse=True)
        longest = np.zeros(codes.size, dtype=np.int64)
        np.maximum.at(longest, at, span[rows])
        offset = np.zeros(len(self), dtype=np.int64)
        offset[rows] = (np.cumsum(longest) - longest)[at]
        index = (1 << _BLOCK_BITS) - 1
        look = np.repeat(offset, look_len) + (self.looked_up() & index)
        keep = np.repeat(offset, keep_len) + (self.kept() & index)
        return look, keep, np.ones(look.size, dtype=np.bool_), int(longest.sum())

    @property
    def with_blocks(self) -> np.ndarray:
        """True for requests that look up at least one block."""
        return self.look_len > 0


def _stream_ids(key: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """Session stream block ids: each request's ``(key << 24) | 0..length-1``."""
    return np.left_shift(np.repeat(np.maximum(key, 0), lengths), _BLOCK_BITS) | _ragged_range(lengths)[1]


def _take_ragged(ptr: np.ndarray, ids: np.ndarray, pos: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    lengths = (ptr[1:] - ptr[:-1])[pos]
    new_ptr = np.r_[0, np.cumsum(lengths)].astype(np.int64)
    if not new_ptr[-1]:
        return new_ptr, np.empty(0, dtype=np.int64)
    start = np.repeat(ptr[pos] - new_ptr[:-1], lengths)
    return new_ptr, ids[start + np.arange(new_ptr[-1], dtype=np.int64)]


def _ragged_range(lengths: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """CSR pointers of rows of ``lengths`` and, per element, its index inside its row."""
    ptr = np.r_[0, np.cumsum(lengths)].astype(np.int64)
    inner = np.arange(ptr[-1], dtype=np.int64) - np.repeat(ptr[:-1], lengths)
    return ptr, inner


def _session_codes(frame: pd.DataFrame) -> np.ndarray:
    col = frame["session_id"]
    cat = col.array if isinstance(col.array, pd.Categorical) else pd.Categorical(col)
    return np.asarray(cat.codes, dtype=np.int64)


def blocks_from_frame(frame: pd.DataFrame, block_size: int | None = None,
                      tokens: tuple[np.ndarray, np.ndarray] | None = None) -> PrefixBlocks | None:
    """The prompt blocks of every row (frame order): from ``hash_ids``, else from sessions; None without either.

    ``tokens``: each row's input and output tokens after a trim (the what-if), when they differ from the log's. A
    trim removes cached and uncached prompt tokens alike, as the planner's trim does: a hashed row keeps its blocks,
    each shorter by the trim; a session's stream is built from the trimmed turns. (The untrimmed blocks would cover
    nearly all of a shorter prompt: a 5% trim made the demo's session turns almost fully cached.)"""
    if block_size is not None and not (isinstance(block_size, (int, np.integer)) and 0 < block_size <= 1_048_576):
        raise ValueError(f"--block-size must be a whole number of tokens in 1..1048576, got {block_size!r}")
    sessions = has_sessions(frame)
    codes = _session_codes(frame) if sessions else None
    if has_hashes(frame):
        lengths, ids = row_blocks(frame["hash_ids"].to_numpy(dtype=object))
        if block_size is None:
            size, share = infer_block_size(frame)
            how = f"inferred from input length / number of hashes ({share:.0%} of requests agree)"
        else:
            size, how = int(block_size), "given (--block-size)"
        if tokens is not None:   # a trimmed prompt keeps its blocks, each of them shorter by the trim
            share = float(np.sum(tokens[0])) / max(float(frame["input_tokens"].sum()), 1.0)
            trimmed = max(int(round(size * share)), 1)
            how += f"; {size} × {share:.2f} = {trimmed} tokens per block after the trim"
            size = trimmed
        ptr = np.r_[0, np.cumsum(lengths)].astype(np.int64)
        key = codes if codes is not None else np.full(len(lengths), -1, dtype=np.int64)
        return PrefixBlocks(size, "block_hashes", how, ptr, ids, ptr, ids, key)
    if not sessions:
        return None
    size = int(block_size) if block_size is not None else engine_block_tokens()
    how = "given (--block-size)" if block_size is not None else "the engine's default KV block (vLLM: 16 tokens)"
    n, m = ((frame["input_tokens"].to_numpy(dtype=np.int64), frame["output_tokens"].to_numpy(dtype=np.int64))
            if tokens is None else (np.asarray(tokens[0], dtype=np.int64), np.asarray(tokens[1], dtype=np.int64)))
    in_session = codes >= 0
    look_len = np.where(in_session, -(-n // size), 0)          # every block of the prompt, the last maybe partial
    keep_len = np.where(in_session, (n + m) // size, 0)        # the full blocks of the whole context
    look_ptr = np.r_[0, np.cumsum(look_len)].astype(np.int64)
    keep_ptr = np.r_[0, np.cumsum(keep_len)].astype(np.int64)
    # the ids, (session code << 24) | index in the stream, are built when first read; session runs by construction
    return PrefixBlocks(size, "sessions", how, look_ptr, None, keep_ptr, None, codes, True)


# --- the requests ------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Requests:
    """Per-request arrays fed to the simulator: arrival (s, open loop only), input, output and cached tokens."""

    input_tokens: np.ndarray
    output_tokens: np.ndarray
    cached_tokens: np.ndarray
    arrival_s: np.ndarray | None = None
    product: np.ndarray | None = None
    blocks: PrefixBlocks | None = None   # prompt blocks per request (hashes or sessions): per-replica caches
    ttft_target_ms: np.ndarray | None = None   # per request (its product's class): the deadline scheduler's order

    def __len__(self) -> int:
        return int(self.input_tokens.size)

    def cached_before_lookup(self) -> np.ndarray:
        """Each request's cached tokens before a replica's prefix cache is looked up: 0 for one with prompt blocks
        (its hit is simulated at admission), the log's reported (after the what-if) for one without, as in a log
        with no blocks at all: both replay loops follow it, so a request in no session keeps its reported cache when
        other requests of the log have sessions (the "no size serves it" check credits every request its reported
        cache: the replay's, or about what a warm cache holds of its blocks)."""
        if self.blocks is None:
            return self.cached_tokens
        return np.where(self.blocks.with_blocks, 0, self.cached_tokens).astype(self.cached_tokens.dtype, copy=False)

    def take(self, index: np.ndarray) -> "Requests":
        """The requests at ``index`` (a boolean mask or positions), in that order, every array kept in step."""
        def sub(a: np.ndarray | None) -> np.ndarray | None:
            return None if a is None else a[index]
        return Requests(self.input_tokens[index], self.output_tokens[index], self.cached_tokens[index],
                        sub(self.arrival_s), sub(self.product),
                        None if self.blocks is None else self.blocks.take(index), sub(self.ttft_target_ms))


def log_tokens(frame: pd.DataFrame, purpose: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Input, output and cached tokens per request as floats (cached clipped to the input; 0 when not logged)."""
    for column in ("input_tokens", "output_tokens"):
        if column not in frame.columns:
            raise ValueError(f"the frame has no {column!r} column; load it with shapeviz.ingest.load_log")
    if len(frame) == 0:
        raise ValueError(f"the log has no requests to {purpose}")
    n = frame["input_tokens"].to_numpy(dtype=np.float64)
    m = frame["output_tokens"].to_numpy(dtype=np.float64)
    if "cached_tokens" not in frame.columns:
        return n, m, np.zeros_like(n)
    p = frame["cached_tokens"].astype("Float64").fillna(0.0).to_numpy(dtype=np.float64)
    return n, m, np.clip(p, 0.0, n)


def builds() -> int:
    """How many request tables this process has built (a sizing builds one: ``tests/unit/test_request_table.py``)."""
    return _BUILDS[0]


@dataclass(frozen=True)
class RequestTable:
    """A log's requests once, the what-if applied, in the frame's row order (rows without a timestamp left out when
    the log has timestamps): what every replay of the log slices (``requests``).

    ``input_tokens``/``output_tokens``/``cached_tokens``: each row's tokens after the what-if (``replayed_tokens``:
    the hit share set over the whole log, so a row's reported hit is the same in every window); ``arrival_ns``:
    nanoseconds from the log's first timestamp (None: no timestamps), the traffic lever applied per slice;
    ``product``: each row's code in ``products``; ``blocks``: the prompt blocks (None without hashes or sessions,
    or built without ``reuse``)."""

    whatif: WhatIf
    input_tokens: np.ndarray
    output_tokens: np.ndarray
    cached_tokens: np.ndarray
    arrival_ns: np.ndarray | None
    product: np.ndarray | None
    products: np.ndarray | None
    blocks: PrefixBlocks | None

    @classmethod
    def build(cls, frame: pd.DataFrame, whatif: WhatIf = WhatIf(), *, reuse: bool = True,
              block_size: int | None = None, purpose: str = "simulate") -> "RequestTable":
        """The table of a canonical frame after ``whatif``; with ``reuse`` the rows carry their prompt blocks when
        the log has block hashes or sessions (``block_size``: the hashes' block size, inferred from every row when
        None; sessions: the engine's block)."""
        _BUILDS[0] += 1
        n, m, p = log_tokens(frame, purpose)
        trimmed = None
        if whatif.trim_input or whatif.trim_output:   # the rows' tokens after the trim, as ``replayed_tokens`` rounds
            trimmed = (np.maximum(np.round(n * (1.0 - whatif.trim_input)), 1).astype(np.int64),
                       np.maximum(np.round(m * (1.0 - whatif.trim_output)), 1).astype(np.int64))
        blocks = blocks_from_frame(frame, block_size, trimmed) if reuse else None
        arrival_ns = None
        if "timestamp" in frame.columns and frame["timestamp"].notna().sum() >= 2:
            ts = frame["timestamp"]
            keep = ts.notna().to_numpy()
            arrival_ns = (ts[keep] - ts[keep].min()).to_numpy(dtype="timedelta64[ns]").view(np.int64)
            if not keep.all():
                n, m, p = n[keep], m[keep], p[keep]
                blocks = None if blocks is None else blocks.take(keep)
                frame = frame.loc[keep]
        product = products = None
        if "product" in frame.columns:
            col = frame["product"]
            cat = col.array if isinstance(col.array, pd.Categorical) else pd.Categorical(col.astype(str))
            product = np.asarray(cat.codes, dtype=np.int64)
            products = np.asarray([str(c) for c in cat.categories], dtype=object)
            if (product < 0).any():   # a missing label reads as str(nan), as the frame's astype(str) does
                product = np.where(product < 0, products.size, product)
                products = np.append(products, np.asarray([str(np.nan)], dtype=object))
        return cls(whatif, *replayed_tokens(n, m, p, whatif), arrival_ns, product, products, blocks)

    def __len__(self) -> int:
        return int(self.input_tokens.size)

    @property
    def arrival_s(self) -> np.ndarray | None:
        """Every row's arrival, seconds from the log's first request after the traffic lever (frame order)."""
        if self.arrival_ns is None:
            return None
        return self.arrival_ns / 1e9 / self.whatif.traffic_multiplier

    def requests(self, rows: np.ndarray | None = None, *, blocks: bool = True) -> Requests:
        """The requests of ``rows`` (increasing positions in the table; None: every row) as one replay takes them: in
        arrival order, arrivals from the first of them (after the traffic lever), with their prompt blocks unless
        ``blocks`` is False (or none of them has a session or a hashed block)."""
        inp, out, cached = self.input_tokens, self.output_tokens, self.cached_tokens
        arrival, product, kept = self.arrival_ns, self.product, self.blocks if blocks else None
        if rows is not None:
            inp, out, cached = inp[rows], out[rows], cached[rows]
            arrival = None if arrival is None else arrival[rows]
            product = None if product is None else product[rows]
            kept = None if kept is None else kept.take(rows)
        if kept is not None and not (kept.key >= 0).any() and not kept.look_ptr[-1] and not kept.keep_ptr[-1]:
            kept = None   # no session and no hashed block among these rows: the log's reported cached tokens
        if arrival is not None and arrival.size:
            arrival = (arrival - arrival.min()) / 1e9 / self.whatif.traffic_multiplier
        names = None if product is None else self.products[product]
        req = Requests(inp, out, cached, arrival, names, kept)
        if arrival is None or not np.any(np.diff(arrival) < 0):   # already in arrival order: no copy of the blocks
            return req
        return req.take(np.argsort(arrival, kind="stable"))


def replayed_tokens(n: np.ndarray, m: np.ndarray, p: np.ndarray,
                     whatif: WhatIf) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The log's tokens as one replay's whole requests after the what-if, with the planner's semantics
    (``Workload.apply``, one point per request): trims, the hit share set over these requests (each one's reported
    cached tokens scaled so the total reaches it, else that share of every prompt), each count rounded."""
    trimmed_n = n * (1.0 - whatif.trim_input)
    trimmed_m = m * (1.0 - whatif.trim_output)
    trimmed_p = p * (1.0 - whatif.trim_input)   # a trim removes cached and uncached prompt tokens alike
    if whatif.cache_hit is not None:
        weight = np.full(n.size, 1.0 / n.size)
        current = float(np.dot(weight, p)) / max(float(np.dot(weight, n)), 1e-12)
        trimmed_p = trimmed_p * (whatif.cache_hit / current) if current > 0 else trimmed_n * whatif.cache_hit
    trimmed_p = np.minimum(trimmed_p, trimmed_n)
    inp = np.maximum(np.round(trimmed_n), 1).astype(np.int64)
    out = np.maximum(np.round(trimmed_m), 1).astype(np.int64)
    cached = np.minimum(np.round(trimmed_p), inp - 1).clip(min=0).astype(np.int64)
    return inp, out, cached
