"""The Capacity page's speculative-decoding section: the speed-up against load, with and without the lever."""
from __future__ import annotations

import streamlit as st

from components.widgets import MISSING, badge, chart
from shapeviz.fleet.speculative import speculative_effect
from shapeviz.outputs.figures import speculative_figure
from shapeviz.physics import Deployment
from shapeviz.recommend import LEVER_LABELS, by_lever
from shapeviz.serving import Workload
from shapeviz.text import md_literal


def speculative_section(w: Workload, dep: Deployment, ctx) -> bool:  # noqa: ANN001 - PageContext
    """What the sidebar's speculative decoding buys at this log's load, and the load above which it stops paying.

    False when no method is chosen (nothing drawn depends on the what-if levers).
    """
    s = ctx.settings
    st.subheader("Speculative decoding against load")
    if dep.speculative is None:
        st.caption("Choose a method under **Deployment → Speculative decoding** in the sidebar to see what it buys "
                   "at this log's load, in GPUs and TPOT, and the load above which it costs more than it saves.")
        return False
    effect = speculative_effect(w, dep, ctx.whatif, s.ttft_slo_ms, s.tpot_slo_ms, s.gpu_hour_usd)
    cols = st.columns(4)
    cols[0].metric("TPOT speed-up here", MISSING if effect.tpot_speedup is None else f"×{effect.tpot_speedup:.2f}",
                   help="TPOT p50 without / with the lever at the planned load, on the plan's fleet without it.")
    cols[1].metric("Output tok/s per GPU here",
                   MISSING if effect.throughput_speedup is None else f"×{effect.throughput_speedup:.2f}",
                   help="The planned load on the GPUs that meet both SLOs, with / without the lever (GPUs without / "
                        f"with). At full load (the largest batch the TPOT SLO allows) a replica decodes "
                        f"×{effect.capacity_speedup:.2f} as many tokens/s with it: below 1 it costs capacity there.")
    g = effect.gpus
    cols[2].metric("GPUs that meet both SLOs", f"{g['with'] or MISSING}",
                   None if not (g["with"] and g["without"]) or g["with"] == g["without"]
                   else f"{g['with'] - g['without']:+d} vs without", delta_color="inverse")
    stop = effect.stops_paying
    cols[3].metric("Stops paying above", MISSING if stop["rate_rps"] is None else f"{stop['rate_rps']:,.3g} req/s",
                   None if stop["traffic_multiplier"] is None else f"×{stop['traffic_multiplier']:.1f} today",
                   delta_color="off",
                   help="The request rate on this fleet above which TPOT is worse with the lever than without.")
    rate = w.rate_rps * ctx.whatif.traffic_multiplier
    chart(speculative_figure(effect.curve, s.tpot_slo_ms, rate, stop["rate_rps"], dep.speculative.label),
          key="speculative_curve", inert=True)
    # the lever once, with every scope it was recommended for (its reasons are on the Shape page)
    cited = by_lever(r for r in ctx.analysis.recommendations if r.lever == "decode_bandwidth")
    for lever, scopes in cited:
        where = ", ".join("all traffic" if s == "overall" else s for s in scopes)
        st.markdown(f"**{LEVER_LABELS[lever]}** ({md_literal(where)}): {md_literal(effect.citation())}.")
    if not cited:
        st.markdown(md_literal(effect.citation()) + ".")
    for note in effect.notes:
        st.caption(md_literal(note))
    st.caption(f"Acceptance: {md_literal(dep.speculative.acceptance_source)}")
    badge("estimated")
    return True
