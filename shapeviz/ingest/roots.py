"""Server-side logs: a folder or glob under a root the *operator* allowed, never an arbitrary path.

A dashboard user may point at logs already on the server instead of uploading them, but only inside the allowed
roots the operator configured: the ``SHAPEVIZ_ALLOWED_ROOTS`` environment variable (folders separated by
``os.pathsep``) or ``allowed_roots`` under ``[shapeviz]`` in ``.streamlit/secrets.toml``. With neither, the
option is off. Every match is resolved (symlinks followed) and must still lie inside a root; ``..`` is refused.
"""
from __future__ import annotations

import glob
import os
from pathlib import Path
from typing import Iterable

ROOTS_ENV = "SHAPEVIZ_ALLOWED_ROOTS"
MAX_SERVER_FILES = 500


def allowed_roots(env: str | None = None, configured: Iterable[str] = ()) -> list[Path]:
    """The operator's allowed roots (from ``SHAPEVIZ_ALLOWED_ROOTS`` and the app's secrets), resolved, existing."""
    text = os.environ.get(ROOTS_ENV, "") if env is None else env
    entries = [p for p in text.split(os.pathsep) if p.strip()] + [str(p) for p in configured if str(p).strip()]
    roots: list[Path] = []
    for entry in entries:
        root = Path(entry.strip()).expanduser()
        if root.is_dir():
            resolved = root.resolve()
            if resolved not in roots:
                roots.append(resolved)
    return roots


def _inside(path: Path, roots: list[Path]) -> bool:
    return any(path == root or path.is_relative_to(root) for root in roots)


def _literal_prefix(text: str) -> Path:
    """The leading folders of a pattern before its first glob character (the whole path when it has none)."""
    parts = Path(text).parts
    for i, part in enumerate(parts):
        if any(c in part for c in "*?["):
            return Path(*parts[:i]) if i else Path(".")
    return Path(text)


def resolve_server_paths(pattern: str, roots: list[Path], max_files: int = MAX_SERVER_FILES) -> list[Path]:
    """Files that ``pattern`` (a file, folder or glob; absolute or relative to a root) names inside ``roots``.

    An absolute pattern whose folders before the first glob character lie outside every root is refused before
    anything is listed (``/*/*/*`` never walks the disk); a path that cannot be read is skipped, not fatal; the walk
    stops one match past ``max_files``.
    """
    if not roots:
        raise ValueError(f"reading logs from the server is off: the operator has set no allowed roots ({ROOTS_ENV})")
    text = (pattern or "").strip()
    if not text:
        raise ValueError("give a file, folder or glob under an allowed root, e.g. logs/2024-05-*.parquet")
    if "://" in text:
        raise ValueError(f"{text!r}: only paths on the server under an allowed root, not URLs")
    if ".." in Path(text).parts:
        raise ValueError(f"{text!r}: '..' is not allowed; give a path under an allowed root")
    if Path(text).is_absolute():
        try:
            prefix = _literal_prefix(text).resolve()
        except (OSError, RuntimeError):
            prefix = None
        if prefix is None or not _inside(prefix, roots):
            raise ValueError(f"{text!r} is outside the allowed roots; give a path under one of them")
    bases = [Path(text)] if Path(text).is_absolute() else [root / text for root in roots]
    matches: list[Path] = []
    for base in bases:
        try:
            if any(c in text for c in "*?["):
                found: Iterable[Path] = (Path(p) for p in glob.iglob(str(base)))
            elif base.is_dir():
                found = (p for p in base.iterdir() if not p.name.startswith("."))
            else:
                found = [base] if base.exists() else []
            for path in found:
                try:
                    resolved = path.resolve()
                    # the resolved target must be inside a root: a symlink out of it, or an absolute path elsewhere,
                    # is not
                    if _inside(resolved, roots) and resolved.is_file() and resolved not in matches:
                        matches.append(resolved)
                except (OSError, RuntimeError):
                    continue   # unreadable, or a symlink loop: not a log we can read
                if len(matches) > max_files:
                    raise ValueError(f"{text!r} matches more than {max_files:,} files; narrow the glob")
        except OSError:
            continue   # a folder we may not list
        if matches:
            break
    if not matches:
        raise ValueError(f"{text!r}: no log file matches under the allowed roots")
    return sorted(matches)
