"""The disk cache binds an entry to its name, and reads a typed field only from the container its type declares.

A validly signed entry copied under another key (another seed's demo, another log's analysis) must not be served
for it: the signature covers the file name. A signed entry whose list field holds a dict or a text (whose
items would read as the dict's keys or the text's characters) is a bad entry: deleted and recomputed, not served.
"""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from components import disk_cache
from shapeviz.ingest import load_log

PARTS = ("demo", 0, 100, 50)
OTHER = ("demo", 1, 100, 50)   # another seed: another entry name


@pytest.fixture
def folder(tmp_path, monkeypatch):
    monkeypatch.setenv(disk_cache.ENV, str(tmp_path / "cache"))
    monkeypatch.setenv(disk_cache.KEY_ENV, str(tmp_path / "config" / "cache.key"))
    return tmp_path / "cache"


def _entry(folder: Path, parts: tuple) -> Path:
    return folder / f"generated-{disk_cache.key_of('generated', *parts)}{disk_cache.ENTRY_SUFFIX}"


def _log(digest: str, calls: list[str]):
    def compute():
        calls.append(digest)
        return load_log(b"input_tokens,output_tokens\n100,20\n", name=f"{digest}.csv"), digest
    return compute


def test_a_signed_entry_moved_under_another_name_is_not_served_for_it(folder):
    calls: list[str] = []
    assert disk_cache.cached("generated", PARTS, _log("seed-0", calls))[1] == "seed-0"
    shutil.copy2(_entry(folder, PARTS), _entry(folder, OTHER))   # signed by this server, under another key
    log, digest = disk_cache.cached("generated", OTHER, _log("seed-1", calls))
    assert digest == "seed-1" and log.report.source == "seed-1.csv"
    assert calls == ["seed-0", "seed-1"]
    # the original entry still reads back under its own name
    assert disk_cache.cached("generated", PARTS, _log("seed-0", calls))[1] == "seed-0" and len(calls) == 2


# signed, well-formed entries whose report holds a typed field in the wrong container
WRONG = {
    "notes (a list) as a dict": lambda report: report | {"notes": {"planted": "note"}},
    "notes (a list) as text": lambda report: report | {"notes": "planted"},
    "dropped (a dict) as a list": lambda report: report | {"dropped": [["planted", 1]]},
    "mapping (a dict) as text": lambda report: report | {"mapping": "planted"},
}


@pytest.mark.parametrize("wrong", list(WRONG))
def test_a_typed_field_in_the_wrong_container_is_deleted_not_served(folder, wrong):
    calls: list[str] = []
    log, _ = disk_cache.cached("generated", PARTS, _log("seed-0", calls))
    dump = disk_cache.KINDS["generated"].dump

    def forge(value, frames):
        doc = dump(value, frames)
        doc["log"]["report"] = WRONG[wrong](doc["log"]["report"])
        return doc

    disk_cache._write(folder, _entry(folder, PARTS), disk_cache._signing_key(folder), disk_cache.Kind(forge, None),
                      (log, "seed-0"))
    log, digest = disk_cache.cached("generated", PARTS, _log("seed-0", calls))
    assert calls == ["seed-0", "seed-0"]   # recomputed, not read
    assert log.report.notes == [] and log.report.dropped == {} and isinstance(log.report.mapping, dict)


@pytest.mark.parametrize("word", ["off", "OFF", "none", "0", "false", "False", " off "])
def test_each_off_word_turns_the_cache_off(folder, monkeypatch, word):
    monkeypatch.setenv(disk_cache.ENV, word)
    calls: list[str] = []
    disk_cache.cached("generated", PARTS, _log("seed-0", calls))
    disk_cache.cached("generated", PARTS, _log("seed-0", calls))
    assert disk_cache.cache_dir() is None and calls == ["seed-0", "seed-0"] and not folder.exists()
