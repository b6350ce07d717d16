"""A what-if step reruns the page's live fragments, and a run cut short never drops one from them (issue 37).

A slider step that arrives while a fragment draws cuts that run short (Streamlit stops it at its next element).
The record of live fragments was emptied for the fragment before it drew and filled after: cut in between, the
headline was no longer "live", the next step reran every section but it, and its what-if line stayed a move behind
(the browser test ``tests/e2e/test_whatif_moves.py`` moves every lever; this one cuts the run on purpose).
"""
from __future__ import annotations

from streamlit.testing.v1 import AppTest


def _page() -> None:
    import streamlit as st

    from components import sidebar

    if "_started" not in st.session_state:   # as the last finished run left it: the headline is live
        st.session_state["_started"] = True
        st.session_state[sidebar._LIVE] = {sidebar.WHATIF_FRAGMENT}
        st.session_state[sidebar._DRAFT] = None

    def headline() -> bool:
        st.caption("The what-if: input trimmed 5%.")
        if st.session_state.get("cut", False):
            raise RuntimeError("cut short by the next step")   # what a preempting rerun does to the run
        return True

    sidebar.whatif_fragment(headline)


def test_a_headline_cut_short_is_still_rerun_by_the_next_step() -> None:
    from components import sidebar

    at = AppTest.from_function(_page, default_timeout=60)
    at.run()
    assert at.session_state[sidebar._LIVE] == {sidebar.WHATIF_FRAGMENT}
    at.session_state["cut"] = True
    at.run()
    # the run was cut inside the headline: it stays among the fragments a step reruns
    assert sidebar.WHATIF_FRAGMENT in at.session_state[sidebar._LIVE]


def test_a_full_run_cut_short_leaves_the_next_step_to_rerun_the_page() -> None:
    # a full run publishes the live fragments only once the page has drawn them all; cut short, none is known
    # and the next step reruns the whole page (slower, never stale)
    from components import sidebar

    def page() -> None:
        import streamlit as st

        from components import sidebar as sb

        st.session_state[sb._LIVE] = None
        st.session_state[sb._DRAFT] = set()
        sb.whatif_fragment(lambda: True)
        if not st.session_state.get("cut", False):
            sb.publish_live()

    at = AppTest.from_function(page, default_timeout=60)
    at.run()
    assert at.session_state[sidebar._LIVE] == {sidebar.WHATIF_FRAGMENT}
    at.session_state["cut"] = True
    at.run()
    assert at.session_state[sidebar._LIVE] is None


def test_a_whatif_step_holds_the_sizings_back_while_it_draws_and_not_after_a_cut() -> None:
    """The headline's sizings step aside between replays while a what-if fragment draws (``work_pool.DRAWS``); a
    run cut short lets them go on, or every sizing would pause at its bound for the rest of the server's life."""
    from components.work_pool import DRAWS

    def page() -> None:
        import streamlit as st

        from components import sidebar
        from components.work_pool import DRAWS

        def headline() -> bool:
            st.session_state["held"] = DRAWS.in_progress
            if st.session_state.get("cut", False):
                raise RuntimeError("cut short by the next step")
            return True

        sidebar.whatif_fragment(headline)

    at = AppTest.from_function(page, default_timeout=60)
    at.run()
    assert at.session_state["held"] == 1 and DRAWS.in_progress == 0
    at.session_state["cut"] = True
    at.run()
    assert at.session_state["held"] == 1 and DRAWS.in_progress == 0
