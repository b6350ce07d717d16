"""When the requests came: span, mean and peak rates, and the rate over time per product, from a workload view."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from shapeviz.workload.view import WorkloadView, as_view


@dataclass(frozen=True)
class Traffic:
    """When the requests came: span and rates measured from the timestamps (None without timestamps)."""

    requests: int
    start: str | None
    end: str | None
    span_s: float | None
    mean_rps: float | None
    peak_rps: float | None        # busiest minute
    p99_minute_rps: float | None  # 99th percentile of per-minute rates: the planning rate

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-ready dict."""
        return dict(self.__dict__)


def traffic(data: WorkloadView | pd.DataFrame) -> Traffic:
    """Span and request rates of a view (or a canonical frame), from its arrival times when it has them.

    From rows the span runs from the first to the last timestamp; from a sketch, from the start of its first
    minute to the end of its last.
    """
    view = as_view(data)
    n = view.n_requests
    arrivals = view.arrivals
    if arrivals.requests < 2:
        return Traffic(n, None, None, None, None, None, None)
    first, last = arrivals.span_ns()
    start, end = pd.Timestamp(first, tz="UTC"), pd.Timestamp(last, tz="UTC")
    span = (end - start).total_seconds()
    if span <= 0:
        return Traffic(n, start.isoformat(), end.isoformat(), 0.0, None, None, None)
    per_minute = view.per_minute_rates()
    return Traffic(
        requests=n, start=start.isoformat(), end=end.isoformat(), span_s=float(span),
        mean_rps=float(arrivals.requests / span), peak_rps=float(per_minute.max()),
        p99_minute_rps=float(np.quantile(per_minute, 0.99)),
    )


def rate_over_time(data: WorkloadView | pd.DataFrame, freq: str = "1min") -> pd.DataFrame:
    """Requests and req/s per time bucket and product: a tidy frame (timestamp, product, requests, rate_rps).

    A sketch keeps whole minutes, so its buckets are whole minutes too (ValueError otherwise).
    """
    view = as_view(data)
    arrivals = view.arrivals
    if not len(arrivals.time_ns):
        raise ValueError("the log has no timestamps, so its rate over time cannot be drawn; map a timestamp column")
    step = pd.Timedelta(freq)
    if step <= pd.Timedelta(0):
        raise ValueError(f"freq={freq!r} must be a positive duration such as '1min' or '10s'")
    step_ns = int(step.value)
    if arrivals.resolution_ns and step_ns % arrivals.resolution_ns:
        raise ValueError(f"freq={freq!r}: a sketch keeps whole minutes; use a multiple of '1min'")
    bucket = arrivals.time_ns // step_ns
    first = int(bucket.min())
    index = bucket - first
    n_buckets = int(index.max()) + 1
    present = np.flatnonzero(np.bincount(arrivals.product, minlength=len(view.products)))
    names = [view.products[g] for g in present]
    order = sorted(range(len(present)), key=lambda g: names[g])
    column = np.full(len(view.products), -1, dtype=np.int64)
    column[present[order]] = np.arange(len(present))
    counts = np.bincount(index * len(present) + column[arrivals.product], weights=arrivals.weight,
                         minlength=n_buckets * len(present))
    stamps = pd.to_datetime((np.arange(n_buckets, dtype=np.int64) + first) * step_ns, utc=True)
    tidy = pd.DataFrame({
        "timestamp": stamps.repeat(len(present)),
        "product": np.tile(np.asarray([names[g] for g in order], dtype=object), n_buckets),
        "requests": np.rint(counts).astype(np.int64),
    })
    tidy["rate_rps"] = tidy["requests"] / step.total_seconds()
    return tidy
