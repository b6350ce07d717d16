"""Every chart on the Capacity page reads: no title, subtitle, axis title, legend entry or annotation drawn over
another (the browser's own layout of plotly's SVG, at the size a user sees it)."""
from __future__ import annotations

import itertools

import pytest

from tests.needs import require_module  # noqa: E402  (skips locally, fails under CI=true)

require_module("playwright.sync_api", "the playwright package drives the browser tests")

from dashboard import BUILD_MS, RERUN_MS, Dashboard, OpenDashboard  # noqa: E402
from playwright.sync_api import expect  # noqa: E402

pytestmark = pytest.mark.e2e

# The texts of a plotly chart a reader reads: the title (and its subtitle), axis titles, legend entries,
# annotations (panel titles, SLO labels). Tick labels are plotly's own layout and never collide.
TEXTS = "text.gtitle, text[class$='title'], .legendtext, .annotation-text"
SLACK_PX = 1.0  # boxes that merely touch do not overlap

_BOXES_JS = """(plot, selector) => Array.from(plot.querySelectorAll(selector))
    .map(el => { const r = el.getBoundingClientRect();
                 return {text: (el.textContent || '').trim(), x: r.left, y: r.top, w: r.width, h: r.height}; })
    .filter(b => b.text && b.w > 0 && b.h > 0)"""


def overlaps(boxes: list[dict]) -> list[str]:
    """Each pair of text boxes that intersect by more than SLACK_PX both ways, as 'a' × 'b'."""
    found = []
    for a, b in itertools.combinations(boxes, 2):
        dx = min(a["x"] + a["w"], b["x"] + b["w"]) - max(a["x"], b["x"])
        dy = min(a["y"] + a["h"], b["y"] + b["h"]) - max(a["y"], b["y"])
        if dx > SLACK_PX and dy > SLACK_PX:
            found.append(f"{a['text']!r} × {b['text']!r}")
    return found


def _click(app: Dashboard, name: str, shows: str) -> None:
    button = app.main.get_by_role("button", name=name)
    expect(button).to_be_visible(timeout=RERUN_MS)
    button.click()
    # its result on the page (a simulation or a design runs for tens of seconds, longer on a busy machine): waiting
    # only for the script to be idle could look before the click's run started, and the next click would then
    # interrupt this section's run midway
    expect(app.main.get_by_text(shows).first).to_be_visible(timeout=BUILD_MS)
    app.settle()


def test_no_two_texts_of_a_capacity_chart_overlap(open_dashboard: OpenDashboard) -> None:
    app = open_dashboard()  # the demo: five products, sessions (the routers' chart), timestamps (over time)
    app.settle()  # the plane of 20,000 requests drawn before the next click
    app.go("Capacity what-if")
    # the headline's replays and the cache-aware router's are done before the clicks (each reruns the page once)
    expect(app.metric("GPUs colocated (simulated)")).to_be_visible(timeout=BUILD_MS)
    # the router's replays are done when their pending line is gone (the demo's answer is one replica since
    # swe-agent's prompts beyond Llama-3.1-70B's context window are refused: then there is no lever line to wait for)
    app.settle()
    expect(app.main.get_by_text("Replaying the log with a cache-aware router")).to_have_count(0, timeout=BUILD_MS)
    app.settle()
    app.main.get_by_text("Plan the fleet window by window").click()
    expect(app.main.get_by_text("Next quarter: growth per product")).to_be_visible(timeout=BUILD_MS)
    app.settle()
    for name, shows in (("Simulate this fleet", "Simulated TTFT p90"), ("Compare routers", "Prefix hit ratio"),
                        ("Design the fleet", "simulations; searched on the busiest")):
        _click(app, name, shows)
    expect(app.main.locator(".js-plotly-plot")).not_to_have_count(0, timeout=BUILD_MS)
    app.expect_healthy()

    titles, collisions = [], {}
    for plot in app.charts.all():
        plot.scroll_into_view_if_needed()
        boxes = plot.evaluate(_BOXES_JS, TEXTS)
        title = next((b["text"] for b in boxes if b["text"]), "?")
        titles.append(title)
        if found := overlaps(boxes):
            collisions[title] = found
    # Every section that draws a chart was reached (the headline's two, simulation, routers, over time, growth).
    assert len(titles) >= 8, f"only {len(titles)} charts on the page: {titles}"
    assert not collisions, f"chart texts drawn over each other: {collisions}"
