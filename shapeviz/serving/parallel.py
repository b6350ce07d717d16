"""Independent simulations side by side: in this process, in local processes, or on a Dask cluster.

Design candidates, routers, pools, windows and seeds are replays that share nothing, so they can run at once.
A ``Runner`` keeps the jobs' order whatever runs them; a job must be picklable (a module-level function and
plain arguments: Requests, Deployment, numbers). Local processes are started with ``spawn`` (safe inside a
threaded server; each worker imports shapeviz once, about a second); a Dask cluster is either a ``LocalCluster``
on this machine (``engine="dask"``) or an existing one reached by its scheduler's address, as the sketch engine
reaches it (``shapeviz.workload.distributed``). A runner opened once serves every batch of jobs of one command (the
processes or the cluster start once).
"""
from __future__ import annotations

import logging
import multiprocessing
import os
from concurrent.futures import Executor, ProcessPoolExecutor
from contextlib import ExitStack
from typing import Any, Callable, Sequence, TypeVar

T = TypeVar("T")
ENGINES = ("embedded", "dask")
DASK_LOCAL_WORKERS = 2      # a LocalCluster's worker processes unless told (the sketch engine's default too)


class Runner:
    """Where independent simulations run: this process (``workers=1``), ``workers`` local processes, or Dask.

    ``engine="dask"``: a ``LocalCluster`` of ``workers`` processes (default 2), or the cluster whose scheduler is at
    ``address``. Use it as a context manager; ``map`` may be called any number of times inside.
    """

    def __init__(self, workers: int | None = 1, engine: str = "embedded", address: str | None = None) -> None:
        if engine not in ENGINES:
            raise ValueError(f"engine={engine!r} must be one of {ENGINES}")
        if workers is not None and workers < 1:
            raise ValueError(f"workers={workers!r} must be ≥ 1")
        if address and engine != "dask":
            engine = "dask"
        self.workers, self.engine, self.address = workers, engine, address
        self._stack: ExitStack | None = None
        self._pool: Executor | None = None
        self._client: Any = None

    @property
    def serial(self) -> bool:
        """True when every job runs in this process, one after the other."""
        return self.engine == "embedded" and (self.workers or os.cpu_count() or 1) <= 1

    def __enter__(self) -> "Runner":
        self._stack = ExitStack()
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._stack is not None:
            self._stack.close()
        self._stack, self._pool, self._client = None, None, None

    def _dask(self) -> Any:
        if self._client is None:
            try:
                from distributed import Client, LocalCluster
            except ImportError:
                raise ValueError("--engine dask needs dask's distributed: pip install distributed") from None
            stack = self._stack
            assert stack is not None   # map() opens the runner when it is used outside a ``with``
            if self.address:
                try:
                    client = Client(self.address, timeout="20s")
                except (OSError, TimeoutError) as exc:
                    raise ValueError(f"cannot reach the Dask scheduler at {self.address} ({exc})") from None
            else:
                # processes, one thread each: the replays hold the GIL
                cluster = stack.enter_context(LocalCluster(
                    n_workers=self.workers or DASK_LOCAL_WORKERS, threads_per_worker=1, processes=True,
                    dashboard_address=None, silence_logs=logging.ERROR))
                client = Client(cluster)
            self._client = stack.enter_context(client)
        return self._client

    def map(self, fn: Callable[..., T], jobs: Sequence[tuple[Any, ...]]) -> list[T]:
        """``fn(*job)`` for every job, results in job order."""
        jobs = [tuple(job) for job in jobs]
        if self._stack is None and not self.serial and jobs:   # one batch: open, run, close
            with self:
                return self.map(fn, jobs)
        if self.engine == "dask" and jobs:
            client = self._dask()
            return client.gather([client.submit(fn, *job, pure=False) for job in jobs])
        n = min(self.workers or os.cpu_count() or 1, len(jobs))
        if n <= 1:
            return [fn(*job) for job in jobs]
        if self._pool is None:
            assert self._stack is not None
            self._pool = self._stack.enter_context(ProcessPoolExecutor(
                max_workers=self.workers or os.cpu_count() or 1, mp_context=multiprocessing.get_context("spawn")))
        return list(self._pool.map(fn, *zip(*jobs)))


def map_jobs(runner: Runner | None, fn: Callable[..., T], jobs: Sequence[tuple[Any, ...]],
             each: Callable[[int], None] | None = None) -> list[T]:
    """``fn(*job)`` per job, results in job order: here, one after the other, when ``runner`` is None or serial
    (``each(jobs done)`` after every one, for a progress bar), else on the runner (``each`` once all are back)."""
    if runner is not None and not runner.serial:
        out = runner.map(fn, jobs)
        if each is not None and jobs:
            each(len(jobs))
        return out
    done: list[T] = []
    for job in jobs:
        done.append(fn(*job))
        if each is not None:
            each(len(done))
    return done


def run_parallel(fn: Callable[..., T], jobs: Sequence[tuple[Any, ...]], *, workers: int | None = None,
                 scheduler: str | None = None) -> list[T]:
    """``fn(*job)`` for every job, results in job order (one batch: a ``Runner`` opened and closed around it).

    ``scheduler``: a Dask scheduler's address (the jobs run on its workers); else ``workers`` local processes
    (default: the machine's cores), and in this process when that is one or there is a single job.
    """
    with Runner(workers, "dask" if scheduler else "embedded", scheduler) as runner:
        return runner.map(fn, jobs)
