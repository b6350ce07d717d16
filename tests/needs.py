"""What a test needs from the machine, and the one rule for its absence: skip locally, fail under ``CI=true``.

CI always has the shared traces, the reference data, chromium and playwright; `.ci/run` sets ``CI=true``, so there
a missing one is a broken set-up, never a reason to pass with part of the suite skipped.
"""
from __future__ import annotations

import importlib
import os
from types import ModuleType
from typing import NoReturn

import pytest


def skip_or_fail(reason: str) -> NoReturn:
    """Skip with ``reason``; fail instead when ``CI=true``."""
    if os.environ.get("CI") == "true":
        pytest.fail(f"CI must have it: {reason}")
    pytest.skip(reason)


def require_module(name: str, why: str) -> ModuleType:
    """Import ``name`` for a whole test module, or skip (fail under CI) saying why it is needed."""
    try:
        return importlib.import_module(name)
    except ImportError:
        skip_or_fail(f"{name} is not installed ({why}; pip install -r requirements-dev.txt)")
