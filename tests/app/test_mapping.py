"""The column-mapping editor shows the mapping in force (what was detected, or the user's override), not "(auto)"
in every dropdown; applying the form unchanged adds no override."""
from __future__ import annotations

from pathlib import Path

from components.mapping import AUTO, EDITABLE, in_force, overrides_from
from shapeviz.ingest import DEFAULT_LIMITS, load_log
from shapeviz.ingest.readers import read_table

OPENAI = Path(__file__).resolve().parents[1] / "data" / "ingest" / "openai_usage.jsonl"


def test_each_dropdown_shows_the_column_in_force() -> None:
    detected = dict(load_log(OPENAI).report.mapping)
    columns = [str(c) for c in read_table(OPENAI.read_bytes(), OPENAI.name, DEFAULT_LIMITS).columns]
    shown = in_force(columns, detected, {})
    assert shown["input_tokens"] == "usage.prompt_tokens" and shown["output_tokens"] == "usage.completion_tokens"
    assert shown["cached_tokens"] == "usage.prompt_tokens_details.cached_tokens" and shown["timestamp"] == "created"
    # a rule, not a column of the file ("model (model column)"), and what the log lacks, stay automatic
    assert shown["product"] == AUTO and shown["session_id"] == AUTO and set(shown) == set(EDITABLE)
    # an override is what is in force
    assert in_force(columns, detected, {"output_tokens": "usage.total_tokens"})["output_tokens"] == "usage.total_tokens"
    # submitting the form as shown keeps no override; a changed dropdown becomes one
    assert overrides_from(shown, detected, {}) == {}
    assert overrides_from({**shown, "output_tokens": "usage.total_tokens"}, detected, {}) == {
        "output_tokens": "usage.total_tokens"}
