"""The physics of serving: GPU and model catalogues, precisions, and the time of prefill and decode steps.

Pure numpy/pandas; no planning here (that is ``shapeviz.serving``). Efficiencies are calibrated on published
measurements (``shapeviz.serving.calibration`` writes ``data/efficiency.json``).
"""
from __future__ import annotations

from shapeviz.physics.catalogue import (
    GPU,
    Model,
    get_gpu,
    get_model,
    list_gpus,
    list_models,
)
from shapeviz.physics.steps import (
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


def default_deployment() -> Deployment:
    """Llama-3.1-70B on H100 SXM, FP8 weights and KV, TP 2: the deployment the app opens with."""
    return Deployment(get_model("llama-3.1-70b"), get_gpu("h100-sxm"), precision="fp8", tp=2)


__all__ = [
    "DEFAULT_TPOT_SLO_MS", "GPU", "Deployment", "Efficiency", "Model", "balance_ratio", "decode_step_s",
    "default_deployment", "get_gpu", "get_model", "list_gpus", "list_models", "load_efficiency", "max_throughput",
    "operating_batch", "prefill_time_s", "request_gpu_seconds", "smallest_tp",
]
