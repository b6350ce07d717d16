"""Load-test command lines for the plan: the replay trace through aiperf and guidellm, at the planned rate and
at the knee (the highest rate where the planned fleet still meets both p90 SLOs).

The commands were written against aiperf 0.13.0 (``aiperf profile``) and guidellm 0.8.1 (``guidellm run`` with
``kind=...`` option strings); both tools change their command lines between releases, so the README that
carries them names these versions. Nothing here runs a tool: the bundle only writes the text.
"""
from __future__ import annotations

import math
import shlex
from dataclasses import dataclass

import numpy as np

from shapeviz.physics.steps import Deployment
from shapeviz.serving.planner import WhatIf, Workload, load_curve

AIPERF_VERSION = "0.13.0"
GUIDELLM_VERSION = "0.8.1"
DURATION_S = 600          # assumed: ten minutes per rate level, long enough for p90s of a few thousand requests
KNEE_GRID = np.geomspace(0.05, 20.0, 161)   # traffic multipliers searched for the knee (±4% steps)
TRACE_FILE = "replay_mooncake.jsonl"
_PWD = "\x00trace\x00"   # placeholder for the trace path, written as "$PWD"/file


@dataclass(frozen=True)
class LoadLevel:
    """A load level to test: the planned rate, the knee, or the trace's own timing."""

    name: str                 # planned | knee | replay
    rate_rps: float | None    # None for the trace's own timing
    source: str               # measured | estimated | assumed
    why: str


@dataclass(frozen=True)
class LoadTestCommand:
    """One command line of one tool at one level, and where its result file lands."""

    tool: str                 # aiperf | guidellm
    level: LoadLevel
    command: str
    result_file: str


def knee_rate(workload: Workload, dep: Deployment, whatif: WhatIf, ttft_slo_ms: float, tpot_slo_ms: float,
              replicas: int) -> tuple[float | None, float]:
    """(knee rate in req/s or None, planned rate): the highest rate whose p90 TTFT and TPOT meet the SLOs."""
    curve = load_curve(workload, dep, KNEE_GRID, whatif, ttft_slo_ms, tpot_slo_ms, replicas=replicas)
    ok = ((~curve["saturated"]) & (curve["ttft_p90_ms"] <= ttft_slo_ms) & (curve["tpot_p90_ms"] <= tpot_slo_ms)).to_numpy()
    planned = float(curve["rate_rps"].iloc[0] / KNEE_GRID[0])
    if not ok.any():
        return None, planned
    # The first failing rate after the last passing one bounds the knee; report the last passing rate.
    last = int(np.flatnonzero(ok)[-1])
    return float(curve["rate_rps"].iloc[last]), planned


def load_levels(planned_rps: float, planned_source: str, knee_rps: float | None) -> list[LoadLevel]:
    """The levels the bundle's README gives commands for."""
    levels = [LoadLevel("replay", None, "measured", "the what-if trace at its own arrival times (the log's timing)"),
              LoadLevel("planned", planned_rps, planned_source if planned_source in ("measured", "assumed") else "estimated",
                        "the rate the fleet was planned for")]
    if knee_rps is not None:
        levels.append(LoadLevel("knee", knee_rps, "estimated",
                                "the highest rate at which the planned fleet still meets both p90 SLOs"))
    return levels


def _rate(x: float) -> str:
    return f"{x:.4g}"


def aiperf_command(level: LoadLevel, *, model: str, url: str, trace: str = TRACE_FILE,
                   duration_s: int = DURATION_S) -> LoadTestCommand:
    """``aiperf profile`` replaying the trace's token counts at a level (or its timestamps for ``replay``)."""
    out_dir = f"results/aiperf-{level.name}"
    words = ["aiperf", "profile", "--model", model, "--url", url, "--endpoint-type", "chat", "--streaming",
             "--tokenizer", model, "--input-file", _PWD, "--custom-dataset-type", "mooncake_trace",
             # Real servers stop at end-of-sequence; the trace's output lengths are only reached without it.
             "--extra-inputs", "ignore_eos:true"]
    if level.rate_rps is None:
        words += ["--fixed-schedule"]
    else:
        words += ["--no-fixed-schedule", "--request-rate", _rate(level.rate_rps), "--benchmark-duration", str(duration_s)]
    words += ["--output-artifact-dir", out_dir]
    # aiperf 0.13 refused a relative --input-file in our runs, so the trace is given from the current folder.
    text = " ".join(f'"$PWD"/{shlex.quote(trace)}' if w == _PWD else shlex.quote(w) for w in words)
    return LoadTestCommand("aiperf", level, text, f"{out_dir}/profile_export_aiperf.json")


def guidellm_command(level: LoadLevel, *, model: str, url: str, trace: str = TRACE_FILE,
                     duration_s: int = DURATION_S) -> LoadTestCommand:
    """``guidellm run`` with the trace's token counts at a level (or replayed at its timestamps for ``replay``)."""
    out = f"results/guidellm-{level.name}.json"
    # The replay trace stores milliseconds; guidellm's trace replay reads seconds, hence time_scale 0.001.
    data = f"kind=trace_synthetic,source.kind=json_file,source.path={trace},time_scale=0.001"
    profile = "kind=replay" if level.rate_rps is None else f"kind=poisson,rate={_rate(level.rate_rps)}"
    words = ["guidellm", "run", "--backend", f"kind=openai_http,target={url},model={model}",
             "--tokenizer", f"kind=hf_auto,model={model}", "--data", data, "--profile", profile]
    if level.rate_rps is not None:
        words += ["--constraint", f"kind=max_duration,seconds={duration_s}"]
    words += ["--output", f"kind=json,path={out}"]
    return LoadTestCommand("guidellm", level, " ".join(shlex.quote(w) for w in words), out)


def loadtest_commands(levels: list[LoadLevel], *, model: str, url: str = "http://localhost:8000",
                      trace: str = TRACE_FILE) -> list[LoadTestCommand]:
    """Both tools' commands at every level, aiperf first."""
    if not url.startswith(("http://", "https://")):
        raise ValueError(f"endpoint URL {url!r} must start with http:// or https://")
    if "," in model or "," in url:
        raise ValueError("the model name and URL cannot contain ',' (guidellm splits its options on commas)")
    cmds = [aiperf_command(level, model=model, url=url, trace=trace) for level in levels]
    cmds += [guidellm_command(level, model=model, url=url, trace=trace) for level in levels]
    return cmds


def readme_section(commands: list[LoadTestCommand], *, planned_rps: float, knee_rps: float | None,
                   replicas: int | None, ttft_slo_ms: float, tpot_slo_ms: float) -> list[str]:
    """The bundle README's 'Load test' section: what each level is, the commands, and how to check the results."""
    knee_text = (f"{knee_rps:,.3g} req/s" if knee_rps is not None and math.isfinite(knee_rps)
                 else "none (the planned fleet misses an SLO at every rate)")
    lines = [
        "Load test",
        "---------",
        f"Replay {TRACE_FILE} against the endpoint with aiperf {AIPERF_VERSION} or guidellm {GUIDELLM_VERSION} "
        "(other versions may name their options differently).",
        f"Planned rate: {planned_rps:,.3g} req/s on {replicas or '?'} colocated replica(s); knee (estimated: highest rate "
        f"meeting p90 TTFT {ttft_slo_ms:,.0f} ms and TPOT {tpot_slo_ms:,.0f} ms): {knee_text}.",
        "Replace the model name and http://localhost:8000 with your deployment's; the token counts come from the trace, the prompts "
        "are synthetic.",
        "",
    ]
    for c in commands:
        rate = "the trace's own timing" if c.level.rate_rps is None else f"{c.level.rate_rps:,.4g} req/s"
        lines += [f"# {c.tool}, {c.level.name} ({rate}; {c.level.source}: {c.level.why}) -> {c.result_file}",
                  c.command, ""]
    lines += [
        "Then compare plan and measurement:",
        "  python -m shapeviz check plan.json results/aiperf-*/profile_export_aiperf.json results/guidellm-*.json",
    ]
    return lines
