"""The benchmarks' one timer: median wall and CPU seconds of this process over repeated calls."""
from __future__ import annotations

import statistics
import time
from typing import Any, Callable


def timed(fn: Callable[[], Any], repeat: int) -> tuple[Any, float, float]:
    """(result of the last call, median wall seconds, median CPU seconds of this process) over ``repeat`` calls."""
    walls, cpus, result = [], [], None
    for _ in range(repeat):
        w0, c0 = time.perf_counter(), time.process_time()
        result = fn()
        walls.append(time.perf_counter() - w0)
        cpus.append(time.process_time() - c0)
    return result, statistics.median(walls), statistics.median(cpus)
