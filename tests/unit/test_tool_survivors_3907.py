"""What mutmut's sample with seed 3907 changed and no test saw (tests/README.md lists each survivor and its verdict).

The sizing's own survivors are killed in ``test_sizing_stand_in.py`` (a real search on a stand-in replay); these
are the others: the plan a replayed answer rewrites, the page's comparison of deployments, and the growth path's
analytic months and refusal. Each runs in well under a second (analytic plans, stand-in sizings).
"""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from shapeviz.fleet import growth, sizing
from shapeviz.physics import default_deployment
from shapeviz.serving.compare import compare_deployments
from shapeviz.serving.planner import Workload, plan


def _frame(outputs: dict[str, tuple[int, int]]) -> pd.DataFrame:
    """An hour of requests, ``outputs[product] = (requests, output tokens of each)``, 500-token prompts."""
    products = [p for p, (n, _) in outputs.items() for _ in range(n)]
    out = [m for _, (n, m) in outputs.items() for _ in range(n)]
    rng = np.random.default_rng(0)
    return pd.DataFrame({
        "timestamp": pd.Timestamp("2025-01-01", tz="UTC") + pd.to_timedelta(np.sort(rng.random(len(out))) * 3600, "s"),
        "input_tokens": np.full(len(out), 500, dtype=np.int32), "output_tokens": np.asarray(out, dtype=np.int32),
        "product": pd.Categorical(products)})


def _answer(replicas: int, estimate: int) -> sizing.Sizing:
    """A replayed answer of ``replicas`` (its replay's p90s 300 and 30 ms), the estimate's ``estimate``."""
    trial = sizing.Trial(replicas, "window", True, {}, {"p50": 200.0, "p90": 300.0}, {"p50": 20.0, "p90": 30.0},
                         0.5, 0.1)
    return sizing.Sizing("simulated", replicas, True, estimate, {"window": "the whole log"}, trial, None, [trial])


def test_a_replayed_answer_rewrites_the_plans_fleet_and_spreads_each_phases_pressure_over_it():
    dep = default_deployment()
    planned = plan(Workload.from_frame(_frame({"chat": (600, 200)})), dep)
    k0 = planned.replicas
    sized = sizing.sized_plan(planned, _answer(2 * k0, k0), dep.tp)
    assert sized.replicas == 2 * k0 and sized.gpus["colocated"] == 2 * k0 * dep.tp
    assert (sized.ttft_ms.p90, sized.tpot_ms.p90) == (300.0, 30.0)
    # twice the replicas: each replica carries half the prefill and decode the estimate's did
    assert sized.prefill.utilization == pytest.approx(planned.prefill.utilization / 2)
    assert sized.decode.utilization == pytest.approx(planned.decode.utilization / 2)
    assert sized.cost["usd_per_hour"] == pytest.approx(2 * planned.cost["usd_per_hour"])


def test_the_deployments_compared_keep_the_estimates_gpus_beside_the_replayed_ones():
    w = Workload.from_frame(_frame({"chat": (600, 200)}))
    table = compare_deployments(w, "llama-3.1-70b", gpus=["h100-sxm"], precisions=["fp8"], tps=[4, 8])
    out = sizing.size_comparison(table, "llama-3.1-70b", lambda dep: _answer(3, 1), keep=2)
    replayed = out[out["method"] == "simulated"]
    assert len(replayed) == 2
    assert replayed["estimate_gpus"].tolist() == table.loc[replayed.index, "gpus"].tolist()
    assert replayed["gpus"].tolist() == (3 * replayed["tp"]).tolist()


def test_a_product_that_grows_faster_weighs_more_in_each_months_mix():
    # 90 chat requests of 100 output tokens, 10 code requests of 1,000; code doubles every month
    frame = _frame({"chat": (90, 100), "code": (10, 1_000)})
    result = growth.project(frame, default_deployment(), growth.Growth({"code": 1.0}, {}, 2), peak_rps=1.0)
    means = result.months["mean_output_tokens"].tolist()
    expected = [(90 * 100 + 10 * 2**m * 1_000) / (90 + 10 * 2**m) for m in range(3)]
    assert means == pytest.approx(expected, rel=1e-6)


def test_growth_from_a_fleet_of_no_replicas_is_refused_by_name():
    frame = _frame({"chat": (100, 100)})
    with pytest.raises(ValueError, match=r"^replicas today must be ≥ 1, got 0$"):
        growth.project(frame, default_deployment(), growth.Growth({"*": 0.1}, {}, 2), peak_rps=1.0, replicas_now=0)


def test_typed_tuples_read_back_from_the_disk_caches_plain_form_as_the_tuples_stored():
    # a bug of our own the tests missed (typed containers, item 3): a tuple field read back as a list is not equal
    # to what was computed ((c,) != [c]), so the page's cached analysis (ClusterResult.clusters, its mixed flags and
    # notes are tuples) would differ from the one computed
    from shapeviz.analyses.clusters import Cluster
    from shapeviz.plain import from_plain, to_plain

    clusters = tuple(Cluster(i, 10 * (i + 1), 0.5, 0.4, 100.0, 10.0, 90.0, 9.0, "chat", "prefill", 0.6, {"a": 1.0})
                     for i in range(2))
    for hint, value in ((tuple[Cluster, ...], clusters), (tuple[str, ...], ("one note", "another")),
                        (tuple[int, int], (2, 12))):
        frames: list = []
        back = from_plain(hint, to_plain(hint, value, frames), frames)
        assert type(back) is tuple and back == value


@pytest.mark.parametrize("hint, wrong", [(int, True), (int, 1.0), (float, "1.5"), (str, 3), (bool, 1)])
def test_a_stored_scalar_of_another_type_is_refused_not_converted(hint, wrong):
    # JSON's true is not the integer 1: a typed field holding the wrong scalar is a bad entry (deleted, recomputed),
    # never converted into a value nobody computed
    from shapeviz.plain import from_plain

    with pytest.raises(ValueError, match=rf"^not a stored {hint.__name__}: expected {hint.__name__}, got "
                                         rf"{type(wrong).__name__}$"):
        from_plain(hint, wrong, [])


def test_a_month_no_fleet_meets_shows_no_p90s_of_the_searchs_last_candidate(monkeypatch):
    # a bug of our own the tests missed (an unreachable growth month, item 3): the month is neither shown as a plan
    # nor priced, and its p90s are not the last candidate's either (they would read as that fleet's figures). Month
    # 1's search is a stand-in that ends, as on test_growth.py's real case, on 12 replicas that still miss.
    def trial(k: int, meets: bool, ttft: float) -> sizing.Trial:
        products = {"chat": {"requests": 100, "ttft_p90_ms": ttft, "tpot_p90_ms": 30.0, "meets": meets}}
        return sizing.Trial(k, "window", meets, products, {"p50": ttft / 2, "p90": ttft}, {"p50": 20.0, "p90": 30.0},
                            0.5 if meets else 3.0, 0.1)

    today = sizing.Sizing("simulated", 3, True, 3, {"window": "the whole log"}, trial(3, True, 400.0))
    last = sizing.Sizing("simulated", 12, False, 6, {"window": "the whole log"}, trial(12, False, 3_000.0))
    monkeypatch.setattr(growth, "size_fleet", lambda *args, **kwargs: last)
    frame = _frame({"chat": (100, 100)})
    months = growth.project(frame, default_deployment(), growth.Growth({"*": 1.0}, {}, 1), method="simulated",
                            today=today).months.to_dict(orient="records")
    assert (months[0]["replicas"], months[0]["ttft_p90_ms"], months[0]["tpot_p90_ms"]) == (3, 400.0, 30.0)
    assert months[1]["replicas"] is None and months[1]["usd_per_month"] is None
    assert "12 replicas still give TTFT p90 3,000 ms" in months[1]["unreachable"]
    assert pd.isna(months[1]["ttft_p90_ms"]) and pd.isna(months[1]["tpot_p90_ms"])


def test_every_setting_of_a_queue_policys_json_says_where_it_comes_from():
    from shapeviz.fleet.autoscale import Policy

    sources = Policy("queue", queue_down=1.0).to_dict()["sources"]
    assert set(sources) == {"cooloff_s", "min_replicas", "max_replicas", "initial_replicas", "scale_down_per_min",
                            "queue_up", "queue_down"}
    assert sources["queue_down"] == "set by user" and sources["queue_up"].startswith("assumed: ")
    assert sources["scale_down_per_min"] == ("assumed: no limit (the HPA's default scale-down policy drains 100% of "
                                             "the pods per 15 s)")


def test_a_sketched_logs_windows_are_sized_for_the_one_class_every_product_shares():
    # a log above the full-frame limit is planned from its sketch: one class for every product (the sidebar's pair,
    # or --slo '*=…') is each window's target, as on the rows
    from shapeviz.fleet.autoscale import traffic_windows
    from shapeviz.workload import synth
    from shapeviz.workload.sketch import WorkloadSketch

    frame = synth.generate(1_000, seed=0, with_hashes=False)
    frame = frame[frame["timestamp"] < frame["timestamp"].min() + pd.Timedelta(hours=2)]   # 24 five-minute windows
    classes = sizing.pair_classes(frame, 700.0, 45.0)
    dep = default_deployment()
    rows = traffic_windows(frame, dep, classes=classes)
    sketched = traffic_windows(WorkloadSketch.from_frame(frame), dep, classes=classes)
    assert sketched.n_windows == rows.n_windows > 1
    assert set(sketched.window_ttft_ms) == {700.0} and set(sketched.window_tpot_ms) == {45.0}
    assert np.allclose(sketched.window_rps, rows.window_rps)


def _replayed(product: bool = True) -> pd.DataFrame:
    """Four replayed requests: TTFT 100, 200, 300, 900 ms; TPOT 10, none (one token), 20, 30 ms; one a second."""
    frame = pd.DataFrame({"arrival_s": [0.0, 1.0, 2.0, 3.0], "ttft_ms": [100.0, 200.0, 300.0, 900.0],
                          "tpot_ms": [10.0, np.nan, 20.0, 30.0], "e2e_ms": [1000.0] * 4})
    if product:
        frame["product"] = "chat"
    return frame


def test_simulates_line_per_product_gives_its_p90s_against_its_class_attainment_and_goodput():
    from shapeviz.cli.simulate import product_lines
    from shapeviz.serving.products import SloClass, outcomes_table, product_outcomes

    outcomes = product_outcomes(_replayed(), {"chat": SloClass("chat", 500.0, 25.0, 90, "chat", "set by user")})
    # p90s 720 and 28 ms over 500 and 25; three of four requests within both (the one-token one has no TPOT to
    # miss); those three over the 4 s from the first arrival to the last finish: 0.75 req/s
    assert product_lines(outcomes) == ["  chat (chat): TTFT p90 720 / 500 ms, TPOT p90 28.0 / 25 ms: MISSES its class; "
                                       "75% of its requests within both, goodput 0.75 req/s"]
    row = outcomes_table(outcomes).iloc[0]
    assert (row["attainment"], row["goodput_rps"]) == (0.75, 0.75)


def test_the_replays_outcomes_of_a_log_without_products_are_judged_by_its_class_named_all():
    from shapeviz.serving.products import SloClass, product_outcomes

    outcomes = product_outcomes(_replayed(product=False), {"all": SloClass("all", 1000.0, 40.0)})
    assert list(outcomes) == ["all"] and outcomes["all"]["meets"] is True and outcomes["all"]["attainment"] == 1.0


# --- the prefix caches both loops read (serving/prefix_cache.py, mutmut seed 3907) ---------------------------------
def test_a_trimmed_hashed_log_keeps_its_blocks_each_shorter_by_the_trim():
    from shapeviz.serving.prefix_cache import blocks_from_frame

    frame = pd.DataFrame({"input_tokens": [64, 64], "output_tokens": [8, 8],
                          "hash_ids": [[1, 2, 3, 4], [1, 2, 5, 6]]})   # 16 tokens a block
    blocks = blocks_from_frame(frame, tokens=(np.array([32, 32]), np.array([8, 8])))   # a 50% trim
    assert blocks.block_size == 8
    assert blocks.block_size_source.endswith("16 × 0.50 = 8 tokens per block after the trim")
    assert blocks.look_ids.tolist() == [1, 2, 3, 4, 1, 2, 5, 6]   # the same blocks, each shorter


def test_a_trimmed_session_log_builds_its_stream_from_the_trimmed_turns():
    from shapeviz.serving.prefix_cache import blocks_from_frame

    frame = pd.DataFrame({"session_id": ["a", "a"], "turn": [1, 2], "input_tokens": [160, 320],
                          "output_tokens": [32, 32]})
    whole = blocks_from_frame(frame, block_size=16)
    trimmed = blocks_from_frame(frame, block_size=16, tokens=(np.array([80, 160]), np.array([32, 32])))
    assert np.diff(whole.look_ptr).tolist() == [10, 20] and np.diff(whole.keep_ptr).tolist() == [12, 22]
    assert np.diff(trimmed.look_ptr).tolist() == [5, 10] and np.diff(trimmed.keep_ptr).tolist() == [7, 12]


def test_a_fixed_size_cache_holds_its_capacity_in_all_with_the_blocks_in_use_counted():
    # the validation cache (a fixed capacity outside the KV pool) holds at most its capacity, blocks that running
    # sequences pin included: with 2 of 4 pinned, 2 cached blocks stay, the least recently used go
    from shapeviz.serving.prefix_cache import PrefixCache

    cache = PrefixCache(16, capacity_blocks=4)
    cache.pin([1, 2, 3, 4, 5, 6])
    cache.release([1, 2, 3, 4], [1, 2, 3, 4])   # 1..4 cached (1 least recent), 5 and 6 still in use
    cache.fit(0)
    assert list(cache.free) == [3, 4] and cache.evicted == 2 and cache.cached_blocks == 4
