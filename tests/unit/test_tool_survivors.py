"""What mutmut's sample left alive in the answer's modules (tests/README.md, "Mutations made by a tool"), each
as the thing a user would see: the replays a sizing pays for, a class no fleet meets explained, the median and p90
a replay reports, a reply-less log's one-fewer proof, where each autoscaling figure comes from, which queue a
queue policy read, a ``*`` class applied to every product, an entry of several frames in the disk cache, and the
queue carried into a last window one minute long.

The sizing search is driven with the stand-in replays of ``test_answer_branches.py`` (whether ``k`` replicas meet
is given), so no case replays anything: the nine take about 4 s together.
"""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from shapeviz.fleet import sizing
from shapeviz.fleet.autoscale import Policy, autoscale, startup, traffic_windows
from shapeviz.physics import default_deployment
from shapeviz.serving.products import SloClass, resolve_classes
from shapeviz.workload import synth

from tests.unit.test_answer_branches import LOOSE, _replays


@pytest.fixture(scope="module")
def frame() -> pd.DataFrame:
    return synth.generate(300, seed=0, with_hashes=False)


def test_the_final_bisection_starts_above_every_count_the_window_already_missed(monkeypatch, frame):
    """Estimate 100 meets, the window needs 37: the search bisects 50, 25, 37, 31, 34, 35, 36 and stops. Starting
    the last bisection from 0 again (forgetting the misses it saw) replays 18, 27 and 32 for nothing: three more
    replays of the whole window, each as long as the answer's own."""
    calls = _replays(monkeypatch, {"stretches": 37, "window": 37}, stretches=False)
    answer = sizing.size_fleet(frame, default_deployment(), sizing.pair_classes(frame, *LOOSE), estimate=100)
    assert (answer.replicas, answer.one_fewer.replicas) == (37, 36)
    assert sorted({k for k, _ in calls}) == [25, 31, 34, 35, 36, 37, 50, 100]
    assert f"{len(answer.trials)} replays" in sizing.sizing_note(answer) and len(answer.trials) == 8


def test_a_tpot_class_no_replica_count_meets_is_named_with_the_decode_step_that_rules_it_out(frame):
    """A TPOT class under one decode step at batch one: no fleet meets it, the sizing says why in the decode
    step's words (and runs no replay: every product is out of reach)."""
    dep = default_deployment()
    classes = sizing.pair_classes(frame, 600_000.0, 0.01)
    answer = sizing.size_fleet(frame, dep, classes, estimate=3)
    assert answer.answer is None and answer.trials == [] and answer.meets is False
    assert {u["metric"] for u in answer.unreachable} == {"tpot"}
    why = answer.unreachable[0]["why"]
    assert why.startswith("its p90 decode step alone (batch one) takes ") and why.endswith(
        "above its TPOT class of 0 ms")
    note = sizing.sizing_note(answer)
    assert note.startswith("fleet size: no size serves any product on this deployment (no size serves ")
    assert "decode step alone (batch one)" in note
    assert any("decode step alone (batch one)" in n and n.startswith("no fleet size meets") for n in answer.notes)


def _replayed(n: int) -> pd.DataFrame:
    """A replay's request frame: TTFT 1..n ms, TPOT 10 ms, one product."""
    return pd.DataFrame({"product": "chat", "arrival_s": np.arange(n, dtype=float),
                         "ttft_ms": np.arange(1, n + 1, dtype=float), "tpot_ms": np.full(n, 10.0),
                         "e2e_ms": np.full(n, 500.0)})


def test_a_replays_json_gives_the_median_and_the_p90_of_its_requests():
    classes = {"chat": SloClass("chat", 1000.0, 50.0, 90, "chat", "test")}
    trial = sizing.window_trial(4, _replayed(101), classes)
    doc = trial.verdict()
    assert doc["ttft_ms"] == {"p50": 51.0, "p90": 91.0}
    assert doc["tpot_ms"] == {"p50": 10.0, "p90": 10.0}
    assert doc["verdict"] == "meets every class"


def test_a_one_fewer_proof_on_a_log_without_replies_says_its_tpot_is_not_applicable():
    """A log of single-token replies (classification, embeddings behind a chat API) has no TPOT: the proof says
    "n/a", not a number and not an empty gap."""
    classes = {"chat": SloClass("chat", 50.0, 50.0, 90, "chat", "test")}
    frame = _replayed(101).assign(tpot_ms=np.nan)
    answer = sizing.window_trial(2, frame.assign(ttft_ms=frame["ttft_ms"] / 10), classes)
    fewer = sizing.window_trial(1, frame, classes)
    assert fewer.tpot_ms["p90"] is None and not fewer.meets
    found = sizing.Sizing("simulated", 2, True, 2, {"window": "the busiest hour"}, answer, fewer, [answer, fewer])
    assert "1 replica(s) miss (misses: chat: TTFT p90 91 ms, TPOT p90 n/a)" in sizing.sizing_note(found)


@pytest.fixture(scope="module")
def windows():
    f = synth.generate(600, seed=2, with_hashes=False)
    dep = default_deployment()
    return traffic_windows(f, dep, window_s=600), dep


def test_every_figure_of_an_autoscaling_window_says_where_it_comes_from(windows):
    tw, dep = windows
    doc = autoscale(tw, "slo", startup(dep)).to_dict()
    figures = ("rate_rps", "peak_rps", "replicas", "replicas_needed", "ttft_p90_ms", "tpot_p90_ms", "attainment")
    assert all(f in row for row in doc["windows"] for f in figures)
    assert {f: doc["provenance"].get(f) for f in figures} == {
        "rate_rps": "measured", "peak_rps": "measured", "replicas": "estimated", "replicas_needed": "estimated",
        "ttft_p90_ms": "estimated", "tpot_p90_ms": "estimated", "attainment": "estimated"}


def test_a_queue_policy_without_a_replay_says_its_queue_was_estimated(windows):
    """Only the replay's queue is "simulated" (test_autoscale_engine.py); without one the JSON must not claim it."""
    tw, dep = windows
    queue = autoscale(tw, Policy("queue", initial_replicas=1), startup(dep)).to_dict()["minutes"]
    assert queue["queue_per_replica_source"] == "estimated"
    assert len(queue["queue_per_replica"]) == len(queue["replicas"])
    assert "queue_per_replica" not in autoscale(tw, "slo", startup(dep)).to_dict()["minutes"]


def test_a_star_class_applies_to_every_product_and_a_named_one_overrides_it():
    f = synth.generate(300, seed=0, with_hashes=False)
    products = sorted(f["product"].astype(str).unique())
    assert len(products) >= 2
    every = resolve_classes(f, {"*": (300.0, 10.0)})
    assert {(p, c.ttft_ms, c.tpot_ms) for p, c in every.items()} == {(p, 300.0, 10.0) for p in products}
    assert {c.source for c in every.values()} == {"set by user (--slo)"}
    one = resolve_classes(f, {"*": (300.0, 10.0), products[0]: (900.0, 40.0)})
    assert (one[products[0]].ttft_ms, one[products[0]].tpot_ms) == (900.0, 40.0)
    assert all((one[p].ttft_ms, one[p].tpot_ms) == (300.0, 10.0) for p in products[1:])


def test_a_cache_entry_of_several_frames_reads_back_each_frame(tmp_path, monkeypatch):
    """Every kind stored today holds at most one frame (an analysis none, a log or a plane one), so an entry's
    frames joined with bytes between them went unseen; the next kind with two would never read back."""
    from components import disk_cache

    monkeypatch.setenv(disk_cache.ENV, str(tmp_path / "cache"))
    monkeypatch.setenv(disk_cache.KEY_ENV, str(tmp_path / "key" / "cache.key"))

    def dump(value, frames):
        frames.extend(value)
        return {"frames": len(value)}

    monkeypatch.setitem(disk_cache.KINDS, "frames", disk_cache.Kind(dump, lambda doc, frames: list(frames)))
    value = [pd.DataFrame({"a": [1, 2, 3]}), pd.DataFrame({"b": ["x", "y"]}), pd.DataFrame({"c": [0.5]})]
    disk_cache.cached("frames", ("three",), lambda: value)
    read = disk_cache.cached("frames", ("three",), lambda: pytest.fail("the entry was not read from disk"))
    assert len(read) == 3
    for got, want in zip(read, value):
        pd.testing.assert_frame_equal(got, want)


def test_a_last_window_of_one_minute_misses_by_the_queue_carried_into_it():
    """A minute at 20 req/s against a ceiling of 2 replicas, then the log's last half minute at 0.5 req/s: that
    last window (one minute of 5-minute windows) starts with the queue the busy minute left, and says so; the
    minute before it started empty, so reading the carried queue one minute early calls the miss something else."""
    from tests.unit.test_autoscale_engine import _ramps

    dep = default_deployment()
    f = _ramps([0, 3.99, 4.0, 4.99, 5.0, 5.5], [0.5, 0.5, 20.0, 20.0, 0.5, 0.5], 4000, 100)
    tw = traffic_windows(f, dep, window_s=300)
    assert list(tw.window_of_minute) == [0, 0, 0, 0, 0, 1]
    result = autoscale(tw, Policy("slo", max_replicas=2), startup(dep))
    assert result.schedule.backlog[-2] == 0 and result.schedule.backlog[-1] > 0
    assert list(result.windows["missed"]) == [True, True]
    assert list(result.windows["reason"]) == ["ceiling", "backlog"]


# Survivors of mutmut's third sample of fleet/autoscale.py (seed 1205): tests/README.md.
def test_hold_at_peak_holds_the_busiest_minutes_fleet_every_minute(windows):
    tw, dep = windows
    minutes = autoscale(tw, "peak", startup(dep)).to_dict()["minutes"]
    peak = max(int(tw.minute_need.max()), Policy("peak").minimum)
    assert set(minutes["desired"]) == {peak} and len(minutes["desired"]) == len(tw.minute_need)


def test_the_cost_figures_of_an_autoscaling_policy_say_where_they_come_from(windows):
    tw, dep = windows
    doc = autoscale(tw, "slo", startup(dep)).to_dict()
    assert {f: doc["provenance"].get(f) for f in ("gpu_hours", "cost", "usd_per_gpu_hour")} == {
        "gpu_hours": "estimated", "cost": "estimated", "usd_per_gpu_hour": "assumed"}


def test_a_policys_ceiling_is_in_its_json_with_its_origin():
    doc = Policy("slo", max_replicas=3).to_dict()
    assert doc["max_replicas"] == 3 and doc["sources"]["max_replicas"] == "set by user"
    assert Policy("slo").to_dict()["sources"]["max_replicas"].startswith("estimated")


def test_replicas_that_scale_down_are_paid_until_their_last_request_finishes():
    # three replicas, then one from t = 10 s: replica 1 held nothing, replica 2 finishes its last request at 17 s,
    # so the draining adds 7 replica-seconds to the GPU-hours (a replica with nothing to drain adds none)
    from shapeviz.fleet.autoscale import _drain_tail_s

    replay = pd.DataFrame({"arrival_s": [1.0, 2.0, 8.0, 12.0], "e2e_ms": [1000.0, 1000.0, 9000.0, 1000.0],
                           "replica": [0, 2, 2, 0]})
    assert _drain_tail_s(replay, np.array([0.0, 10.0]), np.array([3, 1])) == pytest.approx(7.0)


# Survivors of mutmut's third sample of serving/products.py (seed 1205): tests/README.md.
def test_a_log_without_products_is_one_product_named_all_in_its_classes_and_its_outcomes():
    # plan_products and the replays' outcomes call such a log's requests "all": its class must have that name, or
    # each request is judged on the default pair instead of its class
    from shapeviz.serving.products import class_targets_ms

    f = synth.generate(100, seed=0, with_hashes=False).drop(columns=["product"])
    classes = resolve_classes(f, {"*": (300.0, 10.0)})
    assert list(classes) == ["all"]
    assert set(class_targets_ms(np.array(["all"] * 3), classes, 1000.0)) == {300.0}


def test_a_class_at_an_impossible_percentile_is_refused_by_name():
    with pytest.raises(ValueError, match=r"SLO class of 'chat': percentile=100 must be in 1\.\.99"):
        SloClass("chat", 500.0, 50.0, 100)


def test_the_products_table_shows_each_products_own_targets_beside_its_p90s():
    # the page's per-product table (Fleet design): each product's class targets and corner, not blanks
    from shapeviz.serving.products import outcomes_table

    outcomes = {"chat": {"requests": 10, "slo": {"ttft_ms": 500.0, "tpot_ms": 50.0, "percentile": 90,
                                                 "corner": "chat"},
                         "ttft_p90_ms": 420.0, "tpot_p90_ms": 41.0, "meets": True, "attainment": 0.95,
                         "goodput_rps": 1.5}}
    row = outcomes_table(outcomes).iloc[0]
    assert (row["ttft_slo_ms"], row["tpot_slo_ms"], row["corner"]) == (500.0, 50.0, "chat")
    assert (row["ttft_p90_ms"], row["tpot_p90_ms"]) == (420.0, 41.0)


def test_a_stored_value_of_several_frames_reads_back_each_frame():
    # the disk cache's plain form keeps a value's frames beside its JSON, each by its index: two frames come back
    # as they went, not one twice (survivor of mutmut's third sample of plain.py)
    from shapeviz.plain import from_plain, to_plain

    first, second = pd.DataFrame({"a": [1, 2]}), pd.DataFrame({"b": [3.5]})
    frames: list = []
    doc = to_plain(tuple[pd.DataFrame, pd.DataFrame], (first, second), frames)
    back = from_plain(tuple[pd.DataFrame, pd.DataFrame], doc, frames)
    pd.testing.assert_frame_equal(back[0], first)
    pd.testing.assert_frame_equal(back[1], second)


# Survivors of mutmut's third sample of components/disk_cache.py (seed 1205): tests/README.md.
def test_the_cache_and_its_key_live_in_the_users_folders_when_nothing_is_set(tmp_path, monkeypatch):
    # a server started without SHAPEVIZ_CACHE_DIR or the key's variable (the usual case) keeps its entries under
    # ~/.cache and its key under ~/.config, or XDG's folders when they are set
    from components import disk_cache

    for var in (disk_cache.ENV, disk_cache.KEY_ENV, "XDG_CACHE_HOME", "XDG_CONFIG_HOME"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    assert disk_cache.cache_dir() == tmp_path / ".cache" / "shapeviz"
    assert disk_cache.key_file() == tmp_path / ".config" / "shapeviz" / "cache.key"
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert disk_cache.cache_dir() == tmp_path / "xdg" / "shapeviz"


def test_a_cache_folder_others_may_read_but_not_write_is_used(tmp_path, monkeypatch):
    # entries are signed, so a folder others can read (a hand-made ~/.cache/shapeviz, 0755) is safe to use; only
    # one others can write is refused (tests/security/test_hostile_disk_cache.py)
    from components import disk_cache

    folder = tmp_path / "cache"
    folder.mkdir()
    folder.chmod(0o755)
    monkeypatch.setenv(disk_cache.ENV, str(folder))
    monkeypatch.setenv(disk_cache.KEY_ENV, str(tmp_path / "config" / "cache.key"))
    calls: list[int] = []

    def compute():
        from shapeviz.ingest import load_log

        calls.append(1)
        return load_log(b"input_tokens,output_tokens\n100,20\n", name="readable.csv"), "readable"

    disk_cache.cached("generated", ("demo", 0, 100, 50), compute)
    log, digest = disk_cache.cached("generated", ("demo", 0, 100, 50), compute)
    assert calls == [1] and digest == "readable" and len(log.frame) == 1
