"""The workload view: the one table of requests every analysis reads, from every row or from a sketch.

A ``WorkloadView`` is a weighted table of requests: input, output and cached tokens, product (and model) per
row, with a weight, plus a weighted table of arrival times. It is built either

- from a canonical frame (``from_frame``): one row per request, weight 1, every timestamp; or
- from a ``WorkloadSketch`` (``from_sketch``): one row per occupied (product, input bin, output bin) cell at the
  cell's mean tokens, weighted by its requests (its token totals are the cell's exact sums), and the sketch's
  per-minute timeline as the arrivals.

Shapes, clusters, traffic, the capacity ``Workload`` and ``analysis.analyze`` are written once against it, with
the few primitives below: weighted sums per group, quantiles per product (exact ``np.percentile`` on unit rows,
so every figure from rows is what it always was; the sketch's bin interpolation on cells, within one 15 % bin),
per-minute rates, and the individual requests (``rows``: every row, or the sketch's uniform sample) for what
needs requests one by one (k-means, sessions, prefix reuse).
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from shapeviz.ingest.frame import LoadedLog, LoadReport
from shapeviz.workload.arrays import category_codes, product_codes, token_arrays
from shapeviz.workload.binning import N_BINS, bin_index
from shapeviz.workload.sketch import (
    BlockSample,
    SketchedLog,
    WorkloadSketch,
    quantiles_from_bins,
)

NS_PER_MINUTE = 60_000_000_000
_NAT = np.iinfo(np.int64).min   # a missing timestamp as int64 ns


@dataclass(frozen=True, eq=False)
class Arrivals:
    """When the requests came: a weighted table of arrival times (ns since the epoch, UTC) and products."""

    time_ns: np.ndarray          # int64
    product: np.ndarray          # int32 code into the view's products
    weight: np.ndarray | None    # requests at each time; None: one each (every row of a frame)
    resolution_ns: int = 0       # 0: exact timestamps; NS_PER_MINUTE: a sketch's whole minutes

    @property
    def requests(self) -> int:
        """Requests with a usable arrival time."""
        return int(len(self.time_ns) if self.weight is None else round(float(self.weight.sum())))

    def span_ns(self) -> tuple[int, int] | None:
        """(start, end) in ns: the first arrival and the last (plus the resolution: the end of its minute)."""
        if not len(self.time_ns):
            return None
        return int(self.time_ns.min()), int(self.time_ns.max()) + self.resolution_ns


def per_minute_rates(times: pd.Series | np.ndarray, weights: np.ndarray | None = None) -> np.ndarray:
    """Request rate (req/s) of every complete minute from the first arrival; the last, partial one is left out.

    The one definition of a log's per-minute rates: the plan's peak rate, the headline figures and the measured
    levels all use it. ``times``: timestamps (missing ones are skipped) or int64 ns; ``weights``: requests each.
    """
    if isinstance(times, pd.Series):
        times = _timestamps_ns(times)
        ns = times[times != _NAT]
        weights = None if weights is None else np.asarray(weights)[times != _NAT]
    else:
        ns = np.asarray(times, dtype=np.int64)
    if not len(ns):
        return np.zeros(0)
    minute = (ns - ns.min()) // NS_PER_MINUTE
    counts = np.bincount(minute, weights=weights)
    return (counts[:-1] if len(counts) > 1 else counts) / 60.0



def _timestamps_ns(timestamps: pd.Series) -> np.ndarray:
    """int64 ns since the epoch (UTC) of a timestamp column; NaT as the int64 minimum."""
    dtype = timestamps.dtype
    if not (isinstance(dtype, pd.DatetimeTZDtype) and dtype.unit == "ns"):   # the canonical dtype needs no copy
        timestamps = pd.to_datetime(timestamps, utc=True).dt.as_unit("ns")
    return np.asarray(timestamps.array.asi8)


@dataclass(eq=False)
class WorkloadView:
    """A weighted table of requests (one per row, or one per sketch cell) and their arrivals; read-only."""

    input_tokens: np.ndarray        # int64 per request (rows), float64 mean of the cell (sketch)
    output_tokens: np.ndarray
    cached_tokens: np.ndarray       # float64 within 0..input (0 where the log reports none)
    weight: np.ndarray | None       # requests each row stands for; None: 1 each (every row of a frame)
    product: np.ndarray             # int32 code into ``products``
    products: list[str]
    arrivals: Arrivals
    report: LoadReport
    has_cached: bool = False
    model: np.ndarray | None = None          # int32 code into ``models`` (rows only)
    models: list[str] = field(default_factory=list)
    frame: pd.DataFrame | None = None        # the canonical frame the rows are (None for a sketch)
    sketch: WorkloadSketch | None = None     # the sketch the cells are (None for rows)
    notes: list[str] = field(default_factory=list)   # what the view leaves out, said where it is shown
    # a sketch's cells: input bin, output bin, and the exact input, output and cached token sums of each
    _cells: tuple[np.ndarray, ...] | None = None
    _sample: WorkloadView | None = None      # a sketch's sample as a view of rows, built on first use

    # ------------------------------------------------------------------------------------------ building

    @classmethod
    def from_frame(cls, frame: pd.DataFrame, report: LoadReport | None = None,
                   notes: Sequence[str] = ()) -> WorkloadView:
        """Every row of a canonical frame, weight 1 (ValueError names a missing or bad token column)."""
        inp, out = token_arrays(frame)
        has_cached = "cached_tokens" in frame.columns
        if has_cached:
            cached = np.clip(frame["cached_tokens"].to_numpy(dtype=np.float64, na_value=0.0), 0.0, inp)
        else:
            cached = np.zeros(len(inp))
        prod, products = product_codes(frame)
        model, models = category_codes(frame["model"]) if "model" in frame.columns else (None, [])
        if "timestamp" in frame.columns and len(frame):
            ns = _timestamps_ns(frame["timestamp"])
            ok = ns != _NAT
            arrivals = Arrivals(ns[ok], prod[ok], None) if not ok.all() else Arrivals(ns, prod, None)
        else:
            arrivals = Arrivals(np.zeros(0, np.int64), np.zeros(0, np.int32), None)
        if report is None:
            report = LoadReport("frame", "frame", "none", len(frame), len(frame))
        return cls(inp, out, cached, None, prod, products, arrivals, report, has_cached, model, models,
                   frame=frame, notes=list(notes))

    @classmethod
    def from_sketch(cls, sketch: WorkloadSketch, notes: Sequence[str] = ()) -> WorkloadView:
        """One row per occupied (product, cell) of a sketch at the cell's mean tokens, weighted by its requests."""
        p, i, j = np.nonzero(sketch.counts)
        c = sketch.counts[p, i, j].astype(np.float64)
        in_sum = sketch.input_sum[p, i, j].astype(np.float64)
        out_sum = sketch.output_sum[p, i, j].astype(np.float64)
        n_mean, m_mean = in_sum / c, out_sum / c
        cached = np.minimum(sketch.cached_sum[p, i, j] / c, n_mean)
        t = sketch.timeline
        if len(t):
            code = {name: g for g, name in enumerate(sketch.products)}
            arrivals = Arrivals(t["minute"].to_numpy(dtype=np.int64) * NS_PER_MINUTE,
                                np.array([code[x] for x in t["product"]], dtype=np.int32),
                                t["requests"].to_numpy(dtype=np.float64), NS_PER_MINUTE)
        else:
            arrivals = Arrivals(np.zeros(0, np.int64), np.zeros(0, np.int32), np.zeros(0), NS_PER_MINUTE)
        return cls(n_mean, m_mean, cached, c, p.astype(np.int32), list(sketch.products), arrivals, sketch.report,
                   sketch.has_cached, sketch=sketch, notes=list(notes),
                   _cells=(i.astype(np.int64), j.astype(np.int64), in_sum, out_sum,
                           sketch.cached_sum[p, i, j].astype(np.float64)))

    # ------------------------------------------------------------------------------------------ reading

    @property
    def exact(self) -> bool:
        """True when every row is one request (a frame); False for a sketch's cells."""
        return self.weight is None

    @property
    def n_requests(self) -> int:
        """Requests the view stands for."""
        return len(self.input_tokens) if self.weight is None else int(round(float(self.weight.sum())))

    def weighted(self, values: np.ndarray) -> np.ndarray:
        """Per-row values times the requests each row stands for (the values themselves for unit rows)."""
        values = np.asarray(values, dtype=np.float64)
        return values if self.weight is None else values * self.weight

    def totals(self, axis: str) -> np.ndarray:
        """Tokens of ``input``/``output``/``cached`` each row stands for: the row's own, or the cell's exact sum."""
        if self._cells is not None:
            return self._cells[2 + ("input", "output", "cached").index(axis)]
        return {"input": self.input_tokens, "output": self.output_tokens,
                "cached": self.cached_tokens}[axis].astype(np.float64)

    def count(self, groups: np.ndarray, size: int) -> np.ndarray:
        """Requests per group (a code per row, 0..size-1), float64."""
        return np.bincount(groups, weights=self.weight, minlength=size).astype(np.float64)

    def bins(self, axis: str) -> np.ndarray:
        """Each row's bin on the fixed log grid (``binning``), int64: the sketch's own cell for cells."""
        if self._cells is not None:
            return self._cells[0] if axis == "input" else self._cells[1]
        return bin_index(self.input_tokens if axis == "input" else self.output_tokens).astype(np.int64)

    def quantiles(self, axis: str, qs: Sequence[float]) -> tuple[np.ndarray, np.ndarray]:
        """(overall, per product) quantiles (``qs`` in 0..100) of ``input``/``output`` tokens.

        Rows: exact (``np.percentile``, linear). Cells: the bin of the nearest-rank quantile, interpolated inside
        it (``sketch.quantiles_from_bins``), so within one bin (15 %) of the exact figure.
        """
        q = np.asarray(qs, dtype=np.float64)
        values = self.input_tokens if axis == "input" else self.output_tokens
        n_prod = len(self.products)
        per = np.zeros((n_prod, len(q)), dtype=np.float64)
        if self.weight is None:
            overall = np.percentile(values, q) if len(values) else np.full(len(q), np.nan)
            order = np.argsort(self.product, kind="stable")
            bounds = np.concatenate([[0], np.cumsum(np.bincount(self.product, minlength=n_prod))])
            grouped = values[order]
            for g in range(n_prod):   # one iteration per product, not per row
                if bounds[g + 1] > bounds[g]:
                    per[g] = np.percentile(grouped[bounds[g]:bounds[g + 1]], q)
            return overall, per
        cell = self.product.astype(np.int64) * N_BINS + self.bins(axis)
        marginals = np.bincount(cell, weights=self.weight, minlength=n_prod * N_BINS).reshape(n_prod, N_BINS)
        for g in range(n_prod):
            per[g] = quantiles_from_bins(marginals[g], q)
        return quantiles_from_bins(marginals.sum(axis=0), q), per

    # ------------------------------------------------------------------------------------------ time

    def per_minute_rates(self) -> np.ndarray:
        """Request rate (req/s) of every complete minute from the first arrival (``per_minute_rates``)."""
        return per_minute_rates(self.arrivals.time_ns, self.arrivals.weight)

    # ------------------------------------------------------------------------------------------ requests one by one

    @property
    def rows(self) -> WorkloadView:
        """The individual requests: this view when it is every row, else the sketch's uniform sample."""
        if self.sketch is None:
            return self   # not cached on the view: a view holding itself would live until the cycle collector ran
        if self._sample is None:
            self._sample = WorkloadView.from_frame(self.sketch.sample_frame(), self.report)
        return self._sample

    @property
    def sampled(self) -> bool:
        """True when ``rows`` is a sample of the requests rather than every one."""
        return self.sketch is not None

    def session_rows(self) -> tuple[pd.DataFrame | None, float]:
        """Rows for session analyses and the share of sessions they hold: every row, else the sketch's sessions."""
        if self.sketch is None:
            return self.frame, 1.0
        if self.sketch.sessions is None:
            return None, 1.0
        return self.sketch.sessions.canonical(), self.sketch.sessions.rate

    @property
    def blocks(self) -> BlockSample | None:
        """The sketch's bottom-k sample of prompt block ids (None for rows: prefix reuse reads the frame)."""
        return self.sketch.blocks if self.sketch is not None else None


def as_view(data: WorkloadView | pd.DataFrame | WorkloadSketch | LoadedLog | SketchedLog) -> WorkloadView:
    """The view of what an analysis was given: a view as it is, a frame or log by its rows, a sketch by its cells."""
    if isinstance(data, WorkloadView):
        return data
    if isinstance(data, pd.DataFrame):
        return WorkloadView.from_frame(data)
    if isinstance(data, WorkloadSketch):
        return WorkloadView.from_sketch(data)
    if isinstance(data, SketchedLog):
        if data.frame is not None:
            return WorkloadView.from_frame(data.frame, data.report, data.notes)
        return WorkloadView.from_sketch(data.sketch, data.notes)
    if isinstance(data, LoadedLog):
        return WorkloadView.from_frame(data.frame, data.report)
    raise ValueError(f"expected a canonical request frame, a loaded log or a workload sketch, got "
                     f"{type(data).__name__}")
