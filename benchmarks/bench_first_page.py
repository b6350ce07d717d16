"""Where the first page's time goes: the browser's main thread and the server, for the app and the floor.

    python benchmarks/bench_first_page.py [--runs 3]

Each run starts a fresh server (the app as ``make run`` starts it, and the bare one-slider page of
``bench_browser.py``), opens it in a fresh headless chromium context with a performance trace on, waits until the
page is settled (the app: the plane drawn; the floor: its chart drawn), and prints:

- the wall time from the health check passing to settled, and the server's CPU seconds over it;
- the chromium main thread's busy seconds, split by what it did: evaluating JavaScript modules (Streamlit's
  bundles, plotly.js), React's rendering (calls into react-dom), promise callbacks (microtasks: protobuf and Arrow
  decoding among them), style and layout, paint;
- how many elements the page sent (the app's disk cache is filled by a first, unreported run).

The machine is shared: read the split of one run against the floor's in the same run.
"""
from __future__ import annotations

import argparse
import collections
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_browser import (  # noqa: E402
    CHROMIUM,
    CHROMIUM_ARGS,
    FLOOR_APP,
    VIEWPORT,
    WAIT_MS,
    Server,
    _plane_drawn,
    _settled,
)
from playwright.sync_api import expect, sync_playwright  # noqa: E402

CATEGORIES = ["devtools.timeline", "v8.execute", "disabled-by-default-devtools.timeline"]
TASKS = ("RunTask", "ThreadControllerImpl::RunTask")
BUCKETS = {  # trace event → what a reader calls it
    "v8.evaluateModule": "evaluate JS modules",
    "RunMicrotasks": "promise callbacks",
    "UpdateLayoutTree": "style and layout",
    "Layout": "style and layout",
    "Commit": "paint",
    "Paint": "paint",
    "PrePaint": "paint",
    "Layerize": "paint",
}


def main_thread_split(trace: dict | list) -> dict[str, float]:
    """Seconds the renderer's main thread was busy, in total and per bucket (React: calls into react-dom)."""
    events = trace["traceEvents"] if isinstance(trace, dict) else trace
    names = {(e["pid"], e["tid"]): e["args"]["name"] for e in events if e.get("name") == "thread_name"}
    main = {k for k, v in names.items() if v == "CrRendererMain"}
    spans = [e for e in events if (e.get("pid"), e.get("tid")) in main and e.get("ph") == "X" and "dur" in e]
    split: dict[str, float] = collections.defaultdict(float)
    busy, end = 0.0, 0.0   # the union of the tasks' spans: a task can run inside another
    for e in sorted((e for e in spans if e["name"] in TASKS), key=lambda e: e["ts"]):
        start, stop = max(e["ts"], end), e["ts"] + e["dur"]
        if stop > start:
            busy, end = busy + stop - start, stop
    split["main thread busy"] = busy / 1e6
    for e in spans:
        url = (e.get("args", {}).get("data", {}) or {}).get("url", "") or ""
        if e["name"] == "FunctionCall" and "react-dom" in url:
            split["React rendering"] += e["dur"] / 1e6
        elif e["name"] in BUCKETS:
            split[BUCKETS[e["name"]]] += e["dur"] / 1e6
    return dict(split)


def first_page(browser, script: Path, log: Path, app: bool) -> dict[str, float]:  # noqa: ANN001
    """One fresh server, one fresh browser context: the wall time, server CPU and main-thread split."""
    server = Server(script, log)
    try:
        server.wait_healthy()
        t0, cpu0 = time.perf_counter(), server.cpu_s()
        ctx = browser.new_context(viewport=VIEWPORT)
        page = ctx.new_page()
        browser.start_tracing(page=page, categories=CATEGORIES)
        page.goto(server.url + "/", wait_until="domcontentloaded", timeout=WAIT_MS)
        if app:
            _plane_drawn(page, "20,000")
        else:
            expect(page.locator(".js-plotly-plot .scatterlayer .trace").first).to_be_attached(timeout=WAIT_MS)
            _settled(page)
        out = {"settled (s)": time.perf_counter() - t0, "server CPU (s)": server.cpu_s() - cpu0}
        out.update(main_thread_split(json.loads(browser.stop_tracing())))
        out["elements"] = page.locator("[data-testid=stElementContainer]").count()
        ctx.close()
        return out
    finally:
        server.stop()


def main() -> None:
    """Print each run's split for the app and the floor, then the medians."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        os.environ["SHAPEVIZ_CACHE_DIR"] = str(work / "cache")
        (work / "cache").mkdir()
        floor_script = work / "floor_app.py"
        floor_script.write_text(FLOOR_APP)
        results: dict[str, list[dict[str, float]]] = {"app": [], "floor": []}
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            first_page(browser, ROOT / "app.py", work / "server.log", app=True)  # fills the disk cache
            for r in range(args.runs):
                for name, script in (("app", ROOT / "app.py"), ("floor", floor_script)):
                    res = first_page(browser, script, work / "server.log", app=name == "app")
                    results[name].append(res)
                    print(f"run {r + 1} {name} (load {os.getloadavg()[0]:.1f}): "
                          + "; ".join(f"{k} {v:.2f}" for k, v in res.items()), flush=True)
            browser.close()
    print("\nmedian over runs: app | floor")
    for key in results["app"][0]:
        a = statistics.median(r.get(key, 0.0) for r in results["app"])
        f = statistics.median(r.get(key, 0.0) for r in results["floor"])
        print(f"  {key}: {a:.2f} | {f:.2f}")


if __name__ == "__main__":
    main()
