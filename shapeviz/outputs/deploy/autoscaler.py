"""The autoscaling policy as the engines' own autoscalers take it: a KEDA ScaledObject (which drives a Kubernetes
HPA) on a request-rate metric, every value commented with where it came from, plus the policies and windows as
CSV for the bundle.

KEDA divides the metric by the target to get replicas (``AverageValue``), so the target is the request rate one
replica carries within both p90 SLOs (the predicted-attainment policy) or at the utilisation target (the
utilisation policy). The shape drifts, so the target is the rate one replica carries in 90% of the log's busy
windows: a single number for an autoscaler that cannot see the shape.
"""
from __future__ import annotations

import json

import numpy as np
import pandas as pd

from shapeviz.fleet.autoscale import (
    POLICY_LABELS,
    AutoscaleResult,
    TrafficWindows,
    compare_policies,
    defaults,
)

PROMETHEUS_QUERY = 'sum(rate(vllm:request_success_total{{model_name="{model}"}}[1m]))'
SERVER = "http://prometheus-server.monitoring.svc:80"   # assumed: edit to your Prometheus
TARGET_QUANTILE = 0.1   # the per-replica rate met by 90% of busy windows (request-weighted)


def per_replica_target(tw: TrafficWindows, policy: str, target_utilization: float) -> float:
    """Requests per second per replica an autoscaler should target: met in 90% of the log's busy windows."""
    per = tw.sizing_rps if policy != "utilization" else tw.full_rps * target_utilization
    weight = tw.requests.astype(np.float64)
    busy = weight > 0
    if not busy.any():
        return float(np.median(per))
    order = np.argsort(per[busy])
    cdf = np.cumsum(weight[busy][order]) / weight[busy].sum()
    return float(per[busy][order][int(np.searchsorted(cdf, TARGET_QUANTILE))])


def keda_scaled_object(result: AutoscaleResult, tw: TrafficWindows, app: str = "llm", model: str = "model",
                       deployment_name: str | None = None) -> str:
    """A KEDA ScaledObject for the policy (peak: a fixed replica count; schedule: a cron trigger per hour)."""
    p = result.policy
    name = deployment_name or f"{app}-vllm-colocated"
    d = defaults()
    peak = int(result.schedule.provisioned.max()) if result.schedule.provisioned.size else p.minimum
    target = per_replica_target(tw, p.name, p.utilization)
    delay = result.startup
    q = json.dumps
    lines = [
        "# KEDA ScaledObject (keda.sh/v1alpha1) for the planned pool, written by shapeviz.",
        f"# policy: {POLICY_LABELS[p.name]}; deployment {tw.dep.describe()}; SLOs at p90: TTFT "
        f"{tw.ttft_slo_ms:g} ms, TPOT {tw.tpot_slo_ms:g} ms",
        f"# a new replica serves {delay.delay_s:.0f} s after it is asked for (estimated: {delay.weight_gb:.0f} GB of "
        f"weights at {delay.storage_gbps:g} GB/s = {delay.load_s:.0f} s, plus {delay.engine_start_s:.0f} s engine start"
        " and warm-up, assumed): bursts faster than that are missed (see windows.csv)",
        "apiVersion: keda.sh/v1alpha1",
        "kind: ScaledObject",
        "metadata:",
        f"  name: {q(name + '-autoscaler')}",
        "spec:",
        "  scaleTargetRef:",
        f"    name: {q(name)}  # the Deployment of the manifest (k8s/)",
        "  pollingInterval: 30  # KEDA default, seconds (keda.sh ScaledObject spec)",
        f"  minReplicaCount: {p.minimum}  # {p.to_dict()['sources']['min_replicas']}",
        f"  maxReplicaCount: {peak}  # estimated: the busiest window's replicas at its rate and shape (hold at peak)",
        "  advanced:",
        "    horizontalPodAutoscalerConfig:",
        "      behavior:",
        "        scaleDown:",
        f"          stabilizationWindowSeconds: {int(p.cooloff)}  # {p.to_dict()['sources']['cooloff_s']}",
        "        scaleUp:",
        "          stabilizationWindowSeconds: 0  # assumed: scale up at once (the start-up delay is the lag already)",
        "  triggers:",
    ]
    if p.name == "schedule":
        hour = ((tw.origin.hour * 60 + tw.origin.minute + np.arange(result.schedule.desired.size)) // 60) % 24
        per_hour = pd.Series(result.schedule.desired).groupby(hour).max()
        lead_min = int(np.ceil(delay.delay_s / 60.0))
        for h, replicas in per_hour.items():
            start_min = (int(h) * 60 - lead_min) % 1440
            lines += [
                "    - type: cron",
                "      metadata:",
                '        timezone: "Etc/UTC"',
                f"        start: {q(f'{start_min % 60} {start_min // 60} * * *')}  # estimated: {lead_min} min ahead "
                f"of {int(h):02d}:00 UTC (the start-up delay)",
                f"        end: {q(f'59 {int(h)} * * *')}",
                f"        desiredReplicas: {q(str(int(replicas)))}  # estimated: the log's busiest window at {int(h):02d}h",
            ]
    elif p.name == "peak":
        lines += [
            "    - type: cron",
            "      metadata:",
            '        timezone: "Etc/UTC"',
            '        start: "0 0 * * *"',
            '        end: "59 23 * * *"',
            f"        desiredReplicas: {q(str(peak))}  # estimated: hold at peak all day",
        ]
    else:
        why = ("estimated: the request rate one replica carries within both p90 SLOs, met in 90% of the log's "
               "busy windows (the shape drifts; the planner sized each window at its own)"
               if p.name == "slo" else
               f"estimated: {p.utilization:.0%} ({p.to_dict()['sources'].get('target_utilization', '')}) of the "
               "request rate one replica carries at full load, in 90% of the log's busy windows")
        lines += [
            "    - type: prometheus",
            "      metricType: AverageValue  # replicas = total rate / target",
            "      metadata:",
            f"        serverAddress: {q(SERVER)}  # assumed: your Prometheus",
            f"        query: {q(PROMETHEUS_QUERY.format(model=model))}  # assumed metric: vLLM's counter of "
            "finished requests, model_name as served (SGLang and TensorRT-LLM name theirs differently)",
            f"        threshold: {q(f'{target:.4g}')}  # req/s per replica, {why}",
        ]
    lines.append(f"# control loop assumed by the plan: {d['control_interval_s']['source']}")
    return "\n".join(lines) + "\n"


def autoscaling_tables(tw: TrafficWindows, result: AutoscaleResult) -> dict[str, pd.DataFrame]:
    """The policies side by side and the chosen policy's windows, for CSV and the memo."""
    policies = compare_policies(tw, result.startup)
    windows = result.windows.assign(start=result.windows["start"].astype(str))
    return {"autoscaling_policies": policies, "autoscaling_windows": windows}

