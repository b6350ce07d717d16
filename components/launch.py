"""Start the dashboard warm: ``python -m components.launch [streamlit options]`` runs ``streamlit run app.py``.

A plain ``streamlit run`` imports pandas, plotly and the model layer only when the first visitor's script runs
(~1 s of that visitor's wait), and collects the whole heap after every run, a slider step included
(``runner.postScriptGC``: ~0.1 s a run once every module is loaded). Here every module a page imports is
imported before the server listens, so the health check passes when the first page no longer waits for imports,
and the objects those imports made are frozen out of the garbage collector (``gc.freeze``): the collection after
each run then scans what the sessions made, not the ~120k objects every module holds for the life of the process.

Before anything allocates, glibc is asked for at most ``MALLOC_ARENAS`` malloc arenas (unless the operator set
``MALLOC_ARENA_MAX``): by default every thread that allocates (each session's script thread, Arrow's readers) may
get its own arena, up to eight per core, and each arena keeps its own freed pages. With two, five concurrent
200k-row uploads peaked at about 2.9-3.2 GB instead of 4.7-5.1 GB (benchmarks/README.md).

Arrow's buffers come from glibc's malloc too (``shapeviz.allocator``, unless the operator set
``ARROW_DEFAULT_MEMORY_POOL``), not from the mimalloc pool pyarrow's wheels use by default. mimalloc keeps freed
pages in per-thread heaps (each session's script thread, Arrow's readers), and Arrow's ``release_unused``, called
from another thread, did not return them: after two rounds of five 200k-row uploads, every session ended, its
1 GiB arena still held 303 MB resident with 4 MB of Arrow data alive. glibc's freed pages go back with the
``malloc_trim`` that follows every session's end (``components/memory.give_back``): the server then comes back to
within 19-74 MB of its level warm on the demo (docs/THREATS.md).

``make run``, the Docker image and the browser tests start the dashboard this way.
"""
from __future__ import annotations

import ast
import ctypes
import ctypes.util
import gc
import importlib
import logging
import os
import sys
from pathlib import Path

from shapeviz.allocator import arrow_pool_from_malloc

ROOT = Path(__file__).resolve().parents[1]
APP = ROOT / "app.py"
MALLOC_ARENAS = 2     # the usual remedy for glibc's memory kept per thread (the Dockerfile sets MALLOC_ARENA_MAX too)
_M_ARENA_MAX = -8     # mallopt's parameter number for the arena cap (glibc's malloc.h)


def few_malloc_arenas(arenas: int = MALLOC_ARENAS) -> bool:
    """Cap glibc's malloc arenas for this process (True when set); the operator's ``MALLOC_ARENA_MAX`` wins."""
    if os.environ.get("MALLOC_ARENA_MAX"):
        return False
    libc = ctypes.util.find_library("c")
    try:
        return bool(libc) and ctypes.CDLL(libc).mallopt(_M_ARENA_MAX, arenas) == 1
    except (OSError, AttributeError):
        return False   # not glibc (musl, macOS): its allocator returns memory its own way


def page_imports() -> list[str]:
    """The modules the entry file and the pages import at their top level (pages are scripts, run per session)."""
    modules: list[str] = []
    for script in [APP, *sorted((ROOT / "pages").glob("*.py"))]:
        for node in ast.parse(script.read_text(encoding="utf-8")).body:
            if isinstance(node, ast.Import):
                modules += [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                modules.append(node.module)
    return list(dict.fromkeys(modules))


def warm() -> None:
    """Import what the pages import, then freeze the objects made so far out of the cyclic garbage collector."""
    few_malloc_arenas()
    arrow_pool_from_malloc()   # before anything imports pyarrow
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    import streamlit.web.cli  # noqa: F401 - the server's own modules, frozen with the rest
    # Decorating an st.cache_data function before the runtime exists checks its options against an in-memory
    # store, with a warning; its calls, in the running server, use the runtime's store as usual.
    cache_log = logging.getLogger("streamlit.runtime.caching.cache_data_api")
    level = cache_log.level
    cache_log.setLevel(logging.ERROR)
    try:
        for name in page_imports():
            if name != "__future__":
                importlib.import_module(name)
    finally:
        cache_log.setLevel(level)
    gc.collect()
    gc.freeze()


def main(argv: list[str] | None = None) -> None:
    """``streamlit run app.py`` with ``argv`` as its options, after ``warm()``."""
    warm()
    from streamlit.web import cli

    sys.argv = ["streamlit", "run", str(APP), *(sys.argv[1:] if argv is None else argv)]
    sys.exit(cli.main())


if __name__ == "__main__":
    main()
