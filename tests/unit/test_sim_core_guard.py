"""The compiled loop's no-progress guards: a replay whose state a bug has made inconsistent stops with an error that
says where it is stuck, in seconds, instead of spinning until the user (or CI's per-mutant limit) gives up.

The states are built by hand (a correct replay never reaches them), on the loop's helpers as Python functions (the
same source numba compiles), each in a fork: without its guard the helper would spin, and the test fails on the
time bound instead of hanging the suite.
"""
from __future__ import annotations

import multiprocessing

import numpy as np
import pytest

from shapeviz.serving import sim_core


def _python(name: str):
    """The helper as Python (numba's ``py_func`` once the loop has been compiled in this process)."""
    fn = getattr(sim_core, name)
    return getattr(fn, "py_func", fn)


def _raises_within(seconds: float, call) -> str | None:
    """What ``call`` raised ("Type: message"), or None when it returned; fails when it still runs after ``seconds``
    (it runs in a fork, killed then: a helper spinning in a thread would slow the rest of the session)."""
    context = multiprocessing.get_context("fork")
    receive, send = context.Pipe(duplex=False)

    def target() -> None:
        try:
            call()
            send.send(None)
        except BaseException as e:   # noqa: BLE001 - handed to the test
            send.send(f"{type(e).__name__}: {e}")

    worker = context.Process(target=target, daemon=True)
    worker.start()
    try:
        if not receive.poll(seconds):
            pytest.fail(f"still running after {seconds} s: the replay spins instead of stopping")
        return receive.recv()
    finally:
        worker.kill()
        worker.join()


def _runs_state(pairs: int = 1, requests: int = 3) -> dict[str, np.ndarray]:
    pst = np.full((4, pairs), -1, dtype=np.int32)
    pst[0] = 0
    return {"pst": pst, "seg": np.full((6, 1), -1, dtype=np.int64), "rec": np.full((3, 1), -1, dtype=np.int64),
            "fh": np.zeros(2, dtype=np.int64), "head": np.full(1, -1, dtype=np.int64),
            "tail": np.full(1, -1, dtype=np.int64), "n_free": np.zeros(1, dtype=np.int64),
            "n_pinned": np.zeros(1, dtype=np.int64), "run_next": np.full(requests, -1, dtype=np.int64),
            "look_len": np.ones(requests, dtype=np.int64)}


def test_a_session_whose_running_turns_loop_stops_the_replay_and_names_the_turn() -> None:
    # the bug of the last mutation check: a preempted turn never let go of its blocks, so its readmission pinned it
    # a second time and its session's list of running turns became a loop; releasing a turn walked it forever
    s = _runs_state()
    s["pst"][1, 0] = 0
    s["run_next"][:2] = [1, 0]       # turn 0 -> turn 1 -> turn 0 -> ...
    error = _raises_within(5, lambda: _python("_run_release")(
        s["pst"], s["seg"], s["rec"], s["fh"], s["head"], s["tail"], s["n_free"], s["n_pinned"], s["run_next"],
        s["look_len"], 0, 0, 2, 1, 1, 16))
    assert error is not None and error.startswith("RuntimeError: the replay is stuck"), error
    assert "pair 0" in error and "turn 2" in error


def test_a_cache_that_counts_free_blocks_it_does_not_hold_stops_the_replay() -> None:
    s = _runs_state()
    s["n_free"][0] = 2                # two free blocks counted, but the least recently used run is empty
    s["head"][0] = 0
    s["seg"][:3, 0] = [5, 5, 0]
    error = _raises_within(5, lambda: _python("_run_fit")(
        s["pst"], s["seg"], s["fh"], s["head"], s["tail"], s["n_free"], np.zeros(1, dtype=np.int64), 0, 0, 16))
    assert error is not None and error.startswith("RuntimeError: the replay is stuck: replica 0 counts 2 free cached "
                                                  "blocks"), error

