"""An ended session gives back its upload even though Streamlit still holds the session object (issue 41, item 7)."""
from __future__ import annotations

import gc
import weakref
from types import SimpleNamespace

from streamlit.runtime.fragment import MemoryFragmentStorage
from streamlit.runtime.state.session_state import SessionState

from components import data
from shapeviz.workload.synth import generate


def _page_fragment(frame):
    def whatif():
        return frame.shape
    return whatif


def test_an_ended_sessions_upload_is_freed_while_the_runtime_still_holds_the_session(monkeypatch):
    """The Runtime's loop keeps the last session it flushed; that session's state and fragments must not keep the
    upload (its frame in the state, and a fragment's closure over the page that drew it)."""
    from streamlit.runtime import Runtime

    frame = generate(2_000, seed=1)
    held = weakref.ref(frame)
    state = SessionState()
    state["_sketch_of_dataset"] = ("digest", frame)
    fragments = MemoryFragmentStorage()
    fragments.register("whatif", _page_fragment(frame))   # what a page's st.fragment keeps: a closure over its frame
    session = SimpleNamespace(_session_state=state, _fragment_storage=fragments)
    closed = []
    runtime = SimpleNamespace(is_active_session=lambda sid: False, close_session=closed.append,
                              _session_mgr=SimpleNamespace(get_session_info=lambda sid: SimpleNamespace(
                                  session=session)))
    monkeypatch.setattr(Runtime, "exists", classmethod(lambda cls: True))
    monkeypatch.setattr(Runtime, "instance", classmethod(lambda cls: runtime))
    monkeypatch.setattr(data, "_give_back_later", lambda *a, **k: None)
    del frame

    data._end_session_if_gone("left")
    gc.collect()

    assert closed == ["left"]
    assert held() is None, "the ended session's upload is still alive through its state or its fragments"
    assert session._session_state is state   # the object itself may outlive the session: only its contents go


def test_a_session_that_waited_out_its_reconnect_ttl_is_shut_down_and_its_upload_freed(monkeypatch):
    """Streamlit keeps a session whose browser left in a TTL cache for a reconnect; once expired the entry is
    hidden (``close_session`` finds nothing) but stays until the next visitor leaves, never shut down, with its
    uploaded files, its state and its fragments. Every round of visitors kept the last round's uploads (~1 GB for
    five 200k-row logs). When the session's end comes, the expired session is shut down and its upload freed."""
    import time

    from streamlit.runtime import Runtime
    from streamlit.runtime.memory_session_storage import MemorySessionStorage
    from streamlit.runtime.memory_uploaded_file_manager import MemoryUploadedFileManager
    from streamlit.runtime.scriptrunner.script_cache import ScriptCache
    from streamlit.runtime.session_manager import SessionInfo
    from streamlit.runtime.websocket_session_manager import WebsocketSessionManager

    frame = generate(2_000, seed=2)
    held = weakref.ref(frame)
    state = SessionState()
    state["_sketch_of_dataset"] = ("digest", frame)
    fragments = MemoryFragmentStorage()
    fragments.register("whatif", _page_fragment(frame))
    shut_down = []
    session = SimpleNamespace(id="left", _session_state=state, _fragment_storage=fragments,
                              shutdown=lambda: shut_down.append("left"))
    # Streamlit's own session manager and storage, as the server builds them (the TTL shortened for the test)
    manager = WebsocketSessionManager(session_storage=MemorySessionStorage(ttl_seconds=0.05),
                                      uploaded_file_manager=MemoryUploadedFileManager("/upload"),
                                      script_cache=ScriptCache(), message_enqueued_callback=None)
    manager._session_storage.save(SessionInfo(client=None, session=session, script_run_count=1))  # it left
    runtime = SimpleNamespace(is_active_session=manager.is_active_session, close_session=manager.close_session,
                              _session_mgr=manager)
    monkeypatch.setattr(Runtime, "exists", classmethod(lambda cls: True))
    monkeypatch.setattr(Runtime, "instance", classmethod(lambda cls: runtime))
    monkeypatch.setattr(data, "_give_back_later", lambda *a, **k: None)
    del frame, state, fragments, session
    time.sleep(0.1)   # past the TTL: the storage hides the session now, and still holds it

    data._end_session_if_gone("left")
    gc.collect()

    assert shut_down == ["left"], "the expired session was never shut down (its uploaded files stay)"
    assert held() is None, "the expired session's upload is still alive in the runtime's session storage"
