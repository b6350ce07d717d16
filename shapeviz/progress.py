"""Progress of long work (reading, shapes, clusters, sessions, prefix reuse), reported stage by stage.

The model layer calls a plain ``Progress`` callback and knows nothing of who listens: the dashboard draws a progress
bar, the command line a one-line bar on stderr when stderr is a terminal (never into a pipe or a log file).
"""
from __future__ import annotations

import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Protocol, TextIO


class Progress(Protocol):
    """``progress(stage, detail, fraction)``: a stage name, a detail with counts, the share done if known."""

    def __call__(self, stage: str, detail: str = "", fraction: float | None = None) -> None: ...


def silent(stage: str, detail: str = "", fraction: float | None = None) -> None:
    """The default listener: nobody is watching."""


# The analysis stages in order, with the share of the work done when each starts (reading comes before them).
ANALYSIS_STAGES: dict[str, float] = {"shapes": 0.0, "clusters": 0.25, "sessions": 0.55, "prefix reuse": 0.65,
                                     "recommendations": 0.95}


def analysis_stage(progress: Progress, stage: str, requests: int) -> None:
    """Report the start of one analysis stage over ``requests`` requests."""
    progress(stage, f"{requests:,} requests", ANALYSIS_STAGES[stage])


class TerminalBar:
    """A one-line progress bar on a terminal: ``[#####-----] clusters: 1,000,000 requests (3.2 s)``."""

    WIDTH = 24

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream
        self.started = time.monotonic()
        self.shown = False

    def __call__(self, stage: str, detail: str = "", fraction: float | None = None) -> None:
        if fraction is None:
            bar = "[" + "?" * self.WIDTH + "]"   # the share is unknown (e.g. reading a compressed stream)
        else:
            done = round(min(max(fraction, 0.0), 1.0) * self.WIDTH)
            bar = "[" + "#" * done + "-" * (self.WIDTH - done) + "]"
        text = f"{bar} {stage}" + (f": {detail}" if detail else "") + f" ({time.monotonic() - self.started:.1f} s)"
        self.stream.write("\r\x1b[2K" + text)   # back to the line's start, clear it, redraw
        self.stream.flush()
        self.shown = True

    def close(self) -> None:
        """Clear the bar, so that what follows starts on a clean line."""
        if self.shown:
            self.stream.write("\r\x1b[2K")
            self.stream.flush()


def terminal_bar(stream: TextIO | None = None) -> TerminalBar | None:
    """A bar on ``stream`` (stderr by default) when it is a terminal, else None (pipes and files stay clean)."""
    stream = sys.stderr if stream is None else stream
    isatty = getattr(stream, "isatty", None)
    return TerminalBar(stream) if isatty is not None and isatty() else None


@contextmanager
def terminal_progress(stream: TextIO | None = None) -> Iterator[Progress]:
    """A ``Progress`` for the command line: a bar on a terminal, silence elsewhere; the bar is cleared at the end."""
    bar = terminal_bar(stream)
    try:
        yield bar or silent
    finally:
        if bar is not None:
            bar.close()
