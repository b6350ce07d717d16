"""Text from a log (product, model, session, file and column names) shown as literal text in markdown.

Streamlit renders ``st.markdown``, captions, alerts, help texts and widget labels as markdown with its own
extensions (``:red[...]`` colours, ``:material/icon:`` and emoji shortcodes, ``$...$`` maths). A name such as
``[click me](http://x)`` would become a live link. ``md_literal`` makes any string read exactly as typed there.
"""
from __future__ import annotations

import re

# Every ASCII punctuation character may be backslash-escaped in CommonMark and then renders as itself; escaping
# all of them (not a hand-picked list) also covers the extensions: ':' (colour directives, shortcodes), '$'
# (maths), '~' (strike-through), '|' (tables), '<' and '&' (HTML and entities).
_PUNCTUATION = re.compile(r"([!\"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~])")
# A line break inside a name would start a heading, a list or a code block on the next line.
_WHITESPACE = re.compile(r"\s+")
_MISSING = "—"
# GitHub-flavoured markdown turns bare addresses into links *after* escapes are resolved (it rewrites the text,
# not the source), so backslashes cannot stop it. An invisible word joiner (U+2060) inside the pattern does: the
# text reads and wraps the same, and only these rare sequences carry it.
_JOINER = "\u2060"
_AUTOLINKS = (
    re.compile(r"(?i)(https?:)(?=//)"),        # http://… and https://…
    re.compile(r"(?i)(www)(?=\.)"),             # www.…
    re.compile(r"([\w.+-])(?=@[\w-]+\.)"),     # name@domain.tld
)


def md_literal(value: object) -> str:
    """``value`` as markdown that renders as its literal text: no link, emphasis, colour, maths or HTML.

    Runs of whitespace (line breaks included) become one space, so nothing in the value can start a block.
    ``None`` and NaN read as a dash.
    """
    if value is None or (isinstance(value, float) and value != value):
        return _MISSING
    text = _WHITESPACE.sub(" ", str(value))
    for pattern in _AUTOLINKS:
        text = pattern.sub(lambda m: m.group(1) + _JOINER, text)
    return _PUNCTUATION.sub(r"\\\1", text)


_PHASE_PHRASES: dict[str, str] = {
    "prefill": "**prefill**-dominated",
    "decode": "**decode**-dominated",
    "balanced": "**balanced** between prefill and decode",
}


def phase_phrase(phase: str) -> str:
    """How a sentence says where GPU-time goes: "prefill-dominated", or "balanced between prefill and decode"."""
    return _PHASE_PHRASES.get(phase, md_literal(phase))


def plain_phase_phrase(phase: str) -> str:
    """``phase_phrase`` as plain text (the command line's): never "balanced-dominated"."""
    return _PHASE_PHRASES.get(phase, phase).replace("**", "")


# Characters a terminal acts on instead of showing: C0 controls but line feed and tab (escape sequences, bells,
# carriage returns that overwrite a line), DEL, the C1 controls (U+009B is a one-byte escape sequence) and the
# bidirectional overrides that reorder what is shown.
_TERMINAL_CONTROLS = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200b-\u200f\u202a-\u202e\u2060-\u2064"
                                "\u2066-\u2069\ufeff]")


def terminal_text(text: str) -> str:
    """``text`` safe to print on a terminal: every control character (but line feeds and tabs) shown as ``?``."""
    return _TERMINAL_CONTROLS.sub("?", text)


# Anything that ends a line somewhere: a comment in a generated script must stay one line whatever a name holds.
_LINE_BREAKS = re.compile("[\\s\x00-\x1f\x7f-\x9f\u2028\u2029]+")


def one_line(value: object) -> str:
    """``value`` as one line of plain text (for a ``#`` comment in a generated script): breaks and controls → space."""
    return _LINE_BREAKS.sub(" ", str(value)).strip()


# Characters that act on the display instead of showing: C0 and C1 controls (line breaks and tabs included), DEL,
# line and paragraph separators, the bidirectional marks, embeddings, overrides and isolates (U+202E makes
# "safe\u202egnp.exe" read "safeexe.png"), zero-width spaces and joiners, invisible operators, the byte-order mark
# and interlinear annotation marks.
_INVISIBLE = re.compile("[\x00-\x1f\x7f-\x9f\u00ad\u061c\u180e\u200b-\u200f\u2028-\u202e\u2060-\u2064"
                        "\u2066-\u206f\ufeff\ufff9-\ufffb]")

INVISIBLE_PATTERN: str = _INVISIBLE.pattern   # for vectorised searches (pandas' str.contains)


def visible_text(value: object) -> str:
    """``value`` with every control, line break, bidi and zero-width character shown as its ``\\uXXXX`` escape.

    What a name from a log becomes once, at ingest, so every terminal line, CSV cell, HTML memo and PNG shows it
    as it was written, and nothing in it moves, hides or reorders the text around it.
    """
    return _INVISIBLE.sub(lambda m: f"\\u{ord(m.group()):04x}", str(value))
