"""The report bundle's deployment part: launch scripts and manifests for every engine, plan.json for `check`, and
load-test commands at the planned rate and at the knee in the README."""
from __future__ import annotations

import json
import shlex

import pytest

from shapeviz.ingest import load_log
from shapeviz.outputs import report
from shapeviz.outputs.deploy import check_command
from shapeviz.outputs.deploy.loadtest import (
    AIPERF_VERSION,
    GUIDELLM_VERSION,
    knee_rate,
    load_levels,
    loadtest_commands,
)
from shapeviz.outputs.measured import read_plan_reference
from shapeviz.physics import Deployment, get_gpu, get_model
from shapeviz.serving import WhatIf, Workload, load_curve, plan

DEP = Deployment(get_model("llama-3.1-8b"), get_gpu("h100-sxm"), "fp8", tp=1)


@pytest.fixture(scope="module")
def burst_bundle(traces):
    log = load_log(traces / "burstgpt" / "burstgpt_slice.csv")
    return log, report.report_files(log, deployment=DEP, whatif=WhatIf(trim_output=0.2), png=False)


def _script_argv(script: str) -> list[str]:
    return shlex.split(script.split("args=(\n", 1)[1].split("\n)\n", 1)[0], comments=True)


def test_the_bundle_carries_a_launch_script_per_engine_and_pool(burst_bundle):
    _, bundle = burst_bundle
    scripts = {n: b.decode() for n, b in bundle.files.items() if n.startswith("serve_")}
    engines = {n.split("_")[1] for n in scripts}
    assert engines == {"vllm", "sglang", "trtllm"}
    for name, text in scripts.items():
        engine = name.split("_")[1]
        command_line = text.strip().splitlines()[-1].removeprefix("exec ").replace('"${args[@]}"', "")
        assert check_command(engine, command_line + " " + " ".join(map(shlex.quote, _script_argv(text)))) == []
    readme = bundle.files["README.txt"].decode()
    for name in [n for n in bundle.files if n.startswith(("serve_", "k8s_", "trtllm_")) or n == "plan.json"]:
        assert f"\n{name}: " in readme and f"\n{name}: \n" not in readme   # listed and described


def test_plan_json_is_the_plan_check_reads(burst_bundle):
    log, bundle = burst_bundle
    ref = read_plan_reference(json.loads(bundle.files["plan.json"]), "plan.json")
    summary = json.loads(bundle.files["summary.json"])
    after = summary["plan_after"]
    assert ref.rate_rps == pytest.approx(after["rate_rps"])
    assert ref.replicas == after["replicas"]
    assert ref.at(after["rate_rps"])["ttft_p90_ms"] == pytest.approx(after["ttft_ms"]["p90"], rel=0.02)


def test_the_readme_gives_both_tools_at_the_planned_rate_and_the_knee(burst_bundle):
    _, bundle = burst_bundle
    readme = bundle.files["README.txt"].decode()
    plan_doc = json.loads(bundle.files["plan.json"])
    planned, knee = plan_doc["rate_rps"], plan_doc["knee_rps"]
    assert f"aiperf {AIPERF_VERSION}" in readme and f"guidellm {GUIDELLM_VERSION}" in readme
    commands = [ln for ln in readme.splitlines() if ln.startswith(("aiperf profile", "guidellm run"))]
    assert len(commands) == 6   # replay, planned, knee for each tool
    assert any(f"--request-rate {planned:.4g}" in c for c in commands)
    assert any(f"kind=poisson,rate={planned:.4g}" in c for c in commands)
    assert knee is not None and knee >= planned
    assert any(f"--request-rate {knee:.4g}" in c for c in commands)
    assert "python -m shapeviz check plan.json" in readme


def test_the_knee_is_where_the_planned_fleet_stops_meeting_the_slos():
    w = Workload.fixed(2048, 256, rate_rps=10.0)
    p = plan(w, DEP, ttft_slo_ms=1000, tpot_slo_ms=50)
    knee, planned = knee_rate(w, DEP, WhatIf(), 1000, 50, p.replicas)
    assert planned == pytest.approx(10.0)
    assert knee >= planned   # the plan meets both SLOs at its own rate
    at = load_curve(w, DEP, [knee / 10.0, knee * 1.1 / 10.0], ttft_slo_ms=1000, tpot_slo_ms=50, replicas=p.replicas)
    assert at["ttft_p90_ms"].iloc[0] <= 1000 and at["tpot_p90_ms"].iloc[0] <= 50
    beyond = at.iloc[1]
    assert beyond["saturated"] or beyond["ttft_p90_ms"] > 1000 or beyond["tpot_p90_ms"] > 50


def test_commands_quote_what_the_shell_would_split_and_refuse_what_guidellm_would():
    levels = load_levels(2.0, "measured", 5.0)
    cmds = loadtest_commands(levels, model="org/My Model", url="http://h:8000")
    aiperf = shlex.split(cmds[1].command.replace('"$PWD"/', "/bundle/"))
    assert aiperf[aiperf.index("--model") + 1] == "org/My Model"
    assert aiperf[aiperf.index("--input-file") + 1] == "/bundle/replay_mooncake.jsonl"
    guidellm = shlex.split(cmds[4].command)
    for option in ("--backend", "--data", "--profile", "--output"):
        parts = guidellm[guidellm.index(option) + 1].split(",")
        assert all("=" in part for part in parts)   # guidellm's key=value,... option strings
    with pytest.raises(ValueError, match="comma"):
        loadtest_commands(levels, model="a,b")
    with pytest.raises(ValueError, match="http"):
        loadtest_commands(levels, model="m", url="localhost:8000")


def test_the_bundle_reuses_the_analysis_prefix_figure_and_gets_the_same_configs(traces):
    from shapeviz.analyses.prefix import prefix_reuse
    from shapeviz.outputs.deploy.bundle import deploy_files

    frame = load_log(traces / "mooncake_fast25" / "synthetic_trace.jsonl").frame
    w = Workload.from_frame(frame)
    after = plan(w, DEP)
    kw = dict(whatif=WhatIf(), ttft_slo_ms=1000, tpot_slo_ms=50)
    fresh = deploy_files(frame, w, DEP, after, **kw)
    reused = deploy_files(frame, w, DEP, after, prefix_reuse=prefix_reuse(frame), **kw)
    assert fresh.files == reused.files
    assert "--enable-prefix-caching" in fresh.files["serve_vllm_colocated.sh"].decode()
