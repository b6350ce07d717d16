"""No lever the user didn't set is applied, and the sidebar's SLO hint agrees with the SLOs set (AppTest, no
browser): a BurstGPT slice with sessions, whose prefix reuse is only an estimate (issue 29)."""
from __future__ import annotations

import re

from streamlit.testing.v1 import AppTest

from shapeviz.serving import slo_range
from tests.app.dashboard import open_page, open_upload

BURSTGPT_SESSIONS = "burstgpt/burstgpt3_slice.csv"


def _deltas(at: AppTest) -> list[str]:
    return [m.proto.delta for m in at.metric if m.proto.delta]


def test_a_reuse_estimated_from_sessions_is_offered_not_applied(trace) -> None:
    path = trace(BURSTGPT_SESSIONS)
    at = open_upload(path.name, path.read_bytes(), timeout=600)
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


def test_the_headline_lists_the_levers_in_force() -> None:
    at = open_page(timeout=600)
    assert "The what-if: no lever moved, so before and after are the same plan." in [c.value for c in at.caption]
    at.slider(key="trim_input_pct").set_value(20).run()
    at.run()   # a lever step reruns the live fragments alone: the whole page once more
    at.slider(key="traffic").set_value(1.5).run()
    said = [c.value.replace("\\", "") for c in at.caption if c.value.startswith("The what-if")]
    assert said == ["The what-if: input trimmed 20%, traffic ×1.5."], said
