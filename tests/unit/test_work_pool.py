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
