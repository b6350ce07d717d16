"""Calibration from the user's own log: a hidden efficiency is recovered, real E2E latencies are matched."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from shapeviz.ingest import load_log
from shapeviz.physics import default_deployment
from shapeviz.serving.sim_calibrate import fit_to_log, scaled
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


def test_the_fit_recovers_a_hidden_efficiency() -> None:
    log = _log_from_hidden_fleet(0.7, 0.8)
    cal = fit_to_log(log, DEP, replicas=2, requests=None)
    assert cal.compute_scale == pytest.approx(0.7, rel=0.05)
    assert cal.memory_scale == pytest.approx(0.8, rel=0.05)
    assert cal.fitted_to == ("ttft_ms", "tpot_ms") and "calibrated to your log" in cal.describe()
    # before the fit the simulation is too fast on every product; after it, it matches within a few percent
    for frame, tol in ((cal.before, None), (cal.after, 0.05)):
        assert set(frame["product"]) == {"all", "chat", "rag"}
        err = frame["simulated_p50"] / frame["measured_p50"] - 1
        if tol is None:
            assert (err < -0.05).all()
        else:
            assert err.abs().max() <= tol
    assert cal.deployment.eff.mfu == pytest.approx(DEP.eff.mfu * cal.compute_scale)


def test_a_real_log_with_end_to_end_latencies_is_matched(trace) -> None:
    """BurstGPT 3 carries E2E ('Elapsed time') only: one factor on both efficiencies, fitted to its median."""
    frame = load_log(trace("burstgpt/burstgpt3_slice.csv")).frame
    assert "e2e_ms" in frame.columns
    cal = fit_to_log(frame, DEP, replicas=1, requests=None)
    assert cal.fitted_to == ("e2e_ms",)
    row = cal.after[(cal.after["product"] == "all") & (cal.after["latency"] == "e2e_ms")].iloc[0]
    assert row["simulated_p50"] == pytest.approx(row["measured_p50"], rel=0.15)
    assert 0.2 <= cal.compute_scale <= 3.0


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
