"""Dashboard reruns on a big upload: what a user waits for, server side, per interaction.

    python benchmarks/bench_dashboard.py [--rows 1000000] [--repeat 5]

Drives the real app with Streamlit's AppTest (no browser): uploads a generated log as Parquet, then times the
first full analysis, the Capacity page, the headline's simulated answer landing (its sizings run on the page's
pool threads: the time from opening the page until they are done, and the process's peak resident set then), and
what-if slider moves on it. Browser rendering comes on top.
"""
from __future__ import annotations

import argparse
import io
import resource
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from streamlit.testing.v1 import AppTest  # noqa: E402

from components import fleet_answer  # noqa: E402
from shapeviz.workload.synth import generate, write_log  # noqa: E402

LIVE_FRAGMENTS = "_whatif_live_fragments"  # components/sidebar.py: the page's what-if fragments a step reruns


def _timed(run) -> float:  # noqa: ANN001 - a zero-argument callable
    start = time.perf_counter()
    run()
    return time.perf_counter() - start


def main() -> None:
    """Print one line per interaction: seconds (median over --repeat where it repeats)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    buffer = io.BytesIO()
    write_log(generate(args.rows, seed=0, with_hashes=False), buffer, fmt="parquet")
    data = buffer.getvalue()

    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=600)
    print(f"app start on the demo: {_timed(at.run):.2f} s")
    at.file_uploader(key="uploads").set_value(("log.parquet", data, "application/octet-stream"))
    print(f"upload of {args.rows:,} requests ({len(data) / 1e6:.1f} MB Parquet) to the Shape page: "
          f"{_timed(at.run):.2f} s")
    print(f"Shape page again (cached analysis): {_timed(at.run):.2f} s")
    at.switch_page("pages/capacity.py")
    opened = time.perf_counter()
    print(f"Capacity page: {_timed(at.run):.2f} s")
    cpu = time.process_time()
    fleet_answer.wait_all(timeout=3600)   # the headline's sizings (the answer and today's fleet), on the pool
    print(f"simulated answer landed: {time.perf_counter() - opened:.2f} s after the page opened "
          f"({time.process_time() - cpu:.1f} s of the process's CPU while waiting); peak RSS so far "
          f"{resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:,.0f} MB")
    for key, future in list(fleet_answer._RESULTS.items()):
        sizing = future.result()
        print(f"  sizing {'with the ' + key[-1] + ' router' if len(key) > 7 else 'round-robin'}: "
              f"{sizing.method}, {sizing.replicas} replicas, meets every class: {sizing.meets}, "
              f"{sizing.cpu_s:.1f} s of CPU")
    print(f"Capacity page with the answer: {_timed(at.run):.2f} s")
    # A trim step now asks for a rerun of the page's what-if fragment only, which AppTest does not replay (its tree
    # then holds the fragment alone, or the page errors on a duplicate key); the step is timed, as before, as a
    # whole-page rerun: the page's set of live fragments is emptied first, so the slider's callback does not ask
    # for them. The fragment step itself is measured in the browser (bench_browser.py).
    moves = []
    for i in range(args.repeat):
        at.session_state[LIVE_FRAGMENTS] = set()
        at.slider(key="trim_input_pct").set_value(5 * (i + 1))
        moves.append(_timed(at.run))
    print(f"what-if slider move, whole Capacity page rerun: median {statistics.median(moves):.2f} s "
          f"(min {min(moves):.2f}, max {max(moves):.2f})")
    at.switch_page("pages/shape.py")
    shape_moves = []
    for i in range(args.repeat):
        at.session_state[LIVE_FRAGMENTS] = set()
        at.slider(key="trim_output_pct").set_value(5 * (i + 1))
        shape_moves.append(_timed(at.run))
    print(f"what-if slider move, whole Shape page rerun (plane redrawn): median {statistics.median(shape_moves):.2f} s")


if __name__ == "__main__":
    main()
