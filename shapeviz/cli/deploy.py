"""``python -m shapeviz config`` (engine configs and manifest of a plan) and ``check`` (plan vs measured).

Both return a JSON document and a text rendering; every user mistake is a ``ValueError`` with one line.
"""
from __future__ import annotations

import argparse
from dataclasses import replace
from pathlib import Path
from typing import Any

from shapeviz.ingest import load_logs
from shapeviz.cli.plan import (_workload, classes_from_args, deployment_from_args, kv_pool_from_args, resolve_model,
                               slo_window_seconds, speculative_from_args)
from shapeviz.fleet.pools import load_fleet
from shapeviz.fleet.sizing import fleet_answer
from shapeviz.ingest.documents import parse_json, read_capped
from shapeviz.outputs.deploy.build import (
    config_dict,
    deployment_bundle,
    longest_context,
    prefix_signal,
    settings_dict,
)
from shapeviz.outputs.deploy.engines import ENGINE_NAMES
from shapeviz.outputs.deploy.flags import engine_spec
from shapeviz.outputs.deploy.fleet import fleet_configs
from shapeviz.outputs.deploy.loadtest import knee_rate
from shapeviz.outputs.deploy.settings import PrefixSignal
from shapeviz.outputs.measured import (
    check_document,
    log_levels,
    plan_reference,
    read_plan_reference,
    read_results,
)
from shapeviz.physics.steps import DEFAULT_TPOT_SLO_MS
from shapeviz.serving.planner import DEFAULT_TTFT_SLO_MS, WhatIf, Workload
from shapeviz.serving.routers import LABELS
from shapeviz.text import one_line

# How each simulated router is run in front of the engines (the routers' own documentation and source).
ROUTER_DEPLOY = {
    "round_robin": "a plain Kubernetes Service (kube-proxy spreads connections), or SGLang router --policy round_robin",
    "random": "SGLang router --policy random, or a gateway whose load-balancing policy picks an endpoint at random "
              "(Envoy's RANDOM)",
    "least_tokens": "llm-d's inference scheduler with its queue and KV-utilisation scorers, or Dynamo's frontend with "
                    "--kv-overlap-score-weight 0 (load only)",
    "session": "session affinity on the conversation id (llm-d's session-affinity scorer, SGLang router "
               "--policy consistent_hash), or a gateway hashing a session header",
    "prefix": "SGLang router --policy cache_aware (defaults: cache-threshold 0.3, balance-abs-threshold 64, "
              "balance-rel-threshold 1.5), llm-d's prefix-cache-scorer with its queue scorer, or Dynamo's frontend "
              "--router-mode kv",
}


def _inputs(args: argparse.Namespace, mapping: dict[str, str] | None):
    """Deployment, workload, what-if and the log-derived facts (longest context, prefix reuse, frame)."""

    whatif = WhatIf(args.trim_input, args.trim_output, args.cache_hit, args.traffic)
    logs = list(getattr(args, "logs", None) or [])
    if logs and (args.isl is not None or args.osl is not None):
        raise ValueError("give either LOG files or --isl/--osl, not both")
    if logs:

        log = load_logs(logs, mapping)
        frame = log.frame
        dep, _ = deployment_from_args(args, resolve_model(args, frame)[0], frame)
        workload = Workload.from_frame(frame, rate_rps=args.rate)
        dep = speculative_from_args(dep, workload, args)
        return dep, workload, whatif, longest_context(frame, whatif), "measured", prefix_signal(frame, whatif), frame
    dep, _ = deployment_from_args(args)
    workload, _ = _workload(args, mapping, dep)
    dep = speculative_from_args(dep, workload, args)
    context = float(args.isl * (1 - whatif.trim_input) + args.osl * (1 - whatif.trim_output))
    prefix = prefix_signal_for_shape(whatif)
    return dep, workload, whatif, context, "assumed", prefix, None


def prefix_signal_for_shape(whatif: WhatIf):
    """A fixed shape shows no reuse: only a what-if hit rate turns prefix caching on or off."""

    return None if whatif.cache_hit is None else PrefixSignal(float(whatif.cache_hit), "set by user", "assumed")


def config_document(args: argparse.Namespace, mapping: dict[str, str] | None = None) -> dict[str, Any]:
    """The ``config --json`` document: settings with provenance, engine configs, manifest, plan reference."""
    if getattr(args, "fleet", None):
        return fleet_config_document(args, mapping)

    dep, workload, whatif, context, context_source, prefix, frame = _inputs(args, mapping)
    ttft = DEFAULT_TTFT_SLO_MS if args.ttft_slo_ms is None else args.ttft_slo_ms
    tpot = DEFAULT_TPOT_SLO_MS if args.tpot_slo_ms is None else args.tpot_slo_ms
    # the fleet size: the one sizing function `plan` uses (shapeviz.fleet.sizing), so both print one fleet
    planned, sizing, _, routed = fleet_answer(
        workload, dep, frame, whatif=whatif, ttft_slo_ms=ttft, tpot_slo_ms=tpot,
        classes=classes_from_args(args, frame, ttft, tpot), method=getattr(args, "method", "simulated"), slo_window_s=slo_window_seconds(getattr(args, "slo_window", None)),
        router=getattr(args, "router", None), block_size=getattr(args, "block_size", None))
    if routed is not None:
        # the reuse this router keeps on the planned fleet replaces the log's ideal (one shared cache) figure
        if routed.get("source") in ("block_hashes", "sessions") and routed.get("hit_ratio_tokens") is not None:
            share = min(float(routed["hit_ratio_tokens"]), 0.99)
            whatif = replace(whatif, cache_hit=share)
            prefix = PrefixSignal(share, f"{routed['source']} with the {args.router} router", "simulated")
    engine = args.engine or "vllm"   # what config writes when no engine is named
    bundle = deployment_bundle(workload, dep, engine=engine, whatif=whatif, ttft_slo_ms=ttft, tpot_slo_ms=tpot,
                               max_context_tokens=context, context_source=context_source, prefix=prefix,
                               tp_source="assumed" if args.tp is not None else "estimated",
                               model_path=args.model_path, layout=args.layout, port=args.port,
                               kv_pool=kv_pool_from_args(args), the_plan=planned)
    knee, _ = knee_rate(workload, dep, whatif, ttft, tpot, int(bundle.plan.replicas or 1))
    spec = engine_spec(engine)
    document: dict[str, Any] = {
        "command": "config",
        "engine": engine,
        "engine_version_read": spec["version"],
        "engine_flags_source": spec["source"],
        "deployment": dep.describe(),
        "meets_slo": bundle.plan.meets_slo,
        "method": sizing.method,
        "sized_on": sizing.sized_on,
        "one_fewer": sizing.to_dict()["one_fewer"],
        "settings": settings_dict(bundle.settings),
        "layouts": {layout: [config_dict(c) for c in cfgs] for layout, cfgs in bundle.configs.items()},
        "manifests": ({layout: bundle.manifest(layout, app=args.app) for layout in bundle.configs}
                      if args.k8s else None),
        "plan_reference": plan_reference(workload, dep, bundle.plan, whatif=whatif, ttft_slo_ms=ttft,
                                         tpot_slo_ms=tpot, knee_rps=knee),
        "notes": list(bundle.settings.notes) + list(bundle.plan.notes),
    }
    if routed is not None:
        document["router"] = {"router": args.router, "rule": LABELS[args.router], "run_it_as": ROUTER_DEPLOY[args.router],
                              "prefix": routed}
        document["notes"] += [routed["note"], f"router: {ROUTER_DEPLOY[args.router]}"]
    return document


def fleet_config_document(args: argparse.Namespace, mapping: dict[str, str] | None = None) -> dict[str, Any]:
    """``config --fleet FLEET.json LOG``: one launch script (and with ``--k8s`` one manifest) per pool of the fleet."""
    logs = list(getattr(args, "logs", None) or [])
    if not logs:
        raise ValueError("config --fleet needs the LOG the fleet serves (its requests set each pool's settings)")
    whatif = WhatIf(args.trim_input, args.trim_output, args.cache_hit, args.traffic)
    return fleet_configs(load_logs(logs, mapping).frame, load_fleet(args.fleet), engine=args.engine, whatif=whatif,
                         model_path=args.model_path, port=args.port, app=args.app, k8s=args.k8s)


def fleet_config_text(document: dict[str, Any]) -> str:
    """Each pool's scripts (and manifest) one after another."""
    names = " and ".join(ENGINE_NAMES[e] for e in document["engines"])
    lines = [f"# {names} configs per pool of the fleet, each on the engine its replicas were sized on"]
    # pool names and notes are the fleet file's text: each comment stays one line, whatever they hold
    for pool in document["pools"]:
        lines += ["", f"# ######## pool {one_line(pool['name'])}: {ENGINE_NAMES[pool['engine']]} ########"]
        if pool.get("engine_version_read"):
            lines += [f"# flags as of: {pool['engine_version_read']}"]
        lines += [f"# note: {one_line(n)}" for n in pool["notes"]]
        for c in pool["configs"]:
            lines += [f"# ===== {c['role']} =====", c["shell"].rstrip("\n")]
        if pool.get("manifest"):
            lines += [f"# ===== Kubernetes manifest: pool {one_line(pool['name'])} =====", pool["manifest"].rstrip("\n")]
    return "\n".join(lines)


def config_text(document: dict[str, Any]) -> str:
    """The scripts (and TensorRT-LLM option files, and manifests with --k8s) one after another."""
    if "pools" in document:
        return fleet_config_text(document)
    name = ENGINE_NAMES[document["engine"]]
    lines = [f"# {name} configs for {document['deployment']} (flags as of: {document['engine_version_read']})"]
    lines += [f"# note: {one_line(n)}" for n in document["notes"]]
    for layout, configs in document["layouts"].items():
        for c in configs:
            lines += ["", f"# ===== {layout}: {c['role']} pool ====="]
            if c.get("yaml"):
                lines += ["# --- extra-llm-api-options.yaml ---", c["yaml"].rstrip("\n"), "# --- launch script ---"]
            lines.append(c["shell"].rstrip("\n"))
    for layout, text in (document.get("manifests") or {}).items():
        lines += ["", f"# ===== Kubernetes manifest: {layout} =====", text.rstrip("\n")]
    return "\n".join(lines)


def check_from_args(args: argparse.Namespace, mapping: dict[str, str] | None = None) -> dict[str, Any]:
    """``check PLAN_JSON RESULTS... [--log LOG]``: plan vs measured as a JSON document."""

    plan_path = Path(args.plan)
    # bounded: size, integer length and nesting are checked while reading (ingest.documents)
    plan_doc = parse_json(read_capped(plan_path, "plan file"), plan_path.name)
    reference = read_plan_reference(plan_doc, plan_path.name)
    levels = read_results(args.results)
    notes = []
    for log_path in args.log or []:

        frame = load_logs([log_path], mapping).frame
        found = log_levels(frame, source=Path(log_path).name)
        if not found:
            notes.append(f"{Path(log_path).name} has no ttft_ms or tpot_ms column: no latencies of its own to compare")
        else:
            notes.append(f"{Path(log_path).name}: latencies of the fleet that served the log; the plan's figures are "
                         "for the planned fleet, so they agree only if that is the same fleet")
        levels.extend(found)
    if not levels:
        why = f" ({notes[0]})" if notes else ""
        raise ValueError(f"no measured levels{why}: give aiperf/guidellm result files and/or --log LOG with latencies")
    if reference.point_only:
        notes.append("the plan gives one point (its planned rate): only levels within 10% of that rate are compared; "
                     "a report bundle's plan.json or `config --json` carries the whole curve")
    return check_document(reference, levels, notes)
