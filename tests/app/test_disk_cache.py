"""The demo's disk cache: a restarted server reads what an earlier one computed, and never serves a stale result."""
from __future__ import annotations

from typing import Any

import pytest

from components import disk_cache
from shapeviz.plain import from_plain, to_plain


def _plain_kind(hint: Any) -> disk_cache.Kind:
    """A kind whose values are of type ``hint``, stored through ``shapeviz.plain``."""
    return disk_cache.Kind(lambda value, frames: to_plain(hint, value, frames),
                           lambda doc, frames: from_plain(hint, doc, frames))


@pytest.fixture
def folder(tmp_path, monkeypatch):
    monkeypatch.setenv(disk_cache.ENV, str(tmp_path / "cache"))
    monkeypatch.setenv(disk_cache.KEY_ENV, str(tmp_path / "key" / "cache.key"))
    # the test's kinds hold plain values: how each is stored, and what it must be once read back
    monkeypatch.setitem(disk_cache.KINDS, "analysis", _plain_kind(Any))
    monkeypatch.setitem(disk_cache.KINDS, "plane", _plain_kind(int))
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
    assert len(calls) == 1 and len(list(folder.glob("analysis-*.entry"))) == 1
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
    (entry,) = folder.glob("analysis-*.entry")
    entry.write_bytes(b"not an entry")
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
    assert len(list(folder.glob("*.entry"))) == 3


def test_the_demos_log_analysis_and_plane_read_back_as_computed(tmp_path, monkeypatch):
    """Each kind's plain form (JSON and Parquet, no pickle) gives back what the first page computed."""
    import json

    import pandas as pd

    from components import context, data
    from shapeviz.analysis import analyze
    from shapeviz.outputs.summary import summary_document
    from shapeviz.physics import default_deployment

    monkeypatch.setenv(disk_cache.ENV, str(tmp_path / "cache"))
    monkeypatch.setenv(disk_cache.KEY_ENV, str(tmp_path / "key" / "cache.key"))
    log, digest = data._generate("demo", 0)
    analysis = analyze(log)
    plane = context._plane((4096, 1024, 48), default_deployment(), 0.0, 50.0, log)
    values = {"generated": (log, digest), "analysis": analysis, "plane": plane}
    read = {}
    for kind, value in values.items():
        disk_cache.cached(kind, ("d",), lambda value=value: value)
        read[kind] = disk_cache.cached(kind, ("d",), lambda: pytest.fail(f"the {kind} was not read from disk"))
    pd.testing.assert_frame_equal(read["generated"][0].frame, log.frame)
    assert read["generated"][0].report == log.report and read["generated"][1] == digest
    # every field, the cluster labels of every row included, and the summary --json document built from it
    assert json.dumps(read["analysis"].to_plain([])) == json.dumps(analysis.to_plain([]))
    assert (read["analysis"].clusters.labels == analysis.clusters.labels).all()
    assert read["analysis"].clusters.product_mix == analysis.clusters.product_mix   # keyed by cluster id (int)
    assert json.dumps(summary_document(read["analysis"])) == json.dumps(summary_document(analysis))
    figure, p50, colors = read["plane"]
    assert figure.to_json() == plane[0].to_json() and colors == plane[2]
    pd.testing.assert_frame_equal(p50, plane[1])
