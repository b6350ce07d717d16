"""The session's data: demo, one-click scenarios or uploads, loaded once per content digest.

Caching sits here, at the I/O boundary, keyed on content: a digest of the uploaded bytes (or the scenario's
name and seed) plus the column mapping. Uploads are cached per *session* (``scope="session"``) so two browser
sessions never share an upload, and are dropped when the session ends; demo data is shared by everyone.

What one visitor can cost the server is bounded: a session reads at most ``SESSION_UPLOAD_BYTES`` of uploads at
once (the per-file limit is ``server.maxUploadSize``), and at most ``PARSE_SLOTS`` pieces of heavy work run at the
same time server-wide (``work_slot``: parsing a log, then its analysis, plane and binned workload; the others wait
their turn, so five concurrent uploads neither stack five peaks nor starve the server's event loop of the
interpreter). When a session's upload is released (the session ended, or its cache entry expired), freed memory
is offered back to the operating system (``_give_back``): what the allocators still hold after that is measured
in benchmarks/README.md and explained in docs/THREATS.md.

A session whose browser left is ended ``server.disconnectedSessionTTL`` later (``end_session_when_it_leaves``):
Streamlit keeps a disconnected session for that long so that a reconnecting browser finds it, but only drops it
from its store when another session connects or leaves, and never shuts it down then; so the last page's objects
(the frame of every upload), its uploaded files and its widget state stayed in memory for good after the last
visitor left. Here the session is closed (``Runtime.close_session``) unless it came back, and its freed memory
offered back.
"""
from __future__ import annotations

import asyncio
import hashlib
import io
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import streamlit as st
from streamlit.runtime.uploaded_file_manager import UploadedFile

from components import disk_cache, uploads, work_pool
from components.memory import give_back as _give_back
from components.progress import progress_bar
from shapeviz.ingest import LoadedLog, load_log
from shapeviz.ingest.roots import allowed_roots, resolve_server_paths
from shapeviz.workload.sketch import (
    WorkloadSketch,
    full_frame_max_rows,
    merge_all,
    sketch_log,
)
from shapeviz.workload.synth import SCENARIOS, generate, scenario, write_log

DEMO_REQUESTS = 20_000
SCENARIO_REQUESTS = 6_000
SOURCE_KEY = "dataset"
UPLOAD_KEY = uploads.UPLOAD_KEY
MAPPING_KEY = uploads.MAPPING_KEY
SERVER_KEY = "server_pattern"
SESSION_UPLOAD_BYTES = 1 << 30   # what one session may have read at once, all its files together (1 GiB)
PARSE_SLOTS = 2                  # heavy work (parse, analysis) at the same time, server-wide (the machine's cores)
# Visitors served at once: each may hold up to SESSION_UPLOAD_BYTES of uploads and their analyses (~200 MB a
# 200k-row log), so the server's memory is bounded by visitors x budget; one more waits with a message.
MAX_SESSIONS = 16
GIVE_BACK_AFTER_S = 2.0          # after a release, when the freed memory is returned (the value is gone by then)
SESSION_END_GRACE_S = 5.0        # past server.disconnectedSessionTTL, when a session whose browser left is ended
SESSION_END_GIVE_BACK_S = 10.0   # after a session is ended, when its memory is returned (its thread has stopped)
_PARSING = threading.BoundedSemaphore(PARSE_SLOTS)
_HELD = threading.local()        # how many slots this thread holds (nested heavy work takes no second one)
_FILE_DIGESTS = "_file_digests"
_SKETCH = "_sketch_of_dataset"

DATASETS: dict[str, str] = {
    "demo": "Demo mix (synthetic)",
    "rag_search": "RAG search",
    "coding_agent": "Coding agent",
    "shared_pool": "Both on one replica",
    "mixed_product": "Mixed product",
    "upload": "Your upload",
    "server": "Logs on the server",
}


@dataclass(frozen=True)
class Dataset:
    """What the pages analyse: the loaded log and a digest that identifies its content."""

    log: LoadedLog
    digest: str
    label: str
    synthetic: bool
    # Set when the log has more than FULL_FRAME_MAX_ROWS requests: then ``log.frame`` is the sketch's bounded
    # uniform sample (for the plane's points), and every analysis runs from the sketch.
    sketch: WorkloadSketch | None = field(default=None, compare=False)


def _generate(kind: str, seed: int) -> tuple[LoadedLog, str]:
    frame = generate(DEMO_REQUESTS, seed=seed) if kind == "demo" else scenario(kind, SCENARIO_REQUESTS, seed=seed)
    buffer = io.BytesIO()
    write_log(frame, buffer, fmt="parquet")
    # Generated data goes through the same reader as an upload, so the demo shows a real load report.
    content = buffer.getvalue()
    return load_log(content, name=f"{kind}.parquet"), f"gen-{kind}-{hashlib.sha256(content).hexdigest()[:16]}"


@st.cache_resource(max_entries=8, ttl=24 * 3600, show_spinner="Generating the demo log…")
def _load_generated(kind: str, seed: int = 0) -> tuple[LoadedLog, str]:
    """The generated log and its content digest; stored on disk once per code version (a fresh server reads it)."""
    return disk_cache.cached("generated", (kind, seed, DEMO_REQUESTS, SCENARIO_REQUESTS), lambda: _generate(kind, seed))


def load_sources(sources: list[tuple[Any, str]], mapping: dict[str, str] | None,
                 keep_frame_rows: int | None = None) -> tuple[LoadedLog, WorkloadSketch | None]:
    """Stream each source; every row while the logs are small, else their merged sketch and its sample."""
    from shapeviz.ingest import combine

    with progress_bar("Reading the log") as progress, work_slot(progress):
        sketched = [sketch_log(source, name=name, mapping=mapping, keep_frame_rows=keep_frame_rows,
                               progress=progress) for source, name in sources]
    if all(s.frame is not None for s in sketched):
        logs = [LoadedLog(s.frame, s.report) for s in sketched]
        return (logs[0] if len(logs) == 1 else combine(logs)), None
    sketch = merge_all(s.sketch for s in sketched)
    return LoadedLog(sketch.sample_frame(), sketch.report), sketch


class work_slot:
    """Hold one of the server's ``PARSE_SLOTS`` during heavy work (a parse, an analysis); say so while waiting.

    A thread that holds a slot already (heavy work inside heavy work) takes no second one, so it never waits on
    itself.
    """

    def __init__(self, progress: Any = None, waiting: str = "other visitors' logs are being read") -> None:
        self.progress, self.waiting = progress, waiting

    def __enter__(self) -> None:
        depth = getattr(_HELD, "depth", 0)
        if depth == 0 and not _PARSING.acquire(blocking=False):
            if self.progress is not None:
                self.progress("waiting", self.waiting, None)
            _PARSING.acquire()
        _HELD.depth = depth + 1

    def __exit__(self, *exc: object) -> None:
        _HELD.depth -= 1
        if _HELD.depth == 0:
            _PARSING.release()
            _give_back_later()   # the work's transient peak (Arrow buffers, text, copies) is garbage now


def _give_back_later(*_released: object, after_s: float = GIVE_BACK_AFTER_S) -> None:
    """``_give_back`` shortly after: an ``on_release`` callback still holds the released value when it runs."""
    timer = threading.Timer(after_s, _give_back)
    timer.daemon = True
    timer.start()


def _active_session_ids() -> list[str] | None:
    """The ids of the server's connected sessions, in the order they connected (None outside a running server)."""
    from streamlit.runtime import Runtime

    if not Runtime.exists():
        return None
    manager = getattr(Runtime.instance(), "_session_mgr", None)
    if manager is None:
        return None
    return [str(info.session.id) for info in manager.list_active_sessions()]


def admitted(session_id: str, active_ids: list[str], cap: int) -> bool:
    """Whether a session is among the first ``cap`` connected ones (a session that left moves those after it up)."""
    return session_id not in active_ids or active_ids.index(session_id) < cap


def admit_session() -> None:
    """Stop this run with a message when ``MAX_SESSIONS`` visitors connected before this one are still here.

    Nothing of the visitor's is read or kept before this; the page comes once one of the others has left (the
    next run, a reload).
    """
    from streamlit.runtime.scriptrunner import get_script_run_ctx

    ctx = get_script_run_ctx()
    active = _active_session_ids()
    if ctx is None or active is None or admitted(ctx.session_id, active, MAX_SESSIONS):
        return
    st.error(f"This dashboard is serving its limit of {MAX_SESSIONS} visitors at once (each one's logs are kept in "
             "the server's memory while they stay). Reload the page in a minute or two: it opens as soon as "
             "someone leaves.", icon=":material/group:")
    st.stop()


def end_session_when_it_leaves() -> None:
    """Once per session: when its browser leaves, end it ``server.disconnectedSessionTTL`` later unless it is back."""
    from streamlit.runtime.scriptrunner import get_script_run_ctx

    ctx = get_script_run_ctx()
    if ctx is not None:
        _session_end_hook(ctx.session_id)


def _on_session_scope_released(session_id: str) -> None:
    """Streamlit clears a session's scope when its browser leaves (on the server's event loop): schedule its end."""
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:
        return   # released on a script thread (the entry expired): the session itself is still there
    from streamlit import config

    ttl_s = float(config.get_option("server.disconnectedSessionTTL"))
    loop.call_later(ttl_s + SESSION_END_GRACE_S, _end_session_if_gone, session_id)


def _end_session_if_gone(session_id: str) -> None:
    """On the event loop: shut the session down (uploads, widget state, last page) unless its browser came back."""
    from streamlit.runtime import Runtime

    if not Runtime.exists():
        return
    runtime = Runtime.instance()
    if runtime.is_active_session(session_id):
        return   # reconnected: its next departure schedules this again
    session = _app_session(runtime, session_id)
    runtime.close_session(session_id)
    ended = ([session] if session is not None else []) + reap_expired_sessions(runtime)
    for sid in {session_id, *(str(getattr(each, "id", session_id)) for each in ended)}:
        work_pool.cancel_session(sid)   # its queued sizings and month replays no other session wants
    for each in ended:
        forget_session_objects(each)
    # its script thread unwinds first; a page script's functions and globals form cycles only a collection frees
    _give_back_later(after_s=SESSION_END_GIVE_BACK_S)


def reap_expired_sessions(runtime: Any) -> list[Any]:
    """Shut down the sessions Streamlit stopped keeping for a reconnect but still holds, and return them.

    A session whose browser left waits ``server.disconnectedSessionTTL`` in the runtime's session storage, a TTL
    cache that hides an entry once it expires but drops it only at the next write (the next visitor who leaves),
    and never shuts it down. Expired, the session is out of ``close_session``'s reach (it finds nothing), yet its
    state, its uploaded files and its fragments (closures over the last page's namespace, which holds the upload's
    frame) all stay: every round of visitors kept the last round's uploads (~1 GB for five 200k-row logs). The
    expired entries are removed here and their sessions shut down as ``close_session`` would have.
    """
    manager = getattr(runtime, "_session_mgr", None)
    storage = getattr(manager, "_session_storage", None)
    expire = getattr(getattr(storage, "_cache", None), "expire", None)
    if not callable(expire):
        return []   # another session storage (not Streamlit's in-memory one): it keeps no expired sessions here
    with getattr(manager, "_storage_lock", None) or threading.Lock():
        expired = expire()
    sessions = [info.session for _, info in expired if getattr(info, "session", None) is not None]
    for session in sessions:
        session.shutdown()   # its uploaded files, its media, its script thread, its session-scoped caches
    return sessions


def _app_session(runtime: Any, session_id: str) -> Any:
    """The session's ``AppSession`` while the runtime still stores it (None when it is gone, or in another runtime)."""
    manager = getattr(runtime, "_session_mgr", None)
    info = manager.get_session_info(session_id) if manager is not None else None
    return getattr(info, "session", None)


def forget_session_objects(session: Any) -> None:
    """Drop what an ended session holds: its state (widget values, uploaded files, the upload's sketch) and its
    fragments (closures over the last page's namespace, which holds the upload's frame).

    ``close_session`` shuts a session down but leaves these on the ``AppSession`` object, and that object outlives
    it: the Runtime's main-loop coroutine keeps the last session it flushed in a loop variable until another
    visitor comes. So the last visitor's upload stayed in memory for good after they left.
    """
    state = getattr(session, "_session_state", None)
    if state is not None:
        state.clear()
    fragments = getattr(session, "_fragment_storage", None)
    if fragments is not None:
        fragments.clear()
        if hasattr(fragments, "clear_outside_wrappers"):
            fragments.clear_outside_wrappers()


@st.cache_resource(max_entries=1, scope="session", show_spinner=False, on_release=_on_session_scope_released)
def _session_end_hook(session_id: str) -> str:
    return session_id


def check_upload_budget(files: list[Any]) -> None:
    """ValueError (one line) when a session's uploads together exceed ``SESSION_UPLOAD_BYTES``."""
    total = sum(int(getattr(f, "size", 0) or 0) for f in files)
    if total > SESSION_UPLOAD_BYTES:
        raise ValueError(f"these {len(files)} uploads hold {total / (1 << 30):.1f} GiB together, more than the "
                         f"{SESSION_UPLOAD_BYTES / (1 << 30):.0f} GiB one session may read at once; remove some "
                         "files, or sample or compress the logs")


@st.cache_resource(max_entries=4, ttl=6 * 3600, scope="session", show_spinner=False, on_release=_give_back_later)
def _load_uploads(digest: str, mapping_items: tuple[tuple[str, str], ...], keep_frame_rows: int,
                  _files: tuple[UploadedFile, ...]) -> tuple[LoadedLog, WorkloadSketch | None]:
    # the upload widget's own buffer is streamed: its bytes are never copied into a second object
    return load_sources([(f, f.name) for f in _files], dict(mapping_items) or None, keep_frame_rows)


@st.cache_resource(max_entries=4, ttl=6 * 3600, scope="session", show_spinner=False, on_release=_give_back_later)
def _load_server(digest: str, mapping_items: tuple[tuple[str, str], ...], keep_frame_rows: int,
                 paths: tuple[str, ...]) -> tuple[LoadedLog, WorkloadSketch | None]:
    return load_sources([(Path(p), Path(p).name) for p in paths], dict(mapping_items) or None, keep_frame_rows)


def server_roots() -> list[Path]:
    """Allowed roots for server-side logs: ``SHAPEVIZ_ALLOWED_ROOTS``, or ``[shapeviz] allowed_roots`` in secrets."""
    configured: list[str] = []
    try:
        section = st.secrets.get("shapeviz", {})
        configured = list(section.get("allowed_roots", []))
    except (FileNotFoundError, KeyError, AttributeError, TypeError):
        pass   # no secrets file: the environment variable alone decides
    except Exception:   # streamlit raises its own error for an unparsable secrets file: the option stays off
        configured = []
    return allowed_roots(configured=configured)


def sketch_of(digest: str) -> WorkloadSketch | None:
    """The sketch of the current dataset when it is sketch-only (None when every row is kept)."""
    held = st.session_state.get(_SKETCH)
    return held[1] if held and held[0] == digest else None


def upload_digest(files: list[UploadedFile]) -> str:
    """Content digest of a set of uploaded files (names included: they name the products).

    Each file's bytes are hashed once per upload, not on every rerun: a slider move must not re-read a 1 GB file.
    """
    known: dict[str, str] = st.session_state.setdefault(_FILE_DIGESTS, {})
    h = hashlib.sha256()
    for f in files:
        if f.file_id not in known:
            known[f.file_id] = hashlib.sha256(f.getbuffer()).hexdigest()
        h.update(f.name.encode("utf-8"))
        h.update(known[f.file_id].encode("ascii"))
    return h.hexdigest()[:16]


def current_dataset() -> Dataset | None:
    """The dataset the sidebar selected; raises IngestError for an unusable upload."""
    kind = st.session_state.get(SOURCE_KEY) or "demo"
    if kind == "upload":
        uploaded = st.session_state.get(UPLOAD_KEY) or []
        if not uploaded:
            return None
        check_upload_budget(list(uploaded))   # before a byte is hashed or parsed
        known = st.session_state.get(_FILE_DIGESTS, {})
        for stale in set(known) - {f.file_id for f in uploaded}:  # bounded: only the files uploaded now
            del known[stale]
        uploaded = uploads.analysed(list(uploaded))   # the latest upload, not every file still listed
        mapping = tuple(sorted((st.session_state.get(MAPPING_KEY) or {}).items()))
        digest = upload_digest(uploaded) + ("-" + hashlib.sha256(repr(mapping).encode()).hexdigest()[:6]
                                                  if mapping else "")
        # the threshold is part of the key: the same upload under another threshold is another load
        log, sketch = _load_uploads(digest, mapping, full_frame_max_rows(), tuple(uploaded))
        label = ", ".join(f.name for f in uploaded)
        return _remember(Dataset(log, _mode(digest, sketch), label, synthetic=False, sketch=sketch))
    if kind == "server":
        pattern = str(st.session_state.get(SERVER_KEY) or "")
        if not pattern.strip():
            return None
        paths = tuple(str(p) for p in resolve_server_paths(pattern, server_roots()))
        mapping = tuple(sorted((st.session_state.get(MAPPING_KEY) or {}).items()))
        # content changes show in size and mtime: a rewritten log is read again
        try:
            stamp = repr([(p, Path(p).stat().st_size, Path(p).stat().st_mtime_ns) for p in paths]) + repr(mapping)
        except OSError as exc:   # a file removed or locked since it matched: one line, like any other refusal
            raise ValueError(f"{pattern.strip()!r}: a matched file can no longer be read ({exc.strerror})") from None
        digest = "srv-" + hashlib.sha256(stamp.encode()).hexdigest()[:16]
        log, sketch = _load_server(digest, mapping, full_frame_max_rows(), paths)
        label = pattern.strip() + (f" ({len(paths)} files)" if len(paths) > 1 else "")
        return _remember(Dataset(log, _mode(digest, sketch), label, synthetic=False, sketch=sketch))
    if kind not in SCENARIOS and kind != "demo":
        kind = "demo"
    log, digest = _load_generated(kind)
    return Dataset(log, digest, DATASETS[kind], synthetic=True)


def _remember(dataset: Dataset) -> Dataset:
    # one sketch per session (the current dataset's): the cached loaders own the memory, this is a pointer
    st.session_state[_SKETCH] = (dataset.digest, dataset.sketch) if dataset.sketch is not None else None
    return dataset


def _mode(digest: str, sketch: WorkloadSketch | None) -> str:
    # the analyses are cached per digest: a log seen whole and the same log seen as a sketch are two entries
    return digest + "-sketch" if sketch is not None else digest
