"""``python -m shapeviz simulate``: replay a log (or a fixed ``--isl/--osl`` shape) on a fleet, as JSON or text.

``simulate_document(args, mapping)`` runs the simulator and returns the stable JSON document (``method``,
``requests``, ``ttft_ms``/``tpot_ms``/``e2e_ms`` each ``{mean, p50, p90, p99}``, ``throughput``, ``goodput``,
``utilization``, ``saturated``); ``simulate_text`` is its short human summary.
"""
from __future__ import annotations

import argparse
from dataclasses import replace
from typing import Any

from shapeviz.cli.plan import deployment_from_args, engine_detail, speculative_from_args
from shapeviz.fleet.pools import (
    fleet_document,
    fleet_requests,
    load_fleet,
    simulate_fleet,
)
from shapeviz.fleet.prices import gpu_prices
from shapeviz.fleet.sizing import pair_classes
from shapeviz.ingest import combine, load_log
from shapeviz.physics.engines import ENGINE_NAMES
from shapeviz.physics.steps import DEFAULT_TPOT_SLO_MS
from shapeviz.serving.parallel import ENGINES, Runner
from shapeviz.serving.planner import DEFAULT_TTFT_SLO_MS, WhatIf, Workload, plan
from shapeviz.serving.products import (
    parse_slo,
    product_outcomes,
    resolve_classes,
    ttft_targets_ms,
)
from shapeviz.serving.sim_calibrate import fit_to_log
from shapeviz.serving.stages import stage_table
from shapeviz.serving.simulator import (
    SCHEDULERS,
    fixed_requests,
    requests_from_frame,
    simulate,
)

DEFAULT_FIXED_REQUESTS = 500  # the published online-serving runs' size


def add_parallel_options(p: argparse.ArgumentParser, what: str) -> None:
    """``--workers``, ``--engine`` and ``--dask-scheduler``: where independent replays run (``serving.parallel``).

    Not ``--scheduler``: on ``simulate`` that is the batch scheduling policy (fcfs, priority, deadline).
    """
    g = p.add_argument_group("independent replays side by side")
    g.add_argument("--workers", type=int, default=None, metavar="N",
                   help=f"{what} in N local processes (default 1: this process); with --engine dask, the local "
                        "cluster's worker processes (default 2)")
    g.add_argument("--engine", choices=ENGINES, default="embedded",
                   help="embedded: this machine (default); dask: a Dask LocalCluster, or the cluster of "
                        "--dask-scheduler")
    g.add_argument("--dask-scheduler", default=None, metavar="ADDRESS",
                   help=f"{what} on an existing Dask cluster (tcp://host:8786; implies --engine dask; its workers "
                        "need shapeviz installed)")


def runner_from_args(args: argparse.Namespace) -> Runner:
    """The ``Runner`` the parallel options ask for (one process, local processes, a LocalCluster or a cluster)."""
    workers = getattr(args, "workers", None)
    if workers is not None and workers < 1:
        raise ValueError(f"--workers must be at least 1, got {workers}")
    engine = getattr(args, "engine", "embedded")
    address = getattr(args, "dask_scheduler", None)
    return Runner(workers or (None if engine == "dask" or address else 1), engine, address)


def check_parallel_options(args: argparse.Namespace) -> None:
    """The parallel options of ``simulate`` run a fleet's pools side by side: refuse them where nothing would."""
    asked = [f for f, v in (("--workers", args.workers), ("--engine dask", args.engine == "dask"),
                            ("--dask-scheduler", args.dask_scheduler)) if v]
    if asked and not getattr(args, "fleet", None):
        raise ValueError(f"{', '.join(asked)} run(s) a fleet's pools side by side: give --fleet FLEET.json "
                         "(one replay has nothing to split)")


def add_simulate_options(p: argparse.ArgumentParser) -> None:
    """The options ``simulate`` adds to the shared plan options."""
    p.add_argument("--concurrency", type=int, default=None, help="closed loop of C clients instead of a rate")
    p.add_argument("--all-at-once", action="store_true",
                   help="offer every request at time 0 (a batch job, MLPerf's Offline); --replicas defaults to 1")
    p.add_argument("--replicas", type=int, default=None,
                   help="colocated replicas (default: the plan's for a log, 1 for --isl/--osl)")
    p.add_argument("--requests", type=int, default=None, help="simulate only the first N arrivals")
    p.add_argument("--duration", type=float, default=None, metavar="S", help="simulate arrivals within S seconds")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--scheduler", choices=SCHEDULERS, default="fcfs", help="priority: shortest prompt first; deadline: earliest TTFT deadline first (arrival + the product's class TTFT)")
    p.add_argument("--disaggregate", default=None, metavar="P:D", help="P prefill and D decode replicas")
    p.add_argument("--max-num-seqs", type=int, default=None, help="engine cap on running sequences")
    p.add_argument("--max-num-batched-tokens", type=int, default=8192, help="token budget per iteration")
    p.add_argument("--chunked-prefill", choices=("on", "off"), default="on",
                   help="off: whole prompts only, as TensorRT-LLM without context chunking (default on, as vLLM)")
    p.add_argument("--slo", action="append", metavar="PRODUCT=TTFT_MS:TPOT_MS",
                   help="a product's own SLO class at p90 (repeatable; PRODUCT '*' sets every product); default: "
                        "its corner's published range (data/slo_ranges.csv, upper end)")
    p.add_argument("--fleet", default=None, metavar="FLEET.json",
                   help="replay the log on a fleet of pools (the `design --json` fleet object, JSON or YAML)")
    p.add_argument("--calibrate-to-log", action="store_true",
                   help="fit the fleet's speed to the log's own ttft_ms/tpot_ms (or e2e_ms) on --replicas "
                        "(today's fleet), then simulate with that correction")
    add_parallel_options(p, "with --fleet: replay the pools")


def _load(logs: list[str], mapping: dict[str, str] | None) -> Any:
    loaded = [load_log(path, mapping=mapping or None) for path in logs]
    return loaded[0] if len(loaded) == 1 else combine(loaded)


def fleet_simulate_document(args: argparse.Namespace, mapping: dict[str, str] | None = None) -> dict[str, Any]:
    """``simulate --fleet``: the log replayed on every pool of a fleet file, each product against its class."""
    logs = list(getattr(args, "logs", None) or [])
    if not logs:
        raise ValueError("--fleet replays a LOG: give the log file(s) too")
    for flag in ("replicas", "disaggregate", "concurrency", "isl", "osl"):
        if getattr(args, flag, None) is not None:
            raise ValueError(f"--{flag} does not go with --fleet: the fleet file sets its pools")
    fleet = load_fleet(args.fleet)
    log = _load(logs, mapping)
    whatif = WhatIf(args.trim_input, args.trim_output, args.cache_hit, args.traffic)
    overrides = {**dict(fleet.slo), **parse_slo(args.slo)}
    classes = resolve_classes(log.frame, overrides, source="set by user (fleet file or --slo)")
    with runner_from_args(args) as runner:
        result = simulate_fleet(fleet_requests(log.frame, whatif, seed=args.seed, rate_rps=args.rate), fleet, classes,
                                runner=runner)
    prices, sources = gpu_prices(sorted(result.gpus))
    document: dict[str, Any] = {"command": "simulate", **fleet_document(result, prices)}
    document["prices_usd_per_gpu_hour"] = prices
    document["price_sources"] = sources
    document["workload"] = {"source": "log", "files": [str(p) for p in logs], "rows_kept": log.report.rows_kept,
                            "seed": args.seed}
    return document


def simulate_document(args: argparse.Namespace, mapping: dict[str, str] | None = None) -> dict[str, Any]:
    """The ``simulate`` JSON document for a log or a fixed shape (``products``: each product against its class)."""
    if getattr(args, "fleet", None):
        return fleet_simulate_document(args, mapping)
    if args.rate is not None and args.concurrency is not None:
        raise ValueError("give either --rate or --concurrency, not both")
    if args.concurrency is not None and args.concurrency < 1:
        raise ValueError(f"--concurrency must be ≥ 1, got {args.concurrency}")
    if args.replicas is not None and args.replicas < 1:
        raise ValueError(f"--replicas must be ≥ 1, got {args.replicas}")
    all_at_once = bool(getattr(args, "all_at_once", False))
    if all_at_once and (args.rate is not None or args.concurrency is not None or args.duration is not None
                        or args.disaggregate is not None):
        raise ValueError("--all-at-once offers every request at time 0: give no --rate, --concurrency, --duration "
                         "or --disaggregate")
    dep, tp_source = deployment_from_args(args)
    whatif = WhatIf(args.trim_input, args.trim_output, args.cache_hit, args.traffic)
    ttft_slo = DEFAULT_TTFT_SLO_MS if args.ttft_slo_ms is None else args.ttft_slo_ms
    tpot_slo = DEFAULT_TPOT_SLO_MS if args.tpot_slo_ms is None else args.tpot_slo_ms
    logs = list(getattr(args, "logs", None) or [])
    shape_given = args.isl is not None or args.osl is not None
    if logs and shape_given:
        raise ValueError("give either LOG files or --isl/--osl, not both")
    replicas = args.replicas
    replicas_source = "set by user"
    rate = args.rate
    if shape_given:
        if args.isl is None or args.osl is None:
            raise ValueError("--isl and --osl go together: give both (e.g. --isl 2048 --osl 256)")
        if rate is None and args.concurrency is None and not all_at_once:
            raise ValueError("a fixed shape needs a load: --rate R (req/s), --concurrency C or --all-at-once")
        n = args.requests or (max(DEFAULT_FIXED_REQUESTS, 8 * args.concurrency) if args.concurrency
                              else DEFAULT_FIXED_REQUESTS)
        source: Any = fixed_requests(args.isl, args.osl, n)
        dep = speculative_from_args(dep, Workload.fixed(args.isl, args.osl, rate_rps=rate or 1.0), args)
        if whatif.traffic_multiplier != 1 and rate is not None:
            rate *= whatif.traffic_multiplier
        info: dict[str, Any] = {"source": "--isl/--osl", "isl": args.isl, "osl": args.osl}
        if replicas is None:
            replicas, replicas_source = 1, "default for a fixed shape"
    else:
        if not logs:
            raise ValueError("give a LOG file to simulate, or a fixed shape with --isl N --osl M")

        log = _load(logs, mapping)
        source = log.frame
        info = {"source": "log", "files": [str(p) for p in logs], "rows_kept": log.report.rows_kept}
        dep = speculative_from_args(dep, Workload.from_frame(source, rate_rps=1.0), args)
        has_time = "timestamp" in source.columns and source["timestamp"].notna().sum() >= 2
        if all_at_once:
            if replicas is None:   # a batch job's fleet is plan --deadline's answer, not the latency plan's
                replicas, replicas_source = 1, "default for --all-at-once (plan --deadline sizes a batch job)"
        elif rate is None and args.concurrency is None and not has_time:
            workload = Workload.from_frame(source)
            rate = workload.rate_rps * whatif.traffic_multiplier
            info["rate_note"] = workload.rate_note
        elif rate is not None:
            rate *= whatif.traffic_multiplier
        if replicas is None and args.disaggregate is None:
            planned = plan(Workload.from_frame(source, rate_rps=args.rate), dep, whatif, ttft_slo, tpot_slo)
            replicas, replicas_source = planned.replicas or 1, "the analytic plan's colocated replicas"
    calibration = None
    if getattr(args, "calibrate_to_log", False):
        if shape_given:
            raise ValueError("--calibrate-to-log needs a LOG with measured latencies, not --isl/--osl")
        if args.replicas is None:
            raise ValueError("--calibrate-to-log needs today's fleet: give --replicas N (and --gpu, --tp, --model)")

        calibration = fit_to_log(source, dep, args.replicas, requests=args.requests or 1500)
        dep = calibration.deployment
    classes = None
    if not shape_given:
        # each product's class as plan judges it: its own --slo, else the TTFT/TPOT pair (the default class)
        classes = pair_classes(source, ttft_slo, tpot_slo, parse_slo(getattr(args, "slo", None)))
        # each request carries its product's TTFT target: the deadline scheduler orders by it
        req = requests_from_frame(source, whatif, block_size=args.block_size)
        source = replace(req, ttft_target_ms=ttft_targets_ms(req.product, classes, ttft_slo))
    elif getattr(args, "slo", None):
        raise ValueError("--slo names products of a LOG; a fixed --isl/--osl shape has one SLO (--ttft-slo-ms)")
    result = simulate(
        source, dep, rate_rps=rate, concurrency=args.concurrency, replicas=replicas or 1,
        requests=args.requests, duration_s=args.duration, seed=args.seed, scheduler=args.scheduler,
        router=args.router or "round_robin", disaggregate=args.disaggregate, max_num_seqs=args.max_num_seqs,
        max_num_batched_tokens=args.max_num_batched_tokens, whatif=whatif,
        chunked_prefill=args.chunked_prefill == "on",
        ttft_slo_ms=ttft_slo, tpot_slo_ms=tpot_slo, block_size=args.block_size,
        admission=getattr(args, "admission", None), all_at_once=all_at_once,
    )
    document: dict[str, Any] = {"command": "simulate", **result.summary()}
    # a log whose rate moves in stages (a load test) is reported stage by stage, beside a benchmark's table
    document["stages"] = stage_table(result.requests, ttft_slo, tpot_slo) if result.offered_rps is not None else []
    if classes is not None:
        document["products"] = product_outcomes(result.requests, classes)
    document["settings"]["tp_source"] = tp_source
    document["settings"].update(engine_detail(dep, args))
    document["settings"]["max_num_seqs_source"] = ("set by user" if args.max_num_seqs is not None
                                                   else "the engine's default (engine_max_num_seqs_source)")
    document["settings"]["kv_pool_source"] = dep.eff.sources.get("kv_fraction_serving", "")
    document["settings"]["speculative"] = None if dep.speculative is None else dep.speculative.to_dict()
    document["settings"]["replicas_source"] = replicas_source if args.disaggregate is None else "--disaggregate"
    document["workload"] = info
    if calibration is not None:
        document["calibration"] = {
            "label": calibration.label, "compute_scale": calibration.compute_scale,
            "memory_scale": calibration.memory_scale, "fitted_to": list(calibration.fitted_to),
            "before": calibration.before.to_dict(orient="records"),
            "after": calibration.after.to_dict(orient="records"),
        }
        document["settings"]["efficiency"] = calibration.describe()
    return document


def _ms(stats: dict[str, Any], key: str) -> str:
    v = stats.get(key)
    return "-" if v is None else f"{v:,.0f}" if v >= 10 else f"{v:,.1f}"


def product_lines(products: dict[str, Any]) -> list[str]:
    """One line per product: its p90s against its own class, attainment and goodput."""
    lines = []
    for name, o in products.items():
        slo = o.get("slo")
        if not slo:
            continue
        tpot = o.get("tpot_p90_ms")
        lines.append(f"  {name} ({slo.get('corner')}): TTFT p90 {o['ttft_p90_ms']:,.0f} / {slo['ttft_ms']:,.0f} ms, "
                     f"TPOT p90 {'-' if tpot is None else f'{tpot:,.1f}'} / {slo['tpot_ms']:,.0f} ms: "
                     f"{'meets' if o['meets'] else 'MISSES'} its class; {o['attainment']:.0%} of its requests within "
                     f"both, goodput {o['goodput_rps'] or 0:,.3g} req/s")
    return lines


def stage_lines(stages: list[dict[str, Any]]) -> list[str]:
    """One line per stage of a ``simulate`` document: span, offered rate, TTFT/TPOT p50/p90, goodput."""
    lines = []
    for st in stages:
        ttft = f"{_ms({'v': st['ttft_p50_ms']}, 'v')}/{_ms({'v': st['ttft_p90_ms']}, 'v')}"
        tpot = f"{_ms({'v': st['tpot_p50_ms']}, 'v')}/{_ms({'v': st['tpot_p90_ms']}, 'v')}"
        good = "-" if st["goodput"] is None else f"{st['goodput']:.0%}"
        lines.append(f"  stage {st['stage']}: {st['start_s']:,.0f}-{st['end_s']:,.0f} s, {st['rate_rps']:,.3g} req/s, "
                     f"{st['requests']:,} requests: TTFT p50/p90 {ttft} ms, TPOT p50/p90 {tpot} ms, goodput {good}"
                     + (" SATURATED" if st["saturated"] else ""))
    return lines


def fleet_text(document: dict[str, Any]) -> str:
    """A short human summary of a ``simulate --fleet`` document."""
    d = document
    gpus = ", ".join(f"{n}× {g}" for g, n in d["gpus"].items())
    cost = d.get("cost_per_hour")
    lines = [f"simulated fleet: {len(d['pools'])} pool(s), {gpus}" + (f", ${cost:,.2f}/h" if cost is not None else "")
             + f"; {d['requests']:,} requests"]
    for p in d["pools"]:
        tpot = p["tpot_p90_ms"]
        lines.append(f"pool {p['name']}: {p['requests']:,} requests, TTFT p90 {p['ttft_p90_ms']:,.0f} ms, TPOT p90 "
                     f"{'-' if tpot is None else f'{tpot:,.1f}'} ms" + (" SATURATED" if p["saturated"] else ""))
    lines.append("per product, against its own class (p90):")
    lines.extend(product_lines(d["products"]))
    lines.append("every product meets its class" if d["meets"] else "some product MISSES its class")
    return "\n".join(lines)


def simulate_text(document: dict[str, Any]) -> str:
    """A short human summary of a ``simulate`` document."""
    d = document
    if "pools" in d:
        return fleet_text(d)
    s = d["settings"]
    fleet = (f"{s['replicas']} replica(s)" if s.get("disaggregate") is None
             else f"{s['disaggregate'][0]} prefill + {s['disaggregate'][1]} decode replicas")
    load = (f"closed loop of {s['concurrency']} clients" if s["arrivals"] == "closed"
            else f"Poisson {s['rate_rps']:,.3g} req/s" if s["arrivals"] == "poisson"
            else f"every request at once, done in {d['makespan_s']:,.0f} s"
            if s["arrivals"] == "all_at_once" else "the log's own timestamps")
    method = d["method"] + (f", {d['calibration']['label']}" if "calibration" in d else "")
    lines = [f"{method}: {s['deployment']}, {fleet}, {load}, {d['requests']:,} requests"]
    if "calibration" in d:
        lines.append(s["efficiency"])
    if s.get("engine"):
        cap = ("set by user" if s.get("max_num_seqs_source") == "set by user"
               else "the engine's default" if s.get("max_num_seqs") == s.get("engine_max_num_seqs") else "")
        lines.append(f"serving engine: {ENGINE_NAMES[s['engine']]} ({s['engine_source']}), at most "
                     f"{s['max_num_seqs']:,} running sequences per replica" + (f" ({cap})" if cap else ""))
    if str(s.get("kv_pool_source", "")).startswith("set by user"):
        lines.append(f"KV pool: {s['kv_pool_tokens_per_replica']:,} tokens per replica ({s['kv_pool_source']})")
    for name in ("ttft_ms", "tpot_ms", "e2e_ms"):
        st = d[name]
        lines.append(f"{name[:-3].upper():5s} ms  mean {_ms(st, 'mean')}  p50 {_ms(st, 'p50')}  "
                     f"p90 {_ms(st, 'p90')}  p99 {_ms(st, 'p99')}")
    t = d["throughput"]
    lines.append(f"throughput: {t['requests_per_s']:,.3g} req/s, {t['output_tokens_per_s']:,.0f} output tok/s; "
                 f"goodput {d['goodput']:.0%} (TTFT ≤ {d['slo']['ttft_ms']:,.0f} ms and TPOT ≤ "
                 f"{d['slo']['tpot_ms']:,.0f} ms); busy {d['utilization']:.0%}")
    p = d.get("prefix") or {}
    if p.get("hit_ratio_tokens") is not None and p.get("source") != "none":
        source = {"block_hashes": "simulated per replica from the log's block hashes",
                  "sessions": "simulated per replica from sessions",
                  "reported_cached_tokens": "the log's reported cached tokens", "whatif": "the what-if share (assumed)",
                  "none": "none"}.get(p["source"], p["source"])
        evicted = "" if p.get("evicted_blocks") is None else f", {p['evicted_blocks']:,} blocks evicted"
        lines.append(f"prefix cache: {p['hit_ratio_tokens']:.1%} of prompt tokens, {p['hit_ratio_requests']:.0%} of "
                     f"requests hit ({source}; router {s['router']}{evicted})")
    if s["arrivals"] != "all_at_once":   # offered everything at once there is no rate to keep up with
        lines.append("SATURATED: the queue grows without bound at this load" if d["saturated"]
                     else "keeps up with the load")
    stages = d.get("stages") or []
    if len(stages) > 1:
        lines.append(f"per stage (the arrival rate moves: {len(stages)} stages found from the arrivals):")
        lines.extend(stage_lines(stages))
    if d.get("products"):
        lines.append("per product, against its own class (p90):")
        lines.extend(product_lines(d["products"]))
    lines.extend(f"note: {n}" for n in d.get("notes", []))
    return "\n".join(lines)
