"""A process pool spawned in a process where the app has run: its children start, and give the replays' results.

Streamlit runs app.py as the module ``__main__`` and leaves it there after the run (as AppTest does here, and the
server does for every session). A process pool started with "spawn" afterwards has each child import ``__main__``'s
file again, as ``__mp_main__`` and outside any script run: app.py draws the dashboard only as ``__main__``. Three times
in CI a test's pool lost a worker this way (`BrokenProcessPool` in `test_simulator_core` and `test_sim_parallel`), when
an AppTest had run before it on the same pytest worker: app.py drew the step sliders, which read the script run's
thread state, and the child died.
"""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pandas as pd

from shapeviz.fleet.routing import routed_run
from shapeviz.physics.steps import Deployment
from shapeviz.serving.parallel import run_parallel
from shapeviz.serving.simulator import Requests
from tests.app.dashboard import APP, open_app


def test_a_process_pool_spawned_after_the_app_ran_here_gives_the_replays_results() -> None:
    at = open_app()
    assert not at.exception, at.exception
    assert Path(sys.modules["__main__"].__file__) == Path(APP)   # what each spawned child will run first
    rng = np.random.default_rng(3)
    n = 200
    req = Requests(rng.integers(200, 4_000, n), rng.integers(20, 400, n), np.zeros(n, dtype=np.int64),
                   np.sort(rng.uniform(0, 20.0, n)))
    tp2 = Deployment("llama-3.1-70b", "h100-sxm", "fp8", None, 2)
    jobs = [(req, tp2, rate, k, "least_tokens", 1000.0, 50.0) for rate, k in ((8.0, 2), (4.0, 1))]
    apart = run_parallel(routed_run, jobs, workers=2)
    for a, job in zip(apart, jobs):
        pd.testing.assert_frame_equal(a.requests, routed_run(*job).requests, check_exact=True)
