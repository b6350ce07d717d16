"""Shared fixtures: where the real public traces live, and how their absence is reported."""
from __future__ import annotations

import contextlib
import io
import os
from pathlib import Path

import pytest

from tests.needs import skip_or_fail

ROOT = Path(__file__).resolve().parents[1]


def traces_dir() -> Path:
    """The real traces: ``$SHAPEVIZ_TRACES``, else ``../shared/data/traces`` beside the checkout."""
    env = os.environ.get("SHAPEVIZ_TRACES")
    return Path(env) if env else ROOT.parent / "shared" / "data" / "traces"


def reference_dir() -> Path:
    """Published GPU specs and calibration measurements beside the checkout."""
    env = os.environ.get("SHAPEVIZ_REFERENCE")
    return Path(env) if env else ROOT.parent / "shared" / "reference"


def pytest_sessionstart(session: pytest.Session) -> None:
    """Under ``pytest -n N``, on the controller before its workers start: compile the simulator's loop once.

    The loop is compiled on first use and cached on disk (``sim_core``, ``cache=True``). In a fresh clone each
    worker's first replay found no cache and compiled it too, N compiles of ~40 s of CPU at once; compiled here
    first, every worker loads it from the cache in about a second (and a warm cache costs this about as much).
    """
    if hasattr(session.config, "workerinput") or not getattr(session.config.option, "numprocesses", None):
        return   # a worker, or a run in one process: its first replay compiles as it always did
    import numpy as np

    from shapeviz.physics.steps import Deployment
    from shapeviz.serving import sim_core
    from shapeviz.serving.simulator import Requests, simulate

    if sim_core.loop() is None:
        return   # no numba: the tests that need it say so
    dep = Deployment("llama-3.1-70b", "h100-sxm", "fp8", None, 2)
    ones = np.ones(8, dtype=np.int64)
    simulate(Requests(100 * ones, 10 * ones, 0 * ones, np.arange(8.0)), dep)   # its loop has one signature


@pytest.fixture(scope="session", autouse=True)
def _app_disk_cache(tmp_path_factory: pytest.TempPathFactory) -> None:
    """The app's disk cache (components/disk_cache.py) in a temporary folder: tests never write to ~/.cache."""
    os.environ.setdefault("SHAPEVIZ_CACHE_DIR", str(tmp_path_factory.mktemp("shapeviz-cache")))
    # its signing key beside it, never inside it (and never in ~/.config)
    os.environ.setdefault("SHAPEVIZ_CACHE_KEY_FILE", str(tmp_path_factory.mktemp("shapeviz-key") / "cache.key"))


def _require(path: Path, what: str) -> Path:
    if path.exists():
        return path
    skip_or_fail(f"{what} not found at {path} (set SHAPEVIZ_TRACES / SHAPEVIZ_REFERENCE to point at it)")


@pytest.fixture(scope="session")
def traces() -> Path:
    """Folder of the real traces; skips (fails under CI=true) when absent."""
    return _require(traces_dir(), "real traces folder")


@pytest.fixture(scope="session")
def reference() -> Path:
    """Folder of the shared physics reference; skips (fails under CI=true) when absent."""
    return _require(reference_dir(), "physics reference folder")


@pytest.fixture
def trace(traces: Path):
    """``trace("azure_llm_2023/AzureLLMInferenceTrace_code.csv")`` -> its path, or a skip/fail naming it."""

    def _get(relative: str) -> Path:
        return _require(traces / relative, f"trace {relative}")

    return _get


@pytest.fixture(scope="session")
def chromium() -> str:
    """The browser PNG export drives (the product's own lookup); skips (fails under CI=true) when absent."""
    from shapeviz.outputs.report import browser_path

    try:
        return browser_path()
    except ValueError as exc:
        skip_or_fail(str(exc))


@pytest.fixture(scope="module")
def plan_file(tmp_path_factory) -> Path:
    """A plan of the real aiperf run's workload (2 req/s), as `config --json` writes it, with lenient SLOs (the
    results `check` reads: tests/security/test_hostile_files.py, tests/unit/test_check_verdicts.py)."""
    from shapeviz.cli import main

    path = tmp_path_factory.mktemp("plan") / "plan.json"
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["config", "--isl", "2048", "--osl", "256", "--rate", "2", "--engine", "vllm", "--layout",
                     "colocated", "--tpot-slo-ms", "100", "--json"]) == 0
    path.write_text(out.getvalue())
    return path
