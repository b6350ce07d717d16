"""Serving: the analytic plan (rate → TTFT/TPOT → GPUs), before/after comparisons, the discrete-event simulator,
calibration against published measurements, and the SLO ranges per shape."""
from __future__ import annotations

from shapeviz.serving.planner import (
    DEFAULT_TTFT_SLO_MS,
    Plan,
    WhatIf,
    Workload,
    load_curve,
    plan,
)
from shapeviz.serving.slo import slo_range, slo_ranges

__all__ = ["DEFAULT_TTFT_SLO_MS", "Plan", "WhatIf", "Workload", "load_curve", "plan", "slo_range", "slo_ranges"]
