"""Prefix caches that live on replicas: which prompt blocks a request can reuse, and how long they stay.

Each replica keeps its own cache inside its own KV pool, with the engines' semantics (vLLM's automatic prefix
caching, SGLang's radix cache): the blocks of a finished (or preempted) request stay cached until they are evicted,
least recently used first, when running sequences need the room; a new request's hit is the longest run of its
leading blocks found in that replica's cache when it is admitted (blocks held by running sequences count: they
are shared); hit blocks skip prefill.

Where the blocks come from (``workload.requests.blocks_from_frame``, built once per log and what-if in the
request table), best first:

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

from collections import OrderedDict

# the prompt blocks are the request table's (``workload.requests``); named here too, where the caches read them
from shapeviz.workload.requests import (  # noqa: F401
    SOURCES,
    PrefixBlocks,
    blocks_from_frame,
    engine_block_tokens,
    routing_constants,
)


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
