"""MLPerf Inference's Llama-2-70B workload as the simulator replays it: the OpenOrca lengths and the latency limits.

The lengths are a seeded sample of 4,096 of the 24,576 OpenOrca samples as the reference implementation's dataset
processing builds them (``data/mlperf_openorca_lengths.csv``, its source in ``data/README.md``): input mean 225
tokens (p50 155, max 998). MLPerf counts the tokens the model generates, not the reference answers', so outputs are
scaled to a run's own mean. One definition for the MLPerf benchmark, the saturation benchmark and their tests.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from shapeviz.datadir import DATA_DIR
from shapeviz.serving.simulator import Requests

OPENORCA_LENGTHS_PATH = DATA_DIR / "mlperf_openorca_lengths.csv"
# p99 TTFT and p99 TPOT limits of the Llama-2-70B scenarios (MLPerf Inference datacenter rules)
LIMITS_MS: dict[str, tuple[float, float]] = {"Server": (2000.0, 200.0), "Interactive": (450.0, 40.0)}
DEFAULT_MEAN_OUTPUT = 290.0   # generated tokens per sample where a run's summary gives no sample rate


def openorca_requests(n: int, mean_output: float = DEFAULT_MEAN_OUTPUT, arrival_s: np.ndarray | None = None,
                      seed: int = 0) -> Requests:
    """``n`` requests drawn from the OpenOrca length sample, outputs scaled to ``mean_output`` tokens on average;
    every one offered at time 0 unless ``arrival_s`` is given."""
    lengths = pd.read_csv(OPENORCA_LENGTHS_PATH)
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, len(lengths), n)
    inp = lengths["input_tokens"].to_numpy(np.int64)[idx]
    ref = lengths["reference_output_tokens"].to_numpy(np.float64)
    out = np.maximum(1, np.round(ref[idx] * mean_output / ref.mean())).astype(np.int64)
    arrival = np.zeros(n) if arrival_s is None else arrival_s
    return Requests(inp, out, np.zeros(n, dtype=np.int64), arrival)
