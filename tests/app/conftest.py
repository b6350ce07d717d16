"""AppTest set-up shared by the dashboard tests."""
from __future__ import annotations

import pytest
from streamlit.runtime.pages_manager import PagesManager


@pytest.fixture(autouse=True)
def navigation_mode(monkeypatch: pytest.MonkeyPatch) -> None:
    """Run app.py the way a live server does after its first run: as an st.navigation app.

    A folder named ``pages/`` makes Streamlit start in its legacy multipage mode until the entry script calls
    ``st.navigation``, which switches the mode off for good. A live server does that once; AppTest resets the
    flag before every run, so without this each rerun would execute the page without app.py and its sidebar.
    """
    original = PagesManager.__init__

    def init(self, *args, **kwargs) -> None:  # noqa: ANN001, ANN002, ANN003
        original(self, *args, **kwargs)
        PagesManager.uses_pages_directory = False

    monkeypatch.setattr(PagesManager, "__init__", init)
