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


def open_upload(name: str, data: bytes, page: str = CAPACITY, mime: str = "text/csv",
                timeout: float = 300) -> AppTest:
    """The app with one file uploaded, switched to ``page``; nothing raised on the way."""
    at = open_app(timeout)
    at.file_uploader(key="uploads").set_value((name, data, mime))
    at.run()
    at.switch_page(page).run()
    assert not at.exception, at.exception
    return at


def headline_sizing(digest: str | None = None):  # noqa: ANN201 - a shapeviz.fleet.sizing.Sizing
    """The Capacity headline's sizing of the settings the page drew last (of the log ``digest`` when given; not the
    cache-aware router's lever, whose key ends with its router)."""
    from components import fleet_answer

    with fleet_answer._LOCK:
        items = list(fleet_answer._RESULTS.items())
    return next(f.result() for key, f in reversed(items)
                if key[-1] not in ("prefix", "session") and digest in (None, key[0]))
