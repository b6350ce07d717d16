"""The dashboard in a real browser: what a user waits for, next to a bare Streamlit page (the floor).

    python benchmarks/bench_browser.py [--rows 1000000] [--steps 5] [--runs 3] [--skip-big] [--settle 40]

Starts the app as ``make run`` does (``python -m components.launch``: ``streamlit run app.py``, warm) and a bare
page (one sidebar slider, one 100-point plotly chart) on loopback, drives them with the system chromium (headless,
through playwright), and prints, per run:

- first page: from the server's health check passing to the demo's Shape page settled (script finished, the
  plane drawn), on a fresh server; and a second session on the warm server; the floor's first page likewise (its
  own fresh server: the browser loading Streamlit and plotly.js and drawing one chart). The app's disk cache is
  empty before run 1 (the first start ever) and filled for later runs (a restarted server);
- slider step: one arrow-key step of "Trim input %" until the rerun it starts has finished (the page's script
  state back to "not running", seen by the page's own JavaScript after it rendered what came first), on the Shape
  and Capacity pages at 20k requests (the demo) and at ``--rows`` (an upload);
- upload to plane: from handing the file to the uploader until the Shape page's plane shows all its requests;
- the same slider step on the bare page, measured in the same run: the floor every ratio is taken against;
- the same slider step on a skeleton of the Capacity headline (``SKELETON_APP``: the slider's ``on_change`` reruns
  one fragment with the headline's 8 metrics and 2 charts, as ``components.sidebar`` did until issue 37's round 9),
  measured in the same run: what Streamlit itself costs for a what-if step built this way, before anything of the
  app's own;
- the same step on ``SKELETON_ONE_RUN_APP``: that skeleton with the slider drawn by its fragment into the sidebar,
  so a step is one script run instead of two: how the app's Capacity headline draws its sliders since round 9;
- with ``--settle S``: the Capacity steps again after S seconds on the page, once the sizings the first steps
  started have landed (no poll rerun, no replay beside a step: "script runs" per step back at 1, 2 before round 9);
- per step, what the server sent (decoded from the page's websocket): script runs started (and full runs among
  them), elements and blocks sent, charts among them, kilobytes;
- per step, the server's CPU and the browser tab's main thread (busy in tasks, in script, in layout and style: Chrome's
  Performance metrics over the steps, divided by their number).

The machine is shared: quote medians over runs and the ratio to the floor of the same run.
"""
from __future__ import annotations

import argparse
import io
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from playwright.sync_api import Page, expect, sync_playwright  # noqa: E402

from shapeviz.workload.synth import generate, write_log  # noqa: E402

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync"]
VIEWPORT = {"width": 1400, "height": 1000}
HOST = "127.0.0.1"
WAIT_MS = 600_000
STEP_MS = 30_000  # one slider step: far above any measured; a step that never finishes is reported and skipped
QUIET_MS = 300  # a rerun that triggers another (e.g. the cache default) shows up within this window

FLOOR_APP = '''
import numpy as np
import plotly.graph_objects as go
import streamlit as st

st.title("Floor")
v = st.sidebar.slider("Trim input %", 0, 90, 0, 5)
x = np.arange(100)
st.plotly_chart(go.Figure(go.Scatter(x=x, y=x * (1 - v / 100), mode="lines")), theme=None)
'''

# The headline fragment's body, after it has read the slider's value ``v``: shared by both skeletons.
HEAD_BODY = '''    st.subheader(f"Before -> after: trim {v}%")
    st.caption(f"The what-if: input trimmed {v}%.")
    for _ in range(2):
        for col in st.columns(4):
            col.metric("Pressure", f"{100 - v}%", f"{-v} pts")
    x = np.arange(100)
    st.plotly_chart(go.Figure(go.Scatter(x=x, y=x * (1 - v / 100), mode="lines")), theme=None, key="a")
    st.plotly_chart(go.Figure(go.Scatter(x=x, y=x * (1 + v / 100), mode="lines")), theme=None, key="b")
'''

# The Capacity headline's shape, nothing else: a sidebar slider whose on_change reruns one fragment (as
# components.sidebar._on_whatif_step did until issue 37's round 9: a full run starts, the callback turns it into the
# fragment's run), and
# in it a heading, a caption, two rows of four metrics and two 100-point charts.
SKELETON_APP = '''
import numpy as np
import plotly.graph_objects as go
import streamlit as st

st.title("Skeleton")
st.sidebar.slider("Trim input %", 0, 90, 0, 5, key="trim", on_change=lambda: st.rerun(scope=["head"]))


def head():
    v = st.session_state["trim"]
{HEAD_BODY}

st.fragment(head, key="head")()
'''.replace("{HEAD_BODY}", HEAD_BODY)

# The same skeleton with the slider drawn by the fragment itself, into a slot of the sidebar (Streamlit 1.67 lets a
# fragment write to a container made outside it, and a widget it wrote there reruns the fragment alone): a step is
# one script run, not a full run that the callback ends early and the fragment's run after it. How the app draws
# its step sliders since issue 37's round 9 (components.sidebar._draw_steps).
SKELETON_ONE_RUN_APP = '''
import numpy as np
import plotly.graph_objects as go
import streamlit as st

st.title("Skeleton, one run")
slot = st.sidebar.container()
st.sidebar.caption("The rest of the sidebar.")


def head():
    v = slot.slider("Trim input %", 0, 90, 0, 5, key="trim")
{HEAD_BODY}

st.fragment(head, key="head")()
'''.replace("{HEAD_BODY}", HEAD_BODY)

# Records every change of the app's script state with its time, so a step can be timed inside the page.
OBSERVE_JS = """() => {
  if (window.__states) return;
  window.__states = [];
  // Several changes can arrive in one batch (a fast run): each record's old value is a state the page was in.
  // The whole document is watched: React may replace the app's root element after the first load.
  new MutationObserver(records => {
    const now = performance.now();
    for (const r of records) window.__states.push([now, r.oldValue]);
    const app = document.querySelector('[data-testid=stApp]');
    window.__states.push([now, app && app.getAttribute('data-test-script-state')]);
  }).observe(document.body, {subtree: true, attributes: true, attributeOldValue: true,
                             attributeFilter: ['data-test-script-state']});
}"""
# Done when a run started after t0 has ended and nothing ran for QUIET_MS since. The browser runs the page's
# JavaScript on one thread, so the state change is seen only after the render of what arrived before it.
DONE_JS = """([t0, quiet]) => {
  const s = window.__states.filter(([t]) => t > t0);
  if (!s.some(([, v]) => v === 'running')) return false;
  const [tl, vl] = s[s.length - 1];
  const app = document.querySelector('[data-testid=stApp]');
  return vl === 'notRunning' && app.getAttribute('data-test-script-state') === 'notRunning'
    && performance.now() - tl > quiet;
}"""
# Rerun end in ms after t0.
END_JS = """(t0) => { const s = window.__states.filter(([t]) => t > t0); return s[s.length - 1][0] - t0; }"""


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind((HOST, 0))
        return int(sock.getsockname()[1])


class Server:
    """``streamlit run`` of one script on a free loopback port, with its CPU seconds readable."""

    def __init__(self, script: Path, log: Path, options: list[str] | None = None) -> None:
        self.port = _free_port()
        self.url = f"http://{HOST}:{self.port}"
        # The app as `make run` starts it (warm); the floor as a plain `streamlit run`.
        start = ["-m", "components.launch"] if script.name == "app.py" else ["-m", "streamlit", "run", str(script)]
        cmd = [sys.executable, *start, "--server.port", str(self.port),
               "--server.address", HOST, "--server.headless", "true", "--browser.gatherUsageStats", "false",
               "--server.fileWatcherType", "none", "--server.maxUploadSize", "2000", *(options or [])]
        self.proc = subprocess.Popen(cmd, cwd=script.parent, stdout=log.open("ab"), stderr=subprocess.STDOUT)

    def wait_healthy(self, timeout_s: float = 180) -> None:
        """Poll the health endpoint (there is no page to wait on yet)."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(f"{self.url}/_stcore/health", timeout=2) as r:
                    if r.status == 200:
                        return
            except OSError:
                pass
            time.sleep(0.1)
        raise SystemExit(f"server at {self.url} never became healthy")

    def cpu_s(self) -> float:
        """User + system CPU seconds of the server process so far."""
        fields = Path(f"/proc/{self.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def stop(self) -> None:
        """Terminate the server."""
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()


def _settled(page: Page) -> None:
    expect(page.get_by_test_id("stApp")).to_have_attribute("data-test-script-state", "notRunning", timeout=WAIT_MS)


def _plane_drawn(page: Page, requests: str) -> None:
    plane = page.get_by_role("main").locator(".js-plotly-plot").first
    expect(plane.locator(".gtitle")).to_contain_text(f"{requests} requests", timeout=WAIT_MS)
    expect(plane.locator(".scatterlayer .trace, .glcanvas, .heatmaplayer image").first).to_be_attached(
        timeout=WAIT_MS)
    _settled(page)


def _browser_busy(cdp) -> dict[str, float]:  # noqa: ANN001 - a CDP session with the Performance domain enabled
    """The page's renderer main thread since the domain was enabled, from Chrome's Performance metrics: seconds busy
    in tasks, in script, in layout and style."""
    metrics = {m["name"]: m["value"] for m in cdp.send("Performance.getMetrics")["metrics"]}
    return {"tasks": metrics["TaskDuration"], "script": metrics["ScriptDuration"],
            "layout and style": metrics["LayoutDuration"] + metrics["RecalcStyleDuration"]}


def _listen(page: Page) -> list[bytes]:
    """Every binary frame the page receives on its websocket from now on (Streamlit's ForwardMsgs), in order."""
    frames: list[bytes] = []
    keep = lambda f: frames.append(f) if isinstance(f, bytes) else None  # noqa: E731 - text frames: none expected
    page.on("websocket", lambda ws: ws.on("framereceived", keep))
    return frames


def _sent(frames: list[bytes]) -> dict[str, float]:
    """What the server sent in ``frames``: script runs started (full runs among them: the whole page, not only
    fragments; a Capacity step's other runs are its own and the headline's poll while the step's sizing runs),
    elements and blocks, charts among the elements, kB."""
    from streamlit.proto.ForwardMsg_pb2 import ForwardMsg

    out = {"script runs": 0.0, "full runs": 0.0, "elements": 0.0, "blocks": 0.0, "charts": 0.0,
           "kB": sum(map(len, frames)) / 1e3}
    for frame in frames:
        msg = ForwardMsg()
        msg.ParseFromString(frame)
        kind = msg.WhichOneof("type")
        if kind == "new_session":
            out["script runs"] += 1
            out["full runs"] += not msg.metadata.run.fragment_ids   # a run of the whole page, not of fragments
        elif kind == "delta" and msg.delta.WhichOneof("type") == "add_block":
            out["blocks"] += 1
        elif kind == "delta" and msg.delta.WhichOneof("type") == "new_element":
            out["elements"] += 1
            out["charts"] += msg.delta.new_element.WhichOneof("type") == "plotly_chart"
    return out


def _steps(page: Page, steps: int, server: Server,
           frames: list[bytes] | None = None) -> tuple[list[float], float, dict[str, float]]:
    """Time ``steps`` arrow-key steps of the Trim input slider: seconds to the rerun's end, server CPU s/step, and
    the browser's main thread per step (``_browser_busy``); with ``frames`` (``_listen``), what the server sent per
    step too (``_sent``)."""
    page.bring_to_front()  # a page behind another has its timers throttled, the slider's debounce among them
    page.evaluate(OBSERVE_JS)
    cdp = page.context.new_cdp_session(page)
    cdp.send("Performance.enable")   # counts from here: one session for the steps (enabling again resets)
    busy0 = _browser_busy(cdp)
    slider = page.get_by_test_id("stSidebar").get_by_role("slider", name="Trim input %")
    ends = []
    cpu0 = server.cpu_s()
    n0 = len(frames or [])
    for i in range(steps):
        slider.focus()
        t0 = page.evaluate("performance.now()")
        slider.press("ArrowRight" if i % 2 == 0 else "ArrowLeft")
        try:
            page.wait_for_function(DONE_JS, arg=[t0, QUIET_MS], timeout=STEP_MS, polling=50)
        except Exception:
            print(f"step {i} from t0={t0:.0f} ms never finished; script states seen: "
                  f"{page.evaluate('window.__states')[-8:]}; slider at {slider.get_attribute('aria-valuenow')}",
                  file=sys.stderr, flush=True)
            continue  # rare (a key press that started no run): the step is left out of the median
        ends.append(page.evaluate(END_JS, t0) / 1000)
    busy = {k: (v - busy0[k]) / steps for k, v in _browser_busy(cdp).items()}
    if frames is not None:
        busy.update({f"sent: {k} (per step)": v / steps for k, v in _sent(frames[n0:]).items()})
    cdp.detach()
    return ends, (server.cpu_s() - cpu0) / steps, busy


def _go(page: Page, link: str, title: str) -> None:
    page.get_by_test_id("stSidebar").get_by_role("link", name=link, exact=True).click()
    expect(page.get_by_role("main").get_by_role("heading", name=title, exact=True)).to_be_visible(timeout=WAIT_MS)
    _settled(page)
    page.wait_for_timeout(QUIET_MS)
    _settled(page)


def one_run(browser, rows: int, steps: int, big: Path | None, log: Path,  # noqa: ANN001
            cache: Path, settle: float = 0) -> dict[str, object]:
    """A fresh app server and floor server; every figure of one run."""
    out: dict[str, object] = {}
    floor_script = log.parent / "floor_app.py"
    floor_script.write_text(FLOOR_APP)
    skeleton_script = log.parent / "skeleton_app.py"
    skeleton_script.write_text(SKELETON_APP)
    one_run_script = log.parent / "skeleton_one_run_app.py"
    one_run_script.write_text(SKELETON_ONE_RUN_APP)
    floor = Server(floor_script, log)
    skeleton = Server(skeleton_script, log)
    one_run = Server(one_run_script, log)
    app = Server(ROOT / "app.py", log)
    out["disk cache entries at start"] = len(list(cache.glob("*.pickle")))
    try:
        floor.wait_healthy()
        skeleton.wait_healthy()
        one_run.wait_healthy()
        app.wait_healthy()
        healthy = time.perf_counter()
        print("  servers healthy", file=sys.stderr, flush=True)
        # Sequential from here: the two servers never compete for the cores during a timed step.
        ctx = browser.new_context(viewport=VIEWPORT)
        page = ctx.new_page()
        sent = {page: _listen(page)}
        page.goto(app.url + "/", wait_until="domcontentloaded", timeout=WAIT_MS)
        _plane_drawn(page, "20,000")
        out["first page, fresh server (s)"] = time.perf_counter() - healthy
        ctx2 = browser.new_context(viewport=VIEWPORT)
        page2 = ctx2.new_page()
        t = time.perf_counter()
        page2.goto(app.url + "/", wait_until="domcontentloaded", timeout=WAIT_MS)
        _plane_drawn(page2, "20,000")
        out["first page, second session (s)"] = time.perf_counter() - t
        ctx2.close()
        page.wait_for_timeout(QUIET_MS)
        _settled(page)

        fctx = browser.new_context(viewport=VIEWPORT)
        fpage = fctx.new_page()
        t = time.perf_counter()   # the floor's server is fresh too: nobody has opened it yet
        fpage.goto(floor.url + "/", wait_until="domcontentloaded", timeout=WAIT_MS)
        expect(fpage.locator(".js-plotly-plot .scatterlayer .trace").first).to_be_attached(timeout=WAIT_MS)
        _settled(fpage)
        out["floor: first page, fresh server (s)"] = time.perf_counter() - t

        def opened(server: Server) -> Page:   # a skeleton's page, drawn, its websocket decoded
            pg = browser.new_context(viewport=VIEWPORT).new_page()
            sent[pg] = _listen(pg)
            pg.goto(server.url + "/", wait_until="domcontentloaded", timeout=WAIT_MS)
            expect(pg.locator(".js-plotly-plot .scatterlayer .trace").first).to_be_attached(timeout=WAIT_MS)
            _settled(pg)
            return pg

        spage, opage = opened(skeleton), opened(one_run)

        def measure(name: str, pg: Page, server: Server) -> None:
            print(f"  measuring {name}", file=sys.stderr, flush=True)
            ends, cpu, busy = _steps(pg, steps, server, sent.get(pg))
            out[f"{name}: step to rerun end (s)"] = statistics.median(ends) if ends else float("nan")
            out[f"{name}: server CPU per step (s)"] = cpu
            for part, seconds in busy.items():
                out[f"{name}: {part}" if part.startswith("sent") else
                    f"{name}: browser main thread per step, {part} (s)"] = seconds

        measure("floor", fpage, floor)
        measure("Shape 20k", page, app)
        _go(page, "Capacity what-if", "Capacity what-if")
        measure("Capacity 20k", page, app)
        if settle:   # the same steps once the sizings they started have landed: no poll, no replay beside a step
            page.wait_for_timeout(settle * 1000)
            _settled(page)
            measure("Capacity 20k, sized", page, app)
        measure("floor again", fpage, floor)
        measure("skeleton", spage, skeleton)
        measure("skeleton, one run", opage, one_run)
        if big is not None:
            _go(page, "Shape", "Workload shape")
            t = time.perf_counter()
            page.get_by_test_id("stSidebar").locator("input[type=file]").set_input_files(big, timeout=WAIT_MS)
            _plane_drawn(page, f"{rows:,}")
            out[f"upload to plane, {rows:,} (s)"] = time.perf_counter() - t
            page.wait_for_timeout(QUIET_MS)
            _settled(page)
            label = f"{rows // 1_000_000}M" if rows >= 1_000_000 else f"{rows // 1000}k"
            measure(f"Shape {label}", page, app)
            _go(page, "Capacity what-if", "Capacity what-if")
            measure(f"Capacity {label}", page, app)
            measure("floor last", fpage, floor)
        ctx.close()
        fctx.close()
        spage.context.close()
        opage.context.close()
    finally:
        app.stop()
        floor.stop()
        skeleton.stop()
        one_run.stop()
    return out


def main() -> None:
    """Print each run's figures, then the medians over runs and the ratios to the floor."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000, help="requests in the big upload")
    parser.add_argument("--steps", type=int, default=5, help="slider steps per page and run")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--skip-big", action="store_true", help="only the demo (20k) and the floor")
    parser.add_argument("--settle", type=float, default=0,
                        help="then wait this many seconds on Capacity (its sizings land) and step it again")
    parser.add_argument("--cache-dir", default=None,
                        help="the app's disk cache (SHAPEVIZ_CACHE_DIR); default: an empty temporary folder")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        # The app's disk cache (the demo's log, analysis and plane), as an operator sets it: empty before the first
        # run, so run 1 is the first start ever and later runs are a restarted server.
        cache = Path(args.cache_dir) if args.cache_dir else work / "cache"
        cache.mkdir(parents=True, exist_ok=True)
        os.environ["SHAPEVIZ_CACHE_DIR"] = str(cache)
        big = None
        if not args.skip_big:
            big = work / f"log_{args.rows}.parquet"
            buffer = io.BytesIO()
            write_log(generate(args.rows, seed=0, with_hashes=False), buffer, fmt="parquet")
            big.write_bytes(buffer.getvalue())
            print(f"big upload: {args.rows:,} requests, {big.stat().st_size / 1e6:.1f} MB Parquet", flush=True)
        runs: list[dict[str, object]] = []
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            for r in range(args.runs):
                load = os.getloadavg()[0]
                result = one_run(browser, args.rows, args.steps, big, work / "server.log", cache, args.settle)
                result["load average at start"] = load
                runs.append(result)
                print(f"run {r + 1}: " + "; ".join(f"{k} {v:.2f}" for k, v in result.items()), flush=True)
            browser.close()
    _summary(runs)


def _summary(runs: list[dict[str, object]]) -> None:
    keys = list(runs[0])
    print("\nmedian over runs (min–max):")
    for k in keys:
        values = [float(r[k]) for r in runs if k in r]
        print(f"  {k}: {statistics.median(values):.2f} ({min(values):.2f}–{max(values):.2f})")
    print("\nslider step to rerun end / floor of the same run (median over runs, min–max):")
    pick: Callable[[dict, str], float] = lambda r, k: float(r[k])  # noqa: E731
    for k in keys:
        if k.endswith("step to rerun end (s)") and not k.startswith("floor"):
            ratios = [pick(r, k) / statistics.median([pick(r, f) for f in r if f.startswith("floor")
                                                        and f.endswith("step to rerun end (s)")]) for r in runs]
            print(f"  {k.split(':')[0]}: {statistics.median(ratios):.1f}× ({min(ratios):.1f}–{max(ratios):.1f}×)")


if __name__ == "__main__":
    main()
