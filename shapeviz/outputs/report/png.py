"""PNG charts: kaleido driving the system chromium (never a browser download)."""
from __future__ import annotations

import asyncio
import os
import shutil
import threading
from pathlib import Path
from typing import Any, Callable, Mapping

import plotly.graph_objects as go

# --- PNG: kaleido driving the system chromium ---------------------------------------------------------------
PNG_WIDTH = 1200        # px at scale 1: wide enough for a slide, the figures set their own height
PNG_SCALE = 2           # crisp on a projector; the PNG is PNG_WIDTH·scale × height·scale pixels
PNG_TIMEOUT_S = 90.0    # per figure, inside one browser session
CHROMIUM_HINT = "install the `chromium` package (e.g. apt-get install chromium) or set BROWSER_PATH to a Chrome/Chromium"


def browser_path() -> str:
    """The Chromium kaleido drives: ``$BROWSER_PATH``, else ``chromium`` on the PATH; ValueError if neither.

    Kaleido could download a browser of its own; it never does here (a report must not fetch software).
    """
    env = os.environ.get("BROWSER_PATH")
    if env:
        if Path(env).is_file() and os.access(env, os.X_OK):
            return env
        raise ValueError(f"PNG export: BROWSER_PATH={env!r} is not an executable browser; {CHROMIUM_HINT}")
    for name in ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable"):
        found = shutil.which(name)
        if found:
            return found
    raise ValueError(f"PNG export needs a Chromium browser and none was found: {CHROMIUM_HINT}")


def _transient_errors() -> tuple[type[BaseException], ...]:
    """Errors of a browser session worth one retry (e.g. ``JavascriptError: kaleido_scopes is not defined``)."""
    from kaleido.errors import (
        BrowserClosedError,
        BrowserFailedError,
        JavascriptError,
        KaleidoError,
    )

    return (JavascriptError, KaleidoError, BrowserFailedError, BrowserClosedError, asyncio.TimeoutError,
            TimeoutError, ConnectionError)


def _in_thread(make: Callable[[], Any]) -> Any:
    """Run a coroutine to completion on a fresh event loop in its own thread (safe under Streamlit or a loop)."""
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["value"] = asyncio.run(make())
        except BaseException as exc:  # noqa: BLE001 - handed back to the caller's thread
            box["error"] = exc

    thread = threading.Thread(target=target, name="shapeviz-png", daemon=True)
    thread.start()
    thread.join()
    if "error" in box:
        raise box["error"]
    return box["value"]


def _svg_points(fig: go.Figure) -> go.Figure:
    """The same picture with WebGL scatters drawn as SVG: a headless browser has no GPU and software WebGL is
    slow (3-4 s per scatter at scale 2), while SVG draws the few thousand points of a figure in a fraction."""
    if not any(getattr(t, "type", None) == "scattergl" for t in fig.data):
        return fig
    spec = fig.to_plotly_json()
    for trace in spec["data"]:
        if trace.get("type") == "scattergl":
            trace["type"] = "scatter"
    return go.Figure(spec)


def _png_opts(fig: go.Figure, width: int, scale: float) -> dict[str, Any]:
    height = fig.layout.height or 500
    return {"format": "png", "width": int(width), "height": int(height), "scale": scale}


def figures_to_png(
    figures: Mapping[str, go.Figure], *, width: int = PNG_WIDTH, scale: float = PNG_SCALE
) -> dict[str, bytes]:
    """Render several figures to PNG in one browser session (one start costs seconds); one retry on a flake.

    Raises ValueError with one line when no browser is installed or rendering fails twice.
    """
    if not figures:
        return {}
    import kaleido

    path = browser_path()
    items = list(figures.items())
    done: dict[str, bytes] = {}

    async def render() -> None:
        async with kaleido.Kaleido(n=1, timeout=PNG_TIMEOUT_S, mathjax=False, path=path) as k:
            for name, fig in items:
                if name not in done:  # a retry renders only what the failed session had not
                    done[name] = await k.calc_fig(_svg_points(fig), opts=_png_opts(fig, width, scale))

    transient = _transient_errors()
    for attempt in (1, 2):
        try:
            _in_thread(render)
            break
        except transient as exc:
            if attempt == 2:
                raise ValueError(f"PNG export failed after a retry ({type(exc).__name__}: {_first_line(exc)}); "
                                 f"the browser at {path} may be starved on a busy machine: try again") from None
        except Exception as exc:  # noqa: BLE001 - e.g. ChromeNotFoundError: one line, not a traceback
            raise ValueError(f"PNG export failed ({type(exc).__name__}: {_first_line(exc)}); {CHROMIUM_HINT}") from None
    return {name: done[name] for name, _ in items}


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0][:200] if text else "no message"


def png_size(data: bytes) -> tuple[int, int]:
    """(width, height) of a PNG from its IHDR chunk; ValueError if the bytes are not a PNG."""
    if len(data) < 24 or data[:8] != b"\x89PNG\r\n\x1a\n" or data[12:16] != b"IHDR":
        raise ValueError("not a PNG image (bad signature or no IHDR chunk)")
    return int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")


