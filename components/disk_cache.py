"""A disk cache for what every visitor's first page needs: the demo's (and scenarios') log and analysis.

A fresh server otherwise generates the demo and analyses it (clusters, prefix reuse, sessions) before the first
page can settle. Here each result is stored once, under a key that hashes everything it depends on: the code and
data files of ``shapeviz`` (so an upgrade never reads a stale result), the dataset's content digest and the
parameters. Only synthetic data goes to disk: uploads stay in the session's memory, never written anywhere.

The folder is ``SHAPEVIZ_CACHE_DIR`` when the operator sets it (``off`` turns the cache off), else
``$XDG_CACHE_HOME/shapeviz`` (``~/.cache/shapeviz``), holding at most ``MAX_ENTRIES`` entries (the least recently
read go first). A folder that cannot be written, or an entry that cannot be read, only costs the computation: the
cache never fails a page.

An entry holds data only, never code: a JSON document and the frames it names as Parquet (``ENTRY_SUFFIX``).
Each kind says how its value becomes that data and back (``KINDS``: the log through ``LoadedLog.to_plain``, the
analysis through ``Analysis.to_plain``, the plane's figure through plotly's own JSON), and reading rebuilds only
the declared types, so no file, planted or not, can make the server run anything; nothing here unpickles.
Anyone with the source can compute an entry's file name, so an entry is also trusted only when it proves the
server wrote it: each file is signed (HMAC-SHA256 over its name and bytes) with a key kept *outside* the cache
folder (``SHAPEVIZ_CACHE_KEY_FILE``, else ``$XDG_CONFIG_HOME/shapeviz/cache.key``, created 0600), so a planted
file cannot change what visitors see either. The folder is created 0700 and refused (the cache is then off) when
it is a symlink, not owned by the server's user, or writable by group or others; the key file likewise. An entry
is rebuilt as its kind's type or not at all (that is its type check); a bad entry is deleted, never marked as
recently used. Pickles an older version left in the folder are deleted unread.
"""
from __future__ import annotations

import contextlib
import hashlib
import hmac
import io
import json
import os
import secrets
import stat
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any, TypeVar

ENV = "SHAPEVIZ_CACHE_DIR"
KEY_ENV = "SHAPEVIZ_CACHE_KEY_FILE"
MAX_ENTRIES = 256   # a deployment or corner change on the demo is a new entry (35 kB analysis, 0.3 MB plane)
MAGIC = b"shapeviz-cache-2\n"   # 2: JSON and Parquet (1 was a pickle)
ENTRY_SUFFIX = ".entry"
MAX_DOCUMENT_BYTES = 64 << 20   # an entry's JSON part (the demo's analysis is 50 kB, its plane 0.4 MB)
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


@dataclass(frozen=True)
class Kind:
    """How one kind of entry becomes plain data and back: its type check is the rebuilding.

    ``dump(value, frames)`` gives JSON values and appends the DataFrames it names to ``frames``;
    ``load(document, frames)`` builds the kind's type from them, and only it, checking every field on the way
    (ValueError or TypeError when the document does not fit: the entry is then bad).
    """

    dump: Callable[[Any, list[Any]], Any]
    load: Callable[[Any, list[Any]], Any]


def _dump_generated(value: Any, frames: list[Any]) -> Any:
    log, digest = value
    return {"log": log.to_plain(frames), "digest": str(digest)}


def _load_generated(doc: Any, frames: list[Any]) -> Any:
    from shapeviz.ingest import LoadedLog
    if not isinstance(doc, dict) or set(doc) != {"log", "digest"} or not isinstance(doc["digest"], str):
        raise ValueError("not a generated log")
    return LoadedLog.from_plain(doc["log"], frames), doc["digest"]


def _dump_analysis(value: Any, frames: list[Any]) -> Any:
    return value.to_plain(frames)


def _load_analysis(doc: Any, frames: list[Any]) -> Any:
    from shapeviz.analysis import Analysis
    return Analysis.from_plain(doc, frames)


def _dump_plane(value: Any, frames: list[Any]) -> Any:
    import pandas as pd
    from shapeviz.plain import to_plain
    figure, p50, colors = value
    return {"figure": figure.to_json(),
            "p50_colors": to_plain(tuple[pd.DataFrame, dict[str, str]], (p50, colors), frames)}


def _load_plane(doc: Any, frames: list[Any]) -> Any:
    import pandas as pd
    import plotly.io as pio
    from shapeviz.plain import from_plain
    if not isinstance(doc, dict) or set(doc) != {"figure", "p50_colors"} or not isinstance(doc["figure"], str):
        raise ValueError("not a plane")
    p50, colors = from_plain(tuple[pd.DataFrame, dict[str, str]], doc["p50_colors"], frames)
    # plotly's own reader builds figure objects only, and refuses a property a figure does not have
    figure = pio.from_json(doc["figure"], output_type="Figure", skip_invalid=False)
    return figure, p50, colors


# Each kind of entry: its plain form, read back as the kind's type only (a document of another shape is bad).
KINDS: dict[str, Kind] = {
    "generated": Kind(_dump_generated, _load_generated),
    "analysis": Kind(_dump_analysis, _load_analysis),
    "plane": Kind(_dump_plane, _load_plane),
}


def _signature(key: bytes, name: str, payload: bytes) -> bytes:
    return hmac.new(key, name.encode() + b"\0" + payload, hashlib.sha256).digest()


def _encode(kind: Kind, value: object) -> bytes:
    """The entry's payload: the JSON document's length (8 bytes), the document, then each frame as Parquet."""
    frames: list[Any] = []
    document = kind.dump(value, frames)
    blobs = []
    for frame in frames:
        buffer = io.BytesIO()
        frame.to_parquet(buffer, engine="pyarrow")
        blobs.append(buffer.getvalue())
    head = json.dumps({"value": document, "frames": [len(b) for b in blobs]}, separators=(",", ":")).encode()
    return len(head).to_bytes(8, "big") + head + b"".join(blobs)


def _decode(kind: Kind, payload: bytes) -> object:
    """The value ``_encode`` stored: JSON and Parquet read as data, rebuilt by the kind; ValueError when malformed."""
    import pandas as pd
    n = int.from_bytes(payload[:8], "big")
    if n > min(MAX_DOCUMENT_BYTES, len(payload) - 8):
        raise ValueError("a document longer than the entry")
    head = json.loads(payload[8:8 + n])
    sizes = head["frames"]
    if not (isinstance(sizes, list) and all(type(s) is int and s >= 0 for s in sizes)
            and 8 + n + sum(sizes) == len(payload)):
        raise ValueError("frames that do not add up to the entry")
    frames, at = [], 8 + n
    for size in sizes:
        frames.append(pd.read_parquet(io.BytesIO(payload[at:at + size]), engine="pyarrow"))
        at += size
    return kind.load(head["value"], frames)


def _read(path: Path, key: bytes, kind: Kind) -> tuple[bool, object]:
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
        with contextlib.suppress(Exception):   # noqa: BLE001 - our own bytes, but from another library version
            return True, _decode(kind, blob[head:])
    return False, None


def cached(kind: str, parts: tuple[object, ...], compute: Callable[[], T]) -> T:
    """``compute()``, read from the cache folder when it was stored before under the same key, else stored there.

    ``kind`` names an entry of ``KINDS`` (how its value is stored and what it must be once loaded); another
    kind is never cached.
    """
    folder = cache_dir()
    spec = KINDS.get(kind)
    if folder is None or spec is None or not _safe_folder(folder):
        return compute()
    key = _signing_key(folder)
    if key is None:
        return compute()
    path = folder / f"{kind}-{key_of(kind, *parts)}{ENTRY_SUFFIX}"
    found, value = _read(path, key, spec)
    if found:
        with contextlib.suppress(OSError):
            os.utime(path, follow_symlinks=False)   # recently read: the last to be pruned
        return value
    path.unlink(missing_ok=True)   # a bad entry goes; it is never refreshed
    value = compute()
    _write(folder, path, key, spec, value)
    return value


def _write(folder: Path, path: Path, key: bytes, kind: Kind, value: object) -> None:
    tmp: str | None = None
    try:
        payload = _encode(kind, value)
        # written to a temporary name (created 0600, never an existing file) and renamed: no half entries
        with tempfile.NamedTemporaryFile(dir=folder, prefix=".entry-", suffix=".tmp", delete=False) as f:
            tmp = f.name
            f.write(MAGIC + _signature(key, path.name, payload) + payload)
        os.replace(tmp, path)
        tmp = None
        _prune(folder)
    except (OSError, TypeError, ValueError, AttributeError, ImportError):
        pass   # a read-only or full disk, or a value with no plain form: returned, just not kept
    finally:
        if tmp is not None:
            Path(tmp).unlink(missing_ok=True)


def _prune(folder: Path) -> None:
    """Keep the ``MAX_ENTRIES`` most recently used entries; delete an older version's pickles unread."""
    for old in folder.glob("*.pickle"):
        old.unlink(missing_ok=True)
    entries = sorted(folder.glob(f"*{ENTRY_SUFFIX}"), key=lambda p: p.lstat().st_mtime)
    for old in entries[:max(len(entries) - MAX_ENTRIES, 0)]:
        old.unlink(missing_ok=True)
