"""Two sessions sizing at once on the headline's pool: each one's wait for the answer its page shows.

    python benchmarks/bench_work_pool.py --log ../shared/data/traces/azure_llm_2023/AzureLLMInferenceTrace_conv.csv
    python benchmarks/bench_work_pool.py --demo 20000          # the dashboard's demo mix (generate(20000, seed=0))

Two teams on one server: session A moves its trim-input slider ``--steps`` times in a row (each step queues the
headline's sizing of another what-if, as the Capacity page does), and session B opens its page a moment later (one
sizing of its own what-if). Each sizing is the page's own job (``fleet.sizing.fleet_answer``, simulated, every
product at the sidebar's pair). Measured, per pool: each session's wait for the sizing its page shows now (A's
latest step, B's only one) from its submit to its result, A's older steps' too, and the whole run's wall and CPU
(``time.process_time`` of this process). Pools:

- ``fair``: ``components.work_pool.FairPool`` (a thread per core, at most 4; sessions in turn, each one's latest
  request first), what the page uses;
- ``fifo``: one worker thread taking jobs in the order they came (the pool before issue 37).
Then A leaves after its steps (``cancel_session``) and B's wait is measured again on the fair pool.

The load average is printed beside each figure: the machine is shared.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from components.work_pool import FairPool  # noqa: E402
from shapeviz.fleet.sizing import default_deployment_for, fleet_answer  # noqa: E402
from shapeviz.ingest import load_log  # noqa: E402
from shapeviz.serving import WhatIf, Workload  # noqa: E402

B_DELAY_S = 0.2   # B opens its page this long after A's last step


class _Fifo:
    """One worker taking jobs first come, first served: the headline's pool before issue 37."""

    def __init__(self) -> None:
        self._pool = ThreadPoolExecutor(max_workers=1)

    def submit(self, session: str, job: Callable[[], Any]) -> Future:  # noqa: ARG002 - the session is not used
        return self._pool.submit(job)

    def cancel_session(self, session: str) -> int:  # noqa: ARG002 - nothing to cancel by session
        return 0


def _sizing(frame: Any, w: Workload, trim: float) -> Callable[[], Any]:
    dep = default_deployment_for(frame)[0]
    return lambda: fleet_answer(w, dep, frame, whatif=WhatIf(trim_input=trim))[1]


def one_run(pool: Any, frame: Any, w: Workload, steps: int, a_leaves: bool) -> dict[str, float]:
    """A's steps, then B's page: each session's waits, in seconds from submit."""
    submitted: dict[str, float] = {}
    done: dict[str, float] = {}
    futures: dict[str, Future] = {}

    def track(name: str, future: Future) -> None:
        submitted[name] = time.perf_counter()
        futures[name] = future
        future.add_done_callback(lambda f, n=name: done.setdefault(n, time.perf_counter()))

    w0, c0 = time.perf_counter(), time.process_time()
    for i in range(steps):   # a trim of 10 %, 20 %, ...: each step another what-if
        track(f"A step {i + 1}", pool.submit("A", _sizing(frame, w, 0.1 * (i + 1))))
    time.sleep(B_DELAY_S)
    track("B", pool.submit("B", _sizing(frame, w, 0.05)))
    if a_leaves:
        pool.cancel_session("A")
    for future in futures.values():
        try:
            future.result()
        except Exception:  # noqa: BLE001 - a cancelled step: A left
            pass
    out = {name: done[name] - submitted[name] for name in futures if not futures[name].cancelled()}
    out["wall"] = time.perf_counter() - w0
    out["CPU"] = time.process_time() - c0
    return out


def main() -> None:
    """Print each pool's waits, then the medians over ``--repeat`` runs."""
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--log", help="a log with timestamps")
    p.add_argument("--demo", type=int, default=None, metavar="N", help="the demo mix of N requests instead")
    p.add_argument("--steps", type=int, default=4, help="session A's slider steps")
    p.add_argument("--repeat", type=int, default=2)
    args = p.parse_args()
    if args.demo:
        from shapeviz.workload.synth import generate

        frame = generate(args.demo, seed=0)
    else:
        frame = load_log(args.log).frame
    w = Workload.from_frame(frame)
    one_run(_Fifo(), frame, w, 1, False)   # compile the simulator and warm the caches outside the figures
    fair = FairPool(name="bench")
    print(f"{len(frame):,} requests; fair pool of {fair.workers} thread(s); {os.cpu_count()} cores", flush=True)
    results: dict[str, list[dict[str, float]]] = {"fifo": [], "fair": [], "fair, A leaves": []}
    for r in range(args.repeat):
        for name, pool, leaves in (("fifo", _Fifo(), False), ("fair", fair, False), ("fair, A leaves", fair, True)):
            load = os.getloadavg()[0]
            out = one_run(pool, frame, w, args.steps, leaves)
            results[name].append(out)
            print(f"run {r + 1} {name} (load {load:.1f}): " + "; ".join(f"{k} {v:.1f} s" for k, v in out.items()),
                  flush=True)
    print("\nmedian over runs (min–max), seconds:")
    for name, runs in results.items():
        keys = [k for k in runs[0] if all(k in o for o in runs)]
        print(f"  {name}: " + "; ".join(
            f"{k} {statistics.median(o[k] for o in runs):.1f} ({min(o[k] for o in runs):.1f}–"
            f"{max(o[k] for o in runs):.1f})" for k in keys))


if __name__ == "__main__":
    main()
