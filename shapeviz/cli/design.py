"""``python -m shapeviz design LOG``: the cheapest fleet whose simulated per-product p90s meet every class.

``design_document(args, mapping)`` returns the stable JSON document: ``designs`` (best first) and ``baseline``
(the best single shared FCFS pool of one GPU type), each ``{fleet, cost_per_hour, gpus, products: {NAME:
{ttft_p90_ms, tpot_p90_ms, meets}}}``, where ``fleet`` is what ``simulate --fleet`` and ``config --fleet`` read.
"""
from __future__ import annotations

import argparse
from typing import Any

from shapeviz.fleet.design import DEFAULT_SEARCH_REQUESTS, design_fleet
from shapeviz.fleet.prices import gpu_prices, parse_prices
from shapeviz.cli.plan import slo_window_seconds
from shapeviz.cli.simulate import add_parallel_options, runner_from_args
from shapeviz.ingest import combine, load_log
from shapeviz.physics.catalogue import get_gpu, get_model
from shapeviz.physics.kv_pool import KVPool
from shapeviz.progress import Progress, silent
from shapeviz.serving.planner import WhatIf
from shapeviz.fleet.sizing import model_of_log, pair_classes
from shapeviz.physics import DEFAULT_TPOT_SLO_MS
from shapeviz.serving import DEFAULT_TTFT_SLO_MS
from shapeviz.serving.products import parse_slo

DEFAULT_GPUS = "h100-sxm,h200,b200,l40s"


def add_design_options(p: argparse.ArgumentParser) -> None:
    """The options of ``design``."""
    p.add_argument("logs", nargs="+", metavar="LOG")
    p.add_argument("--gpus", default=DEFAULT_GPUS, help=f"GPU types to choose from, comma-separated (default {DEFAULT_GPUS})")
    p.add_argument("--model", default=None,
                   help="the model every pool serves (default: the log's model column, as plan chooses it)")
    p.add_argument("--precision", choices=("bf16", "fp16", "fp8", "nvfp4", "fp4", "mxfp4"), default=None,
                   help="weights of every pool (default: the model's own checkpoint, as plan; FP8/FP4 are levers)")
    p.add_argument("--slo", action="append", metavar="PRODUCT=TTFT_MS:TPOT_MS",
                   help="a product's own SLO class at p90 (repeatable; '*' for every product); a product without "
                        "one is judged against --ttft-slo-ms/--tpot-slo-ms (the default class), as plan judges it")
    p.add_argument("--ttft-slo-ms", type=float, default=DEFAULT_TTFT_SLO_MS, help="the default class's TTFT at p90")
    p.add_argument("--tpot-slo-ms", type=float, default=DEFAULT_TPOT_SLO_MS, help="the default class's TPOT at p90")
    p.add_argument("--gpu-hour-usd", action="append", metavar="GPU=PRICE",
                   help="price per GPU-hour (repeatable); default: the dated table data/gpu_prices.csv")
    p.add_argument("--traffic", type=float, default=1.0, metavar="X", help="traffic multiplier")
    p.add_argument("--slo-window", default=None, metavar="DURATION",
                   help="the stretch of the log whose p90s must meet the classes, as plan judges it: its busiest "
                        "window of this length (seconds, or 90m, 1h; default 1h, the whole log when shorter)")
    p.add_argument("--search-requests", type=int, default=DEFAULT_SEARCH_REQUESTS, metavar="N",
                   help="requests of that window the search replays, its busiest N (default "
                        f"{DEFAULT_SEARCH_REQUESTS}); every design is then judged on the whole window")
    p.add_argument("--top", type=int, default=5, help="designs to report (default 5)")
    p.add_argument("--seed", type=int, default=1, help="seed of the re-seeded replay every design must pass too")
    # the KV pool as the engines set it (the same flags as plan/simulate/config)
    p.add_argument("--kv-cache-tokens", type=int, default=None, metavar="N",
                   help="KV pool per replica in tokens, for every pool the search tries (default: the capacity model's)")
    p.add_argument("--gpu-memory-utilization", type=float, default=None, metavar="F",
                   help="vLLM's share of each GPU's memory, in (0, 1]: the KV pool is what it leaves after weights "
                        "and runtime")
    p.add_argument("--serving-engine", choices=("vllm", "sglang", "trtllm"), default=None,
                   help="the engine every pool runs (default vllm, what config writes): its efficiency and sequence "
                        "cap on each GPU type; each pool of the design names it")
    add_parallel_options(p, "run the pools' sizing searches and the designs' check replays")


def design_document(args: argparse.Namespace, mapping: dict[str, str] | None = None,
                    progress: Progress = silent) -> dict[str, Any]:
    """The ``design`` JSON document for a log."""
    gpus = [get_gpu(g.strip()).id for g in str(args.gpus).split(",") if g.strip()]
    if not gpus:
        raise ValueError("--gpus needs at least one GPU type, e.g. --gpus h100,h200")
    if args.search_requests < 50:
        raise ValueError(f"--search-requests must be at least 50, got {args.search_requests}")
    if args.seed == 0:
        raise ValueError("--seed 0 is the log itself; the re-seeded replay needs another seed")
    kv = KVPool(args.kv_cache_tokens, args.gpu_memory_utilization)   # a bad value fails here, in one line
    prices, sources = gpu_prices(gpus, parse_prices(args.gpu_hour_usd))
    loaded = [load_log(path, mapping=mapping or None) for path in args.logs]
    log = loaded[0] if len(loaded) == 1 else combine(loaded)
    model = get_model(args.model if args.model else model_of_log(log.frame)[0])
    precision = args.precision or model.checkpoint_precision
    classes = pair_classes(log.frame, args.ttft_slo_ms, args.tpot_slo_ms, parse_slo(args.slo))
    with runner_from_args(args) as runner:
        doc = design_fleet(log.frame, classes, gpus=gpus, prices=prices, model=model.id, precision=precision,
                           whatif=WhatIf(traffic_multiplier=args.traffic), search_requests=args.search_requests,
                           slo_window_s=slo_window_seconds(args.slo_window),
                           top=args.top, check_seed=args.seed, progress=progress, kv_cache_tokens=kv.tokens,
                           gpu_memory_utilization=kv.gpu_memory_utilization, runner=runner,
                           serving_engine=args.serving_engine)
    return {"command": "design", **doc, "price_sources": sources,
            "workload": {"files": [str(p) for p in args.logs], "rows_kept": log.report.rows_kept}}


def _entry_lines(d: dict[str, Any]) -> list[str]:
    gpus = ", ".join(f"{n}× {g}" for g, n in d["gpus"].items())
    busy = ", ".join(f"{k} {v:.0%}" for k, v in (d.get("busy") or {}).items())
    lines = [f"${d['cost_per_hour']:,.2f}/h, {gpus}: {d['summary']}", f"  {d['why']}",
             f"  busy (share of time stepping, simulated): {busy}"]
    fewer = d.get("one_fewer")
    if fewer is not None:
        lines.append(f"  one fewer in {fewer['pool']} ({fewer['replicas']}): {fewer['verdict']}")
    for name, o in d["products"].items():
        tpot = o["tpot_p90_ms"]
        lines.append(f"  {name}: TTFT p90 {o['ttft_p90_ms']:,.0f} / {o['ttft_slo_ms']:,.0f} ms, TPOT p90 "
                     f"{'-' if tpot is None else f'{tpot:,.1f}'} / {o['tpot_slo_ms']:,.0f} ms "
                     f"{'ok' if o['meets'] else 'MISSES'}")
    return lines


def design_text(document: dict[str, Any]) -> str:
    """A short human summary of a ``design`` document."""
    d = document
    s = d["search"]
    lines = [f"fleet design: judged on {d['sized_on']['window']} ({s['judged_requests']:,} requests), as plan "
             f"judges; searched on its busiest {s['requests']:,} requests ({s['window_s']:,.0f} s); "
             f"{s['simulations']} simulations, {s['cpu_s']:,.1f} s CPU; classes at p90:"]
    for name, c in d["classes"].items():
        lines.append(f"  {name} ({c['corner']}): TTFT {c['ttft_ms']:,.0f} ms, TPOT {c['tpot_ms']:,.0f} ms")
    for i, e in enumerate(d["designs"], 1):
        lines.append(f"#{i} {e['family']}")
        lines.extend(_entry_lines(e))
    if d.get("note"):
        lines.append(d["note"])
    if d["baseline"] is not None:
        lines.append("baseline (one shared FCFS pool, one GPU type)")
        lines.extend(_entry_lines(d["baseline"]))
    else:
        lines.append("baseline: no single shared pool of one GPU type meets every class")
    lines.append("prices per GPU-hour: " + ", ".join(f"{g} ${p:,.2f}" for g, p in d["prices_usd_per_gpu_hour"].items())
                 + " (data/gpu_prices.csv unless set)")
    return "\n".join(lines)
