"""``check``'s verdict over every measured level: met, missed, or unknown, and a miss says "missed" even beside a
level whose p90 is unknown (only the "met" and "unknown" branches were tested: a miss read as "unknown" passed).

The plan is ``config --json`` for the real aiperf 0.13.0 run's workload (2 req/s, lenient TPOT class), as in
``security/test_hostile_files.py``; the results are that run's summary with its TTFT p90 set.
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from shapeviz.cli import main

AIPERF = Path(__file__).resolve().parents[1] / "data" / "measured" / "aiperf_0.13.0_planned.json"


def _result(tmp_path: Path, name: str, ttft_p90: str) -> Path:
    doc = json.loads(AIPERF.read_text())
    doc["time_to_first_token"]["p90"] = "__P90__"
    path = tmp_path / name
    path.write_text(json.dumps(doc).replace('"__P90__"', ttft_p90))
    return path


def _check(capsys, plan: Path, *results: Path) -> tuple[bool | None, str]:
    main(["check", str(plan), *map(str, results), "--json"])
    verdict = json.loads(capsys.readouterr().out)["meets_slo_at_every_level"]
    main(["check", str(plan), *map(str, results)])
    return verdict, capsys.readouterr().out


def test_a_level_over_its_ttft_class_is_a_missed_verdict(plan_file, tmp_path, capsys):
    verdict, text = _check(capsys, plan_file, _result(tmp_path, "slow.json", "600000"))   # ten minutes to a token
    assert verdict is False
    assert "the fleet missed a p90 SLO at some measured level" in text and "unknown whether" not in text


def test_a_miss_beside_a_level_of_unknown_p90_is_still_a_miss(plan_file, tmp_path, capsys):
    verdict, text = _check(capsys, plan_file, _result(tmp_path, "unknown.json", "Infinity"),
                           _result(tmp_path, "slow.json", "600000"))
    assert verdict is False
    assert "the fleet missed a p90 SLO at some measured level" in text and "unknown whether" not in text
