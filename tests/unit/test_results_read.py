"""The Capacity page's "Plan vs measured" reads dropped result files in one of the server's two work slots, and
takes none when there is no file: the section redraws on every what-if step, and a visitor without results must not
wait behind other visitors' logs being read."""
from __future__ import annotations

import threading
from pathlib import Path
from types import SimpleNamespace

from components import data
from components.measured import read_results

AIPERF = Path(__file__).resolve().parents[1] / "data" / "measured" / "aiperf_0.13.0_planned.json"


def _read_while_every_slot_is_taken(uploads: list, wait_s: float) -> tuple[bool, list]:
    out: list = []
    for _ in range(data.PARSE_SLOTS):   # other visitors' logs hold both slots
        data._PARSING.acquire()
    reader = threading.Thread(target=lambda: out.extend(read_results(uploads)), daemon=True)
    try:
        reader.start()
        reader.join(timeout=wait_s)
        busy = reader.is_alive()
    finally:
        for _ in range(data.PARSE_SLOTS):
            data._PARSING.release()
    reader.join(timeout=30)
    return busy, out


def test_no_result_file_takes_no_slot_and_a_file_waits_for_one() -> None:
    busy, levels = _read_while_every_slot_is_taken([], wait_s=20)
    assert not busy and levels == []        # nothing to read: drawn at once
    upload = SimpleNamespace(name=AIPERF.name, size=AIPERF.stat().st_size, getvalue=AIPERF.read_bytes)
    busy, levels = _read_while_every_slot_is_taken([upload], wait_s=1)
    assert busy and len(levels) == 1        # a file waited for a slot, then was read
