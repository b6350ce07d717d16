"""A log built to take the server down (a gzip that inflates past the row limit) is refused in one line while
another session keeps working: the row limit is checked at every streamed batch, not after a full parse."""
from __future__ import annotations

import gzip
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.needs import require_module

require_module("playwright.sync_api", "the playwright package drives the browser tests")

from dashboard import FIRST_LOAD_MS, RERUN_MS, OpenDashboard  # noqa: E402
from playwright.sync_api import expect  # noqa: E402

pytestmark = pytest.mark.e2e

CODE = "azure_llm_2023/AzureLLMInferenceTrace_code.csv"
CODE_ROWS = "8,819"  # SOURCE.md


def _row_bomb(rows_millions: int) -> bytes:
    """A few-MB gzip of ``rows_millions`` million identical rows (members repeated: valid, multi-member gzip)."""
    member = gzip.compress(b"1000,200\n" * 1_000_000, compresslevel=9)
    return gzip.compress(b"input_tokens,output_tokens\n") + member * rows_millions


def test_a_row_bomb_is_refused_in_one_line_and_other_sessions_keep_working(
        open_dashboard: OpenDashboard, trace: Callable[[str], Path]) -> None:
    a = open_dashboard()
    a.upload_path(trace(CODE))
    expect(a.metric("Requests")).to_have_text(CODE_ROWS, timeout=FIRST_LOAD_MS)

    b = open_dashboard()
    # the bomb: 238M rows, 2.14 GB once inflated (under the 2 GiB decompression limit), in a few MB;
    # parsed whole before the row limit was checked, it took the server down (7.3 GB RSS, abort in Arrow)
    bomb = _row_bomb(238)
    b.upload("weekly.csv.gz", bomb, "application/gzip")
    expect(b.errors).to_have_count(1, timeout=FIRST_LOAD_MS)
    message = b.errors.inner_text().strip()
    assert "weekly.csv.gz" in message and "exceed the limit of 20,000,000" in message, message
    assert "\n" not in message and "Traceback" not in message
    b.expect_healthy()

    # the other session never noticed: its pages still rerun on its own log
    a.go("Clusters")
    expect(a.caption).to_contain_text(CODE_ROWS, timeout=RERUN_MS)
    a.go("Shape", "Workload shape")
    expect(a.metric("Requests")).to_have_text(CODE_ROWS, timeout=RERUN_MS)
    a.expect_healthy()
    # and the refused session recovers in one click
    b.pick_data("Demo mix (synthetic)")
    expect(b.errors).to_have_count(0, timeout=FIRST_LOAD_MS)
    b.expect_healthy()
