"""Which allocator Arrow's buffers come from, in every process this project starts (the CLI, the dashboard).

pyarrow's wheels allocate through mimalloc by default. mimalloc keeps freed pages in per-thread heaps (Arrow's
reader threads, the dashboard's script threads), and Arrow's ``release_unused``, called from another thread, does
not return them: on a loaded machine (load 26-30) a 5M-row ``summary`` peaked at 2,291 MiB with it and 619-636
MiB with glibc's malloc (on a quiet one both ~650 MiB), and after five 200k-row uploads had ended the dashboard
kept ~250 MB in mimalloc's arena with 4 MB of Arrow data alive (benchmarks/README.md, issue 41). So Arrow is
given the system allocator, glibc's malloc, whose freed pages go back to the system (by themselves, or with the
``malloc_trim`` the dashboard runs after a session ends).
"""
from __future__ import annotations

import os

ARROW_POOL = "system"   # Arrow's memory pool: glibc's malloc (pyarrow's others: "mimalloc", "jemalloc")


def arrow_pool_from_malloc(pool: str = ARROW_POOL) -> str:
    """Have Arrow allocate through ``pool`` (the operator's ``ARROW_DEFAULT_MEMORY_POOL`` wins); the pool asked for.

    Arrow reads the variable once, when its default pool is first used: call this before pyarrow is imported.
    """
    os.environ.setdefault("ARROW_DEFAULT_MEMORY_POOL", pool)
    return os.environ["ARROW_DEFAULT_MEMORY_POOL"]
