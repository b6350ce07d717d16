"""The demo's disk cache: a restarted server reads what an earlier one computed, and never serves a stale result."""
from __future__ import annotations

import pytest

from components import disk_cache


@pytest.fixture
def folder(tmp_path, monkeypatch):
    monkeypatch.setenv(disk_cache.ENV, str(tmp_path / "cache"))
    monkeypatch.setenv(disk_cache.KEY_ENV, str(tmp_path / "key" / "cache.key"))
    # the test's kinds hold plain values: what each must be once read back
    monkeypatch.setitem(disk_cache.EXPECTED, "analysis", lambda v: isinstance(v, (dict, str)))
    monkeypatch.setitem(disk_cache.EXPECTED, "plane", lambda v: isinstance(v, int))
    return tmp_path / "cache"


def _counting(value):
    calls = []

    def compute():
        calls.append(1)
        return value
    return compute, calls


def test_a_result_is_computed_once_and_then_read_from_disk(folder):
    compute, calls = _counting({"analysis": [1, 2, 3]})
    assert disk_cache.cached("analysis", ("gen-demo-abc", (4096, 1024, 48)), compute) == {"analysis": [1, 2, 3]}
    assert disk_cache.cached("analysis", ("gen-demo-abc", (4096, 1024, 48)), compute) == {"analysis": [1, 2, 3]}
    assert len(calls) == 1 and len(list(folder.glob("analysis-*.pickle"))) == 1
    # other parameters (or another dataset's content) are another entry
    disk_cache.cached("analysis", ("gen-demo-abc", (8192, 1024, 48)), compute)
    assert len(calls) == 2


def test_new_code_never_reads_an_old_result(folder, monkeypatch):
    compute, calls = _counting(1)
    disk_cache.cached("plane", ("d",), compute)
    monkeypatch.setattr(disk_cache, "code_digest", lambda: "another-version")
    disk_cache.cached("plane", ("d",), compute)
    assert len(calls) == 2


def test_a_broken_entry_or_an_unwritable_folder_only_costs_the_computation(folder, tmp_path, monkeypatch):
    compute, calls = _counting("fresh")
    disk_cache.cached("analysis", ("x",), compute)
    (entry,) = folder.glob("analysis-*.pickle")
    entry.write_bytes(b"not a pickle")
    assert disk_cache.cached("analysis", ("x",), compute) == "fresh" and len(calls) == 2
    # replaced by a good one (the test pinned a bare pickle before; entries are signed now, issue 30)
    assert disk_cache.cached("analysis", ("x",), compute) == "fresh" and len(calls) == 2
    blocked = tmp_path / "file"
    blocked.write_text("a file where the folder should be")
    monkeypatch.setenv(disk_cache.ENV, str(blocked / "cache"))
    assert disk_cache.cached("analysis", ("y",), compute) == "fresh"


def test_off_turns_it_off_and_the_folder_stays_bounded(folder, monkeypatch):
    monkeypatch.setenv(disk_cache.ENV, "off")
    compute, calls = _counting(0)
    disk_cache.cached("plane", ("d",), compute)
    disk_cache.cached("plane", ("d",), compute)
    assert len(calls) == 2 and not folder.exists()
    monkeypatch.setenv(disk_cache.ENV, str(folder))
    monkeypatch.setattr(disk_cache, "MAX_ENTRIES", 3)
    for i in range(5):
        disk_cache.cached("plane", (i,), compute)
    assert len(list(folder.glob("*.pickle"))) == 3
