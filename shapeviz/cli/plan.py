"""``python -m shapeviz plan``: the capacity plan of a log (or of a fixed ``--isl/--osl`` shape) as JSON or text.

``plan_document(args, mapping)`` builds the stable JSON document; ``plan_text(document)`` is its short human
summary. Every user mistake is a ``ValueError`` with one line, which the command line turns into exit code 2.
"""
from __future__ import annotations

import argparse
from typing import Any

from shapeviz.fleet.speculative import speculative_deployment, speculative_effect
from shapeviz.ingest import combine, load_log
from shapeviz.physics.catalogue import get_gpu, get_model
from shapeviz.physics.kv_pool import KVPool, kv_pool_tokens, with_kv_pool
from shapeviz.physics.steps import (
    DEFAULT_TPOT_SLO_MS,
    Deployment,
    max_throughput,
    smallest_tp,
)
from shapeviz.fleet.routing import plan_with_router
from shapeviz.serving.planner import DEFAULT_TTFT_SLO_MS, WhatIf, Workload, plan
from shapeviz.serving.products import parse_slo, plan_products, resolve_classes
from shapeviz.workload.distributed import sketch_paths


def deployment_from_args(args: argparse.Namespace) -> tuple[Deployment, str]:
    """The replica the options describe, and where its TP came from (the user, or the smallest that fits)."""
    model, gpu = get_model(args.model), get_gpu(args.gpu)
    ep = getattr(args, "ep", None)
    adp = bool(getattr(args, "attention_dp", False))
    if ep is not None and ep < 1:
        raise ValueError(f"--ep must be at least 1, got {ep}")
    if args.tp is None:
        tp = smallest_tp(model, gpu, args.precision, args.kv_precision,
                         ep=ep if ep is not None else (None if adp else 1), attention_dp=adp)
        source = "smallest TP that fits the weights with room for KV"
    else:
        tp, source = args.tp, "set by user"
    layout_ep = ep if ep is not None else (tp if adp else 1)
    dep = Deployment(model, gpu, args.precision, args.kv_precision, tp, ep=layout_ep, attention_dp=adp)
    return with_kv_pool(dep, kv_pool_from_args(args)), source


def kv_pool_from_args(args: argparse.Namespace) -> KVPool:
    """The KV pool the options set (``--kv-cache-tokens``, ``--gpu-memory-utilization``), validated."""
    return KVPool(getattr(args, "kv_cache_tokens", None), getattr(args, "gpu_memory_utilization", None))



def speculative_from_args(dep: Deployment, workload: Workload, args: argparse.Namespace) -> Deployment:
    """The replica with the speculative decoding the options ask for (acceptance assumed from the workload's corners)."""
    spec = speculative_deployment(dep, workload, getattr(args, "speculative", "none"),
                                  getattr(args, "draft_tokens", None), getattr(args, "acceptance_length", None))
    # a draft takes its KV out of the pool: the pool the user set is sized again with the draft in it
    return spec if spec.speculative is None else with_kv_pool(spec, kv_pool_from_args(args))


def _workload(args: argparse.Namespace, mapping: dict[str, str] | None, dep: Deployment,
              frames: list | None = None) -> tuple[Workload, dict[str, Any]]:
    logs = list(getattr(args, "logs", None) or [])
    shape_given = args.isl is not None or args.osl is not None
    if logs and shape_given:
        raise ValueError("give either LOG files or --isl/--osl, not both")
    if shape_given:
        if args.isl is None or args.osl is None:
            raise ValueError("--isl and --osl go together: give both (e.g. --isl 2048 --osl 256)")
        if args.isl < 1 or args.osl < 1:
            raise ValueError(f"--isl and --osl must be at least 1 token, got {args.isl} and {args.osl}")
        best = float(max_throughput(dep, args.isl, args.osl))
        info: dict[str, Any] = {"source": "--isl/--osl", "isl": args.isl, "osl": args.osl,
                                "max_output_tokens_per_s": best,
                                "max_output_tokens_per_s_per_gpu": best / dep.tp}
        if args.rate is not None:
            return Workload.fixed(args.isl, args.osl, rate_rps=args.rate, rate_source="set by user",
                                  rate_note="request rate set by the user (--rate)"), info
        if best <= 0:
            raise ValueError(
                f"one {args.isl + args.osl}-token request does not fit the KV pool of {dep.describe()}: raise --tp"
            )
        rate = best / args.osl
        return Workload.fixed(args.isl, args.osl, rate_rps=rate, rate_source="assumed", rate_note=(
            f"no --rate: planned at one replica's offline max throughput for this shape ({rate:,.3g} req/s = "
            f"{best:,.0f} output tok/s / {args.osl} tokens); set --rate for your traffic")), info
    if not logs:
        raise ValueError("give a LOG file to plan for, or a fixed shape with --isl N --osl M")
    if getattr(args, "engine", "embedded") == "dask":
        # logs beyond one machine: the workload sketch, built on a Dask cluster (shapeviz.workload.distributed)

        sketch = sketch_paths(logs, mapping=mapping or None, scheduler=args.scheduler, workers=args.workers)
        workload, report = Workload.from_view(sketch, rate_rps=args.rate), sketch.report
    else:

        loaded = [load_log(path, mapping=mapping or None) for path in logs]
        log = loaded[0] if len(loaded) == 1 else combine(loaded)
        workload = Workload.from_frame(log.frame, rate_rps=args.rate)
        report = log.report
        if frames is not None:   # the rows, for what needs them (the router's simulated reuse)
            frames.append(log.frame)
    info = {"source": "log", "files": [str(p) for p in logs], "rows_read": report.rows_read,
            "rows_kept": report.rows_kept, "dropped": dict(report.dropped)}
    return workload, info


def plan_document(args: argparse.Namespace, mapping: dict[str, str] | None = None) -> dict[str, Any]:
    """The ``plan`` JSON document: deployment, workload, max throughput, phases, TTFT/TPOT, GPUs, cost, assumptions."""
    dep, tp_source = deployment_from_args(args)
    whatif = WhatIf(args.trim_input, args.trim_output, args.cache_hit, args.traffic)
    frames: list = []
    overrides = parse_slo(getattr(args, "slo", None))
    workload, info = _workload(args, mapping, dep, frames)
    if overrides and not frames:
        raise ValueError("--slo names products of a LOG read row by row; a fixed --isl/--osl shape or a --engine dask "
                         "sketch has one SLO (--ttft-slo-ms/--tpot-slo-ms)")
    classes = resolve_classes(frames[0], overrides) if frames else None
    dep = speculative_from_args(dep, workload, args)
    ttft_slo = DEFAULT_TTFT_SLO_MS if args.ttft_slo_ms is None else args.ttft_slo_ms
    tpot_slo = DEFAULT_TPOT_SLO_MS if args.tpot_slo_ms is None else args.tpot_slo_ms
    routed = None
    if getattr(args, "router", None):
        planned, routed = plan_with_router(workload, frames[0] if frames else None, dep, args.router, whatif,
                                           ttft_slo, tpot_slo, args.gpu_hour_usd, block_size=args.block_size)
    else:
        planned = plan(workload, dep, whatif, ttft_slo, tpot_slo, args.gpu_hour_usd)
    result = planned.to_dict()
    effect = (None if dep.speculative is None
              else speculative_effect(workload, dep, whatif, ttft_slo, tpot_slo, args.gpu_hour_usd))
    result["assumptions"]["tp_source"] = tp_source
    result["assumptions"]["slo"]["source"] = (
        "set by user" if args.ttft_slo_ms is not None and args.tpot_slo_ms is not None
        else f"shapeviz defaults where not set (TTFT {DEFAULT_TTFT_SLO_MS:g} ms, TPOT {DEFAULT_TPOT_SLO_MS:g} ms at p90)"
    )
    document: dict[str, Any] = {
        "command": "plan",
        "deployment_detail": {
            "model": dep.model.id, "gpu": dep.gpu.id, "precision": dep.precision, "kv_precision": dep.kv_precision,
            "tp": dep.tp, "ep": dep.ep, "attention_dp": dep.attention_dp, "layout": dep.layout,
            "compute_precision": dep.compute_precision,
            "weights_gib_per_gpu": dep.weight_bytes_per_gpu / 2**30,
            "expert_weights_gib_per_gpu": dep.expert_weight_bytes / dep.tp / 2**30,
            "kv_pool_gib_per_gpu": dep.kv_pool_bytes_per_gpu() / 2**30,
            "kv_pool_tokens_per_replica": kv_pool_tokens(dep),
            "kv_pool_source": dep.eff.sources.get("kv_fraction_serving", ""),
            "kv_bytes_per_token": dep.kv_bytes_per_token,
        },
        "workload": {
            **info,
            "requests": workload.n_requests,
            "points": int(workload.weight.size),
            "mean_input_tokens": workload.mean_input,
            "mean_output_tokens": workload.mean_output,
            "mean_cached_tokens": workload.mean_cached,
            "rate_rps": workload.rate_rps,
            "rate_source": workload.rate_source,
            "rate_note": workload.rate_note,
        },
        "max_output_tokens_per_s": info.get("max_output_tokens_per_s"),
        "slo": {"ttft_p90_ms": ttft_slo, "tpot_p90_ms": tpot_slo},
    }
    document.update(result)
    # with the lever: what it buys at the planned load and where it stops paying (None without it)
    document["speculative"] = None if effect is None else effect.to_dict()
    if effect is not None:
        document["speculative"]["summary"] = effect.citation()
    if routed is not None:
        document["prefix"] = routed
        document["notes"] = [*document.get("notes", []), routed["note"]]
    if classes is not None:
        # judged on the fleet the plan bought (with the what-if the plan used, the router's reuse included)
        used = WhatIf(**result["assumptions"]["whatif"])
        products = plan_products(frames[0], workload, dep, used, planned.replicas, classes, tpot_slo)
        document["products"] = products
        document["notes"] = [*document.get("notes", []), _products_note(products, planned.replicas)]
    return document


def _products_note(products: dict[str, Any], replicas: int | None) -> str:
    """Where the per-product figures come from, and which products miss their own class."""
    missing = [name for name, o in products.items() if not o["meets"]]
    return (f"each product is judged against its own SLO class on the planned {replicas or 0} shared replica(s), "
            "analytically (its own prefill times in the whole fleet's queue and decode batch; TPOT is the shared "
            "batch's, so the same for every product); `simulate --slo` replays the log as the check"
            + (f"; missing their class: {', '.join(missing)}" if missing else ""))


def _ms(value: float | None) -> str:
    return "saturated" if value is None else f"{value:,.0f} ms" if value >= 10 else f"{value:,.1f} ms"


def plan_text(document: dict[str, Any]) -> str:
    """A short human summary of a ``plan`` document."""
    d = document
    w, g, c = d["workload"], d["gpus"], d["cost"]
    lines = [d["deployment"]]
    if w["source"] == "log":
        lines.append(f"workload: {w['requests']:,} requests, mean {w['mean_input_tokens']:,.0f} in / "
                     f"{w['mean_output_tokens']:,.0f} out tokens ({w['mean_cached_tokens']:,.0f} cached)")
    else:
        lines.append(f"workload: every request {w['isl']:,} in / {w['osl']:,} out tokens")
    lines.append(f"rate: {d['rate_rps']:,.3g} req/s ({w['rate_source']}: {w['rate_note']})")
    if d.get("max_output_tokens_per_s") is not None:
        lines.append(f"offline max throughput of one replica: {d['max_output_tokens_per_s']:,.0f} output tok/s "
                     f"({w['max_output_tokens_per_s_per_gpu']:,.0f} per GPU)")
    p, q = d["prefill"], d["decode"]
    lines.append(f"prefill: {p['demand_tokens_per_s']:,.0f} tok/s, pressure {p['utilization']:.0%} | "
                 f"decode: {q['demand_tokens_per_s']:,.0f} tok/s, pressure {q['utilization']:.0%} | "
                 f"dominant: {d['dominant_phase']}")
    lines.append(f"TTFT p50/p90: {_ms(d['ttft_ms']['p50'])} / {_ms(d['ttft_ms']['p90'])} (SLO {d['slo']['ttft_p90_ms']:,.0f}) | "
                 f"TPOT p50/p90: {_ms(d['tpot_ms']['p50'])} / {_ms(d['tpot_ms']['p90'])} (SLO {d['slo']['tpot_p90_ms']:,.0f})")
    tp = d["deployment_detail"]["tp"]
    layout = d["deployment_detail"].get("layout", f"TP{tp}")
    colocated = "n/a" if g["colocated"] is None else f"{g['colocated']} ({d['replicas']} × {layout})"
    split = ("n/a" if g["disaggregated"] is None
             else f"{g['prefill']} prefill + {g['decode']} decode = {g['disaggregated']}")
    lines.append(f"GPUs: colocated {colocated}; disaggregated {split}")
    if c.get("usd_per_hour") is not None:
        per_m = c.get("usd_per_million_tokens")
        per_out = c.get("usd_per_million_output_tokens")
        lines.append(f"cost: ${c['usd_per_hour']:,.2f}/h colocated"
                     + (f", ${per_m:,.3f} per 1M tokens" if per_m is not None else "")
                     + (f", ${per_out:,.2f} per 1M output tokens" if per_out is not None else "")
                     + f" at ${c['usd_per_gpu_hour']:,.2f}/GPU-hour ({d['assumptions']['price_source']})")
    if d.get("speculative"):
        lines.append(d["speculative"]["summary"])
    lines.append("SLOs met" if d["meets_slo"] else "SLOs NOT met")
    if d.get("products"):
        lines.append("products, each against its own SLO class (analytic):")
        lines.extend(product_plan_lines(d["products"]))
    lines.extend(f"note: {n}" for n in d.get("notes", []))
    return "\n".join(lines)


def product_plan_lines(products: dict[str, Any]) -> list[str]:
    """One line per product of a ``plan`` document: its p90s on the planned fleet against its own class."""
    lines = []
    for name, o in products.items():
        cls = o["class"]
        q = cls["percentile"]
        ttft, tpot = o.get(f"ttft_p{q}_ms"), o.get(f"tpot_p{q}_ms")
        lines.append(f"  {name} ({cls.get('corner')}, {o['requests']:,} requests): TTFT p{q} {_ms(ttft)} / "
                     f"{cls['ttft_ms']:,.0f} ms, TPOT p{q} {_ms(tpot)} / {cls['tpot_ms']:,.0f} ms: "
                     f"{'meets' if o['meets'] else 'MISSES'} its class")
    return lines
