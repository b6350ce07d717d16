"""Log-binned 2-D histograms of the token plane: the narrow, mergeable summary of a log.

Edges are fixed for every log (16 bins per decade from 1 to 10M tokens), so two summaries of two partitions of
the same log merge by adding their counts. This is what the density view draws and what lets the heavy part
(reading and binning every request) move to another engine one day without changing the dashboard.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np
import pandas as pd

BINS_PER_DECADE = 16
MAX_DECADES = 7  # 1 .. 10M tokens
LOG_EDGES: np.ndarray = np.linspace(0.0, MAX_DECADES, BINS_PER_DECADE * MAX_DECADES + 1)
EDGES: np.ndarray = 10.0**LOG_EDGES
N_BINS = len(EDGES) - 1


def _bins_of(tokens: np.ndarray) -> np.ndarray:
    t = np.maximum(np.asarray(tokens, dtype=np.float64), 1.0)
    idx = np.floor(np.log10(t) * BINS_PER_DECADE).astype(np.int64)
    return np.clip(idx, 0, N_BINS - 1).astype(np.int16)


# Whole token counts below this are looked up (the same formula, computed once per count): a logarithm per request
# cost a 5M-row sketch 0.3 s of CPU, the look-up a tenth of that. Larger counts take the formula itself.
_LOOKUP_SIZE = 1 << 20


@functools.cache
def _bin_of_count() -> np.ndarray:
    return _bins_of(np.arange(_LOOKUP_SIZE))   # built on first use (2 MiB): imports stay quick


def bin_index(tokens: np.ndarray) -> np.ndarray:
    """Bin of each token count on the fixed log grid (0 tokens share the first bin); int16."""
    t = np.asarray(tokens)
    if t.dtype.kind not in "iu" or not t.size:
        return _bins_of(t)
    table = _bin_of_count()
    small = (t >= 0) & (t < _LOOKUP_SIZE)
    if small.all():
        return table[t]
    out = _bins_of(t)
    out[small] = table[t[small]]
    return out


@dataclass
class PlaneBins:
    """Request counts per (product, input bin, output bin) on the fixed grid."""

    products: list[str]
    counts: np.ndarray  # shape (len(products), N_BINS, N_BINS), int64; axis 1 = input, axis 2 = output

    @property
    def total(self) -> np.ndarray:
        """Counts of all products together, (N_BINS, N_BINS)."""
        return self.counts.sum(axis=0)

    def merge(self, other: "PlaneBins") -> "PlaneBins":
        """Sum of two summaries (e.g. two partitions or two days of one log)."""
        products = sorted(set(self.products) | set(other.products))
        counts = np.zeros((len(products), N_BINS, N_BINS), dtype=np.int64)
        for src in (self, other):
            for i, p in enumerate(src.products):
                counts[products.index(p)] += src.counts[i]
        return PlaneBins(products, counts)

    def occupied(self) -> pd.DataFrame:
        """Tidy frame of non-empty cells: product, input/output bin centres (tokens), count."""
        p, i, j = np.nonzero(self.counts)
        centres = 10.0 ** ((LOG_EDGES[:-1] + LOG_EDGES[1:]) / 2)
        return pd.DataFrame(
            {
                "product": pd.Categorical.from_codes(p, categories=self.products),
                "input_tokens": centres[i],
                "output_tokens": centres[j],
                "requests": self.counts[p, i, j],
            }
        )


def bin_plane(frame: pd.DataFrame) -> PlaneBins:
    """Bin a canonical frame per product; one vectorised pass."""
    product = frame["product"].astype("category")
    products = [str(c) for c in product.cat.categories]
    codes = product.cat.codes.to_numpy().astype(np.int64)
    ix = bin_index(frame["input_tokens"].to_numpy()).astype(np.int64)
    iy = bin_index(frame["output_tokens"].to_numpy()).astype(np.int64)
    keep = codes >= 0
    flat = (codes[keep] * N_BINS + ix[keep]) * N_BINS + iy[keep]
    counts = np.bincount(flat, minlength=len(products) * N_BINS * N_BINS)
    return PlaneBins(products, counts.reshape(len(products), N_BINS, N_BINS).astype(np.int64))


def marginal(tokens: np.ndarray, weights: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Log-binned histogram of one axis: (bin edges in tokens, counts)."""
    counts = np.bincount(bin_index(tokens), weights=weights, minlength=N_BINS)
    return EDGES, counts


def uniform_sample(frame: pd.DataFrame, n: int, seed: int = 0) -> pd.DataFrame:
    """A uniform random sample of at most ``n`` rows, in the frame's order (deterministic for a seed)."""
    if len(frame) <= n:
        return frame
    rng = np.random.default_rng(seed)
    rows = np.sort(rng.choice(len(frame), size=n, replace=False))
    return frame.iloc[rows]
