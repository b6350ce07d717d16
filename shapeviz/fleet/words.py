"""A fleet in the headline's words: replicas × TP, GPUs, how it stands to the answer, its cost per hour.

Every section that shows a fleet other than the headline's (hold-at-peak, the scheduling levers, the routers) says
it with these, so the units and the price are the answer's everywhere.
"""
from __future__ import annotations


def relative_to_answer(replicas: int, answer: int | None, tp: int, gpu_hour_usd: float | None = None) -> str:
    """A fleet other than the headline's, in the answer's terms: "3 × TP4 = 12 GPUs, the answer + 1" (replicas × TP
    and GPUs, and how many replicas above or below the answer; without it when the answer is not known yet), and
    with ``gpu_hour_usd`` (the price the headline's cost uses) its cost: ", $30/h"."""
    text = f"{replicas} × TP{tp} = {replicas * tp} GPUs"
    if answer is not None:
        text += f", {answer_offset(replicas, answer)}"
    return text + ("" if gpu_hour_usd is None else f", {usd_per_hour_words(replicas * tp * gpu_hour_usd)}")


def usd_per_hour_words(usd: float) -> str:
    """A fleet's cost per hour as the headline says it: "$30/h" (cents below $10)."""
    return f"${usd:,.2f}/h" if abs(usd) < 10 else f"${usd:,.0f}/h"


def answer_offset(replicas: int, answer: int) -> str:
    """How a fleet stands to the headline's answer, in replicas: "the answer + 1", "the answer − 2", "the answer itself"."""
    d = int(replicas) - int(answer)
    return "the answer itself" if d == 0 else f"the answer {'+' if d > 0 else '−'} {abs(d)}"
