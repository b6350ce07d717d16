"""Prefix-cache reuse: how much of the prompt a prefix cache could serve, and at what cache size.

Three sources, best first:

1. **Block hashes** (Mooncake-style ``hash_ids``: one id per ``block_size``-token block, each id covering its
   block and every block before it). Replayed in arrival order through an ideal cache: the unbounded hit ratio
   (cold start, no eviction) and, for every cache size at once, the LRU hit ratio from Mattson stack distances.
2. **Reported cached tokens** (``cached_tokens``: OpenAI ``cached_tokens``, Anthropic
   ``cache_read_input_tokens``, OpenTelemetry ``cache_read.input_tokens``, TraceLab ``prefix_tokens``): what the
   provider's cache actually served, Σ cached / Σ input.
3. **Sessions alone**: an estimate that each turn reuses the previous turn's context (input + output).

``prefix_reuse`` picks the best source the frame carries; its ``to_dict()`` is the ``prefix_cache`` block of
``summary --json``. ``prefix_savings`` turns a hit ratio into prefill tokens, prefill GPU-time and money saved.

Definitions used throughout:

* a block **hits** when its id was seen in an earlier request (a repeat inside the same request is the same
  block and is counted once). With prefix hashes the seen blocks of a request always form a leading run, so
  "every hit block" (SOURCE.md's count) and "the leading run a prefix cache can use" are the same number;
  ``leading_run_share`` reports it so a trace with non-prefix hashes is visible.
* under **LRU** the blocks are replayed one by one through a block cache (Mattson). The rest of a prefix
  was touched just after the block that missed, so it is next in line for eviction and misses too: the hits
  stay a leading run, and the curve is what a prefix cache serves (the tests check it exactly against a plain
  LRU prefix cache that serves the cached leading run on arrival).
* **token-weighted** ratio = Σ over requests of min(block_size × hit blocks, input tokens) / Σ input tokens: the
  last block of a prompt is usually partial, so a full hit never counts more tokens than the prompt has.
* capacity in **GB** = blocks × block_size × kv_bytes_per_token / 1e9 (decimal gigabytes).
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field

import numpy as np
import pandas as pd

from shapeviz.analyses.sessions import (
    check_kv_bytes_per_token,
    has_sessions,
    session_turns,
)
from shapeviz.workload.requests import (  # noqa: F401  (the block helpers are the request table's, named here too)
    _CANDIDATE_BLOCK_SIZES,
    DEFAULT_BLOCK_SIZE,
    has_hashes,
    infer_block_size,
    row_blocks,
)
from shapeviz.workload.view import WorkloadView

# Above this many block accesses the capacity curve is estimated from a sample of the block ids (SHARDS)
# instead of computed exactly: exact costs O(N log N) numpy passes, about a second per million accesses
# (benchmarks/bench_prefix.py), and the sample keeps a million-request log to seconds.
DEFAULT_MAX_EXACT_ACCESSES = 4_000_000

# The error of an id-sampled curve comes mostly from ids with many accesses (shared system prompts, tool
# schemas); every id holding at least this share of all accesses is kept whole, which bounds the variance of the
# estimated share of reuses at about _HOT_SHARE * (1 - rate) / rate.
_HOT_SHARE = 1e-5
_MIN_SAMPLE_RATE = 0.001

# Number of log-spaced capacities in the default curve (plus 0 and the size where the curve saturates).
_CURVE_POINTS = 40

GB = 1e9

PrefillMs = Callable[[np.ndarray, np.ndarray], np.ndarray]

METHODS: tuple[str, ...] = ("block_hashes", "reported_cached_tokens", "session_estimate", "none")


# --------------------------------------------------------------------------------------------- block stream
@dataclass(frozen=True)
class _Blocks:
    """The frame's hash blocks flattened in arrival order (internal)."""

    ids: np.ndarray            # int64 block id per access, in request order then block order
    request: np.ndarray        # int64 index (into the ordered requests) of each access
    prev: np.ndarray           # int64 position of the previous access to the same id, -1 for a first access
    id_accesses: np.ndarray    # int64 how many accesses the id of each access has in the whole stream
    input_tokens: np.ndarray   # int64 input tokens per ordered request
    product_codes: np.ndarray  # int64 product code per ordered request (-1 when absent)
    products: list[str]        # product names for the codes
    n_requests: int
    dropped_repeats: int       # ids repeated inside one request, counted once


def _arrival_order(frame: pd.DataFrame) -> np.ndarray:
    """Row positions in arrival order: by timestamp (stable, missing last), else file order."""
    n = len(frame)
    if "timestamp" not in frame.columns:
        return np.arange(n)
    ts = pd.to_datetime(frame["timestamp"], utc=True)
    key = ts.to_numpy(dtype="datetime64[ns]").view(np.int64).copy()
    key[ts.isna().to_numpy()] = np.iinfo(np.int64).max
    return np.argsort(key, kind="stable")


def _product_codes(frame: pd.DataFrame) -> tuple[np.ndarray, list[str]]:
    """Product code per row and the names; the canonical categorical is read as is, without a pass over strings."""
    if "product" not in frame.columns:
        return np.full(len(frame), -1, dtype=np.int64), []
    col = frame["product"]
    cat = col.array if isinstance(col.array, pd.Categorical) else pd.Categorical(col)
    codes = cat.codes.astype(np.int64)
    names = [str(c) for c in cat.categories]
    if (codes < 0).any():  # a product is always present in the canonical frame; a hand-made one may lack it
        codes[codes < 0] = len(names)
        names.append("(no product)")
    return codes, names


def infer_block_size_from_totals(input_tokens: int, blocks: int, requests: int) -> int:
    """The block size from totals only (a workload sketch): Σ input tokens, Σ hashes and the requests holding them.

    With ``L = ceil(n / B)`` per request, ``B`` lies in [Σn / ΣL, Σn / (ΣL − requests)); with ``floor``, in
    (Σn / (ΣL + requests), Σn / ΣL]. The smallest power of two inside either interval, else the nearest one.
    """
    if blocks <= 0 or input_tokens <= 0:
        return DEFAULT_BLOCK_SIZE
    lo = input_tokens / blocks
    hi = input_tokens / (blocks - requests) if blocks > requests else np.inf
    for low, high, closed_high in ((lo, hi, False), (input_tokens / (blocks + requests), lo, True)):
        inside = _CANDIDATE_BLOCK_SIZES[(_CANDIDATE_BLOCK_SIZES >= low) & ((_CANDIDATE_BLOCK_SIZES <= high)
                                                                          if closed_high else
                                                                          (_CANDIDATE_BLOCK_SIZES < high))]
        if inside.size:
            return int(inside[0])
    return int(_CANDIDATE_BLOCK_SIZES[np.argmin(np.abs(np.log2(_CANDIDATE_BLOCK_SIZES) - np.log2(lo)))])


def _block_stream(frame: pd.DataFrame) -> _Blocks:
    """Flatten ``hash_ids`` in arrival order; rows without hashes take part with zero blocks."""
    order = _arrival_order(frame)
    values = frame["hash_ids"].to_numpy(dtype=object)[order]
    # Rows without hashes (e.g. a log combined with one that has none) take part with zero blocks.
    lengths, ids = row_blocks(values)
    request = np.repeat(np.arange(len(values), dtype=np.int64), lengths)
    inp = frame["input_tokens"].to_numpy(dtype=np.int64)[order]
    codes, products = _product_codes(frame)
    prev, counts = _previous_access(ids, with_counts=True)
    repeat = prev >= 0
    repeat[repeat] = request[prev[repeat]] == request[repeat]
    dropped = int(repeat.sum())
    if dropped:  # rare (prefix hashes never repeat inside a request): drop and redo the links
        ids, request = ids[~repeat], request[~repeat]
        prev, counts = _previous_access(ids, with_counts=True)
    return _Blocks(ids, request, prev, counts, inp, codes[order], products, len(values), dropped)


def _previous_access(ids: np.ndarray, *, with_counts: bool = False):
    """Position of the previous access to the same id (-1 for a first access); optionally each id's access count."""
    n = len(ids)
    prev = np.full(n, -1, dtype=np.int64)
    if n < 2:
        return (prev, np.ones(n, dtype=np.int64)) if with_counts else prev
    lo, hi = int(ids.min()), int(ids.max())
    bits = n.bit_length()
    if 0 <= lo and hi < (1 << (62 - bits)):
        # Pack (id, position) into one int64 and sort values, not indices: cheaper than an argsort, and
        # positions ascend within an id by construction. Stable (timsort) is quick on the long ascending runs
        # that fresh block ids make.
        packed = np.left_shift(ids, bits)
        packed |= np.arange(n, dtype=np.int64)
        packed.sort(kind="stable")
        sorted_ids = packed >> bits
        sorted_pos = packed & ((1 << bits) - 1)
        del packed
    else:
        sorted_pos = np.argsort(ids, kind="stable")
        sorted_ids = ids[sorted_pos]
    same = sorted_ids[1:] == sorted_ids[:-1]
    prev[sorted_pos[1:][same]] = sorted_pos[:-1][same]
    if not with_counts:
        return prev
    starts = np.r_[0, np.flatnonzero(~same) + 1]
    run = np.diff(np.r_[starts, n])
    counts = np.empty(n, dtype=np.int64)
    counts[sorted_pos] = np.repeat(run, run)
    return prev, counts


def _earlier_greater(values: np.ndarray, weights: np.ndarray | None = None) -> np.ndarray:
    """For each position i: how many earlier positions (or the sum of their int ``weights``) hold a larger value.

    Values must be distinct. Bottom-up merge sort in numpy, O(N log N): at width ``w`` the values are sorted
    inside runs of ``w``; packing (pair of runs, value, position in pair) into one int64 makes a stable sort a
    run merge, and for an element of a right-hand run the left-hand (earlier) elements merged before it are
    exactly the smaller earlier ones. Operations run in place where numpy allows: at millions of elements the
    cost is memory traffic, not arithmetic.
    """
    n = len(values)
    if n < 2:
        return np.zeros(n, dtype=np.int64)
    weighted = weights is not None
    v = np.asarray(values, dtype=np.int64)
    v = v - v.min()
    span = np.int64(v.max() + 1)
    pos = np.arange(n, dtype=np.int64)
    vals = v.copy()
    acc = np.zeros(n, dtype=np.int64)  # count (or weight) of smaller earlier elements, in current order
    if weighted:
        wts = np.asarray(weights, dtype=np.int64).copy()
        earlier_total = np.cumsum(wts)
        earlier_total -= wts
    key = np.empty(n, dtype=np.int64)
    tmp = np.empty(n, dtype=np.int64)
    pair = np.empty(n, dtype=np.int64)
    local = np.empty(n, dtype=np.int64)
    level = 0
    while (1 << level) < n:
        w = 1 << level
        shift = level + 1
        mask = np.int64(2 * w - 1)
        np.right_shift(pos, shift, out=pair)
        np.multiply(pair, span, out=tmp)
        np.add(tmp, vals, out=key)
        np.left_shift(key, shift, out=key)
        np.bitwise_and(pos, mask, out=local)
        np.bitwise_or(key, local, out=key)
        key.sort(kind="stable")  # timsort: merges the two sorted runs of each pair
        old_local = np.bitwise_and(key, mask)
        np.right_shift(key, shift, out=key)
        np.subtract(key, tmp, out=vals)
        np.left_shift(pair, shift, out=pair)  # now: first position of the pair
        old = np.bitwise_or(pair, old_local)
        from_right = old_local >= w
        acc = acc[old]
        if weighted:
            wts = wts[old]
            np.multiply(wts, ~from_right, out=tmp)   # weights of the left-run elements, 0 for the right run
            cum = np.cumsum(tmp)
            cum -= tmp
            cum -= cum[pair]                           # left-run weight merged before each element
            cum *= from_right
            acc += cum
        else:
            # merged rank inside the pair minus rank inside its own run = smaller elements from the left run
            np.subtract(local, np.bitwise_and(old_local, w - 1), out=tmp)
            tmp *= from_right
            acc += tmp
        level += 1
    smaller = np.empty(n, dtype=np.int64)
    smaller[np.argsort(v, kind="stable")] = acc  # the final order is sorted by value
    return (earlier_total - smaller) if weighted else (pos - smaller)


def lru_stack_distances(ids: np.ndarray) -> np.ndarray:
    """LRU stack distance of every access (distinct other ids since its last access); -1 for a first access.

    An access hits an LRU cache of ``C`` entries iff its stack distance is < ``C`` (Mattson et al., 1970), so
    one pass gives the hit ratio of every capacity.
    """
    ids = np.asarray(ids, dtype=np.int64)
    prev = _previous_access(ids)
    return _distances_from_prev(prev)


_HOT_UNIT = np.int64(1 << 32)  # packs two counts in one int64: hot ids above, sampled ids below


def _distances_from_prev(prev: np.ndarray, hot: np.ndarray | None = None, rate: float = 1.0) -> np.ndarray:
    """Stack distance of each access from its previous-access link; -1 for a first access.

    distance(i) = accesses strictly between prev(i) and i, minus the repeats among them (accesses j < i whose
    own previous access lies after prev(i)). For a SHARDS sample, ``hot`` marks the ids kept whole: each counts
    once, every other sampled id stands for 1/rate ids (float result). Both counts travel packed in one int64.
    """
    reuse = np.flatnonzero(prev >= 0)
    p = prev[reuse]
    if hot is None:
        dist = np.full(len(prev), -1, dtype=np.int64)
        if len(reuse):
            dist[reuse] = (reuse - p - 1) - _earlier_greater(p)
        return dist
    dist = np.full(len(prev), -1.0)
    if len(reuse):
        units = np.where(hot, _HOT_UNIT, np.int64(1))
        before = np.cumsum(units)
        before -= units
        packed = (before[reuse] - before[p] - units[p]) - _earlier_greater(p, units[reuse])
        dist[reuse] = (packed >> 32) + (packed & (_HOT_UNIT - 1)) / rate
    return dist


# ---------------------------------------------------------------------------------------- results (block)
@dataclass(frozen=True)
class CapacityCurve:
    """LRU hit ratio against cache capacity; ``points`` has capacity_blocks, capacity_gb, hit_ratio_*."""

    points: pd.DataFrame
    method: str                 # "exact" or "shards"
    sample_rate: float          # 1.0 when exact
    description: str

    def records(self) -> list[dict]:
        """The points as plain JSON-safe dicts."""
        return [
            {
                "capacity_blocks": int(r.capacity_blocks),
                "capacity_gb": None if pd.isna(r.capacity_gb) else float(r.capacity_gb),
                "hit_ratio_blocks": float(r.hit_ratio_blocks),
                "hit_ratio_tokens": float(r.hit_ratio_tokens),
            }
            for r in self.points.itertuples(index=False)
        ]


@dataclass(frozen=True)
class BlockReuse:
    """Unbounded prefix-cache reuse from block hashes, plus the LRU capacity curve when asked."""

    block_size: int
    requests: int               # requests that carry at least one block
    blocks: int
    unique_blocks: int
    hit_blocks: int
    hit_ratio_blocks: float
    hit_ratio_tokens: float
    leading_run_share: float    # share of hit blocks that sit in their request's leading run of hits (1.0: prefix)
    repeats_in_request: int     # ids repeated inside one request (counted once)
    per_product: dict[str, dict]
    curve: CapacityCurve | None


def _check_block_size(block_size: int) -> int:
    if not (isinstance(block_size, (int, np.integer)) and 0 < block_size <= 1_048_576):
        raise ValueError(f"block_size={block_size!r} must be a whole number of tokens in 1..1048576 (Mooncake: 512)")
    return int(block_size)


def _check_capacities(capacities: Sequence[int] | np.ndarray | None) -> np.ndarray | None:
    if capacities is None:
        return None
    arr = np.asarray(capacities, dtype=np.float64).ravel()
    if arr.size == 0 or not np.all(np.isfinite(arr)) or (arr < 0).any() or (arr != np.round(arr)).any():
        raise ValueError(f"capacities={list(capacities)!r} must be whole numbers of blocks >= 0")
    return np.unique(arr.astype(np.int64))


def _token_weights(
    blocks: _Blocks, hit_idx: np.ndarray, block_size: int, dist: np.ndarray | None = None
) -> np.ndarray:
    """Tokens each hit block adds when it turns into a hit: block_size, less where the prompt runs out.

    A request's hit tokens are min(block_size × hits, input); ordering its hit blocks by the order in which
    they become hits as capacity grows, the k-th (0-based) adds clip(input − block_size·k, 0, block_size). That
    order is the block order (``dist`` None, or distances already ascending along each request, as prefix
    hashes make them); otherwise the capped requests' hits are sorted by ``dist``.
    """
    weights = np.full(len(hit_idx), float(block_size))
    req = blocks.request[hit_idx]  # ascending: hit_idx is in stream order
    hits_per_req = np.bincount(req, minlength=blocks.n_requests)
    capped = block_size * hits_per_req > blocks.input_tokens
    sel = np.flatnonzero(capped[req])
    if not len(sel):
        return weights
    r = req[sel]
    if dist is not None:
        d = dist[sel]
        same = r[1:] == r[:-1]
        if (d[1:][same] < d[:-1][same]).any():
            sel = sel[np.lexsort((d, r))]
            r = req[sel]
    start = np.r_[0, np.flatnonzero(r[1:] != r[:-1]) + 1]
    rank = np.arange(len(sel)) - np.repeat(start, np.diff(np.r_[start, len(sel)]))  # 0-based within request
    weights[sel] = np.clip(blocks.input_tokens[r] - block_size * rank, 0, block_size)
    return weights


def _shards_mask(ids: np.ndarray, rate: float) -> np.ndarray:
    """Spatial sample: keep every access of an id whose mixed hash falls under ``rate`` (SHARDS, FAST'15)."""
    mixed = (ids.astype(np.uint64) * np.uint64(0x9E3779B97F4A7C15)) >> np.uint64(11)  # Fibonacci hashing
    return mixed < np.uint64(int(rate * float(1 << 53)))


def _default_capacities(max_distance: float) -> np.ndarray:
    top = max(int(np.ceil(max_distance)) + 1, 1)
    grid = np.unique(np.round(np.geomspace(1, top, _CURVE_POINTS)).astype(np.int64))
    return np.unique(np.r_[0, grid, top])


def _curve(
    blocks: _Blocks,
    block_size: int,
    kv_bytes_per_token: float | None,
    capacities: np.ndarray | None,
    max_exact_accesses: int,
    sample_rate: float | None,
) -> CapacityCurve:
    n = len(blocks.ids)
    prev = blocks.prev
    hit_all = np.flatnonzero(prev >= 0)
    # Within a prefix-hash request the hits turn on in block order as capacity grows (the stack distance grows
    # along the prefix), so the position rank gives each hit its token weight; exact mode re-ranks by distance.
    pos_weights = _token_weights(blocks, hit_all, block_size)
    total_tokens = float(blocks.input_tokens[np.bincount(blocks.request, minlength=blocks.n_requests) > 0].sum())

    if sample_rate is not None and not (0 < sample_rate <= 1):
        raise ValueError(f"sample_rate={sample_rate!r} must be in (0, 1] (1 = exact)")
    hot_min = max(2, int(np.ceil(n * _HOT_SHARE)))
    hot = blocks.id_accesses >= hot_min
    n_hot = int(hot.sum())
    if sample_rate is None:
        rate = 1.0 if n <= max_exact_accesses else float(
            np.clip((max_exact_accesses - n_hot) / max(n - n_hot, 1), _MIN_SAMPLE_RATE, 1.0)
        )
    else:
        rate = float(sample_rate)

    if rate >= 1.0:
        dist = _distances_from_prev(prev)[hit_all].astype(np.float64)
        block_w = np.ones(len(hit_all))
        token_w = _token_weights(blocks, hit_all, block_size, dist)
        method, description = "exact", "exact LRU stack distances (Mattson) over every block access"
    else:
        keep = hot | _shards_mask(blocks.ids, rate)
        kept_hot = hot[keep]
        sub_pos = np.cumsum(keep) - 1
        kept_prev = prev[keep]
        sub_prev = np.where(kept_prev >= 0, sub_pos[np.maximum(kept_prev, 0)], -1)
        sub_dist = _distances_from_prev(sub_prev, kept_hot, rate)
        reuse = sub_prev >= 0
        dist = sub_dist[reuse]
        # Each kept access stands for 1/rate accesses, except those of hot ids, which are all kept.
        block_w = np.where(kept_hot[reuse], 1.0, 1.0 / rate)
        token_w = block_w * pos_weights[keep[hit_all]]
        method = "shards"
        description = (
            f"sampled (SHARDS): every block id with >= {hot_min} accesses ({n_hot / max(n, 1):.1%} of accesses) "
            f"plus a hash sample of {rate:.1%} of the other ids, weighted by 1/rate; the sample gives the share "
            "of reuses under each capacity, the total (unbounded) reuse is exact"
        )
    order = np.argsort(dist, kind="stable")
    dist_sorted = dist[order]
    cum_blocks = np.r_[0.0, np.cumsum(block_w[order])]
    cum_tokens = np.r_[0.0, np.cumsum(token_w[order])]
    caps = capacities if capacities is not None else _default_capacities(dist_sorted[-1] if len(dist) else 0.0)
    below = np.searchsorted(dist_sorted, caps, side="left")  # reuses with stack distance < capacity
    # Scale the (possibly sampled) cumulative shares to the exact totals: exact mode is unchanged by this.
    hit_blocks = len(hit_all) * cum_blocks[below] / max(cum_blocks[-1], 1e-300)
    hit_tokens = float(pos_weights.sum()) * cum_tokens[below] / max(cum_tokens[-1], 1e-300)
    points = pd.DataFrame(
        {
            "capacity_blocks": caps.astype(np.int64),
            "capacity_gb": (
                caps * block_size * kv_bytes_per_token / GB if kv_bytes_per_token is not None
                else np.full(len(caps), np.nan)
            ),
            "hit_ratio_blocks": hit_blocks / n if n else np.zeros(len(caps)),
            "hit_ratio_tokens": hit_tokens / total_tokens if total_tokens else np.zeros(len(caps)),
        }
    )
    return CapacityCurve(points, method, rate, description)


def block_reuse(
    frame: pd.DataFrame,
    *,
    block_size: int | None = None,
    kv_bytes_per_token: float | None = None,
    capacities: Sequence[int] | np.ndarray | None = None,
    curve: bool = True,
    max_exact_accesses: int = DEFAULT_MAX_EXACT_ACCESSES,
    sample_rate: float | None = None,
) -> BlockReuse:
    """Unbounded and LRU prefix-cache hit ratios from the frame's ``hash_ids``, requests in arrival order.

    ``block_size`` None: inferred from input length over the number of hashes (``infer_block_size``).
    """
    kv_bytes_per_token = check_kv_bytes_per_token(kv_bytes_per_token)
    caps = _check_capacities(capacities)
    if not has_hashes(frame):
        raise ValueError("the frame has no hash_ids blocks; block reuse needs a Mooncake-style hash_ids column")
    block_size = infer_block_size(frame)[0] if block_size is None else _check_block_size(block_size)
    blocks = _block_stream(frame)
    hit = blocks.prev >= 0
    n = len(blocks.ids)
    blocks_per_req = np.bincount(blocks.request, minlength=blocks.n_requests)
    hits_per_req = np.bincount(blocks.request, weights=hit, minlength=blocks.n_requests).astype(np.int64)
    with_blocks = blocks_per_req > 0
    hit_tokens = np.minimum(block_size * hits_per_req, blocks.input_tokens)
    total_tokens = blocks.input_tokens[with_blocks].sum()

    # Leading run: blocks before the request's first miss. Hits after a miss would mean non-prefix hashes.
    first_block = np.r_[0, np.cumsum(blocks_per_req)[:-1]]
    miss_pos = np.flatnonzero(~hit)
    first_miss = np.full(blocks.n_requests, np.iinfo(np.int64).max)
    np.minimum.at(first_miss, blocks.request[miss_pos], miss_pos)
    leading = np.minimum(first_miss - first_block, blocks_per_req)
    leading_hits = int(np.minimum(leading, hits_per_req).sum())

    per_product: dict[str, dict] = {}
    if blocks.products:
        codes = blocks.product_codes
        k = len(blocks.products)
        req_n = np.bincount(codes[with_blocks], minlength=k)
        blk = np.bincount(codes, weights=blocks_per_req, minlength=k)
        hb = np.bincount(codes, weights=hits_per_req, minlength=k)
        tok = np.bincount(codes[with_blocks], weights=blocks.input_tokens[with_blocks], minlength=k)
        htok = np.bincount(codes[with_blocks], weights=hit_tokens[with_blocks], minlength=k)
        for i, name in enumerate(blocks.products):
            if req_n[i]:
                per_product[name] = {
                    "requests": int(req_n[i]),
                    "hit_ratio_blocks": float(hb[i] / blk[i]) if blk[i] else 0.0,
                    "hit_ratio_tokens": float(htok[i] / tok[i]) if tok[i] else 0.0,
                }
    lru = _curve(blocks, block_size, kv_bytes_per_token, caps, max_exact_accesses, sample_rate) if curve else None
    n_hits = int(hit.sum())
    return BlockReuse(
        block_size=block_size,
        requests=int(with_blocks.sum()),
        blocks=n,
        unique_blocks=n - n_hits,
        hit_blocks=n_hits,
        hit_ratio_blocks=n_hits / n if n else 0.0,
        hit_ratio_tokens=float(hit_tokens[with_blocks].sum() / total_tokens) if total_tokens else 0.0,
        leading_run_share=leading_hits / n_hits if n_hits else 1.0,
        repeats_in_request=blocks.dropped_repeats,
        per_product=per_product,
        curve=lru,
    )


def capacity_blocks_for_gb(gb: float, *, kv_bytes_per_token: float, block_size: int = DEFAULT_BLOCK_SIZE) -> int:
    """How many ``block_size``-token blocks of KV fit in ``gb`` decimal gigabytes."""
    kv = check_kv_bytes_per_token(kv_bytes_per_token)
    if not (np.isfinite(gb) and gb >= 0):
        raise ValueError(f"gb={gb!r} must be a cache size in GB >= 0")
    return int(gb * GB // (_check_block_size(block_size) * kv))


# ------------------------------------------------------------------------------------- reported / sessions
def reported_hit_ratio(frame: pd.DataFrame) -> dict | None:
    """Σ cached / Σ input over rows that report ``cached_tokens`` (overall and per product); None if none do."""
    if "cached_tokens" not in frame.columns:
        return None
    cached = pd.to_numeric(frame["cached_tokens"], errors="coerce")
    rows = cached.notna().to_numpy()
    if not rows.any():
        return None
    cached_v = cached.to_numpy(dtype=np.float64, na_value=0.0)[rows]
    inp = frame["input_tokens"].to_numpy(dtype=np.float64)[rows]
    bad = cached_v > inp
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise ValueError(
            f"cached_tokens={cached_v[i]:.0f} exceeds input_tokens={inp[i]:.0f} on {int(bad.sum())} rows; "
            "map the cached-token column to the count of cached *input* tokens"
        )
    products = frame["product"].to_numpy()[rows] if "product" in frame.columns else None
    return {"coverage": float(rows.mean()), **_token_ratios(cached_v, inp, products)}


def session_hit_estimate(frame: pd.DataFrame) -> dict | None:
    """Estimated hit ratio if every turn reused the previous turn's context; None without sessions."""
    if not has_sessions(frame):
        return None
    turns = session_turns(frame)
    # Each request's estimated reuse, aligned to the frame (requests outside sessions reuse nothing).
    repeated = pd.Series(turns["repeated_tokens"].to_numpy(dtype=np.float64), index=turns["row"].to_numpy())
    repeated = repeated.reindex(frame.index, fill_value=0.0).to_numpy()
    inp = frame["input_tokens"].to_numpy(dtype=np.float64)
    products = frame["product"].to_numpy() if "product" in frame.columns else None
    return _token_ratios(repeated, inp, products)


def _token_ratios(reused: np.ndarray, input_tokens: np.ndarray, products: np.ndarray | None) -> dict:
    """Σ reused / Σ input tokens, overall and per product (token-weighted, like every ratio here)."""
    total = input_tokens.sum()
    out: dict = {
        "requests": int(len(input_tokens)),
        "hit_ratio_tokens": float(reused.sum() / total) if total else 0.0,
        "per_product": {},
    }
    if products is not None:
        sub = pd.DataFrame({"product": products, "reused": reused, "input": input_tokens})
        g = sub.groupby("product", observed=True, sort=True)
        sums, counts = g[["reused", "input"]].sum(), g.size()
        out["per_product"] = {
            str(p): {"requests": int(counts[p]), "hit_ratio_blocks": None,
                     "hit_ratio_tokens": float(r.reused / r.input) if r.input else 0.0}
            for p, r in sums.iterrows()
        }
    return out


# ----------------------------------------------------------------------------------------------- summary
@dataclass(frozen=True)
class PrefixReuse:
    """The best prefix-cache reuse figure the log supports; ``to_dict()`` is summary JSON's ``prefix_cache``."""

    method: str                      # block_hashes | reported_cached_tokens | session_estimate | none
    provenance: str                  # simulated (from hashes) | measured (reported) | estimated | none
    definition: str
    hit_ratio_blocks: float | None
    hit_ratio_tokens: float | None
    requests: int
    block_size: int | None = None
    block_size_source: str | None = None   # given, or inferred from input length / number of hashes
    capacity_curve: list[dict] = field(default_factory=list)
    curve_method: str | None = None
    per_product: dict[str, dict] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict:
        """Plain JSON-safe dict with stable keys."""
        return asdict(self)


_DEFINITIONS = {
    "block_hashes": (
        "Share of prompt blocks ({bs} tokens each) whose prefix hash appeared in an earlier request, replaying "
        "requests in arrival order through an ideal cache that starts empty and never evicts; token-weighted = "
        "Σ min({bs} × hit blocks, input tokens) / Σ input tokens; the capacity curve is the same under LRU "
        "eviction at block granularity."
    ),
    "reported_cached_tokens": (
        "Cached input tokens the log reports, Σ cached_tokens / Σ input_tokens over the rows that report them."
    ),
    "session_estimate": (
        "Estimate, not measured: each turn of a session is assumed to reuse the previous turn's context "
        "(its input + output, capped at the new input) from a warm cache; requests outside sessions reuse nothing."
    ),
    "none": "The log has no block hashes, cached-token counts or session ids, so prefix reuse cannot be seen.",
}


def prefix_reuse(
    frame: pd.DataFrame,
    *,
    block_size: int | None = None,
    kv_bytes_per_token: float | None = None,
    capacities: Sequence[int] | np.ndarray | None = None,
    max_exact_accesses: int = DEFAULT_MAX_EXACT_ACCESSES,
) -> PrefixReuse:
    """Prefix-cache reuse by the best available method: block hashes > reported cached tokens > sessions.

    ``block_size``: the hashes' block size in tokens; None infers it from input length over the number of hashes
    (a log of 64-token blocks read as 512-token ones would count each hit block eight times over).
    """
    if block_size is not None:
        block_size = _check_block_size(block_size)
    if has_hashes(frame):
        if block_size is None:
            block_size, agree = infer_block_size(frame)
            size_source = f"inferred from input length / number of hashes ({agree:.0%} of requests agree)"
        else:
            size_source = "given"
        r = block_reuse(
            frame,
            block_size=block_size,
            kv_bytes_per_token=kv_bytes_per_token,
            capacities=capacities,
            max_exact_accesses=max_exact_accesses,
        )
        notes = []
        if r.requests < len(frame):
            notes.append(f"{len(frame) - r.requests} of {len(frame)} requests carry no hash_ids and are left out.")
        if r.repeats_in_request:
            notes.append(f"{r.repeats_in_request} block ids repeated inside their own request were counted once.")
        if r.leading_run_share < 1.0:
            notes.append(
                f"Only {r.leading_run_share:.1%} of hit blocks sit in their request's leading run: these hashes "
                "are not pure prefix hashes, and a prefix cache would serve only the leading run."
            )
        return PrefixReuse(
            method="block_hashes",
            provenance="simulated",
            definition=_DEFINITIONS["block_hashes"].format(bs=block_size),
            block_size_source=size_source,
            hit_ratio_blocks=r.hit_ratio_blocks,
            hit_ratio_tokens=r.hit_ratio_tokens,
            requests=r.requests,
            block_size=block_size,
            capacity_curve=r.curve.records() if r.curve else [],
            curve_method=r.curve.description if r.curve else None,
            per_product=r.per_product,
            notes=notes,
        )
    check_kv_bytes_per_token(kv_bytes_per_token)
    reported = reported_hit_ratio(frame)
    if reported is not None:
        notes = []
        if reported["coverage"] < 1.0:
            notes.append(f"{reported['coverage']:.1%} of requests report cached tokens; the rest are left out.")
        return PrefixReuse(
            method="reported_cached_tokens",
            provenance="measured",
            definition=_DEFINITIONS["reported_cached_tokens"],
            hit_ratio_blocks=None,
            hit_ratio_tokens=reported["hit_ratio_tokens"],
            requests=reported["requests"],
            per_product=reported["per_product"],
            notes=notes,
        )
    estimate = session_hit_estimate(frame)
    if estimate is not None:
        return PrefixReuse(
            method="session_estimate",
            provenance="estimated",
            definition=_DEFINITIONS["session_estimate"],
            hit_ratio_blocks=None,
            hit_ratio_tokens=estimate["hit_ratio_tokens"],
            requests=estimate["requests"],
            per_product=estimate["per_product"],
        )
    return PrefixReuse(
        method="none", provenance="none", definition=_DEFINITIONS["none"],
        hit_ratio_blocks=None, hit_ratio_tokens=None, requests=0,
    )


def prefix_reuse_of(view: WorkloadView, *, kv_bytes_per_token: float | None = None) -> PrefixReuse:
    """``prefix_reuse`` of a view: from every row, or from a sketch's sampled block ids (else its sample's rows)."""
    blocks = view.blocks
    if blocks is None or blocks.hit_ratio_blocks is None:
        return prefix_reuse(view.rows.frame, kv_bytes_per_token=kv_bytes_per_token)
    exact = blocks.rate >= 1.0
    # the sketch keeps totals only: the block size the log's Σ input tokens and Σ hashes allow
    size = infer_block_size_from_totals(blocks.input_tokens, blocks.accesses, blocks.with_hashes)
    return PrefixReuse(
        method="block_hashes", provenance="simulated" if exact else "estimated",
        definition=(f"Share of prompt blocks ({size} tokens each) whose prefix hash appeared in an "
                    "earlier request, through an ideal cache that starts empty and never evicts; token-weighted "
                    "≈ reused blocks × block size / input tokens."),
        hit_ratio_blocks=float(blocks.hit_ratio_blocks), hit_ratio_tokens=blocks.hit_ratio_tokens(size),
        requests=blocks.with_hashes, block_size=size,
        block_size_source="inferred from Σ input tokens / Σ hashes (workload sketch)",
        notes=[("every block id counted (workload sketch)" if exact else
                f"estimated from a SHARDS sample of {len(blocks.ids):,} block ids ({blocks.rate:.2%} of ids) in the "
                "workload sketch"), "no capacity curve from a sketch: it needs the order of every access"],
    )


# ----------------------------------------------------------------------------------------------- savings
@dataclass(frozen=True)
class PrefixSavings:
    """What a prefix-cache hit ratio saves on prefill work and on the input bill."""

    input_tokens: int
    cached_tokens: int                       # = prefill tokens saved
    prefill_time_saved_share: float          # of prefill GPU-time; from prefill_ms, else = token share
    prefill_time_basis: str                  # "prefill_ms" or "token share (no prefill model given)"
    input_cost_usd: float | None             # without a cache
    input_cost_with_cache_usd: float | None  # cached tokens billed at (1 - cached_discount)
    cost_saved_usd: float | None

    def to_dict(self) -> dict:
        """Plain JSON-safe dict."""
        return asdict(self)


def prefix_savings(
    input_tokens: np.ndarray | Sequence[int] | int,
    hit_ratio: float,
    *,
    prefill_ms: PrefillMs | None = None,
    cached_discount: float = 0.5,
    input_price_per_mtok: float | None = None,
) -> PrefixSavings:
    """Prefill tokens, prefill GPU-time share and input cost saved when ``hit_ratio`` of input is cached.

    ``cached_discount`` is the provider's discount on cached input (0.5 bills it at half price; pass the
    provider's own rate). ``prefill_ms(input_tokens, cached_tokens)`` is the capacity model's vectorised prefill
    time; without it the time saved is taken as the token share, which overstates it for long prompts (the new
    tokens still attend to the cached prefix: attention work ∝ n² − p²).
    """
    if not (isinstance(hit_ratio, (int, float, np.floating)) and 0.0 <= float(hit_ratio) <= 1.0):
        raise ValueError(f"hit_ratio={hit_ratio!r} must be a share in [0, 1] (e.g. 0.37 for 37%)")
    if not (0.0 <= float(cached_discount) <= 1.0):
        raise ValueError(f"cached_discount={cached_discount!r} must be in [0, 1] (0.5 = cached input at half price)")
    if input_price_per_mtok is not None and not (np.isfinite(input_price_per_mtok) and input_price_per_mtok >= 0):
        raise ValueError(f"input_price_per_mtok={input_price_per_mtok!r} must be a price in USD per 1M tokens >= 0")
    inp = np.atleast_1d(np.asarray(input_tokens, dtype=np.float64))
    if inp.size == 0 or not np.all(np.isfinite(inp)) or (inp < 0).any():
        raise ValueError("input_tokens must be a non-empty array of token counts >= 0")
    cached = np.floor(inp * float(hit_ratio))
    total, total_cached = float(inp.sum()), float(cached.sum())
    if prefill_ms is not None:
        cold = _call_prefill(prefill_ms, inp, np.zeros_like(inp))
        warm = _call_prefill(prefill_ms, inp, cached)
        share = float(1.0 - warm.sum() / cold.sum()) if cold.sum() > 0 else 0.0
        basis = "prefill_ms"
    else:
        share = total_cached / total if total else 0.0
        basis = "token share (no prefill model given)"
    cost = cost_cached = saved = None
    if input_price_per_mtok is not None:
        cost = total / 1e6 * input_price_per_mtok
        cost_cached = ((total - total_cached) + total_cached * (1.0 - cached_discount)) / 1e6 * input_price_per_mtok
        saved = cost - cost_cached
    return PrefixSavings(int(total), int(total_cached), share, basis, cost, cost_cached, saved)


def _call_prefill(prefill_ms: PrefillMs, input_tokens: np.ndarray, cached_tokens: np.ndarray) -> np.ndarray:
    """Call a vectorised prefill model and check it returned one finite time per request."""
    out = np.asarray(prefill_ms(input_tokens, cached_tokens), dtype=np.float64)
    if out.shape != input_tokens.shape or not np.all(np.isfinite(out)) or (out < 0).any():
        raise ValueError(
            f"prefill_ms returned shape {out.shape} (expected {input_tokens.shape}) or non-finite/negative times; "
            "it must map (input_tokens, cached_tokens) arrays to one time in ms per request"
        )
    return out
