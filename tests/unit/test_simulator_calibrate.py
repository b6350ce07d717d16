"""Calibration from the user's own log: a hidden efficiency is recovered, real E2E latencies are matched."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from shapeviz.ingest import load_log
from shapeviz.physics import default_deployment
from shapeviz.serving.sim_calibrate import fit_to_log, measured_vs_simulated, scaled
from shapeviz.serving.simulator import Requests, simulate

DEP = default_deployment()


def _log_from_hidden_fleet(compute: float, memory: float, n: int = 600) -> pd.DataFrame:
    """A log whose latencies were produced by the simulator on a fleet slower than the published calibration."""
    rng = np.random.default_rng(7)
    inp = np.exp(rng.normal(7.0, 0.8, n)).astype(np.int64).clip(16, 20_000)
    out = np.exp(rng.normal(5.0, 0.7, n)).astype(np.int64).clip(2, 2_000)
    arrival = np.cumsum(rng.exponential(1 / 3.0, n))
    hidden = simulate(Requests(inp, out, np.zeros(n, dtype=np.int64), arrival), scaled(DEP, compute, memory),
                      replicas=2).requests
    ts = pd.Timestamp("2025-03-01", tz="UTC") + pd.to_timedelta(arrival, unit="s")
    return pd.DataFrame({"timestamp": ts, "input_tokens": inp, "output_tokens": out,
                         "product": np.where(inp > 2000, "rag", "chat"),
                         "ttft_ms": hidden["ttft_ms"], "tpot_ms": hidden["tpot_ms"]})


def _held_out(frame: pd.DataFrame, dep, replicas: int) -> pd.DataFrame:
    """Measured vs simulated p50/p90 per product on rows the fit never saw, with simulated/measured − 1."""
    table = measured_vs_simulated(frame, simulate(frame, dep, arrivals="trace", replicas=replicas))
    return table.assign(err_p50=table["simulated_p50"] / table["measured_p50"] - 1,
                        err_p90=table["simulated_p90"] / table["measured_p90"] - 1)


def test_the_fit_recovers_a_hidden_efficiency_and_predicts_the_other_half() -> None:
    """Fitted on the log's first half (its medians), judged on the second half (p50 and p90, per product)."""
    log = _log_from_hidden_fleet(0.7, 0.8)
    first, second = log.iloc[:300], log.iloc[300:].reset_index(drop=True)
    cal = fit_to_log(first, DEP, replicas=2, requests=None)
    assert cal.compute_scale == pytest.approx(0.7, rel=0.05)
    assert cal.memory_scale == pytest.approx(0.8, rel=0.05)
    assert cal.fitted_to == ("ttft_ms", "tpot_ms") and "calibrated to your log" in cal.describe()
    assert cal.deployment.eff.mfu == pytest.approx(DEP.eff.mfu * cal.compute_scale)
    before, after = _held_out(second, DEP, 2), _held_out(second, cal.deployment, 2)
    assert set(after["product"]) == {"all", "chat", "rag"} and set(after["latency"]) == {"ttft_ms", "tpot_ms"}
    # uncalibrated, the published efficiencies are too fast on every product and both quantiles of the held-out half
    assert (before[["err_p50", "err_p90"]] < -0.15).all().all()
    # calibrated on the other half, the p50 and the p90 of every product land within 5%
    assert after[["err_p50", "err_p90"]].abs().max().max() <= 0.05, after.round(3).to_string()


def test_a_real_log_with_end_to_end_latencies_is_predicted_on_its_second_half(trace) -> None:
    """BurstGPT 3 carries E2E ('Elapsed time') only: one factor fitted on the first half by time, judged on the rest."""
    frame = load_log(trace("burstgpt/burstgpt3_slice.csv")).frame
    assert "e2e_ms" in frame.columns
    frame = frame.sort_values("timestamp", kind="stable").reset_index(drop=True)
    half = len(frame) // 2
    first, second = frame.iloc[:half], frame.iloc[half:].reset_index(drop=True)
    cal = fit_to_log(first, DEP, replicas=1, requests=None)
    assert cal.fitted_to == ("e2e_ms",) and 0.2 <= cal.compute_scale <= 3.0
    overall = lambda t: t[t["product"] == "all"].iloc[0]   # noqa: E731
    before, after = overall(_held_out(second, DEP, 1)), overall(_held_out(second, cal.deployment, 1))
    # the held-out median moves from a third too fast to within 15%; the p90 to within 25%
    assert before["err_p50"] < -0.25
    assert abs(after["err_p50"]) <= 0.15 and abs(after["err_p90"]) <= 0.25, after.to_dict()


def test_calibration_needs_timestamps_and_latencies() -> None:
    log = _log_from_hidden_fleet(1.0, 1.0, n=50)
    with pytest.raises(ValueError, match="timestamps"):
        fit_to_log(log.drop(columns=["timestamp"]), DEP, replicas=1)
    with pytest.raises(ValueError, match="no measured latencies"):
        fit_to_log(log.drop(columns=["ttft_ms", "tpot_ms"]), DEP, replicas=1)
    with pytest.raises(ValueError, match="replicas"):
        fit_to_log(log, DEP, replicas=0)


def test_simulate_command_calibrates_to_the_log(trace, capsys) -> None:
    import json

    from shapeviz.cli import main

    path = str(trace("burstgpt/burstgpt3_slice.csv"))
    assert main(["simulate", path, "--replicas", "1", "--calibrate-to-log", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["method"] == "simulated" and doc["calibration"]["label"] == "calibrated to your log"
    assert doc["calibration"]["fitted_to"] == ["e2e_ms"] and doc["settings"]["efficiency"].startswith("calibrated")
    assert main(["simulate", path, "--calibrate-to-log"]) == 2
    assert "--replicas" in capsys.readouterr().err
