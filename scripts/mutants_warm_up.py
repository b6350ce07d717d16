"""Imported once by the mutation check's fork server (``scripts/mutants.py``, ``use_fork_server``), after the
libraries of its ``PRELOAD``: what a library does once per process on first use, done in the server so that no
mutant's fork pays it again.

numba sets up its compiler on the first function it compiles or loads from its cache (LLVM, the CPU target and its
typing context): ~0.3 s of CPU in every mutant whose tests replay a log, of the ~0.6 s the cached simulator loop
takes to load (benchmarks/README.md, "CI time, issue 39 item 5"). A trivial function of this file sets it up here;
nothing of the project is compiled or imported, so every mutant's own code is still compiled (or loaded from the
cache of its own copy) in its fork.
"""
import numba


@numba.njit(cache=False)
def _one_more(x: int) -> int:
    return x + 1


_one_more(1)

