"""The serving engine of a deployment, and its efficiency per accelerator family × engine × precision.

The same GPU runs at different speeds under vLLM, SGLang and TensorRT-LLM, and vendors differ in how close their
software gets to the hardware's peak. The generic efficiencies (``data/efficiency.json``) were fitted on NVIDIA
TensorRT-LLM tables; ``data/engine_efficiency.csv`` holds, per accelerator family, engine and weight precision, a
factor on the compute efficiency (``mfu``) and one on the memory efficiency (``mbu``), each row fitted on named
published results (``benchmarks/bench_mlperf.py --fit`` writes them; ``fitted_on`` names the rows). A combination
without a row runs at the generic calibration, and says so (``engine_note``). A row belongs to one software
``release`` (the MLPerf round whose submission measured it, e.g. AMD's vLLM of v4.1 and of v5.0): a deployment runs
at the newest release unless one is named, and a release without a row of its own falls back to the newest.

Each engine also caps the sequences one replica runs at once when the operator sets nothing
(``data/engine_sequence_caps.csv``: vLLM's ``max_num_seqs`` default, 1,024 on GPUs of 70 GiB or more except A100s,
256 elsewhere); an engine without a row there runs at the calibrated cap (``efficiency.json`` ``max_batch``, 2,048:
TensorRT-LLM's ``max_batch_size``).
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import pandas as pd

from shapeviz.datadir import DATA_DIR

ENGINE_EFFICIENCY_PATH = DATA_DIR / "engine_efficiency.csv"
SEQUENCE_CAPS_PATH = DATA_DIR / "engine_sequence_caps.csv"
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
    release: str = ""

    def describe(self) -> str:
        """``TensorRT-LLM on Hopper, FP8 (MLPerf v5.0 software): compute ×1.05, memory ×0.98 (fitted on …)``."""
        release = f" (MLPerf {self.release} software)" if self.release else ""
        return (f"{ENGINE_NAMES[self.engine]} on {self.family}, {self.precision.upper()}{release}: compute efficiency "
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
            mbu_scale=float(r.mbu_scale), fitted_on=r.fitted_on, source=r.source, notes=r.notes,
            release=r.release))
    return tuple(rows)


def _release_key(release: str) -> tuple[int, ...]:
    """``"v4.1"`` → (4, 1): releases in order (an empty release sorts first)."""
    return tuple(int(part) for part in release.lstrip("v").split(".") if part.isdigit())


@lru_cache(maxsize=256)
def engine_efficiency(gpu_id: str, engine: str, precision: str, release: str | None = None) -> EngineEfficiency | None:
    """The row for a GPU id, engine, weight precision and software release, or None (the generic calibration).

    ``release`` None, or one without a row of its own for this combination: the newest release's row.
    """
    rows = [row for row in engine_rows() if gpu_id in row.gpus and row.engine == engine and row.precision == precision]
    if not rows:
        return None
    same = [row for row in rows if release is not None and row.release == release]
    return same[0] if same else max(rows, key=lambda row: _release_key(row.release))


@dataclass(frozen=True)
class SequenceCap:
    """One row of ``data/engine_sequence_caps.csv``: an engine's default cap on one replica's running sequences."""

    engine: str
    min_memory_gib: float
    not_gpus: tuple[str, ...]
    max_num_seqs: int
    source: str


@lru_cache(maxsize=1)
def sequence_cap_rows() -> tuple[SequenceCap, ...]:
    """Every row of ``data/engine_sequence_caps.csv``, in file order (the first that applies wins)."""
    frame = pd.read_csv(SEQUENCE_CAPS_PATH, dtype=str, keep_default_na=False, comment="#")
    return tuple(SequenceCap(engine=check_engine(r.engine), min_memory_gib=float(r.min_memory_gib),
                             not_gpus=tuple(g.strip() for g in r.not_gpus.split(";") if g.strip()),
                             max_num_seqs=int(r.max_num_seqs), source=r.source)
                 for r in frame.itertuples(index=False))


def engine_sequence_cap(engine: str, gpu_id: str, memory_gib: float) -> SequenceCap | None:
    """The engine's default sequence cap on this GPU (its memory in GiB), or None (the calibrated cap applies)."""
    for row in sequence_cap_rows():
        if row.engine == engine and memory_gib >= row.min_memory_gib and gpu_id not in row.not_gpus:
            return row
    return None


def engine_note(gpu_id: str, gpu_name: str, engine: str, precision: str, release: str | None = None) -> str:
    """Where the deployment's efficiency comes from, in one line (the plan's assumptions)."""
    row = engine_efficiency(gpu_id, engine, precision, release)
    if row is not None:
        return row.describe()
    return (f"no published {ENGINE_NAMES[engine]} rows for {gpu_name} at {precision.upper()}: the generic "
            "calibration (data/efficiency.json, fitted on TensorRT-LLM tables) applies")
