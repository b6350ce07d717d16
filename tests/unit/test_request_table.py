"""The request table a sizing replays is built once per (log, what-if), in ``workload/``, and each window is sliced from
it: the same requests as the window's own rows read alone (issue 40, item 2)."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from shapeviz.fleet.sizing import pair_classes, size_fleet, slo_window
from shapeviz.ingest import load_log
from shapeviz.physics import default_deployment
from shapeviz.serving.planner import WhatIf
from shapeviz.workload import requests as table
from shapeviz.workload import synth


@pytest.fixture(scope="module")
def sessions() -> pd.DataFrame:
    return synth.generate(1_500, seed=3, with_hashes=False)


def test_a_sizing_reads_the_log_into_its_request_table_once(sessions: pd.DataFrame) -> None:
    dep = default_deployment()
    before = table.builds()
    sizing = size_fleet(sessions, dep, pair_classes(sessions, 1000.0, 50.0), estimate=1,
                        whatif=WhatIf(trim_input=0.1), slo_window_s=600.0)
    assert sizing.method == "simulated" and sizing.trials
    # the window is chosen on the table and sliced from it: the log is not read again for the window's rows
    assert table.builds() - before == 1


def test_auto_tp_reads_the_log_into_one_request_table_for_every_tp_it_tries(sessions: pd.DataFrame) -> None:
    from dataclasses import replace

    from shapeviz.fleet.sizing import auto_tp

    fits = default_deployment()
    tried: list[int] = []

    def build(tp: int):
        tried.append(tp)
        return replace(fits, tp=tp)

    before = table.builds()
    # a 1 ms TTFT class no TP reaches: every TP is tried, each on its own busiest window sliced from the one table
    dep, words, left = auto_tp(sessions, fits, build, pair_classes(sessions, 1.0, 50.0), slo_window_s=600.0)
    assert len(tried) >= 2 and left and "no TP within one node" in words
    assert table.builds() - before == 1


def test_the_window_is_the_logs_own_rows_with_their_prompt_blocks(traces: Path) -> None:
    frame = load_log(traces / "mooncake_fast25" / "conversation_trace.jsonl.gz").frame
    dep = default_deployment()
    whatif = WhatIf(trim_input=0.2)
    req, sized_on = slo_window(frame, dep, whatif=whatif, slo_window_s=600.0)
    seconds = (frame["timestamp"] - frame["timestamp"].min()).dt.total_seconds().to_numpy()
    rows = frame.loc[(seconds >= sized_on["start_s"] - 1e-6) & (seconds <= sized_on["end_s"] + 1e-6)]
    alone = table.RequestTable.build(rows, whatif).requests()
    assert 0 < len(req) == len(alone) < len(frame)
    np.testing.assert_array_equal(req.input_tokens, alone.input_tokens)
    np.testing.assert_array_equal(req.output_tokens, alone.output_tokens)
    np.testing.assert_allclose(req.arrival_s, alone.arrival_s, atol=1e-9)
    # each row keeps its own prompt blocks: the same hashed ids, each block shorter by the trim
    np.testing.assert_array_equal(req.blocks.look_ptr, alone.blocks.look_ptr)
    np.testing.assert_array_equal(req.blocks.looked_up(), alone.blocks.looked_up())
    assert req.blocks.block_size == alone.blocks.block_size < 512
