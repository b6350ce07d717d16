"""The report bundle's deployment part: engine launch scripts, manifests, the plan for ``check`` and the
load-test commands, as ``{filename: bytes}`` plus the README lines that explain them."""
from __future__ import annotations

import json
from dataclasses import dataclass, field

import pandas as pd

from shapeviz.outputs.deploy.build import (
    ENGINE_CHOICES,
    deployment_bundle,
    longest_context,
    prefix_signal,
    prefix_signal_from,
)
from shapeviz.outputs.deploy.engines import ENGINE_NAMES
from shapeviz.outputs.deploy.flags import engine_spec
from shapeviz.outputs.deploy.loadtest import (
    knee_rate,
    load_levels,
    loadtest_commands,
    readme_section,
)
from shapeviz.outputs.measured import plan_reference
from shapeviz.physics.steps import Deployment, smallest_tp
from shapeviz.serving.planner import Plan, WhatIf, Workload

PLAN_FILE = "plan.json"


@dataclass(frozen=True)
class DeployFiles:
    """Files for the bundle, what each is, the README sections and any note on what could not be built."""

    files: dict[str, bytes]
    describe: dict[str, str]
    readme: list[str]
    notes: list[str] = field(default_factory=list)
    knee_rps: float | None = None


def deploy_files(frame: pd.DataFrame, workload: Workload, dep: Deployment, after: Plan, *, whatif: WhatIf,
                 ttft_slo_ms: float, tpot_slo_ms: float, tp_source: str | None = None,
                 prefix_reuse: object | None = None) -> DeployFiles:
    """Scripts per engine and pool, manifests per engine and layout, plan.json and the load-test commands.

    ``prefix_reuse``: the log's ``shapeviz.analyses.prefix.PrefixReuse`` when the caller has it (the report's analysis).
    """

    if tp_source is None:  # the smallest TP that fits is the model's choice; any other was the user's
        tp_source = "estimated" if dep.tp == smallest_tp(dep.model, dep.gpu, dep.precision, dep.kv_precision) else "assumed"

    files: dict[str, bytes] = {}
    describe: dict[str, str] = {}
    notes: list[str] = []
    # The analysis has replayed the block hashes already: reuse its figure rather than replaying them again.
    if prefix_reuse is not None and whatif.cache_hit is None:
        prefix = prefix_signal_from(prefix_reuse)
    else:
        prefix = prefix_signal(frame, whatif)
    context = longest_context(frame, whatif)
    replicas = int(after.replicas or 1)
    knee, _ = knee_rate(workload, dep, whatif, ttft_slo_ms, tpot_slo_ms, replicas)
    reference = plan_reference(workload, dep, after, whatif=whatif, ttft_slo_ms=ttft_slo_ms, tpot_slo_ms=tpot_slo_ms,
                               knee_rps=knee)
    files[PLAN_FILE] = (json.dumps(reference, indent=1, allow_nan=False) + "\n").encode("utf-8")
    describe[PLAN_FILE] = "the plan as `python -m shapeviz check` reads it: planned TTFT/TPOT vs request rate"
    model = None
    layouts_seen: list[str] = []
    for engine in ENGINE_CHOICES:
        bundle = deployment_bundle(workload, dep, engine=engine, whatif=whatif, ttft_slo_ms=ttft_slo_ms,
                                   tpot_slo_ms=tpot_slo_ms, max_context_tokens=context, context_source="measured",
                                   prefix=prefix, tp_source=tp_source, the_plan=after)
        model = str(bundle.settings.model_path.value)
        layouts_seen = list(bundle.configs)
        for layout, configs in bundle.configs.items():
            for cfg in configs:
                name = f"serve_{engine}_{cfg.role}.sh"
                files[name] = cfg.shell().encode("utf-8")
                describe[name] = f"{ENGINE_NAMES[engine]} launch script, {cfg.role} pool ({cfg.replicas.value} replica(s))"
                if cfg.yaml_options:
                    opt = f"{engine}_{cfg.role}_options.yaml"
                    files[opt] = cfg.trtllm_yaml().encode("utf-8")
                    describe[opt] = f"TensorRT-LLM extra LLM API options of the {cfg.role} pool"
            k8s = f"k8s_{engine}_{layout}.yaml"
            files[k8s] = bundle.manifest(layout).encode("utf-8")
            describe[k8s] = f"Kubernetes manifest, {ENGINE_NAMES[engine]}, {layout}"
        if engine == ENGINE_CHOICES[0]:
            notes.extend(bundle.settings.notes)
    levels = load_levels(after.rate_rps, after.rate_source, knee)
    commands = loadtest_commands(levels, model=model or dep.model.id)
    readme = [
        "Serving configs",
        "---------------",
        "serve_<engine>_<pool>.sh start one replica of a pool; k8s_<engine>_<layout>.yaml run the whole fleet",
        f"({', '.join(layouts_seen)}). Every value carries a comment: measured (the log), estimated (the capacity",
        "model) or assumed (a choice or default). Flag names and types as read from each engine's CLI source:",
        *(f"  {ENGINE_NAMES[e]}: {engine_spec(e)['version']}" for e in ENGINE_CHOICES),
        *(f"Note: {n}" for n in notes),
        "",
        *readme_section(commands, planned_rps=after.rate_rps, knee_rps=knee, replicas=after.replicas,
                        ttft_slo_ms=ttft_slo_ms, tpot_slo_ms=tpot_slo_ms),
    ]
    return DeployFiles(files, describe, readme, notes, knee)
