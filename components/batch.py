"""The Capacity page's "Batch job" section: the fewest GPUs that finish the log's requests by a deadline.

The same answer as ``plan LOG --deadline``: both ask ``shapeviz.fleet.batch.log_batch_job`` (every request offered
at once, or through a set number of clients, replayed on candidate fleets). Sized on request (a button) and held
per settings; everything drawn here is labelled **simulated**.
"""
from __future__ import annotations

import pandas as pd
import streamlit as st

from components.widgets import badge, run_on_click, table
from shapeviz.fleet.batch import BatchJob, duration_words, log_batch_job
from shapeviz.ingest import LoadedLog
from shapeviz.physics import Deployment
from shapeviz.serving import WhatIf
from shapeviz.text import md_literal

RUN_KEY = "batch_job_run"


@st.cache_resource(max_entries=8, ttl=6 * 3600, scope="session", show_spinner=False)
def _job(digest: str, dep: Deployment, whatif: WhatIf, deadline_s: float, requests: int | None,
         concurrency: int | None, gpu_hour_usd: float, _log: LoadedLog) -> BatchJob:
    return log_batch_job(_log.frame, dep, deadline_s, whatif=whatif, requests=requests, concurrency=concurrency,
                         gpu_hour_usd=gpu_hour_usd)[1]


def render_batch_job(digest: str, log: LoadedLog, dep: Deployment, whatif: WhatIf, gpu_hour_usd: float) -> bool:
    """Draw the batch-job section: a deadline, the fewest replicas that finish by it, one fewer missing it.

    False while it shows only its inputs and button (nothing the what-if levers move)."""
    st.subheader("Batch job: the GPUs that finish by a deadline")
    st.caption("An offline job (evaluations, bulk generation, synthetic data) is sized by when it must finish, not "
               "by a latency: every request offered at once (or through a set number of clients), replayed on "
               "candidate fleets; the fewest replicas that finish in time, one fewer shown missing. The same answer "
               "as `plan LOG --deadline`. The trims and cache share apply; the traffic multiplier does not.")
    cols = st.columns(3)
    hours = float(cols[0].number_input("Deadline (hours)", min_value=0.01, max_value=720.0, value=8.0, step=0.5,
                                       key="batch_deadline_h"))
    n = int(cols[1].number_input("Requests (0: the log's own)", min_value=0, max_value=10_000_000, value=0,
                                 step=1000, key="batch_requests",
                                 help="N requests drawn from the log's shape instead of the log's own"))
    c = int(cols[2].number_input("Concurrent clients (0: all at once)", min_value=0, max_value=1_000_000, value=0,
                                 step=16, key="batch_concurrency"))
    settings = (digest, dep, whatif, hours, n, c, gpu_hour_usd)
    if not run_on_click("Size the batch job", icon=":material/schedule:", key="batch_job_button",
                        settings=settings, state_key=RUN_KEY):
        return False
    with st.spinner("Replaying the job on candidate fleets…"):
        try:
            job = _job(digest, dep, whatif, hours * 3600.0, n or None, c or None, gpu_hour_usd, log)
        except ValueError as exc:
            st.error(f"Batch job: {md_literal(exc)}", icon=":material/error:")
            return True
    d = job.to_dict()
    badge("simulated")
    if not job.meets:
        st.warning("No fleet finishes by the deadline. " + " ".join(md_literal(x) for x in job.notes),
                   icon=":material/warning:")
        return True
    a = job.answer
    m = st.columns(3)
    m[0].metric("GPUs", f"{d['gpus']:,}", help=f"{a.replicas} replica(s) of {dep.tp} GPU(s)")
    m[1].metric("Done in", duration_words(a.makespan_s))
    m[2].metric("Cost of the run", f"${d['cost_usd']:,.2f}", help=f"{d['gpu_hours']:,.1f} GPU-hours")
    fewer = "" if job.one_fewer is None else (f"; one replica fewer ({job.one_fewer.replicas}) takes "
                                              f"{duration_words(job.one_fewer.makespan_s)} and misses it")
    st.markdown(f"{job.requests:,} requests finish in {duration_words(a.makespan_s)} on {a.replicas} replica(s) of "
                f"{md_literal(dep.describe())} "
                f"({a.output_tokens_per_s:,.0f} output tok/s), within the {duration_words(job.deadline_s)} deadline"
                f"{fewer}. Held to the deadline the fleet costs ${d['cost_usd_if_held_to_deadline']:,.2f}.")
    table(pd.DataFrame({"replicas": [t.replicas for t in job.trials],
                        "done in": [duration_words(t.makespan_s) for t in job.trials],
                        "meets the deadline": ["yes" if t.meets else "no" for t in job.trials]}))
    return True
