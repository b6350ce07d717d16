"""The fleet over time: replicas per window, autoscaling policies, the replica schedule in the simulator, growth."""
from __future__ import annotations

import io
import json

import numpy as np
import pandas as pd
import pytest

from shapeviz.cli import main
from shapeviz.fleet.autoscale import (
    POLICIES,
    Policy,
    autoscale,
    compare_policies,
    simulate_autoscale,
    startup,
    traffic_windows,
)
from shapeviz.fleet.growth import Growth, parse_growth, project
from shapeviz.ingest import load_log
from shapeviz.serving.simulator import simulate
from shapeviz.workload.sketch import WorkloadSketch
from shapeviz.workload.synth import generate

CONV = "azure_llm_2023/AzureLLMInferenceTrace_conv.csv"
CODE = "azure_llm_2023/AzureLLMInferenceTrace_code.csv"
MOONCAKE = "mooncake_fast25/conversation_trace.jsonl.gz"


def test_every_policy_costs_between_the_windows_minimum_and_the_peak(traces, dep) -> None:
    """On real traces, autoscaled GPU-hours lie between every window at its own minimum and hold-at-peak."""
    for name in (CONV, CODE, MOONCAKE):
        tw = traffic_windows(load_log(traces / name).frame, dep)
        table = compare_policies(tw)
        assert set(table["policy"]) == set(POLICIES)
        peak = table.set_index("policy").loc["peak"]
        assert peak["gpu_hours"] == pytest.approx(peak["baseline_gpu_hours"])
        for row in table.itertuples():
            assert row.lower_bound_gpu_hours - 1e-9 <= row.gpu_hours <= row.baseline_gpu_hours + 1e-9, (name, row)
        # the most any policy could save: every window held at exactly its own minimum (the floor)
        room = 1.0 - peak["lower_bound_gpu_hours"] / peak["baseline_gpu_hours"]
        if name == MOONCAKE:
            # Mooncake's hour is flat (9 or 10 replicas in every minute): even the floor saves under 10%, which
            # the scale-up delay and the cool-off eat, so no policy is held to a saving here; if the trace ever
            # moves more than that, this fails and the saving check below must cover it too
            assert room < 0.10, room
        else:  # the Azure hours move enough for some policy to save GPU-hours against the peak
            # (windows sized at their busiest minute leave the code hour 26% of room, the conversation hour 33%)
            assert room > 0.2 and table["saving"].max() > 0.05, name


def test_a_slower_start_misses_more(dep) -> None:
    """Over the demo's day a replica that takes 15 minutes to start catches fewer bursts than one that starts at once."""
    tw = traffic_windows(generate(20_000, seed=0), dep)
    fast = autoscale(tw, Policy("slo"), startup(dep, engine_start_s=0.0, storage_gbps=1e6))
    slow = autoscale(tw, Policy("slo"), startup(dep, engine_start_s=900.0))
    assert slow.to_dict()["attainment"] < fast.to_dict()["attainment"]
    assert int(slow.windows["missed"].sum()) > int(fast.windows["missed"].sum())
    assert set(slow.missed["reason"]) & {"starting", "late"}


def test_scale_up_delay_is_weights_over_bandwidth_plus_engine_start(dep) -> None:
    a = startup(dep, storage_gbps=2.0, engine_start_s=60.0)
    b = startup(dep, storage_gbps=4.0, engine_start_s=60.0)
    assert a.weight_gb == pytest.approx(dep.weight_bytes / 1e9)
    assert a.delay_s == pytest.approx(a.weight_gb / 2.0 + 60.0)
    assert b.load_s == pytest.approx(a.load_s / 2)
    assert "set by user" in a.to_dict()["sources"]["storage_gbps"]
    assert startup(dep).to_dict()["sources"]["engine_start_s"].startswith("assumed")


def test_a_draining_replica_finishes_what_it_holds_and_takes_nothing_new(conv, dep) -> None:
    """Two replicas, then one from minute 10: nothing arriving later lands on the second; all it held finishes."""
    frame = conv.iloc[:3000]
    cut = 600.0
    run = simulate(frame, dep, replicas=2, replica_schedule=(np.array([0.0, cut]), np.array([2, 1])))
    r = run.requests
    late = r["arrival_s"] >= cut
    assert late.any() and (r.loc[late, "replica"] == 0).all()
    early_on_second = r[(r["arrival_s"] < cut) & (r["replica"] == 1)]
    assert len(early_on_second) > 0
    assert early_on_second["e2e_ms"].notna().all()
    # a request caught mid-flight at the cut finished after it, on the draining replica
    assert ((early_on_second["arrival_s"] + early_on_second["e2e_ms"] / 1000.0) > cut).any()
    with pytest.raises(ValueError, match="replica_schedule"):
        simulate(frame, dep, replicas=2, replica_schedule=(np.array([0.0]), np.array([3])))


def test_the_replay_reports_attainment_per_window_and_pays_for_draining(conv, dep) -> None:
    frame = conv[conv["timestamp"] < conv["timestamp"].min() + pd.Timedelta(minutes=20)]
    tw = traffic_windows(frame, dep)
    result = simulate_autoscale(frame, tw, "slo", startup(dep))
    doc = result.to_dict()
    assert doc["method"] == "simulated"
    assert len(doc["windows"]) == tw.n_windows == 5   # 18:15 to 18:35: five 5-minute windows
    assert all(0.0 <= w["attainment"] <= 1.0 for w in doc["windows"])
    assert result.gpu_hours >= autoscale(tw, "slo", startup(dep)).gpu_hours
    with pytest.raises(ValueError, match="timeline"):
        from shapeviz.serving.planner import WhatIf

        simulate_autoscale(frame, tw, "slo", whatif=WhatIf(traffic_multiplier=2.0))


def test_a_heavier_shape_needs_more_replicas_at_the_same_rate(conv, dep) -> None:
    """The shape drifts: the second half-hour's prompts are 4× longer at the same rate, so it needs more replicas."""
    frame = conv.copy()
    start = frame["timestamp"].min()
    later = frame["timestamp"] >= start + pd.Timedelta(minutes=30)
    frame.loc[later, "input_tokens"] = (frame.loc[later, "input_tokens"] * 4).clip(upper=30000).astype("int32")
    tw = traffic_windows(frame, dep)
    need = tw.window_need
    first, second = need[:5], need[7:11]
    rate_first, rate_second = tw.window_rps[:5], tw.window_rps[7:11]
    assert rate_second.mean() < 1.3 * rate_first.mean()
    assert second.mean() > 1.5 * first.mean()


def test_windows_from_the_sketch_agree_with_the_rows(traces, dep) -> None:
    """Above the full-frame limit the sketch plans each window; it lands within one replica of the rows' plan."""
    for name in (CONV, MOONCAKE):
        frame = load_log(traces / name).frame
        rows = traffic_windows(frame, dep)
        sketched = traffic_windows(WorkloadSketch.from_frame(frame), dep)
        assert sketched.n_windows == rows.n_windows
        assert np.allclose(sketched.window_rps, rows.window_rps)
        close = np.abs(sketched.window_need - rows.window_need) <= 1
        assert close.mean() >= 0.9, (name, rows.window_need, sketched.window_need)


def test_growth_runs_out_of_headroom_in_the_first_month_that_needs_more(conv, dep) -> None:
    result = project(conv, dep, Growth({"*": 0.25}, {}, 6))
    table = result.months
    assert list(table["month"]) == list(range(7))
    assert (np.diff(table["replicas"]) >= 0).all()
    assert table["rate_rps"].iloc[6] == pytest.approx(table["rate_rps"].iloc[0] * 1.25 ** 6)
    over = table[table["replicas"] > result.replicas_now]
    assert result.runs_out_month == int(over["month"].iloc[0])
    # longer answers alone need more decode: output +30%/month with flat traffic
    longer = project(conv, dep, Growth({}, {"*": 0.3}, 6)).months
    assert longer["mean_output_tokens"].iloc[6] == pytest.approx(longer["mean_output_tokens"].iloc[0] * 1.3 ** 6, rel=1e-6)
    assert longer["replicas"].iloc[6] > longer["replicas"].iloc[0]
    assert parse_growth(["chat=8%", "0.2"]) == {"chat": 0.08, "*": 0.2}
    with pytest.raises(ValueError, match="PRODUCT=RATE"):
        parse_growth(["chat=fast"])


def test_plan_and_simulate_autoscale_print_the_stable_keys(traces, capsys) -> None:
    log = str(traces / CONV)
    assert main(["plan", log, "--autoscale", "schedule", "--growth", "0.1", "--months", "2", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    for key in ("windows", "gpu_hours", "cost", "baseline_gpu_hours", "policies", "growth"):
        assert key in doc
    for w in doc["windows"]:
        assert {"start", "rate_rps", "replicas", "ttft_p90_ms", "tpot_p90_ms", "attainment"} <= set(w)
    assert doc["policy"]["name"] == "schedule"
    assert len(doc["growth"]["months"]) == 3
    assert main(["plan", "--isl", "100", "--osl", "10", "--autoscale", "slo"]) == 2
    assert "LOG with timestamps" in capsys.readouterr().err


def test_the_bundle_carries_a_keda_autoscaler_with_every_value_sourced(traces) -> None:
    import yaml

    from shapeviz.outputs.report import report_files

    bundle = report_files(load_log(traces / CONV), png=False)
    files = bundle.files
    text = files["keda_scaledobject.yaml"].decode()
    doc = yaml.safe_load(text)
    assert doc["kind"] == "ScaledObject"
    spec = doc["spec"]
    assert 1 <= spec["minReplicaCount"] <= spec["maxReplicaCount"]
    trigger = spec["triggers"][0]
    assert trigger["type"] == "prometheus" and float(trigger["metadata"]["threshold"]) > 0
    for line in text.splitlines():
        key = line.split(":")[0].strip()
        if key in ("minReplicaCount", "maxReplicaCount", "stabilizationWindowSeconds", "threshold", "query"):
            assert "#" in line, line   # every value says where it came from
    assert "autoscaling_policies.csv" in files and "autoscaling_windows.csv" in files
    memo = files["report.html"].decode()
    assert "Traffic over time: autoscaling" in memo and "Next quarter" in memo
    months = pd.read_csv(io.BytesIO(files["growth_months.csv"]))
    assert list(months["month"]) == [0, 1, 2, 3] and (np.diff(months["rate_rps"]) > 0).all()
