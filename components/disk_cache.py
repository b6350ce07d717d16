"""A disk cache for what every visitor's first page needs: the demo's (and scenarios') log and analysis.

A fresh server otherwise generates the demo and analyses it (clusters, prefix reuse, sessions) before the first
page can settle. Here each result is stored once, under a key that hashes everything it depends on: the code and
data files of ``shapeviz`` (so an upgrade never reads a stale result), the dataset's content digest and the
parameters. Only synthetic data goes to disk: uploads stay in the session's memory, never written anywhere.

The folder is ``SHAPEVIZ_CACHE_DIR`` when the operator sets it (``off`` turns the cache off), else
``$XDG_CACHE_HOME/shapeviz`` (``~/.cache/shapeviz``), holding at most ``MAX_ENTRIES`` entries (the least recently
read go first). A folder that cannot be written, or an entry that cannot be read, only costs the computation: the
cache never fails a page.

Anyone with the source can compute an entry's file name, so an entry is trusted only when it proves the server
wrote it: each file is signed (HMAC-SHA256 over its name and bytes) with a key kept *outside* the cache folder
(``SHAPEVIZ_CACHE_KEY_FILE``, else ``$XDG_CONFIG_HOME/shapeviz/cache.key``, created 0600). The signature is checked
before a byte is unpickled, so a planted or altered file never runs. The folder is created 0700 and refused (the
cache is then off) when it is a symlink, not owned by the server's user, or writable by group or others; the key
file likewise. A loaded value must have the kind's type; a bad entry is deleted, never marked as recently used.
"""
from __future__ import annotations

import contextlib
import hashlib
import hmac
import io
import os
import pickle
import secrets
import stat
import tempfile
from collections.abc import Callable
from functools import lru_cache
from pathlib import Path
from typing import TypeVar

ENV = "SHAPEVIZ_CACHE_DIR"
KEY_ENV = "SHAPEVIZ_CACHE_KEY_FILE"
MAX_ENTRIES = 256   # a deployment or corner change on the demo is a new entry (35 kB analysis, 0.3 MB plane)
MAGIC = b"shapeviz-cache-1\n"
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


def key_file() -> Path:
    """Where the signing key lives: never inside the cache folder."""
    configured = os.environ.get(KEY_ENV, "").strip()
    if configured:
        return Path(configured).expanduser()
    base = os.environ.get("XDG_CONFIG_HOME", "").strip() or str(Path.home() / ".config")
    return Path(base) / "shapeviz" / "cache.key"


def _private(st: os.stat_result, *, kind: int, no_read: bool = False) -> bool:
    """Owned by this process's user, of the right kind, and nobody else can write it (or read it, for a key)."""
    others = 0o077 if no_read else 0o022
    return stat.S_IFMT(st.st_mode) == kind and st.st_uid == os.geteuid() and not st.st_mode & others


def _safe_folder(folder: Path) -> bool:
    """Create the folder 0700 when missing; True only when it is ours alone to write (a symlink is refused)."""
    try:
        folder.parent.mkdir(parents=True, exist_ok=True)
        with contextlib.suppress(FileExistsError):
            folder.mkdir(mode=0o700)
        return _private(os.lstat(folder), kind=stat.S_IFDIR)
    except OSError:
        return False


def _signing_key(folder: Path) -> bytes | None:
    """The key that signs entries, created once (0600); None when it is missing, shared or inside ``folder``."""
    path = key_file()
    try:
        if path.resolve().is_relative_to(folder.resolve()):
            return None   # whoever can write the entries could then write the key
        if not _safe_folder(path.parent):
            return None
        with contextlib.suppress(FileExistsError):
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
            with os.fdopen(fd, "wb") as f:
                f.write(secrets.token_bytes(32))
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
        with os.fdopen(fd, "rb") as f:
            if not _private(os.fstat(f.fileno()), kind=stat.S_IFREG, no_read=True):
                return None
            key = f.read(64)
        return key if len(key) >= 32 else None
    except OSError:
        return None


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


def _is_plane(value: object) -> bool:
    import pandas as pd
    import plotly.graph_objects as go
    return (isinstance(value, tuple) and len(value) == 3 and isinstance(value[0], go.Figure)
            and isinstance(value[1], pd.DataFrame) and isinstance(value[2], dict))


def _is_generated(value: object) -> bool:
    from shapeviz.ingest import LoadedLog
    return (isinstance(value, tuple) and len(value) == 2 and isinstance(value[0], LoadedLog)
            and isinstance(value[1], str))


def _is_analysis(value: object) -> bool:
    from shapeviz.analysis import Analysis
    return isinstance(value, Analysis)


# What each kind of entry must be once loaded: a value of any other type is a bad entry.
EXPECTED: dict[str, Callable[[object], bool]] = {
    "generated": _is_generated, "analysis": _is_analysis, "plane": _is_plane,
}


def _signature(key: bytes, name: str, payload: bytes) -> bytes:
    return hmac.new(key, name.encode() + b"\0" + payload, hashlib.sha256).digest()


def _read(path: Path, key: bytes) -> tuple[bool, object]:
    """(True, value) for an entry this server signed; (False, None) when there is none or it is bad (deleted)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except FileNotFoundError:
        return False, None
    except OSError:
        path.unlink(missing_ok=True)   # a symlink or an unreadable file where an entry should be
        return False, None
    with os.fdopen(fd, "rb") as f:
        blob = f.read()
    head = len(MAGIC) + 32
    if blob[:len(MAGIC)] == MAGIC and hmac.compare_digest(blob[len(MAGIC):head], _signature(key, path.name, blob[head:])):
        with contextlib.suppress(Exception):   # noqa: BLE001 - our own bytes, but from another Python or library
            return True, pickle.loads(blob[head:])   # noqa: S301 - signed by this server, checked above
    return False, None


def cached(kind: str, parts: tuple[object, ...], compute: Callable[[], T],
           expect: Callable[[object], bool] | None = None) -> T:
    """``compute()``, read from the cache folder when it was stored before under the same key, else stored there.

    ``expect`` says whether a loaded value is of the kind's type (default: ``EXPECTED[kind]``; a kind with
    neither is never cached).
    """
    folder = cache_dir()
    expected = expect or EXPECTED.get(kind)
    if folder is None or expected is None or not _safe_folder(folder):
        return compute()
    key = _signing_key(folder)
    if key is None:
        return compute()
    path = folder / f"{kind}-{key_of(kind, *parts)}.pickle"
    found, value = _read(path, key)
    if found and expected(value):
        with contextlib.suppress(OSError):
            os.utime(path, follow_symlinks=False)   # recently read: the last to be pruned
        return value
    path.unlink(missing_ok=True)   # a bad entry goes; it is never refreshed
    value = compute()
    _write(folder, path, key, kind, value)
    return value


def _write(folder: Path, path: Path, key: bytes, kind: str, value: object) -> None:
    tmp: str | None = None
    try:
        buffer = io.BytesIO()
        pickle.dump(value, buffer, protocol=pickle.HIGHEST_PROTOCOL)
        payload = buffer.getvalue()
        # written to a temporary name (created 0600, never an existing file) and renamed: no half entries
        with tempfile.NamedTemporaryFile(dir=folder, prefix=f".{kind}-", suffix=".tmp", delete=False) as f:
            tmp = f.name
            f.write(MAGIC + _signature(key, path.name, payload) + payload)
        os.replace(tmp, path)
        tmp = None
        _prune(folder)
    except (OSError, pickle.PicklingError, TypeError, AttributeError):
        pass   # a read-only or full disk, or a value that does not pickle: returned, just not kept
    finally:
        if tmp is not None:
            Path(tmp).unlink(missing_ok=True)


def _prune(folder: Path) -> None:
    """Keep the ``MAX_ENTRIES`` most recently used entries."""
    entries = sorted(folder.glob("*.pickle"), key=lambda p: p.lstat().st_mtime)
    for old in entries[:max(len(entries) - MAX_ENTRIES, 0)]:
        old.unlink(missing_ok=True)
