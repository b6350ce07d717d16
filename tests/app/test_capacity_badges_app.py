"""No lever the user didn't set is applied, and the sidebar's SLO hint agrees with the SLOs set (AppTest, no
browser): a BurstGPT slice with sessions, whose prefix reuse is only an estimate (issue 29)."""
from __future__ import annotations

import re

from streamlit.testing.v1 import AppTest

from shapeviz.serving import slo_range
from tests.app.dashboard import CAPACITY, open_app

BURSTGPT_SESSIONS = "burstgpt/burstgpt3_slice.csv"


def _deltas(at: AppTest) -> list[str]:
    return [m.proto.delta for m in at.metric if m.proto.delta]


def test_a_reuse_estimated_from_sessions_is_offered_not_applied(trace) -> None:
    path = trace(BURSTGPT_SESSIONS)
    at = open_app(timeout=600)
    at.file_uploader(key="uploads").set_value((path.name, path.read_bytes(), "text/csv"))
    at.run()
    at.switch_page(CAPACITY).run()
    assert not at.exception, at.exception
    assert at.slider(key="cache_hit_pct").value == 0          # nobody set it
    assert _deltas(at) == []                                   # so nothing moved before → after
    offer = at.button(key="cache_hit_estimate")
    assert re.fullmatch(r"Try (\d+)% \(estimated from the log's sessions\)", offer.label), offer.label
    pct = int(re.search(r"\d+", offer.label).group())
    offer.click().run()
    at.run()
    assert not at.exception, at.exception
    assert at.slider(key="cache_hit_pct").value == pct        # one click applies it, as a what-if
    assert _deltas(at)                                         # and the plan moves
    hint = next(c.value for c in at.sidebar.caption if c.value.startswith("Recommended for"))
    assert "p90" in hint and "p95" not in hint
    shape = re.search(r"\*\*(\w+)\*\*", hint).group(1)
    lo, hi = slo_range(shape)[:2]
    ttft = at.number_input(key="ttft_slo_ms").value
    assert (f"TTFT {ttft:,.0f} ms is looser" in hint) == (ttft > hi)
    assert (f"TTFT {ttft:,.0f} ms is tighter" in hint) == (ttft < lo)
