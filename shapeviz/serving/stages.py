"""Stages of a log whose rate moves, found from its arrivals; what a replay measured in each; saturation per stage.

A load test (guidellm, aiperf, vegeta) steps its rate: Poisson stages at 3, 6, 9, ... req/s, a few minutes each.
Its benchmark reports one row per stage, so the replay of such a log is reported the same way. Stages are found
from the arrival times alone: the arrivals are counted in short bins and the timeline is cut where the rate
changes (binary segmentation of Poisson counts, best cut first, each cut kept only when its log-likelihood gain
beats a penalty that grows with the number of bins and with the log's own burstiness). A log at a steady rate is
one stage.

Saturated means the queue grows: within a stage (where the rate is steady; across stages more requests in the
system only mean more traffic) the requests waiting to be admitted, as each arrival finds them, grow over the
stage's second half by at least ``GROWTH_SHARE`` of the offered rate, and significantly (the slope of
``GROWTH_BLOCKS`` block means, ``GROWTH_T`` standard errors above zero). The first half is left out: it is the
warm-up, while batches and KV pools fill. The requests being served are not counted: they keep growing after a
start or a step up for as long as a reply lasts, which is the fleet filling, not falling behind. So the verdict is
the same for a short run and a long one at the same rate, once the second half holds ``GROWTH_BLOCKS`` blocks with
arrivals (benchmarks/README.md, issue 36: from 120 s of arrivals near a fleet's knee, and 2 s far past it).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from shapeviz.plain import json_safe

PENALTY_PER_LOG_BIN = 1.5   # a cut must gain this × log(bins) × dispersion in log-likelihood (BIC-like, conservative)
MIN_STAGE_S = 30.0          # a stage lasts at least this long ...
MIN_STAGE_REQUESTS = 20     # ... and holds at least this many arrivals (also the least a stage is judged on)
MIN_RATE_STEP = 0.10        # neighbours whose rates differ by less than this share are one stage
MAX_STAGES = 32             # a longer list is no longer a table to set beside a benchmark's
COUNT_PER_BIN = 4.0         # bins long enough to hold this many arrivals at the mean rate
MAX_BINS = 20_000
GROWTH_SHARE = 0.02         # saturated: the waiting queue grows by at least this share of the offered rate ...
GROWTH_BLOCKS = 8           # ... over the second half, judged on this many block means of it ...
GROWTH_T = 3.0              # ... with a slope this many standard errors above zero
WARM_SHARE = 0.9            # warm until the requests being served reach this share of their final level


@dataclass(frozen=True)
class Stage:
    """A span of the timeline at one arrival rate: [start_s, end_s), its arrivals and their rate."""

    start_s: float
    end_s: float
    requests: int
    rate_rps: float


def _loglik(count: np.ndarray, duration: np.ndarray) -> np.ndarray:
    """Poisson log-likelihood of ``count`` arrivals in ``duration`` at their own rate (up to a constant)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(count > 0, count * np.log(count / duration), 0.0) - count


def _dispersion(counts: np.ndarray) -> float:
    """How much burstier than Poisson the counts are, from neighbouring bins (1 for a Poisson stream at any rate)."""
    a, b = counts[:-1], counts[1:]
    both = a + b
    keep = both > 0
    if keep.sum() < 10:
        return 1.0
    ratio = np.sort((a[keep] - b[keep]) ** 2 / both[keep])
    ratio = ratio[: max(int(ratio.size * 0.98), 1)]   # the few bins astride a change are not burstiness
    return max(float(ratio.mean()) / 0.98, 1.0)


def detect_stages(arrival_s: np.ndarray) -> list[Stage]:
    """The stages of a timeline of arrivals (seconds): one stage when the rate does not move."""
    a = np.sort(np.asarray(arrival_s, dtype=np.float64))
    a = a[np.isfinite(a)]
    if a.size == 0:
        return []
    t0, t1 = float(a[0]), float(a[-1])
    span = t1 - t0
    whole = [Stage(t0, t1, int(a.size), (a.size - 1) / span if span > 0 else math.nan)]
    if a.size < 2 * MIN_STAGE_REQUESTS or span < 2 * MIN_STAGE_S:
        return whole
    width = max(COUNT_PER_BIN * span / a.size, span / MAX_BINS)
    bins = int(math.ceil(span / width))
    counts = np.bincount(np.minimum(((a - t0) / width).astype(np.int64), bins - 1), minlength=bins).astype(np.float64)
    cum = np.concatenate([[0.0], np.cumsum(counts)])
    penalty = PENALTY_PER_LOG_BIN * math.log(bins) * _dispersion(counts)
    min_bins = max(int(math.ceil(MIN_STAGE_S / width)), 1)

    def best_cut(lo: int, hi: int) -> tuple[float, int]:
        """The cut of bins [lo, hi) with the largest gain (gain, cut bin), or (0, -1)."""
        k = np.arange(lo + min_bins, hi - min_bins + 1)
        if k.size == 0:
            return 0.0, -1
        left, right = cum[k] - cum[lo], cum[hi] - cum[k]
        ok = (left >= MIN_STAGE_REQUESTS) & (right >= MIN_STAGE_REQUESTS)
        if not ok.any():
            return 0.0, -1
        gain = (_loglik(left, (k - lo) * width) + _loglik(right, (hi - k) * width)
                - _loglik(np.array([cum[hi] - cum[lo]]), np.array([(hi - lo) * width]))[0])
        gain = np.where(ok, gain, -np.inf)
        i = int(np.argmax(gain))
        return float(gain[i]), int(k[i])

    segments = [(0, bins)]
    while len(segments) < MAX_STAGES:
        gains = [best_cut(lo, hi) for lo, hi in segments]
        j = int(np.argmax([g for g, _ in gains]))
        gain, cut = gains[j]
        if cut < 0 or gain <= penalty:
            break
        lo, hi = segments[j]
        segments[j:j + 1] = [(lo, cut), (cut, hi)]
    # neighbours at nearly the same rate are one stage (a cut can pay on a long log for a small drift)
    merged = [segments[0]]
    for lo, hi in segments[1:]:
        plo, phi = merged[-1]
        r0, r1 = (cum[phi] - cum[plo]) / (phi - plo), (cum[hi] - cum[lo]) / (hi - lo)
        if abs(r1 - r0) < MIN_RATE_STEP * max(r0, r1):
            merged[-1] = (plo, hi)
        else:
            merged.append((lo, hi))
    if len(merged) == 1:
        return whole
    stages = []
    for i, (lo, hi) in enumerate(merged):
        start = t0 + lo * width if i else t0
        end = t0 + hi * width if i < len(merged) - 1 else t1
        n = int(cum[hi] - cum[lo])
        stages.append(Stage(start, end, n, n / max(end - start, 1e-9)))
    return stages


def stage_of(arrival_s: np.ndarray, stages: list[Stage]) -> np.ndarray:
    """Index of the stage each arrival falls in (arrivals before the first or after the last: the nearest)."""
    edges = np.array([s.start_s for s in stages[1:]], dtype=np.float64)
    return np.searchsorted(edges, np.asarray(arrival_s, dtype=np.float64), side="right")


def _window_saturated(arrival_s: np.ndarray, waiting: np.ndarray, serving: np.ndarray) -> bool:
    """Does the queue grow in this window of steady rate? ``waiting`` / ``serving``: the requests each arrival
    finds waiting / being served.

    The least-squares slope of the waiting count after the warm-up, from ``GROWTH_BLOCKS`` block means: saturated
    when it is at least ``GROWTH_SHARE`` of the offered rate and ``GROWTH_T`` standard errors above zero (an
    unstable queue grows by the offered rate less the served one; a stable one wanders). The warm-up is the first
    half, and longer while the requests being served are still growing (batches and KV pools filling: a fleet
    past its knee starts to queue only once its KV pools are full): it ends when they first reach WARM_SHARE of
    their level over the window's last quarter.
    """
    if arrival_s.size < MIN_STAGE_REQUESTS:
        return False
    t0, t1 = float(arrival_s[0]), float(arrival_s[-1])
    if not t1 > t0:
        return False
    rate = (arrival_s.size - 1) / (t1 - t0)
    level = float(np.median(serving[arrival_s >= t0 + 0.75 * (t1 - t0)]))
    warm = int(np.argmax(serving >= WARM_SHARE * level))
    half = arrival_s >= max((t0 + t1) / 2.0, float(arrival_s[warm]))
    t, w = arrival_s[half], waiting[half].astype(np.float64)
    block = np.minimum(((t - t[0]) / max(t1 - t[0], 1e-12) * GROWTH_BLOCKS).astype(np.int64), GROWTH_BLOCKS - 1)
    n = np.bincount(block, minlength=GROWTH_BLOCKS)
    filled = n > 0
    if filled.sum() < GROWTH_BLOCKS // 2:
        return False   # too few arrivals in the second half to tell
    x = np.bincount(block, weights=t, minlength=GROWTH_BLOCKS)[filled] / n[filled]
    y = np.bincount(block, weights=w, minlength=GROWTH_BLOCKS)[filled] / n[filled]
    dx = x - x.mean()
    sxx = float(dx @ dx)
    if sxx <= 0:
        return False
    slope = float(dx @ (y - y.mean())) / sxx
    residual = y - y.mean() - slope * dx
    se = math.sqrt(float(residual @ residual) / max(x.size - 2, 1) / sxx)
    return slope >= GROWTH_SHARE * rate and slope >= GROWTH_T * se


def saturated_stages(requests: pd.DataFrame, stages: list[Stage] | None = None) -> list[bool]:
    """Per stage of the log (detected from its arrivals unless given): True where the fleet could not keep up."""
    r = requests
    arrival = r["arrival_s"].to_numpy(dtype=np.float64)
    if not np.all(arrival[1:] >= arrival[:-1]):   # a simulation's result is in arrival order: no sorted copy then
        r = requests.sort_values("arrival_s", kind="stable")
        arrival = r["arrival_s"].to_numpy(dtype=np.float64)
    stages = detect_stages(arrival) if stages is None else stages
    if not stages:
        return []
    seen = np.arange(1, arrival.size + 1)
    # the requests each arrival finds waiting (arrived before it, not yet admitted) and being served (admitted,
    # not finished); starts and finishes sorted in one array each (a million-request result: few temporaries)
    started = np.nan_to_num(r["queue_ms"].to_numpy(dtype=np.float64)) / 1000.0
    started += arrival
    started.sort()
    admitted = np.searchsorted(started, arrival, side="right")
    del started
    waiting = seen - admitted
    del seen
    finish = r["e2e_ms"].to_numpy(dtype=np.float64) / 1000.0
    finish += arrival
    finish.sort()
    serving = admitted - np.searchsorted(finish, arrival, side="right")
    del finish, admitted
    which = stage_of(arrival, stages)
    return [_window_saturated(arrival[which == i], waiting[which == i], serving[which == i])
            for i in range(len(stages))]


def _pct(values: np.ndarray, q: float) -> float | None:
    v = values[np.isfinite(values)]
    return float(np.percentile(v, q)) if v.size else None


def stage_table(requests: pd.DataFrame, ttft_slo_ms: float, tpot_slo_ms: float) -> list[dict[str, Any]]:
    """One row per stage of a replay (``SimResult.requests``): its span, offered rate, TTFT/TPOT p50/p90, goodput.

    ``goodput`` is the share of the stage's requests within both SLOs, ``goodput_rps`` that share of its rate;
    ``saturated`` is the stage's own verdict. The rows are what ``simulate --json`` reports under ``stages``.
    """
    r = requests.sort_values("arrival_s", kind="stable")
    arrival = r["arrival_s"].to_numpy(dtype=np.float64)
    stages = detect_stages(arrival)
    if not stages:
        return []
    saturated = saturated_stages(r, stages)
    which = stage_of(arrival, stages)
    ttft = r["ttft_ms"].to_numpy(dtype=np.float64)
    tpot = r["tpot_ms"].to_numpy(dtype=np.float64)
    ok = (ttft <= ttft_slo_ms) & (np.isnan(tpot) | (tpot <= tpot_slo_ms))
    rows = []
    for i, s in enumerate(stages):
        mine = which == i
        good = float(ok[mine].mean()) if mine.any() else None
        rows.append({
            "stage": i + 1, "start_s": s.start_s, "end_s": s.end_s, "requests": int(mine.sum()),
            "rate_rps": s.rate_rps,
            "ttft_p50_ms": _pct(ttft[mine], 50), "ttft_p90_ms": _pct(ttft[mine], 90),
            "tpot_p50_ms": _pct(tpot[mine], 50), "tpot_p90_ms": _pct(tpot[mine], 90),
            "goodput": good, "goodput_rps": None if good is None else good * s.rate_rps,
            "saturated": saturated[i],
        })
    return json_safe(rows)
