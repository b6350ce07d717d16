"""A sizing's search with a stand-in replay: the hardest stretches it names and replays, what ``plan --json`` says.

A sizing on a log longer than four five-minute stretches picks, from the whole-window replay at the first count, the
three stretches where the p90s stood furthest above their classes, and searches on those before confirming on the
whole window (``fleet.sizing._Search.pick_stretches``). ``plan --json`` names them (``sized_on.stretches``) and says
it searched on them (``sized_on.search``); the replays it lists (``simulations``) and its "N replays" say what ran.
The answer is decided on the whole window either way, so a wrong pick changes the replays, not the fleet: that is
what these tests read, with the other figures of ``plan --json`` a tool's mutants changed unseen (mutmut, seed
3907: the window's length, the proof's attainment, the replays' arrivals). The replay itself is a stand-in (a
request's TTFT is its prompt length × 10 ms / replicas, whatever its arrival), so each sizing takes milliseconds;
the real replays are tested in ``test_sizing.py``.
"""
from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest

from shapeviz.fleet import sizing
from shapeviz.physics import default_deployment

PER_STRETCH = 60
# the prompt length of every request in each five-minute stretch: its TTFT in the stand-in is ∝ this
PROMPTS = [100, 500, 100, 400, 600, 100]
HARDEST = [1, 3, 4]   # the three stretches of the longest prompts, in time order


def _log(products: list[str] | None = None) -> pd.DataFrame:
    """Six five-minute stretches of 60 requests each, one every five seconds; no products unless given."""
    n = PER_STRETCH * len(PROMPTS)
    frame = pd.DataFrame({
        "timestamp": pd.Timestamp("2025-01-01", tz="UTC") + pd.to_timedelta(np.arange(n) * 5.0, "s"),
        "input_tokens": np.repeat(PROMPTS, PER_STRETCH).astype(np.int32),
        "output_tokens": np.full(n, 20, dtype=np.int32),
    })
    if products is not None:
        frame["product"] = pd.Categorical(np.resize(products, n))
    return frame


def _stand_in(req, dep, replicas: int, **kwargs) -> SimpleNamespace:
    """A replay whose TTFT is the prompt length × 10 ms / replicas (the longest prompts miss first)."""
    REPLAYED.append((np.asarray(req.arrival_s, dtype=np.float64), kwargs))
    ttft = np.asarray(req.input_tokens, dtype=np.float64) * 10.0 / replicas
    frame = pd.DataFrame({"arrival_s": np.asarray(req.arrival_s, dtype=np.float64), "ttft_ms": ttft,
                          "tpot_ms": np.full(len(ttft), 20.0), "e2e_ms": ttft + 400.0})
    if req.product is not None:
        frame["product"] = pd.Categorical(np.asarray(req.product).astype(str))
    return SimpleNamespace(requests=frame)


REPLAYED: list[tuple[np.ndarray, dict]] = []   # each stand-in replay's arrivals and settings


@pytest.fixture
def sized(monkeypatch):
    monkeypatch.setattr(sizing, "simulate", _stand_in)
    REPLAYED.clear()

    def size(frame: pd.DataFrame, **kwargs) -> dict:
        classes = sizing.pair_classes(frame, 1000.0, 5000.0)
        return sizing.size_fleet(frame, default_deployment(), classes, estimate=2, **kwargs).to_dict()
    return size


def _stretch_starts(doc: dict) -> list[int]:
    return [round(s["start_s"] / (PER_STRETCH * 5.0)) for s in doc["sized_on"]["stretches"]]


@pytest.mark.parametrize("products", [None, ["chat", "code"]], ids=["no products", "two products"])
def test_the_stretches_named_are_the_hardest_and_the_search_replays_them(sized, products):
    doc = sized(_log(products))
    assert doc["replicas"] == 6 and doc["meets"]   # the longest prompts (6,000 ms at one replica) meet from 6
    assert _stretch_starts(doc) == HARDEST
    assert "searched on the 3 hardest 5-minute stretches" in doc["sized_on"]["search"]
    on = [s["on"] for s in doc["simulations"]]
    assert "stretches" in on, f"plan --json says it searched on the stretches but replayed only {on}"
    # every count the stretches passed is confirmed on the whole window, and one fewer misses there
    assert doc["one_fewer"]["replicas"] == 5 and doc["one_fewer"]["meets"] is False


def test_a_log_too_short_for_four_stretches_is_searched_on_the_whole_window(sized):
    doc = sized(_log().iloc[:PER_STRETCH * 4 - 1])   # 19 min 50 s of arrivals: under four stretches
    assert doc["replicas"] == 5 and doc["meets"]   # its longest prompts (500, a quarter of it) meet from 5
    assert doc["sized_on"]["stretches"] == [] and "search" not in doc["sized_on"]
    assert {s["on"] for s in doc["simulations"]} == {"window"}


def test_each_stretch_is_replayed_after_an_idle_hour_with_none_of_anothers_backlog(sized):
    sized(_log())
    stretches = [arrival for arrival, _ in REPLAYED if len(arrival) < PER_STRETCH * len(PROMPTS)]
    assert stretches, "no replay of the stretches"
    for arrival in stretches:
        # each stretch with its lead-in minute: 12 + 60 arrivals over six minutes, then an hour with none
        gaps = np.diff(arrival)
        assert (gaps >= 3600.0).sum() == 2 and len(arrival) == 3 * (12 + PER_STRETCH)
        assert all(np.ptp(part) < 360.0 for part in np.split(arrival, np.flatnonzero(gaps >= 3600.0) + 1))


def test_a_timed_log_is_replayed_on_its_own_arrivals_never_a_poisson_stand_in(sized):
    sized(_log())
    assert REPLAYED and all("arrivals" not in settings and "rate_rps" not in settings for _, settings in REPLAYED)
    whole = next(arrival for arrival, _ in REPLAYED if len(arrival) == PER_STRETCH * len(PROMPTS))
    assert np.allclose(whole, np.arange(PER_STRETCH * len(PROMPTS)) * 5.0)   # the log's own arrivals, 5 s apart


def test_plan_json_says_the_window_length_the_fleet_was_judged_on(sized):
    assert sized(_log(), slo_window_s=1_200.0)["sized_on"]["slo_window_s"] == 1_200.0
    assert sized(_log())["sized_on"]["slo_window_s"] == sizing.DEFAULT_SLO_WINDOW_S


def test_the_answer_and_its_proof_give_each_products_attainment(sized):
    doc = sized(_log(["chat", "code"]))
    # 6 replicas: every request within 1,000 ms; 5: the 60 requests of 600-token prompts take 1,200 ms
    assert {p: o["attainment"] for p, o in doc["answer"]["products"].items()} == {"chat": 1.0, "code": 1.0}
    assert {p: o["attainment"] for p, o in doc["one_fewer"]["products"].items()} == \
        {"chat": pytest.approx(150 / 180), "code": pytest.approx(150 / 180)}


def test_an_answer_of_two_replicas_is_proven_by_one_replica_missing(sized):
    # prompts of 150 tokens: 1,500 ms at one replica, 750 at two
    doc = sized(_log().assign(input_tokens=np.int32(150)))
    assert doc["replicas"] == 2 and doc["meets"]
    assert (doc["one_fewer"]["replicas"], doc["one_fewer"]["meets"]) == (1, False)
    assert not any("no smaller fleet" in note for note in doc["notes"])


def test_an_answer_of_one_replica_says_there_is_no_smaller_fleet_to_replay(sized):
    doc = sized(_log().assign(input_tokens=np.int32(50)))
    assert doc["replicas"] == 1 and doc["meets"] and doc["one_fewer"] is None
    assert "one replica meets every class: there is no smaller fleet to replay" in doc["notes"]


def test_a_product_no_size_serves_leaves_the_others_sized_by_replay(monkeypatch):
    monkeypatch.setattr(sizing, "simulate", _stand_in)
    frame = _log(["chat", "code"])
    classes = sizing.pair_classes(frame, 1000.0, 5000.0, overrides={"code": (0.01, 5000.0)})   # no prefill is 0.01 ms
    doc = sizing.size_fleet(frame, default_deployment(), classes, estimate=2).to_dict()
    assert [u["product"] for u in doc["unreachable"]] == ["code"]
    # chat is sized on the replays as if alone in its class (code's requests still load the fleet)
    assert doc["method"] == "simulated" and doc["replicas"] == 6 and doc["simulations"]
    assert doc["meets"] is False and doc["meets_others"] is True
    assert doc["answer"]["products"]["chat"]["meets"] is True and doc["answer"]["products"]["code"]["meets"] is False
