"""Server-side logs only under the operator's allowed roots: globs, folders, and every way out refused."""
from __future__ import annotations

import os

import pytest

from shapeviz.ingest.roots import ROOTS_ENV, allowed_roots, resolve_server_paths


@pytest.fixture
def tree(tmp_path):
    root = tmp_path / "logs"
    (root / "may").mkdir(parents=True)
    for name in ("a.csv", "b.csv", "c.parquet", ".hidden.csv"):
        (root / "may" / name).write_text("input_tokens,output_tokens\n1,2\n")
    secret = tmp_path / "secret"
    secret.mkdir()
    (secret / "passwd.csv").write_text("x\n")
    (root / "may" / "escape.csv").symlink_to(secret / "passwd.csv")
    return root, secret


def test_roots_come_from_the_environment_and_the_app_config_and_must_exist(tree, monkeypatch):
    root, secret = tree
    monkeypatch.setenv(ROOTS_ENV, os.pathsep.join([str(root), str(root / "missing")]))
    assert allowed_roots() == [root.resolve()]
    assert allowed_roots(env="", configured=[str(secret)]) == [secret.resolve()]
    assert allowed_roots(env="") == []


def test_globs_folders_and_files_under_a_root(tree):
    root, _ = tree
    roots = [root.resolve()]
    assert [p.name for p in resolve_server_paths("may/*.csv", roots)] == ["a.csv", "b.csv"]
    assert [p.name for p in resolve_server_paths("may", roots)] == ["a.csv", "b.csv", "c.parquet"]
    assert [p.name for p in resolve_server_paths(str(root / "may" / "c.parquet"), roots)] == ["c.parquet"]


@pytest.mark.parametrize("pattern, message", [
    ("../secret/passwd.csv", "'..' is not allowed"),
    ("may/escape.csv", "no log file matches"),          # a symlink out of the root
    ("s3://bucket/logs/*.parquet", "not URLs"),
    ("", "give a file, folder or glob"),
    ("nothing/*.csv", "no log file matches"),
])
def test_every_way_out_of_the_roots_is_refused(tree, pattern, message):
    root, secret = tree
    with pytest.raises(ValueError, match=message):
        resolve_server_paths(pattern, [root.resolve()])


def test_an_absolute_path_elsewhere_is_refused(tree):
    root, secret = tree
    # refused before anything is listed (issue 30; this pinned "no log file matches", said after walking)
    with pytest.raises(ValueError, match="outside the allowed roots"):
        resolve_server_paths(str(secret / "passwd.csv"), [root.resolve()])
    with pytest.raises(ValueError, match="outside the allowed roots"):
        resolve_server_paths("/etc/*", [root.resolve()])


def test_without_roots_the_option_is_off_and_a_huge_glob_is_refused(tree):
    root, _ = tree
    with pytest.raises(ValueError, match="operator has set no allowed roots"):
        resolve_server_paths("may/*.csv", [])
    with pytest.raises(ValueError, match="more than 2"):
        resolve_server_paths("may/*", [root.resolve()], max_files=2)
