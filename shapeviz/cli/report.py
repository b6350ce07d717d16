"""``python -m shapeviz report LOG --out DIR``: load, analyse, plan and write the bundle's files."""
from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from shapeviz.analysis import analyze
from shapeviz.ingest import load_logs
from shapeviz.cli.plan import (classes_from_args, deployment_from_args, resolve_model, slo_window_seconds,
                               speculative_from_args)
from shapeviz.outputs.report import report_files, write_bundle
from shapeviz.progress import terminal_progress
from shapeviz.physics import DEFAULT_TPOT_SLO_MS
from shapeviz.serving import DEFAULT_TTFT_SLO_MS, WhatIf, Workload
from shapeviz.workload.distributed import sketch_paths
from shapeviz.workload.sketch import SketchedLog, report_log


def write_report_from_args(args: Any, mapping: dict[str, str] | None = None) -> list[Path]:
    """``python -m shapeviz report LOG --out DIR [plan options]``: load, plan, write the bundle, list the files."""
    if getattr(args, "isl", None) is not None or getattr(args, "osl", None) is not None:
        raise ValueError("--isl/--osl describe a fixed shape for `plan`; `report` reads the shape from the LOG files")
    dep, _ = deployment_from_args(args)  # the shared plan options: precision, TP, --ep, --attention-dp
    whatif = WhatIf(trim_input=args.trim_input, trim_output=args.trim_output, cache_hit=args.cache_hit,
                    traffic_multiplier=args.traffic)
    folder = Path(args.out)
    if folder.exists() and not folder.is_dir():
        raise ValueError(f"--out {str(folder)!r} is a file; give a folder for the report (it is created if missing)")
    extra: dict[str, Any] = {}
    if getattr(args, "engine", "embedded") == "dask":
        # logs beyond one machine: analysis and workload from the Dask-built sketch, figures from its sample

        sketch = sketch_paths(args.logs, mapping=mapping or None, scheduler=args.scheduler, workers=args.workers)
        log = report_log(sketch)
        dep = speculative_from_args(dep, Workload.from_view(sketch, rate_rps=1.0), args)
        extra = {"analysis": analyze(SketchedLog(sketch), deployment=dep),
                 "workload": Workload.from_view(sketch, rate_rps=args.rate)}
        rows = None   # a sketch has one SLO class (the pair): --slo needs the log's rows
    else:
        log = load_logs(args.logs, mapping)
        rows = log.frame
        dep, _ = deployment_from_args(args, resolve_model(args, log.frame)[0], log.frame)   # its model column, auto TP
        dep = speculative_from_args(dep, Workload.from_frame(log.frame, rate_rps=1.0), args)
        with terminal_progress() as progress:   # stages on stderr when it is a terminal; pipes stay clean
            extra = {"analysis": analyze(log, deployment=dep, progress=progress)}
    bundle = report_files(log, deployment=dep, whatif=whatif, ttft_slo_ms=args.ttft_slo_ms,
                          tpot_slo_ms=args.tpot_slo_ms, gpu_hour_usd=args.gpu_hour_usd, rate_rps=args.rate,
                          method=getattr(args, "method", "simulated"),
                          slo_window_s=slo_window_seconds(getattr(args, "slo_window", None)),
                          classes=classes_from_args(args, rows, DEFAULT_TTFT_SLO_MS if args.ttft_slo_ms is None
                                                    else args.ttft_slo_ms, DEFAULT_TPOT_SLO_MS
                                                    if args.tpot_slo_ms is None else args.tpot_slo_ms),
                          **extra)
    for note in bundle.notes:
        print(f"shapeviz report: {note}", file=sys.stderr)
    return write_bundle(bundle, folder)

