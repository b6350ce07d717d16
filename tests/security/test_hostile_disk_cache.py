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
    return folder / f"generated-{disk_cache.key_of('generated', *DEMO_PARTS)}{disk_cache.ENTRY_SUFFIX}"


def _signed(folder: Path, payload: bytes) -> bytes:
    """An entry file as this server would sign it (the probe as if it held the key)."""
    key = disk_cache._signing_key(folder)
    return disk_cache.MAGIC + disk_cache._signature(key, _entry(folder).name, payload) + payload


def test_a_pickle_planted_at_the_demos_key_never_runs(folder, tmp_path):
    folder.mkdir(mode=0o700)
    marker = tmp_path / "created-by-the-payload"
    # even signed with the server's own key: the cache reads JSON and Parquet only, never a pickle
    _entry(folder).write_bytes(_signed(folder, pickle.dumps(_Touch(marker))))
    old = folder / f"generated-{disk_cache.key_of('generated', *DEMO_PARTS)}.pickle"   # an older version's entry
    old.write_bytes(pickle.dumps(_Touch(marker)))
    compute, calls = _demo_like()
    log, digest = disk_cache.cached("generated", DEMO_PARTS, compute)
    assert not marker.exists()
    assert digest == "gen-demo-0" and calls == [1] and not old.exists()   # deleted unread
    # the planted file is gone: the entry there now is the server's own, read back by the next visitor
    assert disk_cache.cached("generated", DEMO_PARTS, compute)[1] == "gen-demo-0" and calls == [1]
    assert not marker.exists()


def test_an_entry_the_server_did_not_sign_is_not_served(folder):
    compute, calls = _demo_like()
    disk_cache.cached("generated", DEMO_PARTS, compute)
    entry = _entry(folder)
    payload = entry.read_bytes()[len(disk_cache.MAGIC) + 32:].replace(b"gen-demo-0", b"gen-evil-0")
    entry.write_bytes(disk_cache.MAGIC + bytes(32) + payload)   # well formed, but signed by nobody
    assert disk_cache.cached("generated", DEMO_PARTS, compute)[1] == "gen-demo-0" and calls == [1, 1]


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


# signed, well-formed entries whose document is not a generated log: each is a bad entry
WRONG = {
    "an-int": lambda doc: 7,
    "a-digest-that-is-a-number": lambda doc: doc | {"digest": 7},
    "a-report-field-of-the-wrong-type": lambda doc: doc | {
        "log": doc["log"] | {"report": doc["log"]["report"] | {"source": 7}}},
}


@pytest.mark.parametrize("wrong", list(WRONG))
def test_a_signed_entry_of_the_wrong_type_is_deleted_not_served(folder, wrong):
    compute, calls = _demo_like()
    log, _ = disk_cache.cached("generated", DEMO_PARTS, compute)
    dump = disk_cache.KINDS["generated"].dump
    forged = disk_cache.Kind(lambda value, frames: WRONG[wrong](dump(value, frames)), None)
    disk_cache._write(folder, _entry(folder), disk_cache._signing_key(folder), forged, (log, "gen-demo-0"))
    log, digest = disk_cache.cached("generated", DEMO_PARTS, compute)
    assert digest == "gen-demo-0" and log.report.source == "demo.csv" and calls == [1, 1]
    assert disk_cache.cached("generated", DEMO_PARTS, compute)[1] == "gen-demo-0" and calls == [1, 1]
