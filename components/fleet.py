"""The Capacity page's "Fleet design" section, and what each product gets against its SLO class.

Each product's class is the page's (``components.classes``: the sidebar's pair unless the product has its own). The
design runs on request, with a progress bar, and is held per log, classes, GPU types and model. Everything here is
simulated, and every design is judged as the headline is: on the log's busiest hour, one replica fewer shown missing.
"""
from __future__ import annotations

from typing import Any

import pandas as pd
import streamlit as st

from components.progress import held
from components.sidebar import SPECULATIVE, Settings
from components.widgets import badge, chart, run_on_click, table
from shapeviz.fleet.design import DEFAULT_SEARCH_REQUESTS, design_fleet
from shapeviz.fleet.sizing import Sizing
from shapeviz.fleet.prices import gpu_prices
from shapeviz.ingest import LoadedLog
from shapeviz.outputs.figures import product_latency_figure
from shapeviz.outputs.columns import design_family
from shapeviz.physics.catalogue import get_gpu, list_gpus
from shapeviz.physics.steps import Deployment
from shapeviz.serving.products import (
    SloClass,
    outcomes_table,
    product_outcomes,
)
from shapeviz.text import md_literal

DESIGN_KEY = "fleet_design_run"
RESULTS_KEY = "fleet_design_results"   # {settings: design document}, bounded
GPUS_KEY = "fleet_gpus_chosen"
FLEET_DESIGN_KEY = "fleet_design_chosen"   # {digest, design}: the report bundle carries it
DEFAULT_GPUS = ("h100-sxm", "h200", "b200", "l40s")
PAGE_SEARCH_REQUESTS = DEFAULT_SEARCH_REQUESTS


def render_product_outcomes(requests: pd.DataFrame, classes: dict[str, SloClass]) -> None:
    """What each product gets on the simulated fleet: a table and its distributions, each against its class."""
    if "product" not in requests.columns:
        return
    outcomes = product_outcomes(requests, classes)
    shown = outcomes_table(outcomes)
    shown["meets"] = ["yes" if m else "NO" for m in shown["meets"]]
    table(shown)
    chart(product_latency_figure(requests, classes), key="fleet_product_distributions")


def page_prices(gpus: list[str] | tuple[str, ...], own: tuple[str, float]) -> dict[str, float]:
    """One price per GPU type on the page: the sidebar's $/GPU-hour for its own GPU type (what the headline's cost
    uses), the dated list prices of data/gpu_prices.csv for the others. Two prices for one fleet ($10/h in the
    headline, $11.16/h in the designs' row for it) was the page's story told twice."""
    return gpu_prices([*gpus, own[0]], overrides={own[0]: float(own[1])})[0]


def _design(settings: tuple, log: LoadedLog, classes: dict[str, SloClass]) -> dict[str, Any]:
    # Uncached, with its own bar: the result is held per settings by `held` (a cached function must not write
    # into a bar made outside it; its replay on the next full rerun would raise).
    from shapeviz.serving.planner import WhatIf

    _digest, _classes_key, gpus, model, traffic, reference, own_price = settings
    bar = st.progress(0.0, text="Designing…")

    def progress(stage: str, detail: str = "", fraction: float | None = None) -> None:
        bar.progress(min(max(fraction or 0.0, 0.0), 1.0), text=f"{stage}: {detail}")

    try:
        prices = page_prices(gpus, own_price)
        return design_fleet(log.frame, classes, gpus=list(gpus), prices=prices, model=model,
                            precision=None if reference is None else str(reference.precision),
                            whatif=WhatIf(traffic_multiplier=traffic), search_requests=PAGE_SEARCH_REQUESTS,
                            progress=progress, reference=reference,
                            serving_engine=None if reference is None else str(reference.engine))
    finally:
        bar.empty()


def levers_taken(settings: Settings) -> str:
    """Which of the sidebar's levers the fleet design takes and which it leaves out, naming those that are set."""
    from shapeviz.physics import get_model

    left_out = []
    if settings.trim_input or settings.trim_output:
        left_out.append(f"trims (input {settings.trim_input:.0%}, output {settings.trim_output:.0%})")
    left_out.append("the prefix-cache hit" + (f" ({settings.cache_hit:.0%})" if settings.cache_hit else ""))
    left_out.append("speculative decoding" + (f" ({SPECULATIVE[settings.speculative]})"
                                               if settings.speculative != "none" else ""))
    kv = "same as the weights" if settings.kv_precision is None else settings.kv_precision.upper()
    left_out.append(f"the sidebar's KV cache precision ({kv}), GPU and GPUs per replica")
    traffic = f", Traffic ×{settings.traffic:g}" if settings.traffic != 1 else ""
    return (f"Takes: the model ({get_model(settings.model).name}){traffic}, each product's SLO class and the GPU "
            f"types below, the sidebar's {settings.precision.upper()} weights (as the headline) on every GPU type "
            f"and its own tensor-parallel sizes. Leaves out: "
            f"{', '.join(left_out)}: every request is served as the log has it.")


def headline_row(headline: Sizing, dep: Deployment, price_per_gpu_hour: float) -> dict[str, Any]:
    """The Capacity headline's fleet as a row of the design table: one shared pool of the sidebar's deployment,
    sized by the one sizing function (``fleet_answer``) with the same classes, priced as the designs are."""
    gpus = int(headline.replicas or 0) * dep.tp
    return {"design": "The headline: one shared pool of your deployment", "$/hour": gpus * price_per_gpu_hour,
            "GPUs": f"{gpus}× {dep.gpu.name} ({headline.replicas} × TP{dep.tp}, {str(dep.precision).upper()})",
            "meets every class": "yes" if headline.meets else "every other" if headline.meets_others else "NO",
            "one fewer": _fewer(headline.one_fewer.verdict() if headline.one_fewer is not None else None, "shared"),
            "re-seeded replay": "-", "why": "the Capacity headline's answer (replayed on the log's busiest hour)",
            "pools": "shared"}


def _fewer(verdict: dict[str, Any] | None, pool: str) -> str:
    """The one-fewer proof of a fleet, in a table cell."""
    if verdict is None:
        return "-"
    return f"{verdict['replicas']} in {pool}: {'meets' if verdict['meets'] else 'misses'}"


def render_fleet_design(digest: str, log: LoadedLog, classes: dict[str, SloClass],
                        settings: Settings, headline: tuple[Sizing, Deployment] | None = None,
                        deployment: Deployment | None = None) -> dict[str, Any] | None:
    """The "Fleet design" section: GPU types to choose from, a run button, the designs side by side.

    ``deployment``: the headline's; its busiest hour is the window every design is judged on (the headline's)."""
    model, traffic = settings.model, settings.traffic
    st.subheader("Fleet design")
    st.caption("The cheapest set of pools whose simulated p90s meet every product's class: one shared pool "
               "(FCFS or earliest-deadline first), a pool per product or corner, a prefill/decode split across GPU "
               "types, or GPU types mixed by prompt size (an integer program). Prices: the sidebar's $/GPU-hour for "
               f"{md_literal(get_gpu(settings.gpu).name)} (the price every cost on this page uses), the dated list "
               "prices in data/gpu_prices.csv for other types (assumed for your account).")
    st.caption(md_literal(levers_taken(settings)))
    # The choice outlives a visit to another page (Streamlit drops the state of a widget that was not drawn).
    gpus = st.multiselect("GPU types to choose from", list_gpus(), key="fleet_gpus",
                          default=st.session_state.get(GPUS_KEY, list(DEFAULT_GPUS)))
    st.session_state[GPUS_KEY] = gpus
    if not gpus:
        st.info("Pick at least one GPU type.")
        return None
    classes_key = tuple(sorted((p, c.ttft_ms, c.tpot_ms) for p, c in classes.items()))
    own_price = (get_gpu(settings.gpu).id, float(settings.gpu_hour_usd))   # the sidebar's: one price source
    run_key = (digest, classes_key, tuple(gpus), model, traffic, deployment, own_price)
    if not run_on_click("Design the fleet", icon=":material/architecture:", key="fleet_design", settings=run_key,
                        state_key=DESIGN_KEY):
        st.caption(f"Judges every design on your log's busiest hour, as the headline is (searching on its busiest "
                   f"{PAGE_SEARCH_REQUESTS:,} requests); takes tens of seconds.")
        return None
    try:
        doc = held(RESULTS_KEY, run_key, lambda: _design(run_key, log, classes), max_entries=4)
    except ValueError as exc:
        st.error(f"Fleet design: {md_literal(exc)}", icon=":material/error:")
        return None
    entries = list(doc["designs"])
    if doc["baseline"] is not None and all(e["family"] != "shared_fcfs" for e in entries):
        entries.append(doc["baseline"])
    rows = []
    for e in entries:
        row = {"design": design_family(e["family"]), "$/hour": e["cost_per_hour"],
               "GPUs": ", ".join(f"{n}× {get_gpu(g).name}" for g, n in e["gpus"].items()),
               "meets every class": "yes" if e["meets"] else "NO",
               "one fewer": _fewer(e.get("one_fewer"), (e.get("one_fewer") or {}).get("pool", "")),
               "re-seeded replay": "meets" if e["reseeded"]["meets"] else "MISSES"}
        for name, o in e["products"].items():
            tpot = o["tpot_p90_ms"]
            row[f"{name} TTFT/TPOT p90"] = (f"{o['ttft_p90_ms']:,.0f} / {'-' if tpot is None else f'{tpot:,.1f}'} ms"
                                            + ("" if o["meets"] else " (misses)"))
        row["why"] = e.get("why", "")
        row["pools"] = e["summary"]
        rows.append(row)
    if headline is not None and headline[0].replicas:
        # beside the headline, each design's cost difference from it (the same price list)
        sizing, dep = headline
        first = headline_row(sizing, dep, page_prices([dep.gpu.id], own_price)[dep.gpu.id])
        for row in rows:
            row["vs the headline $/hour"] = row["$/hour"] - first["$/hour"]
        rows.insert(0, {**first, "vs the headline $/hour": 0.0})
    if doc.get("note"):
        st.warning(md_literal(doc["note"]), icon=":material/warning:")
    table(pd.DataFrame(rows), **{"$/hour": st.column_config.NumberColumn(format="$%.2f"),
                                 "vs the headline $/hour": st.column_config.NumberColumn(format="$%+.2f")})
    badge("simulated")
    s = doc["search"]
    st.caption(f"Every design is judged as the headline is: replayed by the discrete-event simulator on "
               f"{md_literal(doc['sized_on']['window'])} ({s['judged_requests']:,} requests), every product's p90s "
               "against its class; \"one fewer\" is the replay of one replica fewer in its largest pool (the proof "
               "that it is not padded). The re-seeded replay is a second look (the same window, requests and gaps "
               "permuted), not the verdict.")
    st.caption(f"{s['simulations']} simulations; searched on the busiest {s['requests']:,} requests "
               f"({s['cpu_s']:,.0f} s CPU). Pruned: {len(s['pruned'])} candidate(s) the analytic plan ruled out.")
    return doc
