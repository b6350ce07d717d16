"""Five visitors upload a log at once: the server's health check, its memory, and what it gives back.

    python benchmarks/bench_uploads.py [--rows 200000] [--sessions 5] [--after-s 180]

Starts the app as ``make run`` does (``python -m components.launch``) on 127.0.0.1 only, opens ``--sessions``
browser sessions (system chromium, headless, through playwright), hands each the same ``--rows``-request
Parquet log at once, and waits until every session's plane shows all its requests. Meanwhile the health endpoint
(what the Docker HEALTHCHECK asks) is polled every 0.25 s: the slowest answer is the figure that matters (the
image allows 5 s; the issue asks for 2 s). The server's resident memory is read from /proc before, at its peak
(VmHWM), once every session has its plane, and every 10 s after every session closed up to ``--after-s`` (Streamlit
ends a closed session ``server.disconnectedSessionTTL`` after its browser left, 120 s by default; its uploads'
memory is handed back then): printed at 60 s and at the end. Bounded: one server, loopback only, a fixed number of
sessions and rows.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from bench_browser import CHROMIUM, CHROMIUM_ARGS, VIEWPORT, WAIT_MS, Server, _plane_drawn, _settled  # noqa: E402
from playwright.sync_api import sync_playwright  # noqa: E402

from shapeviz.workload.synth import generate, write_log  # noqa: E402


def _rss_mb(pid: int, field: str = "VmRSS") -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024
    return float("nan")


class HealthProbe(threading.Thread):
    """Asks the health endpoint every 0.25 s and keeps how long each answer took (10 s: counted as no answer)."""

    def __init__(self, url: str) -> None:
        super().__init__(daemon=True)
        self.url, self.times, self.stopped = f"{url}/_stcore/health", [], threading.Event()

    def run(self) -> None:
        while not self.stopped.is_set():
            t = time.perf_counter()
            try:
                with urllib.request.urlopen(self.url, timeout=10) as r:
                    r.read()
            except OSError:
                pass
            self.times.append(time.perf_counter() - t)
            self.stopped.wait(0.25)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--sessions", type=int, default=5)
    parser.add_argument("--after-s", type=float, default=180.0,
                        help="how long to watch RSS after the sessions closed (a minute past the 120 s session TTL)")
    args = parser.parse_args()
    print("load average before:", os.getloadavg())
    with tempfile.TemporaryDirectory() as work:
        work_dir = Path(work)
        log = work_dir / "upload.parquet"
        write_log(generate(args.rows, seed=7), log, fmt="parquet")
        os.environ["SHAPEVIZ_CACHE_DIR"] = str(work_dir / "cache")
        os.environ["SHAPEVIZ_CACHE_KEY_FILE"] = str(work_dir / "key" / "cache.key")
        server = Server(ROOT / "app.py", work_dir / "server.log")
        try:
            server.wait_healthy()
            with sync_playwright() as p:
                browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
                contexts = [browser.new_context(viewport=VIEWPORT) for _ in range(args.sessions)]
                pages = [c.new_page() for c in contexts]
                for page in pages:
                    page.goto(server.url, timeout=WAIT_MS)
                    _settled(page)
                rss_idle = _rss_mb(server.proc.pid)
                probe = HealthProbe(server.url)
                probe.start()
                t = time.perf_counter()
                for page in pages:   # handed over one after another, read by the server at the same time
                    page.get_by_test_id("stSidebar").locator("input[type=file]").set_input_files(log, timeout=WAIT_MS)
                for page in pages:
                    _plane_drawn(page, f"{args.rows:,}")
                all_drawn_s = time.perf_counter() - t
                rss_loaded = _rss_mb(server.proc.pid)
                probe.stopped.set()
                probe.join()
                load_during = os.getloadavg()
                for c in contexts:
                    c.close()
                browser.close()
            closed, after = time.monotonic(), {}
            while (waited := time.monotonic() - closed) < args.after_s:
                time.sleep(min(10.0, args.after_s - waited))
                after[round(time.monotonic() - closed)] = _rss_mb(server.proc.pid)
            rss_60 = next((mb for s, mb in after.items() if s >= 60), float("nan"))
            rss_after = _rss_mb(server.proc.pid)
            peak = _rss_mb(server.proc.pid, "VmHWM")
        finally:
            server.stop()
    times = sorted(probe.times)
    print(f"{args.sessions} sessions x {args.rows:,} requests (Parquet {log.name}), all planes drawn in "
          f"{all_drawn_s:.1f} s; load average after: {load_during}")
    print(f"health check: {len(times)} answers, median {statistics.median(times):.3f} s, "
          f"p90 {times[int(0.9 * (len(times) - 1))]:.3f} s, slowest {times[-1]:.3f} s, "
          f"over 2 s: {sum(t > 2 for t in times)}")
    print(f"server RSS: idle {rss_idle:.0f} MB, peak {peak:.0f} MB, with every plane {rss_loaded:.0f} MB, "
          f"60 s after every session closed {rss_60:.0f} MB, {args.after_s:.0f} s after {rss_after:.0f} MB")
    print("RSS after the sessions closed (s: MB):", ", ".join(f"{s}: {mb:.0f}" for s, mb in after.items()))


if __name__ == "__main__":
    main()
