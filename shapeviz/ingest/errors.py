"""The one exception ingest raises for bad input."""
from __future__ import annotations


class IngestError(ValueError):
    """A log that cannot be read: one line naming the file, the problem and the fix."""

    def __init__(self, source: str, problem: str, fix: str = "") -> None:
        text = f"{source}: {problem}" + (f"; {fix}" if fix else "")
        # one line, always: a message is shown in a sidebar or on stderr, never as a traceback
        super().__init__(" ".join(text.split()))
        self.source = source
