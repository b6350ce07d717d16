"""The Capacity headline's parts on a stand-in sizing: the sentence, the metrics' plans and the lever's line.

``test_fleet_answer_app.py`` checks them on the demo's real replays, a whole page that waits for its sizings. These
check the same words and figures on a sizing given by hand (6 replicas where the estimate said 4, one product out of
reach, a prefix-aware router that needs 5), in about a second: the mutation check names them first, so a bug in one
of these parts is caught without replaying a log.
"""
from __future__ import annotations

import re
from concurrent.futures import Future

from streamlit.testing.v1 import AppTest

from components.fleet_answer import answer_line, sized_plans
from shapeviz.fleet import sizing
from shapeviz.fleet.sizing import lever_of, router_lever_line
from shapeviz.physics.steps import Deployment
from shapeviz.serving.planner import Workload, plan
from shapeviz.workload.synth import generate

TP = 4
UNREACHABLE = {"product": "swe-agent", "why": "prefill alone takes 1.4 s against its 1 s TTFT class",
               "levers": "trim its prompts or give it its own class"}


def _sizing(replicas: int, estimate: int, unreachable: bool = True) -> sizing.Sizing:
    """A replayed answer of ``replicas`` (the estimate said ``estimate``), with one product no size serves."""
    trial = sizing.Trial(replicas, "window", True, {"chat": {"requests": 300, "meets": True}},
                         {"p50": 200.0, "p90": 300.0}, {"p50": 20.0, "p90": 30.0}, 0.5, 0.1)
    return sizing.Sizing("simulated", replicas, not unreachable, estimate, {"window": "the busiest hour"}, trial,
                         None, [trial], unreachable=[UNREACHABLE] if unreachable else [])


def _done(value: object) -> Future:
    future: Future = Future()
    future.set_result(value)
    return future


def _shown(markdown: str) -> str:
    """What the browser shows of markdown whose log-derived parts are escaped (backslash escapes resolved)."""
    return re.sub(r"\\([!-/:-@\[-`{-~])", r"\1", markdown)


def test_the_answer_line_gives_the_replayed_fleet_against_the_estimate_and_names_the_product_out_of_reach() -> None:
    line = _shown(answer_line(_sizing(6, 4), TP))
    assert "**Simulated: 6 × TP4 = 24 GPUs** meet every other product's p90 class on the busiest hour" in line
    assert "(the estimate said 4 × TP4 = 16 GPUs)" in line
    assert ("**No fleet size serves swe-agent** on this deployment: prefill alone takes 1.4 s against its 1 s TTFT "
            "class. Levers: trim its prompts or give it its own class.") in line


def test_the_metrics_show_the_replayed_fleet_once_both_sizings_are_done() -> None:
    dep = Deployment("llama-3.1-70b", "h100", "fp8", None, TP)
    before = plan(Workload.from_frame(generate(2_000, seed=0)), dep)
    after = plan(Workload.from_frame(generate(2_000, seed=1)), dep)
    pending: Future = Future()
    assert sized_plans((_done(_sizing(6, 4)), pending), before, after, TP) is None   # the estimate stands
    sized = sized_plans((_done(_sizing(6, 4)), _done(_sizing(3, 2))), before, after, TP)
    assert sized is not None, "both sizings are done: the metrics must show their fleets, not the estimate's"
    sized_before, sized_after = sized
    # the first future is the answer (after the what-if), the second today's fleet (before it)
    assert (sized_after.replicas, sized_after.gpus["colocated"]) == (6, 24)
    assert (sized_before.replicas, sized_before.gpus["colocated"]) == (3, 12)
    assert sized_after.provenance["gpus"] == "simulated"


def _answer_page(futures: tuple, dep: object, lever: tuple) -> None:
    from components import fleet_answer

    fleet_answer.render_answer(futures, dep, lever=lever, simulated=True)


def test_the_answer_shows_its_simulated_badge_and_the_routers_lever_below_it() -> None:
    dep = Deployment("llama-3.1-70b", "h100", "fp8", None, TP)
    answer, routed = _sizing(6, 4, unreachable=False), _sizing(5, 4, unreachable=False)
    at = AppTest.from_function(_answer_page, args=((_done(answer), _done(answer)), dep, ("prefix", _done(routed))),
                               default_timeout=30)
    at.run()
    assert not at.exception, at.exception
    assert "**Simulated: 6 × TP4 = 24 GPUs** meet every product's p90 class" in _shown(at.markdown[0].value)
    assert "replaying the log" not in " ".join(c.value for c in at.caption)
    # the line plan prints for the same lever: prefix-aware routing needs 5 replicas, 4 GPUs fewer
    lever = lever_of(answer, routed, "prefix", TP)
    assert lever["gpus_saved"] == 4
    captions = [_shown(c.value) for c in at.caption]
    assert f"{router_lever_line(lever, TP)}: the Routers section below compares them." in captions, captions


def test_the_headlines_sizing_is_asked_with_the_pages_classes(monkeypatch) -> None:
    # a product's own class (set in the Capacity page's table) reaches the one sizing function, not only the table
    from components import fleet_answer

    asked: dict[str, object] = {}

    def fleet_answer_stand_in(w, dep, frame, **settings):   # noqa: ANN001, ANN003: the sizing function's call
        asked.update(settings)
        return None, "the sizing", None, None

    monkeypatch.setattr(fleet_answer, "fleet_answer", fleet_answer_stand_in)
    dep = Deployment("llama-3.1-70b", "h100", "fp8", None, TP)
    own = {"ide-autocomplete": sizing.SloClass("ide-autocomplete", 300.0, 50.0, 90, "latency", "set by user")}
    future = fleet_answer.submit(("test-own-classes", dep), None, None, dep, None, 1000.0, 50.0, 2.0, own)
    assert future.result(timeout=60) == "the sizing"
    assert asked["classes"] == own and asked["ttft_slo_ms"] == 1000.0
