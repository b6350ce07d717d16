"""``plan --autoscale POLICY`` / ``simulate --autoscale POLICY`` / ``plan --growth``: the fleet over time.

``fleet_document(args, mapping, command)`` builds the stable JSON document (``windows``: ``[{start, rate_rps,
replicas, ttft_p90_ms, tpot_p90_ms, attainment}]``, ``gpu_hours``, ``cost``, ``baseline_gpu_hours``, plus the
policy, the scale-up delay with its sources, every policy side by side and, with ``--growth``, the months ahead);
``fleet_text(document)`` is its short human summary.
"""
from __future__ import annotations

import argparse
from typing import Any

POLICY_CHOICES = ("peak", "utilization", "slo", "schedule", "queue")


def add_fleet_options(p: argparse.ArgumentParser, simulate: bool = False) -> None:
    """The autoscaling and growth options of ``plan`` and ``simulate``."""
    g = p.add_argument_group("the fleet over time (autoscaling, growth)")
    g.add_argument("--autoscale", choices=POLICY_CHOICES, default=None, metavar="POLICY",
                   help="replicas per window and the cost of an autoscaling policy: peak (hold at peak), "
                        "utilization (target utilisation), slo (predicted SLO attainment), schedule (per hour of day), "
                        "queue (queue depth per replica with hysteresis, as KEDA/HPA on the engine's waiting gauge)")
    g.add_argument("--window-min", type=int, default=None, metavar="N",
                   help="window length in minutes (default 5; 60 for logs longer than two days)")
    g.add_argument("--storage-gbps", type=float, default=None, metavar="GB/S",
                   help="weight read rate of a starting replica (default: data/autoscaling.json)")
    g.add_argument("--engine-start-s", type=float, default=None, metavar="S",
                   help="engine start and warm-up after the weights are read (default: data/autoscaling.json)")
    g.add_argument("--cooloff-s", type=float, default=None, metavar="S", help="scale-down cool-off")
    g.add_argument("--min-replicas", type=int, default=None, metavar="N")
    g.add_argument("--target-utilization", type=float, default=None, metavar="F",
                   help="the utilisation policy's target (0-1)")
    g.add_argument("--max-replicas", type=int, default=None, metavar="N",
                   help="ceiling every policy respects (default: the busiest window's need); clipped windows are listed")
    g.add_argument("--initial-replicas", type=int, default=None, metavar="N",
                   help="replicas serving at the log's start (default: the first minute's need)")
    g.add_argument("--scale-down-per-min", type=int, default=None, metavar="N",
                   help="drain at most N replicas a minute after the cool-off (default: all at once)")
    g.add_argument("--queue-up", type=float, default=None, metavar="Q",
                   help="queue policy: waiting requests per serving replica that scale up (default: data/autoscaling.json)")
    g.add_argument("--queue-down", type=float, default=None, metavar="Q",
                   help="queue policy: below this for the cool-off, scale down (default: data/autoscaling.json)")
    if not simulate:
        g.add_argument("--growth", action="append", default=None, metavar="PRODUCT=RATE",
                       help="monthly request growth (chat=0.08, agent=20%%; a bare rate for every product)")
        g.add_argument("--output-growth", action="append", default=None, metavar="PRODUCT=RATE",
                       help="monthly growth of the output length (reasoning=0.05)")
        g.add_argument("--months", type=int, default=3, help="growth horizon in months (default 3)")
        g.add_argument("--replicas-now", type=int, default=None, metavar="N",
                       help="the pool's replicas today (default: today's plan), for when it runs out of headroom")


def wants_fleet(args: argparse.Namespace) -> bool:
    """True when the command asked for the fleet over time."""
    return bool(getattr(args, "autoscale", None) or getattr(args, "growth", None)
                or getattr(args, "output_growth", None))


def _source(args: argparse.Namespace, mapping: dict[str, str] | None) -> Any:
    """The log as a frame (embedded engine) or a sketch (Dask)."""
    logs = list(getattr(args, "logs", None) or [])
    if not logs or args.isl is not None or args.osl is not None:
        raise ValueError("the fleet over time needs a LOG with timestamps (not --isl/--osl)")
    if getattr(args, "engine", "embedded") == "dask":
        from shapeviz.workload.distributed import sketch_paths

        return sketch_paths(logs, mapping=mapping or None, scheduler=args.scheduler, workers=args.workers)
    from shapeviz.ingest import combine, load_log

    loaded = [load_log(path, mapping=mapping or None) for path in logs]
    return (loaded[0] if len(loaded) == 1 else combine(loaded)).frame


def fleet_document(args: argparse.Namespace, mapping: dict[str, str] | None = None,
                   command: str = "plan") -> dict[str, Any]:
    """The JSON document of ``plan --autoscale`` / ``plan --growth`` / ``simulate --autoscale``."""
    import pandas as pd

    from shapeviz.cli.plan import deployment_from_args, resolve_model
    from shapeviz.fleet.autoscale import (
        Policy,
        compare_policies,
        simulate_autoscale,
        sized_by_simulation,
        startup,
        traffic_windows,
    )
    from shapeviz.fleet.growth import Growth, parse_growth, project
    from shapeviz.fleet.sizing import pair_classes
    from shapeviz.physics.steps import DEFAULT_TPOT_SLO_MS
    from shapeviz.serving.planner import DEFAULT_TTFT_SLO_MS, WhatIf
    from shapeviz.serving.products import parse_slo

    whatif = WhatIf(args.trim_input, args.trim_output, args.cache_hit, args.traffic)
    ttft = DEFAULT_TTFT_SLO_MS if args.ttft_slo_ms is None else args.ttft_slo_ms
    tpot = DEFAULT_TPOT_SLO_MS if args.tpot_slo_ms is None else args.tpot_slo_ms
    if args.window_min is not None and args.window_min < 1:
        raise ValueError(f"--window-min must be at least 1 minute, got {args.window_min}")
    source = _source(args, mapping)
    # the model the log's model column names, as plan reads it (the deployment plan prints)
    model_id, _ = resolve_model(args, source if isinstance(source, pd.DataFrame) else None)
    dep, tp_source = deployment_from_args(args, model_id, source if isinstance(source, pd.DataFrame) else None)
    document: dict[str, Any] = {"command": command, "deployment": dep.describe(), "tp_source": tp_source,
                                "slo": {"ttft_p90_ms": ttft, "tpot_p90_ms": tpot}}
    overrides = parse_slo(getattr(args, "slo", None))
    if args.autoscale:
        if overrides and not isinstance(source, pd.DataFrame):
            raise ValueError("--slo names products of a LOG read row by row; a --engine dask sketch has one SLO "
                             "(--ttft-slo-ms/--tpot-slo-ms)")
        classes = pair_classes(source, ttft, tpot, overrides) if overrides else None
        if classes:
            document["slo_classes"] = {name: c.to_dict() for name, c in classes.items()}
        tw = traffic_windows(source, dep, window_s=None if args.window_min is None else 60.0 * args.window_min,
                             whatif=whatif, ttft_slo_ms=ttft, tpot_slo_ms=tpot, gpu_hour_usd=args.gpu_hour_usd,
                             classes=classes)
        if getattr(args, "method", "simulated") == "simulated" and isinstance(source, pd.DataFrame):
            tw = sized_by_simulation(source, tw, whatif=whatif, router=getattr(args, "router", None) or "round_robin",
                                     block_size=getattr(args, "block_size", None))
        document["windows_sized_by"] = tw.sized_by
        start = startup(dep, args.storage_gbps, args.engine_start_s)
        knobs = {"target_utilization": args.target_utilization, "cooloff_s": args.cooloff_s,
                 "min_replicas": args.min_replicas, "max_replicas": args.max_replicas,
                 "initial_replicas": args.initial_replicas, "scale_down_per_min": args.scale_down_per_min,
                 "queue_up": args.queue_up, "queue_down": args.queue_down}
        policy = Policy(args.autoscale, **knobs)
        if command == "simulate":
            if not isinstance(source, pd.DataFrame):
                raise ValueError("simulate --autoscale replays every request: use the embedded engine, not --engine dask")
            result = simulate_autoscale(source, tw, policy, start, whatif=WhatIf(args.trim_input, args.trim_output,
                                                                                 args.cache_hit),
                                        seed=getattr(args, "seed", 0), router=getattr(args, "router", None) or
                                        "round_robin", block_size=getattr(args, "block_size", None))
        else:
            from shapeviz.fleet.autoscale import autoscale

            result = autoscale(tw, policy, start)
        document.update(result.to_dict())
        table = compare_policies(tw, start, **knobs)
        document["policies"] = table.to_dict(orient="records")
        document["policies_method"] = "estimated (analytic, per minute)"
    growth = parse_growth(getattr(args, "growth", None))
    output_growth = parse_growth(getattr(args, "output_growth", None))
    if growth or output_growth:
        # every month by the one engine, with plan's own settings: month 0 is the fleet plan prints
        from shapeviz.cli.plan import slo_window_seconds

        result = project(source, dep, Growth(growth, output_growth, args.months), whatif=whatif, ttft_slo_ms=ttft,
                         tpot_slo_ms=tpot, gpu_hour_usd=args.gpu_hour_usd, replicas_now=args.replicas_now,
                         method=getattr(args, "method", "simulated"),
                         today=_sized_now(source, dep, whatif, ttft, tpot, overrides, args),
                         classes=pair_classes(source, ttft, tpot, overrides) if isinstance(source, pd.DataFrame)
                         else None, slo_window_s=slo_window_seconds(getattr(args, "slo_window", None)),
                         router=getattr(args, "router", None), block_size=getattr(args, "block_size", None))
        document["growth"] = result.to_dict()
    from shapeviz.plain import json_safe

    return json_safe(document)


def _sized_now(source: Any, dep: Any, whatif: Any, ttft: float, tpot: float, overrides: dict[str, Any],
               args: argparse.Namespace) -> Any:
    """Today's fleet as ``plan`` sizes it (its ``answer_from_args``, with the --slo classes), for growth's month 0
    (a ``Sizing``); None from a sketch or with --method analytic."""
    import pandas as pd

    from shapeviz.cli.plan import answer_from_args
    from shapeviz.fleet.sizing import pair_classes
    from shapeviz.serving.planner import Workload

    if not isinstance(source, pd.DataFrame) or getattr(args, "method", "simulated") == "analytic":
        return None
    _, sizing, _, _ = answer_from_args(args, Workload.from_frame(source, rate_rps=args.rate), dep, source, whatif,
                                       ttft, tpot, pair_classes(source, ttft, tpot, overrides))
    return sizing


def fleet_text(document: dict[str, Any]) -> str:
    """A short human summary of a fleet document."""
    d = document
    lines = [d["deployment"]]
    if "windows" in d:
        delay = d["scale_up_delay"]
        lines.append(f"policy: {d['policy']['label']} ({d['method']}), {len(d['windows'])} windows of "
                     f"{d['window_s'] / 60:.0f} min; scale-up delay {delay['delay_s']:.0f} s "
                     f"({delay['weight_load_s']:.0f} s weights + {delay['engine_start_s']:.0f} s engine start)")
        sized = d.get("windows_sized_by") or {}
        if sized.get("scale"):
            lines.append(f"windows sized by simulation: {sized['window']} needs {sized['replicas']} replicas replayed "
                         f"({sized['proof']}) where the per-minute estimate needs {sized['planner_need']:.2f}")
        lines.append(f"GPU-hours: {d['gpu_hours']:,.1f} (${d['cost']:,.0f}) vs hold at peak {d['baseline_gpu_hours']:,.1f} "
                     f"(saving {d['saving']:.0%}); every window at its own minimum: {d['lower_bound_gpu_hours']:,.1f}")
        att = d.get("attainment")
        lines.append(f"SLO attainment: {'n/a' if att is None else f'{att:.1%}'}; missed windows: "
                     f"{len(d['missed_windows'])} of {len(d['windows'])}")
        if d.get("clipped_windows"):
            lines.append(f"ceiling {d['ceiling']} replicas: clipped {len(d['clipped_windows'])} window(s), from "
                         f"{d['clipped_windows'][0]}")
        for row in d.get("policies", []):
            lines.append(f"  {row['label']:<26} {row['gpu_hours']:>10,.1f} GPU-h  saving {row['saving']:>5.0%}  "
                         f"attainment {row['attainment']:.1%}  missed {row['missed_windows']}")
    if "growth" in d:
        g = d["growth"]
        lines.append(f"growth over {g['growth']['months']} months (pool today: {g['replicas_now']} replicas; "
                     f"{'simulated: each month replayed' if g.get('method') == 'simulated' else 'estimate: analytic'}):")
        for m in g["months"]:
            if m["replicas"] is None:   # no fleet size meets it: no count, no price
                lines.append(f"  month {m['month']}: {m['rate_rps']:,.3g} req/s, unreachable: {m.get('unreachable')}")
                continue
            lines.append(f"  month {m['month']}: {m['rate_rps']:,.3g} req/s, {m['replicas']} replicas, {m['gpus']} GPUs, "
                         f"${m['usd_per_month']:,.0f}/month"
                         + (" (meets every class)" if m.get("meets_slo") else
                            f" (leaves out {m['unreachable']})" if m.get("unreachable") else " (misses)")
                         + (f" (estimate {m['estimate_replicas']}; one fewer: {m['one_fewer']})"
                            if m.get("one_fewer") else ""))
        lines.append("runs out of headroom: " + ("not within the horizon" if g["runs_out_month"] is None
                                                 else f"month {g['runs_out_month']}"))
        lines.extend(f"note: {n}" for n in g.get("notes", []))
    lines.extend(f"note: {n}" for n in d.get("notes", []))
    return "\n".join(lines)
