"""Workload-shape corners of the input-vs-output token plane.

The plane is log-log; three boundaries cut it into the five corners of PRODUCT.md:

    output ≥ long_output    │ reasoning            │ agent (long in, long out)
    ────────────────────────┼──────────────────────┼──────────────────────────
    short ≤ output < long   │ chat                 │ rag
    output < short_output   │ autocomplete         │ rag
                            input < long_input      input ≥ long_input

The defaults put the domain's seed cases in the right corner: 6k in / 150 out is ``rag``, 800 in / 2.5k out is
``reasoning``, 1.5k in / 15 out is ``autocomplete``, ~1k in / ~130 out is ``chat``. Session-aware ``agent``
detection (context growing turn after turn) lives in ``sessions.py``; here a corner is a region of the plane.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np
import pandas as pd

SHAPES: tuple[str, ...] = ("chat", "rag", "reasoning", "agent", "autocomplete")

SHAPE_LABELS: dict[str, str] = {
    "chat": "Chat",
    "rag": "RAG / long context",
    "reasoning": "Reasoning",
    "agent": "Agent / long-in long-out",
    "autocomplete": "Autocomplete",
}

# What each corner hurts first (PRODUCT.md vocabulary table).
FIRST_METRIC: dict[str, str] = {
    "chat": "both",
    "rag": "ttft",
    "reasoning": "tpot",
    "agent": "both",
    "autocomplete": "ttft",
}


@dataclass(frozen=True)
class Corners:
    """Boundaries between the corners, in tokens. The user can move them."""

    long_input_tokens: int = 4096
    long_output_tokens: int = 1024
    short_output_tokens: int = 48

    def __post_init__(self) -> None:
        for name, value in asdict(self).items():
            if not (isinstance(value, (int, np.integer)) and 0 < value < 10_000_000):
                raise ValueError(f"corner boundary {name}={value!r} must be a whole number of tokens in 1..10M")
        if self.short_output_tokens >= self.long_output_tokens:
            raise ValueError(
                f"short_output_tokens ({self.short_output_tokens}) must be below "
                f"long_output_tokens ({self.long_output_tokens})"
            )


DEFAULT_CORNERS = Corners()


def classify_codes(input_tokens: np.ndarray, output_tokens: np.ndarray, corners: Corners = DEFAULT_CORNERS) -> np.ndarray:
    """Corner index (into ``SHAPES``) of every request, vectorised; int8."""
    inp = np.asarray(input_tokens)
    out = np.asarray(output_tokens)
    long_in = inp >= corners.long_input_tokens
    long_out = out >= corners.long_output_tokens
    short_out = out < corners.short_output_tokens
    codes = np.zeros(inp.shape, dtype=np.int8)  # chat
    codes[~long_in & short_out] = SHAPES.index("autocomplete")
    codes[~long_in & long_out] = SHAPES.index("reasoning")
    codes[long_in & ~long_out] = SHAPES.index("rag")
    codes[long_in & long_out] = SHAPES.index("agent")
    return codes


def classify(input_tokens: np.ndarray, output_tokens: np.ndarray, corners: Corners = DEFAULT_CORNERS) -> pd.Categorical:
    """Corner id of every request as a categorical with the categories of ``SHAPES``."""
    return pd.Categorical.from_codes(classify_codes(input_tokens, output_tokens, corners), categories=list(SHAPES))


def corner_of(input_tokens: float, output_tokens: float, corners: Corners = DEFAULT_CORNERS) -> str:
    """Corner id of one (input, output) point, e.g. a p50 or a cluster centre."""
    return SHAPES[int(classify_codes(np.array([input_tokens]), np.array([output_tokens]), corners)[0])]


def shape_shares(
    input_tokens: np.ndarray,
    output_tokens: np.ndarray,
    corners: Corners = DEFAULT_CORNERS,
    weights: np.ndarray | None = None,
) -> dict[str, float]:
    """Share of requests (or of ``weights``, e.g. tokens or GPU-seconds) in each corner; sums to 1."""
    codes = classify_codes(input_tokens, output_tokens, corners)
    w = None if weights is None else np.asarray(weights, dtype=np.float64)
    totals = np.bincount(codes, weights=w, minlength=len(SHAPES)).astype(np.float64)
    total = totals.sum()
    if total <= 0:
        return {s: 0.0 for s in SHAPES}
    return {s: float(t / total) for s, t in zip(SHAPES, totals)}
