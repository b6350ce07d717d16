"""Synthetic logs several unit-test modules share."""
from __future__ import annotations

import pandas as pd

from shapeviz.workload import synth


def squeezed_brief(requests: int) -> pd.DataFrame:
    """The brief's RAG search + coding agent (synth scenario ``shared_pool``, seed 3), its day squeezed 144-fold
    (600 requests into 5 minutes, 1,200 into 10): a busy shared pool."""
    f = synth.scenario("shared_pool", requests, seed=3)
    start = f["timestamp"].min()
    f["timestamp"] = start + (f["timestamp"] - start) / 144.0
    return f
