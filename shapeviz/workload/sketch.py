"""The workload sketch: one narrow, mergeable summary of a log that every analysis can run from.

A sketch is built per batch (embedded engine) or per partition (Dask), and two sketches merge by *addition*:
counts and token sums are integers, so ``a.merge(b).merge(c) == a.merge(b.merge(c)) == one-shot`` exactly.

What it holds, per product (the canonical ``product``: a product column, else the model, else the file name):

- the 2-D (input, output) histogram on ``binning``'s fixed log grid (16 bins per decade, 1 .. 10M tokens), with
  the request count and the sums of input, output and cached tokens of every cell (so means and token totals
  are exact, and each cell's mean is where the capacity model costs it);
- per minute (UTC, absolute): requests, input and output tokens (rates over time, the planning rate);
- latency histograms (``ttft_ms``, ``tpot_ms``, ``e2e_ms``) on a log grid, where the log has latencies;
- the row accounting (rows read, kept, dropped by reason: failures included), the mapping and the notes;
- a bounded uniform sample of rows (``SAMPLE_ROWS``; merged by keeping the smallest random keys), for the
  plane's point layer and the clusters' k-means fit.

**Quantile error bound.** ``quantile`` finds the bin holding the q-th request and interpolates inside it (in log
space, snapped to the whole tokens the bin holds). The estimate always lies in the same bin as the exact
nearest-rank quantile, so it is within one bin width of it: ``|log10(estimate) - log10(exact)| < 1/16``, i.e. off
by less than 15.5 % (and by 0 tokens below 8 tokens, where a bin holds at most one whole number).

Only the plane's point layer, sessions and block-hash prefix reuse need rows; a sketch-only analysis draws the
points from the sample, estimates reported prefix-cache hits from the sample, and leaves sessions out (it says so).
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, BinaryIO, Iterable, Sequence

import numpy as np
import pandas as pd
from pyarrow import ArrowException

from shapeviz.ingest import load_log
from shapeviz.ingest.errors import IngestError
from shapeviz.ingest.frame import REASONS, LoadedLog, LoadReport, build_frame
from shapeviz.ingest.limits import DEFAULT_LIMITS, Limits
from shapeviz.ingest.names import OTHER_PRODUCTS, folded_note
from shapeviz.ingest.readers import display_name
from shapeviz.ingest.stream import _Restart, iter_tables, join_batches, read_ahead
from shapeviz.progress import Progress
from shapeviz.workload.arrays import product_codes, token_arrays
from shapeviz.workload.binning import BINS_PER_DECADE, LOG_EDGES, N_BINS, bin_index

SKETCH_VERSION = 1
# The dashboard and ``summary`` keep every row only up to here; above it, analyses run from the sketch. At 2M
# requests a page rerun still takes about a second on 2 cores (benchmarks/README.md, dashboard section).
FULL_FRAME_MAX_ROWS = 2_000_000
FULL_FRAME_ENV = "SHAPEVIZ_FULL_FRAME_MAX_ROWS"   # an operator with more memory per session may raise it
SAMPLE_ROWS = 50_000
# The file is parsed in small blocks (the row and byte limits are checked at every one, and a block's parse is
# what bounds memory), but framed and sketched in chunks of about this many rows: the fixed costs of a canonical
# frame, a sketch and a merge are paid 5 times for 5M rows instead of once per 4 MiB block (111 times).
CHUNK_ROWS = 1_000_000
LATENCIES: tuple[str, ...] = ("ttft_ms", "tpot_ms", "e2e_ms")
# latency grid: 16 bins per decade from 0.01 ms to 10^7 ms (~2.8 h)
LATENCY_LOG_MIN, LATENCY_DECADES = -2, 9
LATENCY_BINS = BINS_PER_DECADE * LATENCY_DECADES
LATENCY_LOG_EDGES: np.ndarray = np.linspace(LATENCY_LOG_MIN, LATENCY_LOG_MIN + LATENCY_DECADES, LATENCY_BINS + 1)
_NS_PER_MINUTE = 60_000_000_000
_SAMPLE_COLUMNS = ("input_tokens", "output_tokens", "cached_tokens", "timestamp", "product", "model")
_MAX_NOTES = 40
# Block-hash reuse keeps a bottom-k sample of the prompt blocks' ids (SHARDS with a fixed size): every request
# holding a sampled id is counted for it, so the sample stays exact per id and bounded whatever the log's size.
MAX_BLOCK_IDS = 200_000
# Sessions need every turn of a session: the sketch keeps every row of a hash-sampled set of sessions, bounded
MAX_SESSION_ROWS = 200_000
_SESSION_COLUMNS = ("session_id", "turn", "timestamp", "input_tokens", "output_tokens", "cached_tokens", "product")
_HASH_SPACE = 1 << 53


def _latency_index(values_ms: np.ndarray) -> np.ndarray:
    v = np.maximum(values_ms, 10.0**LATENCY_LOG_MIN)
    idx = np.floor((np.log10(v) - LATENCY_LOG_MIN) * BINS_PER_DECADE).astype(np.int64)
    return np.clip(idx, 0, LATENCY_BINS - 1)


def _block_hash(ids: np.ndarray) -> np.ndarray:
    """The id's position in [0, 2^53), by splitmix64's finaliser.

    A full mix, not a bare multiplicative (Fibonacci) hash: block ids are often small sequential integers, and
    a multiplicative hash always samples id 0, usually the most shared block (a system prompt), which on the
    Mooncake trace lifted a 3,000-id estimate of 37 % reuse to 82 %.
    """
    with np.errstate(over="ignore"):
        z = ids.astype(np.uint64) + np.uint64(0x9E3779B97F4A7C15)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        z = z ^ (z >> np.uint64(31))
    return z >> np.uint64(11)


@dataclass
class BlockSample:
    """Bottom-k sample of prompt block ids (from ``hash_ids``): per sampled id, how many requests hold it."""

    ids: np.ndarray          # sorted sampled block ids, int64
    requests: np.ndarray     # per id: requests whose prompt holds it (repeats inside one request count once)
    threshold: int           # every id whose hash is below it is in the sample; rate = threshold / 2^53
    with_hashes: int         # requests that carry block hashes
    input_tokens: int        # their input tokens
    accesses: int = 0        # block ids over all those requests (exact, not sampled)
    max_ids: int = MAX_BLOCK_IDS

    @classmethod
    def from_frame(cls, frame: pd.DataFrame, max_ids: int = MAX_BLOCK_IDS) -> "BlockSample | None":
        """The sample of one canonical frame's ``hash_ids`` (None when it has none)."""
        if "hash_ids" not in frame.columns:
            return None
        cells = frame["hash_ids"].to_numpy()
        lengths = np.fromiter((len(c) if isinstance(c, np.ndarray) else 0 for c in cells), dtype=np.int64,
                              count=len(cells))
        has = lengths > 0
        if not has.any():
            return None
        ids = np.concatenate([c for c, n in zip(cells, lengths) if n]).astype(np.int64)
        rows = np.repeat(np.arange(len(cells)), lengths)
        hashed = _block_hash(ids)
        threshold = _HASH_SPACE
        if len(ids) > 4 * max_ids:   # cut the work first: ids whose hash is that large cannot stay in the sample
            threshold = int(np.partition(hashed, 4 * max_ids)[4 * max_ids])
            keep = hashed < np.uint64(threshold)
            ids, rows = ids[keep], rows[keep]
        order = np.lexsort((rows, ids))
        ids, rows = ids[order], rows[order]
        first = np.r_[True, (ids[1:] != ids[:-1]) | (rows[1:] != rows[:-1])] if len(ids) else np.zeros(0, bool)
        unique, counts = np.unique(ids[first], return_counts=True)
        inputs = int(frame["input_tokens"].to_numpy(dtype=np.int64)[has].sum())
        return cls(unique, counts.astype(np.int64), threshold, int(has.sum()), inputs, int(lengths.sum()),
                   max_ids)._bounded()

    def _bounded(self) -> "BlockSample":
        if len(self.ids) <= self.max_ids:
            return self
        hashed = _block_hash(self.ids)
        threshold = int(np.partition(hashed, self.max_ids)[self.max_ids])   # the (k+1)-th smallest hash
        keep = hashed < np.uint64(threshold)
        return replace(self, ids=self.ids[keep], requests=self.requests[keep], threshold=threshold)

    def merge(self, other: "BlockSample | None") -> "BlockSample":
        """Union of two samples: counts of a shared id add; the smaller threshold holds for both."""
        if other is None:
            return self
        threshold = min(self.threshold, other.threshold)
        ids = np.concatenate([self.ids, other.ids])
        counts = np.concatenate([self.requests, other.requests])
        keep = _block_hash(ids) < np.uint64(threshold)
        unique, inverse = np.unique(ids[keep], return_inverse=True)
        summed = np.bincount(inverse, weights=counts[keep], minlength=len(unique)).astype(np.int64)
        return BlockSample(unique, summed, threshold, self.with_hashes + other.with_hashes,
                           self.input_tokens + other.input_tokens, self.accesses + other.accesses,
                           min(self.max_ids, other.max_ids))._bounded()

    @property
    def rate(self) -> float:
        """Share of all block ids the sample holds (1.0: every id, the figures are exact)."""
        return self.threshold / _HASH_SPACE

    @property
    def hit_ratio_blocks(self) -> float | None:
        """Share of prompt blocks seen in an earlier request (an ideal cache that never evicts)."""
        total = int(self.requests.sum())
        return (total - len(self.ids)) / total if total else None

    def hit_ratio_tokens(self, block_size: int) -> float | None:
        """Token-weighted estimate: the block hit ratio × every block access × block size / input tokens (≤ 1)."""
        ratio = self.hit_ratio_blocks
        if ratio is None or not self.input_tokens:
            return None
        # the access count is exact, so only the ratio carries the sample's error
        return float(min(1.0, ratio * self.accesses * block_size / self.input_tokens))


def _session_hash(session_id: pd.Series) -> np.ndarray:
    """A session's position in [0, 2^53), the same in every process (pandas' fixed-key SipHash of the id text).

    Hashed per category, not per row: a log has far fewer sessions than requests.
    """
    per_category, codes = _session_hash_per_category(session_id)
    return np.where(codes >= 0, per_category[np.maximum(codes, 0)], np.uint64(_HASH_SPACE))


def _session_hash_per_category(session_id: pd.Series) -> tuple[np.ndarray, np.ndarray]:
    """``_session_hash`` of each distinct id (the categories) and each row's category code (-1: no session)."""
    ids = session_id if isinstance(session_id.dtype, pd.CategoricalDtype) else session_id.astype("category")
    # categories are distinct already: categorize=False skips hash_array's factorizing (the same hashes, 6x faster)
    per_category = pd.util.hash_array(ids.cat.categories.astype(str).to_numpy(dtype=object),
                                      categorize=False) >> np.uint64(11)
    return per_category, ids.cat.codes.to_numpy()


def _bounded_threshold(hashes: np.ndarray, rows: np.ndarray, threshold: int, max_rows: int) -> int:
    """The hash threshold under which the sessions below ``threshold`` hold at most ``max_rows`` rows.

    ``hashes``: each session's hash, ``rows``: its rows. As ``SessionSample._bounded`` decides on the rows themselves:
    the smallest hash whose running sum of rows (sessions by hash) passes ``max_rows``.
    """
    held = (rows > 0) & (hashes < np.uint64(threshold))
    if int(rows[held].sum()) <= max_rows:
        return threshold
    unique, inverse = np.unique(hashes[held], return_inverse=True)   # one id's text per hash, but never assume it
    per = np.bincount(inverse, weights=rows[held]).astype(np.int64)
    fits = int(np.searchsorted(np.cumsum(per), max_rows, side="right"))
    return min(int(unique[fits]), threshold) if fits < len(unique) else threshold


@dataclass
class SessionSample:
    """Every row of the sessions whose id hash is below ``threshold``: a bounded, mergeable sample of sessions."""

    frame: pd.DataFrame      # canonical columns of the sampled sessions' rows, plus ``_h`` (the session's hash)
    threshold: int           # rate = threshold / 2^53 of all sessions
    max_rows: int = MAX_SESSION_ROWS

    @classmethod
    def from_frame(cls, frame: pd.DataFrame, report: LoadReport | None = None, max_rows: int = MAX_SESSION_ROWS,
                   threshold: int = _HASH_SPACE) -> "SessionSample | None":
        """The sampled sessions of one canonical frame (None without session ids).

        ``threshold``: a running sketch's current one, so a batch keeps only the sessions that can still stay.
        """
        if "session_id" not in frame.columns or not frame["session_id"].notna().any():
            return None
        columns = [c for c in _SESSION_COLUMNS if c in frame.columns]
        if "turn" in columns and report is not None and report.mapping.get("turn", "").startswith("derived"):
            columns.remove("turn")   # derived inside one batch: wrong across batches; order by timestamp instead
        per_category, codes = _session_hash_per_category(frame["session_id"])
        # the bound first, from rows per session (a few hundred thousand ids, not every row): only the rows that
        # stay are copied, the same rows and threshold ``_bounded`` keeps from all of them
        threshold = _bounded_threshold(per_category, np.bincount(codes[codes >= 0], minlength=len(per_category)),
                                       threshold, max_rows)
        hashed = np.where(codes >= 0, per_category[np.maximum(codes, 0)], np.uint64(_HASH_SPACE))
        keep = hashed < np.uint64(threshold)
        # the hash stands for the id (no text to carry through merges); products as plain labels for the same reason
        rows = frame.loc[keep, [c for c in columns if c != "session_id"]].reset_index(drop=True)
        if "product" in rows.columns:
            rows["product"] = rows["product"].to_numpy(dtype=object)
        rows["_h"] = hashed[keep]
        return cls(rows, threshold, max_rows)._bounded()

    def _bounded(self) -> "SessionSample":
        if len(self.frame) <= self.max_rows:
            return self
        per = self.frame.groupby("_h").size().sort_index()   # rows per session, by hash
        fits = int(np.searchsorted(np.cumsum(per.to_numpy()), self.max_rows, side="right"))
        threshold = int(per.index[fits]) if fits < len(per) else self.threshold
        return replace(self, frame=self.frame[self.frame["_h"] < np.uint64(threshold)].reset_index(drop=True),
                       threshold=min(threshold, self.threshold))

    def merge(self, other: "SessionSample | None") -> "SessionSample":
        """Both samples' rows under the smaller threshold (a session split across parts keeps all its rows)."""
        if other is None:
            return self
        threshold = min(self.threshold, other.threshold)
        rows = pd.concat([self.frame, other.frame], ignore_index=True)
        rows = rows[rows["_h"] < np.uint64(threshold)].reset_index(drop=True)
        return SessionSample(rows, threshold, min(self.max_rows, other.max_rows))._bounded()

    @property
    def rate(self) -> float:
        """Share of all sessions in the sample (1.0: every session)."""
        return self.threshold / _HASH_SPACE

    def canonical(self) -> pd.DataFrame:
        """The sampled rows as a canonical frame for ``sessions``: ordered by time, categorical labels."""
        rows = self.frame.rename(columns={"_h": "session_id"})
        if "timestamp" in rows.columns:
            rows = rows.sort_values("timestamp", kind="stable").reset_index(drop=True)
        rows["session_id"] = rows["session_id"].astype("category")
        if "product" in rows.columns:
            rows["product"] = rows["product"].astype("category")
        return rows


@dataclass
class WorkloadSketch:
    """Per-product token-plane histogram with token sums, per-minute traffic, latencies, accounting and a sample."""

    products: list[str]
    counts: np.ndarray          # (P, N_BINS, N_BINS) int64: requests per (product, input bin, output bin)
    input_sum: np.ndarray       # (P, N_BINS, N_BINS) int64: input tokens per cell
    output_sum: np.ndarray      # (P, N_BINS, N_BINS) int64: output tokens per cell
    cached_sum: np.ndarray      # (P, N_BINS, N_BINS) int64: cached (prefix-hit) tokens per cell
    timeline: pd.DataFrame      # minute (int64, minutes since the epoch, UTC), product, requests, input, output
    latency: dict[str, np.ndarray]   # name -> (P, LATENCY_BINS) int64 counts
    report: LoadReport
    sample: pd.DataFrame        # <= sample_rows rows of canonical columns, plus the ``_key`` that decides merges
    has_cached: bool = False
    untimed: int = 0            # kept requests without a usable timestamp
    sample_rows: int = SAMPLE_ROWS
    blocks: BlockSample | None = None   # prompt block ids sampled for prefix reuse, when the log has hash_ids
    sessions: SessionSample | None = None   # every row of hash-sampled sessions, when the log has session ids
    version: int = SKETCH_VERSION

    # ------------------------------------------------------------------------------------------ building

    @classmethod
    def from_frame(cls, frame: pd.DataFrame, report: LoadReport | None = None, *, seed: int = 0,
                   sample_rows: int = SAMPLE_ROWS, session_threshold: int = _HASH_SPACE) -> "WorkloadSketch":
        """Sketch of one canonical frame (a batch, a partition or a whole log); ``seed`` draws its sample keys.

        ``session_threshold`` lets a running sketch skip sessions its sample has already ruled out.
        """
        inp, out = token_arrays(frame)
        prod, products = product_codes(frame) if len(frame) else (np.zeros(0, np.int32), [])
        # products sorted by name, as ``merge`` keeps them: one canonical layout, so equal sketches compare equal
        order = sorted(range(len(products)), key=lambda g: products[g])
        rank = np.empty(len(products), dtype=np.int64)
        rank[order] = np.arange(len(products))
        prod = rank[prod] if len(products) else prod
        products = [products[g] for g in order]
        n_prod = len(products)
        size = n_prod * N_BINS * N_BINS
        flat = (prod.astype(np.int64) * N_BINS + bin_index(inp)) * N_BINS + bin_index(out)
        shape = (n_prod, N_BINS, N_BINS)

        def cells(weights: np.ndarray | None) -> np.ndarray:
            summed = np.bincount(flat, weights=weights, minlength=size)
            return np.rint(summed).astype(np.int64).reshape(shape)

        has_cached = "cached_tokens" in frame.columns
        cached = (np.minimum(frame["cached_tokens"].to_numpy(dtype=np.float64, na_value=0.0), inp)
                  if has_cached else None)
        latency = {}
        for name in LATENCIES:
            if name in frame.columns:
                values = frame[name].to_numpy(dtype=np.float64, na_value=np.nan)
                ok = np.isfinite(values)
                lat_flat = prod[ok].astype(np.int64) * LATENCY_BINS + _latency_index(values[ok])
                latency[name] = np.bincount(lat_flat, minlength=n_prod * LATENCY_BINS).reshape(n_prod, LATENCY_BINS)
        timeline, untimed = _timeline(frame, prod, products, inp, out)
        if report is None:
            report = LoadReport("frame", "frame", "none", len(frame), len(frame))
        rng = np.random.default_rng(seed)
        keys = rng.random(len(frame))
        sample_cols = [c for c in _SAMPLE_COLUMNS if c in frame.columns]
        if len(frame) > sample_rows:
            chosen = np.sort(np.argpartition(keys, sample_rows - 1)[:sample_rows])
        else:
            chosen = np.arange(len(frame))
        sample = frame[sample_cols].iloc[chosen].reset_index(drop=True)
        if "product" in sample.columns:   # plain labels: merges concatenate them without re-encoding categories
            sample["product"] = sample["product"].to_numpy(dtype=object)
        sample["_key"] = keys[chosen]
        return cls(products, np.bincount(flat, minlength=size).astype(np.int64).reshape(shape),
                   cells(inp.astype(np.float64)), cells(out.astype(np.float64)),
                   cells(cached) if cached is not None else np.zeros(shape, dtype=np.int64),
                   timeline, latency, report, sample, has_cached, untimed, sample_rows,
                   BlockSample.from_frame(frame), SessionSample.from_frame(frame, report, threshold=session_threshold))

    # ------------------------------------------------------------------------------------------ merging

    def merge(self, other: "WorkloadSketch", max_products: int = DEFAULT_LIMITS.max_products) -> "WorkloadSketch":
        """The sketch of both logs (or partitions) together: counts and sums add, samples keep the smallest keys.

        Past ``max_products`` products the busiest keep their names (``fold_products``): the cost of a sketch
        follows its requests, not the names a log holds.
        """
        products = sorted(set(self.products) | set(other.products))
        shape = (len(products), N_BINS, N_BINS)

        def aligned(src: "WorkloadSketch", array: np.ndarray, tail: tuple[int, ...]) -> np.ndarray:
            out = np.zeros((len(products), *tail), dtype=np.int64)
            if len(src.products):
                out[[products.index(p) for p in src.products]] = array
            return out

        def add(name: str) -> np.ndarray:
            return aligned(self, getattr(self, name), shape[1:]) + aligned(other, getattr(other, name), shape[1:])

        latency = {}
        for name in sorted(set(self.latency) | set(other.latency)):
            latency[name] = sum(aligned(src, src.latency[name], (LATENCY_BINS,))
                                for src in (self, other) if name in src.latency)
        timeline = pd.concat([t for t in (self.timeline, other.timeline) if len(t)] or [self.timeline])
        if len(timeline):
            timeline = (timeline.groupby(["minute", "product"], sort=True, observed=True)
                        [["requests", "input_tokens", "output_tokens"]].sum().reset_index())
        sample_rows = min(self.sample_rows, other.sample_rows)
        frames = [s for s in (self.sample, other.sample) if len(s)]
        sample = pd.concat(frames, ignore_index=True) if frames else self.sample
        sample = sample.nsmallest(sample_rows, "_key").sort_values("_key").reset_index(drop=True)
        blocks = self.blocks.merge(other.blocks) if self.blocks is not None else other.blocks
        sessions = self.sessions.merge(other.sessions) if self.sessions is not None else other.sessions
        return WorkloadSketch(products, add("counts"), add("input_sum"), add("output_sum"), add("cached_sum"),
                              timeline.reset_index(drop=True), latency, merge_reports(self.report, other.report),
                              sample, self.has_cached or other.has_cached, self.untimed + other.untimed,
                              sample_rows, blocks, sessions).fold_products(max_products)

    def fold_products(self, max_products: int) -> "WorkloadSketch":
        """The busiest ``max_products`` products keep their names, the rest are counted as ``OTHER_PRODUCTS``.

        What each chunk of a long log folded already stays folded: a product outside a chunk's busiest is
        counted in ``OTHER_PRODUCTS`` for that chunk (the load report's note says products were folded).
        """
        named = [g for g, p in enumerate(self.products) if p != OTHER_PRODUCTS]
        if len(named) <= max_products:
            return self
        per = self.counts.sum(axis=(1, 2))
        keep = sorted(named, key=lambda g: (-int(per[g]), self.products[g]))[:max_products]
        products = sorted({self.products[g] for g in keep} | {OTHER_PRODUCTS})
        position = {p: i for i, p in enumerate(products)}
        new_name = {p: (p if p in position else OTHER_PRODUCTS) for p in self.products}
        remap = np.array([position[new_name[p]] for p in self.products], dtype=np.int64)

        def fold(array: np.ndarray) -> np.ndarray:
            out = np.zeros((len(products), *array.shape[1:]), dtype=array.dtype)
            np.add.at(out, remap, array)
            return out

        timeline = self.timeline
        if len(timeline):
            timeline = timeline.assign(product=timeline["product"].map(new_name))
            timeline = (timeline.groupby(["minute", "product"], sort=True)
                        [["requests", "input_tokens", "output_tokens"]].sum().reset_index())
        sample = self.sample
        if "product" in sample.columns:
            sample = sample.assign(product=sample["product"].map(new_name).to_numpy(dtype=object))
        sessions = self.sessions
        if sessions is not None and "product" in sessions.frame.columns:
            sessions = replace(sessions, frame=sessions.frame.assign(
                product=sessions.frame["product"].map(new_name).to_numpy(dtype=object)))
        report = replace(self.report, notes=list(dict.fromkeys([*self.report.notes, folded_note(max_products)])))
        return replace(self, products=products, counts=fold(self.counts), input_sum=fold(self.input_sum),
                       output_sum=fold(self.output_sum), cached_sum=fold(self.cached_sum),
                       latency={k: fold(v) for k, v in self.latency.items()}, timeline=timeline,
                       sample=sample, sessions=sessions, report=report)

    # ------------------------------------------------------------------------------------------ reading

    @property
    def requests(self) -> int:
        """Requests in the sketch (the kept rows)."""
        return int(self.counts.sum())

    def marginal(self, axis: str, product: str | None = None) -> np.ndarray:
        """Request counts per log bin of ``input`` or ``output`` tokens, for one product or all."""
        counts = self.counts if product is None else self.counts[[self.products.index(product)]]
        return counts.sum(axis=(0, 2) if axis == "input" else (0, 1))

    def quantile(self, axis: str, q: float | Sequence[float], product: str | None = None) -> np.ndarray:
        """Token quantile(s) (``q`` in 0..100) of ``input``/``output`` from the bins: within one bin of exact."""
        return quantiles_from_bins(self.marginal(axis, product), np.atleast_1d(np.asarray(q, dtype=np.float64)))

    def occupied(self) -> pd.DataFrame:
        """One row per non-empty (product, cell): requests and mean input/output/cached tokens."""
        p, i, j = np.nonzero(self.counts)
        c = self.counts[p, i, j].astype(np.float64)
        return pd.DataFrame({
            "product": pd.Categorical.from_codes(p, categories=self.products),
            "input_tokens": self.input_sum[p, i, j] / c,
            "output_tokens": self.output_sum[p, i, j] / c,
            "cached_tokens": self.cached_sum[p, i, j] / c,
            "requests": self.counts[p, i, j],
        })

    def per_minute(self) -> pd.Series:
        """Requests per absolute minute (all products), every minute from the first to the last."""
        if not len(self.timeline):
            return pd.Series([], dtype=np.int64)
        per = self.timeline.groupby("minute")["requests"].sum()
        return per.reindex(np.arange(per.index.min(), per.index.max() + 1), fill_value=0)

    def sample_frame(self) -> pd.DataFrame:
        """The bounded uniform sample as a canonical frame (no ``_key``)."""
        frame = self.sample.drop(columns="_key")
        for name in ("product", "model"):
            if name in frame.columns:
                frame[name] = frame[name].astype(str).astype("category")
        return frame


def quantiles_from_bins(counts: np.ndarray, qs: np.ndarray) -> np.ndarray:
    """Quantiles (0..100) from log-bin counts: the bin of the nearest-rank quantile, interpolated inside it."""
    total = float(counts.sum())
    if total <= 0:
        return np.full(qs.shape, np.nan)
    cum = np.cumsum(counts, dtype=np.float64)
    # nearest rank: the ceil(q·n)-th request (1-based), the definition the bound is stated against
    rank = np.clip(np.ceil(qs / 100.0 * total), 1, total)
    b = np.searchsorted(cum, rank, side="left")
    before = np.where(b > 0, cum[np.maximum(b - 1, 0)], 0.0)
    inside = (rank - before - 0.5) / counts[b]   # mid-rank position inside the bin, in (0, 1)
    lo, hi = 10.0 ** LOG_EDGES[b], 10.0 ** LOG_EDGES[b + 1]
    estimate = 10.0 ** (LOG_EDGES[b] + inside / BINS_PER_DECADE)
    # token counts are whole: keep the estimate on a whole number the bin can hold (bin 0 also holds 0 tokens)
    first = np.where(b == 0, 0.0, np.ceil(lo))
    last = np.ceil(hi) - 1.0
    return np.where(first <= last, np.clip(np.round(estimate), first, last), estimate)


def _timeline(frame: pd.DataFrame, prod: np.ndarray, products: list[str], inp: np.ndarray,
              out: np.ndarray) -> tuple[pd.DataFrame, int]:
    empty = pd.DataFrame({"minute": pd.Series([], dtype=np.int64), "product": pd.Series([], dtype=str),
                          "requests": pd.Series([], dtype=np.int64),
                          "input_tokens": pd.Series([], dtype=np.int64),
                          "output_tokens": pd.Series([], dtype=np.int64)})
    if "timestamp" not in frame.columns:
        return empty, len(frame)
    ns = frame["timestamp"].array.asi8 if len(frame) else np.zeros(0, np.int64)
    ok = ~frame["timestamp"].isna().to_numpy()
    if not ok.any():
        return empty, len(frame)
    every = bool(ok.all())   # the usual case: no row to mask out (each mask copies every column)
    minute = (ns if every else ns[ok]) // _NS_PER_MINUTE
    base = int(minute.min())
    span = int(minute.max()) - base + 1
    n_prod = len(products)
    key = (prod if every else prod[ok]).astype(np.int64) * span + (minute - base)
    size = n_prod * span
    req = np.bincount(key, minlength=size)
    used = np.flatnonzero(req)
    tin = np.bincount(key, weights=inp if every else inp[ok], minlength=size)[used]
    tout = np.bincount(key, weights=out if every else out[ok], minlength=size)[used]
    timeline = pd.DataFrame({
        "minute": (used % span + base).astype(np.int64),
        "product": np.asarray(products, dtype=object)[used // span],
        "requests": req[used].astype(np.int64),
        "input_tokens": np.rint(tin).astype(np.int64),
        "output_tokens": np.rint(tout).astype(np.int64),
    }).sort_values(["minute", "product"], kind="stable").reset_index(drop=True)
    return timeline, int((~ok).sum())


def merge_reports(a: LoadReport, b: LoadReport) -> LoadReport:
    """Two load reports of parts of one log (batches, partitions, files): rows add up, notes are kept once."""
    dropped = {k: a.dropped.get(k, 0) + b.dropped.get(k, 0) for k in REASONS if k in a.dropped or k in b.dropped}
    mapping = dict(a.mapping)
    for k, v in b.mapping.items():
        if k not in mapping:
            mapping[k] = v
        elif mapping[k] != v and v not in mapping[k].split("; "):
            mapping[k] = f"{mapping[k]}; {v}"
    notes = list(dict.fromkeys([*a.notes, *b.notes]))
    if len(notes) > _MAX_NOTES:
        notes = notes[:_MAX_NOTES] + [f"... {len(notes) - _MAX_NOTES} more notes"]
    source = a.source if a.source == b.source or b.source in a.source.split(" + ") else f"{a.source} + {b.source}"
    fmt = "+".join(dict.fromkeys([*a.format.split("+"), *b.format.split("+")]))
    compression = "+".join(dict.fromkeys([*a.compression.split("+"), *b.compression.split("+")]))
    return LoadReport(source, fmt, compression, a.rows_read + b.rows_read, a.rows_kept + b.rows_kept, dropped,
                      mapping, notes)


def merge_all(sketches: Iterable[WorkloadSketch],
              max_products: int = DEFAULT_LIMITS.max_products) -> WorkloadSketch:
    """Merge many sketches pairwise as a balanced tree (the same result in any grouping while nothing folds)."""
    level = list(sketches)
    if not level:
        raise ValueError("no sketches to merge: no file or partition produced one")
    while len(level) > 1:
        level = [level[i].merge(level[i + 1], max_products) if i + 1 < len(level) else level[i]
                 for i in range(0, len(level), 2)]
    return level[0]


# ---------------------------------------------------------------------------------------------- embedded engine

def full_frame_max_rows() -> int:
    """``FULL_FRAME_MAX_ROWS``, or the operator's ``SHAPEVIZ_FULL_FRAME_MAX_ROWS`` when set to a whole number."""
    import os

    value = os.environ.get(FULL_FRAME_ENV, "").strip()
    return int(value) if value.isdigit() else FULL_FRAME_MAX_ROWS


@dataclass
class SketchedLog:
    """What a streamed load gives: the sketch always, the canonical frame too when the log is small enough."""

    sketch: WorkloadSketch
    frame: pd.DataFrame | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def report(self) -> LoadReport:
        """The load report (rows read = kept + dropped)."""
        return self.sketch.report


def sketch_log(source: str | Path | bytes | BinaryIO, *, name: str | None = None,
               mapping: dict[str, str] | None = None, limits: Limits = DEFAULT_LIMITS,
               keep_frame_rows: int | None = None, seed: int = 0,
               progress: Progress | None = None, chunk_rows: int = CHUNK_ROWS) -> SketchedLog:
    """Stream a log batch by batch into a sketch; keep the canonical frame only while it has ≤ ``keep_frame_rows``.

    Limits (rows, bytes, decompression, nesting) are checked at every batch, so memory is bounded by the batch
    (plus the frame while it is kept), not by the file. ``progress`` (a ``shapeviz.progress.Progress``) hears
    the rows read after every batch. Past ``keep_frame_rows``, batches are framed and sketched ``chunk_rows`` at a
    time and the chunks' sketches merged as they come (two of a level into one of the next), each merge keeping
    the busiest ``limits.max_products`` products by name.
    """

    label = display_name(source, name)
    keep_frame_rows = full_frame_max_rows() if keep_frame_rows is None else keep_frame_rows
    pending: list | None = []          # raw batches kept while the log may still fit as a frame
    pending_rows = 0
    chunk: list = []                   # raw batches not sketched yet (fewer than chunk_rows rows)
    held = 0
    # one sketch per chunk, merged as a binary counter (two of a level become one of the next), so at most
    # log2(chunks) are held, and each merge folds its products to the busiest ``limits.max_products``
    parts: list[tuple[int, WorkloadSketch]] = []
    chunks = 0
    ruled_out = _HASH_SPACE            # sessions hashed above this cannot stay in the merged session sample

    def add(raws: list) -> None:
        nonlocal ruled_out, chunks
        for raw in _concat_raw(raws):
            frame, report = build_frame(raw, label, mapping, limits)
            part = WorkloadSketch.from_frame(frame, report, seed=seed + chunks, session_threshold=ruled_out)
            chunks += 1
            del frame
            if part.sessions is not None:
                ruled_out = min(ruled_out, part.sessions.threshold)
            level = 0
            while parts and parts[-1][0] == level:
                part = parts.pop()[1].merge(part, limits.max_products)
                level += 1
            parts.append((level, part))

    def collect(raw: Any) -> None:
        nonlocal chunk, held
        chunk.append(raw)
        held += raw.num_rows
        if held >= chunk_rows:
            add(chunk)
            chunk, held = [], 0

    rows_read = 0
    try:
        for raw in read_ahead(iter_tables(source, label, limits, mapping)):
            rows_read += raw.num_rows
            if progress is not None:
                progress("reading", f"{rows_read:,} rows", None)
            if pending is not None:
                pending.append(raw)
                pending_rows += raw.num_rows
                if pending_rows <= keep_frame_rows:
                    continue
                for kept in pending:   # the log is too big to keep whole: sketch what was kept, go on streaming
                    collect(kept)
                pending = None
                continue
            collect(raw)
        if pending is not None:
            # small enough: one canonical frame, built exactly as ``load_log`` builds it
            try:
                raw = join_batches(pending)
            except ArrowException:
                raise _Restart("whole") from None   # types that do not join: read once more whole, as load_log does
            log = build_frame(raw, label, mapping, limits)
            return SketchedLog(WorkloadSketch.from_frame(log.frame, log.report, seed=seed), log.frame)
        if chunk:
            add(chunk)
    except _Restart:
        pending, parts = None, []   # the stream changed its mind mid-way: read it once more, as one table
        log = load_log(source, name=name, mapping=mapping, limits=limits)
        return SketchedLog(WorkloadSketch.from_frame(log.frame, log.report, seed=seed), log.frame)
    except MemoryError:
        raise IngestError(label, "does not fit in memory", "use the dask engine, split the log or sample it") from None
    except ArrowException as exc:   # as load_log: one line, never a traceback
        raise IngestError(label, f"could not be read ({type(exc).__name__}: {str(exc)[:200]})",
                          "check the file or map the columns by hand") from None
    sketch = merge_all([part for _, part in parts], limits.max_products)
    return SketchedLog(sketch, None, [f"{sketch.requests:,} requests: analysed from the workload sketch "
                                      f"(more than {keep_frame_rows:,} rows are not kept in memory)"])


def _concat_raw(batches: list) -> list:
    """Raw batches as one table (a chunk); as they are when their columns' types cannot be joined into one."""
    try:
        return [join_batches(batches)] if batches else []
    except ArrowException:
        return list(batches)   # e.g. a JSONL field that is a number in one block and text in the next


# ---------------------------------------------------------------------------------------------- analyses

def report_log(sketch: WorkloadSketch) -> LoadedLog:
    """A ``LoadedLog`` for the report bundle of a sketch-only log: the uniform sample, without its timestamps.

    The sample's requests draw the plane and feed the replay trace; without timestamps the report neither draws
    the sample's (much lower) rate as if it were the log's nor replays the sample at it: the replay gets Poisson
    arrivals at the plan's rate, measured from the whole log.
    """

    frame = sketch.sample_frame().drop(columns=["timestamp"], errors="ignore")
    r = sketch.report
    note = (f"report drawn from a uniform sample of {len(frame):,} of {sketch.requests:,} requests (workload "
            "sketch); every figure of the plan and the shape is the whole log's")
    return LoadedLog(frame, LoadReport(r.source, r.format, r.compression, r.rows_read, r.rows_kept,
                                       dict(r.dropped), dict(r.mapping), [*r.notes, note]))
