"""Several logs in one view: concurrent traffic on one pool, each log's sessions kept apart."""
from __future__ import annotations

import pandas as pd
import pytest

from shapeviz.analyses.traffic import traffic
from shapeviz.ingest import combine, load_log


def test_logs_from_different_days_are_overlaid_as_concurrent_traffic(trace) -> None:
    code = load_log(trace("azure_llm_2023/AzureLLMInferenceTrace_code.csv"))       # 2023-11-16, 57 min
    conv = load_log(trace("mooncake_fast25/conversation_trace.jsonl.gz"))          # offsets from 0, 59 min
    both = combine([code, conv])
    t = traffic(both.frame)
    assert t.span_s == pytest.approx(3537, abs=5)  # the longer log, not 53 years
    # SOURCE.md: 2.57 req/s (code) and 3.40 req/s (conversation) served together
    assert t.mean_rps == pytest.approx(2.57 * 3436 / 3537 + 3.40, rel=0.02)
    assert any("shifted" in note for note in both.report.notes)
    by_product = both.frame.groupby("product", observed=True)["timestamp"].min()
    assert by_product.max() == by_product.min()


def test_logs_that_overlap_in_time_are_left_alone(trace) -> None:
    code = load_log(trace("azure_llm_2023/AzureLLMInferenceTrace_code.csv"))
    conv = load_log(trace("azure_llm_2023/AzureLLMInferenceTrace_conv.csv"))       # the same hour
    both = combine([code, conv])
    assert not any("shifted" in note for note in both.report.notes)
    assert both.frame["timestamp"].min() == min(code.frame["timestamp"].min(), conv.frame["timestamp"].min())


def test_the_same_session_ids_in_two_files_stay_two_sessions(trace) -> None:
    one = load_log(trace("burstgpt/burstgpt3_slice.csv"))
    sessions = one.frame["session_id"].nunique()
    both = combine([one, load_log(trace("burstgpt/burstgpt3_slice.csv"))])
    assert both.frame["session_id"].nunique() == 2 * sessions
    assert both.report.rows_read == 800 and both.report.balanced
    assert isinstance(both.frame["session_id"].dtype, pd.CategoricalDtype)


def test_the_headline_peak_and_the_plans_rate_are_one_figure(trace) -> None:
    from shapeviz.serving import Workload

    log = load_log(trace("azure_llm_2023/AzureLLMInferenceTrace_conv.csv"))
    t = traffic(log.frame)
    assert Workload.from_frame(log.frame).rate_rps == t.p99_minute_rps
    assert t.mean_rps == pytest.approx(5.53, abs=0.01)  # SOURCE.md
    assert t.mean_rps < t.p99_minute_rps <= t.peak_rps
