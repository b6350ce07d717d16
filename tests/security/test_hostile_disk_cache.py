"""Issue 30, rows 1-3: the demo's disk cache never runs a planted file and never serves a wrong value."""
from __future__ import annotations

import os
import pickle
from pathlib import Path

import pytest

from components import data, disk_cache
from shapeviz.ingest import load_log

DEMO_PARTS = ("demo", 0, data.DEMO_REQUESTS, data.SCENARIO_REQUESTS)   # what components.data caches the demo under


class _Touch:
    """A pickle that creates a file when loaded: the probe's payload."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (Path.touch, (self.marker,))


@pytest.fixture
def folder(tmp_path, monkeypatch):
    monkeypatch.setenv(disk_cache.ENV, str(tmp_path / "cache"))
    monkeypatch.setenv(disk_cache.KEY_ENV, str(tmp_path / "config" / "cache.key"))
    return tmp_path / "cache"


def _demo_like():
    calls = []

    def compute():
        calls.append(1)
        return load_log(b"input_tokens,output_tokens\n100,20\n", name="demo.csv"), "gen-demo-0"
    return compute, calls


def _entry(folder: Path) -> Path:
    return folder / f"generated-{disk_cache.key_of('generated', *DEMO_PARTS)}.pickle"


def test_a_pickle_planted_at_the_demos_key_never_runs(folder, tmp_path):
    folder.mkdir(mode=0o700)
    marker = tmp_path / "created-by-the-payload"
    _entry(folder).write_bytes(pickle.dumps(_Touch(marker)))
    compute, calls = _demo_like()
    log, digest = disk_cache.cached("generated", DEMO_PARTS, compute)
    assert not marker.exists()
    assert digest == "gen-demo-0" and calls == [1]
    # the planted file is gone: the entry there now is the server's own, read back by the next visitor
    assert disk_cache.cached("generated", DEMO_PARTS, compute)[1] == "gen-demo-0" and calls == [1]


def test_a_folder_others_can_write_is_not_used(folder, tmp_path):
    folder.mkdir()
    folder.chmod(0o777)
    compute, calls = _demo_like()
    disk_cache.cached("generated", DEMO_PARTS, compute)
    disk_cache.cached("generated", DEMO_PARTS, compute)
    assert calls == [1, 1] and list(folder.iterdir()) == []


def test_a_key_kept_inside_the_cache_folder_is_refused(folder, monkeypatch):
    monkeypatch.setenv(disk_cache.KEY_ENV, str(folder / "cache.key"))
    compute, calls = _demo_like()
    disk_cache.cached("generated", DEMO_PARTS, compute)
    disk_cache.cached("generated", DEMO_PARTS, compute)
    assert calls == [1, 1] and not (folder / "cache.key").exists()


def test_the_cache_folder_is_created_private(folder):
    compute, _ = _demo_like()
    disk_cache.cached("generated", DEMO_PARTS, compute)
    assert folder.stat().st_mode & 0o777 == 0o700
    assert Path(os.environ[disk_cache.KEY_ENV]).stat().st_mode & 0o777 == 0o600


def test_a_signed_entry_of_the_wrong_type_is_deleted_not_served(folder):
    compute, calls = _demo_like()
    disk_cache.cached("generated", DEMO_PARTS, compute)
    path = _entry(folder)
    key = disk_cache._signing_key(folder)
    disk_cache._write(folder, path, key, "generated", 7)   # signed, well formed, but an int
    log, digest = disk_cache.cached("generated", DEMO_PARTS, compute)
    assert digest == "gen-demo-0" and calls == [1, 1]
    assert disk_cache.cached("generated", DEMO_PARTS, compute)[1] == "gen-demo-0" and calls == [1, 1]
