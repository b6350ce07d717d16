"""Issue 30, row 14: what visitors' uploads can cost the server is bounded per session and server-wide."""
from __future__ import annotations

import threading
import time
from collections.abc import Callable
from types import SimpleNamespace

import pytest

from components import data

MB = 1 << 20


def test_a_session_cannot_read_more_than_its_upload_budget():
    files = [SimpleNamespace(name=f"log{i}.parquet", size=300 * MB) for i in range(5)]   # each under the file limit
    with pytest.raises(ValueError, match="more than the 1 GiB one session may read at once"):
        data.check_upload_budget(files)
    data.check_upload_budget(files[:3])   # 900 MB together: read


def _busy_work() -> tuple[Callable[..., SimpleNamespace], list[int]]:
    """Heavy work stand-in (0.3 s) and the most of it that ever ran at once (``most[0]``)."""
    running, most = [0], [0]
    lock = threading.Lock()

    def busy(*args, **kwargs):
        with lock:
            running[0] += 1
            most[0] = max(most[0], running[0])
        time.sleep(0.3)
        with lock:
            running[0] -= 1
        return SimpleNamespace(frame=None, sketch=None, report=None)
    return busy, most


def test_five_concurrent_uploads_are_parsed_at_most_two_at_a_time(monkeypatch):
    slow_sketch, most = _busy_work()
    monkeypatch.setattr(data, "sketch_log", slow_sketch)
    monkeypatch.setattr(data, "merge_all", lambda sketches: SimpleNamespace(
        sample_frame=lambda: None, report=None))
    threads = [threading.Thread(target=data.load_sources, args=([(b"x", f"u{i}.csv")], None)) for i in range(5)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert most[0] == data.PARSE_SLOTS == 2


def test_parses_and_the_analyses_after_them_share_the_same_two_slots(monkeypatch):
    """Five visitors: what follows each parse (the analysis) waits for a slot too, and a slot is never taken twice."""
    from components import context

    busy, most = _busy_work()
    monkeypatch.setattr(data, "sketch_log", busy)
    monkeypatch.setattr(data, "merge_all", lambda sketches: SimpleNamespace(sample_frame=lambda: None, report=None))
    monkeypatch.setattr(data, "sketch_of", lambda digest: None)
    monkeypatch.setattr(context, "analyze", busy)
    log = SimpleNamespace(frame=None, report=None)
    work = [(data.load_sources, ([(b"x", f"u{i}.csv")], None)) for i in range(3)]
    work += [(context._analyze, (f"d{i}", (4096, 1024, 48), None, None, 0.15, log)) for i in range(3)]
    threads = [threading.Thread(target=f, args=a) for f, a in work]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert not any(t.is_alive() for t in threads)
    assert most[0] == data.PARSE_SLOTS == 2
    with data.work_slot(), data.work_slot():   # heavy work inside heavy work holds one slot, never waits on itself
        assert data._PARSING._value == data.PARSE_SLOTS - 1


def test_a_session_whose_browser_left_is_ended_after_the_ttl_unless_it_came_back(monkeypatch):
    """Streamlit keeps a disconnected session (its uploads, its last page) until something else happens; ours end."""
    import asyncio

    from streamlit import config
    from streamlit.runtime import Runtime

    closed = []
    active = {"came-back"}
    runtime = SimpleNamespace(is_active_session=lambda sid: sid in active, close_session=closed.append)
    monkeypatch.setattr(Runtime, "exists", classmethod(lambda cls: True))
    monkeypatch.setattr(Runtime, "instance", classmethod(lambda cls: runtime))
    monkeypatch.setattr(data, "SESSION_END_GRACE_S", 0.0)
    monkeypatch.setattr(data, "_give_back_later", lambda *a, **k: None)
    ttl_s = config.get_option("server.disconnectedSessionTTL")
    config.set_option("server.disconnectedSessionTTL", 0)
    try:
        async def browsers_leave():
            # what Streamlit calls on its event loop when a browser leaves: the session's scope is released
            for sid in ("left", "came-back"):
                data._on_session_scope_released(sid)
            await asyncio.sleep(0.05)
        asyncio.run(browsers_leave())
        data._on_session_scope_released("expired-entry")   # released on a script thread: nothing is scheduled
    finally:
        config.set_option("server.disconnectedSessionTTL", ttl_s)
    assert closed == ["left"]
