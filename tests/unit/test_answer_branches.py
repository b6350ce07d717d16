"""Branches of the answer no test took before: no fleet meeting, the window the one-fewer proof is replayed on and
the figures it shows, multi-class autoscaling, and design's default search (every family, not the shared pool
alone).

The sizing search's branches are driven with a stand-in replay (``_Search.run``: whether ``k`` replicas meet, on
the whole window or on the hardest stretches, is given), so each branch is reached in milliseconds; the replays
themselves are tested on the real traces in ``test_sizing.py``.
"""
from __future__ import annotations

import re
from typing import Any

import numpy as np
import pandas as pd
import pytest

from shapeviz.fleet import sizing
from shapeviz.fleet.autoscale import Policy, traffic_windows
from shapeviz.fleet.design import design_fleet
from shapeviz.physics import default_deployment
from shapeviz.serving.products import SloClass, parse_slo, resolve_classes
from shapeviz.workload import synth


@pytest.fixture(scope="module")
def frame() -> pd.DataFrame:
    return synth.generate(300, seed=0, with_hashes=False)


# classes every product of the demo can reach on the default deployment: the stand-in replays alone decide
LOOSE = (600_000.0, 5_000.0)


def _replays(monkeypatch, meets_from: dict[str, int] | None, stretches: bool) -> list[tuple[int, str]]:
    """Stand in for the replays: ``k`` replicas meet from ``meets_from[on]`` on (never when None), and a replay's
    TTFT p90 is 100·k ms on the window, 100·k + 1 ms on the stretches (so a figure says where it was replayed)."""
    calls: list[tuple[int, str]] = []

    def run(self, k: int, on: str = "window") -> sizing.Trial:
        calls.append((k, on))
        meets = meets_from is not None and k >= meets_from[on]
        p90 = 100.0 * k + (0.0 if on == "window" else 1.0)
        products = {"all": {"requests": 300 if on == "window" else 40, "ttft_p90_ms": p90, "tpot_p90_ms": 20.0,
                            "meets": meets}}
        self.cache[(k, on)] = sizing.Trial(k, on, meets, products, {"p50": p90 / 2, "p90": p90},
                                           {"p50": 10.0, "p90": 20.0}, 0.5 if meets else 2.0, 0.0)
        return self.cache[(k, on)]

    monkeypatch.setattr(sizing._Search, "run", run)
    def pick_stretches(self, k: int) -> bool:
        self.stretch_req = self.req if stretches else None   # the stretches "picked": the whole window stands in
        return stretches

    monkeypatch.setattr(sizing._Search, "pick_stretches", pick_stretches)
    return calls


def test_one_fewer_is_replayed_on_the_whole_window_and_shows_its_figures(monkeypatch, frame):
    """The stretches pass 5 replicas, the window needs 6: the proof is 5 replayed on the window (it misses), never
    the stretches' replay of 5 (which passed)."""
    _replays(monkeypatch, {"stretches": 5, "window": 6}, stretches=True)
    dep = default_deployment()
    answer = sizing.size_fleet(frame, dep, sizing.pair_classes(frame, *LOOSE), estimate=4)
    assert answer.replicas == 6 and answer.meets
    fewer = answer.one_fewer
    assert (fewer.replicas, fewer.on, fewer.meets) == (5, "window", False)
    proof = answer.to_dict()["one_fewer"]
    assert proof["ttft_ms"]["p90"] == 500.0 and proof["products"]["all"]["requests"] == 300
    assert proof["verdict"] == "misses: all"
    assert "5 replica(s) miss (misses: all: TTFT p90 500 ms" in sizing.sizing_note(answer)


def test_when_no_fleet_meets_the_answer_says_so_and_stops_where_more_replicas_stop_helping(monkeypatch, frame):
    calls = _replays(monkeypatch, None, stretches=False)
    dep = default_deployment()
    answer = sizing.size_fleet(frame, dep, sizing.pair_classes(frame, *LOOSE), estimate=1)
    # grown 1, 2, 3, 5, 8, 12: past 2·1 + 8 replicas and no better than the last count, the search gives up
    assert sorted({k for k, _ in calls}) == [1, 2, 3, 5, 8, 12]
    assert answer.method == "simulated" and answer.replicas == 12 and answer.meets is False
    assert answer.answer is not None and answer.answer.meets is False and answer.one_fewer is None
    assert any(note.startswith("no fleet size meets all: 12 replicas still miss") for note in answer.notes)
    assert sizing.sizing_note(answer).startswith("fleet size simulated: no size meets every class up to 12 on ")
    doc = answer.to_dict()
    assert doc["meets"] is False and doc["one_fewer"] is None and doc["answer"]["verdict"] == "misses: all"


def test_design_searches_every_family_by_default(frame):
    """`design` and the page call the designer with its default families: a fleet of a pool per product and the
    split and mixed pools are offered beside the shared pool (a default cut to the shared pool alone offered one)."""
    f = synth.scenario("shared_pool", 200, seed=3)
    start = f["timestamp"].min()
    f["timestamp"] = start + (f["timestamp"] - start) / 144.0
    classes = resolve_classes(f, {"rag-search": (3000.0, 60.0)})
    doc: dict[str, Any] = design_fleet(f, classes, gpus=["h100-sxm"], prices={"h100-sxm": 2.79},
                                       model="llama-3.1-70b", search_requests=50, top=10)
    assert doc["search"]["families"] == ["shared", "per_product", "per_corner", "split", "mix"]
    offered = {d["family"] for d in doc["designs"]}
    assert {"shared_fcfs", "per_product"} <= offered and offered & {"split", "mix"}, offered


def _two_products() -> pd.DataFrame:
    """20 minutes at 5 req/s of lognormal chat; in the first 5 minutes half the requests are an agent's."""
    rng = np.random.default_rng(0)
    n = 6000
    t = np.sort(rng.uniform(0, 1200, n))
    return pd.DataFrame({
        "timestamp": pd.Timestamp("2025-01-01", tz="UTC") + pd.to_timedelta(t, unit="s"),
        "input_tokens": np.exp(rng.normal(np.log(1500), 0.8, n)).astype(np.int32).clip(10, 16_000),
        "output_tokens": np.exp(rng.normal(np.log(200), 0.8, n)).astype(np.int32).clip(2, 2_000),
        "product": pd.Categorical(np.where((t < 300) & (np.arange(n) % 2 == 0), "agent", "chat"))})


def test_autoscaling_sizes_a_window_for_the_strictest_class_it_holds_and_only_that_window():
    frame = _two_products()
    dep = default_deployment()
    chat = SloClass("chat", 5_000.0, 100.0)
    strict = traffic_windows(frame, dep, window_s=300, classes={"agent": SloClass("agent", 3_000.0, 35.0),
                                                                "chat": chat})
    loose = traffic_windows(frame, dep, window_s=300, classes={"agent": SloClass("agent", 5_000.0, 100.0),
                                                               "chat": chat})
    # the agent's window is sized for the agent's class (TPOT 35 ms binds: one replica more); the chat-only
    # windows after it for chat's, as if the agent had no class of its own
    assert strict.window_ttft_ms.tolist() == [3_000.0, 5_000.0, 5_000.0, 5_000.0]
    assert strict.window_tpot_ms.tolist() == [35.0, 100.0, 100.0, 100.0]
    assert strict.window_need.tolist() == [3, 2, 2, 2]
    assert loose.window_need.tolist() == [2, 2, 2, 2]
    assert strict.slo_rps[0] < loose.slo_rps[0] and strict.slo_rps[1:].tolist() == loose.slo_rps[1:].tolist()
    assert any(note.startswith("2 SLO classes: each window is sized for the strictest") for note in strict.notes)


@pytest.mark.parametrize("accepted, refused, says", [
    (dict(cooloff_s=0.0), dict(cooloff_s=-0.5), "cool-off -0.5 s must be ≥ 0"),
    (dict(name="utilization", target_utilization=1.0), dict(name="utilization", target_utilization=1.01),
     "target utilisation 1.01 must be a fraction in"),
    (dict(name="utilization", target_utilization=0.01), dict(name="utilization", target_utilization=0.0),
     "target utilisation 0.0 must be a fraction in"),
    (dict(min_replicas=1), dict(min_replicas=0), "minimum replicas 0 must be ≥ 1"),
    (dict(min_replicas=2, max_replicas=2), dict(min_replicas=2, max_replicas=1), "max replicas 1 is below the minimum 2"),
    (dict(name="queue", queue_up=2.0, queue_down=0.0), dict(name="queue", queue_up=2.0, queue_down=2.0),
     "queue thresholds must satisfy"),
])
def test_an_autoscaling_setting_at_its_edge_is_taken_and_one_past_it_refused(accepted, refused, says):
    assert Policy(**accepted).to_dict()["name"] == accepted.get("name", "slo")
    with pytest.raises(ValueError, match=re.escape(says)):
        Policy(**refused)


@pytest.mark.parametrize("pair", ["chat=500:-5", "chat=500:0", "chat=-1:50", "chat=500:inf", "chat=500", "=500:50",
                                  "chat500:50", "chat=500:nan", "chat=a:50"])
def test_a_class_that_is_not_two_positive_targets_is_refused_with_the_form_it_needs(pair):
    with pytest.raises(ValueError, match=re.escape(f"--slo expects PRODUCT=TTFT_MS:TPOT_MS (e.g. --slo "
                                                   f"doc-search=1200:60), got {pair!r}")):
        parse_slo([pair])
    assert parse_slo(["chat=500:5", "*=1:1"]) == {"chat": (500.0, 5.0), "*": (1.0, 1.0)}


def _answered(meets: bool, unreachable: list[str], answer_meets: bool = True) -> sizing.Sizing:
    """A simulated answer of 4 replicas: whether it meets every class, and the products no fleet size serves."""
    p = {"all": 100.0}
    answer = sizing.Trial(4, "window", answer_meets, {}, p, p, 0.5 if answer_meets else 2.0, 0.0)
    return sizing.Sizing("simulated", 4, meets, 3, {}, answer=answer,
                         unreachable=[{"product": name} for name in unreachable])


def test_the_headline_heading_names_the_products_no_fleet_size_serves() -> None:
    # the Capacity page's heading above its metrics never claims every SLO over a line that says a product is left
    # out: it names each product no size serves (the demo's swe-agent), and says when no size meets the rest either
    assert sizing.answer_heading(_answered(True, [])) == "GPUs and cost that meet every product's SLO"
    assert sizing.answer_heading(_answered(False, ["swe-agent"])) == (
        "GPUs and cost that meet every product's SLO but swe-agent (no fleet size serves it)")
    assert sizing.answer_heading(_answered(False, ["swe-agent", "batch"])) == (
        "GPUs and cost that meet every product's SLO but batch, swe-agent (no fleet size serves them)")
    assert sizing.answer_heading(_answered(False, ["swe-agent"], answer_meets=False)) == (
        "GPUs and cost: no fleet size meets every product's SLO")


def test_the_logs_products_on_other_models_are_named_with_their_model(frame: pd.DataFrame) -> None:
    # the demo's products name four models: plan, summary and the page plan the most requested one and say which
    # products run on another, each with its model (not one model for the whole log without a word)
    model, source = sizing.model_of_log(frame)
    assert model == "llama-3.1-70b"
    assert source.endswith("products on other models, planned here on llama-3.1-70b (plan each on its own model "
                           "for its pool): code-assistant (qwen3-32b), ide-autocomplete (llama-3.1-8b), "
                           "swe-agent (kimi-k2)"), source


def test_the_sidebar_pair_is_every_products_class_but_those_the_user_set(frame: pd.DataFrame) -> None:
    # moving the sidebar's TTFT/TPOT pair moves every product's class (not each corner's published default), and a
    # product's own class (--slo, the page's table) keeps its own targets; each says where it comes from
    classes = sizing.pair_classes(frame, 777.0, 77.0, {"swe-agent": (5000.0, 100.0)})
    assert set(classes) == set(frame["product"].astype(str))
    for product, cls in classes.items():
        own = product == "swe-agent"
        assert (cls.ttft_ms, cls.tpot_ms) == ((5000.0, 100.0) if own else (777.0, 77.0)), cls
        assert cls.source == ("set by user (--slo)" if own else "the default class (--ttft-slo-ms/--tpot-slo-ms)")


def test_another_fleet_is_said_in_the_answers_terms() -> None:
    # hold-at-peak, the levers and the routers say their fleet as the headline does: replicas × TP, GPUs, how it
    # stands to the answer, and its cost at the headline's price
    from shapeviz.fleet.words import relative_to_answer

    assert relative_to_answer(5, 4, 4, 2.5) == "5 × TP4 = 20 GPUs, the answer + 1, $50/h"
    assert relative_to_answer(3, 4, 4) == "3 × TP4 = 12 GPUs, the answer − 1"
    assert relative_to_answer(4, 4, 2) == "4 × TP2 = 8 GPUs, the answer itself"
    assert relative_to_answer(4, None, 2) == "4 × TP2 = 8 GPUs"


def test_the_window_sized_on_says_where_it_starts_and_ends(frame: pd.DataFrame) -> None:
    # `plan --json`'s sized_on names the busiest window in seconds of the log's clock (growth replays that span);
    # the demo's 300 requests over about a day, judged on its busiest minute
    req, on = sizing.slo_window(frame, default_deployment(), slo_window_s=60)
    assert on["end_s"] - on["start_s"] == pytest.approx(60.0) and not on["whole_log"]
    assert on["requests"] == len(req) and 0 < len(req) < len(frame)
    assert float(np.max(req.arrival_s)) <= on["end_s"] - on["start_s"]


def test_a_log_without_timestamps_is_replayed_with_the_block_size_given(frame: pd.DataFrame) -> None:
    # a log without a clock is replayed at --rate (Poisson) on its first requests: --block-size still sets the
    # prompt blocks its sessions' caches are counted in, as it does for a log with timestamps
    untimed = frame.drop(columns=["timestamp"])
    for block_size in (16, 64):
        req, on = sizing.slo_window(untimed, default_deployment(), rate_rps=5.0, block_size=block_size)
        assert on["arrivals"] == "poisson" and req.blocks is not None
        assert req.blocks.block_size == block_size, req.blocks.block_size_source


def test_a_window_replays_verdict_gives_the_median_and_p90_of_its_requests(frame: pd.DataFrame) -> None:
    # the answer's and the one-fewer proof's replay: their TTFT and TPOT p50/p90 over every request of the window
    classes = sizing.pair_classes(frame, 1000.0, 50.0)
    replay = pd.DataFrame({"product": ["support-chat"] * 10, "arrival_s": np.arange(10.0),
                           "ttft_ms": np.arange(1.0, 11.0) * 100, "tpot_ms": np.arange(1.0, 11.0) * 10,
                           "e2e_ms": np.full(10, 1000.0)})
    trial = sizing.window_trial(3, replay, classes)
    assert trial.ttft_ms["p50"] == pytest.approx(550.0, rel=0.1) and trial.ttft_ms["p90"] >= 900.0
    assert trial.tpot_ms["p50"] == pytest.approx(55.0, rel=0.1) and trial.tpot_ms["p90"] >= 90.0
    # and its verdict: the product's TPOT p90 (~91 ms) misses its 50 ms class, so the replay does not meet
    assert trial.products["support-chat"]["meets"] is False and not trial.meets


def test_an_answers_json_says_how_it_was_found() -> None:
    # plan --json, config and the memo carry the answer's method block: simulated or an estimate, and its label
    doc = _answered(True, []).to_dict()
    assert doc["method"] == "simulated" and doc["label"].startswith("simulated") and doc["replicas"] == 4
