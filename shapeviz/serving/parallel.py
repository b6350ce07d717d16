"""Independent simulations side by side: in this process, in local processes, or on a Dask cluster.

Design candidates, routers, pools, windows and seeds are replays that share nothing, so they can run at once.
``run_parallel`` keeps the jobs' order whatever runs them; a job must be picklable (a module-level function and
plain arguments: Requests, Deployment, numbers). Local processes are started with ``spawn`` (safe inside a
threaded server; each worker imports shapeviz once, about a second); a Dask cluster is reached the way the
sketch engine reaches it (``shapeviz.workload.distributed``): ``--scheduler ADDRESS``.
"""
from __future__ import annotations

import multiprocessing
import os
from concurrent.futures import ProcessPoolExecutor
from typing import Any, Callable, Sequence, TypeVar

T = TypeVar("T")


def run_parallel(fn: Callable[..., T], jobs: Sequence[tuple[Any, ...]], *, workers: int | None = None,
                 scheduler: str | None = None) -> list[T]:
    """``fn(*job)`` for every job, results in job order.

    ``scheduler``: a Dask scheduler's address (the jobs run on its workers); else ``workers`` local processes
    (default: the machine's cores), and in this process when that is one or there is a single job.
    """
    jobs = [tuple(job) for job in jobs]
    if workers is not None and workers < 1:
        raise ValueError(f"workers={workers!r} must be ≥ 1")
    if scheduler:
        try:
            from distributed import Client
        except ImportError:
            raise ValueError("--scheduler needs dask's distributed: pip install distributed") from None
        try:
            client = Client(scheduler, timeout="20s")
        except (OSError, TimeoutError) as exc:
            raise ValueError(f"cannot reach the Dask scheduler at {scheduler} ({exc})") from None
        with client:
            futures = [client.submit(fn, *job, pure=False) for job in jobs]
            return client.gather(futures)
    n = min(workers or os.cpu_count() or 1, len(jobs))
    if n <= 1:
        return [fn(*job) for job in jobs]
    with ProcessPoolExecutor(max_workers=n, mp_context=multiprocessing.get_context("spawn")) as pool:
        return list(pool.map(fn, *zip(*jobs)))
