"""Calibration from the user's own log: measured vs simulated latency per product, and a fitted correction.

When a log carries ``ttft_ms`` / ``tpot_ms`` (or only ``e2e_ms``) and the user states today's fleet, the log is
replayed on that fleet with its own timestamps and the simulated latencies are set against the measured ones.
``fit_to_log`` then finds how much faster or slower this fleet runs than the published calibration: a factor on
the compute efficiency (fitted to the median TTFT) and one on the memory efficiency (fitted to the median TPOT);
with only E2E, one factor on both. The calibrated deployment is labelled "calibrated to your log".
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

from shapeviz.physics.steps import Deployment
from shapeviz.serving.simulator import SimResult, simulate

LABEL = "calibrated to your log"
SCALE_RANGE = (0.2, 3.0)      # a fleet 5× slower to 3× faster than the published calibration
BISECTION_STEPS = 12          # 2^-12 of a log range of ~2.7: well under 0.1% on the factor
ROUNDS = 2                    # alternate TPOT → memory, TTFT → compute: each nudges the other a little
LATENCY_COLUMNS = ("ttft_ms", "tpot_ms", "e2e_ms")


def scaled(dep: Deployment, compute_scale: float = 1.0, memory_scale: float = 1.0) -> Deployment:
    """A copy of ``dep`` whose compute (mfu) and memory (mbu) efficiencies are multiplied by the factors."""
    e = dep.eff
    eff = e.replace(mfu=e.mfu * compute_scale, mbu=e.mbu * memory_scale)
    return Deployment(dep.model, dep.gpu, dep.precision, dep.kv_precision, dep.tp, eff, engine=dep.engine)


def latency_columns(frame: pd.DataFrame) -> list[str]:
    """The measured latency columns of a log with at least 20 values."""
    return [c for c in LATENCY_COLUMNS if c in frame.columns and frame[c].notna().sum() >= 20]


def _replay(frame: pd.DataFrame, dep: Deployment, replicas: int, requests: int | None) -> SimResult:
    return simulate(frame, dep, arrivals="trace", replicas=replicas, requests=requests)


def _kept(frame: pd.DataFrame, requests: int | None) -> pd.DataFrame:
    """The rows the replay simulates, in its order (timestamped rows by time, the first ``requests``)."""
    rows = frame[frame["timestamp"].notna()].sort_values("timestamp", kind="stable")
    return rows.iloc[:requests] if requests else rows


def measured_vs_simulated(frame: pd.DataFrame, result: SimResult, requests: int | None = None) -> pd.DataFrame:
    """Per product and latency: measured and simulated p50 and p90 (ms), one row each."""
    measured = _kept(frame, requests).reset_index(drop=True)
    sim = result.requests
    product = measured["product"].astype(str) if "product" in measured.columns else pd.Series("all", index=measured.index)
    rows = []
    for metric in latency_columns(measured):
        for name in ["all", *sorted(product.unique())] if product.nunique() > 1 else ["all"]:
            mask = np.ones(len(measured), dtype=bool) if name == "all" else (product == name).to_numpy()
            m = measured.loc[mask, metric].astype("float64").dropna()
            s = sim.loc[mask, metric].dropna()
            if len(m) < 5 or len(s) < 5:
                continue
            rows.append({"product": name, "latency": metric, "measured_p50": float(m.median()),
                         "simulated_p50": float(s.median()), "measured_p90": float(m.quantile(0.9)),
                         "simulated_p90": float(s.quantile(0.9))})
    return pd.DataFrame(rows, columns=["product", "latency", "measured_p50", "simulated_p50", "measured_p90",
                                       "simulated_p90"])


@dataclass(frozen=True)
class LogCalibration:
    """The fitted factors, the calibrated deployment and measured vs simulated before and after the fit."""

    compute_scale: float
    memory_scale: float
    fitted_to: tuple[str, ...]
    deployment: Deployment
    before: pd.DataFrame
    after: pd.DataFrame
    label: str = LABEL

    def describe(self) -> str:
        """One line for the page and the command line."""
        return (f"{self.label}: compute efficiency ×{self.compute_scale:.2f}, memory efficiency "
                f"×{self.memory_scale:.2f} (fitted to the median {', '.join(c[:-3].upper() for c in self.fitted_to)})")


def _bisect(target: float, simulate_at: "callable", lo: float, hi: float) -> float:  # type: ignore[valid-type]
    """The factor whose simulated median equals ``target``; the median falls as the factor grows."""
    a, b = math.log(lo), math.log(hi)
    for _ in range(BISECTION_STEPS):
        mid = (a + b) / 2.0
        if simulate_at(math.exp(mid)) > target:
            a = mid  # still too slow: a faster fleet
        else:
            b = mid
    return math.exp((a + b) / 2.0)


def fit_to_log(frame: pd.DataFrame, dep: Deployment, replicas: int, requests: int | None = 1500) -> LogCalibration:
    """Fit the compute and memory factors that make the replay of ``frame`` on today's fleet match its latencies."""
    if "timestamp" not in frame.columns or frame["timestamp"].notna().sum() < 2:
        raise ValueError("calibrating to a log needs its timestamps (to replay its load); map a timestamp column")
    columns = latency_columns(frame)
    if not columns:
        raise ValueError("the log carries no measured latencies (ttft_ms, tpot_ms or e2e_ms, at least 20 rows): "
                         "nothing to calibrate to")
    if not (isinstance(replicas, (int, np.integer)) and replicas >= 1):
        raise ValueError(f"replicas={replicas!r}: state today's fleet as a whole number of replicas ≥ 1")
    measured = _kept(frame, requests)
    target = {c: float(measured[c].astype("float64").median()) for c in columns}
    e = dep.eff
    hi_c = min(SCALE_RANGE[1], 1.0 / e.mfu)  # an efficiency never exceeds 1
    hi_m = min(SCALE_RANGE[1], 1.0 / e.mbu)
    compute, memory = 1.0, 1.0

    def median(metric: str, c: float, m: float) -> float:
        return float(_replay(frame, scaled(dep, c, m), replicas, requests).requests[metric].median())

    if "ttft_ms" in columns or "tpot_ms" in columns:
        for _ in range(ROUNDS):
            if "tpot_ms" in columns:
                memory = _bisect(target["tpot_ms"], lambda m: median("tpot_ms", compute, m), SCALE_RANGE[0], hi_m)
            if "ttft_ms" in columns:
                compute = _bisect(target["ttft_ms"], lambda c: median("ttft_ms", c, memory), SCALE_RANGE[0], hi_c)
        fitted = tuple(c for c in ("ttft_ms", "tpot_ms") if c in columns)
    else:  # E2E only: one factor on both
        both = _bisect(target["e2e_ms"], lambda s: median("e2e_ms", min(s, hi_c), min(s, hi_m)),
                       SCALE_RANGE[0], max(hi_c, hi_m))
        compute, memory = min(both, hi_c), min(both, hi_m)
        fitted = ("e2e_ms",)
    calibrated = scaled(dep, compute, memory)
    before = measured_vs_simulated(frame, _replay(frame, dep, replicas, requests), requests)
    after = measured_vs_simulated(frame, _replay(frame, calibrated, replicas, requests), requests)
    return LogCalibration(compute, memory, fitted, calibrated, before, after)
