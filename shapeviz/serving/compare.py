"""Before → after a what-if, and one workload across many deployments.

Pressure and latency before and after a lever are compared on **one fleet** (today's plan): a lever then shows
as relief on the phase it touches. Comparing each plan on its own, re-sized fleet would hide that, since a
smaller fleet is just as busy. The GPUs and cost needed after the lever come from the re-sized plan.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

import pandas as pd

from shapeviz.physics.catalogue import (
    GPU,
    Model,
    get_gpu,
    get_model,
    get_precision,
    list_gpus,
    list_precisions,
)
from shapeviz.physics.steps import DEFAULT_TPOT_SLO_MS, TP_CHOICES, Deployment
from shapeviz.plain import json_safe
from shapeviz.serving.planner import (
    DEFAULT_TTFT_SLO_MS,
    Plan,
    WhatIf,
    Workload,
    load_curve,
    plan,
)


@dataclass(frozen=True)
class WhatIfComparison:
    """Plans before and after a what-if, and both evaluated on the before-plan's fleet."""

    before: Plan
    after: Plan
    fleet_replicas: int
    fleet_gpus: int
    on_fleet: pd.DataFrame  # index "before", "after"; columns of ``load_curve``

    def to_dict(self) -> dict:
        """Plain JSON-ready dict."""
        return {
            "fleet_gpus": self.fleet_gpus,
            "on_fleet": json_safe(self.on_fleet.to_dict(orient="index")),
            "before": self.before.to_dict(),
            "after": self.after.to_dict(),
        }


def compare_whatif(
    workload: Workload,
    dep: Deployment,
    whatif: WhatIf,
    ttft_slo_ms: float = DEFAULT_TTFT_SLO_MS,
    tpot_slo_ms: float = DEFAULT_TPOT_SLO_MS,
    gpu_hour_usd: float | None = None,
    *,
    before: Plan | None = None,
    after: Plan | None = None,
) -> WhatIfComparison:
    """The what-if's effect: plans before/after, and pressure/latency of both on today's fleet.

    ``before``/``after``: plans already sized (``shapeviz.fleet.sizing``) to use instead of the analytic ones."""
    before = before if before is not None else plan(workload, dep, WhatIf(), ttft_slo_ms, tpot_slo_ms, gpu_hour_usd)
    after = after if after is not None else plan(workload, dep, whatif, ttft_slo_ms, tpot_slo_ms, gpu_hour_usd)
    colocated = before.gpus.get("colocated") or dep.tp
    replicas = before.replicas or max(1, int(colocated) // dep.tp)
    rows = [
        load_curve(workload, dep, [1.0], w, ttft_slo_ms, tpot_slo_ms, replicas=replicas).iloc[0]
        for w in (WhatIf(), whatif)
    ]
    on_fleet = pd.DataFrame(rows, index=["before", "after"])
    return WhatIfComparison(before, after, replicas, replicas * dep.tp, on_fleet)


def precisions_for(model: Model | str, gpu: GPU | str) -> list[str]:
    """Weight precisions worth offering for ``model`` on ``gpu``.

    BF16 and FP8 everywhere (FP8 weight-only where FP8 tensor cores are missing, as on A100); a 4-bit format
    where the GPU runs it natively (NVFP4/MXFP4 on Blackwell) or where it is the model's own checkpoint
    (gpt-oss in MXFP4 on Hopper, weight-only).
    """
    m, g = get_model(model), get_gpu(gpu)
    out = []
    for p in list_precisions():
        spec = get_precision(p)
        native = spec.needs_tensor_cores is None or g.has_tensor_cores_for(spec.needs_tensor_cores)
        if not spec.is_four_bit or native or p == m.native_precision:
            out.append(p)
    return out


def layouts_for(model: Model | str, tp: int) -> list[tuple[int, bool]]:
    """(ep, attention_dp) layouts of a ``tp``-GPU replica: TP, and for MoE models DEP (attention-DP, EP over all)."""
    m = get_model(model)
    if not m.is_moe or tp == 1 or m.experts % tp:
        return [(1, False)]
    return [(1, False), (tp, True)]


def compare_deployments(
    workload: Workload,
    model: str,
    *,
    gpus: Iterable[str] | None = None,
    precisions: Iterable[str] | None = None,
    tps: Iterable[int] = TP_CHOICES,
    whatif: WhatIf = WhatIf(),
    ttft_slo_ms: float = DEFAULT_TTFT_SLO_MS,
    tpot_slo_ms: float = DEFAULT_TPOT_SLO_MS,
) -> pd.DataFrame:
    """Every (GPU, precision, layout) that holds the model, planned for one workload; one row each.

    Precisions default to those ``precisions_for`` offers on each GPU (B200 gets NVFP4/MXFP4); MoE models are
    also tried as DEP (attention-DP with expert parallelism over the replica's GPUs, e.g. H200 DEP8).
    Columns: gpu, precision, layout, tp (GPUs per replica), gpu_id, ep, attention_dp, method ("estimate": the
    analytic plan; ``fleet.sizing.size_comparison`` replays the cheapest), gpus, meets_slo, ttft_p90_ms, tpot_p90_ms,
    usd_per_hour, usd_per_million_tokens, caveat (``caveats``: empty when there is none). Each GPU is priced at its catalogue price (an assumption the table
    says). Configurations that cannot hold the weights are left out.
    """
    rows = []
    for gpu_id in gpus or list_gpus():
        gpu = get_gpu(gpu_id)
        for precision in (precisions_for(model, gpu) if precisions is None else precisions):
            for tp in tps:
                for ep, attention_dp in layouts_for(model, tp):
                    try:
                        dep = Deployment(model, gpu, precision, tp=tp, ep=ep, attention_dp=attention_dp)
                    except ValueError:
                        continue  # the weights do not fit, or the layout does not suit the model
                    rows.append(_compared(dep, workload, whatif, ttft_slo_ms, tpot_slo_ms))
    return pd.DataFrame(rows)


def _compared(dep: Deployment, workload: Workload, whatif: WhatIf, ttft_slo_ms: float, tpot_slo_ms: float) -> dict:
    """One row of the comparison: the plan of ``dep`` at its GPU's catalogue price."""
    gpu = dep.gpu
    p = plan(workload, dep, whatif, ttft_slo_ms, tpot_slo_ms, gpu.usd_per_gpu_hour)
    return {
        "gpu": gpu.name, "precision": dep.precision, "layout": dep.layout, "tp": dep.tp,
        "gpu_id": gpu.id, "ep": dep.ep, "attention_dp": dep.attention_dp, "method": "estimate",
        "gpus": p.gpus.get("colocated"),
        "meets_slo": p.meets_slo, "ttft_p90_ms": p.ttft_ms.p90, "tpot_p90_ms": p.tpot_ms.p90,
        "usd_per_hour": p.cost.get("usd_per_hour"),
        "usd_per_million_tokens": p.cost.get("usd_per_million_tokens"),
        "caveat": "; ".join(caveats(dep)),
    }


# A tensor-parallel link below this (GB/s per GPU, one way) is PCIe (32-64 in data/gpus.csv), not NVLink/XGMI (300+).
PCIE_CLASS_GBPS = 100.0
# Weights above this share of a GPU's memory leave little for the KV cache: batches stay small.
CROWDED_WEIGHTS = 0.6


def caveats(dep: Deployment) -> list[str]:
    """What a reader should know before buying ``dep`` because it is cheap: low-precision weights without their
    tensor cores, tensor parallelism over PCIe, weights that crowd out the KV cache (each read off the catalogue)."""
    out = []
    if dep.fp8_emulated:
        kind = str(dep.precision_spec.needs_tensor_cores).upper()
        out.append(f"no {kind} tensor cores: {str(dep.precision).upper()} weights run weight-only at the BF16 rate")
    if dep.tp > 1 and dep.gpu.scaleup_gbps < PCIE_CLASS_GBPS:
        out.append(f"TP{dep.tp} all-reduce over PCIe ({dep.gpu.scaleup_gbps:,.0f} GB/s per GPU, no NVLink)")
    share = dep.weight_bytes_per_gpu / dep.gpu.memory_bytes
    if share > CROWDED_WEIGHTS:
        out.append(f"the weights fill {share:.0%} of each GPU's memory: little room for KV, small batches")
    return out


def winners(table: pd.DataFrame) -> dict[str, pd.Series]:
    """Cheapest, lowest-latency and fewest-GPU configuration among those that meet both SLOs (among the simulated
    ones when some were sized by replaying the log: an estimate never wins over a replayed answer)."""
    ok = table[table["meets_slo"].astype(bool)]
    if "method" in table.columns and (table["method"] == "simulated").any():
        replayed = table[table["method"] == "simulated"]
        ok = replayed[replayed["meets_slo"].astype(bool)]
        if ok.empty and "meets_others" in replayed.columns:   # a product no size serves anywhere replayed
            ok = replayed[replayed["meets_others"].astype(bool)]
    if ok.empty:
        return {}
    return {
        "cheapest": ok.loc[ok["usd_per_million_tokens"].astype(float).idxmin()],
        "lowest latency": ok.loc[ok["ttft_p90_ms"].astype(float).idxmin()],
        "fewest GPUs": ok.loc[ok["gpus"].astype(float).idxmin()],
    }
