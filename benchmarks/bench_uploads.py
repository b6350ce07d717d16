"""Five visitors upload a log at once, round after round: the health check, the memory, and what comes back.

    python benchmarks/bench_uploads.py [--rows 200000] [--sessions 5] [--rounds 3] [--ttl-s 10] [--after-s 45]
                                       [--demo-round]

Starts the app as ``make run`` does (``python -m components.launch``) on 127.0.0.1 only. Each round opens
``--sessions`` browser sessions (system chromium, headless, through playwright) at once (their first pages load
together), hands each the same ``--rows``-request Parquet log, waits until every session's plane shows all its
requests, closes every session and reads the server's resident memory (/proc VmRSS) every 5 s for ``--after-s``.
Streamlit ends a closed session ``server.disconnectedSessionTTL`` after its browser left (``--ttl-s``, 120 s by
default in the app; shorter here so three rounds fit in minutes) plus 5 s, and its memory is handed back 10 s
later. The health endpoint (what the Docker HEALTHCHECK asks) is polled every ``--poll-s`` (0.05 s) throughout;
its answers are reported per phase: while the first pages load, while the uploads are read. Idle is the RSS of the
started server before any session; with ``--demo-round``, a first round only opens the demo (no upload) and is
closed like the others, and the RSS after it (the server warm: the demo's log, analysis and plane, the modules a
first page imports) is what the upload rounds are also compared with. Bounded: one server, loopback only, a fixed
number of sessions and rows.
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
    """Asks the health endpoint every ``every_s`` and keeps each answer's time under the current phase's name."""

    def __init__(self, url: str, every_s: float) -> None:
        super().__init__(daemon=True)
        self.url, self.every_s, self.stopped = f"{url}/_stcore/health", every_s, threading.Event()
        self.phase, self.times = "idle", {}

    def run(self) -> None:
        while not self.stopped.is_set():
            phase, t = self.phase, time.perf_counter()
            try:
                with urllib.request.urlopen(self.url, timeout=10) as r:
                    r.read()
            except OSError:
                pass   # 10 s without an answer counts as 10 s
            self.times.setdefault(phase, []).append(time.perf_counter() - t)
            self.stopped.wait(self.every_s)


def _quantile(times: list[float], q: float) -> float:
    ordered = sorted(times)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def _health_line(name: str, times: list[float]) -> str:
    if not times:
        return f"  {name}: no answers"
    return (f"  {name}: {len(times)} answers, median {statistics.median(times):.3f} s, p99 "
            f"{_quantile(times, 0.99):.3f} s, slowest {max(times):.3f} s, over 1 s: {sum(t > 1 for t in times)}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--sessions", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--ttl-s", type=float, default=10.0, help="server.disconnectedSessionTTL for this server")
    parser.add_argument("--after-s", type=float, default=45.0, help="how long to read RSS after a round's close")
    parser.add_argument("--poll-s", type=float, default=0.05, help="how often the health endpoint is asked")
    parser.add_argument("--demo-round", action="store_true",
                        help="first a round that only opens the demo (no upload), closed like the others: the RSS "
                             "after it is the server warm, what every later round is also compared with")
    args = parser.parse_args()
    print("load average before:", os.getloadavg(), flush=True)
    with tempfile.TemporaryDirectory() as work:
        work_dir = Path(work)
        log = work_dir / "upload.parquet"
        write_log(generate(args.rows, seed=7), log, fmt="parquet")
        os.environ["SHAPEVIZ_CACHE_DIR"] = str(work_dir / "cache")
        os.environ["SHAPEVIZ_CACHE_KEY_FILE"] = str(work_dir / "key" / "cache.key")
        server = Server(ROOT / "app.py", work_dir / "server.log",
                        ["--server.disconnectedSessionTTL", str(int(args.ttl_s))])
        rounds = []
        try:
            server.wait_healthy()
            time.sleep(2)
            rss_idle = _rss_mb(server.proc.pid)
            print(f"idle RSS {rss_idle:.0f} MB", flush=True)
            probe = HealthProbe(server.url, args.poll_s)
            probe.start()
            rss_warm = None
            with sync_playwright() as p:
                browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
                if args.demo_round:   # the demo's log, analysis and plane, the modules a first page uses: kept
                    contexts = [browser.new_context(viewport=VIEWPORT) for _ in range(args.sessions)]
                    pages = [c.new_page() for c in contexts]
                    probe.phase = "demo round"
                    for page in pages:
                        page.goto(server.url, timeout=WAIT_MS, wait_until="commit")
                    for page in pages:
                        _plane_drawn(page, "20,000")
                    for c in contexts:
                        c.close()
                    time.sleep(args.after_s)
                    rss_warm = _rss_mb(server.proc.pid)
                    print(f"warm RSS (a demo round served and closed, {args.after_s:.0f} s later) {rss_warm:.0f} MB",
                          flush=True)
                for r in range(args.rounds):
                    contexts = [browser.new_context(viewport=VIEWPORT) for _ in range(args.sessions)]
                    pages = [c.new_page() for c in contexts]
                    probe.phase, t = f"first pages {r + 1}", time.perf_counter()
                    for page in pages:   # every first page asked for before any is waited on
                        page.goto(server.url, timeout=WAIT_MS, wait_until="commit")
                    for page in pages:
                        _settled(page)
                    first_s = time.perf_counter() - t
                    probe.phase, t = f"uploads {r + 1}", time.perf_counter()
                    for page in pages:   # handed over one after another, read by the server at the same time
                        page.get_by_test_id("stSidebar").locator("input[type=file]").set_input_files(
                            log, timeout=WAIT_MS)
                    for page in pages:
                        _plane_drawn(page, f"{args.rows:,}")
                    drawn_s = time.perf_counter() - t
                    loaded = _rss_mb(server.proc.pid)
                    probe.phase = "after"
                    load = os.getloadavg()
                    for c in contexts:
                        c.close()
                    closed, after = time.monotonic(), {}
                    while (waited := time.monotonic() - closed) < args.after_s:
                        time.sleep(min(5.0, args.after_s - waited))
                        after[round(time.monotonic() - closed)] = _rss_mb(server.proc.pid)
                    rounds.append((first_s, drawn_s, loaded, after, load))
                    for name in (f"first pages {r + 1}", f"uploads {r + 1}"):
                        print(_health_line(name, probe.times.get(name, [])), flush=True)
                    print(f"round {r + 1}: first pages {first_s:.1f} s, planes {drawn_s:.1f} s, RSS with planes "
                          f"{loaded:.0f} MB, after close (s: MB) "
                          + ", ".join(f"{s}: {mb:.0f}" for s, mb in after.items())
                          + f"; load {load}", flush=True)
                browser.close()
            probe.stopped.set()
            probe.join()
            peak = _rss_mb(server.proc.pid, "VmHWM")
        finally:
            server.stop()
    print(f"{args.sessions} sessions x {args.rows:,} requests x {args.rounds} rounds; session TTL {args.ttl_s:.0f} s; "
          f"load average now {os.getloadavg()}")
    print(f"server RSS: idle {rss_idle:.0f} MB, peak (VmHWM) {peak:.0f} MB; after each round's close: "
          + ", ".join(f"{list(a.values())[-1]:.0f} MB (+{list(a.values())[-1] - rss_idle:.0f})"
                      for _, _, _, a, _ in rounds))
    if rss_warm is not None:
        print(f"against the server warm ({rss_warm:.0f} MB, after the demo round): "
              + ", ".join(f"{list(a.values())[-1] - rss_warm:+.0f} MB" for _, _, _, a, _ in rounds))
    print("health check (every answer, by phase):")
    for name in ("first pages", "uploads", "after"):
        print(_health_line(name + " (every round)", [t for phase, times in probe.times.items()
                                                     if phase.startswith(name) for t in times]))


if __name__ == "__main__":
    main()
