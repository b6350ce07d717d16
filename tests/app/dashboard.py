"""The dashboard opened in Streamlit's AppTest (no browser): on the demo, then on a page."""
from __future__ import annotations

from pathlib import Path

from streamlit.testing.v1 import AppTest

APP = str(Path(__file__).resolve().parents[2] / "app.py")
CAPACITY = "pages/capacity.py"


def open_app(timeout: float = 120) -> AppTest:
    """The app run once on the demo, as a new visitor meets it."""
    at = AppTest.from_file(APP, default_timeout=timeout)
    at.run()
    return at


def open_page(page: str = CAPACITY, timeout: float = 120) -> AppTest:
    """The app on the demo, switched to ``page``; nothing raised on the way."""
    at = open_app(timeout)
    at.switch_page(page).run()
    assert not at.exception, at.exception
    return at
