"""Growth months sized by the one engine (issue 27): each month is the headline's window grown per product and
replayed; month 0 is the headline's fleet, zero growth keeps it, and every month carries its one-fewer proof."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from shapeviz.cli.fleet import fleet_text
from shapeviz.fleet.growth import Growth, grow_window, project
from shapeviz.fleet.sizing import default_deployment_for, fleet_answer, pair_classes
from shapeviz.ingest import load_log
from shapeviz.serving.planner import WhatIf, Workload
from shapeviz.serving.prefix_cache import PrefixBlocks
from shapeviz.serving.products import product_outcomes, products_meet
from shapeviz.serving.simulator import Requests, requests_from_frame, simulate

AZURE_CODE = "azure_llm_2023/AzureLLMInferenceTrace_code.csv"


@pytest.fixture(scope="module")
def code_10min(traces: Path) -> pd.DataFrame:
    """The first ten minutes of the bursty Azure code trace (about 1,500 requests: each sizing well under a second)."""
    frame = load_log(traces / AZURE_CODE).frame
    ts = frame["timestamp"]
    return frame[ts < ts.min() + pd.Timedelta(minutes=10)].reset_index(drop=True)


def test_zero_growth_keeps_the_headline_fleet_every_month(code_10min: pd.DataFrame) -> None:
    dep, _, _ = default_deployment_for(code_10min, "h100")
    headline = fleet_answer(Workload.from_frame(code_10min), dep, code_10min)[1]
    assert headline.method == "simulated"
    months = project(code_10min, dep, Growth({"*": 0.0}, {}, 2), method="simulated").months
    assert (months["method"] == "simulated").all()
    # every month replays the same traffic as today's, so it is today's answer, to the millisecond
    assert months["replicas"].tolist() == [headline.replicas] * 3
    assert months["ttft_p90_ms"].tolist() == [headline.answer.ttft_ms["p90"]] * 3


def test_months_grow_and_each_is_proven_on_its_grown_window(code_10min: pd.DataFrame) -> None:
    dep, _, _ = default_deployment_for(code_10min, "h100")
    result = project(code_10min, dep, Growth({"*": 0.5}, {}, 2), method="simulated")
    replicas = result.months["replicas"].tolist()
    assert replicas == sorted(replicas) and replicas[-1] > replicas[0], replicas
    assert result.months["one_fewer"].str.startswith("misses").all()
    # replayed here on its own: month 2's traffic (2.25× today's) is met by its fleet and missed by one fewer
    req = requests_from_frame(code_10min, WhatIf())
    span = float(req.arrival_s[-1] - req.arrival_s[0])
    grown = grow_window(req, span, {name: 1.5 ** 2 for name in set(req.product.astype(str))})
    assert len(grown) == pytest.approx(2.25 * len(req), abs=2)
    classes = pair_classes(code_10min, 1000.0, 50.0)

    def meets(k: int) -> bool:
        return products_meet(product_outcomes(simulate(grown, dep, replicas=k).requests, classes))

    assert meets(replicas[2]) and not meets(replicas[2] - 1)


def _blocks(n: int) -> PrefixBlocks:
    # every request looks up two blocks of its session's prompt (session = request // 2) and keeps them
    ids = np.repeat(np.arange(n) // 2, 2) * 10 + np.tile([0, 1], n)
    ptr = np.arange(0, 2 * n + 1, 2)
    return PrefixBlocks(16, "sessions", "given", ptr, ids, ptr.copy(), ids.copy(), np.arange(n) // 2)


def test_new_users_arrive_at_their_own_times_with_their_own_sessions() -> None:
    n = 40
    t = np.linspace(0.0, 600.0, n)
    req = Requests(np.full(n, 500), np.arange(1, n + 1), np.zeros(n, dtype=np.int64), t, np.full(n, "chat"),
                   _blocks(n))
    grown = grow_window(req, 600.0, {"chat": 2.5}, {"chat": 2.0})
    assert len(grown) == 100 and np.all(np.diff(grown.arrival_s) >= 0)
    assert grown.arrival_s.min() >= 0 and grown.arrival_s.max() <= 600.0   # inside the window
    # today's 40 requests are all there, at their own times; the copies mostly are not at today's times
    assert np.isin(t, grown.arrival_s).all()
    assert np.isin(grown.arrival_s, t).sum() < 50
    assert np.array_equal(np.sort(grown.output_tokens)[-3:], [80, 80, 80])   # outputs doubled
    # a copy's sessions and prompt blocks are its own: no block id and no session key is shared across copies
    look = [set(a.tolist()) for a in np.split(grown.blocks.look_ids, grown.blocks.look_ptr[1:-1])]
    by_key: dict[int, set[int]] = {}
    for key, ids in zip(grown.blocks.key.tolist(), look):
        by_key.setdefault(key, set()).update(ids)
    assert 40 < len(by_key) <= 60   # 20 sessions today, 20 in the whole copy, those the half copy draws from
    assert sum(len(ids) for ids in by_key.values()) == len(set().union(*by_key.values())) == 2 * len(by_key)
    # more growth keeps every request of less growth (a month never loses the month before's traffic)
    more = grow_window(req, 600.0, {"chat": 2.8})
    assert np.isin(grown.arrival_s, more.arrival_s).all()


def test_growth_beyond_what_is_replayed_is_refused_before_any_replay(code_10min: pd.DataFrame) -> None:
    # the page's growth box is the user's text: 100%/month for 5 months is 32× today's requests, refused at once
    dep, _, _ = default_deployment_for(code_10min, "h100")
    with pytest.raises(ValueError, match=r"32× today's requests.*replayed up to 20×"):
        project(code_10min, dep, Growth({"*": 1.0}, {}, 5), method="simulated")
    assert project(code_10min, dep, Growth({"*": 1.0}, {}, 5)).method == "analytic"   # the estimate still answers


def test_a_session_log_grows_into_new_sessions_the_compiled_loop_can_number(traces: Path) -> None:
    # BurstGPT's sessions grown 150%: the copies' blocks were renumbered out of the session form, which the compiled
    # loop's numbering relies on, and `report` on this trace crashed the process (a segmentation fault)
    frame = load_log(traces / "burstgpt/burstgpt3_slice.csv").frame
    window = requests_from_frame(frame)
    products = set(np.asarray(window.product, dtype=str)) if window.product is not None else {"*"}
    grown = grow_window(window, float(window.arrival_s[-1] - window.arrival_s[0]) + 1.0,
                        {p: 2.5 for p in products})
    assert grown.blocks is not None and grown.blocks.source == "sessions" and grown.blocks._session_form()
    assert len(np.unique(grown.blocks.key[grown.blocks.key >= 0])) > len(np.unique(window.blocks.key[window.blocks.key >= 0]))
    dep, _, _ = default_deployment_for(frame)
    months = project(frame, dep, Growth({"*": 1.5}, {}, 1), method="simulated").months
    assert list(months["method"]) == ["simulated", "simulated"]


def _seen_before(blocks: PrefixBlocks, rows: np.ndarray) -> float:
    """Of the prompt blocks ``rows`` look up, the share some earlier request (any row, in arrival order) already
    left or looked up: the reuse an unbounded prefix cache would give those requests."""
    look, keep = blocks.lists()
    seen: set[int] = set()
    hit = total = 0
    chosen = set(rows.tolist())
    for i, (ids, kept) in enumerate(zip(look, keep)):
        if i in chosen:
            hit += sum(b in seen for b in ids)
            total += len(ids)
        seen.update(ids)
        seen.update(kept)
    return hit / max(total, 1)


def test_a_month_of_new_users_keeps_todays_prompt_reuse(traces: Path) -> None:
    # Mooncake's conversation trace (block hashes, 64% of blocks seen before): month 1 at +8% adds copies of 8% of
    # today's requests. Copies drawn request by request with every block renamed lost the shared prefixes (a log
    # whose prompts are mostly cached lost its cache in month 1, and the month "needed" many times today's fleet)
    frame = load_log(traces / "mooncake_fast25/conversation_trace.jsonl.gz").frame
    ts = frame["timestamp"]
    frame = frame[ts < ts.min() + pd.Timedelta(minutes=10)].reset_index(drop=True)
    req = requests_from_frame(frame)
    span = float(req.arrival_s[-1])
    today = _seen_before(req.blocks, np.arange(len(req)))
    grown = grow_window(req, span, {name: 1.08 for name in set(req.product.astype(str))})
    assert len(grown) == pytest.approx(1.08 * len(req), rel=0.02)
    new = np.flatnonzero(~np.isin(np.arange(len(grown)), np.flatnonzero(np.isin(grown.arrival_s, req.arrival_s))))
    assert new.size > 0.05 * len(req)
    assert _seen_before(grown.blocks, new) > 0.8 * today, today


def test_a_new_user_is_a_whole_session_shifted_in_time_together() -> None:
    # ten sessions of four turns, a minute apart; +30% copies three of them whole, each turn 60 s after the last
    n = 40
    session = np.arange(n) // 4
    t = (session * 50.0 + (np.arange(n) % 4) * 60.0).astype(np.float64)
    order = np.argsort(t, kind="stable")
    ids = np.repeat(session, 2) * 10 + np.tile([0, 1], n)
    ptr = np.arange(0, 2 * n + 1, 2)
    blocks = PrefixBlocks(16, "sessions", "given", ptr, ids, ptr.copy(), ids.copy(), session)
    req = Requests(np.full(n, 500), np.full(n, 20), np.full(n, 300), t, np.full(n, "chat"), blocks).take(order)
    grown = grow_window(req, 700.0, {"chat": 1.3})
    copied = grown.blocks.key >= 10   # today's sessions are keys 0..9
    keys, count = np.unique(grown.blocks.key[copied], return_counts=True)
    assert keys.size == 3 and (count == 4).all()   # three sessions, every turn of each
    for key in keys:
        turns = np.sort(grown.arrival_s[grown.blocks.key == key])
        assert np.allclose(np.diff(turns), 60.0)
    assert (grown.cached_tokens == 300).all()      # the log's reported cached tokens, carried by every copy


def test_a_month_no_fleet_meets_is_unreachable_and_never_priced(code_10min: pd.DataFrame) -> None:
    # a TPOT class of 22 ms, a hair above one request's own decode step: today's traffic is met by 34 replicas, but
    # doubled traffic with answers four times longer is met by none (more replicas stop helping). The search's
    # last candidate was printed and priced as the month's plan ($ a month for 100+ replicas that miss)
    dep, _, _ = default_deployment_for(code_10min, "h100")
    result = project(code_10min, dep, Growth({"*": 1.0}, {"*": 3.0}, 1), method="simulated", tpot_slo_ms=22.0)
    month0, month1 = result.months.to_dict(orient="records")
    assert month0["replicas"] and month0["usd_per_month"] and not month0["unreachable"]
    assert month1["replicas"] is None and month1["gpus"] is None and month1["usd_per_month"] is None
    assert not month1["meets_slo"]
    words = month1["unreachable"]
    assert words.startswith("AzureLLMInferenceTrace_code (TTFT p90 ≤ 1,000 ms, TPOT p90 ≤ 22 ms)"), words
    assert "more replicas barely help" in words
    assert result.runs_out_month == 1
    text = fleet_text({"deployment": result.deployment, "growth": result.to_dict()})
    assert "month 1: " in text and "unreachable: AzureLLMInferenceTrace_code" in text and "$" not in text.split(
        "month 1: ")[1].split("\n")[0]
