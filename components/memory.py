"""Freed memory handed back to the operating system, by the server's allocators (no Streamlit here).

The dashboard's server allocates through two allocators: glibc's malloc (Python objects, numpy and pandas buffers,
and Arrow's buffers, since ``components/launch.py`` gives Arrow the system pool) and whatever an operator chose for
Arrow instead. After a parse, an upload's release and a session's end (``components/data``), ``give_back`` asks
each to return what it no longer uses; what stays after it is measured in benchmarks/README.md (issue 41, item 7).
"""
from __future__ import annotations

import ctypes
import ctypes.util
import gc


def give_back() -> None:
    """Return freed memory to the operating system: Python's cycles, Arrow's pool, glibc's arenas."""
    gc.collect()
    try:
        import pyarrow as pa
        pa.default_memory_pool().release_unused()
    except Exception:   # noqa: BLE001 - best effort: another allocator, or none to release
        pass
    libc = ctypes.util.find_library("c")
    if libc:
        try:
            ctypes.CDLL(libc).malloc_trim(0)   # glibc keeps freed pages in its arenas until asked
        except (OSError, AttributeError):
            pass   # not glibc (musl, macOS): its allocator returns memory its own way
