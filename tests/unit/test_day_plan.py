"""The 1M-request day's plan, made physical (issue 40, held-out check): what a replay may count as served.

A generated day planned on Llama-3.1-70B printed 39 × TP16 with every product missing: its agent product (Kimi-K2
traffic in the log, 44% of its busiest hour over the 70B's 131,072-token window) was replayed as if served, the
search stopped where that product's p90 stopped falling and blamed every product, and the router lever claimed a
class its own search had missed. These tests pin each mechanism on a small case, in a few seconds each.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from shapeviz.cli import main
from shapeviz.cli.plan import plan_text
from shapeviz.fleet import sizing
from shapeviz.ingest import load_log
from shapeviz.serving.simulator import requests_from_frame, simulate

MOONCAKE = "mooncake_fast25/conversation_trace.jsonl.gz"


def _run(capsys: pytest.CaptureFixture[str], command: str, *argv: str) -> dict[str, Any]:
    assert main([command, *argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def _two_products(agent_tokens: int, n_chat: int = 900, n_agent: int = 60) -> pd.DataFrame:
    rng = np.random.default_rng(0)
    stamps = pd.Timestamp("2026-01-01", tz="UTC") + pd.to_timedelta(np.sort(rng.uniform(0, 600, n_chat + n_agent)),
                                                                     "s")
    product = rng.permutation(["chat"] * n_chat + ["agent"] * n_agent)
    chat_tokens = rng.integers(200, 2_000, product.size)
    return pd.DataFrame({"timestamp": stamps, "product": product,
                         "input_tokens": np.where(product == "agent", agent_tokens, chat_tokens),
                         "output_tokens": rng.integers(50, 400, product.size)})


def test_requests_beyond_the_models_context_window_are_refused_not_replayed(tmp_path: Path, capsys) -> None:
    # an agent whose 200k-token prompts no Llama-3.1-70B engine accepts (131,072 tokens), beside a chat product
    frame = _two_products(200_000)
    both, chat = tmp_path / "both.csv", tmp_path / "chat.csv"
    frame.to_csv(both, index=False)
    frame[frame["product"] == "chat"].to_csv(chat, index=False)
    argv = ("--gpu", "h100", "--model", "llama-3.1-70b", "--map", "product=product")
    doc = _run(capsys, "plan", str(both), *argv)
    (agent,) = doc["unreachable"]
    assert agent["product"] == "agent" and agent["cause"] == "context" and agent["refused_share"] == 1.0
    assert "context window of 131,072 tokens" in agent["why"]
    # the engine refuses them at once: they load no replica, so the chat product gets the fleet its own rows need
    alone = _run(capsys, "plan", str(chat), *argv)
    assert doc["sized_on"]["refused"] == 60 and doc["sizing"]["meets_others"]
    assert doc["replicas"] == alone["replicas"] and doc["deployment_detail"]["tp"] == alone["deployment_detail"]["tp"]
    assert "context window" in plan_text(doc) and "no size meets every class" not in plan_text(doc)


def test_a_prompt_alone_is_prefilled_in_the_engines_steps_as_the_replay_runs_it(traces: Path) -> None:
    # Mooncake's long conversation prompts, each replayed alone on an idle replica: the TTFT the replay gives is
    # what the "no size serves it" check counts (it counted one pass over the whole prompt, 4% less at 24k tokens)
    frame = load_log(traces / MOONCAKE).frame.drop(columns="hash_ids")
    frame = frame[frame["input_tokens"] > 3 * 8192].head(40)
    dep, _, _ = sizing.default_deployment_for(None)
    req = requests_from_frame(frame, reuse=False)
    req = req.take(np.arange(len(req)))
    replayed = simulate(type(req)(req.input_tokens, req.output_tokens, req.cached_tokens,
                                  np.arange(len(req)) * 120.0, req.product), dep, replicas=1).requests
    assert replayed["queue_ms"].max() == 0.0
    alone_ms = sizing.prefill_alone_s(dep, req.input_tokens, req.cached_tokens) * 1000.0
    np.testing.assert_allclose(alone_ms, replayed["ttft_ms"].to_numpy(), rtol=1e-6)


def test_a_product_more_replicas_no_longer_help_is_named_and_the_rest_is_sized(monkeypatch) -> None:
    # Replays in which the agent's TTFT p90 stays near 5 s whatever the count (its turns re-prefilled whole: the
    # router loses their cache) while chat meets from 30 replicas. The search stopped where the agent stopped
    # improving and printed that count with every product missing; now the agent is named, with the replays' own
    # figures, and the fleet is the 30 replicas chat needs (29 shown missing)
    def replayed(k: int) -> pd.DataFrame:
        n = 50
        return pd.DataFrame({"product": ["chat"] * n + ["agent"] * n, "arrival_s": np.arange(2 * n, dtype=float),
                             "ttft_ms": [400.0 if k >= 30 else 3000.0] * n + [5000.0 - k] * n,
                             "tpot_ms": [20.0] * (2 * n), "e2e_ms": [1000.0] * (2 * n)})

    def run(self, k: int, on: str = "window") -> sizing.Trial:
        if (k, on) not in self.cache:
            frame = replayed(k)
            self.frames[(k, "window")] = frame
            self.cache[(k, on)] = sizing.window_trial(k, frame, self.classes)
        return self.cache[(k, on)]

    monkeypatch.setattr(sizing._Search, "run", run)
    monkeypatch.setattr(sizing._Search, "pick_stretches", lambda self, k: False)
    frame = _two_products(1_000)
    dep, _, _ = sizing.default_deployment_for(None)
    answer = sizing.size_fleet(frame, dep, sizing.pair_classes(frame, 1000.0, 50.0), estimate=10)
    assert answer.replicas == 30 and answer.one_fewer.replicas == 29
    assert answer.meets_others and not answer.meets
    (agent,) = answer.unreachable
    assert agent["product"] == "agent" and agent["cause"] == "measured"
    assert "more replicas no longer lower it" in agent["why"]
    assert "no size meets every class" not in sizing.sizing_note(answer)


def test_the_router_lever_never_claims_a_class_its_own_search_missed() -> None:
    # the 1M-request day's lever: its session-routed search stopped at 174 replicas, missing, and the line said
    # it "meets every other product's class on 174 × TP16 = 2784 GPUs, 2160 more than routing round-robin"
    lever = {"router": "session", "replicas": 174, "gpus": 2784, "gpus_saved": -2160, "meets": False,
             "meets_others": False}
    line = sizing.router_lever_line(lever, 16)
    assert "meets every" not in line and "more than routing" not in line
    assert "174 × TP16 = 2784 GPUs still miss" in line
    assert "meets every other product's class" in sizing.router_lever_line({**lever, "meets_others": True}, 16)


def test_auto_tp_is_chosen_for_the_products_a_tp_can_serve() -> None:
    # a RAG product whose 15k-token prompts need TP8 to prefill within 1 s, beside an agent beyond the context
    # window: no TP serves the agent, and "auto" fell back to TP4 (the smallest that fits), leaving the RAG out too
    from dataclasses import replace

    frame = _two_products(200_000)
    frame.loc[frame.index[::3], "product"] = "rag"
    frame.loc[frame["product"] == "rag", "input_tokens"] = 15_000
    fits, _, _ = sizing.default_deployment_for(None)
    assert fits.tp == 4
    dep, words, left = sizing.auto_tp(frame, fits, lambda tp: replace(fits, tp=tp),
                                      sizing.pair_classes(frame, 1000.0, 50.0))
    assert dep.tp == 8 and [u["product"] for u in left] == ["agent"]
    assert "leaves rag out of its class" in words and "agent no TP serves" in words


def test_rows_without_prompt_blocks_are_judged_with_the_logs_cache_as_the_replay_serves_them() -> None:
    # chat in sessions (the replay's caches follow them) beside a RAG product in no session whose log reports
    # 10k of its 15k-token prompts cached. The replay gave its rows none of that (1.3 s alone on TP4) and "auto"
    # went to TP8 for it; a row without prompt blocks now keeps the log's cached tokens in the replay and in the
    # check alike (``Requests.cached_before_lookup``), as in a log without sessions: TP4 serves it
    from dataclasses import replace

    frame = _two_products(1_000, n_agent=0)
    frame["session_id"] = (np.arange(len(frame)) // 3).astype(str)
    frame["turn"] = np.arange(len(frame)) % 3
    rag = frame.index[::4]
    frame.loc[rag, ["product", "input_tokens", "session_id", "turn"]] = ["rag", 15_000, None, None]
    frame["cached_tokens"] = np.where(frame["product"] == "rag", 10_000, 0)
    frame["session_id"] = frame["session_id"].astype("category")
    frame["turn"] = frame["turn"].astype("Int32")
    fits, _, _ = sizing.default_deployment_for(None)
    dep, words, left = sizing.auto_tp(frame, fits, lambda tp: replace(fits, tp=tp),
                                      sizing.pair_classes(frame, 1000.0, 50.0))
    assert dep.tp == 4 and left == [] and words == sizing.FITS_WORDS
    # the replay serves the RAG's prompts with those 10k tokens cached: alone, each takes what the check counts
    req = requests_from_frame(frame)
    rows = np.flatnonzero(req.product == "rag")[:5]
    alone = simulate(type(req)(req.input_tokens[rows], req.output_tokens[rows], req.cached_tokens[rows],
                               np.arange(rows.size) * 120.0, req.product[rows], req.blocks.take(rows)),
                     dep, replicas=1).requests
    assert (alone["cached_tokens"] == 10_000).all()
    np.testing.assert_allclose(alone["ttft_ms"].to_numpy(), sizing.prefill_alone_s(dep, np.full(5, 15_000.0),
                                                                                   np.full(5, 10_000.0)) * 1000.0,
                               rtol=1e-6)
