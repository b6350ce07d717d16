"""Text from a log reads as typed on the dashboard: md_literal escapes every markdown construct Streamlit renders."""
from __future__ import annotations

import re
import string

from hypothesis import given
from hypothesis import strategies as st

from shapeviz.text import md_literal, phase_phrase

JOINER = "\u2060"


def shown(markdown: str) -> str:
    """The text a CommonMark renderer shows for escaped text: each backslash escape resolves to its character."""
    return re.sub(r"\\([!-/:-@\[-`{-~])", r"\1", markdown).replace(JOINER, "")


def unescaped(markdown: str) -> list[str]:
    """Punctuation characters that are NOT preceded by the backslash that makes them literal."""
    active, i = [], 0
    while i < len(markdown):
        if markdown[i] == "\\":
            i += 2  # the escape and the character it makes literal
            continue
        if markdown[i] in string.punctuation:
            active.append(markdown[i])
        i += 1
    return active


# (what a hostile product / model / session / file name holds, what it would turn into if rendered as markdown)
HOSTILE = [
    "[click me](http://example.invalid/x)",   # a live link
    "![pixel](http://example.invalid/p.png)",  # an image fetched from anywhere
    "**bold** _it_ *em* __strong__",           # emphasis
    ":red[alarm] :blue-background[x] :material/warning: :rotating_light:",  # Streamlit colours, icons, emoji
    "$\\LaTeX$ and $$x^2$$",                   # maths
    "<b>html</b> <img src=x onerror=alert(1)> &amp;",  # HTML and entities
    "`code` ```fence```",                      # code
    "~~struck~~ | a | b |",                    # strike-through, a table row
]
LINE_START = ["# heading", "- item", "* item", "+ item", "1. first", "> quote", "    indented code", "---"]


def test_hostile_names_read_exactly_as_typed() -> None:
    for text in HOSTILE + LINE_START:
        out = md_literal(text)
        assert shown(out) == re.sub(r"\s+", " ", text), text
        assert unescaped(out) == [], f"{text!r} left markdown syntax active: {out!r}"


def test_nothing_in_a_name_can_start_a_block_on_a_new_line() -> None:
    out = md_literal("product\n# Heading\n- item\n\n    code\r\n> quote")
    assert "\n" not in out and "\r" not in out
    assert shown(out) == "product # Heading - item code > quote"


def test_bare_addresses_are_not_linkified() -> None:
    # GFM links bare addresses after escapes are resolved: the shown text itself must not match its patterns.
    for text in ("http://example.invalid/x", "HTTPS://example.invalid", "www.example.invalid", "me@example.invalid"):
        out = md_literal(text)
        visible = re.sub(r"\\(.)", r"\1", out)  # escapes resolved, the word joiner kept
        assert not re.search(r"(?i)https?://|www\.|\w@\w+\.", visible), out
        assert shown(out) == text


def test_plain_names_stay_readable() -> None:
    assert shown(md_literal("AzureLLMInferenceTrace_conv.csv")) == "AzureLLMInferenceTrace_conv.csv"
    assert md_literal("chatbot") == "chatbot"
    assert md_literal(12) == "12"


def test_missing_values_read_as_a_dash() -> None:
    assert md_literal(None) == "—"
    assert md_literal(float("nan")) == "—"


@given(st.text(alphabet=string.printable + "éß中\u2028", max_size=60))
def test_any_text_round_trips_and_leaves_no_syntax_active(text: str) -> None:
    out = md_literal(text)
    assert shown(out) == re.sub(r"\s+", " ", text)
    assert unescaped(out) == []


def test_phases_read_as_english() -> None:
    assert "balanced-dominated" not in phase_phrase("balanced")
    assert shown(phase_phrase("balanced")).replace("*", "") == "balanced between prefill and decode"
    assert shown(phase_phrase("prefill")).replace("*", "") == "prefill-dominated"
