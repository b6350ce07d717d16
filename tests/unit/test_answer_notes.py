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
