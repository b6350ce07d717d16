"""Plan vs measured: aiperf and guidellm result files (real outputs of aiperf 0.13.0 and guidellm 0.8.1, see
tests/data/measured/README.md), the log's own latencies, and the comparison a user reads."""
from __future__ import annotations

import io
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from shapeviz.cli import main
from shapeviz.ingest import load_log
from shapeviz.outputs.measured import (
    MeasuredLevel,
    aiperf_export,
    check_document,
    log_levels,
    parse_result,
    plan_reference,
    read_plan_reference,
    read_results,
    verdict,
)
from shapeviz.physics import Deployment, get_gpu, get_model
from shapeviz.serving import Workload, load_curve, plan

DATA = Path(__file__).resolve().parents[1] / "data" / "measured"
DEP = Deployment(get_model("llama-3.1-70b"), get_gpu("h100-sxm"), "fp8", tp=2)


def _raw(name: str) -> dict:
    return json.loads((DATA / name).read_text())


@pytest.fixture(scope="module")
def reference():
    w = Workload.fixed(2048, 256, rate_rps=20.0)
    p = plan(w, DEP, ttft_slo_ms=1000, tpot_slo_ms=50)
    return w, p, plan_reference(w, DEP, p, ttft_slo_ms=1000, tpot_slo_ms=50)


def test_aiperf_export_reads_the_tools_own_percentiles():
    for name, schedule in (("aiperf_0.13.0_planned.json", "poisson 2 req/s target"),
                           ("aiperf_0.13.0_replay.json", "fixed_schedule")):
        raw = _raw(name)
        (level,) = parse_result((DATA / name).read_bytes(), name)
        assert level.tool == "aiperf" and level.version == "0.13.0" and schedule in level.label
        assert level.ttft_p50_ms == pytest.approx(raw["time_to_first_token"]["p50"])
        assert level.ttft_p90_ms == pytest.approx(raw["time_to_first_token"]["p90"])
        assert level.tpot_p90_ms == pytest.approx(raw["inter_token_latency"]["p90"])
        assert level.rate_rps == pytest.approx(raw["request_throughput"]["avg"])
        assert level.requests == int(raw["request_count"]["avg"])
        # The mock server answered after ~80 ms with ~12 ms between tokens (two clients sharing one CPU).
        assert 70 < level.ttft_p50_ms < 200 and 5 < level.tpot_p50_ms < 60


def test_aiperf_per_request_records_give_the_summary_of_the_same_run():
    """aiperf's profile_export.jsonl (one record per request) reads as the summary aiperf wrote in the same run."""
    records = DATA / "aiperf_0.13.0_records.jsonl"
    summary = _raw("aiperf_0.13.0_records_summary.json")
    (level,) = parse_result(records.read_bytes(), records.name)
    assert level.tool == "aiperf" and "33 per-request records" in level.label
    assert level.requests == int(summary["request_count"]["avg"]) == 33
    for ours, theirs in (("ttft_p50_ms", "time_to_first_token"), ("ttft_p90_ms", "time_to_first_token"),
                         ("tpot_p50_ms", "inter_token_latency"), ("tpot_p90_ms", "inter_token_latency")):
        assert getattr(level, ours) == pytest.approx(summary[theirs][ours.split("_")[1]], rel=1e-9)
    # Throughput over aiperf's benchmark_duration (first request sent to last response): the records do not carry
    # the phase's 15 s window that aiperf's own request_throughput divides by.
    duration = summary["benchmark_duration"]["avg"]
    assert level.rate_rps == pytest.approx(summary["request_count"]["avg"] / duration, rel=1e-6)
    assert level.output_tokens_per_s == pytest.approx(summary["output_sequence_length"]["sum"] / duration, rel=1e-6)


def test_aiperf_records_leave_out_failed_and_warm_up_requests():
    lines = (DATA / "aiperf_0.13.0_records.jsonl").read_text().splitlines()
    failed, warmup = json.loads(lines[0]), json.loads(lines[1])
    failed["error"] = {"code": 500, "type": "ServerError", "message": "boom"}
    failed["metrics"]["time_to_first_token"]["value"] = 1e6      # a failure's latency must not count
    warmup["metadata"]["benchmark_phase"] = "warmup"
    data = "\n".join([json.dumps(failed), json.dumps(warmup), *lines[2:]]).encode()
    (level,) = parse_result(data, "profile_export.jsonl")
    assert level.requests == 31 and "1 failed left out" in level.label
    assert level.ttft_p90_ms < 1000
    with pytest.raises(ValueError, match="line 3") as err:
        parse_result("\n".join([*lines[:2], "{broken", *lines[2:]]).encode(), "profile_export.jsonl")
    assert "\n" not in str(err.value)


def test_aiperf_units_other_than_ms_are_converted():
    raw = _raw("aiperf_0.13.0_planned.json")
    raw["time_to_first_token"] = {k: (v / 1000 if isinstance(v, float) else v)
                                  for k, v in raw["time_to_first_token"].items()} | {"unit": "s"}
    (level,) = parse_result(json.dumps(raw).encode(), "x.json")
    assert level.ttft_p90_ms == pytest.approx(_raw("aiperf_0.13.0_planned.json")["time_to_first_token"]["p90"])


def test_guidellm_report_gives_one_level_per_benchmark():
    raw = _raw("guidellm_0.8.1_report.json")
    levels = parse_result((DATA / "guidellm_0.8.1_report.json").read_bytes(), "g.json")
    assert [lv.label for lv in levels] == ["guidellm poisson 2 req/s", "guidellm trace"]
    for lv, b in zip(levels, raw["benchmarks"]):
        m = b["metrics"]
        assert lv.version == "0.8.1"
        assert lv.requests == m["request_totals"]["successful"]
        assert lv.rate_rps == pytest.approx(m["request_totals"]["successful"] / b["duration"])
        assert lv.ttft_p90_ms == pytest.approx(m["time_to_first_token_ms"]["successful"]["percentiles"]["p90"])
        assert lv.tpot_p50_ms == pytest.approx(m["inter_token_latency_ms"]["successful"]["percentiles"]["p50"])
        assert lv.output_tokens_per_s == pytest.approx(m["output_token_count"]["successful"]["total_sum"] / b["duration"])


@pytest.mark.parametrize("data, why", [
    (b"\x00\x01 not json", "not JSON"),
    (b"[1, 2, 3]", "JSON object"),
    (b'{"hello": 1}', "neither an aiperf"),
    (b'{"benchmarks": []}', "no 'benchmarks'"),
    (b'{"benchmarks": [{"config": {}}]}', "no metrics"),
    (b'{"request_throughput": 3}', "not an aiperf"),
    (b"[" * 100000 + b"]" * 100000, "nested"),
])
def test_a_file_that_is_not_a_result_gets_one_line(data, why):
    with pytest.raises(ValueError, match=why) as err:
        parse_result(data, "upload.json")
    assert "upload.json" in str(err.value) and "\n" not in str(err.value)


def test_the_plan_reference_is_the_plan_at_its_rate_and_grows_with_load(reference):
    w, p, ref_doc = reference
    ref = read_plan_reference(json.loads(json.dumps(ref_doc)))
    at_plan = ref.at(p.rate_rps)
    assert at_plan["ttft_p90_ms"] == pytest.approx(p.ttft_ms.p90, rel=0.02)
    assert at_plan["tpot_p50_ms"] == pytest.approx(p.tpot_ms.p50, rel=0.02)
    rates = p.rate_rps * np.array([0.25, 0.5, 1.0, 1.2])
    ttft = [ref.at(r)["ttft_p90_ms"] for r in rates]
    assert all(a <= b for a, b in zip(ttft, ttft[1:]))
    # Far past the knee the plan says saturated: no planned figure rather than a made-up one.
    assert ref.at(p.rate_rps * 100)["ttft_p90_ms"] is None


def test_measured_slower_than_planned_says_the_plan_was_optimistic(reference):
    w, p, ref_doc = reference
    ref = read_plan_reference(ref_doc)
    rows = load_curve(w, DEP, [0.5, 1.0], ttft_slo_ms=1000, tpot_slo_ms=50, replicas=p.replicas)
    levels = [MeasuredLevel("aiperf", "r.json", f"level {i}", r.rate_rps, r.ttft_p50_ms * 1.5, r.ttft_p90_ms * 1.5,
                            r.tpot_p50_ms, r.tpot_p90_ms, r.rate_rps * 256, 1000)
              for i, r in enumerate(rows.itertuples())]
    doc = check_document(ref, levels)
    assert doc["summary"]["ttft_p90_ms"]["median_ratio"] == pytest.approx(1.5, rel=0.03)
    assert "optimistic" in doc["summary"]["ttft_p90_ms"]["verdict"]
    assert doc["summary"]["tpot_p50_ms"]["verdict"].startswith("on plan")
    assert doc["calibration_hint"]["ttft_ratio"] == pytest.approx(1.5, rel=0.03)
    assert doc["levels"][1]["planned_output_tokens_per_s"] == pytest.approx(p.rate_rps * 256)
    assert verdict(0.5).startswith("plan pessimistic")


def test_log_latencies_per_band_of_request_rate():
    # Two regimes of a served log: 2 req/s with fast answers, then 8 req/s with slow ones.
    rng = np.random.default_rng(1)
    quiet = np.arange(0, 600, 0.5)
    busy = 600 + np.arange(0, 600, 0.125)
    ts = np.r_[quiet, busy]
    ttft = np.r_[rng.normal(200, 10, quiet.size), rng.normal(900, 30, busy.size)]
    frame = pd.DataFrame({"timestamp": pd.to_datetime(ts, unit="s", utc=True), "input_tokens": 1000,
                          "output_tokens": 100, "ttft_ms": ttft, "tpot_ms": 20.0})
    buf = io.BytesIO()
    frame.to_csv(buf, index=False)
    log = load_log(buf.getvalue(), name="served.csv")
    levels = log_levels(log.frame)
    assert len(levels) >= 2
    assert levels[0].rate_rps == pytest.approx(2.0, rel=0.05)
    assert levels[-1].rate_rps == pytest.approx(8.0, rel=0.05)
    assert levels[0].ttft_p50_ms == pytest.approx(200, abs=10)
    assert levels[-1].ttft_p90_ms == pytest.approx(np.percentile(ttft[quiet.size:], 90), rel=0.05)
    assert log_levels(log.frame.drop(columns=["ttft_ms", "tpot_ms"])) == []


def test_a_simulated_run_written_as_aiperf_reads_back_its_own_numbers():
    rng = np.random.default_rng(3)
    n = 500
    run = pd.DataFrame({"arrival_s": np.sort(rng.uniform(0, 100, n)), "input_tokens": rng.integers(100, 4000, n),
                        "output_tokens": rng.integers(10, 500, n), "ttft_ms": rng.gamma(2, 100, n),
                        "itl_ms": rng.normal(25, 3, n)})
    run["e2e_ms"] = run["ttft_ms"] + run["itl_ms"] * (run["output_tokens"] - 1)
    doc = aiperf_export(run)
    (level,) = parse_result(json.dumps(doc).encode(), "sim.json")
    assert level.ttft_p90_ms == pytest.approx(np.percentile(run["ttft_ms"], 90))
    assert level.tpot_p50_ms == pytest.approx(np.percentile(run["itl_ms"], 50))
    span = (run["arrival_s"] + run["e2e_ms"] / 1000).max() - run["arrival_s"].min()
    assert level.rate_rps == pytest.approx(n / span)
    with pytest.raises(ValueError, match="columns"):
        aiperf_export(run.drop(columns=["ttft_ms"]))


def test_check_command_end_to_end(tmp_path, capsys):
    assert main(["config", "--isl", "2048", "--osl", "256", "--rate", "20", "--engine", "vllm",
                 "--layout", "colocated", "--json"]) == 0
    config = json.loads(capsys.readouterr().out)
    plan_file = tmp_path / "plan.json"
    plan_file.write_text(json.dumps(config))
    results = [str(DATA / "aiperf_0.13.0_planned.json"), str(DATA / "guidellm_0.8.1_report.json")]
    assert main(["check", str(plan_file), *results, "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert [row["tool"] for row in doc["levels"]] == ["aiperf", "guidellm", "guidellm"]
    assert doc["plan"]["replicas"] == config["settings"]["pools"]["colocated"]["replicas"]["value"]
    # The curve is the colocated fleet's; the split pools' planned point is named for a disaggregated fleet.
    split = config["plan_reference"]["disaggregated_point"]
    assert any(f"{split['prefill_replicas']} prefill + {split['decode_replicas']} decode" in n for n in doc["notes"])
    assert main(["check", str(plan_file), *results]) == 0
    text = capsys.readouterr().out
    assert "TTFT p90" in text and "aiperf" in text
    # A folder of aiperf artifacts works as well as its summary file.
    folder = tmp_path / "aiperf-planned"
    folder.mkdir()
    (folder / "profile_export_aiperf.json").write_bytes((DATA / "aiperf_0.13.0_planned.json").read_bytes())
    assert len(read_results([folder])) == 1
    # aiperf's per-request records, as a file or as the only export of a folder, are read as well.
    records = tmp_path / "aiperf-records"
    records.mkdir()
    (records / "profile_export.jsonl").write_bytes((DATA / "aiperf_0.13.0_records.jsonl").read_bytes())
    assert main(["check", str(plan_file), str(records / "profile_export.jsonl"), str(records), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert [row["tool"] for row in doc["levels"]] == ["aiperf", "aiperf"]
    assert all(row["requests"] == 33 for row in doc["levels"])


def test_check_accepts_a_plan_json_point_and_refuses_junk(tmp_path, capsys):
    assert main(["plan", "--isl", "2048", "--osl", "256", "--rate", "2", "--json"]) == 0
    plan_file = tmp_path / "plan_point.json"
    plan_file.write_text(capsys.readouterr().out)
    assert main(["check", str(plan_file), str(DATA / "aiperf_0.13.0_planned.json"), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["plan"]["point_only"] is True and any("one point" in n for n in doc["notes"])
    junk = tmp_path / "junk.json"
    junk.write_text('{"x": 1}')
    assert main(["check", str(junk), str(DATA / "aiperf_0.13.0_planned.json")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "not a shapeviz plan" in err
    assert main(["check", str(plan_file), str(junk)]) == 2
    assert "neither an aiperf" in capsys.readouterr().err
    assert main(["check", str(plan_file)]) == 2
    assert "no measured levels" in capsys.readouterr().err
