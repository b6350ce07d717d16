"""Progress of long work: the stages a user waits through, on the command line and from the model layer."""
from __future__ import annotations

import io
import os
import pty
import subprocess
import sys
from pathlib import Path

from shapeviz.analysis import analyze
from shapeviz.ingest import load_log
from shapeviz.progress import ANALYSIS_STAGES, TerminalBar, terminal_bar
from shapeviz.workload.sketch import sketch_log

ROOT = Path(__file__).resolve().parents[2]
MOONCAKE = "mooncake_fast25/conversation_trace.jsonl.gz"


class Heard:
    """A listener that keeps what it heard."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str, float | None]] = []

    def __call__(self, stage: str, detail: str = "", fraction: float | None = None) -> None:
        self.calls.append((stage, detail, fraction))


def test_analysis_reports_every_stage_in_order_with_the_request_count(trace) -> None:
    log = load_log(trace(MOONCAKE))
    heard = Heard()
    analyze(log, progress=heard)
    assert [stage for stage, _, _ in heard.calls] == list(ANALYSIS_STAGES)
    assert all(detail == "12,031 requests" for _, detail, _ in heard.calls)   # SOURCE.md: 12,031 requests
    fractions = [f for _, _, f in heard.calls]
    assert fractions == sorted(fractions) and all(0.0 <= f < 1.0 for f in fractions)


def test_reading_reports_the_rows_read_so_far(trace) -> None:
    heard = Heard()
    sketched = sketch_log(trace(MOONCAKE), progress=heard)
    rows = [int(detail.split()[0].replace(",", "")) for stage, detail, _ in heard.calls if stage == "reading"]
    assert rows and rows == sorted(rows) and rows[-1] == sketched.report.rows_read == 12_031


def test_the_terminal_bar_redraws_one_line_and_clears_it() -> None:
    out = io.StringIO()
    bar = TerminalBar(out)
    bar("clusters", "1,000 requests", 0.5)
    bar("reading", "10 rows", None)
    bar.close()
    text = out.getvalue()
    assert "\n" not in text   # one line, redrawn in place
    assert "[" + "#" * 12 + "-" * 12 + "] clusters: 1,000 requests" in text
    assert "reading: 10 rows" in text and text.endswith("\r\x1b[2K")
    assert terminal_bar(io.StringIO()) is None   # not a terminal: nothing is drawn


def test_summary_draws_the_bar_on_a_terminal_and_never_into_a_pipe(trace) -> None:
    path = str(trace(MOONCAKE))
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    piped = subprocess.run([sys.executable, "-m", "shapeviz", "summary", path], cwd=ROOT, env=env,
                           capture_output=True, text=True, timeout=300)
    assert piped.returncode == 0 and piped.stderr == ""
    pid, fd = pty.fork()
    if pid == 0:   # the child: stdout and stderr are the terminal
        os.chdir(ROOT)
        os.execvpe(sys.executable, [sys.executable, "-m", "shapeviz", "summary", path], env)
    seen = b""
    while True:
        try:
            chunk = os.read(fd, 65536)
        except OSError:
            break
        if not chunk:
            break
        seen += chunk
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    text = seen.decode()
    for stage in ("reading: ", *ANALYSIS_STAGES):
        assert stage in text, stage
    assert "12,031 rows read, 12,031 kept" in text   # and the summary itself follows the cleared bar
