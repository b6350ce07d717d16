"""The sidebar draws on the user's values when a widget's state is dropped just after this run drew it.

Seen once in CI (the every-button sweep, BurstGPT upload, Shape to Capacity): ``KeyError: st.session_state has no key
"model"`` from the sidebar, read straight after its select box was drawn: a runner stopped by the page switch cleared
widget state the new run had just made (streamlit#10805). The sidebar reads such values through ``sidebar.value``.
"""
from __future__ import annotations

import pytest
import streamlit

from tests.app.dashboard import open_app


def test_a_model_state_dropped_after_its_box_was_drawn_leaves_the_page_drawn(monkeypatch: pytest.MonkeyPatch) -> None:
    at = open_app()
    plain = streamlit.selectbox

    def dropping(label, *args, key=None, **kwargs):  # noqa: ANN001, ANN002, ANN003, ANN202
        out = plain(label, *args, key=key, **kwargs)
        if key == "model":
            del streamlit.session_state["model"]   # what the stopped runner's clean-up did
        return out

    monkeypatch.setattr(streamlit, "selectbox", dropping)
    at.run()
    assert not at.exception, at.exception
    assert at.title[0].value == "Workload shape"
