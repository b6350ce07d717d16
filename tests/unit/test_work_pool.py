"""Sizings of many sessions on a few threads (issue 37, item 6): sessions take turns, each session's latest request
first, and a session that left cancels its queued work (not the work another session still wants)."""
from __future__ import annotations

import threading

from components.work_pool import FairPool


def _blocked_pool() -> tuple[FairPool, threading.Event, list[str]]:
    pool = FairPool(workers=1, name="test-pool")
    gate, order = threading.Event(), []
    pool.submit("busy", lambda: gate.wait(30))   # the one worker is busy while the queue fills
    return pool, gate, order


def test_sessions_take_turns_and_each_ones_latest_request_goes_first() -> None:
    pool, gate, order = _blocked_pool()
    futures = [pool.submit(s, lambda name=name: order.append(name))
               for s, name in (("a", "a: trim 5%"), ("a", "a: trim 10%"), ("a", "a: trim 15%"), ("b", "b: first"))]
    gate.set()
    for f in futures:
        f.result(timeout=30)
    # team b's only sizing waits behind one of team a's, not all three; a's latest step is sized first
    assert order == ["a: trim 15%", "b: first", "a: trim 10%", "a: trim 5%"]


def test_a_session_that_left_cancels_its_queued_work_but_not_what_others_want() -> None:
    pool, gate, order = _blocked_pool()
    mine = pool.submit("gone", lambda: order.append("gone's own"))
    shared = pool.submit("gone", lambda: order.append("shared"))
    pool.claim(shared, "stays")                  # the same log and settings, asked by a session that stays
    theirs = pool.submit("stays", lambda: order.append("stays' own"))
    assert pool.cancel_session("gone") == 1
    gate.set()
    theirs.result(timeout=30)
    shared.result(timeout=30)
    assert mine.cancelled() and "gone's own" not in order
    assert sorted(order) == ["shared", "stays' own"] and pool.queued() == 0


def _job_over(frame):  # noqa: ANN001, ANN202 - a closure of its own over the frame, as fleet_answer.submit builds
    return lambda: len(frame.rows)


def test_an_idle_worker_keeps_nothing_of_its_last_job() -> None:
    # a sizing's closure holds the upload's frame: once the sizing is done and its result taken, the thread that
    # ran it must not keep the frame alive while it waits for the next job (issue 41, item 7: memory back)
    import gc
    import time
    import weakref

    import numpy as np

    class Frame:
        rows = np.zeros(1_000)

    frame = Frame()
    held = weakref.ref(frame)
    pool = FairPool(workers=1, name="test-idle")
    assert pool.submit("left", _job_over(frame)).result(timeout=30) == 1_000
    del frame
    deadline = time.monotonic() + 10
    while held() is not None and time.monotonic() < deadline:   # the worker sets the result, then lets go
        gc.collect()
        time.sleep(0.01)
    assert held() is None, "the idle worker still holds its last job's closure (and the log it read)"
