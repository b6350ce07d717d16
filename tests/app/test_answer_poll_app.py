"""The answer line's poll keeps out of a run of slider steps (issue 37, item 7).

While the headline's replays run, the line under the metrics polls until they land. The browser keeps a fragment's
timer running as long as its interval is unchanged, so a poll fired every second whatever the user did, and one
that fell inside a slider step added a script run to it (two to four runs a step instead of two). A step now
registers its poll under a new key, at ``STEP_POLL_S``: the browser drops the old timer and the next poll comes that
long after the step's draw. A full run of the page (it opened, the answer landed) polls at ``POLL_S``.
"""
from __future__ import annotations

import pytest
import streamlit
from streamlit.testing.v1 import AppTest


def _page() -> None:
    import streamlit as st

    from components import fleet_answer, sidebar

    sidebar.start_run()
    st.slider("Trim input %", 0, 90, 0, 5, key="trim_input_pct", on_change=sidebar._on_whatif_step)

    def headline() -> bool:
        st.caption(f"The what-if: input trimmed {st.session_state['trim_input_pct']}%.")
        fleet_answer._polled_line(True, lambda: False, "replaying…", lambda: None)   # the replays still run
        return True

    sidebar.whatif_fragment(headline)
    sidebar.publish_live()


@pytest.fixture
def polls(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str | None, float | None]]:
    """Every poll the page registers: its fragment key and interval."""
    seen: list[tuple[str | None, float | None]] = []
    real = streamlit.fragment

    def fragment(func=None, *, run_every=None, key=None, **kwargs):  # noqa: ANN001, ANN202
        if run_every is not None:
            seen.append((key, run_every))
        return real(func, run_every=run_every, key=key, **kwargs)

    monkeypatch.setattr(streamlit, "fragment", fragment)
    return seen


def test_a_step_restarts_the_answer_poll_at_the_step_interval(polls: list) -> None:
    from components.fleet_answer import POLL_S, STEP_POLL_S

    at = AppTest.from_function(_page, default_timeout=60)
    at.run()
    assert not at.exception, at.exception
    assert [every for _, every in polls] == [POLL_S]   # the page opened: the answer polls every second
    slider = at.slider(key="trim_input_pct")   # a step's run redraws the fragment alone, not the sidebar
    for pct in (5, 10):
        slider.set_value(pct).run()
        assert not at.exception, at.exception
        assert f"input trimmed {pct}%" in " ".join(c.value for c in at.caption)
    keys = [key for key, _ in polls]
    assert len(polls) == 3 and len(set(keys)) == 3, polls   # each step's poll on a clock of its own
    assert [every for _, every in polls[1:]] == [STEP_POLL_S, STEP_POLL_S]
    assert STEP_POLL_S > POLL_S
    at.run()   # a full run again (the answer landed, or the user switched pages): back at POLL_S
    assert polls[-1][1] == POLL_S
