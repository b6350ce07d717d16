"""The seeded demo and benchmark generator: canonical frames that look like real LLM request logs.

Every parameter lives in ``data/synth_profiles.json`` with its source (published statistics of real public
traces, or a stated assumption); this module only turns them into rows. The demo mix has one product per
workload shape of PRODUCT.md; the scenarios are the seed cases shown next to the upload.

How a frame is made, product by product, all vectorised:

* **Sessions.** A product draws sessions (geometric number of turns) until it has its share of the rows.
  Turn 0 sends the system prompt and a first message; every later turn sends the previous context again plus
  an append (the new message, tool results; for chat also the previous answer). When the context would pass
  the product's cap, it is compacted: the system prompt is kept and the history starts again.
* **Prefix cache.** ``cached_tokens`` is what a block prefix cache can serve: whole 512-token blocks of the
  shared system prompt (turn 0) or of the previous context (later turns). ``hash_ids`` are Mooncake-style
  prefix-block hashes consistent with it: identical ids mean a reusable prefix.
* **Time.** Session starts follow a Gamma renewal process (bursty, BurstGPT) whose clock is warped by a daily
  cosine cycle (trough at night); later turns follow after a think/tool gap. Timestamps are UTC.
"""
from __future__ import annotations

import json
import zlib
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np
import pandas as pd
import pyarrow as pa

from shapeviz.datadir import DATA_DIR
from shapeviz.schema import DTYPES

PROFILES_PATH: Path = DATA_DIR / "synth_profiles.json"

_Z90 = 1.2815515655446004  # standard normal quantile at 0.9: pins a lognormal by its p50 and p90
_SECONDS_PER_DAY = 86_400.0
_MAX_REQUESTS = 200_000_000  # far above any benchmark; guards against a typo allocating the machine away

LOG_FORMATS: tuple[str, ...] = ("csv", "tsv", "parquet", "jsonl", "json")


@lru_cache(maxsize=1)
def load_profiles() -> dict[str, Any]:
    """The generator's parameters and their sources, as read from ``data/synth_profiles.json``."""
    with PROFILES_PATH.open(encoding="utf-8") as fh:
        return json.load(fh)


def _scenario_table() -> dict[str, str]:
    return {name: spec["description"] for name, spec in load_profiles()["scenarios"].items()}


SCENARIOS: dict[str, str] = _scenario_table()
PRODUCTS: tuple[str, ...] = tuple(load_profiles()["products"])


# ---------------------------------------------------------------------------------------------------------
# One product's rows


@dataclass(frozen=True)
class _Part:
    """One stream of rows: a profile from the data file, under a product and model name."""

    product: str
    profile: str
    model: str
    n: int


@dataclass
class _Rows:
    """Columns of one part, in generation order (session by session, turn by turn)."""

    input_tokens: np.ndarray   # int64
    output_tokens: np.ndarray  # int64
    cached_blocks: np.ndarray  # int64, whole prefix blocks servable from cache
    system_blocks: int         # whole blocks of the shared system prompt
    epoch_start: np.ndarray    # bool: first row of a session or of a compacted context
    session: np.ndarray        # int64 session index within the part, -1 for single requests
    turn: np.ndarray           # int64 turn index, -1 for single requests
    seconds: np.ndarray        # float64 seconds since the start of the window


def _lognormal_draws(rng: np.random.Generator, n: int, spec: dict[str, Any]) -> np.ndarray:
    """Float draws from the lognormal pinned by the spec's p50 and p90 (or, for a heavy tail, p50 and mean)."""
    p50 = float(spec["p50"])
    if "p90" in spec:
        sigma = max(np.log(float(spec["p90"]) / p50), 0.0) / _Z90
    else:  # mean = p50 · exp(sigma² / 2)
        sigma = np.sqrt(2.0 * max(np.log(float(spec["mean"]) / p50), 0.0))
    return np.exp(np.log(p50) + sigma * rng.standard_normal(n))


def _lognormal(rng: np.random.Generator, n: int, spec: dict[str, Any], lo: float = 1, hi: float = np.inf) -> np.ndarray:
    """Integer token counts from the spec's lognormal, folded into the spec's [min, max] and [lo, hi].

    A draw below ``lo`` lands log-uniformly in [lo, 2·lo] (above ``hi``: in [hi/2, hi]) instead of on the
    boundary: clipping would pile those requests on one value, a hard line on the plane that no real log
    has, while folding keeps them on the same side of the median, so the published p50 still holds.
    """
    lo = max(lo, float(spec.get("min", lo)))
    hi = min(hi, float(spec.get("max", hi)))
    values = _lognormal_draws(rng, n, spec)
    low, high = values < lo, values > hi
    values[low] = lo * 2.0 ** rng.random(int(low.sum()))
    values[high] = hi / 2.0 ** rng.random(int(high.sum()))
    return np.clip(np.rint(values), lo, hi).astype(np.int64)


def _session_lengths(rng: np.random.Generator, n: int, mean_turns: float, max_turns: int) -> np.ndarray:
    """Turns per session (geometric with the given mean, capped), summing to exactly ``n`` rows."""
    if mean_turns <= 1 or max_turns <= 1:
        return np.ones(n, dtype=np.int64)
    p = 1.0 / mean_turns
    lengths = np.empty(0, dtype=np.int64)
    while lengths.sum() < n:  # one draw almost always suffices; the loop is over batches, not rows
        batch = int(np.ceil((n - lengths.sum()) / mean_turns * 1.2)) + 16
        lengths = np.concatenate([lengths, np.minimum(rng.geometric(p, batch), max_turns)])
    ends = np.cumsum(lengths)
    last = int(np.searchsorted(ends, n))
    lengths = lengths[: last + 1].copy()
    lengths[-1] -= int(ends[last] - n)
    return lengths


def _arrival_seconds(rng: np.random.Generator, n: int, span_s: float, arrivals: dict[str, Any],
                     start_hour_utc: float) -> np.ndarray:
    """Sorted arrival times in [0, span_s): Gamma renewal (bursts) on a clock warped by the daily cycle."""
    ratio = float(arrivals["diurnal_peak_to_trough"])
    amplitude = (ratio - 1.0) / (ratio + 1.0)  # rate ∝ 1 + a·cos(...), so peak/trough = (1+a)/(1-a)
    grid = np.linspace(0.0, span_s, int(np.ceil(span_s / 60.0)) + 2)  # minute resolution is plenty
    hours = start_hour_utc + grid / 3600.0
    rate = 1.0 + amplitude * np.cos(2 * np.pi * (hours - float(arrivals["diurnal_peak_hour_utc"])) / 24.0)
    cumulative = np.concatenate([[0.0], np.cumsum((rate[1:] + rate[:-1]) / 2 * np.diff(grid))])
    # A Gamma renewal process in "operational time" (uniform rate), then mapped through the inverse of the
    # cumulative daily intensity: bursts stay bursts, and the busy hours get more of them.
    gaps = rng.gamma(float(arrivals["gamma_shape"]), 1.0, n + 1)
    operational = np.cumsum(gaps)[:n] / gaps.sum()
    return np.interp(operational * cumulative[-1], cumulative, grid)


def _part_rows(part: _Part, seed: int, span_s: float, cfg: dict[str, Any]) -> _Rows:
    """Generate one part's rows: sessions, tokens, prefix-cache blocks and arrival times."""
    prof = cfg["products"][part.profile]
    block = int(cfg["block_size_tokens"]["value"])
    # A stream per product name: a product's rows do not change when other products are added or removed.
    rng = np.random.default_rng([seed, zlib.crc32(part.product.encode()), zlib.crc32(part.profile.encode())])
    n = part.n

    lengths = _session_lengths(rng, n, float(prof["sessions"]["mean_turns"]), int(prof["sessions"]["max_turns"]))
    n_sessions = len(lengths)
    starts = np.concatenate([[0], np.cumsum(lengths)[:-1]])
    session = np.repeat(np.arange(n_sessions, dtype=np.int64), lengths)
    turn = np.arange(n, dtype=np.int64) - starts[session]
    first = turn == 0

    system = int(prof["system_prompt_tokens"])
    cap = int(prof["context_cap_tokens"])
    first_input = _lognormal(rng, n_sessions, prof["first_input_tokens"], lo=system + 1, hi=cap - 1)
    output = _lognormal(rng, n, prof["output_tokens"])
    append = _lognormal(rng, n, prof["append_tokens"])
    append[first] = 0

    # Growth of the context since turn 0: each turn appends its new tokens (and, for chat, the previous answer).
    growth_step = append.copy()
    if prof["carry_output"]:
        growth_step[1:] += np.where(first[1:], 0, output[:-1])
    growth = np.cumsum(growth_step)
    growth -= growth[starts][session]
    # Compaction: past the cap, the history is replaced and the context restarts from the first prompt.
    room = cap - first_input[session]
    epoch = growth // room
    input_tokens = first_input[session] + growth % room
    epoch_start = first.copy()
    epoch_start[1:] |= epoch[1:] != epoch[:-1]

    # The servable prefix is the previous request's prompt (an engine may also keep the blocks of the previous
    # answer, but a replay of prompt hashes cannot see them, and cached_tokens must agree with hash_ids).
    previous_input = np.roll(input_tokens, 1)
    prefix = np.where(epoch_start, system, previous_input)
    cached_blocks = prefix // block

    # Time: sessions start on the arrival process, later turns follow after a think/tool gap. A session that
    # would run past the window ends at its drawn time instead (it runs backwards from there; squeezed if it
    # is longer than the window), so every request stays inside the window without piling up at its edge.
    session_start = _arrival_seconds(rng, n_sessions, span_s, cfg["arrivals"], _start_hour(cfg))
    gap = _lognormal_draws(rng, n, prof["turn_gap_s"])
    gap[first] = 0.0
    offset = np.cumsum(gap)
    offset -= offset[starts][session]
    duration = offset[starts + lengths - 1]
    latest = span_s * (1 - 1e-9)
    squeeze = np.where(duration > latest, latest / np.maximum(duration, 1e-12), 1.0)
    duration = duration * squeeze
    overflow = session_start + duration > latest
    session_start = np.where(overflow, np.clip(session_start - duration, 0.0, latest - duration), session_start)
    seconds = session_start[session] + offset * squeeze[session]

    single = lengths.max() == 1
    return _Rows(
        input_tokens=input_tokens,
        output_tokens=output,
        cached_blocks=cached_blocks,
        system_blocks=system // block,
        epoch_start=epoch_start,
        session=np.full(n, -1, dtype=np.int64) if single else session,
        turn=np.full(n, -1, dtype=np.int64) if single else turn,
        seconds=seconds,
    )


def _start_hour(cfg: dict[str, Any]) -> float:
    start = pd.Timestamp(cfg["start_utc"]["value"])
    return start.hour + start.minute / 60.0 + start.second / 3600.0


# ---------------------------------------------------------------------------------------------------------
# Prefix-block hashes


def _hash_ids(parts: list[_Rows], block: int) -> tuple[np.ndarray, np.ndarray]:
    """Mooncake-style prefix-block hashes of every row: (flat int64 ids, row offsets into them).

    A block id stands for its block and every block before it. Each row's blocks are three runs: the blocks of
    its product's shared system prompt (one id per block for the whole product), the blocks that repeat the
    previous context of its session (the ids of the requests that first wrote them in full), and its new
    blocks. All three runs are contiguous slices of one source array, so the ids are one vectorised gather.
    """
    inp = np.concatenate([p.input_tokens for p in parts])
    cached = np.concatenate([p.cached_blocks for p in parts])
    epoch_start = np.concatenate([p.epoch_start for p in parts])
    part_of = np.repeat(np.arange(len(parts)), [len(p.input_tokens) for p in parts])
    part_system = np.array([p.system_blocks for p in parts], dtype=np.int64)
    system_blocks = part_system[part_of]
    n_rows = len(inp)

    n_blocks = -(-inp // block)
    own = n_blocks
    total_system = int(part_system.sum())
    row_base = total_system + _exclusive_cumsum(own)

    # Blocks written for good: within an epoch (a session, or a stretch between compactions) the cached prefix
    # only grows, so row r is the writer of blocks [c_r, c_{r+1}). Laid end to end they form, per epoch, the
    # epoch's block ids in order; a later row's reused run is a prefix of its epoch's slice.
    same_epoch_next = np.zeros(n_rows, dtype=bool)
    same_epoch_next[:-1] = ~epoch_start[1:]
    written = np.where(same_epoch_next, np.roll(cached, -1), cached) - cached
    written_at = _exclusive_cumsum(written)
    final_ids = _runs(row_base + cached - written_at, written)
    epoch_first = np.maximum.accumulate(np.where(epoch_start, np.arange(n_rows), 0))

    new = n_blocks - cached
    new_at = _exclusive_cumsum(new)
    new_ids = _runs(row_base + cached - new_at, new)

    source = np.concatenate([np.arange(total_system, dtype=np.int64), final_ids, new_ids])
    # Per row, three runs: (start in source, length).
    starts = np.stack([
        _exclusive_cumsum(part_system)[part_of],
        total_system + written_at[epoch_first],
        total_system + len(final_ids) + new_at,
    ], axis=1).ravel()
    lengths = np.stack([system_blocks, cached - system_blocks, new], axis=1).ravel()
    ids = source[_runs(starts - _exclusive_cumsum(lengths), lengths)]
    return ids, np.concatenate([[0], np.cumsum(n_blocks)])


def _exclusive_cumsum(x: np.ndarray) -> np.ndarray:
    """Start offset of each run when runs of these lengths are laid end to end."""
    out = np.zeros(len(x), dtype=np.int64)
    np.cumsum(x[:-1], out=out[1:])
    return out


def _runs(shift: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """Concatenated runs ``shift[i] + position`` (position in the concatenation), vectorised."""
    total = int(lengths.sum())
    # int32 when it fits halves the memory traffic of the biggest arrays (tens of millions of blocks).
    dtype = np.int32 if max(total, int(np.abs(shift).max(initial=0)) + total) < 2**31 - 1 else np.int64
    out = np.repeat(shift.astype(dtype), lengths)
    out += np.arange(total, dtype=dtype)
    return out


# ---------------------------------------------------------------------------------------------------------
# The public API


def _split(n: int, shares: list[float]) -> list[int]:
    """Largest-remainder split of ``n`` rows by ``shares`` (exact, deterministic)."""
    w = np.asarray(shares, dtype=np.float64)
    exact = n * w / w.sum()
    counts = np.floor(exact).astype(np.int64)
    counts[np.argsort(-(exact - counts), kind="stable")[: n - counts.sum()]] += 1
    return [int(c) for c in counts]


def _check_common(n_requests: int, seed: int, days: float) -> None:
    whole = isinstance(n_requests, (int, np.integer)) and not isinstance(n_requests, bool)
    if not whole or not 1 <= n_requests <= _MAX_REQUESTS:
        raise ValueError(f"n_requests={n_requests!r} must be a whole number from 1 to {_MAX_REQUESTS:,}")
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise ValueError(f"seed={seed!r} must be a non-negative whole number")
    if isinstance(days, bool) or not (isinstance(days, (int, float, np.floating, np.integer))
                                      and np.isfinite(days) and 0 < days <= 366):
        raise ValueError(f"days={days!r} must be a number of days in (0, 366]")


def _resolve_products(products: list[str] | None, cfg: dict[str, Any]) -> list[str]:
    names = list(cfg["products"])
    if products is None:
        return names
    if isinstance(products, str):
        products = [products]
    by_shape = {p["shape"]: name for name, p in cfg["products"].items()}
    chosen: list[str] = []
    for p in products:
        name = p if p in cfg["products"] else by_shape.get(p)
        if name is None:
            raise ValueError(f"unknown product {p!r}: choose from {', '.join(names)} "
                             f"(or a shape: {', '.join(by_shape)})")
        if name not in chosen:
            chosen.append(name)
    if not chosen:
        raise ValueError("products=[] selects nothing: pass None for all products, or some of " + ", ".join(names))
    return chosen


def _session_categories(parts: list[_Part], n_sess: list[int]) -> pd.Index:
    """Session ids ``<product>-s0000001`` (with a part letter when a product has several parts), vectorised."""
    chunks = []
    for k, (part, count) in enumerate(zip(parts, n_sess)):
        if count == 0:
            continue
        label = part.product
        if sum(q.product == part.product for q in parts) > 1:
            label += "-" + "abcdefghijklmnopqrstuvwxyz"[k % 26]
        numbers = pd.Series(np.arange(count), dtype="int64").astype("str").str.zfill(7)
        chunks.append(label + "-s" + numbers)
    if not chunks:
        return pd.Index([], dtype="str")
    return pd.Index(pd.concat(chunks, ignore_index=True), dtype="str")


def _frame(parts: list[_Part], seed: int, days: float, with_hashes: bool) -> pd.DataFrame:
    """Generate the parts, sort by time, and assemble a canonical frame."""
    cfg = load_profiles()
    span_s = float(days) * _SECONDS_PER_DAY
    parts = [p for p in parts if p.n > 0]
    rows = [_part_rows(p, seed, span_s, cfg) for p in parts]

    seconds = np.concatenate([r.seconds for r in rows])
    order = np.argsort(seconds, kind="stable")

    def col(name: str) -> np.ndarray:
        return np.concatenate([getattr(r, name) for r in rows])[order]

    sizes = [p.n for p in parts]
    products = sorted({p.product for p in parts}, key=[p.product for p in parts].index)
    models = sorted({p.model for p in parts}, key=[p.model for p in parts].index)
    product_code = np.repeat(np.array([products.index(p.product) for p in parts], dtype=np.int16), sizes)[order]
    model_code = np.repeat(np.array([models.index(p.model) for p in parts], dtype=np.int16), sizes)[order]

    # Session ids: unique per part, "<product>-s<number>"; single requests carry none.
    session_local = np.concatenate([r.session for r in rows])
    n_sess = [int(r.session.max()) + 1 for r in rows]
    sess_base = np.concatenate([[0], np.cumsum(n_sess)])[:-1]
    part_index = np.repeat(np.arange(len(parts)), sizes)
    session_code = np.where(session_local >= 0, session_local + sess_base[part_index], -1)[order]
    categories = _session_categories(parts, n_sess)

    cached_blocks = col("cached_blocks")
    block = int(cfg["block_size_tokens"]["value"])
    turn = col("turn")
    start = pd.Timestamp(cfg["start_utc"]["value"]).tz_convert("UTC")
    ns = start.value + np.rint(col("seconds") * 1e9).astype(np.int64)

    data: dict[str, Any] = {
        "timestamp": pd.Series(ns.view("datetime64[ns]")).dt.tz_localize("UTC"),
        "product": pd.Categorical.from_codes(product_code, categories=pd.Index(products, dtype="str")),
        "session_id": pd.Categorical.from_codes(session_code, categories=categories),
        "turn": pd.arrays.IntegerArray(turn.astype(np.int32), turn < 0),
        "input_tokens": col("input_tokens").astype(np.int32),
        "output_tokens": col("output_tokens").astype(np.int32),
        "cached_tokens": pd.arrays.IntegerArray((cached_blocks * block).astype(np.int32), np.zeros(len(order), bool)),
        "model": pd.Categorical.from_codes(model_code, categories=pd.Index(models, dtype="str")),
    }
    if with_hashes:
        ids, offsets = _hash_ids(rows, block)
        # pyarrow cuts the flat ids into one numpy array per row in C (no Python loop over a million rows).
        per_row = pa.LargeListArray.from_arrays(pa.array(offsets), pa.array(ids)).to_numpy(zero_copy_only=False)
        data["hash_ids"] = per_row[order]
    frame = pd.DataFrame(data)
    if not len(categories):  # only single requests: the log would have no session column at all
        frame = frame.drop(columns=["session_id", "turn"])
    return frame.astype({c: DTYPES[c] for c in frame.columns if c != "hash_ids"})


def generate(n_requests: int, seed: int = 0, *, days: float = 1.0, products: list[str] | None = None,
             with_hashes: bool = True) -> pd.DataFrame:
    """A canonical frame of ``n_requests`` synthetic requests from the demo mix, deterministic for ``seed``.

    ``products`` picks a subset of the demo products (by name, or by shape id such as ``"rag"``); their
    shares are renormalised. ``with_hashes=False`` skips the ``hash_ids`` column, which dominates time and
    memory at millions of rows (the agent's long contexts carry hundreds of blocks per request).
    """
    _check_common(n_requests, seed, days)
    cfg = load_profiles()
    names = _resolve_products(products, cfg)
    counts = _split(int(n_requests), [float(cfg["products"][p]["share"]) for p in names])
    parts = [_Part(p, p, cfg["products"][p]["model"], c) for p, c in zip(names, counts)]
    return _frame(parts, int(seed), float(days), with_hashes)


def shared_prefix_log(rate_rps: float, n: int, seed: int = 0) -> pd.DataFrame:
    """Issue 28's shared-prefix workload: 200 prompts in 100 groups, each group's 3,584-token system prompt (56
    blocks of 64) plus a 2-block question per prompt, 200 output tokens, prompts picked at random, Poisson
    arrivals at ``rate_rps``; a small KV pool keeps the groups' prefixes only if the router keeps them apart."""
    rng = np.random.default_rng(seed)
    prompt = rng.integers(0, 200, n)
    hashes = [np.r_[(p // 2) * 1000 + np.arange(56), 10**7 + p * 100 + np.arange(2)].astype(np.int64)
              for p in prompt]
    t = np.cumsum(rng.exponential(1.0 / rate_rps, n))
    return pd.DataFrame({"timestamp": pd.Timestamp("2025-01-01", tz="UTC") + pd.to_timedelta(t - t[0], unit="s"),
                         "input_tokens": 58 * 64, "output_tokens": 200, "hash_ids": hashes})


def scenario(name: str, n_requests: int = 5000, seed: int = 0) -> pd.DataFrame:
    """A one-click scenario of PRODUCT.md (see ``SCENARIOS``) as a canonical frame over one day."""
    cfg = load_profiles()
    if name not in cfg["scenarios"]:
        raise ValueError(f"unknown scenario {name!r}: choose from {', '.join(cfg['scenarios'])}")
    _check_common(n_requests, seed, 1.0)
    spec = cfg["scenarios"][name]["parts"]
    counts = _split(int(n_requests), [float(p["share"]) for p in spec])
    parts = [_Part(p["product"], p["profile"], p["model"], c) for p, c in zip(spec, counts)]
    return _frame(parts, int(seed), 1.0, with_hashes=True)


# ---------------------------------------------------------------------------------------------------------
# Source-format logs


# Canonical column -> the name an OpenAI-usage-style request log flattens it to.
SOURCE_COLUMNS: dict[str, str] = {
    "timestamp": "timestamp",
    "model": "model",
    "product": "product",
    "session_id": "session_id",
    "input_tokens": "prompt_tokens",
    "output_tokens": "completion_tokens",
    "cached_tokens": "cached_tokens",
    "hash_ids": "hash_ids",
}


def _compression(path: Path) -> str | None:
    suffix = path.suffix.lower()
    return {".gz": "gzip", ".zst": "zstd"}.get(suffix)


def write_log(frame: pd.DataFrame, path: str | Path | BinaryIO, fmt: str = "csv") -> Path | BinaryIO:
    """Write a frame as the source log a user would have (OpenAI-usage-like columns); ``.gz``/``.zst`` compress.

    ``path`` may also be a binary buffer (e.g. ``io.BytesIO``), written uncompressed; it is returned as given.
    """
    if fmt not in LOG_FORMATS:
        raise ValueError(f"fmt={fmt!r} is not a log format: choose from {', '.join(LOG_FORMATS)}")
    missing = [c for c in ("input_tokens", "output_tokens") if c not in frame.columns]
    if missing:
        raise ValueError(f"frame lacks {', '.join(missing)}: pass a canonical frame (e.g. from synth.generate)")
    target: Path | BinaryIO
    if hasattr(path, "write"):
        target, compression = path, None
    else:
        target = Path(path)
        compression = _compression(target)
        if fmt == "parquet" and compression:
            raise ValueError(f"{target.name}: parquet compresses inside the file; drop the {target.suffix} suffix")
        target.parent.mkdir(parents=True, exist_ok=True)

    out = pd.DataFrame(index=frame.index)
    for canonical, source in SOURCE_COLUMNS.items():
        if canonical not in frame.columns:
            continue
        values = frame[canonical]
        if canonical == "timestamp" and fmt != "parquet":
            # ISO 8601 in UTC with a "Z", as API gateways write it; numpy formats it vectorised.
            values = np.datetime_as_string(values.dt.tz_convert("UTC").dt.tz_localize(None).to_numpy(), unit="ms") + "Z"
        elif canonical == "hash_ids" and fmt in ("csv", "tsv"):
            continue  # a flat text log has no list column; JSON and Parquet logs carry them (Mooncake style)
        out[source] = values
    if fmt in ("csv", "tsv"):
        out.to_csv(target, sep="," if fmt == "csv" else "\t", index=False, compression=compression)
    elif fmt == "parquet":
        out.to_parquet(target, index=False)
    else:
        out.to_json(target, orient="records", lines=fmt == "jsonl", compression=compression, date_format="iso")
    return target
