"""The capacity model: GPU and model catalogues, prefill/decode/KV physics, the serving plan and its what-if.

Pure numpy/pandas; calibrated on published measurements (``calibration.py``, ``data/efficiency.json``).
"""
from __future__ import annotations

from shapeviz.capacity.catalogue import GPU, Model, get_gpu, get_model, list_gpus, list_models
from shapeviz.capacity.physics import (
    DEFAULT_TPOT_SLO_MS,
    Deployment,
    Efficiency,
    balance_ratio,
    decode_step_s,
    load_efficiency,
    max_throughput,
    operating_batch,
    prefill_time_s,
    request_gpu_seconds,
    smallest_tp,
)
from shapeviz.capacity.serving import (
    DEFAULT_TTFT_SLO_MS,
    Plan,
    WhatIf,
    Workload,
    load_curve,
    plan,
    rate_over_time,
)
from shapeviz.capacity.slo import slo_range, slo_ranges


def default_deployment() -> Deployment:
    """Llama-3.1-70B on H100 SXM, FP8 weights and KV, TP 2: the deployment the app opens with."""
    return Deployment(get_model("llama-3.1-70b"), get_gpu("h100-sxm"), precision="fp8", tp=2)


__all__ = [
    "DEFAULT_TPOT_SLO_MS",
    "DEFAULT_TTFT_SLO_MS",
    "GPU",
    "Deployment",
    "Efficiency",
    "Model",
    "Plan",
    "WhatIf",
    "Workload",
    "balance_ratio",
    "decode_step_s",
    "default_deployment",
    "get_gpu",
    "get_model",
    "list_gpus",
    "list_models",
    "load_curve",
    "load_efficiency",
    "max_throughput",
    "operating_batch",
    "plan",
    "prefill_time_s",
    "rate_over_time",
    "request_gpu_seconds",
    "slo_range",
    "slo_ranges",
    "smallest_tp",
]
