"""The serving engine of a deployment, and its efficiency per accelerator family × engine × precision.

The same GPU runs at different speeds under vLLM, SGLang and TensorRT-LLM, and vendors differ in how close their
software gets to the hardware's peak. The generic efficiencies (``data/efficiency.json``) were fitted on NVIDIA
TensorRT-LLM tables; ``data/engine_efficiency.csv`` holds, per accelerator family, engine and weight precision, a
factor on the compute efficiency (``mfu``) and one on the memory efficiency (``mbu``), each row fitted on named
published results (``benchmarks/bench_mlperf.py --fit`` writes them; ``fitted_on`` names the rows). A combination
without a row runs at the generic calibration, and says so (``engine_note``).
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import pandas as pd

from shapeviz.datadir import DATA_DIR

ENGINE_EFFICIENCY_PATH = DATA_DIR / "engine_efficiency.csv"
ENGINES: tuple[str, ...] = ("vllm", "sglang", "trtllm")
# The engine `config` writes when none is named (its --engine default): the one a plan assumes.
DEFAULT_ENGINE = "vllm"
ENGINE_NAMES = {"vllm": "vLLM", "sglang": "SGLang", "trtllm": "TensorRT-LLM"}
_ALIASES = {"vllm": "vllm", "sglang": "sglang", "trtllm": "trtllm", "tensorrtllm": "trtllm", "trt": "trtllm",
            "tensorrt": "trtllm"}


def check_engine(engine: str | None) -> str:
    """``"TensorRT-LLM"`` → ``"trtllm"``, ``None`` → the default; ValueError naming the engines otherwise."""
    if engine is None:
        return DEFAULT_ENGINE
    key = "".join(ch for ch in str(engine).lower() if ch.isalnum())
    if key not in _ALIASES:
        raise ValueError(f"serving engine {engine!r} is not known; use one of: {', '.join(ENGINES)}")
    return _ALIASES[key]


@dataclass(frozen=True)
class EngineEfficiency:
    """One row of ``data/engine_efficiency.csv``: the factors an engine reaches on a family at a precision."""

    family: str
    gpus: tuple[str, ...]
    engine: str
    precision: str
    mfu_scale: float
    mbu_scale: float
    fitted_on: str
    source: str
    notes: str

    def describe(self) -> str:
        """``TensorRT-LLM on Hopper, FP8: compute ×1.05, memory ×0.98 (fitted on …)``."""
        return (f"{ENGINE_NAMES[self.engine]} on {self.family}, {self.precision.upper()}: compute efficiency "
                f"×{self.mfu_scale:.2f}, memory efficiency ×{self.mbu_scale:.2f} (fitted on {self.fitted_on})")


@lru_cache(maxsize=1)
def engine_rows() -> tuple[EngineEfficiency, ...]:
    """Every row of ``data/engine_efficiency.csv``."""
    frame = pd.read_csv(ENGINE_EFFICIENCY_PATH, dtype=str, keep_default_na=False, comment="#")
    rows = []
    for r in frame.itertuples(index=False):
        rows.append(EngineEfficiency(
            family=r.family, gpus=tuple(g.strip() for g in r.gpus.split(";") if g.strip()),
            engine=check_engine(r.engine), precision=r.precision, mfu_scale=float(r.mfu_scale),
            mbu_scale=float(r.mbu_scale), fitted_on=r.fitted_on, source=r.source, notes=r.notes))
    return tuple(rows)


@lru_cache(maxsize=256)
def engine_efficiency(gpu_id: str, engine: str, precision: str) -> EngineEfficiency | None:
    """The row for a GPU id, engine and weight precision, or None (the generic calibration applies)."""
    for row in engine_rows():
        if gpu_id in row.gpus and row.engine == engine and row.precision == precision:
            return row
    return None


def engine_note(gpu_id: str, gpu_name: str, engine: str, precision: str) -> str:
    """Where the deployment's efficiency comes from, in one line (the plan's assumptions)."""
    row = engine_efficiency(gpu_id, engine, precision)
    if row is not None:
        return row.describe()
    return (f"no published {ENGINE_NAMES[engine]} rows for {gpu_name} at {precision.upper()}: the generic "
            "calibration (data/efficiency.json, fitted on TensorRT-LLM tables) applies")
