"""The Capacity page's "Traffic over time" section: replicas and cost window by window, each autoscaling policy
against holding the peak (with its risk: the windows it misses and why), the replay, and next quarter's pool
(month by month by the one sizing engine, month 0 the headline's fleet)."""
from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable
from concurrent.futures import Future

import pandas as pd
import streamlit as st

from components import data
from components.context import workload
from components.classes import classes_key
from components.fleet_answer import POLL_S, current_session, ready, sizing_of
from components.widgets import badge, chart, table
from components.work_pool import FairPool
from shapeviz.fleet.autoscale import (
    POLICIES,
    POLICY_LABELS,
    REASONS,
    Policy,
    TrafficWindows,
    autoscale,
    defaults,
    simulate_autoscale,
    sized_by_simulation,
    startup,
    traffic_windows,
)
from shapeviz.fleet.growth import Growth, GrowthResult, parse_growth, project
from shapeviz.fleet.words import relative_to_answer
from shapeviz.ingest import LoadedLog
from shapeviz.outputs.figures import fleet_over_time_figure, growth_figure, replica_minutes_figure, time_axis
from shapeviz.physics import Deployment
from shapeviz.serving import WhatIf
from shapeviz.text import md_literal

# next quarter's replayed months run on a thread of their own (not the headline's: they wait for its sizing), shared
# fairly by the sessions (each one's latest request first) and cancelled when no session that asked is left
GROWTH_ENTRIES = 8
_GROWTH_POOL = FairPool(workers=1, name="growth-months")
_GROWTH_LOCK = threading.Lock()
_GROWTH: OrderedDict[tuple, Future] = OrderedDict()
_GROWTH_DONE: dict[tuple, str] = {}   # how far each replay has got, in words ("replaying month 2 of 3")
REPLAY_MAX_REQUESTS = 60_000   # the replay runs on the page up to this many requests (seconds, not minutes)
REPLAY_KEY = "fleet_time_replay"
MINIMUM_FLEET = ("Every window needs one replica, the minimum fleet: no policy can scale below it, so every policy "
                 "saves 0% against the peak by construction. Raise Traffic × to see the policies part.")


@st.cache_resource(max_entries=8, ttl=6 * 3600, scope="session", show_spinner="Planning every window…")
def _windows(digest: str, deployment: Deployment, whatif: WhatIf, ttft_slo_ms: float, tpot_slo_ms: float,
             gpu_hour_usd: float, judged: tuple, _log: LoadedLog, _classes: dict | None) -> TrafficWindows:
    sketch = data.sketch_of(digest)
    tw = traffic_windows(sketch if sketch is not None else _log.frame, deployment, whatif=whatif,
                         ttft_slo_ms=ttft_slo_ms, tpot_slo_ms=tpot_slo_ms, gpu_hour_usd=gpu_hour_usd,
                         classes=None if sketch is not None else _classes)
    if sketch is None and len(_log.frame) <= REPLAY_MAX_REQUESTS:   # the one sizing engine, as plan --autoscale
        tw = sized_by_simulation(_log.frame, tw, whatif=whatif)
    return tw


def render_traffic_over_time(digest: str, log: LoadedLog, dep: Deployment, whatif: WhatIf, ttft_slo_ms: float,
                             tpot_slo_ms: float, gpu_hour_usd: float, classes: dict | None = None) -> bool:
    """The section: controls, the policies side by side, the chart, the missed windows, the replay, growth.

    False while it is switched off (nothing drawn depends on the what-if levers).
    """
    st.subheader("Traffic over time: autoscaling and growth")
    # Planning every window (and five policies over them) costs more than the rest of the page together, and a
    # what-if step would redo it: it runs when asked for, like the simulations above.
    if not st.toggle("Plan the fleet window by window (autoscaling policies, growth)", key="fleet_time_on",
                     help="Sizes every window of the log for both SLOs at its own rate and shape, then replays five "
                          "autoscaling policies over them. It reruns on every what-if step while it is on."):
        st.caption("Off: switch it on to see the replicas and cost hour by hour, what each autoscaling policy saves "
                   "against a fleet held at the peak, and next quarter's fleet.")
        return False
    frame = log.frame
    if "timestamp" not in frame.columns or frame["timestamp"].notna().sum() < 2:
        st.info("The log has no timestamps, so its traffic over time cannot be planned: map a timestamp column.")
        return False
    try:
        tw = _windows(digest, dep, whatif, ttft_slo_ms, tpot_slo_ms, gpu_hour_usd,
                      None if classes is None else classes_key(classes), log, classes)
    except ValueError as exc:
        st.info(md_literal(str(exc)))
        return True
    d = defaults()
    c1, c2, c3, c4 = st.columns(4)
    storage = c1.number_input("Storage read rate (GB/s)", min_value=0.1, max_value=100.0,
                              value=float(d["storage_gbps"]["value"]), step=0.5, key="fleet_storage_gbps",
                              help=d["storage_gbps"]["source"])
    engine = c2.number_input("Engine start + warm-up (s)", min_value=0.0, max_value=1800.0,
                             value=float(d["engine_start_s"]["value"]), step=10.0, key="fleet_engine_start_s",
                             help=d["engine_start_s"]["source"])
    cooloff = c3.number_input("Scale-down cool-off (s)", min_value=0.0, max_value=7200.0,
                              value=float(d["cooloff_s"]["value"]), step=60.0, key="fleet_cooloff_s",
                              help=d["cooloff_s"]["source"])
    target = c4.slider("Utilisation target", 0.3, 1.0, float(d["target_utilization"]["value"]), 0.05,
                       key="fleet_target_util", help=d["target_utilization"]["source"])
    c5, c6, c7 = st.columns(3)
    ceiling = c5.number_input("Max replicas (0: the busiest window's need)", min_value=0, max_value=10_000, value=0,
                              step=1, key="fleet_max_replicas", help="the ceiling every policy respects "
                              "(maxReplicaCount); the windows it clips are listed")
    initial = c6.number_input("Replicas at the start (0: the first minute's need)", min_value=0, max_value=10_000,
                              value=0, step=1, key="fleet_initial_replicas")
    drain = c7.number_input("Scale-down per minute (0: all at once)", min_value=0, max_value=10_000, value=0, step=1,
                            key="fleet_scale_down", help="replicas drained a minute at most once the cool-off has passed")
    knobs = {"target_utilization": target, "cooloff_s": cooloff, "max_replicas": int(ceiling) or None,
             "initial_replicas": int(initial) or None, "scale_down_per_min": int(drain) or None}
    start = startup(dep, storage, engine)
    try:
        results = {p: autoscale(tw, Policy(p, **knobs), start) for p in POLICIES}
    except ValueError as exc:
        st.info(md_literal(str(exc)))
        return True
    st.caption(f"{tw.n_windows} windows of {tw.window_s / 60:.0f} min; each sized for both p90 SLOs at its own rate "
               f"and shape ({md_literal(tw.shape_source)}). A new replica serves "
               f"{start.delay_s:.0f} s after it is asked for ({start.load_s:.0f} s to read "
               f"{start.weight_gb:.0f} GB of weights at {storage:g} GB/s, then {engine:.0f} s engine start) and is paid "
               "for from the moment it is asked for."
               + (f" Windows sized by simulation: {md_literal(str(tw.sized_by.get('window')))} needs "
                  f"{tw.sized_by['replicas']} replicas replayed ({tw.sized_by['proof']}), so every window's need is scaled "
                  f"by {tw.sized_by['scale']:.2f} against the per-minute estimate." if tw.sized_by.get("scale") else
                  ""))
    rows = []
    for p, r in results.items():
        doc = r.to_dict()
        rows.append({"policy": POLICY_LABELS[p], "GPU-hours": r.gpu_hours, "cost ($)": r.cost,
                     "saving vs peak": r.saving, "SLO attainment": doc["attainment"],
                     "missed windows": int(r.windows["missed"].sum()), "most replicas": doc["max_replicas"]})
    peak = results["peak"]
    table(pd.DataFrame(rows), **{"saving vs peak": st.column_config.NumberColumn(format="percent"),
                                 "SLO attainment": st.column_config.NumberColumn(format="percent"),
                                 "GPU-hours": st.column_config.NumberColumn(format="%.1f"),
                                 "cost ($)": st.column_config.NumberColumn(format="dollar")})
    badge("estimated")
    if int(peak.windows["replicas_needed"].max()) <= 1:
        st.info(MINIMUM_FLEET, icon=":material/info:")
    answer = ready(digest, dep, whatif, ttft_slo_ms, tpot_slo_ms, gpu_hour_usd, classes)   # once: one fleet below
    answer_k = None if answer is None or answer.method != "simulated" else answer.replicas
    st.caption(f"Hold at peak: {relative_to_answer(int(peak.to_dict()['max_replicas']), answer_k, dep.tp)} "
               + ("(the headline's answer is still being replayed). " if answer_k is None else
                  "(the headline's answer is sized on the busiest hour's replay; this table on windows' estimates). ")
               + f"{peak.baseline_gpu_hours:,.1f} GPU-hours over the log; every window held at exactly "
               f"its own minimum: {peak.lower_bound_gpu_hours:,.1f} (no policy can do better without missing). "
               "Attainment here is estimated minute by minute; replay a policy below to measure it request by request.")
    chart(fleet_over_time_figure({p: r.windows for p, r in results.items()}, POLICY_LABELS, dep.tp),
          key="fleet_over_time")
    choice = st.selectbox("Policy to inspect", POLICIES, index=POLICIES.index("slo"),
                          format_func=lambda p: POLICY_LABELS[p], key="fleet_policy")
    chosen = results[choice]
    chart(replica_minutes_figure(chosen.minutes(), POLICY_LABELS[choice], dep.tp), key="fleet_replica_minutes")
    missed = chosen.missed
    if len(missed):
        counts = missed["reason"].value_counts()
        st.markdown(f"**{POLICY_LABELS[choice]} misses {len(missed)} of {tw.n_windows} windows:** "
                    + "; ".join(f"{int(c)} × {REASONS[k]}" for k, c in counts.items() if k in REASONS))
        shown = missed[["start", "rate_rps", "replicas", "replicas_needed", "attainment", "reason"]].head(50)
        to_x, elapsed = time_axis(chosen.windows["start"])
        if elapsed:   # offsets from the log's start: elapsed time, as the log has it, not a date in 1970
            shown = shown.assign(start=to_x(shown["start"]).round(2)).rename(columns={"start": elapsed})
        table(shown)
    else:
        st.markdown(f"**{POLICY_LABELS[choice]} misses no window** (estimated).")
    for note in chosen.notes:
        st.caption(md_literal(note))
    if len(frame) <= REPLAY_MAX_REQUESTS and data.sketch_of(digest) is None:
        if st.button(f"Replay the log with {POLICY_LABELS[choice]}", icon=":material/replay:", key="fleet_replay"):
            with st.spinner("Replaying every request…"):
                sim = simulate_autoscale(frame, tw, Policy(choice, **knobs),
                                         start, whatif=WhatIf(whatif.trim_input, whatif.trim_output, whatif.cache_hit))
            st.session_state[REPLAY_KEY] = (digest, choice, sim.to_dict())
        held = st.session_state.get(REPLAY_KEY)
        if held and held[0] == digest and held[1] == choice and whatif.traffic_multiplier == 1:
            doc = held[2]
            st.markdown(f"**Replayed:** SLO attainment {doc['attainment']:.1%}, {len(doc['missed_windows'])} missed "
                        f"windows, {doc['gpu_hours']:,.1f} GPU-hours (draining replicas included).")
            badge("simulated")
    else:
        st.caption(f"The replay runs on the page up to {REPLAY_MAX_REQUESTS:,} requests; use "
                   "`python -m shapeviz simulate LOG --autoscale POLICY` for this log.")

    st.markdown("**Next quarter: growth per product**")
    products = sorted(frame["product"].astype(str).unique()) if "product" in frame.columns else ["all"]
    g1, g2, g3 = st.columns([3, 3, 1])
    growth_text = g1.text_input("Monthly request growth (product=rate, comma-separated)", value="8%",
                                key="fleet_growth", help="a bare rate applies to every product; e.g. "
                                "chat=8%, agent=20%")
    output_text = g2.text_input("Monthly output-length growth", value="", key="fleet_output_growth",
                                help="e.g. reasoning=5%")
    months = g3.number_input("Months", min_value=1, max_value=24, value=3, key="fleet_months")
    try:
        growth = Growth(parse_growth([x for x in growth_text.split(",") if x.strip()]),
                        parse_growth([x for x in output_text.split(",") if x.strip()]), int(months))
    except ValueError as exc:
        st.error(md_literal(str(exc)))
        return True
    sketch = data.sketch_of(digest)
    try:   # the analytic months, at once; labelled "estimate" until the replayed months replace them
        # today's pool is the headline's answer once it is replayed (the one hold at peak is said against), in the
        # estimate's months too (one fleet)
        estimate = project(sketch if sketch is not None else frame, dep, growth, whatif=whatif,
                           ttft_slo_ms=ttft_slo_ms, tpot_slo_ms=tpot_slo_ms, gpu_hour_usd=gpu_hour_usd,
                           replicas_now=answer_k or None)
    except ValueError as exc:
        st.info(md_literal(str(exc)))
        return True
    future = None
    if sketch is None:   # the one engine month by month, when asked; month 0 is the headline's own sizing
        key = (digest, dep, whatif, float(ttft_slo_ms), float(tpot_slo_ms), float(gpu_hour_usd), growth_text,
               output_text, int(months), None if classes is None else classes_key(classes))
        with _GROWTH_LOCK:
            future = _GROWTH.get(key)
        # each month costs a sizing like the headline's: replayed on request, kept per log and settings
        if future is None and st.button("Size every month by replaying it", icon=":material/replay:",
                                        key="fleet_growth_replay", help="Each month's grown traffic replayed on "
                                        "candidate fleets by the engine behind the headline (month 0 is the "
                                        "headline's fleet); the sliders stay free while it runs."):
            w = workload(digest, log)

            def heard(stage: str, detail: str = "", fraction: float | None = None, key: tuple = key) -> None:
                _GROWTH_DONE[key] = detail   # read by the months' fragment below while the replay runs

            def job() -> GrowthResult:
                heard("growth", "sizing today's fleet (month 0, the headline's)")
                today = sizing_of(digest, frame, w, dep, whatif, ttft_slo_ms, tpot_slo_ms, gpu_hour_usd, classes)
                return project(frame, dep, growth, whatif=whatif, ttft_slo_ms=ttft_slo_ms, tpot_slo_ms=tpot_slo_ms,
                               gpu_hour_usd=gpu_hour_usd, method="simulated", classes=classes, today=today,
                               progress=heard)

            future = submit_growth(key, job)

    @st.fragment(run_every=None if future is None or future.done() else POLL_S)
    def _months() -> None:
        result = estimate
        if future is not None and future.done():
            if future.exception() is None:
                result = future.result()
            else:
                st.caption(f"Replaying the months failed: {md_literal(future.exception())}; the estimate stands.")
        elif future is not None:
            done = _GROWTH_DONE.get(key, "waiting for the replay to start")
            st.caption("Months below: **estimate** (analytic, at the p99 minute); replaying every month of growth "
                       f"on the one sizing engine: {md_literal(done)}…")
        elif sketch is None:
            st.caption("Months below: **estimate** (analytic, at the p99 minute). Size them by replaying each "
                       "month, as the headline is sized, with the button above.")
        _draw_growth(result, products)

    _months()
    return True


def _draw_growth(result: GrowthResult, products: list[str]) -> None:
    """The months: chart, table, where they came from, and when today's pool runs out of headroom."""
    chart(growth_figure(result.months, result.replicas_now), key="fleet_growth_chart")
    table(result.months, usd_per_month=st.column_config.NumberColumn("$ / month", format="dollar"))
    simulated = result.method == "simulated"
    badge("simulated" if simulated else "estimated")
    unreachable = [int(m) for m, k in zip(result.months["month"], result.months["replicas"]) if k is None]
    st.caption(("Each month is sized like the headline: the log's busiest hour grown per product (new users as "
                "copies of today's whole sessions, each shifted in time inside the hour with its turns together, "
                "its own sessions' blocks its own, shared prompts still shared, reported cached tokens kept), "
                "replayed on candidate fleets; month 0 is the headline's fleet. "
                + (f"Unreachable (no fleet size meets it, so no count and no price): month(s) "
                   f"{', '.join(map(str, unreachable))}; the notes below say which product and why. "
                   if unreachable else "")
                if simulated else
                "Each month is the analytic estimate: the whole log's shape at its p99 minute, grown per product. ")
               + ("Today's pool runs out of headroom in month "
                f"{result.runs_out_month}." if result.runs_out_month is not None
                else "Today's pool holds within the horizon.")
               + f" Products in the log: {md_literal(', '.join(products))}.")
    for note in result.notes:
        st.caption(md_literal(note))


def submit_growth(key: tuple, job: Callable[[], GrowthResult], session: str | None = None) -> Future:
    """The replayed months of ``key`` (log digest, settings, growth) for ``session`` (None: the one running this
    page): started once on a thread of their own (the sliders never wait), kept while among the latest
    ``GROWTH_ENTRIES``; asked again by another session, it is that session's too."""
    session = current_session() if session is None else session
    with _GROWTH_LOCK:
        future = _GROWTH.get(key)
        if future is None or future.cancelled():   # cancelled: every session that asked for it left before it ran
            future = _GROWTH_POOL.submit(session, job)
            _GROWTH[key] = future
            while len(_GROWTH) > GROWTH_ENTRIES:
                _GROWTH_DONE.pop(_GROWTH.popitem(last=False)[0], None)
        else:
            _GROWTH_POOL.claim(future, session)
        _GROWTH.move_to_end(key)
        return future



def wait_growth(timeout: float) -> None:
    """Block until every growth replay started so far is done (tests; the page never waits)."""
    with _GROWTH_LOCK:
        futures = list(_GROWTH.values())
    for future in futures:
        future.result(timeout=timeout)
