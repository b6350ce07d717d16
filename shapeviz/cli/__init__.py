"""The command line: ``python -m shapeviz summary | plan | simulate | design | report | config | check``.

User mistakes (a missing file, an unknown column, an unknown GPU) end with one line on stderr and exit code 2,
never a traceback.
"""
from __future__ import annotations

import argparse
import json
import sys
from typing import Any, Sequence

from shapeviz.progress import terminal_progress
from shapeviz.text import terminal_text

EXIT_USAGE = 2


def _parse_mapping(pairs: Sequence[str] | None) -> dict[str, str]:
    """``["input_tokens=prompt", ...]`` → ``{"input_tokens": "prompt"}``."""
    mapping: dict[str, str] = {}
    for pair in pairs or ():
        canonical, sep, column = pair.partition("=")
        if not sep or not canonical.strip() or not column.strip():
            raise ValueError(f"--map expects canonical=column (e.g. --map input_tokens=prompt_len), got {pair!r}")
        mapping[canonical.strip()] = column.strip()
    return mapping


def _emit(document: dict[str, Any], as_json: bool, text: str) -> None:
    if as_json:
        json.dump(document, sys.stdout, indent=2, allow_nan=False)
        sys.stdout.write("\n")
    else:
        # names come from the log (products, models, files): no escape sequence of theirs reaches the terminal
        sys.stdout.write(terminal_text(text.rstrip("\n")) + "\n")


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of all sub-commands."""
    parser = argparse.ArgumentParser(
        prog="python -m shapeviz",
        description="Workload shape of LLM request logs, and what it means for prefill, decode, GPUs and cost.",
    )
    sub = parser.add_subparsers(dest="command", required=True)

    summary = sub.add_parser("summary", help="shape of one or more request logs")
    summary.add_argument("logs", nargs="+", metavar="LOG",
                         help="CSV/TSV/Parquet/JSON/JSONL, optionally gz/bz2/zst; with --engine dask also globs "
                              "('logs/*.parquet') and fsspec URLs (s3://, gs://)")
    _add_common(summary)
    _add_engine(summary)
    summary.set_defaults(handler=cmd_summary)

    plan = sub.add_parser("plan", help="GPUs, TTFT/TPOT and cost for a log or a fixed shape")
    plan.add_argument("logs", nargs="*", metavar="LOG")
    _add_plan_options(plan)
    _add_sizing_options(plan)
    _add_router_options(plan)
    _add_common(plan)
    _add_engine(plan)
    from shapeviz.cli.fleet import add_fleet_options

    add_fleet_options(plan)
    _add_batch_options(plan)
    plan.set_defaults(handler=cmd_plan)

    simulate = sub.add_parser("simulate", help="replay a log or a fixed shape on a fleet (discrete-event simulation)")
    simulate.add_argument("logs", nargs="*", metavar="LOG")
    _add_plan_options(simulate)
    _add_router_options(simulate)
    from shapeviz.cli.simulate import add_simulate_options

    add_simulate_options(simulate)
    _add_admission_option(simulate)
    add_fleet_options(simulate, simulate=True)
    _add_common(simulate)
    simulate.set_defaults(handler=cmd_simulate)

    design = sub.add_parser("design", help="the cheapest fleet of pools whose simulated p90s meet every product's SLO")
    from shapeviz.cli.design import add_design_options

    add_design_options(design)
    _add_common(design)
    design.set_defaults(handler=cmd_design)

    report = sub.add_parser("report", help="write the PNG/CSV/HTML report bundle for a log")
    report.add_argument("logs", nargs="+", metavar="LOG")
    report.add_argument("--out", required=True, help="output folder")
    _add_plan_options(report)
    _add_sizing_options(report)
    _add_common(report)
    _add_engine(report)
    report.set_defaults(handler=cmd_report)

    config = sub.add_parser("config", help="engine flags (vLLM, SGLang, TensorRT-LLM) and a Kubernetes manifest of the plan")
    config.add_argument("logs", nargs="*", metavar="LOG")
    config.add_argument("--engine", choices=("vllm", "sglang", "trtllm"), default=None,
                        help="the engine whose flags to write (default vllm; with --fleet, each pool's own engine)")
    config.add_argument("--layout", choices=("all", "colocated", "disaggregated"), default="all",
                        help="colocated, disaggregated (prefill + decode pools) or all the plan supports (default)")
    config.add_argument("--k8s", action="store_true", help="also print a Kubernetes manifest of the fleet")
    config.add_argument("--model-path", default=None, help="checkpoint or Hugging Face repo id to serve")
    config.add_argument("--port", type=int, default=8000)
    config.add_argument("--app", default="llm", help="name prefix of the Kubernetes objects")
    config.add_argument("--fleet", default=None, metavar="FLEET.json",
                        help="one launch script (and manifest) per pool of a fleet file (`design --json` fleet)")
    _add_plan_options(config)
    _add_sizing_options(config)
    _add_router_options(config)
    _add_common(config)
    config.set_defaults(handler=cmd_config)

    check = sub.add_parser("check", help="plan vs measured: aiperf/guidellm results (and the log's latencies)")
    check.add_argument("plan", metavar="PLAN_JSON", help="a report bundle's plan.json or `config --json` output")
    check.add_argument("results", nargs="*", metavar="RESULTS",
                       help="aiperf profile_export_aiperf.json or profile_export.jsonl (or their folder), "
                            "guidellm JSON reports")
    check.add_argument("--log", action="append", metavar="LOG", help="a request log with ttft_ms/tpot_ms to compare too")
    _add_common(check)
    check.set_defaults(handler=cmd_check)
    return parser


def _add_common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--map", action="append", metavar="canonical=column", help="override a column mapping")
    p.add_argument("--json", action="store_true", help="print JSON instead of text")


def _add_engine(p: argparse.ArgumentParser) -> None:
    p.add_argument("--engine", choices=("embedded", "dask"), default="embedded",
                   help="embedded: stream the files in this process (default); dask: build the workload sketch per "
                        "partition on a Dask cluster and merge it here")
    p.add_argument("--scheduler", metavar="ADDRESS", default=None,
                   help="with --engine dask: an existing cluster's scheduler (tcp://host:8786); default: a local one")
    p.add_argument("--workers", type=int, default=None, metavar="N",
                   help="with --engine dask and no --scheduler: worker processes of the local cluster")


def _check_engine(args: argparse.Namespace) -> None:
    if args.engine != "dask" and (args.scheduler or args.workers):
        raise ValueError("--scheduler and --workers need --engine dask")
    if args.workers is not None and args.workers < 1:
        raise ValueError(f"--workers must be at least 1, got {args.workers}")


def _add_plan_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--isl", type=int, help="fixed input length (tokens), instead of a log")
    p.add_argument("--osl", type=int, help="fixed output length (tokens), instead of a log")
    p.add_argument("--model", default=None,
                   help="catalogue model (default: the one the log's model column names, else llama-3.1-70b)")
    p.add_argument("--gpu", default="h100-sxm")
    # Choices spelled out so that building the parser reads no data file; physics/engines.py defines them.
    p.add_argument("--serving-engine", choices=("vllm", "sglang", "trtllm"), default=None,
                   help="the engine the replicas run (default vllm, what config writes): its efficiency on the GPU "
                        "family at the precision, from published results (data/engine_efficiency.csv), scales the "
                        "calibration; config follows its own --engine")
    # Choices spelled out so that building the parser imports no pandas; data/precisions.csv defines them.
    p.add_argument("--precision", choices=("bf16", "fp16", "fp8", "nvfp4", "fp4", "mxfp4"), default=None,
                   help="weight precision (default: the model's own checkpoint, bf16 unless it ships in another, e.g. "
                        "mxfp4 for gpt-oss, fp8 for DeepSeek-V3; fp8/fp4 are levers the plan prices beside it)")
    p.add_argument("--kv-precision", choices=("fp8", "bf16"), default=None,
                   help="KV-cache precision (default: fp8 for fp8/fp4 weights, bf16 for bf16)")
    p.add_argument("--tp", type=int, default=None,
                   help="GPUs per replica, tensor parallel (default: smallest that fits with room for KV)")
    p.add_argument("--ep", type=int, default=None, metavar="N",
                   help="MoE models: experts split over N of the replica's GPUs "
                        "(default 1; with --attention-dp all of them, i.e. DEP)")
    p.add_argument("--attention-dp", action="store_true",
                   help="MoE models: attention data parallel, each GPU serves its own sequences; "
                        "the expert layers exchange tokens (DEP when --ep equals --tp)")
    p.add_argument("--rate", type=float, default=None, help="request rate, req/s (default: the log's peak)")
    p.add_argument("--ttft-slo-ms", type=float, default=None)
    p.add_argument("--tpot-slo-ms", type=float, default=None)
    p.add_argument("--trim-input", type=float, default=0.0, metavar="F")
    p.add_argument("--trim-output", type=float, default=0.0, metavar="F")
    p.add_argument("--cache-hit", type=float, default=None, metavar="F")
    p.add_argument("--traffic", type=float, default=1.0, metavar="X", help="traffic multiplier")
    p.add_argument("--gpu-hour-usd", type=float, default=None)
    # Choices spelled out so that building the parser reads no data file; physics/speculative.py defines them.
    p.add_argument("--speculative", choices=("none", "eagle3", "mtp", "ngram", "draft"), default="none",
                   help="speculative decoding: an EAGLE-3 head, the model's MTP layers (DeepSeek), n-gram prompt "
                        "lookup, or a smaller draft model of the same tokenizer (default none)")
    p.add_argument("--draft-tokens", type=int, default=None, metavar="K",
                   help="with --speculative: tokens drafted per step (default per method: eagle3 3, mtp 1, ngram 3, "
                        "draft 4)")
    p.add_argument("--acceptance-length", type=float, default=None, metavar="L",
                   help="with --speculative: mean tokens kept per step, bonus included, as vLLM/SGLang report it "
                        "(default: assumed from published benchmarks for the log's corners)")
    _add_kv_pool_options(p)


def _add_batch_options(p: argparse.ArgumentParser) -> None:
    """``plan --deadline``: a batch job sized by when it must finish (``shapeviz.fleet.batch``)."""
    p.add_argument("--deadline", default=None, metavar="DURATION",
                   help="a batch job: the fewest replicas that finish the log's requests (or --requests N of its "
                        "shape) by this deadline (seconds, or 90m, 8h), offered all at once or via --concurrency")
    p.add_argument("--requests", type=int, default=None, metavar="N",
                   help="with --deadline: N requests drawn from the log's shape (or of --isl/--osl) instead of the "
                        "log's own")
    p.add_argument("--concurrency", type=int, default=None, metavar="C",
                   help="with --deadline: C concurrent clients across the fleet instead of everything at once")
    _add_admission_option(p)


def _add_admission_option(p: argparse.ArgumentParser) -> None:
    """``--admission``: how a replica admits into its KV pool (``simulator.ADMISSIONS``)."""
    # Spelled out (shapeviz.serving.simulator.ADMISSIONS) so that building the parser imports no pandas.
    p.add_argument("--admission", choices=("watermark", "guaranteed_no_evict", "max_utilization"), default=None,
                   help="how a replica admits requests into its KV pool: vLLM's watermark (default), TensorRT-LLM's "
                        "guaranteed_no_evict (its default) or max_utilization")


def _add_kv_pool_options(p: argparse.ArgumentParser) -> None:
    """``--kv-cache-tokens`` and ``--gpu-memory-utilization``: the KV pool as the engines set it."""
    p.add_argument("--kv-cache-tokens", type=int, default=None, metavar="N",
                   help="KV pool per replica in tokens, as vLLM --num-gpu-blocks-override, SGLang --max-total-tokens "
                        "or TensorRT-LLM kv_cache_config.max_tokens set it (default: the capacity model's share of free "
                        "memory)")
    p.add_argument("--gpu-memory-utilization", type=float, default=None, metavar="F",
                   help="vLLM's share of each GPU's memory for weights, runtime and KV, in (0, 1]: the KV pool is what "
                        "is left of it; with --kv-cache-tokens the smaller pool holds")


def _add_sizing_options(p: argparse.ArgumentParser) -> None:
    """``--method`` and ``--slo-window``: how the fleet size is found (shapeviz.fleet.sizing)."""
    p.add_argument("--method", choices=("simulated", "analytic"), default="simulated",
                   help="simulated (default): the smallest fleet whose replay of the log meets every product's p90 "
                        "class, one replica fewer shown missing; analytic: the quick queue estimate, labelled so")
    p.add_argument("--slo-window", default=None, metavar="DURATION",
                   help="the stretch of the log whose p90s must meet the classes: its busiest window of this length "
                        "(seconds, or 90m, 1h; default 1h, the whole log when shorter)")
    p.add_argument("--slo", action="append", metavar="PRODUCT=TTFT_MS:TPOT_MS",
                   help="a product's own SLO class at p90, judged on the sized fleet (repeatable; PRODUCT '*' sets "
                        "every product); a product without one is judged against --ttft-slo-ms/--tpot-slo-ms, the "
                        "default class")


def _add_router_options(p: argparse.ArgumentParser) -> None:
    """``--router`` and ``--block-size``: the commands that simulate per-replica prefix caches."""
    # Spelled out (shapeviz.serving.routers.ROUTERS) so that building the parser imports no pandas.
    p.add_argument("--router", choices=("round_robin", "random", "least_tokens", "session", "prefix"), default=None,
                   help="how requests are spread over replicas; with block hashes or sessions in the log, each "
                        "replica's own prefix cache then decides the reuse (simulate: default round_robin; plan, "
                        "config: plan with the reuse this router keeps on the planned fleet)")
    p.add_argument("--block-size", type=int, default=None, metavar="TOKENS",
                   help="tokens per hash_ids block, for the simulated prefix caches (simulate, or plan/config with "
                        "--router; default: inferred from input length / number of hashes)")


def cmd_summary(args: argparse.Namespace) -> int:
    """``summary``: rows, mapping, per-product shape, clusters and recommendations."""
    _check_engine(args)
    from shapeviz.outputs.summary import (  # imported here: --help and bad flags stay instant
        summarize,
        summary_text,
    )

    with terminal_progress() as progress:
        document = summarize(args.logs, mapping=_parse_mapping(args.map), engine=args.engine,
                             scheduler=args.scheduler, workers=args.workers, progress=progress)
    _emit(document, args.json, summary_text(document))
    return 0


def _fleet_over_time(args: argparse.Namespace, command: str) -> bool:
    """``--autoscale``/``--growth`` on ``plan`` or ``simulate``: print the fleet over time instead (True if done)."""
    from shapeviz.cli.fleet import fleet_document, fleet_text, wants_fleet

    if not wants_fleet(args):
        return False
    document = fleet_document(args, mapping=_parse_mapping(args.map), command=command)
    _emit(document, args.json, fleet_text(document))
    return True


def cmd_plan(args: argparse.Namespace) -> int:
    """``plan``: the capacity plan for a log or a fixed (isl, osl) shape."""
    _check_engine(args)
    if _fleet_over_time(args, "plan"):
        return 0
    from shapeviz.cli.plan import plan_document, plan_text

    document = plan_document(args, mapping=_parse_mapping(args.map))
    _emit(document, args.json, plan_text(document))
    return 0


def cmd_simulate(args: argparse.Namespace) -> int:
    """``simulate``: latency under load from the discrete-event simulator."""
    from shapeviz.cli.simulate import check_parallel_options

    check_parallel_options(args)
    if _fleet_over_time(args, "simulate"):
        return 0
    from shapeviz.cli.simulate import simulate_document, simulate_text

    document = simulate_document(args, mapping=_parse_mapping(args.map))
    _emit(document, args.json, simulate_text(document))
    return 0


def cmd_report(args: argparse.Namespace) -> int:
    """``report``: the report bundle written to ``--out``, its files listed."""
    _check_engine(args)
    from shapeviz.cli.report import write_report_from_args

    files = write_report_from_args(args, mapping=_parse_mapping(args.map))
    _emit({"files": [str(f) for f in files]}, args.json, "\n".join(str(f) for f in files))
    return 0


def cmd_design(args: argparse.Namespace) -> int:
    """``design``: the cheapest fleet design that meets every product's class, verified by simulation."""
    from shapeviz.cli.design import design_document, design_text

    with terminal_progress() as progress:
        document = design_document(args, mapping=_parse_mapping(args.map), progress=progress)
    _emit(document, args.json, design_text(document))
    return 0


def cmd_config(args: argparse.Namespace) -> int:
    """``config``: engine launch scripts (and with ``--k8s`` a manifest), every value with its source."""
    from shapeviz.cli.deploy import config_document, config_text

    document = config_document(args, mapping=_parse_mapping(args.map))
    _emit(document, args.json, config_text(document))
    return 0


def cmd_check(args: argparse.Namespace) -> int:
    """``check``: measured TTFT/TPOT and throughput per load level against the plan."""
    from shapeviz.cli.deploy import check_from_args
    from shapeviz.outputs.measured import check_text

    document = check_from_args(args, mapping=_parse_mapping(args.map))
    _emit(document, args.json, check_text(document))
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point; returns the process exit code."""
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.handler(args))
    except (ValueError, FileNotFoundError, IsADirectoryError, PermissionError) as exc:
        # IngestError and every validation error of the model layer are ValueErrors with a one-line message.
        print(terminal_text(f"shapeviz {args.command}: {exc}"), file=sys.stderr)
        return EXIT_USAGE
    except (OverflowError, RecursionError) as exc:   # a number or a nesting no reader's check foresaw
        print(f"shapeviz {args.command}: a value in the input is out of range ({type(exc).__name__}); "
              "check the files given", file=sys.stderr)
        return EXIT_USAGE
    except MemoryError:   # past every bound the readers check: one line, never a traceback
        print(f"shapeviz {args.command}: the input does not fit in this machine's memory; split the log, sample it, "
              "or use --engine dask where the command has it", file=sys.stderr)
        return EXIT_USAGE
    except BrokenPipeError:  # `... | head` closed the pipe: not an error of ours
        return 0
