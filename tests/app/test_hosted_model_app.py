"""A hosted-API model's log is planned on a stand-in said openly on Shape, and one click changes it (AppTest)."""
from __future__ import annotations

from pathlib import Path

from tests.app.dashboard import open_upload

USAGE = Path(__file__).resolve().parents[1] / "data" / "ingest" / "anthropic_messages_usage.jsonl"
SHAPE = "pages/shape.py"


def _stand_in(at) -> list[str]:
    return [i.value.replace("\\", "") for i in at.info if "planned as if served by" in i.value]


def test_shape_says_a_claude_log_is_planned_as_if_served_by_its_stand_in() -> None:
    at = open_upload("usage.jsonl", USAGE.read_bytes(), page=SHAPE, mime="application/json", timeout=600)
    said = _stand_in(at)
    assert len(said) == 1 and "Llama-3.1-70B" in said[0] and "claude-sonnet-4-20250514" in said[0], said
    at.selectbox(key="model").set_value("qwen3-32b").run()   # the choice, one click away
    assert not at.exception, at.exception
    assert _stand_in(at) == []
