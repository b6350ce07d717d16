"""``python -m shapeviz plan``: the capacity plan of a log (or of a fixed ``--isl/--osl`` shape) as JSON or text.

``plan_document(args, mapping)`` builds the stable JSON document; ``plan_text(document)`` is its short human
summary. Every user mistake is a ``ValueError`` with one line, which the command line turns into exit code 2.
"""
from __future__ import annotations

import argparse
from typing import Any

import pandas as pd

from shapeviz.fleet.batch import duration_words, log_batch_job, size_batch_job
from shapeviz.fleet.speculative import speculative_deployment, speculative_effect
from shapeviz.ingest import load_logs
from shapeviz.physics.catalogue import get_gpu, get_model, get_precision
from shapeviz.physics.kv_pool import KVPool, kv_pool_tokens, with_kv_pool
from shapeviz.physics.engines import ENGINE_NAMES, ENGINES
from shapeviz.physics.steps import (
    DEFAULT_TPOT_SLO_MS,
    Deployment,
    max_throughput,
    smallest_tp,
)
from shapeviz.fleet.sizing import (
    DEFAULT_MODEL,
    DEFAULT_SLO_WINDOW_S,
    FITS_WORDS,
    auto_tp,
    checkpoint_precision_source,
    fleet_answer,
    model_of_log,
    pair_classes,
    router_lever,
    router_lever_line,
)
from shapeviz.serving.compare import precisions_for
from shapeviz.serving.planner import DEFAULT_TTFT_SLO_MS, WhatIf, Workload, plan
from shapeviz.serving.products import parse_slo, plan_products
from shapeviz.serving.simulator import admission_policy, fixed_requests
from shapeviz.workload.distributed import sketch_paths


def resolve_model(args: argparse.Namespace, frame: Any = None) -> tuple[str, str]:
    """``(model id, source)``: --model, else the log's model column, else the default model."""
    if getattr(args, "model", None):
        return get_model(args.model).id, "set by user (--model)"
    return model_of_log(frame)


def precision_source(args: argparse.Namespace, dep: Deployment) -> str:
    """Where the weight precision came from: the user, or the model's own checkpoint."""
    if getattr(args, "precision", None):
        return "set by user (--precision)"
    return checkpoint_precision_source(dep.precision) + "; FP8/FP4 are levers, priced in `precision_levers`"


def deployment_from_args(args: argparse.Namespace, model_id: str | None = None,
                         frame: Any = None) -> tuple[Deployment, str]:
    """The replica the options describe, and where its TP came from: the user, else (``frame``: the log's rows)
    the smallest TP whose requests reach every product's class (``fleet.sizing.auto_tp``, what the page's "auto"
    picks), else the smallest that fits the weights with room for KV."""
    model, gpu = get_model(model_id or getattr(args, "model", None) or DEFAULT_MODEL), get_gpu(args.gpu)
    ep = getattr(args, "ep", None)
    adp = bool(getattr(args, "attention_dp", False))
    if ep is not None and ep < 1:
        raise ValueError(f"--ep must be at least 1, got {ep}")

    def build(tp: int) -> Deployment:
        layout_ep = ep if ep is not None else (tp if adp else 1)
        dep = Deployment(model, gpu, args.precision, args.kv_precision, tp, ep=layout_ep, attention_dp=adp,
                         engine=serving_engine_from_args(args))
        return with_kv_pool(dep, kv_pool_from_args(args))

    if args.tp is not None:   # a TP beyond one node stays allowed, and says it spans nodes
        chosen = build(args.tp)
        return chosen, "set by user" + (f"; {chosen.node_note}" if chosen.node_note else "")
    fits = build(smallest_tp(model, gpu, args.precision, args.kv_precision,
                             ep=ep if ep is not None else (None if adp else 1), attention_dp=adp))
    if not isinstance(frame, pd.DataFrame):
        return fits, FITS_WORDS
    ttft = DEFAULT_TTFT_SLO_MS if args.ttft_slo_ms is None else args.ttft_slo_ms
    tpot = DEFAULT_TPOT_SLO_MS if args.tpot_slo_ms is None else args.tpot_slo_ms
    # judged on today's log, as the page's "auto" is: the what-if's levers then move the fleet's size, not its TP
    dep, source, _ = auto_tp(frame, fits, build, classes_from_args(args, frame, ttft, tpot),
                             slo_window_s=slo_window_seconds(getattr(args, "slo_window", None)))
    return dep, source


def serving_engine_from_args(args: argparse.Namespace) -> str | None:
    """The serving engine the options name: ``--serving-engine``, or ``config``'s ``--engine`` (what it writes)."""
    chosen = getattr(args, "serving_engine", None)
    written = getattr(args, "engine", None)
    if written in ENGINES:   # config: the engine whose flags it writes is the one the plan runs on
        if chosen is not None and chosen != written:
            raise ValueError(f"config writes {written} flags (--engine {written}): --serving-engine {chosen} "
                             "disagrees; give --engine only")
        return written
    return chosen


def engine_source(args: argparse.Namespace) -> str:
    """Whether the serving engine was set by the user or is the default ``config`` writes."""
    return "set by user" if serving_engine_from_args(args) is not None else "default: the engine config writes"


def engine_detail(dep: Deployment, args: argparse.Namespace) -> dict[str, Any]:
    """The serving engine of a deployment as ``plan --json`` and ``simulate --json`` report it: which engine and why,
    where its efficiency comes from, and the sequences one replica runs at once by the engine's default."""
    cap = dep.sequence_cap
    own = cap is not None and cap.max_num_seqs <= int(dep.eff.max_batch)
    return {"engine": dep.engine, "engine_source": engine_source(args), "engine_efficiency": dep.engine_note,
            "engine_max_num_seqs": dep.engine_max_seqs,
            "engine_max_num_seqs_source": cap.source if own and cap is not None else dep.eff.sources.get("max_batch", "")}


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

        log = load_logs(logs, mapping)
        workload = Workload.from_frame(log.frame, rate_rps=args.rate)
        report = log.report
        if frames is not None:   # the rows, for what needs them (the router's simulated reuse)
            frames.append(log.frame)
    info = {"source": "log", "files": [str(p) for p in logs], "rows_read": report.rows_read,
            "rows_kept": report.rows_kept, "dropped": dict(report.dropped)}
    return workload, info


def classes_from_args(args: argparse.Namespace, frame: Any, ttft_slo: float, tpot_slo: float) -> Any:
    """Every product's class from the command line: its own ``--slo``, else the TTFT/TPOT pair (the default class);
    None without the log's rows (one SLO: the pair). ``plan``, ``config`` and ``report`` judge with it."""
    overrides = parse_slo(getattr(args, "slo", None))
    if overrides and frame is None:
        raise ValueError("--slo names products of a LOG read row by row; a fixed --isl/--osl shape or a --engine dask "
                         "sketch has one SLO (--ttft-slo-ms/--tpot-slo-ms)")
    return None if frame is None else pair_classes(frame, ttft_slo, tpot_slo, overrides)


def answer_from_args(args: argparse.Namespace, workload: Workload, dep: Deployment, frame: Any, whatif: WhatIf,
                     ttft_slo: float, tpot_slo: float, classes: Any, router: str | None = None) -> Any:
    """``fleet_answer`` with the command line's sizing options (method, SLO window, router, block size): the fleet
    ``plan`` prints, and every other command's "today's fleet" (``plan --growth``'s month 0). ``router``: in place of
    ``--router`` (the router lever's sizing)."""
    return fleet_answer(
        workload, dep, frame, whatif=whatif, ttft_slo_ms=ttft_slo, tpot_slo_ms=tpot_slo, classes=classes,
        gpu_hour_usd=args.gpu_hour_usd, method=getattr(args, "method", "simulated"),
        slo_window_s=slo_window_seconds(getattr(args, "slo_window", None)),
        router=router or getattr(args, "router", None), block_size=getattr(args, "block_size", None))


def duration_seconds(value: str | float, flag: str) -> float:
    """A duration option: seconds, or a number with s/m/h (``90m``, ``8h``)."""
    text = str(value).strip().lower()
    scale = {"s": 1.0, "m": 60.0, "h": 3600.0}.get(text[-1:], None)
    try:
        seconds = float(text[:-1]) * scale if scale else float(text)
    except ValueError:
        seconds = float("nan")
    if not (seconds == seconds and 0 < seconds < float("inf")):
        raise ValueError(f"{flag} expects a duration such as 3600, 90m or 8h, got {value!r}")
    return seconds


def batch_document(args: argparse.Namespace, mapping: dict[str, str] | None = None) -> dict[str, Any]:
    """``plan --deadline``: the fewest replicas that finish a batch job by its deadline (``fleet.batch``)."""
    deadline = duration_seconds(args.deadline, "--deadline")
    n = getattr(args, "requests", None)
    if n is not None and n < 1:
        raise ValueError(f"--requests must be ≥ 1, got {n}")
    if args.rate is not None or args.traffic != 1.0:
        raise ValueError("a batch job has no rate: its requests are offered at once (or via --concurrency C); "
                         "--rate and --traffic do not apply (--requests N sets its size)")
    whatif = WhatIf(args.trim_input, args.trim_output, args.cache_hit, 1.0)
    options = dict(concurrency=getattr(args, "concurrency", None), gpu_hour_usd=args.gpu_hour_usd,
                   admission=getattr(args, "admission", None))
    logs = list(getattr(args, "logs", None) or [])
    if args.isl is not None or args.osl is not None:
        if logs or args.isl is None or args.osl is None or n is None:
            raise ValueError("a batch job of a fixed shape needs --isl, --osl and --requests N (and no LOG)")
        model_id, model_source = resolve_model(args)
        dep, tp_source = deployment_from_args(args, model_id)
        req = fixed_requests(args.isl, args.osl, n)
        job = size_batch_job(req, dep, deadline, **options)
        shape = {"source": "--isl/--osl", "isl": args.isl, "osl": args.osl}
    else:
        if not logs:
            raise ValueError("give a LOG file (or --isl/--osl with --requests N) for the batch job")
        frame = load_logs(logs, mapping).frame
        model_id, model_source = resolve_model(args, frame)
        dep, tp_source = deployment_from_args(args, model_id)
        req, job = log_batch_job(frame, dep, deadline, whatif=whatif, requests=n, **options)
        shape = {"source": "log", "files": [str(p) for p in logs], "rows_kept": int(len(frame)),
                 "drawn": n is not None}
    return {
        "command": "plan", "mode": "batch_job", "deployment": dep.describe(),
        "deployment_detail": {"model": dep.model.id, "gpu": dep.gpu.id, "precision": dep.precision, "tp": dep.tp,
                              "model_source": model_source, "tp_source": tp_source},
        "workload": {**shape, "requests": len(req), "mean_input_tokens": float(req.input_tokens.mean()),
                     "mean_output_tokens": float(req.output_tokens.mean())},
        "admission": admission_policy(dep, getattr(args, "admission", None)),
        "batch_job": job.to_dict(),
    }


def batch_text(document: dict[str, Any]) -> str:
    """A short human summary of a ``plan --deadline`` document."""
    d, b = document, document["batch_job"]
    w = d["workload"]
    offered = "all at once" if b["offered"] == "all_at_once" else f"through {b['concurrency']} concurrent clients"
    lines = [d["deployment"],
             f"batch job: {b['requests']:,} requests (mean {w['mean_input_tokens']:,.0f} in / "
             f"{w['mean_output_tokens']:,.0f} out tokens), offered {offered}, "
             f"deadline {duration_words(b['deadline_s'])} (admission: {d['admission']})"]
    if b["meets"]:
        fewer = b["one_fewer"]
        lines.append(f"fleet: {b['replicas']} replica(s) = {b['gpus']} GPUs [simulated]: done in "
                     f"{duration_words(b['makespan_s'])} at {b['output_tokens_per_s']:,.0f} output tok/s"
                     + ("" if fewer is None else
                        f"; one fewer ({fewer['replicas']}) takes {duration_words(fewer['makespan_s'])}: misses"))
        lines.append(f"cost: {b['gpu_hours']:,.1f} GPU-hours, ${b['cost_usd']:,.2f} for the job's run "
                     f"(${b['cost_usd_if_held_to_deadline']:,.2f} if the fleet is held to the deadline) at "
                     f"${b['usd_per_gpu_hour']:,.2f}/GPU-hour")
    else:
        lines.append("no fleet finishes by the deadline")
    lines.extend(f"note: {n}" for n in b["notes"])
    return "\n".join(lines)


def plan_document(args: argparse.Namespace, mapping: dict[str, str] | None = None) -> dict[str, Any]:
    """The ``plan`` JSON document: deployment, workload, max throughput, phases, TTFT/TPOT, GPUs, cost, assumptions."""
    if getattr(args, "deadline", None) is not None:
        return batch_document(args, mapping)
    for flag in ("requests", "concurrency"):
        if getattr(args, flag, None) is not None:
            raise ValueError(f"--{flag} sizes a batch job: give it with --deadline")
    whatif = WhatIf(args.trim_input, args.trim_output, args.cache_hit, args.traffic)
    frames: list = []
    parse_slo(getattr(args, "slo", None))   # a malformed --slo fails before the log is read
    if args.isl is not None or args.osl is not None or not getattr(args, "logs", None):
        model_id, model_source = resolve_model(args)
        dep, tp_source = deployment_from_args(args, model_id)
        workload, info = _workload(args, mapping, dep, frames)
    else:   # the log first: its model column may name the model
        workload, info = _workload(args, mapping, None, frames)  # type: ignore[arg-type]
        model_id, model_source = resolve_model(args, frames[0] if frames else None)
        dep, tp_source = deployment_from_args(args, model_id, frames[0] if frames else None)
    dep = speculative_from_args(dep, workload, args)
    ttft_slo = DEFAULT_TTFT_SLO_MS if args.ttft_slo_ms is None else args.ttft_slo_ms
    tpot_slo = DEFAULT_TPOT_SLO_MS if args.tpot_slo_ms is None else args.tpot_slo_ms
    classes = classes_from_args(args, frames[0] if frames else None, ttft_slo, tpot_slo)
    planned, sizing, estimate, routed = answer_from_args(args, workload, dep, frames[0] if frames else None, whatif,
                                                         ttft_slo, tpot_slo, classes)
    result = planned.to_dict()
    effect = (None if dep.speculative is None
              else speculative_effect(workload, dep, whatif, ttft_slo, tpot_slo, args.gpu_hour_usd))
    result["assumptions"]["tp_source"] = tp_source
    result["assumptions"]["model_source"] = model_source
    result["assumptions"]["precision_source"] = precision_source(args, dep)
    result["assumptions"]["slo"]["source"] = (
        "set by user" if args.ttft_slo_ms is not None and args.tpot_slo_ms is not None
        else f"shapeviz defaults where not set (TTFT {DEFAULT_TTFT_SLO_MS:g} ms, TPOT {DEFAULT_TPOT_SLO_MS:g} ms at p90)"
    )
    document: dict[str, Any] = {
        "command": "plan",
        "model_source": model_source,
        "precision_source": precision_source(args, dep),
        "deployment_detail": {
            "model": dep.model.id, "gpu": dep.gpu.id, "precision": dep.precision, "kv_precision": dep.kv_precision,
            "tp": dep.tp, "ep": dep.ep, "attention_dp": dep.attention_dp, "layout": dep.layout,
            "compute_precision": dep.compute_precision,
            **engine_detail(dep, args),
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
    # how the fleet size was found: the method, the window replayed, and one replica fewer as the proof
    sized = sizing.to_dict()
    document["method"] = sizing.method
    document["method_label"] = sizing.label
    document["sized_on"] = sized["sized_on"]
    document["one_fewer"] = sized["one_fewer"]
    document["sizing"] = sized
    # which GPU counts of the ``gpus`` block were replayed and which are the analytic estimate
    colocated = "simulated" if sizing.method == "simulated" and sizing.answer is not None else "estimate"
    document["gpus_method"] = {"colocated": colocated, "prefill": "estimate", "decode": "estimate",
                               "disaggregated": "estimate"}
    document["unreachable"] = sized["unreachable"]   # products no fleet size serves here, and why
    document["estimate"] = {"label": "estimate: analytic queue at the peak-minute rate", "replicas": estimate.replicas,
                            "gpus": estimate.gpus.get("colocated"), "ttft_ms": result_ms(estimate.ttft_ms),
                            "tpot_ms": result_ms(estimate.tpot_ms), "meets_slo": estimate.meets_slo}
    # with the lever: what it buys at the planned load and where it stops paying (None without it)
    document["precision_levers"] = precision_levers(workload, dep, whatif, ttft_slo, tpot_slo, args.gpu_hour_usd,
                                                    estimate, explicit=bool(getattr(args, "precision", None)))
    # a cache-aware router as a lever beside a round-robin answer, on a log whose hashes or sessions it keeps
    document["router_lever"] = None if getattr(args, "router", None) else router_lever(
        sizing, frames[0] if frames else None, dep.tp, lambda router: answer_from_args(
            args, workload, dep, frames[0], whatif, ttft_slo, tpot_slo, classes, router=router)[1])
    document["speculative"] = None if effect is None else effect.to_dict()
    if effect is not None:
        document["speculative"]["summary"] = effect.citation()
    if routed is not None:
        document["prefix"] = routed
        document["notes"] = [*document.get("notes", []), routed["note"]]
    if classes is not None and sizing.answer is not None:
        # the replay of the answer: each product's p90s against its own class
        document["products"] = simulated_products(sizing.answer, classes)
        document["notes"] = [*document.get("notes", []), _products_note(document["products"], planned.replicas,
                                                                        simulated=True)]
    elif classes is not None:
        # judged on the fleet the plan bought (with the what-if the plan used, the router's reuse included)
        used = WhatIf(**result["assumptions"]["whatif"])
        products = plan_products(frames[0], workload, dep, used, planned.replicas, classes, tpot_slo)
        document["products"] = products
        document["notes"] = [*document.get("notes", []), _products_note(products, planned.replicas)]
    return document


def precision_levers(workload: Workload, dep: Deployment, whatif: WhatIf, ttft_slo: float, tpot_slo: float,
                     gpu_hour_usd: float | None, estimate: Any, explicit: bool) -> list[dict[str, Any]]:
    """Lower-precision weights as levers beside the planned precision: each one's analytic estimate of GPUs and
    cost against the planned precision's estimate (the saving, labelled an estimate; never a silent default)."""
    if explicit or dep.speculative is not None:
        return []
    out = []
    for precision in precisions_for(dep.model, dep.gpu):
        spec = get_precision(precision)
        if precision == dep.precision or spec.bits_per_weight >= get_precision(dep.precision).bits_per_weight:
            continue
        try:
            tp = smallest_tp(dep.model, dep.gpu, precision, None, ep=dep.ep, attention_dp=dep.attention_dp)
            other = Deployment(dep.model, dep.gpu, precision, None, tp, ep=dep.ep if dep.ep == 1 else tp,
                               attention_dp=dep.attention_dp, engine=dep.engine)
        except ValueError:
            continue
        p = plan(workload, other, whatif, ttft_slo, tpot_slo, gpu_hour_usd)
        base, gpus = estimate.gpus.get("colocated"), p.gpus.get("colocated")
        out.append({"precision": precision, "tp": tp, "label": "estimate (analytic): a lever, not the plan",
                    "gpus": gpus, "gpus_saved": None if base is None or gpus is None else base - gpus,
                    "usd_per_hour": p.cost.get("usd_per_hour"),
                    "usd_per_hour_saved": (None if p.cost.get("usd_per_hour") is None
                                           or estimate.cost.get("usd_per_hour") is None
                                           else estimate.cost["usd_per_hour"] - p.cost["usd_per_hour"]),
                    "note": f"{precision.upper()} weights: quantise or take a quantised checkpoint, then check quality"})
    return out


def result_ms(p: Any) -> dict[str, float | None]:
    """A plan's ``Percentiles`` as JSON."""
    return {"p50": p.p50, "p90": p.p90}


def simulated_products(answer: Any, classes: dict[str, Any]) -> dict[str, Any]:
    """The ``products`` block from the answer's replay, in the analytic block's shape (plus attainment)."""
    out = {}
    for name, o in sorted(answer.products.items()):
        cls = classes.get(name)
        if cls is None:
            continue
        q = cls.percentile
        out[name] = {"class": {k: v for k, v in cls.to_dict().items() if k != "product"}, "requests": o["requests"],
                     f"ttft_p{q}_ms": o.get(f"ttft_p{q}_ms"), f"tpot_p{q}_ms": o.get(f"tpot_p{q}_ms"),
                     "meets": o.get("meets"), "attainment": o.get("attainment")}
    return out


def slo_window_seconds(value: str | float | None) -> float:
    """``--slo-window``: seconds, or a number with s/m/h (``90m``, ``1h``); default one hour."""
    return DEFAULT_SLO_WINDOW_S if value is None else duration_seconds(value, "--slo-window")


def _products_note(products: dict[str, Any], replicas: int | None, simulated: bool = False) -> str:
    """Where the per-product figures come from, and which products miss their own class."""
    missing = [name for name, o in products.items() if not o["meets"]]
    if simulated:
        return (f"each product is judged against its own SLO class (its --slo, else the TTFT/TPOT pair) on the "
                f"{replicas or 0} replica(s) of the answer, by replaying the log on them"
                + (f"; missing their class: {', '.join(missing)}" if missing else ""))
    return (f"each product is judged against its own SLO class on the planned {replicas or 0} shared replica(s), "
            "analytically (its own prefill times in the whole fleet's queue and decode batch; TPOT is the shared "
            "batch's, so the same for every product); `simulate --slo` replays the log as the check"
            + (f"; missing their class: {', '.join(missing)}" if missing else ""))


def _ms(value: float | None) -> str:
    return "saturated" if value is None else f"{value:,.0f} ms" if value >= 10 else f"{value:,.1f} ms"


def plan_text(document: dict[str, Any]) -> str:
    """A short human summary of a ``plan`` document."""
    if document.get("mode") == "batch_job":
        return batch_text(document)
    d = document
    w, g, c = d["workload"], d["gpus"], d["cost"]
    lines = [d["deployment"]]
    tp_source = (d.get("assumptions") or {}).get("tp_source", "")
    if tp_source not in ("", "set by user", FITS_WORDS):   # "auto" went past the smallest that fits, or left some out
        lines.append(f"GPUs per replica: {tp_source}")
    detail = d.get("deployment_detail", {})
    if detail.get("engine"):
        lines.append(f"serving engine: {ENGINE_NAMES[detail['engine']]} ({detail['engine_source']}); "
                     f"{detail['engine_efficiency']}")
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
    lines.append(f"GPUs: colocated {colocated} [{d.get('method_label', 'estimate')}]; disaggregated {split} "
                 "[estimate]")
    if d.get("method") == "simulated" and d.get("estimate"):
        fewer = d.get("one_fewer")
        lines.append(f"sized on {d['sized_on']['window']}: analytic estimate {d['estimate']['replicas']} replica(s)"
                     + ("" if fewer is None else
                        f"; one fewer ({fewer['replicas']}) {fewer['verdict']} (TTFT p90 {_ms(fewer['ttft_ms']['p90'])}"
                        f", TPOT p90 {_ms(fewer['tpot_ms']['p90'])})"))
    if c.get("usd_per_hour") is not None:
        per_m = c.get("usd_per_million_tokens")
        per_out = c.get("usd_per_million_output_tokens")
        lines.append(f"cost: ${c['usd_per_hour']:,.2f}/h colocated"
                     + (f", ${per_m:,.3f} per 1M tokens" if per_m is not None else "")
                     + (f", ${per_out:,.2f} per 1M output tokens" if per_out is not None else "")
                     + f" at ${c['usd_per_gpu_hour']:,.2f}/GPU-hour ({d['assumptions']['price_source']})")
    if d.get("router_lever"):
        lines.append(router_lever_line(d["router_lever"], tp) + " (--router " + d["router_lever"]["router"] + ")")
    if d.get("speculative"):
        lines.append(d["speculative"]["summary"])
    unreachable = (d.get("sizing") or {}).get("unreachable") or []
    if unreachable and d["sizing"].get("meets_others"):
        lines.append(f"SLOs met for every product but {', '.join(u['product'] for u in unreachable)}, which no "
                     "fleet size serves on this deployment:")
    else:
        lines.append("SLOs met" if d["meets_slo"] else "SLOs NOT met")
    lines.extend(f"  {u['product']}: {u['why']} (levers: {u['levers']})" for u in unreachable)
    if d.get("products"):
        lines.append("products, each against its own SLO class "
                     f"({'simulated' if d.get('method') == 'simulated' else 'analytic'}):")
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
