"""Sizings from many sessions on a few worker threads, taken fairly: sessions in turn, each session's latest request
first, and a session that left takes its queued work with it.

One worker thread for every session's sizings made one team's answer wait behind another's whole queue (each slider
step queues a sizing). Here a session's newest request (what its page shows now) goes before its older ones, the
sessions with queued work take turns, and the pool has a thread per core (capped: the replays are CPU work). A job
several sessions asked for (the same log and settings) runs once and is cancelled only when none of them wants it.
UI layer only: the model layer never knows who asked.
"""
from __future__ import annotations

import os
import threading
from collections import OrderedDict
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

MAX_WORKERS = 4   # a replay is CPU work: more threads than cores only interleave them


def default_workers() -> int:
    """A thread per core, at least one, at most ``MAX_WORKERS``."""
    return max(1, min(os.cpu_count() or 1, MAX_WORKERS))


class FairPool:
    """``submit(session, job)`` → a Future; sessions take turns, each one's latest job first; ``cancel_session``."""

    def __init__(self, workers: int | None = None, name: str = "fair-pool") -> None:
        self._cond = threading.Condition()
        self._queues: OrderedDict[str, list[Future]] = OrderedDict()   # per session, oldest first
        self._jobs: dict[Future, Callable[[], Any]] = {}
        self._owners: dict[Future, set[str]] = {}
        self.workers = workers or default_workers()
        for i in range(self.workers):
            threading.Thread(target=self._work, name=f"{name}-{i}", daemon=True).start()

    def submit(self, session: str, job: Callable[[], Any]) -> Future:
        """Queue ``job`` for ``session`` (its latest request: it runs before the session's older ones)."""
        future: Future = Future()
        with self._cond:
            self._jobs[future] = job
            self._owners[future] = {session}
            self._queues.setdefault(session, []).append(future)
            self._cond.notify()
        return future

    def claim(self, future: Future, session: str) -> None:
        """``session`` wants ``future`` too (its settings' job, queued by another session): its latest request now,
        and kept while any of its sessions wants it."""
        with self._cond:
            if future not in self._jobs:   # running or done: nothing to reorder
                return
            self._owners[future].add(session)
            queue = self._queues.setdefault(session, [])
            if future in queue:
                queue.remove(future)
            queue.append(future)

    def cancel_session(self, session: str) -> int:
        """``session`` left: drop its queued jobs, cancelling those no other session wants; how many were cancelled."""
        cancelled = 0
        with self._cond:
            for future in self._queues.pop(session, []):
                owners = self._owners.get(future)
                if owners is None:
                    continue
                owners.discard(session)
                if not owners:
                    self._drop(future)
                    future.cancel()
                    cancelled += 1
        return cancelled

    def queued(self) -> int:
        """Jobs waiting for a worker."""
        with self._cond:
            return len(self._jobs)

    def _drop(self, future: Future) -> None:
        self._jobs.pop(future, None)
        for session in self._owners.pop(future, set()):
            queue = self._queues.get(session)
            if queue and future in queue:
                queue.remove(future)
                if not queue:
                    del self._queues[session]

    def _next(self) -> tuple[Future, Callable[[], Any]] | None:
        for session in list(self._queues):   # sessions in turn: the one served goes to the back
            queue = self._queues[session]
            if not queue:
                del self._queues[session]
                continue
            future = queue[-1]               # its latest request first
            job = self._jobs[future]
            self._drop(future)
            if session in self._queues:          # more of its work waits: after the other sessions'
                self._queues.move_to_end(session)
            return future, job
        return None

    def _work(self) -> None:
        while True:
            with self._cond:
                picked = self._next()
                while picked is None:
                    self._cond.wait()
                    picked = self._next()
            future, job = picked
            if not future.set_running_or_notify_cancel():
                continue
            try:
                result = job()
            except BaseException as exc:   # noqa: BLE001 - handed to whoever waits on the future
                future.set_exception(exc)
            else:
                future.set_result(result)
            # an idle thread keeps nothing of its last job: the job's closure holds a log's frame and workload, and
            # a running thread's locals are out of the garbage collector's sight (kept until its next job)
            future = job = picked = result = None
