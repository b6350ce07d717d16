"""A disk cache for what every visitor's first page needs: the demo's (and scenarios') log and analysis.

A fresh server otherwise generates the demo and analyses it (clusters, prefix reuse, sessions) before the first
page can settle. Here each result is stored once, under a key that hashes everything it depends on: the code and
data files of ``shapeviz`` (so an upgrade never reads a stale result), the dataset's content digest and the
parameters. Only synthetic data goes to disk: uploads stay in the session's memory, never written anywhere.

The folder is ``SHAPEVIZ_CACHE_DIR`` when the operator sets it (``off`` turns the cache off), else
``$XDG_CACHE_HOME/shapeviz`` (``~/.cache/shapeviz``), holding at most ``MAX_ENTRIES`` entries (the least recently
read go first). Entries are pickles the app wrote itself; the folder must be one only the app can write to. A folder that cannot be written, or an entry that cannot be read, only costs the
computation: the cache never fails a page.
"""
from __future__ import annotations

import contextlib
import hashlib
import os
import pickle
import tempfile
from collections.abc import Callable
from functools import lru_cache
from pathlib import Path
from typing import TypeVar

ENV = "SHAPEVIZ_CACHE_DIR"
MAX_ENTRIES = 256   # a deployment or corner change on the demo is a new entry (35 kB analysis, 0.3 MB plane)
ROOT = Path(__file__).resolve().parents[1]
T = TypeVar("T")


def cache_dir() -> Path | None:
    """The cache folder, or None when the operator turned the cache off."""
    configured = os.environ.get(ENV, "").strip()
    if configured.lower() in ("off", "none", "0", "false"):
        return None
    if configured:
        return Path(configured).expanduser()
    base = os.environ.get("XDG_CACHE_HOME", "").strip() or str(Path.home() / ".cache")
    return Path(base) / "shapeviz"


@lru_cache(maxsize=1)
def code_digest() -> str:
    """A digest of every source and data file the results depend on (read once per process, ~1 MB)."""
    h = hashlib.sha256()
    # components/ too: the demo's generation and the plane's balance line are drawn up there
    for folder, pattern in ((ROOT / "shapeviz", "*.py"), (ROOT / "components", "*.py"), (ROOT / "data", "*")):
        for path in sorted(folder.rglob(pattern)):
            if path.is_file() and "__pycache__" not in path.parts:
                h.update(str(path.relative_to(ROOT)).encode())
                h.update(path.read_bytes())
    return h.hexdigest()[:16]


def key_of(*parts: object) -> str:
    """A file-name-safe key for ``parts`` (their ``repr``) under the current code."""
    return hashlib.sha256(repr((code_digest(), *parts)).encode()).hexdigest()[:32]


def cached(kind: str, parts: tuple[object, ...], compute: Callable[[], T]) -> T:
    """``compute()``, read from the cache folder when it was stored before under the same key, else stored there."""
    folder = cache_dir()
    if folder is None:
        return compute()
    path = folder / f"{kind}-{key_of(kind, *parts)}.pickle"
    try:
        with path.open("rb") as f:
            value = pickle.load(f)
        with contextlib.suppress(OSError):
            os.utime(path)   # recently read: the last to be pruned
        return value
    except FileNotFoundError:
        pass
    except Exception:   # noqa: BLE001 - an unreadable entry (another Python, a truncated disk) is computed again
        pass
    value = compute()
    tmp: str | None = None
    try:
        folder.mkdir(parents=True, exist_ok=True)
        # written to a temporary name and renamed: a reader never sees half an entry
        with tempfile.NamedTemporaryFile(dir=folder, prefix=f".{kind}-", suffix=".tmp", delete=False) as f:
            tmp = f.name
            pickle.dump(value, f, protocol=pickle.HIGHEST_PROTOCOL)
        os.replace(tmp, path)
        tmp = None
        _prune(folder)
    except (OSError, pickle.PicklingError, TypeError, AttributeError):
        pass   # a read-only or full disk, or a value that does not pickle: returned, just not kept
    finally:
        if tmp is not None:
            Path(tmp).unlink(missing_ok=True)
    return value


def _prune(folder: Path) -> None:
    """Keep the ``MAX_ENTRIES`` most recently used entries."""
    entries = sorted(folder.glob("*.pickle"), key=lambda p: p.stat().st_mtime)
    for old in entries[:max(len(entries) - MAX_ENTRIES, 0)]:
        old.unlink(missing_ok=True)
