"""Sizings from many sessions on a few worker threads, taken fairly: sessions in turn, each session's latest request
first, and a session that left takes its queued work with it.

One worker thread for every session's sizings made one team's answer wait behind another's whole queue (each slider
step queues a sizing). Here a session's newest request (what its page shows now) goes before its older ones, the
sessions with queued work take turns, and the pool has a thread per core (capped: the replays are CPU work). A job
several sessions asked for (the same log and settings) runs once and is cancelled only when none of them wants it.
UI layer only: the model layer never knows who asked.

``DRAWS`` is what the sizings step aside for: a what-if fragment drawing a slider step (any session) holds it, and
a sizing's search calls ``DRAWS.pause`` between two replays (``fleet_answer(pause=...)``), which waits while a draw
is in progress and for ``GRACE_S`` after it (the server then sends what was drawn), at most ``PAUSE_BOUND_S`` (a
page drawing without end never starves a sizing). The compiled replay holds the interpreter, so without the pause
the next replay and the pandas work between replays took it from the draw and from the sending; a replay already
running is not interrupted (the draw waits for its end).
"""
from __future__ import annotations

import os
import threading
import weakref
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from concurrent.futures import Future
from typing import Any

MAX_WORKERS = 4   # a replay is CPU work: more threads than cores only interleave them
PAUSE_BOUND_S = 0.5   # the longest a sizing waits at one pause: a step's draw takes 20-50 ms of CPU, up to ~1 s of
                      # wall on a loaded machine; a sizing of ~15 replays is delayed by at most ~8 s however busy
GRACE_S = 0.2   # after a draw, the server's event loop sends the fragment's elements and its end: it needs the
                # interpreter a replay started at once would hold for the whole replay (0.1-0.3 s on the demo)


class Draws:
    """The page draws in progress, across sessions: ``with draws.drawing():`` around one; ``pause()`` between two
    replays waits while any is in progress, at most ``bound_s`` each time."""

    def __init__(self, bound_s: float = PAUSE_BOUND_S, grace_s: float = GRACE_S) -> None:
        self.bound_s, self.grace_s = bound_s, grace_s
        self._cond = threading.Condition()
        self._drawing = 0
        self._ended = -float("inf")   # when the last draw ended (time.monotonic)
        self._mine = threading.local()   # how many of the draws in progress this thread holds
        self.waiting = 0   # sizings paused now (read by tests and benchmarks)

    @property
    def in_progress(self) -> int:
        """Draws in progress now."""
        with self._cond:
            return self._drawing

    @contextmanager
    def drawing(self) -> Iterator[None]:
        """A draw in progress: sizings pause at their next replay until it ends."""
        self._hold(1)
        try:
            yield
        finally:
            self._hold(-1, ended=True)

    @contextmanager
    def aside(self) -> Iterator[None]:
        """This thread's draws wait for a sizing (``fleet_answer.sizing_of``): they no longer hold the sizings back."""
        held = getattr(self._mine, "n", 0)
        self._hold(-held)
        try:
            yield
        finally:
            self._hold(held)

    def _hold(self, n: int, ended: bool = False) -> None:
        self._mine.n = getattr(self._mine, "n", 0) + n
        with self._cond:
            self._drawing += n
            if ended:
                self._ended = time.monotonic()
            if not self._drawing:
                self._cond.notify_all()

    def _until(self) -> float:
        """When the sizings may go on, as things stand (now or earlier: at once; on ``time.monotonic``'s clock)."""
        return float("inf") if self._drawing else self._ended + self.grace_s

    def pause(self) -> None:
        """Between two replays of a sizing: wait while a draw is in progress and ``grace_s`` after, at most
        ``bound_s``."""
        deadline = time.monotonic() + self.bound_s
        with self._cond:
            if self._until() <= time.monotonic():
                return
            self.waiting += 1
            try:
                while (now := time.monotonic()) < min(self._until(), deadline):
                    self._cond.wait(min(self._until(), deadline) - now)
            finally:
                self.waiting -= 1


DRAWS = Draws()   # every session's what-if draws (components.sidebar.whatif_fragment) and the headline's sizings


def default_workers() -> int:
    """A thread per core, at least one, at most ``MAX_WORKERS``."""
    return max(1, min(os.cpu_count() or 1, MAX_WORKERS))


_POOLS: "weakref.WeakSet[FairPool]" = weakref.WeakSet()   # every pool of this server process


def cancel_session(session: str) -> int:
    """``session`` left: cancel what it queued in every pool (the headline's sizings, the growth months), those jobs
    no other session wants; how many were cancelled."""
    return sum(pool.cancel_session(session) for pool in list(_POOLS))


class FairPool:
    """``submit(session, job)`` → a Future; sessions take turns, each one's latest job first; ``cancel_session``."""

    def __init__(self, workers: int | None = None, name: str = "fair-pool") -> None:
        self._cond = threading.Condition()
        self._queues: OrderedDict[str, list[Future]] = OrderedDict()   # per session, oldest first
        self._jobs: dict[Future, Callable[[], Any]] = {}
        self._owners: dict[Future, set[str]] = {}
        self.workers = workers or default_workers()
        _POOLS.add(self)
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
