"""shapeviz: the dashboard's entry point. Page config, navigation, the shared sidebar; nothing else."""
import streamlit as st

from components import data, sidebar


def main() -> None:
    st.set_page_config(page_title="shapeviz: LLM workload shape", page_icon=":material/scatter_plot:", layout="wide")
    navigation = st.navigation(
        [
            st.Page("pages/shape.py", title="Shape", icon=":material/scatter_plot:", default=True),
            st.Page("pages/clusters.py", title="Clusters", icon=":material/bubble_chart:"),
            st.Page("pages/capacity.py", title="Capacity what-if", icon=":material/speed:"),
            st.Page("pages/sessions.py", title="Sessions & prefix cache", icon=":material/forum:"),
            st.Page("pages/report.py", title="Report", icon=":material/description:"),
        ]
    )
    data.admit_session()   # at most data.MAX_SESSIONS visitors at once; one more is told to come back
    data.end_session_when_it_leaves()   # a session whose browser left is ended, and its freed memory offered back
    sidebar.render()
    try:
        navigation.run()
    except Exception:
        sidebar.steps_unless_drawn()   # a page that failed still shows the step sliders in their place
        raise
    sidebar.steps_unless_drawn()   # a page without a main what-if fragment: the step sliders drawn here, after it
    sidebar.publish_live()   # the page drew every fragment: a what-if step reruns the live ones alone


# Streamlit runs this file as ``__main__`` and leaves it there after the run; a process pool spawned later in the
# same process (a test's, or a Dask worker's) has each child import it again as ``__mp_main__``: the dashboard is no
# part of that child, and drawing it outside a script run would kill the child.
if __name__ == "__main__":
    main()
