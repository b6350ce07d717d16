"""The sidebar keeps the user's deployment and SLOs when the browser re-creates its widgets.

A browser re-creates a widget it had dropped from its page (its state went with it) from the message of the last
full run: at the value that message carries (Streamlit's ``set_value``), or else at the widget's own default, the
first option of a select box and the minimum of a number input. It then sends that value back with the next
interaction as if the user had chosen it. In a browser test after other tests (a loaded machine) the Capacity page
came back with Llama-3.1-8B on A100 SXM4 40GB, TTFT SLO 10 ms and TPOT SLO 1 ms, none of them chosen, its headline
"no fleet size serves ...". Here the browser's side is played from the run's messages, without timing.
"""
from __future__ import annotations

from typing import Any

from streamlit.testing.v1 import AppTest

from tests.app.dashboard import open_app

# The sidebar's widgets a browser re-creates, by kind (the sliders and the data radio behave alike: any keyed
# widget the sidebar draws).
SELECTS = ("model", "gpu", "precision", "kv_precision", "tp", "serving_engine", "speculative")
NUMBERS = ("gpu_hour_usd", "ttft_slo_ms", "tpot_slo_ms", "long_input", "long_output", "short_output")
SLIDERS = ("trim_input_pct", "trim_output_pct", "cache_hit_pct", "traffic")


def _recreated(widget: Any) -> object:
    """The value a browser widget shows when created afresh from this run's message."""
    proto = widget.proto
    if widget.type == "selectbox":
        label = proto.raw_value if proto.set_value else proto.options[proto.default]
        return widget.options.index(label)        # as an index into the options, which the test maps back
    if widget.type == "number_input":
        return proto.value if proto.set_value else proto.default
    return list(proto.value if proto.set_value else proto.default)   # a slider: its (single) handle


def _sidebar(at: AppTest) -> dict[str, object]:
    values: dict[str, object] = {key: at.selectbox(key=key).value for key in SELECTS}
    values |= {key: at.number_input(key=key).value for key in NUMBERS}
    values |= {key: at.slider(key=key).value for key in SLIDERS}
    return values


def test_a_browser_that_recreates_the_sidebar_widgets_keeps_the_users_deployment_and_slos() -> None:
    from shapeviz.physics import get_gpu, get_model, list_gpus, list_models

    at = open_app()
    # the user's choices: none of them a widget's first option or minimum
    at.selectbox(key="model").set_value(list_models()[-1]).run()
    at.selectbox(key="gpu").set_value(list_gpus()[-1]).run()
    at.number_input(key="ttft_slo_ms").set_value(2000).run()
    at.number_input(key="tpot_slo_ms").set_value(40).run()
    at.number_input(key="long_input").set_value(8192).run()
    at.slider(key="cache_hit_pct").set_value(20).run()
    at.run()     # a full run with nothing in the sidebar changed (a poll, another page's click)
    assert not at.exception, at.exception
    chosen = _sidebar(at)
    assert chosen["model"] == list_models()[-1] and chosen["ttft_slo_ms"] == 2000
    assert chosen["gpu_hour_usd"] == float(get_gpu(list_gpus()[-1]).usd_per_gpu_hour or 2.5)

    # the browser re-creates every sidebar widget from the last run's message...
    shown = {key: _recreated(at.selectbox(key=key)) for key in SELECTS}
    shown |= {key: _recreated(at.number_input(key=key)) for key in NUMBERS}
    shown |= {key: _recreated(at.slider(key=key)) for key in SLIDERS}
    # ...and they show what the user chose, not the first options and minimums
    assert {key: at.selectbox(key=key).options[shown[key]] for key in SELECTS} == {
        key: at.selectbox(key=key).options[at.selectbox(key=key).index] for key in SELECTS}
    assert {key: shown[key] for key in NUMBERS} == {key: chosen[key] for key in NUMBERS}
    assert {key: shown[key] for key in SLIDERS} == {key: [chosen[key]] for key in SLIDERS}

    # the next interaction sends what the browser shows: the deployment, the SLOs and the price stay the user's
    by_label = {get_model(m).name: m for m in list_models()} | {get_gpu(g).name: g for g in list_gpus()}
    for key in ("model", "gpu"):
        widget = at.selectbox(key=key)
        widget.set_value(by_label[widget.options[shown[key]]])
    for key in NUMBERS:
        at.number_input(key=key).set_value(shown[key])
    for key in SLIDERS:
        at.slider(key=key).set_value(shown[key][0])
    at.run()
    assert not at.exception, at.exception
    assert _sidebar(at) == chosen
    # and the copy kept for a dropped state is the user's too
    from components import sidebar

    kept = at.session_state[sidebar._VALUES]
    assert {key: kept[key] for key in chosen} == chosen
