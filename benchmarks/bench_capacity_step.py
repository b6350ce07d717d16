"""The Capacity headline fragment's own draw per what-if step, its thread's CPU and wall (no browser).

    python benchmarks/bench_capacity_step.py [--steps 10] [--repeat 1] [--replays]

Opens the demo's Capacity page in Streamlit's AppTest, waits for the headline's replays of today and of the step's
what-if (trim input 5 %) to land, then steps "Trim input %" 0 ↔ 5 and times every draw of the headline fragment
(``components.sidebar.whatif_fragment``'s ``draw`` named ``_headline``): ``time.thread_time`` and
``time.perf_counter`` around it. Prints the median of those draws and the load average. What it isolates is the
fragment's own work per step (the plan and figures read from their caches, the metrics and charts sent), not the
round trip a browser sees (``bench_browser.py``).

``--replays``: during the steps, replays run without pause on a ``FairPool`` of two threads (as the headline's
sizings run in the server: two requests of a 20,000-request demo log, each replayed on 2–5 replicas, over and over),
and each step is timed both ways, with the replays running and then with the pool idle: what a step pays for the
replays beside it, with the machine's load the same for both. The replays call ``work_pool.DRAWS.pause()`` before
each one, as the headline's sizings do (they step aside while a what-if fragment draws); ``--no-pause``: without it.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.chdir(ROOT)

from streamlit.testing.v1 import AppTest  # noqa: E402

from components import fleet_answer, sidebar  # noqa: E402
from components.work_pool import DRAWS as PAGE_DRAWS  # noqa: E402
from components.work_pool import FairPool  # noqa: E402
from tests.app.dashboard import open_page  # noqa: E402

DRAWS: list[tuple[float, float]] = []


def _timed(draw):  # noqa: ANN001, ANN202 - the fragment's draw, wrapped
    if getattr(draw, "__name__", "") != "_headline":
        return draw

    def run():  # noqa: ANN202
        cpu, wall = time.thread_time(), time.perf_counter()
        try:
            return draw()
        finally:
            DRAWS.append((time.thread_time() - cpu, time.perf_counter() - wall))
    return run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--repeat", type=int, default=1, help="rounds of steps (the same page)")
    parser.add_argument("--replays", action="store_true", help="steps with replays running beside them, and without")
    parser.add_argument("--no-pause", action="store_true", help="the replays do not step aside for the page's draws")
    args = parser.parse_args()
    plain = sidebar.whatif_fragment
    sidebar.whatif_fragment = lambda draw, *a, **k: plain(_timed(draw), *a, **k)
    at = open_page(timeout=600)
    for pct in (5, 0):   # both what-ifs sized before the steps: the step's own draw, not a replay's
        at.slider(key="trim_input_pct").set_value(pct).run()
        fleet_answer.wait_all(timeout=900)
        at.run()   # the whole page again (a step's run holds only what it reran)
    assert not at.exception, at.exception
    if args.replays:
        _with_and_without_replays(at, args.steps, args.repeat, pause=not args.no_pause)
        return
    medians = []
    for _ in range(args.repeat):
        DRAWS.clear()
        for i in range(args.steps):
            _step(at, 5 if i % 2 == 0 else 0)
        assert not at.exception, at.exception
        cpu = statistics.median(d[0] for d in DRAWS)
        wall = statistics.median(d[1] for d in DRAWS)
        medians.append((cpu, wall))
        print(f"headline draws {len(DRAWS)}: median CPU {cpu * 1000:.1f} ms, wall {wall * 1000:.1f} ms; "
              f"load {os.getloadavg()[0]:.1f}", flush=True)
    if args.repeat > 1:
        print(f"median of rounds: CPU {statistics.median(m[0] for m in medians) * 1000:.1f} ms, "
              f"wall {statistics.median(m[1] for m in medians) * 1000:.1f} ms")


def _step(at: AppTest, pct: int) -> float:
    """One step of "Trim input %" (its run timed), then the whole page run again untimed for the next step."""
    drawn = len(DRAWS)
    t0 = time.perf_counter()
    at.slider(key="trim_input_pct").set_value(pct).run()
    took = time.perf_counter() - t0
    del DRAWS[drawn + 1:]   # the step's own draw, not the untimed full run's
    at.run()
    del DRAWS[drawn + 1:]
    return took


def _with_and_without_replays(at: AppTest, steps: int, repeat: int, pause: bool) -> None:
    """Each round: ``steps`` steps with two threads replaying beside them, then ``steps`` with the pool idle."""
    import threading

    from shapeviz.physics import default_deployment
    from shapeviz.serving.simulator import requests_from_frame, simulate
    from shapeviz.workload.synth import generate

    req = requests_from_frame(generate(20_000, seed=1, with_hashes=False), reuse=False)
    dep = default_deployment()
    busy = threading.Event()
    replayed = [0]
    pool = FairPool(workers=2, name="bench-replays")

    def replay(k: int) -> None:
        if pause:
            PAGE_DRAWS.pause()
        simulate(req, dep, replicas=k, requests=2_000)
        replayed[0] += 1
        if busy.is_set():
            pool.submit("bench", lambda: replay(2 + (k - 1) % 4))

    simulate(req, dep, replicas=2, requests=200)   # compiled before the clock starts
    for _ in range(repeat):
        row = []
        for label, running in (("replays running", True), ("pool idle", False)):
            if running:
                busy.set()
                replayed[0] = 0
                for k in (2, 3):
                    pool.submit("bench", lambda k=k: replay(k))
                time.sleep(1.0)
            DRAWS.clear()
            walls = []
            for i in range(steps):
                walls.append(_step(at, 5 if i % 2 == 0 else 0))
            assert not at.exception, at.exception
            if running:
                busy.clear()
                n = replayed[0]
                while pool.queued():
                    time.sleep(0.1)
                time.sleep(2.0)   # the last replays end
            cpu = statistics.median(d[0] for d in DRAWS)
            wall = statistics.median(d[1] for d in DRAWS)
            step = statistics.median(walls)
            row.append(step)
            print(f"{label}: step (AppTest run) {step * 1000:.0f} ms, headline draw wall {wall * 1000:.0f} ms, "
                  f"CPU {cpu * 1000:.1f} ms" + (f", {n} replays during the steps" if running else "")
                  + f"; load {os.getloadavg()[0]:.1f}", flush=True)
        print(f"  a step with replays beside it / idle: {row[0] / row[1]:.2f}×", flush=True)

if __name__ == "__main__":
    main()
