"""Sizings of many sessions on a few threads (issue 37, item 6): sessions take turns, each session's latest request
first, and a session that left cancels its queued work (not the work another session still wants); a sizing steps
aside between replays while a what-if step is drawn, for a bounded while (item 7)."""
from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path

import pandas as pd

from components.work_pool import Draws, FairPool
from shapeviz.fleet.sizing import default_deployment_for, fleet_answer
from shapeviz.ingest import load_log
from shapeviz.serving import Workload


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


AZURE_CODE = "azure_llm_2023/AzureLLMInferenceTrace_code.csv"


def _wait_until(condition: Callable[[], bool], what: str, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, what
        time.sleep(0.01)


def test_a_sizing_steps_aside_while_a_step_is_drawn_and_then_gives_the_same_answer(traces: Path) -> None:
    """A what-if step drawn on any session's page holds the headline's sizings at their next replay (the compiled
    replay holds the interpreter the draw needs); once the draw is done the sizing goes on to the same fleet."""
    frame = load_log(traces / AZURE_CODE).frame
    frame = frame[frame["timestamp"] < frame["timestamp"].min() + pd.Timedelta(minutes=10)].reset_index(drop=True)
    dep, _, _ = default_deployment_for(frame, "h100")
    alone = fleet_answer(Workload.from_frame(frame), dep, frame)[1]
    draws = Draws(bound_s=300.0)   # far longer than the draw below: only the draw's end lets the sizing go on
    pool = FairPool(workers=1, name="test-draws")
    replays: list[int] = []

    def pause() -> None:
        replays.append(draws.waiting)
        draws.pause()

    with draws.drawing():
        future = pool.submit("a", lambda: fleet_answer(Workload.from_frame(frame), dep, frame, pause=pause)[1])
        _wait_until(lambda: draws.waiting == 1 or future.done(), "the sizing never paused for the draw in progress")
        assert draws.waiting == 1, "the sizing ran on through the draw in progress"
        held = len(replays)
        time.sleep(0.2)
        assert len(replays) == held and not future.done()   # no replay while the step is drawn
    stepped = future.result(timeout=120)
    assert len(replays) > 1 and stepped.method == "simulated"
    assert (stepped.replicas, stepped.meets) == (alone.replicas, alone.meets)
    assert stepped.answer.ttft_ms == alone.answer.ttft_ms and stepped.answer.tpot_ms == alone.answer.tpot_ms


def test_a_page_that_draws_without_end_never_starves_a_sizing() -> None:
    """Each pause waits at most the bound, so a sizing goes on even if some page were drawing all the time."""
    draws = Draws(bound_s=0.02)
    pool = FairPool(workers=1, name="test-starve")
    with draws.drawing():   # never ends while the sizing runs
        future = pool.submit("a", lambda: [draws.pause() for _ in range(10)] and "sized")
        assert future.result(timeout=10) == "sized"
        _wait_until(lambda: draws.waiting == 0, "a pause is still waiting")


def test_a_sizing_waits_a_moment_after_a_draw_while_the_server_sends_it() -> None:
    """Right after a step's draw the server sends what it drew: a replay started then would hold the interpreter
    until its end, and the step would wait for it."""
    draws = Draws(bound_s=2.0, grace_s=300.0)   # the grace outlasts the bound: the bound lets the pause go
    with draws.drawing():
        pass
    after = threading.Thread(target=draws.pause, daemon=True)
    after.start()
    _wait_until(lambda: draws.waiting == 1 or not after.is_alive(), "the pause neither waited nor ended")
    assert draws.waiting == 1, "a pause right after a draw went on at once"
    after.join(timeout=30)
    assert not after.is_alive()


def test_a_draw_waiting_for_a_sizing_does_not_hold_it_back() -> None:
    """Compare deployments waits for a sizing inside its draw: while it waits, the sizing's pauses do not."""
    draws = Draws(bound_s=300.0)
    with draws.drawing():
        with draws.aside():
            done = threading.Thread(target=draws.pause)
            done.start()
            done.join(timeout=10)
            assert not done.is_alive()
        blocked = threading.Thread(target=draws.pause, daemon=True)   # the draw holds again after its wait
        blocked.start()
        _wait_until(lambda: draws.waiting == 1, "the draw no longer holds the sizings back after its wait")
    blocked.join(timeout=30)
    assert not blocked.is_alive()


def test_a_session_that_left_cancels_its_queued_month_replays_and_a_session_asking_again_gets_them() -> None:
    """"Size every month by replaying it" shares one thread among sessions as the headline's sizings share theirs: a
    session that left takes its queued months with it, and the same months asked again by a session still there
    are replayed, not answered with the cancelled run."""
    from components import fleet_time, work_pool

    gate = threading.Event()
    fleet_time.submit_growth(("test", "busy"), lambda: gate.wait(30), session="busy")   # the one thread is busy
    mine = fleet_time.submit_growth(("test", "months"), lambda: "months", session="gone")
    assert work_pool.cancel_session("gone") == 1 and mine.cancelled()   # what the server calls when "gone" ends
    again = fleet_time.submit_growth(("test", "months"), lambda: "months, asked again", session="stays")
    gate.set()
    assert again.result(timeout=30) == "months, asked again"
