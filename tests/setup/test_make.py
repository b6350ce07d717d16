"""The README's two commands on a stock machine: Debian's system python refuses global installs (PEP 668), so
`make` must build the project's own virtual environment from it, install into that, and run from it.

This runs the real Make targets with ``PYTHON`` set to the system interpreter and ``VENV`` in a temporary folder,
so the checkout's own `.venv` is left alone.
"""
from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from tests.needs import skip_or_fail

ROOT = Path(__file__).resolve().parents[2]
STOCK = Path("/usr/bin/python3")
INSTALL_TIMEOUT_S = 900
SERVER_START_S = 120


def _stock_stdlib(python: Path) -> Path:
    out = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_path('stdlib'))"],
                         capture_output=True, text=True, check=True)
    return Path(out.stdout.strip())


@pytest.fixture(scope="module")
def stock_python() -> Path:
    """Debian/Ubuntu's own python3, marked externally managed; skips (fails under CI=true) without one."""
    if not STOCK.exists():
        skip_or_fail(f"no system interpreter at {STOCK} to check the README's commands against")
    if not (_stock_stdlib(STOCK) / "EXTERNALLY-MANAGED").exists():
        skip_or_fail(f"{STOCK} is not an externally managed (PEP 668) system python")
    return STOCK


def _make(target: str, venv: Path, python: Path) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH")}
    # pip leaves the installed libraries' bytecode unwritten (`pip install --no-compile`; as an environment
    # variable that is PIP_COMPILE=0, PIP_NO_COMPILE=1 would leave it on): compiling every module of every
    # requirement was most of this venv's CPU, while the venv's interpreter compiles what the suite and the
    # dashboard below import as they import it. What is installed, and from which interpreter, is unchanged.
    env["PIP_COMPILE"] = "0"
    return subprocess.run(["make", target, f"VENV={venv}", f"PYTHON={python}"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=INSTALL_TIMEOUT_S)


def _tail(result: subprocess.CompletedProcess) -> str:
    return "\n".join((result.stdout + result.stderr).splitlines()[-30:])


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_the_system_python_refuses_a_global_install(stock_python: Path) -> None:
    """The premise: a plain `pip install` into the stock interpreter is what fails on a fresh machine."""
    result = subprocess.run([str(stock_python), "-m", "pip", "install", "--dry-run", "--no-index", "six"],
                            capture_output=True, text=True)
    assert result.returncode != 0
    assert "externally-managed-environment" in result.stdout + result.stderr or "No module named pip" in result.stderr


@pytest.fixture(scope="module")
def stock_venv(stock_python: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """`make test-deps` from the stock interpreter into a fresh venv (what `make test` does first)."""
    venv = tmp_path_factory.mktemp("stock") / "venv"
    result = _make("test-deps", venv, stock_python)
    assert result.returncode == 0, _tail(result)
    return venv


def test_make_builds_its_own_venv_from_the_stock_python(stock_venv: Path, stock_python: Path) -> None:
    python = stock_venv / "bin" / "python"
    assert python.exists()
    # pyvenv.cfg names the interpreter that made the venv (sys.base_prefix is /usr for every Debian python3.X)
    cfg = dict(line.split(" = ", 1) for line in (stock_venv / "pyvenv.cfg").read_text().splitlines() if " = " in line)
    assert Path(cfg["executable"]).resolve() == stock_python.resolve(), cfg
    stock_version = subprocess.run([str(stock_python), "-c", "import platform; print(platform.python_version())"],
                                   capture_output=True, text=True, check=True).stdout.strip()
    assert cfg["version"] == stock_version, cfg
    # The suite itself runs from that venv (one small file: the whole suite is what `make test` runs anyway).
    result = subprocess.run([str(python), "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/unit/test_shapes.py"],
                            cwd=ROOT, capture_output=True, text=True, timeout=INSTALL_TIMEOUT_S)
    assert result.returncode == 0, _tail(result)
    assert " passed" in result.stdout


def test_make_run_serves_the_dashboard_from_that_venv(stock_venv: Path, stock_python: Path) -> None:
    port = _free_port()
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH")}
    env.update(STREAMLIT_SERVER_PORT=str(port), STREAMLIT_SERVER_ADDRESS="127.0.0.1", STREAMLIT_SERVER_HEADLESS="true",
               STREAMLIT_SERVER_SCRIPT_HEALTH_CHECK_ENABLED="true")
    server = subprocess.Popen(["make", "run", f"VENV={stock_venv}", f"PYTHON={stock_python}"], cwd=ROOT, env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        deadline = time.monotonic() + SERVER_START_S
        while True:
            assert server.poll() is None, f"make run exited with {server.returncode}: {server.stdout.read()[-2000:]}"
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/_stcore/health", timeout=2) as response:
                    if response.read() == b"ok":
                        break
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                pass
            assert time.monotonic() < deadline, "make run did not answer its health check in time"
            time.sleep(0.5)
        # The server answers its health check and serves its page shell even when app.py raises; Streamlit's
        # script health check runs app.py (and its first page) once and answers 503 with the error if it fails.
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/_stcore/script-health-check",
                                        timeout=SERVER_START_S) as response:
                status, body = response.status, response.read().decode(errors="replace")
        except urllib.error.HTTPError as error:
            status, body = error.code, error.read().decode(errors="replace")
        assert status == 200 and body == "ok", f"app.py does not run from that venv ({status}): {body[:2000]}"
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        try:
            server.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
