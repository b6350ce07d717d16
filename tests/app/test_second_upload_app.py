"""A second upload replaces the first: the pages analyse the file just dropped, the column mapping lists that file's
columns, the earlier file is named as not analysed, and one click analyses both together (one product per file)."""
from __future__ import annotations

import uuid
from collections.abc import Callable
from pathlib import Path

from streamlit.testing.v1 import AppTest

from tests.app.dashboard import open_app

SHAPE = "pages/shape.py"


def _head(path: Path, rows: int) -> bytes:
    return b"".join(path.read_bytes().splitlines(keepends=True)[: rows + 1])


def _drop(at: AppTest, name: str, content: bytes) -> None:
    """Drop one more file on the uploader, the files already listed keeping their ids (as a browser does)."""
    uploader = at.file_uploader(key="uploads")
    uploader._files = [*uploader._get_files_to_register(), (str(uuid.uuid4()), name, content, "text/csv")]
    _run_with_load_report_open(at)


def _run_with_load_report_open(at: AppTest) -> None:
    at.run()   # the new log's page: its load report's expander is a new one, drawn closed
    at.session_state["load_report_open"] = True   # opened: the load report and its mapping form drawn
    at.run()


def _mapping_options(at: AppTest) -> list[str]:
    return list(at.selectbox(key="map_input_tokens").options)


def test_a_second_upload_replaces_the_first_and_maps_its_own_columns(trace: Callable[[str], Path]) -> None:
    azure = _head(trace("azure_llm_2023/AzureLLMInferenceTrace_code.csv"), 300)
    burst = _head(trace("burstgpt/burstgpt_slice.csv"), 300)
    at = open_app()
    at.switch_page(SHAPE)
    _drop(at, "azure_code.csv", azure)
    assert not at.exception, at.exception
    assert "ContextTokens" in _mapping_options(at)

    _drop(at, "burstgpt.csv", burst)
    assert not at.exception, at.exception
    # the mapping lists the columns of the file the pages analyse, and only those
    options = _mapping_options(at)
    assert "Request tokens" in options and "ContextTokens" not in options, options
    captions = [c.value.replace("\\", "") for c in at.caption]   # as read: markdown escapes dropped
    assert any(c.startswith("Columns in burstgpt.csv") for c in captions)
    assert not any(c.startswith("Columns in azure_code.csv") for c in captions), captions
    # the earlier file is said not to be analysed, with a way to analyse both
    assert any("not analysed" in c and "azure" in c for c in at.sidebar.caption.values), at.sidebar.caption.values
    assert at.button(key="analyse_all_uploads").label == "Analyse all 2 files together"
    assert "azure" not in _load_report_label(at)

    at.button(key="analyse_all_uploads").click()
    _run_with_load_report_open(at)
    assert not at.exception, at.exception
    options = _mapping_options(at)
    assert "Request tokens" in options and "ContextTokens" in options
    assert not any("not analysed" in c for c in at.sidebar.caption.values)


def _load_report_label(at: AppTest) -> str:
    return next(e.label for e in at.expander if e.label.startswith("Load report"))
