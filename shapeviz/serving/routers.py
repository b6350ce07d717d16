"""Routers: which replica each request goes to, and so which prefix cache it meets.

* ``round_robin``: replicas in turn (the Kubernetes Service default).
* ``random``: a replica drawn uniformly at random, seeded (SGLang router's ``--policy random``; the baseline
  routing benchmarks report); no load signal at all.
* ``least_tokens``: the replica with the fewest outstanding tokens (prompt to prefill + output to decode).
* ``session``: session affinity by consistent hashing of the session (a ring with virtual nodes per replica), so
  every turn of a conversation meets the same cache; no load signal at all.
* ``prefix``: prefix-aware with a load guard, SGLang router's ``cache_aware`` rule (``data/routing.json`` has
  its thresholds and source): when the fleet is imbalanced (in-flight requests: max − min above an absolute
  threshold and max above a multiple of min) the least-loaded replica; otherwise the replica holding the
  longest cached prefix when it covers more than a share of the prompt, else the least-loaded one. The guard
  is what keeps one hot prefix from piling onto one replica; llm-d's scorers reach the same trade-off by
  weighting a prefix score against queue and KV-utilisation scores, Dynamo's KV router by a cost of blocks to
  prefill plus blocks in use.

A router reads only what a real one can see: the replicas' outstanding tokens, requests in flight and caches
(the prefix router reads the caches exactly, as routers fed by KV events do).
"""
from __future__ import annotations

import random
from typing import Any, Protocol, Sequence

import numpy as np

from shapeviz.serving.prefix_cache import routing_constants

ROUTERS = ("round_robin", "random", "least_tokens", "session", "prefix")
LOAD_ROUTERS = ("round_robin", "random", "least_tokens")   # read no cache: a pool without prefix caches can use them
LABELS = {
    "round_robin": "round-robin",
    "random": "random (seeded)",
    "least_tokens": "least outstanding tokens",
    "session": "session affinity (consistent hash)",
    "prefix": "prefix-aware with a load guard (SGLang cache_aware rule)",
}


class Replica(Protocol):
    """What a router may read of a replica."""

    outstanding: int      # tokens routed here and not yet processed
    in_flight: int        # requests routed here and not finished
    cache: Any            # PrefixCache | None


class Router:
    """Picks a replica among ``candidates`` (indices into ``fleet``) for request ``rid``."""

    def pick(self, rid: int, candidates: Sequence[int], fleet: Sequence[Replica]) -> int:  # pragma: no cover
        raise NotImplementedError


class RoundRobin(Router):
    """Replicas in turn."""

    def __init__(self) -> None:
        self.turn = 0

    def pick(self, rid: int, candidates: Sequence[int], fleet: Sequence[Replica]) -> int:
        k = candidates[self.turn % len(candidates)]
        self.turn += 1
        return k


class RandomRouter(Router):
    """A replica drawn uniformly among the candidates, from its own seeded stream (the same seed, the same picks)."""

    def __init__(self, seed: int = 0) -> None:
        self.rng = random.Random(seed)

    def pick(self, rid: int, candidates: Sequence[int], fleet: Sequence[Replica]) -> int:
        return candidates[self.rng.randrange(len(candidates))]


def random_words(seed: int, n: int) -> np.ndarray:
    """The first ``n`` 32-bit outputs of ``RandomRouter(seed)``'s stream (int64), for the compiled loop's draws.

    ``randrange(c)`` draws ``getrandbits(k)`` (k = c's bit length) until below ``c``, and ``getrandbits(k ≤ 32)``
    is one 32-bit output shifted right by 32 − k; ``getrandbits(32·n)`` returns n outputs, the first lowest. So a
    loop that walks these words the same way picks the replicas this router picks.
    """
    stream = random.Random(seed).getrandbits(32 * n) if n else 0
    return np.frombuffer(stream.to_bytes(4 * n, "little"), dtype="<u4").astype(np.int64)


class LeastTokens(Router):
    """The replica with the fewest outstanding tokens (first one on a tie)."""

    def pick(self, rid: int, candidates: Sequence[int], fleet: Sequence[Replica]) -> int:
        return min(candidates, key=lambda j: fleet[j].outstanding)


def _mix64(x: np.ndarray) -> np.ndarray:
    """splitmix64's finaliser: a well-spread 64-bit hash of int64 keys (wrapping arithmetic)."""
    z = x.astype(np.uint64) + np.uint64(0x9E3779B97F4A7C15)
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


def session_owners(keys: np.ndarray, replicas: Sequence[int]) -> np.ndarray:
    """Each key's replica on the consistent-hash ring of ``replicas`` (virtual nodes each); -1 for keys below 0.

    The ring's point at or after the key's hash (wrapping round), the pick of ``SessionAffinity`` (the compiled
    loop takes these picks as they are).
    """
    nodes = int(routing_constants()["session_affinity"]["virtual_nodes"]["value"])
    owner = np.repeat(np.asarray(replicas, dtype=np.int64), nodes)
    # the ring's points hash negative ids: a key (a session code, 0 up) never hashes onto a point exactly, which
    # sent the first sessions all to replica 0 (key k < virtual_nodes was replica 0's k-th point)
    node = owner * np.int64(1 << 20) + np.tile(np.arange(nodes, dtype=np.int64), len(replicas))
    points = _mix64(-1 - node)
    order = np.argsort(points, kind="stable")
    ring, owner = points[order], owner[order]
    keys = np.asarray(keys, dtype=np.int64)
    at = np.searchsorted(ring, _mix64(keys), side="left") % ring.size
    return np.where(keys >= 0, owner[at], -1)


class SessionAffinity(Router):
    """Consistent hashing of each request's session key onto a ring of virtual nodes; round-robin without a key."""

    def __init__(self, keys: np.ndarray, replicas: Sequence[int]) -> None:
        self.owner = session_owners(keys, replicas).tolist()
        self.fallback = RoundRobin()

    def pick(self, rid: int, candidates: Sequence[int], fleet: Sequence[Replica]) -> int:
        if self.owner[rid] < 0:
            return self.fallback.pick(rid, candidates, fleet)
        return self.owner[rid]


def prefix_thresholds() -> np.ndarray:
    """The prefix-aware rule's thresholds from ``data/routing.json``: cache share, absolute and relative imbalance."""
    c = routing_constants()["prefix_aware"]
    return np.array([float(c[k]["value"]) for k in ("cache_threshold", "balance_abs_threshold",
                                                      "balance_rel_threshold")])


class PrefixAware(Router):
    """SGLang's cache_aware rule on the replicas' actual caches (thresholds from ``data/routing.json``)."""

    def __init__(self, look: list[list[int]], input_tokens: np.ndarray) -> None:
        self.cache_threshold, self.abs_threshold, self.rel_threshold = prefix_thresholds().tolist()
        self.look = look
        self.input_tokens = input_tokens

    def pick(self, rid: int, candidates: Sequence[int], fleet: Sequence[Replica]) -> int:
        loads = [fleet[j].in_flight for j in candidates]
        hi, lo = max(loads), min(loads)
        if hi - lo > self.abs_threshold and hi > self.rel_threshold * lo:
            return candidates[loads.index(lo)]
        least = min(candidates, key=lambda j: fleet[j].outstanding)
        ids = self.look[rid]
        if not ids:
            return least
        best, best_blocks = least, -1
        for j in candidates:   # the longest cached prefix; among equals the one with fewer outstanding tokens
            cache = fleet[j].cache
            hit = cache.match(ids) if cache is not None else 0
            if hit > best_blocks or (hit == best_blocks and fleet[j].outstanding < fleet[best].outstanding):
                best, best_blocks = j, hit
        size = fleet[best].cache.block_size if fleet[best].cache is not None else 0
        rate = min(best_blocks * size, int(self.input_tokens[rid])) / max(int(self.input_tokens[rid]), 1)
        return best if rate > self.cache_threshold else least


def make_router(name: str, replicas: Sequence[int], keys: np.ndarray | None = None,
                look: list[list[int]] | None = None, input_tokens: np.ndarray | None = None, seed: int = 0) -> Router:
    """The router ``name`` over ``replicas``; session and prefix routers fall back to load when blocks are absent.

    ``seed`` seeds the random router's draws (the other routers are deterministic).
    """
    if name == "round_robin":
        return RoundRobin()
    if name == "random":
        return RandomRouter(seed)
    if name == "least_tokens":
        return LeastTokens()
    if name == "session":
        return SessionAffinity(keys, replicas) if keys is not None else RoundRobin()
    if name == "prefix":
        return PrefixAware(look, input_tokens) if look is not None else LeastTokens()
    raise ValueError(f"router={name!r} must be one of {ROUTERS}")
