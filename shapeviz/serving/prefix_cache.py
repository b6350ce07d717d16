"""Prefix caches that live on replicas: which prompt blocks a request can reuse, and how long they stay.

Each replica keeps its own cache inside its own KV pool, with the engines' semantics (vLLM's automatic prefix
caching, SGLang's radix cache): the blocks of a finished (or preempted) request stay cached until they are evicted,
least recently used first, when running sequences need the room; a new request's hit is the longest run of its
leading blocks found in that replica's cache when it is admitted (blocks held by running sequences count: they
are shared); hit blocks skip prefill.

Where the blocks come from (``blocks_from_frame``), best first:

1. the log's block hashes (``hash_ids``, Mooncake-style: one id per ``block_size`` tokens, each id covering its
   block and every block before it), with the log's block size (given, or inferred from input length over the
   number of hashes);
2. sessions: a turn's prompt starts with the previous turn's whole context (input + output), so the session is
   one growing token stream and block ``k`` of any of its turns is the same block; a finished turn leaves the
   full blocks of its whole context cached (an engine caches generated tokens too), in the engine's block size.

Without either, the simulator keeps the log's reported ``cached_tokens`` (or the what-if share) per request, as
before: every request gets its share whatever the router does.

Memory, as vLLM's and SGLang's block managers keep it: a running sequence's prompt blocks are reference-counted,
so a block that several running sequences share is held (and charged to the KV pool) once, and it leaves the
running set only when the last sequence holding it lets go; then it stays cached. Each sequence is charged its
own tokens beyond those blocks (the rest of its prompt, what it generates). Cached blocks that no sequence uses
take the free room, ``block_size`` tokens each, and are evicted least recently used as the running sequences grow.
A request's blocks become visible to others when it is admitted, a little before its prefill computes them.
"""
from __future__ import annotations

import json
from collections import OrderedDict
from dataclasses import dataclass, replace
from functools import cached_property, lru_cache

import numpy as np
import pandas as pd

from shapeviz.analyses.prefix import has_hashes, infer_block_size, row_blocks
from shapeviz.analyses.sessions import has_sessions
from shapeviz.datadir import DATA_DIR

SOURCES = ("block_hashes", "sessions")
_BLOCK_BITS = 24   # session stream block ids: (session code << 24) | block index


@lru_cache(maxsize=1)
def routing_constants() -> dict:
    """``data/routing.json``: router thresholds and the engine block size, each with its source."""
    return json.loads((DATA_DIR / "routing.json").read_text())


def engine_block_tokens() -> int:
    """The engine's KV block size used when reuse is built from sessions (vLLM's default)."""
    return int(routing_constants()["engine_block_tokens"]["value"])


@dataclass(frozen=True)
class PrefixBlocks:
    """Per request (in the simulator's order): the prompt blocks looked up at admission and the blocks it leaves.

    Ragged arrays in CSR form: request ``i`` looks up ``look_ids[look_ptr[i]:look_ptr[i+1]]`` and, when it
    finishes, leaves ``keep_ids[keep_ptr[i]:keep_ptr[i+1]]`` cached. ``key`` is the affinity key of the session
    router (the session's code; -1: no session).

    Blocks built from sessions come without their ids (None): request ``i``'s are ``(key[i] << 24) | 0..n-1``,
    built from the pointers and keys the first time they are read (the compiled loop's session runs never read
    them: at a 1M-request day's busiest hour they are 64M look-ups, a gigabyte, and a third of a sizing's CPU).
    """

    block_size: int
    source: str                 # block_hashes | sessions
    block_size_source: str      # how the block size was chosen (given, inferred, the engine default)
    look_ptr: np.ndarray
    look_ids: np.ndarray
    keep_ptr: np.ndarray
    keep_ids: np.ndarray
    key: np.ndarray

    def __post_init__(self) -> None:
        for name in ("look_ids", "keep_ids"):   # left unset: ``__getattr__`` builds them when first read
            if self.__dict__.get(name) is None:
                object.__delattr__(self, name)

    def __getattr__(self, name: str) -> np.ndarray:
        fields = self.__dict__
        if name not in ("look_ids", "keep_ids") or "look_ptr" not in fields:
            raise AttributeError(name)
        ptr = fields["look_ptr" if name == "look_ids" else "keep_ptr"]
        lengths = np.diff(ptr)
        ids = np.left_shift(np.repeat(np.maximum(fields["key"], 0), lengths), _BLOCK_BITS) | _ragged_range(lengths)[1]
        fields[name] = ids
        return ids

    def __len__(self) -> int:
        return int(self.look_ptr.size - 1)

    def take(self, index: np.ndarray) -> "PrefixBlocks":
        """The blocks of the requests at ``index`` (a boolean mask or positions), in that order."""
        index = np.asarray(index)
        pos = np.flatnonzero(index) if index.dtype == bool else index.astype(np.int64)
        if "look_ids" not in self.__dict__ and "keep_ids" not in self.__dict__:   # still without ids: stays so
            look_ptr = np.r_[0, np.cumsum(np.diff(self.look_ptr)[pos])].astype(np.int64)
            keep_ptr = np.r_[0, np.cumsum(np.diff(self.keep_ptr)[pos])].astype(np.int64)
            taken = PrefixBlocks(self.block_size, self.source, self.block_size_source, look_ptr, None, keep_ptr, None,
                                 self.key[pos])
            taken.__dict__["in_runs"] = True
            return taken
        look_ptr, look_ids = _take_ragged(self.look_ptr, self.look_ids, pos)
        keep_ptr, keep_ids = _take_ragged(self.keep_ptr, self.keep_ids, pos)
        taken = PrefixBlocks(self.block_size, self.source, self.block_size_source, look_ptr, look_ids,
                             keep_ptr, keep_ids, self.key[pos])
        if self.__dict__.get("in_runs"):   # a subset of session runs is session runs: not checked again
            taken.__dict__["in_runs"] = True
        return taken

    def lists(self) -> tuple[list[list[int]], list[list[int]]]:
        """Per request, the looked-up and the kept block ids as Python lists (what the caches walk)."""
        look = np.split(self.look_ids, self.look_ptr[1:-1])
        keep = np.split(self.keep_ids, self.keep_ptr[1:-1])
        return [a.tolist() for a in look], [a.tolist() for a in keep]

    def dense(self, group: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
        """The look-up and kept ids renumbered 0..U-1 (U distinct blocks), and where each looked-up block first
        occurs in its request (the compiled loop keeps its caches' state in arrays over those U blocks).

        ``group`` (per request, e.g. the replica it is routed to): a block is numbered apart in each group, so U
        counts distinct (group, block) pairs (one replica's copy of a block is not another's)."""
        if self.source == "sessions" and self._session_form():
            return self._dense_sessions(group)
        both = np.concatenate([self.look_ids, self.keep_ids])
        if group is not None:   # (group, block) pairs: the block's number, offset by its group
            _, ids = np.unique(both, return_inverse=True)
            rows = np.r_[np.repeat(np.arange(len(self)), np.diff(self.look_ptr)),
                         np.repeat(np.arange(len(self)), np.diff(self.keep_ptr))]
            both = np.asarray(group, dtype=np.int64)[rows] * (int(ids.max(initial=0)) + 1) + ids
        distinct, inverse = np.unique(both, return_inverse=True)
        look = inverse[:self.look_ids.size].astype(np.int64)
        row = np.repeat(np.arange(len(self), dtype=np.int64), np.diff(self.look_ptr))
        first = np.zeros(look.size, dtype=np.bool_)
        first[np.unique(row * max(distinct.size, 1) + look, return_index=True)[1]] = True
        return look, inverse[self.look_ids.size:].astype(np.int64), first, int(distinct.size)

    def _session_form(self) -> bool:
        """Every block id is ``(its request's session key << 24) | index`` (what ``_dense_sessions`` relies on: an id
        out of that form would index past its state in the compiled loop)."""
        for ptr, ids in ((self.look_ptr, self.look_ids), (self.keep_ptr, self.keep_ids)):
            owner = np.repeat(self.key, np.diff(ptr))
            if ids.size and not (np.all(owner >= 0) and np.array_equal(np.right_shift(ids, _BLOCK_BITS), owner)):
                return False
        return True

    @cached_property
    def in_runs(self) -> bool:
        """Every request looks up blocks 0..L-1 of its own session's stream and leaves blocks 0..K-1 (what
        ``blocks_from_frame`` builds from sessions): the compiled loop can then keep each replica's cache as runs
        of a session's blocks (``sim_core``'s session runs) instead of a cell per block. Checked once per set of
        blocks (the replays of one sizing share it)."""
        if self.source != "sessions":
            return False
        step = 4096   # requests at a time: the temporaries stay a few MB while the blocks are gigabytes
        for ptr, ids in ((self.look_ptr, self.look_ids), (self.keep_ptr, self.keep_ids)):
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
        look = np.left_shift(np.repeat(np.maximum(key, 0), np.diff(self.look_ptr)), _BLOCK_BITS) | (self.look_ids & mask)
        keep = np.left_shift(np.repeat(np.maximum(key, 0), np.diff(self.keep_ptr)), _BLOCK_BITS) | (self.keep_ids & mask)
        return replace(self, look_ids=look, keep_ids=keep, key=key)

    def _dense_sessions(self, group: np.ndarray | None) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
        """``dense`` without a sort of the blocks: a session's blocks are 0..its longest context's blocks, so each
        session (in each group) gets a run of dense ids (a turn's blocks are distinct: each occurs once in it)."""
        look_len, keep_len = np.diff(self.look_ptr), np.diff(self.keep_ptr)
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
        look = np.repeat(offset, look_len) + (self.look_ids & index)
        keep = np.repeat(offset, keep_len) + (self.keep_ids & index)
        return look, keep, np.ones(look.size, dtype=np.bool_), int(longest.sum())

    @property
    def with_blocks(self) -> np.ndarray:
        """True for requests that look up at least one block."""
        return np.diff(self.look_ptr) > 0


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
    # the ids, (session code << 24) | index in the stream, are built when first read (``PrefixBlocks``)
    blocks = PrefixBlocks(size, "sessions", how, look_ptr, None, keep_ptr, None, codes)
    blocks.__dict__["in_runs"] = True   # session runs by construction: not checked block by block
    return blocks


class PrefixCache:
    """One replica's prefix cache: blocks in use by running sequences, and evictable cached blocks in LRU order.

    ``capacity_blocks`` None (the engines): cached blocks live in the KV pool's free room (``fit``); a number caps
    the blocks held (cached + in use) instead, outside the pool (math.inf: unbounded), to check the simulator
    against the offline hit ratio and LRU curve.
    """

    def __init__(self, block_size: int, capacity_blocks: float | None = None) -> None:
        self.block_size = int(block_size)
        self.capacity_blocks = capacity_blocks
        self.free: OrderedDict[int, None] = OrderedDict()   # cached, no running sequence holds it; LRU first
        self.pinned: dict[int, int] = {}                      # block → running sequences holding it
        self.held: dict[int, int] = {}                        # pinned block → its tokens in the pool (held once)
        self.evicted = 0

    def match(self, ids: list[int]) -> int:
        """How many leading blocks of ``ids`` this replica holds (cached or in use)."""
        free, pinned = self.free, self.pinned
        hit = 0
        for b in ids:
            if b in free or b in pinned:
                hit += 1
            else:
                break
        return hit

    def shared_tokens(self, ids: list[int], tokens: list[int]) -> int:
        """Tokens of the distinct blocks of ``ids`` (``tokens`` each) that running sequences hold already."""
        pinned = self.pinned
        seen: set[int] = set()
        shared = 0
        for b, t in zip(ids, tokens):
            if b in pinned and b not in seen:
                shared += t
            seen.add(b)
        return shared

    def pin(self, ids: list[int], tokens: list[int] | None = None) -> None:
        """A sequence was admitted: its prompt blocks are in use (shared when another sequence holds them).

        ``tokens``: each block's tokens in the pool, recorded for blocks no running sequence held until now."""
        free, pinned, held = self.free, self.pinned, self.held
        for j, b in enumerate(ids):
            if b in pinned:
                pinned[b] += 1
            else:
                free.pop(b, None)
                pinned[b] = 1
                held[b] = 0 if tokens is None else tokens[j]

    def release(self, pinned_ids: list[int], keep_ids: list[int]) -> int:
        """A sequence finished or was preempted: its blocks stay cached, most recently used, in block order.

        Returns the tokens of the blocks no running sequence holds any more (their room is the cache's now)."""
        free, pinned, held = self.free, self.pinned, self.held
        freed = 0
        for b in pinned_ids:
            left = pinned[b] - 1
            if left:
                pinned[b] = left
            else:
                del pinned[b]
                freed += held.pop(b)
        for b in keep_ids:
            if b not in pinned:
                free[b] = None
                free.move_to_end(b)
        return freed

    def fit(self, room_tokens: int) -> None:
        """Evict least recently used cached blocks until they fit (the pool's free room, or the fixed capacity)."""
        if self.capacity_blocks is None:
            limit = max(int(room_tokens), 0) // self.block_size
        else:
            limit = self.capacity_blocks - len(self.pinned)
        free = self.free
        while free and len(free) > limit:
            free.popitem(last=False)
            self.evicted += 1

    @property
    def cached_blocks(self) -> int:
        """Blocks this replica holds (cached or in use)."""
        return len(self.free) + len(self.pinned)
