"""The other pairs that must agree, on logs and settings hypothesis generates (issue 39, item 1).

- **The frame path and the sketch path.** A log past ``FULL_FRAME_MAX_ROWS`` is analysed from its sketch, smaller
  ones from their rows; a log sketched in parts (batches, Dask partitions) must give the sketch of the whole, and
  the figures a page shows from a sketch must be the rows' own: the request count, token totals and means exactly,
  requests per minute exactly, token percentiles within the one bin the sketch's docstring promises.
- **Serial and parallel replays.** Replays sent to worker processes (``serving.parallel``: a design's candidates,
  the routers compared) come back equal bit for bit to the same replays run here, in the order they were sent.

Derandomised like ``test_loops_agree.py`` (the same examples on every run; ``make fuzz``'s settings apply here too
through ``SHAPEVIZ_FUZZ_EXAMPLES``/``SHAPEVIZ_FUZZ_RANDOM``), a few seconds each in CI.
"""
from __future__ import annotations

import os

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from shapeviz.analyses.traffic import rate_over_time
from shapeviz.ingest import load_log
from shapeviz.serving.parallel import Runner
from shapeviz.serving.planner import Workload
from shapeviz.serving.simulator import simulate
from shapeviz.workload.binning import BINS_PER_DECADE, bin_index
from shapeviz.workload.sketch import WorkloadSketch, merge_all
from shapeviz.workload.view import WorkloadView
from tests.unit.test_loops_agree import DEPLOYMENTS, _assert_same, runs

RANDOM = os.environ.get("SHAPEVIZ_FUZZ_RANDOM") == "1"


def _profile(examples: int) -> settings:
    return settings(max_examples=int(os.environ.get("SHAPEVIZ_FUZZ_EXAMPLES", str(examples))), deadline=None,
                    derandomize=not RANDOM,
                    phases=[Phase.explicit, Phase.reuse, Phase.generate] + ([Phase.shrink] if RANDOM else []),
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                           HealthCheck.function_scoped_fixture])


ROW = st.tuples(
    st.integers(1, 200_000),                               # input tokens, across most of the log grid
    st.integers(1, 20_000),                                # output tokens
    st.sampled_from([None, 0.0, 0.5, 1.0]),                # share of the prompt reported cached (None: not logged)
    st.sampled_from([0.0, 0.0, 0.3, 7.0, 59.9, 61.0, 600.0]),   # gap to the next request, s (ties, minute edges)
    st.sampled_from(["chat", "chat", "rag", "code agent"]),
    st.one_of(st.none(), st.floats(0.5, 50_000.0)),        # TTFT the log measured, ms
)


@st.composite
def logs(draw: st.DrawFn) -> pd.DataFrame:
    """A log as a user uploads it (CSV), read by the ingest layer into its canonical frame."""
    rows = draw(st.lists(ROW, min_size=1, max_size=120))
    start = pd.Timestamp("2025-03-01 11:58:30", tz="UTC")
    t = start + pd.to_timedelta(np.cumsum([0.0] + [r[3] for r in rows[:-1]]), unit="s")
    raw = pd.DataFrame({
        "timestamp": t.strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
        "input_tokens": [r[0] for r in rows], "output_tokens": [r[1] for r in rows],
        "cached_tokens": [None if r[2] is None else int(r[0] * r[2]) for r in rows],
        "product": [r[4] for r in rows],
        "ttft_ms": [r[5] for r in rows],
    })
    return load_log(raw.to_csv(index=False).encode(), name="drawn.csv").frame


def _same_counts(a: WorkloadSketch, b: WorkloadSketch) -> None:
    assert a.products == b.products
    for name in ("counts", "input_sum", "output_sum", "cached_sum"):
        np.testing.assert_array_equal(getattr(a, name), getattr(b, name), err_msg=name)
    assert sorted(a.latency) == sorted(b.latency)
    for name in a.latency:
        np.testing.assert_array_equal(a.latency[name], b.latency[name], err_msg=name)
    pd.testing.assert_frame_equal(a.timeline.reset_index(drop=True), b.timeline.reset_index(drop=True),
                                  check_dtype=False)


@_profile(60)
@given(logs(), st.lists(st.floats(0.0, 1.0), max_size=4))
def test_a_log_sketched_in_any_parts_is_the_sketch_of_the_whole(frame, cuts):
    """Batches and partitions cut anywhere (empty parts included), merged in any grouping: the whole's sketch."""
    at = sorted({int(c * len(frame)) for c in cuts})
    parts = [frame.iloc[a:b] for a, b in zip([0, *at], [*at, len(frame)])]
    whole = WorkloadSketch.from_frame(frame)
    merged = merge_all(WorkloadSketch.from_frame(p, seed=i) for i, p in enumerate(parts))
    _same_counts(merged, whole)
    assert merged.requests == len(frame)


@_profile(60)
@given(logs())
def test_the_sketch_path_shows_the_frame_paths_figures(frame):
    """What a page shows of a log analysed from its sketch against the same log analysed from its rows."""
    sketch = WorkloadSketch.from_frame(frame)
    rows, bins = Workload.from_frame(frame), Workload.from_view(sketch)
    assert bins.n_requests == rows.n_requests == len(frame)
    assert bins.mean_input == pytest.approx(rows.mean_input, rel=1e-12)
    assert bins.mean_output == pytest.approx(rows.mean_output, rel=1e-12)
    view = WorkloadView.from_sketch(sketch)
    assert view.totals("input").sum() == frame["input_tokens"].sum()
    assert view.totals("output").sum() == frame["output_tokens"].sum()
    # requests per minute, minute by minute (and product by product where both paths split them)
    by_rows, by_bins = rate_over_time(frame, "1min"), rate_over_time(view, "1min")
    key = ["timestamp", "product"] if "product" in by_rows.columns and "product" in by_bins.columns else ["timestamp"]
    a = by_rows.groupby(key, observed=True)["requests"].sum()
    b = by_bins.groupby(key, observed=True)["requests"].sum()
    pd.testing.assert_series_equal(b[b > 0].sort_index(), a[a > 0].sort_index(), check_dtype=False,
                                   check_index_type=False)
    # percentiles: in the exact nearest-rank quantile's own log bin (the stated bound), for every product too
    for product in [None, *sketch.products]:
        mine = frame if product is None else frame[frame["product"].astype(str) == product]
        for axis in ("input", "output"):
            values = mine[f"{axis}_tokens"].to_numpy()
            for q in (50, 90, 99):
                exact = float(np.percentile(values, q, method="inverted_cdf"))
                estimate = float(sketch.quantile(axis, q, product)[0])
                assert bin_index(np.array([estimate]))[0] == bin_index(np.array([exact]))[0], (product, axis, q)
                assert abs(np.log10(estimate) - np.log10(exact)) < 1 / BINS_PER_DECADE


def replay(req, name: str, kwargs: dict):
    """One replay in whatever process runs it (module level: a worker process imports it by name)."""
    kwargs = {k: v for k, v in kwargs.items() if k not in ("whatif", "block_size")}   # already in the requests
    return simulate(req, DEPLOYMENTS[name], **kwargs)


@pytest.fixture(scope="module")
def workers():
    """Two worker processes, started once for every example (as a command's runner serves all its batches)."""
    with Runner(2) as runner:
        yield runner


@_profile(6)
@given(st.lists(st.one_of(runs("none"), runs("sessions"), runs("hashes")), min_size=2, max_size=4))
def test_replays_in_worker_processes_are_the_replays_run_here_in_the_order_sent(workers, batch):
    here = [replay(*run) for run in batch]
    apart = workers.map(replay, batch)
    assert len(apart) == len(here)
    for a, b in zip(apart, here):
        _assert_same(a, b)
