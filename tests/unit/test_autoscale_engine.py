"""Issue 27, item 4: autoscaling on the one sizing engine (windows sized by simulation, --slo classes, true miss
reasons, the ceiling, the first fleet, the scale-down rate, a queue-depth policy with hysteresis, the series).
Windows sized at their busiest minute: tests/unit/test_sizing.py::test_autoscaling_windows_are_sized_at_their_busiest_minute."""
from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from shapeviz.cli import main
from shapeviz.fleet.autoscale import (
    Policy,
    autoscale,
    replica_schedule,
    simulate_autoscale,
    sized_by_simulation,
    startup,
    traffic_windows,
)
from shapeviz.fleet.sizing import pair_classes
from shapeviz.ingest import load_log
from shapeviz.workload.synth import generate

CONV = "azure_llm_2023/AzureLLMInferenceTrace_conv.csv"
CODE = "azure_llm_2023/AzureLLMInferenceTrace_code.csv"


def _slice(frame: pd.DataFrame, minutes: float) -> pd.DataFrame:
    return frame[frame["timestamp"] < frame["timestamp"].min() + pd.Timedelta(minutes=minutes)]


def _ramps(knots_min: list[float], rates: list[float], input_tokens: int, output_tokens: int) -> pd.DataFrame:
    """A log whose rate follows straight ramps between knots, arrivals evenly spread (no burst inside a minute)."""
    grid = np.linspace(0.0, knots_min[-1] * 60.0, 20_001)
    rate = np.interp(grid, np.array(knots_min) * 60.0, rates)
    cumulative = np.concatenate([[0.0], np.cumsum((rate[1:] + rate[:-1]) / 2 * np.diff(grid))])
    t = np.interp(np.arange(int(cumulative[-1])) + 0.5, cumulative, grid)
    frame = generate(len(t), seed=1, products=["chat"], with_hashes=False).reset_index(drop=True)
    frame["input_tokens"] = np.int32(input_tokens)
    frame["output_tokens"] = np.int32(output_tokens)
    frame["cached_tokens"] = 0
    frame["timestamp"] = pd.Timestamp("2026-01-01", tz="UTC") + pd.to_timedelta(t, unit="s")
    return frame


def test_slo_classes_change_the_windows_under_autoscale(traces, tmp_path, capsys) -> None:
    """The issue: `--slo '*=300:10'` and `'*=3000:100'` gave identical output under --autoscale."""
    log = tmp_path / "conv20.csv"
    frame = pd.read_csv(traces / CONV)
    frame.iloc[:6000].to_csv(log, index=False)
    docs = {}
    for slo in ("*=300:10", "*=3000:100"):
        assert main(["plan", str(log), "--autoscale", "slo", "--method", "analytic", "--slo", slo, "--json"]) == 0
        docs[slo] = json.loads(capsys.readouterr().out)
    tight, loose = docs["*=300:10"], docs["*=3000:100"]
    assert [c["ttft_ms"] for c in tight["slo_classes"].values()] == [300]
    need_tight = [w["replicas_needed"] for w in tight["windows"]]
    need_loose = [w["replicas_needed"] for w in loose["windows"]]
    assert sum(need_tight) > sum(need_loose)
    assert tight["attainment"] < loose["attainment"]


def test_the_replay_judges_each_request_by_its_own_products_class(conv, dep) -> None:
    """Two products alternate in one log; only one has a class no fleet meets (TPOT 1 ms): the replay's
    attainment is about the other's share, where one class for all would call nearly every request met."""
    frame = _slice(conv, 10).copy()
    frame["product"] = np.where(np.arange(len(frame)) % 4 == 0, "strict", "easy")
    classes = pair_classes(frame, 5000.0, 500.0, {"strict": (5000.0, 1.0)})
    tw = traffic_windows(frame, dep, classes=classes)
    result = simulate_autoscale(frame, tw, "peak", startup(dep))
    doc = result.to_dict()
    assert doc["attainment"] <= 0.75 + 0.01
    assert doc["attainment"] > 0.6   # the easy product meets its loose class


def test_a_ramp_past_the_ceiling_misses_by_the_ceiling_then_by_backlog_never_a_burst(dep) -> None:
    """Straight ramps up to 12 req/s and down again, the ceiling at 1 replica, replicas that start at once: the
    windows it clips miss for the ceiling, and the window after them for the queue they left, not for a burst
    (the arrivals are evenly spread)."""
    frame = _ramps([0, 3, 4.5, 7], [0.2, 12.0, 0.2, 0.2], 4000, 100)
    tw = traffic_windows(frame, dep, window_s=60)
    fast = startup(dep, storage_gbps=1000.0, engine_start_s=0.0)
    result = simulate_autoscale(frame, tw, Policy("slo", max_replicas=1), fast)
    doc = result.to_dict()
    assert max(doc["minutes"]["replicas"]) == 1 and doc["ceiling"] == 1
    assert doc["clipped_windows"] and int(tw.window_need.max()) > 1
    reasons = [w["reason"] for w in doc["windows"] if w["missed"]]
    assert "backlog" in reasons and "ceiling" in reasons, reasons
    assert "burst" not in reasons, reasons
    after = [w for w in doc["windows"] if w["reason"] == "backlog"]
    assert all(w["replicas_needed"] <= 1 for w in after)   # the ceiling no longer binds there


def test_the_first_fleet_and_a_scale_down_rate_shape_the_schedule(dep) -> None:
    tw = traffic_windows(generate(20_000, seed=0), dep)
    free = autoscale(tw, "slo")
    assert np.diff(free.schedule.provisioned).min() < -1        # the demo's evening drains several at once
    gradual = autoscale(tw, Policy("slo", scale_down_per_min=1))
    assert np.diff(gradual.schedule.provisioned).min() == -1    # one a minute
    assert gradual.gpu_hours > free.gpu_hours
    first = autoscale(tw, Policy("slo", initial_replicas=1))
    assert tw.minute_need[0] > 1 and first.schedule.ready[0] == 1
    assert first.to_dict()["minutes"]["serving"][0] == 1


def test_the_queue_policy_reads_its_signal_from_the_replay_with_hysteresis(dep) -> None:
    """A ramp to 14 req/s and back on one replica at first: the queue policy scales up on the replay's waiting
    requests, holds inside its band, and its schedule is the one its own replay's queue asks for."""
    frame = _ramps([0, 2, 3, 4], [0.2, 14.0, 0.2, 0.2], 4000, 100)
    tw = traffic_windows(frame, dep, window_s=60)
    fast = startup(dep, storage_gbps=1000.0, engine_start_s=0.0)
    policy = Policy("queue", initial_replicas=1, queue_up=4.0, queue_down=0.1, cooloff_s=120.0)
    result = simulate_autoscale(frame, tw, policy, fast)
    sched = result.schedule
    assert sched.signal_source == "simulated"
    # the schedule is the one its own replay's queue asks for, minute by minute
    again = replica_schedule(tw, policy, fast, signal=_waiting(result.replay, tw, sched.ready))
    assert np.array_equal(again.provisioned, sched.provisioned) and sched.events == again.events
    q, d, prov = sched.signal, sched.desired, sched.provisioned
    before = prov[:-1]                                   # asked for before each decision (minutes 1..)
    up = q[1:] > policy.up
    assert up.any() and (d[1:][up] > before[up]).all()   # a queue above the band scales up
    band = (q[1:] >= policy.down) & (q[1:] <= policy.up)
    assert band.any() and (d[1:][band] == before[band]).all()   # inside the band it holds
    assert result.to_dict()["minutes"]["queue_per_replica_source"] == "simulated"


def test_the_queue_policy_holds_inside_its_band_and_drains_after_the_cool_off(conv, dep) -> None:
    """The hysteresis itself, on a given signal: a queue of 10 per replica scales up; 2 per replica (inside the
    0.1–4 band) holds; an empty queue drains only once it has stayed below the band for the 2-minute cool-off."""
    tw = traffic_windows(conv, dep)
    policy = Policy("queue", initial_replicas=1, queue_up=4.0, queue_down=0.1, cooloff_s=120.0, max_replicas=3)
    signal = np.zeros(tw.minute_rps.size)
    signal[1], signal[2:10] = 10.0, 2.0
    sched = replica_schedule(tw, policy, startup(dep), signal=signal)
    prov = sched.provisioned
    assert prov[0] == 1 and prov[1] == 3                        # ceil(1 × 10 / 4) = 3
    assert (prov[1:12] == 3).all()                              # the band holds, and the cool-off waits
    assert prov[12] == 1                                        # two minutes below the band: drained to the minimum


def _waiting(r: pd.DataFrame, tw, ready: np.ndarray) -> np.ndarray:
    """Requests arrived and not yet scheduled just before each minute, per serving replica (from the replay)."""
    arrival = np.sort(r["arrival_s"].to_numpy())
    started = np.sort(r["arrival_s"].to_numpy() + r["queue_ms"].to_numpy() / 1000.0)
    t = np.arange(tw.minute_rps.size) * 60.0 - tw.offset_s - 1e-6
    return (np.searchsorted(arrival, t, side="right") - np.searchsorted(started, t, side="right")) / np.maximum(ready, 1)


def test_the_json_carries_the_per_minute_replica_series(conv, dep) -> None:
    tw = traffic_windows(conv, dep)
    result = autoscale(tw, "slo")
    doc = result.to_dict()
    minutes = doc["minutes"]
    # the replicas paid for, minute by minute (starting ones too): they add up to the GPU-hours
    assert sum(minutes["replicas"]) * tw.tp / 60.0 == pytest.approx(doc["gpu_hours"])
    assert sum(minutes["serving"]) < sum(minutes["replicas"])   # the scale-ups' start-up minutes
    n = tw.minute_rps.size
    for key in ("rate_rps", "replicas", "serving", "desired", "replicas_needed", "clipped"):
        assert len(minutes[key]) == n, key
    per_window = pd.Series(minutes["replicas"]).groupby(tw.window_of_minute).max()
    assert list(per_window) == [w["replicas"] for w in doc["windows"]]
    assert minutes["rate_rps"] == pytest.approx(list(tw.minute_rps))


def test_windows_sized_by_simulation_hold_the_one_engines_answer_at_their_peak(traces, dep) -> None:
    """On the Azure code trace (bursts inside the minute) the planner sizes the hour at 3 where its replay needs
    more: windows sized by simulation take size_fleet's answer for the hour, and one fewer is shown missing."""
    frame = load_log(traces / CODE).frame
    tw = traffic_windows(frame, dep)
    sized = sized_by_simulation(frame, tw)
    info = sized.sized_by
    assert info["method"] == "simulated" and info["meets"]
    assert int(sized.window_need.max()) == info["replicas"] > int(tw.window_need.max())
    assert info["one_fewer"]["meets"] is False


def test_a_log_one_replica_carries_is_not_scaled_by_its_floor(traces, dep) -> None:
    """BurstGPT's slice (400 requests over 10 h) meets every class on one replica replayed: that bounds the
    busiest hour's need (a hundredth of a replica by the planner) without measuring it, so no window is scaled
    up from it and every window keeps one replica."""
    frame = load_log(traces / "burstgpt/burstgpt_slice.csv").frame
    sized = sized_by_simulation(frame, traffic_windows(frame, dep))
    assert sized.sized_by["replicas"] == 1 and sized.sized_by["method"] == "analytic"
    assert int(sized.window_need.max()) == 1


def test_a_replayed_policys_minutes_carry_the_logs_rate_and_need(conv, dep) -> None:
    # the per-minute series (the page's minute chart, `plan --autoscale --json`): a replayed policy gives the log's
    # rate and the replicas each minute needs beside its own fleet, one entry a minute
    frame = _slice(conv, 5)
    tw = traffic_windows(frame, dep, window_s=300)
    minutes = simulate_autoscale(frame, tw, "peak", startup(dep)).to_dict()["minutes"]
    assert len(minutes["rate_rps"]) == len(minutes["replicas_needed"]) == len(minutes["replicas"]) > 0
    assert minutes["rate_rps"] == [float(x) for x in tw.minute_rps]
