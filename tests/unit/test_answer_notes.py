"""The notes beside a replayed answer speak of the answer's fleet, not of the analytic estimate it replaced.

The demo's estimate is 4 replicas "sized by the TTFT p90 SLO, not by throughput: 1 replica(s) would carry this load
..., and the other 3 keep the TTFT p90 within its SLO"; its replayed answer is 1 replica. Printed beside that answer
(plan, the memo, the page's notes), the estimate's sentence told a capacity meeting of 3 replicas it was not buying.
"""
from __future__ import annotations

from shapeviz.fleet import sizing
from shapeviz.physics import default_deployment
from shapeviz.serving.planner import LATENCY_SIZED, Workload, plan
from shapeviz.workload.synth import generate


def _answer(replicas: int, estimate: int) -> sizing.Sizing:
    trial = sizing.Trial(replicas, "window", True, {}, {"p50": 200.0, "p90": 300.0}, {"p50": 20.0, "p90": 30.0},
                         0.5, 0.1)
    return sizing.Sizing("simulated", replicas, True, estimate, {"window": "the whole log"}, trial, None, [trial])


def test_a_replayed_answer_drops_the_estimates_count_of_replicas_kept_for_latency() -> None:
    dep = default_deployment()
    estimate = plan(Workload.from_frame(generate(20_000, seed=0)), dep)
    said = [n for n in estimate.notes if n.startswith(LATENCY_SIZED)]
    assert estimate.replicas > 1 and len(said) == 1 and f"the other {estimate.replicas - 1} keep" in said[0]
    answered = sizing.sized_plan(estimate, _answer(1, estimate.replicas), dep.tp)
    assert answered.replicas == 1
    assert not any(f"the other {estimate.replicas - 1} keep" in n for n in answered.notes)
    assert any(n.startswith("fleet size") for n in answered.notes)   # the answer's own sentence replaces it
    # an estimate the replay did not replace keeps its reason
    kept = sizing.sized_plan(estimate, sizing.Sizing("analytic", estimate.replicas, True, estimate.replicas,
                                                     {"window": "the whole log"}), dep.tp)
    assert said[0] in kept.notes


def test_a_replayed_answer_at_low_pressure_says_it_is_sized_by_latency_in_its_own_replicas() -> None:
    # the 1M-request day: 75 replicas at 8% / 22% pressure on a log without bursts; the estimate's sentence (92
    # replicas, "the other 68 keep") is dropped, so the answer must say itself why its GPUs are that idle
    dep = default_deployment()
    estimate = plan(Workload.from_frame(generate(20_000, seed=0)), dep)
    k0 = estimate.replicas
    answered = sizing.sized_plan(estimate, _answer(3 * k0, k0), dep.tp)
    decode = estimate.decode.utilization / 3
    why = [n for n in answered.notes if "not by throughput" in n]
    assert len(why) == 1 and f"{decode:.0%} decode pressure" in why[0]
    carry = int(why[0].split("about ")[1].split(" replica")[0])
    assert 1 <= carry < 3 * k0   # fewer replicas would carry the load: latency, not throughput, set the answer


def test_a_latency_sized_answer_names_what_one_fewer_misses_and_a_class_close_above_its_floor() -> None:
    # the 1M-request day on TP16 set by hand: doc-search's p90 prefill alone takes 997 ms of its 1,000 ms class, and
    # the search bought 177 replicas at 1% / 5% pressure. "one replica fewer misses a class" told a meeting nothing
    # of which class, nor that it sits 3 ms above a floor no fleet lowers
    def fewer(ttft_ms: float) -> sizing.Trial:
        slo = {"ttft_ms": 1000.0, "tpot_ms": 50.0, "percentile": 90}
        products = {"doc-search": {"ttft_p90_ms": ttft_ms, "tpot_p90_ms": 30.0, "meets": False, "slo": slo},
                    "chat": {"ttft_p90_ms": 300.0, "tpot_p90_ms": 30.0, "meets": True, "slo": slo}}
        return sizing.Trial(176, "window", False, products, {"p50": 400.0, "p90": 1012.0},
                            {"p50": 20.0, "p90": 30.0}, 1.01, 0.1)

    def reason(floor_ms: float) -> str:
        answer = _answer(177, 8)
        answer.one_fewer = fewer(1012.0)
        answer.sized_on["ttft_floor_ms"] = {"doc-search": floor_ms, "chat": 120.0}
        why = sizing.pressure_reason(answer, 0.2, 0.3)
        assert why is not None and "not by throughput" in why
        return why

    near = reason(997.0)
    assert "176 replica(s) miss doc-search (TTFT p90 1,012 ms against 1,000 ms)" in near
    assert "doc-search's p90 prefill alone on an idle replica takes 997 ms of its 1,000 ms TTFT class" in near
    assert "chat" not in near   # met on one fewer: not what binds
    far = reason(400.0)   # a floor far under the class: queueing, not the floor, is what the fleet buys down
    assert "176 replica(s) miss doc-search" in far and "prefill alone" not in far


def test_a_miss_by_less_than_a_millisecond_reads_as_a_miss() -> None:
    slo = {"ttft_ms": 1000.0, "tpot_ms": 50.0, "percentile": 90}
    trial = sizing.Trial(176, "window", False, {"doc-search": {"ttft_p90_ms": 1000.4, "tpot_p90_ms": 21.0,
                                                               "meets": False, "slo": slo}},
                         {"p50": 80.0, "p90": 622.0}, {"p50": 20.0, "p90": 21.0}, 1.0, 0.1)
    assert sizing.misses_words(trial) == "doc-search (TTFT p90 1,000.4 ms against 1,000 ms)"


def test_a_sizing_keeps_each_products_floor_and_the_reason_names_the_class_close_above_it() -> None:
    # ten minutes of chat beside 20k-token RAG prompts on TP8: a RAG prompt alone takes 1,188 ms, its class 1,195 ms
    from dataclasses import replace

    import numpy as np
    import pandas as pd

    rng = np.random.default_rng(0)
    stamps = pd.Timestamp("2026-01-01", tz="UTC") + pd.to_timedelta(np.sort(rng.uniform(0, 600, 960)), "s")
    product = rng.permutation(["chat"] * 840 + ["rag"] * 120)
    frame = pd.DataFrame({"timestamp": stamps, "product": product,
                          "input_tokens": np.where(product == "rag", 20_000, rng.integers(200, 2_000, 960)),
                          "output_tokens": rng.integers(50, 400, 960)})
    fits, _, _ = sizing.default_deployment_for(None)
    dep = replace(fits, tp=8)
    _, answer, _, _ = sizing.fleet_answer(Workload.from_frame(frame), dep, frame,
                                          classes=sizing.pair_classes(frame, 1195.0, 50.0))
    floors = answer.sized_on["ttft_floor_ms"]
    assert 1180 < floors["rag"] < 1195 and floors["chat"] < 200
    # the same floor "no size serves it" compares with a class under it
    (rag,) = sizing.unreachable_classes(sizing.slo_window(frame, dep)[0], dep, sizing.pair_classes(frame, 1000.0, 50.0))
    assert rag["alone_ms"] == floors["rag"]
    why = sizing.pressure_reason(answer, 0.05, 0.05)   # as if its GPUs idled: the reason names what binds
    assert answer.meets and why is not None
    assert f"{answer.replicas - 1} replica(s) miss rag (TTFT p90" in why
    assert f"rag's p90 prefill alone on an idle replica takes {floors['rag']:,.0f} ms of its 1,195 ms TTFT class" in why
