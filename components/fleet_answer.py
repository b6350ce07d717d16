"""The Capacity headline's fleet size: the analytic estimate at once, the simulated answer when it is ready.

The answer is ``shapeviz.fleet.sizing.fleet_answer`` (what ``plan``, ``config`` and the report print), run in a
background thread so the sliders never wait for it; results are kept per log and settings (a bounded table of at
most ``MAX_ENTRIES``), so moving a slider back shows its answer at once. Every product is judged against the page's
classes (``components.classes``: its own, else the sidebar's TTFT/TPOT pair).
"""
from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Mapping
from concurrent.futures import Future
from typing import Any

import streamlit as st

from components.classes import classes_key
from components.work_pool import DRAWS, FairPool
from components.widgets import badge
from shapeviz.fleet.sizing import (
    Sizing,
    fleet_answer,
    lever_of,
    lever_router,
    misses_words,
    pressure_reason,
    router_lever_line,
    sized_plan,
)
from shapeviz.physics import Deployment
from shapeviz.serving import Plan, WhatIf, Workload
from shapeviz.serving.products import SloClass
from shapeviz.text import md_literal

MAX_ENTRIES = 16
POLL_S = 1.0
_POLL_CLOCKS = "_answer_poll_clocks"   # per polled line, which of its two intervals it last drew (``_polled_line``)
_NEW_CLOCK = 1.001   # the other interval: a changed interval is what makes the browser start the timer anew
# every session's sizings on a thread per core, taken fairly (sessions in turn, each one's latest step first); a
# session that left cancels what it queued (data.end_session_when_it_leaves calls work_pool.cancel_session); between two replays
# a sizing steps aside while any session's what-if fragment draws (work_pool.DRAWS)
_POOL = FairPool(name="fleet-answer")
_LOCK = threading.Lock()
_RESULTS: OrderedDict[tuple, Future] = OrderedDict()


def submit(key: tuple, frame: Any, w: Workload, dep: Deployment, whatif: WhatIf, ttft_slo_ms: float,
           tpot_slo_ms: float, gpu_hour_usd: float, classes: Mapping[str, SloClass] | None,
           router: str | None = None) -> Future:
    """The sizing of ``key`` (log digest and settings): started once, kept while it is among the latest."""
    session = current_session()
    with _LOCK:
        future = _RESULTS.get(key)
        if future is None or future.cancelled():   # cancelled: the session that queued it left before it ran
            future = _POOL.submit(session, lambda: fleet_answer(
                w, dep, frame, whatif=whatif, ttft_slo_ms=ttft_slo_ms, tpot_slo_ms=tpot_slo_ms, pause=DRAWS.pause,
                gpu_hour_usd=gpu_hour_usd, classes=classes, router=router)[1])
            _RESULTS[key] = future
        else:
            _POOL.claim(future, session)   # this session wants it too: its latest request, kept while it stays
        _RESULTS.move_to_end(key)
        while len(_RESULTS) > MAX_ENTRIES:   # the oldest go; ``key`` is the newest now, so never itself
            _RESULTS.popitem(last=False)
        return future


def current_session() -> str:
    """The Streamlit session asking ("" off a script thread: a growth replay's own sizing of today's fleet)."""
    from streamlit.runtime.scriptrunner import get_script_run_ctx

    ctx = get_script_run_ctx(suppress_warning=True)
    return "" if ctx is None else str(ctx.session_id)


def key_of(digest: str, dep: Deployment, whatif: WhatIf, ttft_slo_ms: float, tpot_slo_ms: float,
           gpu_hour_usd: float, classes: Mapping[str, SloClass] | None) -> tuple:
    """The key a sizing is kept under: the log's digest and every setting it depends on (the classes too)."""
    judged = None if classes is None else classes_key(classes)
    return (digest, dep, whatif, float(ttft_slo_ms), float(tpot_slo_ms), float(gpu_hour_usd), judged)


def sizing_of(digest: str, frame: Any, w: Workload, dep: Deployment, whatif: WhatIf, ttft_slo_ms: float,
              tpot_slo_ms: float, gpu_hour_usd: float, classes: Mapping[str, SloClass] | None) -> Sizing:
    """The one sizing of ``dep`` for this log and settings, waited for: for the page's own deployment it is the
    headline's (the same key), so Compare deployments shows the headline's fleet, not a second answer."""
    key = key_of(digest, dep, whatif, ttft_slo_ms, tpot_slo_ms, gpu_hour_usd, classes)
    future = submit(key, frame, w, dep, whatif, ttft_slo_ms, tpot_slo_ms, gpu_hour_usd, classes)
    with DRAWS.aside():   # a draw that waits for this sizing must not hold it back
        return future.result()


def ready(digest: str, dep: Deployment, whatif: WhatIf, ttft_slo_ms: float, tpot_slo_ms: float,
          gpu_hour_usd: float, classes: Mapping[str, SloClass] | None) -> Sizing | None:
    """The headline's sizing for these settings when it is done (None while it runs, or never started)."""
    key = key_of(digest, dep, whatif, ttft_slo_ms, tpot_slo_ms, gpu_hour_usd, classes)
    with _LOCK:
        future = _RESULTS.get(key)
    if future is None or not future.done() or future.exception() is not None:
        return None
    return future.result()


def wait_all(timeout: float) -> None:
    """Block until every sizing started so far is done (tests; the page never waits)."""
    with _LOCK:
        futures = list(_RESULTS.values())
    for future in futures:
        future.result(timeout=timeout)


def answer_line(sizing: Sizing, tp: int) -> str:
    """The headline sentence of a simulated sizing (markdown; the log's text shown literally)."""
    window = md_literal(sizing.sized_on.get("window", ""))
    if sizing.answer is None and sizing.unreachable:   # every product out of reach: nothing was replayed
        return " ".join(f"**No fleet size serves {md_literal(u['product'])}** on this deployment: "
                        f"{md_literal(u['why'])}. Levers: {md_literal(u['levers'])}." for u in sizing.unreachable)
    if not sizing.meets_others:
        return (f"**No fleet size meets every product's p90 class** up to {sizing.replicas} × TP{tp} on {window}: "
                + md_literal("; ".join(sizing.notes)))
    estimate = ("" if sizing.estimate is None else
                f" (the estimate said {sizing.estimate} × TP{tp} = {sizing.estimate * tp} GPUs)")
    text = (f"**Simulated: {sizing.replicas} × TP{tp} = {sizing.replicas * tp} GPUs** meet every "
            f"{'' if sizing.meets else 'other '}product's p90 class on {window}{estimate}")
    fewer = sizing.one_fewer
    if fewer is not None:   # the products that miss, each with the p90 over its class
        text += (f"; {fewer.replicas} replica(s) miss {md_literal(misses_words(fewer)) or 'a class'}")
    text += "."
    for u in sizing.unreachable:   # named, with why and the levers: the fleet above is sized for the others
        text += (f" **No fleet size serves {md_literal(u['product'])}** on this deployment: {md_literal(u['why'])}. "
                 f"Levers: {md_literal(u['levers'])}.")
    return text


def start(digest: str, frame: Any, w: Workload, dep: Deployment, whatif: WhatIf, ttft_slo_ms: float,
          tpot_slo_ms: float, gpu_hour_usd: float, classes: Mapping[str, SloClass] | None) -> tuple[Future, Future] | None:
    """The headline's two sizings, started where they are not: after the what-if (the answer) and of the log as it
    is (today's fleet, which the before → after compares on). None when the log has no timestamps to replay."""
    if frame is None or "timestamp" not in frame.columns:
        return None
    before = None if whatif.is_identity else submit(
        key_of(digest, dep, WhatIf(), ttft_slo_ms, tpot_slo_ms, gpu_hour_usd, classes), frame, w, dep, WhatIf(),
        ttft_slo_ms, tpot_slo_ms, gpu_hour_usd, classes)
    after = submit(key_of(digest, dep, whatif, ttft_slo_ms, tpot_slo_ms, gpu_hour_usd, classes), frame, w, dep,
                   whatif, ttft_slo_ms, tpot_slo_ms, gpu_hour_usd, classes)   # submitted last: the latest kept
    return after, before or after


def start_lever(digest: str, frame: Any, w: Workload, dep: Deployment, whatif: WhatIf, ttft_slo_ms: float,
                tpot_slo_ms: float, gpu_hour_usd: float,
                classes: Mapping[str, SloClass] | None) -> tuple[str, Future] | None:
    """The sizing with a cache-aware router (``sizing.lever_router``), the lever beside a round-robin answer: queued
    behind the headline's (``start``; the worker takes one sizing at a time). None on a log without hashes or
    sessions, where no router changes what is cached."""
    router = _lever_router(digest, frame)
    if router is None:
        return None
    key = key_of(digest, dep, whatif, ttft_slo_ms, tpot_slo_ms, gpu_hour_usd, classes) + (router,)
    return router, submit(key, frame, w, dep, whatif, ttft_slo_ms, tpot_slo_ms, gpu_hour_usd, classes, router)


@st.cache_resource(max_entries=MAX_ENTRIES, ttl=6 * 3600, scope="session", show_spinner=False)
def _lever_router(digest: str, _frame: Any) -> str | None:
    """``sizing.lever_router`` of a log, once per log: it reads the log's hash and session columns (a pass over every
    row on a log without hashes), which every slider step did again."""
    return lever_router(_frame)


def sized_plans(futures: tuple[Future, Future] | None, before: Plan, after: Plan, tp: int) -> tuple[Plan, Plan] | None:
    """The estimate's plans before and after the what-if with the simulated answers in their place, once both
    sizings are done (None until then, or when one failed: the estimate stands)."""
    if futures is None or not all(f.done() and f.exception() is None for f in futures):
        return None
    sized_after, sized_before = (f.result() for f in futures)
    return sized_plan(before, sized_before, tp), sized_plan(after, sized_after, tp)


def _polled_line(name: str, pending: bool, ready: Callable[[], bool], waiting: str,
                 draw: Callable[[], None]) -> None:
    """A line that says ``waiting`` until ``ready()``, then ``draw()``s. While ``pending`` (what the page above shows
    is not yet what is ready) it polls every ``POLL_S`` and, once ready, reruns the page once: from its poll, never
    from within the page's own run, where a click being handled (a section's button below) would be lost.

    The poll's clock starts at each draw (``name`` tells the page's polled lines apart): the browser keeps a timer
    whose interval is unchanged, so a step drawing the line again would otherwise have the poll fire inside the next
    step. Once not pending the line is drawn outside any fragment, so a what-if step that reruns its fragment alone
    drops the poll's timer (Streamlit cancels the timers of nested fragments a rerun did not draw again); a fragment
    drawn without ``run_every`` would leave the browser polling it every second."""
    if not pending:
        draw()
        return
    clocks = st.session_state.setdefault(_POLL_CLOCKS, {})
    clocks[name] = not clocks.get(name, False)
    inline = [True]

    @st.fragment(run_every=POLL_S * (_NEW_CLOCK if clocks[name] else 1.0))
    def _line() -> None:
        if not ready() or inline[0]:
            st.caption(waiting)
            return
        st.rerun()

    _line()
    inline[0] = False


def render_answer(futures: tuple[Future, Future] | None, dep: Deployment,
                  pressure: tuple[float, float] | None = None, lever: tuple[str, Future] | None = None,
                  simulated: bool = False) -> None:
    """The simulated fleet below the metrics: a line that fills in when the replays are done, then one rerun of the
    page so the metrics above show the simulated fleet in place of the estimate (``pressure``: the estimate's
    prefill and decode pressure per replica, for ``sizing.pressure_reason``; ``lever``: ``start_lever``'s router and
    sizing, whose line fills in below when it is done; ``simulated``: the metrics above show the simulated fleet)."""
    if futures is None:
        st.caption("The fleet size above is the analytic estimate: this log has no timestamps to replay.")
        return
    future = futures[0]
    done = all(f.done() for f in futures)
    # pending: the metrics above still show the estimate although the replays may be done (they finished while the
    # page drew them); a failed sizing leaves the estimate standing, with nothing to wait for
    pending = not done or (not simulated and all(f.exception() is None for f in futures))

    def draw() -> None:
        if future.exception() is not None:
            st.caption(f"The simulated answer failed: {md_literal(future.exception())}; the estimate stands.")
            return
        left, right = st.columns([0.85, 0.15])
        sizing = future.result()
        left.markdown(answer_line(sizing, dep.tp))
        if pressure is not None:   # the estimate's pressure, as plan's text judges it
            why = pressure_reason(sizing, *pressure)
            if why:
                left.caption(md_literal(why[0].upper() + why[1:] + "."))
        with right:
            badge("simulated" if sizing.method == "simulated" else "estimated")

    _polled_line("answer", pending, lambda: all(f.done() for f in futures),
                 "GPUs above: **estimate** (analytic queue at the peak-minute rate); replaying the log on candidate "
                 "fleets for the simulated answer…", draw)
    if lever is not None and not pending and future.exception() is None:
        _lever_line(future.result(), lever, dep)


def _lever_line(sizing: Sizing, lever: tuple[str, Future], dep: Deployment) -> None:
    """The cache-aware router beside the answer (``sizing.lever_of``, what ``plan`` prints), once its replays are done
    (then one rerun of the page from its poll, as the answer's line does)."""
    router, future = lever

    def draw() -> None:
        block = None if future.exception() is not None else lever_of(sizing, future.result(), router, dep.tp)
        if block is not None:
            st.caption(md_literal(router_lever_line(block, dep.tp)) + ": the Routers section below compares them.")

    _polled_line("lever", not future.done(), future.done,
                 "Replaying the log with a cache-aware router, the lever beside this answer…", draw)
