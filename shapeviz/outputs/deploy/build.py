"""From a log (or a fixed shape) and plan options to everything a fleet needs: settings, engine configs, manifest.

``deployment_bundle`` is the one entry point the command line (``config``), the report bundle and the dashboard
share, so the three never disagree about a flag.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import pandas as pd

from shapeviz.analyses import prefix
from shapeviz.outputs.deploy.engines import DEFAULT_PORT, EngineConfig, engine_configs
from shapeviz.outputs.deploy.k8s import manifest
from shapeviz.outputs.deploy.settings import (
    PrefixSignal,
    ServingSettings,
    Setting,
    serving_settings,
)
from shapeviz.physics.kv_pool import KVPool
from shapeviz.physics.steps import Deployment
from shapeviz.serving.planner import Plan, WhatIf, Workload, plan

ENGINE_CHOICES = ("vllm", "sglang", "trtllm")
LAYOUT_CHOICES = ("all", "colocated", "disaggregated")


def prefix_signal(frame: pd.DataFrame, whatif: WhatIf = WhatIf()) -> PrefixSignal | None:
    """The prefix reuse the log shows (block hashes > reported cached tokens > sessions), or the what-if's hit rate."""

    if whatif.cache_hit is not None:
        return PrefixSignal(float(whatif.cache_hit), "set by user", "assumed")
    if "hash_ids" in frame.columns:
        try:
            # The unbounded hit ratio is all the config needs; the LRU curve would cost far more on a large log.
            r = prefix.block_reuse(frame, curve=False)
            return PrefixSignal(float(r.hit_ratio_tokens), "block_hashes", "simulated")
        except ValueError:  # a hash_ids column without any blocks: fall through to the other signals
            pass
    reported = prefix.reported_hit_ratio(frame)
    if reported is not None:
        return PrefixSignal(float(reported["hit_ratio_tokens"]), "reported_cached_tokens", "measured")
    estimate = prefix.session_hit_estimate(frame)
    if estimate is not None:
        return PrefixSignal(float(estimate["hit_ratio_tokens"]), "session_estimate", "estimated")
    return None


def prefix_signal_from(reuse: Any) -> PrefixSignal | None:
    """The signal from a ``shapeviz.analyses.prefix.PrefixReuse`` already computed (the report's analysis has one)."""
    if reuse is None or getattr(reuse, "hit_ratio_tokens", None) is None or reuse.method == "none":
        return None
    return PrefixSignal(float(reuse.hit_ratio_tokens), str(reuse.method), str(reuse.provenance))


def longest_context(frame: pd.DataFrame, whatif: WhatIf = WhatIf()) -> float:
    """The longest input + output of any request, after the what-if's trims."""
    n = frame["input_tokens"].to_numpy(dtype=np.float64) * (1.0 - whatif.trim_input)
    m = frame["output_tokens"].to_numpy(dtype=np.float64) * (1.0 - whatif.trim_output)
    return float(np.max(n + m)) if len(frame) else 1.0


@dataclass(frozen=True)
class DeploymentBundle:
    """The plan, its serving settings and, per layout, the engine configs of one engine."""

    plan: Plan
    settings: ServingSettings
    engine: str
    configs: dict[str, list[EngineConfig]]   # layout → configs (colocated: 1, disaggregated: prefill + decode)

    def all_configs(self) -> list[EngineConfig]:
        """Every config, colocated first."""
        return [c for layout in self.configs.values() for c in layout]

    def manifest(self, layout: str, app: str = "llm") -> str:
        """The Kubernetes manifest of one layout."""
        if layout not in self.configs:
            raise ValueError(f"no {layout} configs: the plan could only be configured as {', '.join(self.configs)}")
        return manifest(self.configs[layout], app=app)


def deployment_bundle(
    workload: Workload,
    dep: Deployment,
    *,
    engine: str,
    whatif: WhatIf = WhatIf(),
    ttft_slo_ms: float,
    tpot_slo_ms: float,
    max_context_tokens: float,
    context_source: str,
    prefix: PrefixSignal | None = None,
    tp_source: str = "estimated",
    model_path: str | None = None,
    layout: str = "all",
    port: int = DEFAULT_PORT,
    the_plan: Plan | None = None,
    kv_pool: KVPool | None = None,
) -> DeploymentBundle:
    """Plan (unless given), settings and engine configs of a workload on a deployment."""
    if engine not in ENGINE_CHOICES:
        raise ValueError(f"unknown engine {engine!r}; choose one of {', '.join(ENGINE_CHOICES)}")
    if layout not in LAYOUT_CHOICES:
        raise ValueError(f"unknown layout {layout!r}; choose one of {', '.join(LAYOUT_CHOICES)}")
    if not (isinstance(port, int) and 1 <= port <= 65535):
        raise ValueError(f"port {port!r} must be a TCP port number in 1..65535")
    p = the_plan if the_plan is not None else plan(workload, dep, whatif, ttft_slo_ms, tpot_slo_ms)
    s = serving_settings(p, dep, workload.apply(whatif), tpot_slo_ms=tpot_slo_ms,
                         max_context_tokens=max_context_tokens, context_source=context_source, prefix=prefix,
                         tp_source=tp_source, model_path=model_path, kv_pool=kv_pool)
    wanted = s.layouts() if layout == "all" else [layout]
    missing = [x for x in wanted if x not in s.layouts()]
    if missing:
        raise ValueError("the disaggregated split cannot meet the SLOs for this workload, so it has no configs; "
                         "use --layout colocated or relax the SLOs")
    configs = {x: engine_configs(s, engine, x, port) for x in wanted}
    return DeploymentBundle(p, s, engine, configs)


def _setting_dict(s: Setting) -> dict[str, Any]:
    return {"value": s.value, "source": s.source, "why": s.why}


def config_dict(c: EngineConfig) -> dict[str, Any]:
    """One engine config as plain JSON: the command, its arguments with provenance, the rendered script."""
    return {
        "engine": c.engine, "role": c.role, "replicas": _setting_dict(c.replicas),
        "gpus_per_replica": c.gpus_per_replica, "gpu": c.gpu_name, "command": c.command,
        "model": _setting_dict(c.model), "args": [asdict(a) for a in c.args], "argv": c.argv(),
        "yaml_options": c.plain_yaml_options() or None, "notes": list(c.notes),
        "defaults_kept": [{"setting": d.flag, "value": d.value, "source": d.source, "why": d.why} for d in c.defaults],
        "shell": c.shell(), "yaml": c.trtllm_yaml() or None,
    }


def settings_dict(s: ServingSettings) -> dict[str, Any]:
    """The serving settings as plain JSON."""
    out: dict[str, Any] = {
        "model_id": s.model_id, "gpu": s.gpu_name,
        **{k: _setting_dict(getattr(s, k)) for k in ("model_path", "tp", "ep", "attention_dp", "precision", "kv_precision",
                                                     "max_model_len", "prefix_caching", "rate_rps")},
        "memory": {k: _setting_dict(v) for k, v in s.memory.items()},
        "pools": {role: {"replicas": _setting_dict(p.replicas), "max_num_seqs": _setting_dict(p.max_num_seqs),
                         "max_batched_tokens": _setting_dict(p.max_batched_tokens)} for role, p in s.pools.items()},
        "notes": list(s.notes),
    }
    return out
