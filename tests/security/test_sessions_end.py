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
