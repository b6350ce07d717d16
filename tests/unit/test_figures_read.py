"""Charts and tables that read: products told apart, log axes labelled with round numbers, whole-number replica
axes, a header whose title, subtitle, legend and panel titles each have a band of their own; table columns with
human names, units and a rounding that means something."""
from __future__ import annotations

import itertools
import math

import numpy as np
import pandas as pd
import pytest

from shapeviz.fleet.autoscale import POLICIES, POLICY_LABELS, Policy, autoscale, startup, traffic_windows
from shapeviz.fleet.growth import Growth, project
from shapeviz.fleet.routing import hit_ratio_figure
from shapeviz.outputs.columns import design_family, readable
from shapeviz.outputs.figures import (
    fleet_over_time_figure,
    growth_figure,
    load_curve_figure,
    product_colors,
    speculative_figure,
)
from shapeviz.physics import Deployment, default_deployment
from shapeviz.physics.catalogue import get_gpu, get_model
from shapeviz.plotstyle import MIN_COLOR_DISTANCE, PALETTE, color_distance, header, log_ticks
from shapeviz.serving import Workload, load_curve
from shapeviz.serving.compare import caveats
from shapeviz.serving.routers import ROUTERS

ROUND_MANTISSAS = {1.0, 1.2, 1.5, 2.0, 2.5, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0}


def test_every_pair_of_product_colours_is_told_apart() -> None:
    # Two golds (#E69F00 and #B8860B) were 17.8 apart: a reader matched the wrong product to its line.
    closest = min(color_distance(a, b) for a, b in itertools.combinations(PALETTE, 2))
    assert closest >= MIN_COLOR_DISTANCE, f"two palette colours only {closest:.1f} apart"
    colors = product_colors([f"product-{i}" for i in range(len(PALETTE))])
    assert len(set(colors.values())) == len(PALETTE)  # as many products as colours: none shares one


def _mantissa(value: float) -> float:
    return round(value / 10 ** math.floor(math.log10(value)), 6)


@pytest.mark.parametrize("lo, hi", [(20.0, 45.0), (90.0, 2_500.0), (5.0, 200_000.0), (0.3, 12.0), (0.02, 0.9)])
def test_log_ticks_are_round_numbers_written_out(lo: float, hi: float) -> None:
    values, text = log_ticks([lo, (lo * hi) ** 0.5, hi])
    assert len(values) >= 3, (lo, hi, values)  # at least three labels on the axis, whatever its span
    assert all(lo / 1.05 <= v <= hi * 1.05 for v in values)
    assert {_mantissa(v) for v in values} <= ROUND_MANTISSAS
    if math.log10(hi / lo) >= 3:  # several decades: decades only, never "2 5 1000 2 5"
        assert {_mantissa(v) for v in values} == {1.0}
    assert not any("e" in t for t in text) and len(set(text)) == len(text)


def test_the_speculative_chart_labels_its_log_rate_axis_itself(conv: pd.DataFrame) -> None:
    w = Workload.from_frame(conv)
    curve = pd.DataFrame({"rate_rps": np.geomspace(0.5, 60, 12), "tpot_p50_ms_without": np.linspace(20, 40, 12),
                          "tpot_p50_ms_with": np.linspace(12, 45, 12), "speedup": np.linspace(1.7, 0.9, 12)})
    fig = speculative_figure(curve, 50, w.rate_rps)
    for axis in (fig.layout.xaxis, fig.layout.xaxis2):
        assert axis.type == "log" and len(axis.tickvals) >= 3
        assert {_mantissa(v) for v in axis.tickvals} <= ROUND_MANTISSAS


def test_replica_axes_count_in_whole_replicas(conv: pd.DataFrame) -> None:
    dep = default_deployment()
    tw = traffic_windows(conv, dep)
    start = startup(dep)
    windows = {p: autoscale(tw, Policy(p), start).windows for p in POLICIES}
    fig = fleet_over_time_figure(windows, POLICY_LABELS, dep.tp)
    replicas_axis = fig.layout.yaxis2
    assert replicas_axis.dtick >= 1 and float(replicas_axis.dtick).is_integer() and replicas_axis.tickformat == ",d"
    most = max(int(w["replicas"].max()) for w in windows.values())
    assert replicas_axis.range[0] == 0 and replicas_axis.range[1] > most  # the top line is drawn, not clipped
    rate_axis = fig.layout.yaxis
    assert rate_axis.range[1] > float(windows["peak"]["rate_rps"].max())

    growth = project(conv, dep, Growth({"*": 0.08}, {}, 3))
    gfig = growth_figure(growth.months, growth.replicas_now)
    assert float(gfig.layout.yaxis.dtick).is_integer() and gfig.layout.yaxis.tickformat == ",d"


def test_header_gives_title_legend_and_panel_titles_bands_that_do_not_overlap(conv: pd.DataFrame) -> None:
    w = Workload.from_frame(conv)
    curve = load_curve(w, default_deployment(), multipliers=(0.5, 1.0, 2.0))
    fig = load_curve_figure(curve, 1000, 50)
    height = fig.layout.height
    title_bottom_px = height * (1 - fig.layout.title.y) + 26  # plotly draws the subtitle's line above its anchor
    legend_top_px = height * (1 - fig.layout.legend.y)
    assert fig.layout.legend.yref == "container" and legend_top_px >= title_bottom_px - 0.5
    # the legend (one row) and the panel titles both sit in the top margin, above the plot
    assert fig.layout.margin.t >= legend_top_px + 24 + 24
    more = header("t", "s", height=400, legend=[f"a long legend entry number {i}" for i in range(12)])
    assert more["margin"]["t"] > header("t", "s", height=400, legend=["one"])["margin"]["t"]  # rows wrap
    assert fig.layout.title.y * height < height - 10  # the title is inside the chart, not clipped at its top


def test_session_affinity_and_prefix_aware_lines_stay_visible_where_they_coincide() -> None:
    curve = pd.DataFrame([{"router": r, "replicas": n, "hit_ratio_tokens": 0.5} for r in ROUTERS for n in (1, 2, 4)])
    fig = hit_ratio_figure(curve)
    styles = [(t.marker.symbol, t.line.dash) for t in fig.data]
    assert len(fig.data) == len(ROUTERS)
    assert len({s for s, _ in styles}) == len(ROUTERS) and len({d for _, d in styles}) == len(ROUTERS)


def test_tables_read_as_words_units_and_meaningful_rounding() -> None:
    frame = pd.DataFrame({"gpu": ["H100 SXM5 80GB"], "meets_slo": [True], "ttft_p90_ms": [745.8977],
                          "tpot_p90_ms": [17.8132], "usd_per_million_tokens": [0.25951],
                          "attainment": [0.9991], "hit_ratio_tokens": [0.2628], "queue_s": [3.14159]})
    shown, specs = readable(frame)
    assert shown["meets_slo"].tolist() == ["yes"]                      # a word, not a checkbox
    assert specs["ttft_p90_ms"].label == "TTFT p90 (ms)" and specs["ttft_p90_ms"].format % 745.8977 == "746"
    assert specs["tpot_p90_ms"].format % 17.8132 == "17.8"
    assert specs["usd_per_million_tokens"].label == "$ / 1M tokens"
    assert specs["attainment"].format % shown["attainment"].iloc[0] == "100%"   # not 0.9991
    assert specs["hit_ratio_tokens"].format % shown["hit_ratio_tokens"].iloc[0] == "26%"  # not 26.28%
    assert specs["queue_s"].label == "queue (s)" and specs["queue_s"].format % 3.14159 == "3.14"
    assert frame["attainment"].iloc[0] == 0.9991  # the caller's frame (and its CSV) keeps its own values
    assert design_family("shared_fcfs") == "one shared pool (first come, first served)"
    assert design_family("per_product") == "a pool per product"


def test_a_consumer_card_named_cheapest_carries_its_caveats() -> None:
    model = get_model("llama-3.1-70b")
    rtx = caveats(Deployment(model, get_gpu("rtx-3090"), "fp8", tp=4))
    assert any("no FP8 tensor cores" in c for c in rtx)
    assert any("PCIe" in c for c in rtx)
    assert any("weights fill" in c for c in rtx)
    assert caveats(Deployment(model, get_gpu("h100-sxm"), "fp8", tp=2)) == []  # nothing to say about the default


def test_an_explanation_is_said_once_on_a_page() -> None:
    from shapeviz.analysis import analyze
    from shapeviz.recommend import by_lever, said_before
    from shapeviz.workload.synth import generate

    analysis = analyze(generate(20_000, seed=0))  # the demo: one pool serving chat and an agent
    findings = [f.reason for f in analysis.clusters.mixed_pools]
    assert findings, "the demo's pool is mixed"
    lines = [said_before(r.reason, findings) for r in analysis.recommendations]
    # the mixed-pool sentence is said in its warning; the advice built on it (split the pools, queue by shape) keeps
    # only the advice
    assert not any(findings[0] in line for line in lines)
    split = next(line for r, line in zip(analysis.recommendations, lines) if r.lever == "split_pools")
    assert split.startswith("Given the mix above, give each corner its own replicas")
    prefix = [r for r in analysis.recommendations if r.lever == "prefix_cache"]
    assert len(prefix) > 1  # recommended for several products...
    assert by_lever(prefix) == [("prefix_cache", [r.scope for r in prefix])]  # ...cited once, every scope named


def test_measured_markers_widen_the_header_instead_of_covering_the_panel_titles(conv: pd.DataFrame) -> None:
    from shapeviz.outputs.measured import measured_figure

    w = Workload.from_frame(conv)
    curve = load_curve(w, default_deployment(), multipliers=(0.5, 1.0, 2.0))
    levels = [{"tool": tool, "rate_rps": w.rate_rps * m, "level": f"{m:g}x", "source": "run.json",
               **{f"measured_{k}_{q}_ms": 100.0 for k in ("ttft", "tpot") for q in ("p50", "p90")}}
              for tool in ("aiperf", "guidellm", "log") for m in (0.5, 1.0)]
    plain = load_curve_figure(curve, 1000, 50)
    fig = measured_figure(curve, {"levels": levels}, w.rate_rps, 1000, 50)
    assert len([t for t in fig.data if t.showlegend is not False and t.name]) == 8  # 2 plan lines + 6 measured
    assert fig.layout.margin.t > plain.layout.margin.t  # a band for the longer legend: it wraps above the panels
