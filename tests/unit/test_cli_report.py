"""``python -m shapeviz report LOG --out DIR``: the files a scheduled weekly report would leave behind."""
from __future__ import annotations

import io
import json
from pathlib import Path

import pandas as pd
import pytest

from shapeviz.cli import main
from shapeviz.ingest import load_log
from shapeviz.outputs import report

AZURE_CONV = "azure_llm_2023/AzureLLMInferenceTrace_conv.csv"
AZURE_CODE = "azure_llm_2023/AzureLLMInferenceTrace_code.csv"
VIDUR = "vidur_arxiv_summarization/arxiv_summarization_stats_llama2_tokenizer_filtered_v2.csv"


def test_report_writes_pngs_csvs_html_and_replay_and_lists_them(trace, chromium, tmp_path: Path, capsys) -> None:  # noqa: ANN001
    out = tmp_path / "weekly"
    code = main(["report", str(trace(AZURE_CONV)), str(trace(AZURE_CODE)), "--out", str(out),
                 "--trim-input", "0.25", "--traffic", "1.5", "--gpu-hour-usd", "3.1",
                 "--method", "analytic"])   # the files, not the sizing (tests/unit/test_sizing.py replays one log)
    captured = capsys.readouterr()
    assert code == 0, captured.err
    listed = [Path(line) for line in captured.out.splitlines()]
    assert listed and all(p.parent == out and p.is_file() for p in listed)
    assert sorted(p.name for p in out.iterdir()) == sorted(p.name for p in listed)
    names = {p.name for p in listed}
    pngs = {n for n in names if n.endswith(".png")}
    csvs = {n for n in names if n.endswith(".csv")}
    assert len(pngs) >= 3 and {"plane.png", "clusters.png", "pressure.png"} <= pngs
    for name in pngs:
        width, _ = report.png_size((out / name).read_bytes())
        assert width == report.PNG_WIDTH * report.PNG_SCALE
    assert len(csvs) >= 3 and {"shapes_per_product.csv", "capacity_plan.csv", "recommendations.csv"} <= csvs
    assert {"report.html", "replay_mooncake.jsonl", "replay_vidur.csv", "README.txt"} <= names
    plan = pd.read_csv(out / "capacity_plan.csv").set_index("figure")
    assert float(plan.loc["price per GPU-hour", "after"]) == pytest.approx(3.1)  # the option reached the plan
    assert float(plan.loc["request rate", "after"]) == pytest.approx(1.5 * float(plan.loc["request rate", "before"]))
    replay = load_log(out / "replay_mooncake.jsonl").frame
    assert len(replay) == 19_366 + 8_819
    assert "input trimmed 25%" in (out / "report.html").read_text(encoding="utf-8")


def test_report_without_timestamps_uses_the_rate_option_and_prints_json(trace, tmp_path: Path, capsys,  # noqa: ANN001
                                                                        monkeypatch) -> None:
    monkeypatch.setenv("BROWSER_PATH", str(tmp_path / "no-browser"))  # no PNGs: the rest must still be written
    out = tmp_path / "vidur"
    code = main(["report", str(trace(VIDUR)), "--out", str(out), "--rate", "5", "--tp", "4", "--json",
                 "--method", "analytic"])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    files = [Path(f) for f in json.loads(captured.out)["files"]]
    assert not any(f.suffix == ".png" for f in files)
    assert "PNG" in captured.err and "chromium" in captured.err  # said once, on stderr
    vidur = pd.read_csv(out / "replay_vidur.csv")
    assert 1.0 / vidur["arrived_at"].diff().dropna().mean() == pytest.approx(5.0, rel=0.05)
    assert "Poisson" in (out / "README.txt").read_text(encoding="utf-8")
    plan = pd.read_csv(io.BytesIO((out / "capacity_plan.csv").read_bytes())).set_index("figure")
    assert float(plan.loc["request rate", "before"]) == pytest.approx(5.0)
    assert "TP 4 per replica" in (out / "report.html").read_text(encoding="utf-8")


@pytest.mark.parametrize("argv_tail, needle", [
    (["missing.csv"], "missing.csv"),
    (["{conv}", "--isl", "1000"], "--isl"),
    (["{conv}", "--gpu", "no-such-gpu"], "no-such-gpu"),
    (["{conv}", "--trim-input", "1.5"], "trim_input"),
])
def test_report_user_errors_exit_2_with_one_line(trace, tmp_path: Path, capsys, argv_tail: list[str],  # noqa: ANN001
                                                 needle: str) -> None:
    conv = str(trace(AZURE_CONV))
    logs = [str(tmp_path / a) if a == "missing.csv" else a.format(conv=conv) for a in argv_tail]
    code = main(["report", *logs, "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert code == 2
    assert len(err.strip().splitlines()) == 1 and needle in err and "Traceback" not in err
    assert not (tmp_path / "out").exists()  # nothing half-written


def test_report_out_must_be_a_folder(trace, tmp_path: Path, capsys) -> None:  # noqa: ANN001
    target = tmp_path / "file.txt"
    target.write_text("not a folder")
    code = main(["report", str(trace(AZURE_CONV)), "--out", str(target)])
    err = capsys.readouterr().err
    assert code == 2 and "is a file" in err and len(err.strip().splitlines()) == 1
    assert target.read_text() == "not a folder"
