"""Fixtures several unit-test modules share (each module gets its own copy: module scope)."""
from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from shapeviz.ingest import load_log
from shapeviz.physics import default_deployment
from shapeviz.physics.steps import Deployment

AZURE_CONV = "azure_llm_2023/AzureLLMInferenceTrace_conv.csv"


@pytest.fixture(scope="module")
def dep() -> Deployment:
    """The default deployment (``physics.default_deployment``)."""
    return default_deployment()


@pytest.fixture(scope="module")
def conv(traces: Path) -> pd.DataFrame:
    """The Azure 2023 conversation trace's rows."""
    return load_log(traces / AZURE_CONV).frame
