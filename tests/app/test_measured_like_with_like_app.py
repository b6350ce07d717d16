"""Plan vs measured judges the plan only against latencies of the planned deployment (AppTest, no browser).

The log: the rows of the real BurstGPT slice (GPT-4 and ChatGPT behind Azure OpenAI), with the TPOT each request
bounds (its elapsed time over its response tokens, both from the trace): another fleet's latencies, not the
planned Llama's.
"""
from __future__ import annotations

import pandas as pd
from streamlit.testing.v1 import AppTest

from tests.app.dashboard import CAPACITY, open_app

BURSTGPT = "burstgpt/burstgpt3_slice.csv"
JUDGED = "measured-log-is-plan-capacity"


def _log_with_latencies(path) -> bytes:
    rows = pd.read_csv(path)
    rows = rows[(rows["Response tokens"] > 0) & (rows["Elapsed time"] > 0)]
    return pd.DataFrame({"timestamp": rows["Timestamp"], "model": rows["Model"],
                         "input_tokens": rows["Request tokens"], "output_tokens": rows["Response tokens"],
                         "tpot_ms": 1000 * rows["Elapsed time"] / rows["Response tokens"]}).to_csv(index=False).encode()


def _said(at: AppTest) -> list[str]:
    return [m.value.replace("\\", "") for m in at.markdown]


def _verdicts(at: AppTest) -> list[str]:
    return [m for m in _said(at) if m.startswith("- TPOT p") or "p90 SLO" in m]


def test_the_log_of_other_models_is_shown_not_judged_until_the_user_says_it_is_the_plan(trace) -> None:
    at = open_app(timeout=600)
    at.file_uploader(key="uploads").set_value(("burstgpt_latencies.csv", _log_with_latencies(trace(BURSTGPT)),
                                               "text/csv"))
    at.run()
    at.switch_page(CAPACITY).run()
    assert not at.exception, at.exception
    own = [m for m in _said(at) if m.startswith("**Your log's own latencies**")]
    assert len(own) == 1 and "ChatGPT" in own[0] and "GPT-4" in own[0] and "not the planned Llama" in own[0], own
    assert _verdicts(at) == []
    assert any("TPOT p90 (ms)" in d.value.columns for d in at.dataframe)
    at.checkbox(key=JUDGED).check().run()
    assert not at.exception, at.exception
    assert _verdicts(at), _said(at)
    assert not [m for m in _said(at) if m.startswith("**Your log's own latencies**")]
