"""Engine configs for a fleet of pools: each pool planned on the requests it serves, sized as the fleet says."""
from __future__ import annotations

import re
from dataclasses import replace
from typing import Any

import pandas as pd

from shapeviz.fleet.pools import Fleet, pool_deployment, route_frame
from shapeviz.outputs.deploy.build import (
    config_dict,
    deployment_bundle,
    longest_context,
    prefix_signal,
)
from shapeviz.outputs.deploy.engines import DEFAULT_PORT
from shapeviz.outputs.deploy.flags import engine_spec
from shapeviz.outputs.deploy.k8s import manifest
from shapeviz.outputs.deploy.settings import Setting
from shapeviz.physics.engines import ENGINE_NAMES
from shapeviz.physics.kv_pool import KVPool
from shapeviz.physics.steps import DEFAULT_TPOT_SLO_MS
from shapeviz.serving.planner import DEFAULT_TTFT_SLO_MS, WhatIf, Workload, plan
from shapeviz.serving.products import resolve_classes


def _dns(name: str) -> str:
    """A pool name (user text) as a DNS label for Kubernetes object names."""
    label = re.sub(r"[^a-z0-9-]+", "-", name.lower()).strip("-")[:30].strip("-")
    return label or "pool"


def pool_apps(names: list[str], app: str = "llm", max_chars: int = 42) -> list[str]:
    """Each pool's Kubernetes app name: unique and stable, whatever sanitising makes of the pools' names.

    "Chat!" and "chat?" both sanitise to ``chat``: the first pool (in the fleet file's order) keeps
    ``llm-chat``, the next gets ``llm-chat-2``, so applying the manifest keeps one object per pool.
    """
    taken: set[str] = set()
    apps = []
    for name in names:
        base = f"{app}-{_dns(name)}"[:max_chars].strip("-")
        candidate, k = base, 1
        while candidate in taken:
            k += 1
            suffix = f"-{k}"
            candidate = base[:max_chars - len(suffix)].strip("-") + suffix
        taken.add(candidate)
        apps.append(candidate)
    return apps


def fleet_configs(frame: pd.DataFrame, fleet: Fleet, *, engine: str | None = None, whatif: WhatIf = WhatIf(),
                  model_path: str | None = None, port: int = DEFAULT_PORT, app: str = "llm",
                  k8s: bool = False) -> dict[str, Any]:
    """One launch script (and with ``k8s`` one manifest) per pool of ``fleet``.

    Each pool's settings are planned on the log's requests that pool serves, at the tightest class among its
    products; its replica count is the fleet's (the simulated size), not the analytic plan's. A split pool gets a
    prefill config on its prefill side's GPU and a decode config on its decode side's, sized as the fleet says: the
    fleet's replay (``simulate_fleet``) is what shows the split meets the classes, not the analytic plan.

    Each pool's scripts are for the engine the pool names (``Pool.engine``), the one its replicas were sized on.
    ``engine`` (``config --engine``) only confirms it: a pool sized on another engine is refused by name, since its
    replica count would not hold on the engine the scripts start.
    """
    if engine is not None:
        other = [p for p in fleet.pools if p.engine != engine]
        if other:
            p = other[0]
            raise ValueError(f"pool {p.name!r} of the fleet runs {ENGINE_NAMES[p.engine]} (its replicas were sized on "
                             f"it): config --engine {engine} would start another engine on that count; leave out "
                             f"--engine, or design the fleet with --serving-engine {engine}")
    classes = resolve_classes(frame, dict(fleet.slo), source="set by user (fleet file)")
    target = route_frame(frame, fleet.pools)
    apps = pool_apps([pool.name for pool in fleet.pools], app)
    pools = []
    for i, pool in enumerate(fleet.pools):
        sub = frame[target == i]
        if sub.empty:
            pools.append({"name": pool.name, "engine": pool.engine, "configs": [],
                          "notes": ["no request of the log goes to this pool"]})
            continue
        mine = [classes[p] for p in sub["product"].astype(str).unique() if p in classes]
        ttft = min((c.ttft_ms for c in mine), default=DEFAULT_TTFT_SLO_MS)
        tpot = min((c.tpot_ms for c in mine), default=DEFAULT_TPOT_SLO_MS)
        workload = Workload.from_frame(sub, rate_rps=None)
        sides = ([("prefill", pool.prefill), ("decode", pool.decode)] if pool.split
                 else [("colocated", None)])
        configs, notes = [], []
        for role, side in sides:
            dep = (pool_deployment(pool, fleet.model) if side is None
                   else pool_deployment(pool, fleet.model, side.gpu, side.tp))
            replicas = pool.replicas if side is None else side.replicas
            layout = "colocated" if side is None else "disaggregated"
            try:
                planned = plan(workload, dep, whatif, ttft, tpot)
                if side is not None:   # the split's sizes are the fleet's (simulated), whatever the analytic plan says
                    planned = replace(planned, disaggregated={**(planned.disaggregated or {}),
                                                              "prefill_replicas": int(pool.prefill.replicas),
                                                              "decode_replicas": int(pool.decode.replicas)})
                bundle = deployment_bundle(workload, dep, engine=pool.engine, whatif=whatif, ttft_slo_ms=ttft,
                                           tpot_slo_ms=tpot, max_context_tokens=longest_context(sub, whatif),
                                           context_source="measured", prefix=prefix_signal(sub, whatif),
                                           model_path=model_path, layout=layout, port=port, the_plan=planned,
                                           kv_pool=KVPool(pool.kv_cache_tokens, pool.gpu_memory_utilization))
                chosen = [c for c in bundle.configs[layout] if side is None or c.role == role]
            except ValueError as exc:
                notes.append(f"{role}: {exc}")
                continue
            why = "simulated: fewest replicas whose replay meets every class this pool serves (fleet file)"
            configs += [replace(c, replicas=Setting(int(replicas), "estimated", why)) for c in chosen]
            notes += list(bundle.settings.notes)
        entry: dict[str, Any] = {"name": pool.name, "engine": pool.engine,
                                 "engine_version_read": engine_spec(pool.engine)["version"],
                                 "products": list(pool.products),
                                 "slo": {"ttft_ms": ttft, "tpot_ms": tpot},
                                 "configs": [config_dict(c) for c in configs], "notes": notes}
        if k8s and configs:
            entry["manifest"] = manifest(configs, app=apps[i], port=port)
        pools.append(entry)
    engines = sorted({pool.engine for pool in fleet.pools})
    return {"command": "config", "engine": engines[0] if len(engines) == 1 else None, "engines": engines,
            "fleet": fleet.to_dict(), "pools": pools}


