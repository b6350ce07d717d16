"""Make every page run inside app.py, even on a deep link opened right after the server starts.

Streamlit starts in its legacy multipage mode when a ``pages/`` folder sits beside the entry script, and leaves
it for good only once the entry script calls ``st.navigation``. Until then a deep link (``/capacity``) runs the
page file alone, without app.py's page config and shared sidebar. A page calls ``through_entry()`` first: in
legacy mode it runs app.py instead, which switches the mode off and runs the requested page properly.
"""
from __future__ import annotations

import runpy
from pathlib import Path

import streamlit as st
from streamlit.runtime.pages_manager import PagesManager

APP = Path(__file__).resolve().parents[1] / "app.py"


def through_entry() -> None:
    """Run app.py (and stop this script) when the page was started without it."""
    if PagesManager.uses_pages_directory:
        runpy.run_path(str(APP), run_name="__main__")
        st.stop()
