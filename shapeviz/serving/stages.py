"""Stages of a log whose rate moves, found from its arrivals; what a replay measured in each; saturation per stage.

A load test (guidellm, aiperf, vegeta) steps its rate: Poisson stages at 3, 6, 9, ... req/s, a few minutes each.
Its benchmark reports one row per stage, so the replay of such a log is reported the same way. Stages are found
from the arrival times alone: the arrivals are counted in short bins and the timeline is cut where the rate
changes (binary segmentation of Poisson counts, best cut first, each cut kept only when its log-likelihood gain
beats a penalty that grows with the number of bins and with the log's own burstiness). A log at a steady rate is
one stage.

Saturation is judged per stage: the steady-rate check (requests in the system, and the slow tenth's queue wait,
growing from the start of the stage to its end) holds within a stage, where the rate is steady, and not across
stages, where more requests in the system only mean more traffic. The first stage, from an empty fleet, counts
every request in the system, as the steady-rate check always has; a later stage counts the waiting ones, since
the requests being served keep growing after a step up for as long as a reply lasts.
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


def _window_saturated(in_system: np.ndarray, queue_ms: np.ndarray) -> bool:
    """The steady-rate check on one window's arrivals (in arrival order): does the queue keep growing in it?

    ``in_system``: the requests in the system (or waiting) each arrival finds.
    """
    if in_system.size < MIN_STAGE_REQUESTS:
        return False
    # requests each arrival finds: the last fifth against the second (the first is the warm-up)
    k = max(in_system.size // 5, 1)
    early, late = float(in_system[k:2 * k].mean()), float(in_system[-k:].mean())
    if late > 1.3 * early + 2.0 * math.sqrt(early) + 2.0:
        return True
    # a queue that grows for the whole window: its last fifth's slow tenth waits far longer than the first fifth's
    # (a p90, not a median: a KV pool hogged by long contexts starves a minority while most pass)
    first, last = float(np.percentile(queue_ms[:k], 90)), float(np.percentile(queue_ms[-k:], 90))
    return last > 4.0 * first + 1000.0


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
    queue = r["queue_ms"].to_numpy(dtype=np.float64)
    # finishes and starts built and sorted in one array each (a million-request result: no pile of temporaries)
    finish = r["e2e_ms"].to_numpy(dtype=np.float64) / 1000.0
    finish += arrival
    finish.sort()
    in_system = seen - np.searchsorted(finish, arrival, side="right")
    del finish
    # After a step up, the requests being served grow for as long as a request lasts (Little's law at the new
    # rate), which long replies stretch past a stage's first fifth: later stages count the waiting ones only.
    started = np.nan_to_num(queue) / 1000.0
    started += arrival
    started.sort()
    waiting = seen - np.searchsorted(started, arrival, side="right")
    del started, seen
    which = stage_of(arrival, stages)
    return [_window_saturated((in_system if i == 0 else waiting)[which == i], queue[which == i])
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
