"""The live app for the browser tests: a streamlit server per test and one system chromium per test session.

Each server runs ``app.py`` from the checkout on a free loopback port and is stopped at the end of its test (a sizing
a test started never slows the next one's pages), except that the tests of a module marked ``no_sizing`` share one;
each test gets fresh browser contexts, i.e. fresh Streamlit sessions that share nothing but the demo's disk cache
(and, on a shared server, its content-keyed caches).
"""
from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from tests.needs import skip_or_fail

if TYPE_CHECKING:  # playwright is imported lazily, so a machine without it skips instead of erroring
    from dashboard import Dashboard, OpenDashboard
    from playwright.sync_api import Browser, BrowserContext

ROOT = Path(__file__).resolve().parents[2]
HOST = "127.0.0.1"  # loopback only: the tests never open the app to the network
SERVER_START_S = 120  # import of the app's stack plus a cold Python on a loaded two-core machine
SERVER_ATTEMPTS = 3  # a free port can be taken between choosing it and the server binding it
LOG_TAIL_LINES = 40
# Debian's chromium, driven as-is: never a browser downloaded by playwright.
CHROMIUM_CANDIDATES = ("/usr/bin/chromium", "chromium")
CHROMIUM_ARGS = [
    "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--disable-background-networking",
    "--disable-component-update", "--disable-sync", "--no-first-run",
]
VIEWPORT = {"width": 1400, "height": 1000}  # wide enough that the sidebar stays open beside the page


def chromium_path() -> str | None:
    """The system chromium: /usr/bin/chromium, else ``chromium`` on the PATH."""
    for candidate in CHROMIUM_CANDIDATES:
        found = candidate if os.path.isabs(candidate) and os.access(candidate, os.X_OK) else shutil.which(candidate)
        if found:
            return found
    return None


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((HOST, 0))
        return int(sock.getsockname()[1])


def _tail(log_path: Path, lines: int = LOG_TAIL_LINES) -> str:
    text = log_path.read_text(encoding="utf-8", errors="replace") if log_path.exists() else ""
    return "\n".join(text.splitlines()[-lines:]) or "(empty)"


def _healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/_stcore/health", timeout=2) as response:
            return response.status == 200
    except (urllib.error.URLError, ConnectionError, TimeoutError):
        return False


class LiveServer:
    """The dashboard as ``make run`` starts it (``components.launch``: ``streamlit run app.py``, warm) from the
    checkout on a free loopback port, its output in a log file."""

    def __init__(self, log_path: Path) -> None:
        self.log_path = log_path
        self.process: subprocess.Popen[bytes] | None = None
        self.url = ""

    def start(self) -> None:
        """Start the server and wait (bounded) for its health endpoint; fail with the log's tail if it never is."""
        for _attempt in range(SERVER_ATTEMPTS):
            if self._start_once():
                return
            self.stop()
        pytest.fail(f"streamlit did not become healthy at {self.url}/_stcore/health within {SERVER_START_S} s "
                    f"(exit code {self.exit_code}); server log tail:\n{self.tail()}")

    def _start_once(self) -> bool:
        self.url = f"http://{HOST}:{_free_port()}"
        command = [
            sys.executable, "-m", "components.launch",
            "--server.port", self.url.rsplit(":", 1)[1], "--server.headless", "true", "--server.address", HOST,
            "--browser.gatherUsageStats", "false",
            # Others edit the checkout while the suite runs: a file watcher would only cost CPU and offer reruns.
            "--server.fileWatcherType", "none",
        ]
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        with self.log_path.open("ab") as log:
            self.process = subprocess.Popen(command, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, env=env)
        deadline = time.monotonic() + SERVER_START_S
        while time.monotonic() < deadline and self.alive():
            if _healthy(self.url):
                return True
            time.sleep(0.25)  # polling a socket: there is no page yet for playwright to wait on
        return False

    def alive(self) -> bool:
        """The server process is still running."""
        return self.process is not None and self.process.poll() is None

    @property
    def exit_code(self) -> int | None:
        """How the server process ended (None while it runs)."""
        return None if self.process is None else self.process.poll()

    def tail(self, lines: int = LOG_TAIL_LINES) -> str:
        """The last lines the server wrote."""
        return _tail(self.log_path, lines)

    def stop(self) -> None:
        """Terminate, then kill if it does not stop within ten seconds."""
        if self.process is None or self.process.poll() is not None:
            return
        self.process.terminate()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout=10)


@pytest.fixture(scope="session")
def chromium() -> str:
    """Path of the system chromium; skips (fails under CI=true) when there is none or no playwright."""
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        skip_or_fail("the playwright package is not installed (pip install -r requirements-dev.txt)")
    path = chromium_path()
    if path is None:
        skip_or_fail("no system chromium (/usr/bin/chromium or `chromium` on PATH); install Debian's "
                      "`chromium` package (make system-deps); the tests never download a browser")
    return str(path)


@pytest.fixture(scope="session")
def server_log(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Where the streamlit server writes its output (its tail is shown when something goes wrong)."""
    return tmp_path_factory.mktemp("streamlit") / "server.log"


@pytest.fixture(scope="module")
def _module_server(chromium: str, server_log: Path) -> Iterator[list[LiveServer]]:
    """The server the module's ``no_sizing`` tests share, started by the first of them (none if none asks)."""
    started: list[LiveServer] = []
    yield started
    for server in started:
        server.stop()


@pytest.fixture
def app_server(chromium: str, server_log: Path, request: pytest.FixtureRequest,
               _module_server: list[LiveServer]) -> Iterator[LiveServer]:
    """A live ``streamlit run app.py`` on a free loopback port for one test, stopped at its end: a sizing a test
    started goes on in its server after the test moves on, and a replay holds the GIL, so a server shared between
    tests made the next test's pages wait on the last one's sizings (tests failing by the order they ran in).

    A test marked ``no_sizing`` (it never opens the Capacity page, the only one that starts sizings: its
    ``Dashboard.go`` refuses to) shares one server with the others of its module: each start of a server cost the
    browser tests ~8-12 s. Its sessions are still its own (fresh browser contexts); only the server's caches, keyed
    on what they hold, are shared.
    """
    # Asks for `chromium` first so that a machine without a browser skips before paying for a server.
    if request.node.get_closest_marker("no_sizing") is not None:
        if not _module_server or not _module_server[-1].alive():
            _module_server.append(LiveServer(server_log))
            _module_server[-1].start()
        yield _module_server[-1]
        return
    server = LiveServer(server_log)
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def browser(chromium: str) -> Iterator[Browser]:
    """One headless system chromium for the whole session (contexts keep the tests apart)."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        launched = p.chromium.launch(executable_path=chromium, headless=True, args=CHROMIUM_ARGS)
        try:
            yield launched
        finally:
            launched.close()


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    """Remember each phase's outcome on the test item, so fixtures can keep evidence of a failure."""
    report = yield
    setattr(item, f"rep_{report.when}", report)
    return report


@pytest.fixture
def open_dashboard(browser: Browser, app_server: LiveServer, request: pytest.FixtureRequest,
                   tmp_path: Path) -> Iterator[OpenDashboard]:
    """``open_dashboard()`` -> a Dashboard in a fresh browser context (its own session) on the app's Shape page.

    On a failure every open page is saved as a screenshot and the server log's tail is printed.
    """
    from dashboard import Dashboard

    if not app_server.alive():
        # Say so once, plainly, and give the tests after this one a server again (instead of a timeout each).
        code, tail = app_server.exit_code, app_server.tail()
        app_server.start()
        pytest.fail(f"the streamlit server exited (code {code}) before this test; restarted for the next ones. "
                    f"Server log tail:\n{tail}")

    contexts: list[BrowserContext] = []
    opened: list[Dashboard] = []

    def _open() -> Dashboard:
        context = browser.new_context(viewport=VIEWPORT, accept_downloads=True)
        contexts.append(context)
        board = Dashboard(context.new_page(), app_server.url,
                          no_sizing=request.node.get_closest_marker("no_sizing") is not None)
        opened.append(board)
        return board.open()

    yield _open
    failed = getattr(request.node, "rep_call", None)
    if failed is not None and failed.failed:
        for i, board in enumerate(opened):
            shot = tmp_path / f"session{i}.png"
            try:
                board.page.screenshot(path=str(shot), full_page=True)
                print(f"screenshot of session {i}: {shot}")
            except Exception as exc:  # noqa: BLE001 - evidence is best effort; the test already failed
                print(f"no screenshot of session {i}: {exc}")
        print(f"streamlit server log tail:\n{app_server.tail()}")
    for context in contexts:
        context.close()
