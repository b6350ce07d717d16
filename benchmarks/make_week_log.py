"""A multi-day request log whose hourly rates follow a published production pattern (the Azure LLM inference
trace 2024 week: coding and conversation), for the autoscaling benchmark.

    python benchmarks/make_week_log.py --days 7 --out /tmp/week.csv [--scale 0.0001] [--seed 0]

Every rate and token statistic comes from ``data/traffic_patterns.json`` (measured figures of the real week, and
the assumptions where none was published, each with its source). Requests are a Poisson stream per service at
each hour's rate; tokens are lognormal, pinned at the published p50 and p90 and clipped at the maximum. The log
starts on a Monday at 00:00 UTC, so a week has five weekdays and a weekend.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
START = pd.Timestamp("2024-05-13T00:00:00Z")   # a Monday of the published week
Z90 = 1.2815515655446004


def load_patterns() -> dict:
    """The sourced hourly patterns (data/traffic_patterns.json)."""
    return json.loads((ROOT / "data" / "traffic_patterns.json").read_text(encoding="utf-8"))


def _value(spec: dict, key: str) -> float:
    return float(spec[key]["value"])


def _rescale(curve: np.ndarray, peak_to_trough: float, mean: float) -> np.ndarray:
    """The same daily curve with another peak-to-trough ratio (in log space) and mean."""
    log = np.log(curve)
    lo, hi = log.min(), log.max()
    shaped = np.exp(lo + (log - lo) * np.log(peak_to_trough) / max(hi - lo, 1e-12))
    return shaped * mean / shaped.mean()


def coding_day(spec: dict) -> tuple[np.ndarray, np.ndarray]:
    """Requests per hour (UTC 0..23) of a weekday and a weekend day of the coding service."""
    measured = np.asarray(spec["weekday_requests_per_hour_utc_00_09"]["value"], dtype=np.float64)
    trough = measured.min()
    peak = trough * _value(spec, "weekday_peak_to_trough")
    peak_hour = int(_value(spec, "peak_hour_utc"))
    hours = np.arange(24, dtype=np.float64)
    anchors_h = np.concatenate([np.arange(10), [peak_hour, 24]])
    anchors_v = np.concatenate([measured, [peak, measured[0]]])
    weekday = np.interp(hours, anchors_h, anchors_v)
    weekend = _rescale(weekday, _value(spec, "weekend_peak_to_trough"), _value(spec, "weekend_mean_requests_per_hour"))
    return weekday, weekend


def conversation_day(spec: dict) -> tuple[np.ndarray, np.ndarray]:
    """Requests per hour of a weekday and a weekend day of the conversation service (log-linear trough to peak)."""
    trough_h, peak_h = int(_value(spec, "trough_hour_utc")), int(_value(spec, "peak_hour_utc"))
    hours = np.arange(24, dtype=np.float64)
    # log-rate: 0 at the trough, 1 at the peak, linear in between both ways round the clock
    t = (hours - trough_h) % 24
    rise = (peak_h - trough_h) % 24
    up = np.where(t <= rise, t / rise, 1.0 - (t - rise) / (24 - rise))
    base = np.exp(up * np.log(_value(spec, "weekday_peak_to_trough")))
    weekday = base * _value(spec, "weekday_mean_requests_per_hour") / base.mean()
    weekend = _rescale(weekday, _value(spec, "weekend_peak_to_trough"), _value(spec, "weekend_mean_requests_per_hour"))
    return weekday, weekend


def _lognormal(rng: np.random.Generator, n: int, spec: dict) -> np.ndarray:
    mu = np.log(spec["p50"])
    sigma = max((np.log(spec["p90"]) - mu) / Z90, 1e-6)
    return np.clip(np.round(rng.lognormal(mu, sigma, n)), 1, spec["max"]).astype(np.int64)


def generate(days: float = 7.0, scale: float | None = None, seed: int = 0) -> pd.DataFrame:
    """The log as a frame: timestamp (UTC), product, input_tokens, output_tokens, sorted by time."""
    patterns = load_patterns()
    scale = float(patterns["scale"]["value"]) if scale is None else float(scale)
    rng = np.random.default_rng(seed)
    hours = int(np.ceil(days * 24))
    parts = []
    for name, spec in patterns["services"].items():
        weekday, weekend = coding_day(spec) if name == "coding" else conversation_day(spec)
        day_of = (START.dayofweek + np.arange(hours) // 24) % 7
        per_hour = np.where(day_of >= 5, weekend[np.arange(hours) % 24], weekday[np.arange(hours) % 24]) * scale
        counts = rng.poisson(per_hour)
        offsets = np.repeat(np.arange(hours) * 3600.0, counts) + rng.uniform(0, 3600.0, counts.sum())
        n = offsets.size
        parts.append(pd.DataFrame({
            "timestamp": START + pd.to_timedelta(offsets, unit="s"),
            "product": spec["product"],
            "input_tokens": _lognormal(rng, n, spec["input_tokens"]),
            "output_tokens": _lognormal(rng, n, spec["output_tokens"]),
        }))
    frame = pd.concat(parts, ignore_index=True).sort_values("timestamp", kind="stable").reset_index(drop=True)
    return frame[frame["timestamp"] < START + pd.Timedelta(days=days)].reset_index(drop=True)


def main(argv: list[str] | None = None) -> int:
    """Write the log as CSV."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--days", type=float, default=7.0)
    ap.add_argument("--scale", type=float, default=None, help="share of the published rates (default from the data file)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", required=True)
    args = ap.parse_args(argv)
    frame = generate(args.days, args.scale, args.seed)
    frame.assign(timestamp=frame["timestamp"].dt.strftime("%Y-%m-%dT%H:%M:%S.%fZ")).to_csv(args.out, index=False)
    print(f"{len(frame):,} requests over {args.days:g} days → {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
