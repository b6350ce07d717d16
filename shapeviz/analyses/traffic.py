"""When the requests came: span, mean and peak rates, per-minute rates and the rate over time per product."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from shapeviz.workload.sketch import _NS_PER_MINUTE, WorkloadSketch


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


def traffic(frame: pd.DataFrame) -> Traffic:
    """Span and request rates of a canonical frame, from ``timestamp`` when it has one."""
    n = len(frame)
    if "timestamp" not in frame.columns or frame["timestamp"].notna().sum() < 2:
        return Traffic(n, None, None, None, None, None, None)
    ts = frame["timestamp"].dropna()
    start, end = ts.min(), ts.max()
    span = (end - start).total_seconds()
    if span <= 0:
        return Traffic(n, start.isoformat(), end.isoformat(), 0.0, None, None, None)
    per_minute = per_minute_rates(ts)
    return Traffic(
        requests=n, start=start.isoformat(), end=end.isoformat(), span_s=float(span),
        mean_rps=float(len(ts) / span), peak_rps=float(per_minute.max()),
        p99_minute_rps=float(np.quantile(per_minute, 0.99)),
    )


def per_minute_rates(timestamps: pd.Series) -> np.ndarray:
    """Request rate (req/s) of every complete minute from the first timestamp; the last, partial one is left out.

    The one definition of a log's per-minute rates: the plan's peak rate and the headline figures both use it.
    """
    ts = timestamps.dropna()
    minute = ((ts - ts.min()) // pd.Timedelta(minutes=1)).to_numpy(dtype=np.int64)
    counts = np.bincount(minute)
    return (counts[:-1] if len(counts) > 1 else counts) / 60.0


def rate_over_time(frame: pd.DataFrame, freq: str = "1min") -> pd.DataFrame:
    """Requests and req/s per time bucket and product: a tidy frame (timestamp, product, requests, rate_rps)."""
    if "timestamp" not in frame.columns or frame["timestamp"].notna().sum() == 0:
        raise ValueError("the log has no timestamps, so its rate over time cannot be drawn; map a timestamp column")
    step = pd.Timedelta(freq)
    if step <= pd.Timedelta(0):
        raise ValueError(f"freq={freq!r} must be a positive duration such as '1min' or '10s'")
    valid = frame["timestamp"].notna()
    ts = frame.loc[valid, "timestamp"]
    product = (frame.loc[valid, "product"].astype(str) if "product" in frame.columns
               else pd.Series("all", index=ts.index))
    bucket = ts.dt.floor(step)
    counts = pd.crosstab(bucket, product)
    grid = pd.date_range(bucket.min(), bucket.max(), freq=step)
    counts = counts.reindex(grid, fill_value=0)
    counts.index.name, counts.columns.name = "timestamp", "product"
    tidy = counts.stack().rename("requests").reset_index()
    tidy["requests"] = tidy["requests"].astype(np.int64)
    tidy["rate_rps"] = tidy["requests"] / step.total_seconds()
    return tidy


def rate_over_time_from_sketch(sketch: WorkloadSketch, freq: str = "1min") -> pd.DataFrame:
    """Requests and req/s per time bucket and product (tidy: timestamp, product, requests, rate_rps)."""
    if not len(sketch.timeline):
        raise ValueError("the log has no timestamps, so its rate over time cannot be drawn; map a timestamp column")
    step = pd.Timedelta(freq)
    if step < pd.Timedelta(minutes=1) or step % pd.Timedelta(minutes=1):
        raise ValueError(f"freq={freq!r}: a sketch keeps whole minutes; use a multiple of '1min'")
    minutes = step // pd.Timedelta(minutes=1)
    t = sketch.timeline
    bucket = (t["minute"] // minutes) * minutes
    counts = t.assign(bucket=bucket).pivot_table(index="bucket", columns="product", values="requests",
                                                 aggfunc="sum", fill_value=0)
    counts = counts.reindex(np.arange(counts.index.min(), counts.index.max() + 1, minutes), fill_value=0)
    counts.index = pd.to_datetime(counts.index * _NS_PER_MINUTE, utc=True)
    counts.index.name, counts.columns.name = "timestamp", "product"
    tidy = counts.stack().rename("requests").reset_index()
    tidy["requests"] = tidy["requests"].astype(np.int64)
    tidy["rate_rps"] = tidy["requests"] / step.total_seconds()
    return tidy


def traffic_from_sketch(sketch: WorkloadSketch) -> Traffic:
    """``summary.Traffic`` at minute resolution (start/end are the edges of the first and last minute)."""
    per = sketch.per_minute()
    n = sketch.requests
    if len(per) < 2:
        return Traffic(n, None, None, None, None, None, None)
    start = pd.Timestamp(int(per.index.min()) * _NS_PER_MINUTE, tz="UTC")
    end = pd.Timestamp((int(per.index.max()) + 1) * _NS_PER_MINUTE, tz="UTC")
    span = (end - start).total_seconds()
    rates = per.to_numpy()[:-1] / 60.0
    return Traffic(n, start.isoformat(), end.isoformat(), float(span), float(per.sum() / span),
                         float(rates.max()), float(np.quantile(rates, 0.99)))

