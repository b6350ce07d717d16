"""Batch jobs sized by a deadline (issue 36, item 4): ``plan --deadline`` and ``simulate --all-at-once``.

The real Azure conversation trace's 19,366 requests as an offline job on Llama-3.1-70B FP8, TP2 on H100: the
fewest replicas whose all-at-once replay finishes by the deadline, one replica fewer replayed and missing it.
"""
from __future__ import annotations

import json

import pytest

from shapeviz.cli import main
from shapeviz.fleet.batch import alone_floor, size_batch_job
from shapeviz.physics.steps import Deployment
from shapeviz.serving.simulator import fixed_requests

DEP = ["--model", "llama-3.1-70b", "--gpu", "h100-sxm", "--precision", "fp8", "--tp", "2"]


def _json(capsys, argv: list[str]) -> dict:
    assert main(argv + ["--json"]) == 0
    return json.loads(capsys.readouterr().out)


@pytest.fixture(scope="module")
def azure(traces) -> str:
    return str(traces / "azure_llm_2023" / "AzureLLMInferenceTrace_conv.csv")


def test_plan_deadline_gives_the_fewest_replicas_that_finish_the_log_by_it(azure, capsys):
    d = _json(capsys, ["plan", azure, "--deadline", "10m", *DEP])
    b = d["batch_job"]
    assert d["mode"] == "batch_job" and b["offered"] == "all_at_once" and b["requests"] == 19_366
    assert b["meets"] and b["makespan_s"] <= 600 < b["one_fewer"]["makespan_s"]
    assert b["one_fewer"]["replicas"] == b["replicas"] - 1 and b["gpus"] == 2 * b["replicas"]
    assert b["gpu_hours"] == pytest.approx(b["gpus"] * b["makespan_s"] / 3600)
    # a later deadline needs no more replicas; the text says the same fleet
    later = _json(capsys, ["plan", azure, "--deadline", "1h", *DEP])["batch_job"]
    assert later["replicas"] <= b["replicas"] and later["makespan_s"] <= 3600
    assert main(["plan", azure, "--deadline", "10m", *DEP]) == 0
    text = capsys.readouterr().out
    assert f"fleet: {b['replicas']} replica(s) = {b['gpus']} GPUs [simulated]" in text and "misses" in text


def test_a_batch_job_of_n_requests_of_the_logs_shape_through_a_set_concurrency(azure, capsys):
    at_once = _json(capsys, ["plan", azure, "--deadline", "5m", "--requests", "4000", *DEP])["batch_job"]
    paced = _json(capsys, ["plan", azure, "--deadline", "5m", "--requests", "4000", "--concurrency", "64",
                           *DEP])["batch_job"]
    assert at_once["requests"] == paced["requests"] == 4000
    assert paced["offered"] == "closed" and paced["concurrency"] == 64
    # 64 clients keep fewer requests in flight than everything at once: the fleet needs at least as many replicas
    assert paced["replicas"] >= at_once["replicas"] and paced["makespan_s"] <= 300


@pytest.mark.parametrize("argv, message", [
    (["--deadline", "soon"], "--deadline expects a duration such as 3600, 90m or 8h, got 'soon'"),
    (["--deadline", "1h", "--rate", "3"], "a batch job has no rate"),
    (["--requests", "100"], "--requests sizes a batch job: give it with --deadline"),
])
def test_a_batch_jobs_bad_options_are_named(azure, capsys, argv, message):
    assert main(["plan", azure, *DEP, *argv]) == 2
    assert message in capsys.readouterr().err


def test_simulate_all_at_once_offers_every_request_at_time_zero_on_one_replica_unless_told(azure, capsys):
    d = _json(capsys, ["simulate", azure, "--all-at-once", "--requests", "2000", *DEP])
    s = d["settings"]
    assert s["arrivals"] == "all_at_once" and s["replicas"] == 1 and "--all-at-once" in s["replicas_source"]
    assert s["admission"] == "watermark" and d["requests"] == 2000
    assert d["makespan_s"] * 1000 >= d["e2e_ms"]["p99"] > 0   # every request arrived at 0: the last one ends the run
    two = _json(capsys, ["simulate", azure, "--all-at-once", "--requests", "2000", "--replicas", "2", *DEP])
    assert two["makespan_s"] < 0.7 * d["makespan_s"]
    assert main(["simulate", azure, "--all-at-once", "--rate", "3", *DEP]) == 2
    assert "--all-at-once offers every request at time 0" in capsys.readouterr().err


def test_a_deadline_under_the_slowest_request_alone_is_answered_at_once(azure, capsys):
    # no fleet finishes before its slowest request would alone: the search replayed the whole job on ever larger
    # fleets up to 4,096 replicas (14 replays, 35 s for 2,000 requests) to end with a note that did not say why
    b = _json(capsys, ["plan", azure, "--deadline", "10s", "--requests", "200", *DEP])["batch_job"]
    assert not b["meets"] and b["replicas"] is None and b["trials"] == []
    (note,) = b["notes"]
    assert note.startswith("the deadline is shorter than the longest request alone: "), note
    assert "so no fleet finishes in 10 s" in note


def test_a_deadline_just_over_one_request_alone_gives_each_request_its_own_replica_and_no_more():
    # ten prompts of 2,000 tokens offered at once: two on a replica take longer than one alone, so a deadline a
    # hair over one alone needs ten replicas; the search never replays more replicas than there are requests
    dep = Deployment("llama-3.1-70b", "h100-sxm", "fp8", None, 2)
    req = fixed_requests(2000, 200, 10)
    alone, _ = alone_floor(req, dep)
    job = size_batch_job(req, dep, alone * 1.0001)
    assert job.replicas == 10 and job.one_fewer is not None and not job.one_fewer.meets
    assert max(t.replicas for t in job.trials) <= 10, [t.replicas for t in job.trials]
