"""MLPerf's published Llama-2-70B rows and the benchmark's one definition of a prediction, for the tests."""
from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

import pandas as pd

from shapeviz.datadir import DATA_DIR

ROOT = Path(__file__).resolve().parents[1]
MLPERF = pd.read_csv(DATA_DIR / "mlperf_llama2_70b.csv", dtype={"public_id": str}).set_index("row_id")


def bench_mlperf() -> ModuleType:
    """benchmarks/bench_mlperf.py: the one definition of an MLPerf prediction (the benchmark and the tests)."""
    spec = importlib.util.spec_from_file_location("bench_mlperf", ROOT / "benchmarks" / "bench_mlperf.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
