"""The self-contained HTML capacity memo: decision first, every chart, plotly.js inline once, user text escaped."""
from __future__ import annotations

import html
import math
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

import numpy as np
import pandas as pd
import plotly.graph_objects as go
import plotly.io as pio

from shapeviz.analyses.shapes import SHAPE_LABELS
from shapeviz.ingest import LoadedLog
from shapeviz.outputs.figures import (
    fmt_tokens,
)
from shapeviz.outputs.report.replay import Replay
from shapeviz.physics import Deployment
from shapeviz.recommend import LEVER_LABELS
from shapeviz.serving import WhatIf, Workload
from shapeviz.text import phase_phrase


# --- figures with user strings made inert --------------------------------------------------------------------
def inert_figure(fig: go.Figure) -> go.Figure:
    """A copy whose trace names (product names from the log) are HTML-escaped.

    plotly.js reads trace names as its small HTML dialect and decodes entities, so an escaped name still reads as
    typed, while a name like ``<img src=x onerror=...>`` can never become markup. Hover templates are escaped by
    ``shapeviz.outputs.figures`` already.
    """
    out = go.Figure(fig)
    for trace in out.data:
        name = getattr(trace, "name", None)
        if isinstance(name, str) and name:
            trace.name = html.escape(name, quote=False)
    return out


def _script_json(fig: go.Figure) -> str:
    """Figure JSON that is safe inside ``<script>``: no ``<``, ``>`` or ``&`` survives as itself."""
    text = pio.to_json(fig, validate=False, pretty=False)
    return (text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")
            .replace("\u2028", "\\u2028").replace("\u2029", "\\u2029"))


# --- the HTML memo ------------------------------------------------------------------------------------------------
PROVENANCE_TEXT: dict[str, str] = {
    "measured": "Measured from the log.",
    "estimated": "Estimated by the capacity model (calibrated on published measurements).",
    "assumed": "An assumption: a default, a catalogue value or a value set by the user.",
    "simulated": "Simulated: the log's own requests replayed on the planned fleet (the fleet size is the smallest "
                 "whose replay meets every product's p90 class).",
}

_CSS = """
:root { color-scheme: light; --ink: #1d2330; --muted: #5b6475; --line: #dde2ea; --accent: #0072B2; }
* { box-sizing: border-box; }
body { margin: 0; background: #f6f7f9; color: var(--ink);
       font: 15px/1.5 -apple-system, "Segoe UI", Roboto, Helvetica, Arial, sans-serif; }
main { max-width: 1240px; margin: 0 auto; padding: 28px 32px 60px; background: #fff; }
h1 { font-size: 26px; margin: 0 0 4px; }
h2 { font-size: 19px; margin: 34px 0 8px; padding-top: 10px; border-top: 1px solid var(--line); }
h3 { font-size: 15px; margin: 18px 0 6px; }
p.sub, .caption { color: var(--muted); font-size: 13px; }
.decision { background: #eef5fb; border-left: 4px solid var(--accent); padding: 12px 18px; margin: 16px 0; }
.decision p { margin: 6px 0; }
.decision ol { margin: 6px 0 4px 20px; padding: 0; }
.verdict-ok { color: #1b7f3b; font-weight: 600; } .verdict-bad { color: #b3261e; font-weight: 600; }
table { border-collapse: collapse; margin: 8px 0 12px; font-size: 13px; }
th, td { border-bottom: 1px solid var(--line); padding: 4px 10px; text-align: left; vertical-align: top; }
th { background: #f1f3f6; font-weight: 600; }
td.num { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
.tag { display: inline-block; font-size: 11px; padding: 0 6px; border-radius: 8px; white-space: nowrap; }
.tag.measured { background: #e3f4e8; color: #1b6e35; } .tag.estimated { background: #e4eefa; color: #1c4f8c; }
.tag.assumed { background: #fdf0dc; color: #8a5200; }
.tag.simulated { background: #efe6fa; color: #5b2a8c; }
.chart { width: 100%; min-height: 320px; }
.wide { overflow-x: auto; }
code { font-size: 12px; background: #f1f3f6; padding: 0 3px; border-radius: 3px; }
footer { margin-top: 40px; color: var(--muted); font-size: 12px; }
@media print { body { background: #fff; } main { padding: 0; } h2 { break-after: avoid; } .chart { break-inside: avoid; } }
"""

_RENDER_JS = """
document.querySelectorAll("div[data-figure]").forEach(function (div) {
  var spec = JSON.parse(document.getElementById(div.getAttribute("data-figure")).textContent);
  Plotly.newPlot(div, spec.data, spec.layout, {displaylogo: false, responsive: true,
    toImageButtonOptions: {format: "png", scale: 2, filename: div.id}});
});
"""


def _e(value: object) -> str:
    """Every string that reaches the memo goes through here: user data is never markup."""
    return html.escape(str(value), quote=True)


def _tag(kind: str) -> str:
    kind = kind if kind in PROVENANCE_TEXT else "estimated"
    return f'<span class="tag {kind}" title="{_e(PROVENANCE_TEXT[kind])}">{kind}</span>'


def _num(value: object, digits: int = 0, unit: str = "") -> str:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "n/a"
    if isinstance(value, (bool, np.bool_)):
        return "yes" if value else "no"
    if isinstance(value, (int, float, np.integer, np.floating)):
        return f"{float(value):,.{digits}f}{unit}"
    return str(value)


def _pct(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.0%}"


def _ms(value: float | None) -> str:
    return "saturated" if value is None else f"{value:,.0f} ms"


def _usd(value: float | None, digits: int = 0) -> str:
    return "n/a" if value is None else f"${value:,.{digits}f}"


def _html_table(frame: pd.DataFrame, formats: Mapping[str, Callable[[Any], str]] | None = None,
                raw_columns: Sequence[str] = ()) -> str:
    """A table with every header and cell escaped (``raw_columns`` hold markup this module built itself)."""
    formats = formats or {}
    head = "".join(f"<th>{_e(str(c).replace('_', ' '))}</th>" for c in frame.columns)
    body = []
    for row in frame.itertuples(index=False, name=None):  # tables of tens of rows, never the log
        cells = []
        for column, value in zip(frame.columns, row):
            if column in raw_columns:
                cells.append(f"<td>{value}</td>")
                continue
            numeric = isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, bool)
            missing = value is None or (isinstance(value, (float, np.floating)) and not math.isfinite(value))
            if missing:
                text = "n/a"
            elif column in formats:
                text = formats[column](value)
            else:
                text = _num(value, 0 if isinstance(value, (int, np.integer)) else 2)
            cells.append(f'<td class="num">{_e(text)}</td>' if numeric else f"<td>{_e(text)}</td>")
        body.append("<tr>" + "".join(cells) + "</tr>")
    return f'<div class="wide"><table><thead><tr>{head}</tr></thead><tbody>{"".join(body)}</tbody></table></div>'


def whatif_words(whatif: WhatIf) -> str:
    """The levers in force, in words ("input trimmed 20%, traffic ×1.5"), or "no change": one wording everywhere."""
    parts = []
    if whatif.trim_input:
        parts.append(f"input trimmed {whatif.trim_input:.0%}")
    if whatif.trim_output:
        parts.append(f"output trimmed {whatif.trim_output:.0%}")
    if whatif.cache_hit is not None:
        parts.append(f"prefix-cache hit {whatif.cache_hit:.0%}")
    if whatif.traffic_multiplier != 1:
        parts.append(f"traffic ×{whatif.traffic_multiplier:g}")
    return ", ".join(parts) if parts else "no change"


_FIRST_METRIC = {"prefill": "TTFT (prefill) hurts first", "decode": "TPOT (decode) hurts first",
                 "balanced": "TTFT and TPOT both matter"}


@dataclass
class _Memo:
    """Everything the memo reads, computed once by ``report_files``."""

    log: LoadedLog
    analysis: Any
    deployment: Deployment
    whatif: WhatIf
    workload: Workload
    before: dict
    after: dict
    fleet_gpus: int
    ttft_slo_ms: float
    tpot_slo_ms: float
    figures: dict[str, go.Figure]
    captions: dict[str, str]
    tables: dict[str, pd.DataFrame]
    replay: Replay
    notes: list[str] = field(default_factory=list)


def _decision(m: _Memo) -> str:
    o = m.analysis.profile.overall
    b, a = m.before, m.after
    labels = LEVER_LABELS
    shape = SHAPE_LABELS.get(o.dominant_shape, o.dominant_shape)
    lines = [
        f"<p><strong>Mostly {_e(shape)} traffic</strong> ({o.request_share[o.dominant_shape]:.0%} of requests; "
        f"p50 {_e(fmt_tokens(o.input['p50']))} in / {_e(fmt_tokens(o.output['p50']))} out). "
        f"Its GPU-time is <strong>{_e(phase_phrase(o.phase).replace('**', ''))}</strong> ({o.prefill_gpu_share:.0%} prefill) on "
        f"{_e(m.deployment.describe())}, so {_e(_FIRST_METRIC.get(o.phase, ''))}. {_tag('measured')} {_tag('estimated')}</p>",
    ]

    def verdict(plan_doc: dict) -> str:
        if plan_doc["meets_slo"]:
            return '<span class="verdict-ok">meets both SLOs</span>'
        return '<span class="verdict-bad">cannot meet the SLOs</span>'

    gb, ga = b["gpus"]["colocated"], a["gpus"]["colocated"]
    delta = "" if gb is None or ga is None or gb == ga else f" ({ga - gb:+,} GPUs)"
    lines.append(
        f"<p><strong>GPUs: {_e(_num(gb))} → {_e(_num(ga))}</strong>{_e(delta)}. Today's load, "
        f"{_e(_num(b['rate_rps'], 2))} req/s ({_e(b['rate_source'])}), on {_e(_num(gb))} GPUs {verdict(b)}; "
        f"after the what-if ({_e(whatif_words(m.whatif))}), {_e(_num(ga))} GPUs {verdict(a)} "
        f"(TTFT p90 ≤ {_e(_num(m.ttft_slo_ms))} ms, TPOT p90 ≤ {_e(_num(m.tpot_slo_ms))} ms). Cost "
        f"{_e(_usd(b['cost']['usd_per_hour']))} → {_e(_usd(a['cost']['usd_per_hour']))} per hour. {_tag('estimated')}</p>"
    )
    if a["notes"]:
        lines.append("<p>" + " ".join(_e(n) + "." if not str(n).endswith(".") else _e(n) for n in a["notes"]) + "</p>")
    recs = m.analysis.recommendations[:3]
    if recs:
        items = "".join(
            f"<li><strong>{_e(labels.get(r.lever, r.lever.replace('_', ' ')))}</strong> for "
            f"{_e('all traffic' if r.scope == 'overall' else r.scope)}, protects {_e(r.metric.upper())}. "
            f"{_e(r.reason)}</li>" for r in recs)
        lines.append(f"<p>What to do first:</p><ol>{items}</ol>")
    else:
        lines.append("<p>Nothing stands out: the traffic is balanced between phases and sits in one corner.</p>")
    return '<div class="decision">' + "".join(lines) + "</div>"


def _key_figures(m: _Memo) -> str:
    o, t = m.analysis.profile.overall, m.analysis.traffic
    prefix = m.analysis.prefix
    q = lambda d: " / ".join(fmt_tokens(d[k]) for k in ("p50", "p90", "p99"))  # noqa: E731
    rows = [
        ("requests kept", f"{m.log.report.rows_kept:,} of {m.log.report.rows_read:,} read", "measured"),
        ("time span", "n/a" if t.span_s is None else f"{t.span_s / 3600:,.2f} h", "measured"),
        ("mean rate / peak minute", "n/a" if t.mean_rps is None else f"{t.mean_rps:,.2f} / {t.peak_rps:,.2f} req/s",
         "measured"),
        ("input tokens p50 / p90 / p99", q(o.input), "measured"),
        ("output tokens p50 / p90 / p99", q(o.output), "measured"),
        ("dominant corner", SHAPE_LABELS.get(o.dominant_shape, o.dominant_shape), "measured"),
        ("phase of GPU-time", f"{o.phase} ({o.prefill_gpu_share:.0%} prefill)", "estimated"),
        ("prefix-cache reuse", "n/a" if prefix.hit_ratio_tokens is None
         else f"{prefix.hit_ratio_tokens:.1%} of input tokens ({prefix.method.replace('_', ' ')})",
         {"measured": "measured", "none": "measured"}.get(prefix.provenance, "estimated")),
    ]
    table = "".join(f"<tr><td>{_e(k)}</td><td>{_e(v)}</td><td>{_tag(p)}</td></tr>" for k, v, p in rows)
    return f"<table><thead><tr><th>figure</th><th>value</th><th>source</th></tr></thead><tbody>{table}</tbody></table>"


def _plan_html(m: _Memo) -> str:
    """The capacity plan table of the memo: the same rows as ``capacity_plan.csv``, formatted for reading."""
    fmt = {"share": _pct, "ms": _ms}
    rows = []
    for label, unit, b, a, source in m.tables["capacity_plan"].itertuples(index=False, name=None):
        if unit in fmt:
            bt, at = fmt[unit](b), fmt[unit](a)
        elif unit == "USD":
            digits = 2 if label.startswith("price") or "1M" in label else 0
            bt, at = _usd(b, digits), _usd(a, digits)
        else:
            digits = 0 if unit in ("GPUs", "replicas", "") else (1 if unit == "sequences" else 2)
            bt, at = _num(b, digits), _num(a, digits)
        unit_text = "" if unit in ("share", "ms", "USD", "") else f" {unit}"
        rows.append(f"<tr><td>{_e(label)}</td><td class=\"num\">{_e(bt + unit_text)}</td>"
                    f"<td class=\"num\">{_e(at + unit_text)}</td><td>{_tag(source)}</td></tr>")
    sized = [n for n in m.after.get("notes", []) if str(n).startswith("fleet size")]
    how = "".join(f"<p class=\"caption\">{_e(n)}</p>" for n in sized[:1])
    return ("<table><thead><tr><th>figure</th><th>before</th><th>after the what-if</th><th>source</th></tr></thead>"
            f"<tbody>{''.join(rows)}</tbody></table>" + how)


def _chart(name: str, fig: go.Figure, caption: str) -> str:
    div = f"fig-{name}"
    return (f'<div class="chart" id="{div}" data-figure="{div}-json"></div>'
            f'<script type="application/json" id="{div}-json">{_script_json(fig)}</script>'
            + (f'<p class="caption">{_e(caption)}</p>' if caption else ""))


def _assumptions(m: _Memo) -> str:
    a = m.after["assumptions"]
    r = m.log.report
    prefix = m.analysis.prefix
    clusters = m.analysis.clusters
    corners = m.analysis.profile.corners
    deploy_rows = [
        ("model", f"{a['model']} (source: {a['model_source']})"),
        ("GPU", f"{a['gpu']} (source: {a['gpu_source']})"),
        ("precision", f"weights {str(a['precision']).upper()}, KV {str(a['kv_precision']).upper()}, "
                      f"matmuls {str(a['compute_precision']).upper()}" + (f"; {a['fp8_note']}" if a.get("fp8_note") else "")),
        ("tensor parallelism", f"TP {a['tp']} per replica"),
        ("SLOs (p90)", f"TTFT {m.ttft_slo_ms:,.0f} ms, TPOT {m.tpot_slo_ms:,.0f} ms ({a['slo']['source']})"),
        ("price", f"${a['usd_per_gpu_hour']:,.2f} per GPU-hour ({a['price_source']})"),
        ("request rate", f"{a['rate_rps']:,.3g} req/s after the what-if; {a['rate_note']}"),
        ("what-if", whatif_words(m.whatif)),
        ("queueing", a["queueing"]),
        ("KV transfer (disaggregated)", f"{a['kv_transfer_gbps']:g} GB/s"),
    ]
    dep_html = "".join(f"<tr><td>{_e(k)}</td><td>{_e(v)}</td><td>{_tag('assumed')}</td></tr>" for k, v in deploy_rows)
    eff = a["efficiency"]
    eff_rows = "".join(f"<tr><td>{_e(name)}</td><td class=\"num\">{_e(_num(d['value'], 3))}</td>"
                       f"<td>{_e(d['source'])}</td></tr>" for name, d in eff.items())
    dropped = ", ".join(f"{reason} {count:,}" for reason, count in r.dropped.items()) or "none"
    data_rows = [
        ("source", f"{r.source} ({r.format}, compression {r.compression})"),
        ("rows", f"{r.rows_read:,} read = {r.rows_kept:,} kept + dropped: {dropped}. Every analysis sees only the "
                 "kept (served) requests."),
        ("column mapping", "; ".join(f"{k} ← {v}" for k, v in r.mapping.items())),
        ("corners", f"long input from {corners.long_input_tokens:,} tokens, long output from "
                    f"{corners.long_output_tokens:,}, short output below {corners.short_output_tokens:,}"),
        ("clusters", f"k-means on standardised log tokens, k = {clusters.k} ({clusters.k_source}), fitted on "
                     f"{clusters.sample_size:,} sampled requests (seed {clusters.random_state})"),
        ("prefix cache", f"{prefix.method.replace('_', ' ')} ({prefix.provenance}): {prefix.definition}"),
        ("rate", f"{m.workload.rate_source}: {m.workload.rate_note}"),
    ]
    data_rows += [("note", n) for n in (*r.notes, *prefix.notes, *clusters.notes)]
    data_html = "".join(f"<tr><td>{_e(k)}</td><td>{_e(v)}</td></tr>" for k, v in data_rows)
    fitted = f" Fitted on: {a['efficiency_fitted_on']}." if a.get("efficiency_fitted_on") else ""
    return (
        "<h3>Deployment and SLOs</h3><table><tbody>" + dep_html + "</tbody></table>"
        f"<h3>Efficiencies of the capacity model</h3><p class=\"caption\">Calibrated on published measurements."
        f"{_e(fitted)}</p><table><thead><tr><th>parameter</th><th>value</th><th>source</th></tr></thead>"
        f"<tbody>{eff_rows}</tbody></table>"
        "<h3>Data definitions</h3><table><tbody>" + data_html + "</tbody></table>"
    )


def memo_html(m: _Memo) -> str:
    """The one-page capacity memo: decision first, then the charts, the numbers and the assumptions."""
    from plotly.offline import get_plotlyjs

    report = m.log.report
    t = m.tables
    sections = [
        f"<header><h1>Capacity memo</h1><p class=\"sub\">{_e(report.source)} · {report.rows_kept:,} requests · "
        f"{_e(m.deployment.describe())} · what-if: {_e(whatif_words(m.whatif))}</p></header>",
        "<h2 id=\"decision\">Decision</h2>" + _decision(m),
        "<h2 id=\"figures\">Key figures</h2>" + _key_figures(m),
        "<h2 id=\"plane\">The workload shape</h2>" + _chart("plane", m.figures["plane"], m.captions["plane"]),
        "<h3>Shape and phase per product</h3>" + _html_table(
            t["shapes_per_product"],
            {c: _pct for c in ("share_of_requests", "prefill_share_of_gpu_time", "share_of_gpu_time")}
            | {c: (lambda v: fmt_tokens(v)) for c in ("input_p50", "input_p90", "input_p99", "output_p50",
                                                       "output_p90", "output_p99")}
            | {"mixed": lambda v: "mixed" if v else ""}) + f"<p class=\"caption\">{_tag('measured')} token "
        "percentiles and corners; phase and GPU-time shares are " + _tag("estimated") + " on the deployment.</p>",
        "<h2 id=\"clusters\">Clusters</h2>" + _chart("clusters", m.figures["clusters"], m.captions["clusters"])
        + _html_table(t["clusters"], {c: _pct for c in ("share_of_requests", "share_of_gpu_time")}
                      | {c: (lambda v: fmt_tokens(v)) for c in ("input_center", "output_center", "input_p50",
                                                                 "output_p50")}
                      | {"mean_rate_rps": lambda v: _num(v, 3)}),
    ]
    flags = [*m.analysis.clusters.mixed_products, *m.analysis.clusters.mixed_pools]
    if flags:
        sections.append("<ul>" + "".join(f"<li><strong>{_e(f.scope)}</strong> ({_e(f.kind)}): {_e(f.reason)}</li>"
                                         for f in flags) + "</ul>")
    sections += [
        f"<h2 id=\"pressure\">Pressure on each phase, before → after (today's fleet, {m.fleet_gpus:,} GPUs)</h2>"
        + _chart("pressure", m.figures["pressure"], m.captions["pressure"]),
        "<h2 id=\"load\">Latency against load</h2>" + _chart("latency_vs_load", m.figures["latency_vs_load"],
                                                            m.captions["latency_vs_load"]),
    ]
    if "rate_over_time" in m.figures:
        sections.append("<h2 id=\"rate\">Request rate over time</h2>"
                        + _chart("rate_over_time", m.figures["rate_over_time"], m.captions["rate_over_time"]))
    if "fleet_over_time" in m.figures:
        sections.append("<h2 id=\"fleet\">Traffic over time: autoscaling</h2>"
                        + _chart("fleet_over_time", m.figures["fleet_over_time"], m.captions["fleet_over_time"])
                        + _html_table(t["autoscaling_policies"],
                                      {c: _pct for c in ("saving", "attainment")}
                                      | {c: (lambda v: _num(v, 1)) for c in ("gpu_hours", "cost", "baseline_gpu_hours",
                                                                              "lower_bound_gpu_hours")})
                        + f"<p class=\"caption\">{_tag('estimated')} per minute from the log's own traffic; "
                        "the scale-up delay and autoscaler settings are assumed (data/autoscaling.json).</p>")
        if "growth_months" in t:
            sections.append("<h3>Next quarter</h3>" + _html_table(
                t["growth_months"], {"usd_per_month": lambda v: _num(v, 0), "rate_rps": lambda v: _num(v, 3),
                                     "mean_output_tokens": lambda v: _num(v, 0), "ttft_p90_ms": lambda v: _num(v, 0),
                                     "tpot_p90_ms": lambda v: _num(v, 1)})
                + f"<p class=\"caption\">"
                f"{_tag('simulated' if (t['growth_months']['method'] == 'simulated').all() else 'estimated')} "
                f"month by month at an {_tag('assumed')} growth "
                "(see the caption above); <code>plan --growth</code> takes yours per product.</p>")
    sections += [
        "<h2 id=\"cost\">GPUs and cost</h2>" + _plan_html(m),
        "<h2 id=\"recommendations\">Recommendations</h2>" + _html_table(
            t["recommendations"].drop(columns=["lever"]), {"share_of_gpu_time_touched": _pct})
        + f"<p class=\"caption\">{_tag('estimated')} The planner's rules applied to this log; ordered by the "
        "share of GPU-time each lever touches.</p>",
        "<h2 id=\"assumptions\">Assumptions</h2>" + _assumptions(m),
        "<h2 id=\"replay\">Replay traces</h2><p>" + _e(
            f"replay_mooncake.jsonl and replay_vidur.csv hold the what-if workload, {len(m.replay):,} requests in "
            "arrival order.") + "</p><ul>" + "".join(f"<li>{_e(n)}</li>" for n in m.replay.notes) + "</ul>",
    ]
    if m.notes:
        sections.append("<h2 id=\"notes\">Notes on this report</h2><ul>"
                        + "".join(f"<li>{_e(n)}</li>" for n in m.notes) + "</ul>")
    legend = " ".join(f"{_tag(k)} {_e(v)}" for k, v in PROVENANCE_TEXT.items())
    sections.append(f"<footer><p>{legend}</p><p>Made with shapeviz; opens without a network connection "
                    "(plotly.js is inline).</p></footer>")
    return (
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
        "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n"
        f"<title>Capacity memo: {_e(report.source)}</title>\n<style>{_CSS}</style>\n</head>\n<body>\n<main>\n"
        + "\n".join(sections)
        + "\n</main>\n<script>" + get_plotlyjs() + "</script>\n<script>" + _RENDER_JS + "</script>\n</body>\n</html>\n"
    )


