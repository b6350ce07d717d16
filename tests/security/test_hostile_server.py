"""Issue 30, rows 8 and 10 on the dashboard, and the server-path option: no traceback, no raw table export, no walk
of the disk outside the allowed roots."""
from __future__ import annotations

import glob
import tomllib
from pathlib import Path

import pytest

from shapeviz.ingest.roots import resolve_server_paths

CONFIG = Path(__file__).resolve().parents[2] / ".streamlit" / "config.toml"


def _client() -> dict:
    return tomllib.loads(CONFIG.read_text())["client"]


def test_an_unexpected_error_shows_no_traceback_in_the_browser():
    # "none": Streamlit shows one generic line; the type, message and traceback (with server paths) go to the log
    assert _client().get("showErrorDetails") == "none"


def test_streamlits_own_table_download_is_off():
    # its CSV export writes cells raw (=HYPERLINK(...) runs in a spreadsheet); the pages' CSV buttons guard them
    assert _client().get("disableDataExport") is True


@pytest.fixture
def root(tmp_path):
    logs = tmp_path / "logs"
    logs.mkdir()
    for name in ("a.csv", "b.csv"):
        (logs / name).write_text("input_tokens,output_tokens\n10,5\n")
    return logs.resolve()


@pytest.mark.parametrize("pattern", ["/*/*/*/*", "/etc/*", "/**/*.csv"])
def test_an_absolute_glob_outside_the_roots_is_refused_before_walking(root, monkeypatch, pattern):
    walked = []
    monkeypatch.setattr(glob, "iglob", lambda *a, **k: walked.append(a) or iter(()))
    monkeypatch.setattr(glob, "glob", lambda *a, **k: walked.append(a) or [])
    with pytest.raises(ValueError, match="outside the allowed roots"):
        resolve_server_paths(pattern, [root])
    assert walked == []


def test_an_absolute_glob_inside_a_root_still_works(root):
    assert [p.name for p in resolve_server_paths(str(root / "*.csv"), [root])] == ["a.csv", "b.csv"]


def test_an_unreadable_match_is_skipped_not_fatal(root, monkeypatch):
    real = Path.resolve

    def resolve(self, *args, **kwargs):
        if self.name == "a.csv":
            raise PermissionError(13, "Permission denied", str(self))
        return real(self, *args, **kwargs)
    monkeypatch.setattr(Path, "resolve", resolve)
    assert [p.name for p in resolve_server_paths("*.csv", [root])] == ["b.csv"]
