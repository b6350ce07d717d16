"""Issue 30, rows 4-8 and 11: fleet, plan and result files from strangers get one short line or the right answer."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from shapeviz.cli import main
from shapeviz.fleet.pools import MAX_REPLICAS, load_fleet
from shapeviz.ingest.documents import MAX_DEPTH, parse_json
from shapeviz.outputs.measured import parse_result

MEASURED = Path(__file__).resolve().parents[1] / "data" / "measured"
AIPERF = MEASURED / "aiperf_0.13.0_planned.json"    # a real aiperf 0.13.0 summary (poisson 2 req/s)
# ~350 bytes: nine levels of nine aliases each, a billion strings once expanded
ALIAS_BOMB = "a: &a [" + ",".join(['"lol"'] * 9) + "]\n" + "".join(
    f"{n}: &{n} [" + ",".join([f"*{p}"] * 9) + "]\n" for p, n in zip("abcdefgh", "bcdefghi")) + "pools: *i\n"


@pytest.mark.parametrize("replicas", ["1e12", "1e300", "Infinity", "-Infinity", "NaN"])
def test_a_fleet_with_absurd_replicas_is_refused_in_one_line(tmp_path, replicas):
    path = tmp_path / "fleet.json"
    path.write_text('{"pools": [{"name": "chat", "replicas": %s}]}' % replicas)
    with pytest.raises(ValueError) as refused:
        load_fleet(path)
    message = str(refused.value)
    assert "pools[0].replicas" in message and f"{MAX_REPLICAS:,}" in message and "\n" not in message


def test_a_yaml_alias_bomb_is_refused_before_it_is_built(tmp_path):
    path = tmp_path / "fleet.yaml"
    path.write_text(ALIAS_BOMB)
    assert len(ALIAS_BOMB) < 400
    with pytest.raises(ValueError, match="aliases expand to more than") as refused:
        load_fleet(path)
    assert len(str(refused.value)) < 200


def test_a_huge_value_is_quoted_short_in_the_error(tmp_path):
    path = tmp_path / "fleet.json"
    path.write_text(json.dumps({"pools": [{"name": "chat", "router": "x" * 1_000_000}]}))
    with pytest.raises(ValueError, match="router must be one of") as refused:
        load_fleet(path)
    assert len(str(refused.value)) < 300


def _aiperf_with(tmp_path: Path, metric: str, key: str, value: str | None) -> Path:
    text = AIPERF.read_text()
    doc = json.loads(text)
    if value is None:
        del doc[metric][key]
        out = json.dumps(doc)
    else:
        doc[metric][key] = "__VALUE__"
        out = json.dumps(doc).replace('"__VALUE__"', value)
    path = tmp_path / f"{metric}-{key}.json"
    path.write_text(out)
    return path


def test_the_real_run_meets_the_lenient_plan(plan_file, capsys):
    assert main(["check", str(plan_file), str(AIPERF)]) == 0
    assert "the fleet met both p90 SLOs at every measured level" in capsys.readouterr().out


@pytest.mark.parametrize("metric", ["time_to_first_token", "inter_token_latency"])
@pytest.mark.parametrize("value", [None, "Infinity", "NaN"])
def test_check_says_unknown_when_a_p90_is_missing_or_not_finite(plan_file, tmp_path, capsys, metric, value):
    result = _aiperf_with(tmp_path, metric, "p90", value)
    assert main(["check", str(plan_file), str(result), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["meets_slo_at_every_level"] is None
    assert main(["check", str(plan_file), str(result)]) == 0
    text = capsys.readouterr().out
    assert "met both p90 SLOs" not in text and "unknown whether the fleet met its p90 SLOs" in text


def test_check_refuses_a_negative_latency(plan_file, tmp_path, capsys):
    result = _aiperf_with(tmp_path, "time_to_first_token", "p50", "-100")
    assert main(["check", str(plan_file), str(result)]) == 2
    captured = capsys.readouterr()
    assert "faster" not in captured.out and captured.err.count("\n") == 1
    assert "cannot be negative" in captured.err


def test_a_plan_with_a_400_digit_integer_is_refused_in_one_line(plan_file, tmp_path, capsys):
    doc = json.loads(plan_file.read_text())
    doc["plan_reference"]["rate_rps"] = "__BIG__"
    bad = tmp_path / "plan.json"
    bad.write_text(json.dumps(doc).replace('"__BIG__"', "9" * 400))
    assert main(["check", str(bad), str(AIPERF)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "400 digits" in err and len(err) < 300


def test_a_plan_nested_100k_deep_is_refused_in_one_line(tmp_path, capsys):
    bad = tmp_path / "plan.json"
    bad.write_text('{"plan": ' + "[" * 100_000 + "]" * 100_000 + "}")
    assert main(["check", str(bad), str(AIPERF)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"nested more than {MAX_DEPTH} levels" in err


def test_nesting_is_measured_whatever_the_parser_allows():
    with pytest.raises(ValueError, match="nested more than"):
        parse_json("[" * (MAX_DEPTH + 5) + "]" * (MAX_DEPTH + 5), "plan.json")


def test_a_result_with_a_400_digit_integer_reads_as_no_number():
    doc = json.loads(AIPERF.read_text())
    text = json.dumps(doc).replace(json.dumps(doc["request_throughput"]["avg"]), "9" * 400, 1)
    (level,) = parse_result(text.encode(), "profile_export_aiperf.json")
    assert level.rate_rps is None and level.ttft_p90_ms == pytest.approx(doc["time_to_first_token"]["p90"])


def test_control_characters_in_product_names_never_reach_the_terminal(tmp_path, capsys):
    rows = [{"input_tokens": 1000 + i, "output_tokens": 200 + i,
             "product": "\x1b]0;owned\x07\x1b[31mred\x9b2J" if i % 2 else "chat"} for i in range(200)]
    log = tmp_path / "log.json"
    log.write_text(json.dumps(rows))
    assert main(["summary", str(log)]) == 0
    out = capsys.readouterr().out
    assert "red" in out   # the name is there, its control characters are not
    assert not any(c in out for c in "\x1b\x07\x9b")
