"""Round trip: plan → the engine config's batch limits → replay trace → a simulated run of that trace written in
aiperf's format → `check` shows the simulator's own numbers against the plan."""
from __future__ import annotations

import json

import pytest

from shapeviz.cli import main
from shapeviz.ingest import load_log
from shapeviz.outputs.deploy.build import deployment_bundle, longest_context
from shapeviz.outputs.measured import aiperf_export, plan_reference
from shapeviz.outputs.report import replay_jsonl, replay_trace
from shapeviz.physics import Deployment, get_gpu, get_model
from shapeviz.serving import WhatIf, Workload
from shapeviz.serving.simulator import simulate

DEP = Deployment(get_model("llama-3.1-8b"), get_gpu("h100-sxm"), "fp8", tp=1)


def test_a_simulated_run_of_the_replay_comes_back_through_check_unchanged(trace, tmp_path, capsys):
    frame = load_log(trace("azure_llm_2023/AzureLLMInferenceTrace_code.csv")).frame
    w = Workload.from_frame(frame)
    bundle = deployment_bundle(w, DEP, engine="vllm", ttft_slo_ms=1000, tpot_slo_ms=50,
                               max_context_tokens=longest_context(frame), context_source="measured",
                               layout="colocated")
    pool = bundle.settings.pools["colocated"]
    (tmp_path / "plan.json").write_text(json.dumps(plan_reference(w, DEP, bundle.plan, ttft_slo_ms=1000,
                                                                  tpot_slo_ms=50)))
    # The bundle's replay trace, read back as a log, run on the planned fleet with the emitted batch limits.
    replay = load_log(replay_jsonl(replay_trace(frame, WhatIf())), name="replay_mooncake.jsonl").frame
    assert len(replay) == len(frame)
    run = simulate(replay, DEP, arrivals="trace", replicas=int(bundle.plan.replicas),
                   max_num_seqs=int(pool.max_num_seqs.value), max_num_batched_tokens=int(pool.max_batched_tokens.value),
                   ttft_slo_ms=1000, tpot_slo_ms=50)
    (tmp_path / "sim.json").write_text(json.dumps(aiperf_export(run.requests)))

    assert main(["check", str(tmp_path / "plan.json"), str(tmp_path / "sim.json"), "--json"]) == 0
    (level,) = json.loads(capsys.readouterr().out)["levels"]
    sim = run.summary()
    for metric, key in (("ttft", "ttft_ms"), ("tpot", "itl_ms")):
        for q in ("p50", "p90"):
            assert level[f"measured_{metric}_{q}_ms"] == pytest.approx(sim[key][q], rel=1e-9)
    assert level["requests"] == len(frame)
    assert level["rate_rps"] == pytest.approx(sim["throughput"]["requests_per_s"], rel=0.01)
    # Output tokens/s read back from the file is the simulated run's own: every output token over the span from
    # the first arrival to the last completion, as the simulator counted them.
    done = run.requests
    span_s = float((done["arrival_s"] + done["e2e_ms"] / 1000).max() - done["arrival_s"].min())
    assert level["measured_output_tokens_per_s"] == pytest.approx(done["output_tokens"].sum() / span_s, rel=1e-9)
    assert level["measured_output_tokens_per_s"] == pytest.approx(sim["throughput"]["output_tokens_per_s"], rel=0.01)
    # The plan's figures at the replay's mean rate are on the table next to the simulated ones.
    assert level["planned_ttft_p90_ms"] is not None and level["ratio_ttft_p90_ms"] == pytest.approx(
        level["measured_ttft_p90_ms"] / level["planned_ttft_p90_ms"])
    assert main(["check", str(tmp_path / "plan.json"), str(tmp_path / "sim.json")]) == 0
    assert f"{sim['ttft_ms']['p90']:,.1f}" in capsys.readouterr().out
