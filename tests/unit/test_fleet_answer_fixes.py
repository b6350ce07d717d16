"""Three answers a practitioner would question, mended (issue #37 item 2 and the sizing engine, round 8).

- "auto" GPUs per replica stays within one node of its GPU (``GPU.gpus_per_node``, data/gpus.csv): a product no TP
  within a node serves is named with its figure, not served by a TP over the network; a TP the user sets beyond a
  node says it spans nodes.
- ``design`` refuses requests beyond its pools' model's context window as ``plan`` refuses them (each pool's replay
  through ``serving.products.beyond_context``) and names a product with too many of them (cause "context").
- A request in no session keeps the cached tokens its log reports when other requests of the log have sessions, as
  it does in a log without sessions (``Requests.cached_before_lookup``: one rule for both replay loops and the "no
  size serves it" check).
"""
from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from shapeviz.cli import main
from shapeviz.cli.plan import plan_text
from shapeviz.fleet import sizing
from shapeviz.fleet.design import design_fleet
from shapeviz.fleet.pools import Fleet, Pool, fleet_requests, simulate_fleet
from shapeviz.serving.products import resolve_classes
from shapeviz.serving import simulator
from shapeviz.serving.simulator import simulate
from shapeviz.workload.synth import generate


def _day(n: int) -> "object":
    # the demo's mix without block hashes (as the 1M-request day is generated): support-chat in sessions, the
    # document search in none, each of its prompts reporting 1,024 cached tokens (its shared instructions)
    return generate(n, seed=0, with_hashes=False, products=["support-chat", "doc-search"])


@pytest.mark.parametrize("compiled", [True, False], ids=["compiled", "python"])
def test_a_request_in_no_session_keeps_its_reported_cache_beside_session_traffic(compiled: bool, monkeypatch) -> None:
    monkeypatch.setattr(simulator, "COMPILED", compiled)
    frame = _day(600)   # a day of 600 requests: one every ~2 minutes, so every prompt is prefilled alone
    dep, _, _ = sizing.default_deployment_for(None)
    mixed = simulate(frame, dep, replicas=1).requests
    alone = simulate(frame.drop(columns=["session_id", "turn"]), dep, replicas=1).requests
    doc = (mixed["product"] == "doc-search").to_numpy()
    assert doc.sum() > 50 and (mixed["product"].to_numpy() == alone["product"].to_numpy()).all()
    # the document search's TTFT is what it is in the log without sessions, but where a chat turn shares its
    # replica's steps (the chat's own cache then differs): before, none was, the median 18% slower (606 against 514
    # ms), its 1,024 reported tokens prefilled again
    ttft, without = mixed["ttft_ms"].to_numpy()[doc], alone["ttft_ms"].to_numpy()[doc]
    assert np.isclose(ttft, without, rtol=1e-9).mean() > 0.9
    assert np.median(ttft) == np.median(without)
    assert (mixed["cached_tokens"].to_numpy()[doc] == 1_024).mean() > 0.9
    # the chat's sessions are still replayed through the replica's cache: later turns hit the earlier ones'
    chat = ~doc
    assert mixed["cached_tokens"].to_numpy()[chat].sum() > alone["cached_tokens"].to_numpy()[chat].sum()


def _chat_and_rag(rag_tokens: int) -> pd.DataFrame:
    # ten minutes of a chat product beside a RAG product whose prompts are all ``rag_tokens`` long
    rng = np.random.default_rng(0)
    n = 960
    stamps = pd.Timestamp("2026-01-01", tz="UTC") + pd.to_timedelta(np.sort(rng.uniform(0, 600, n)), "s")
    product = rng.permutation(["chat"] * 840 + ["rag"] * 120)
    return pd.DataFrame({"timestamp": stamps, "product": product,
                         "input_tokens": np.where(product == "rag", rag_tokens, rng.integers(200, 2_000, n)),
                         "output_tokens": rng.integers(50, 400, n)})


def test_auto_tp_stays_within_one_node_and_names_the_product_it_leaves_out() -> None:
    # 20k-token RAG prompts on Llama-3.1-70B / H100: alone, a prefill takes 1,188 ms on TP8 and 903 ms on TP16, so
    # only two 8-GPU nodes per replica reach its 1 s class; "auto" picked that TP16 (all-reduces over the network)
    frame = _chat_and_rag(20_000)
    fits, _, _ = sizing.default_deployment_for(None)
    assert fits.tp == 4 and fits.gpu.gpus_per_node == 8
    dep, words, left = sizing.auto_tp(frame, fits, lambda tp: replace(fits, tp=tp),
                                      sizing.pair_classes(frame, 1000.0, 50.0))
    assert dep.tp == 4 and dep.nodes == 1 and [u["product"] for u in left] == ["rag"]
    assert "no TP within one node of 8 H100 SXM5 80GB (up to TP8)" in words
    assert "leaves out rag: rag (p90 prefill alone 1,188 ms against its TTFT class of 1,000 ms on TP8)" in words
    # on TP8 the lever is no longer more GPUs per replica
    tp8 = replace(fits, tp=8)
    (rag,) = sizing.unreachable_classes(sizing.slo_window(frame, tp8)[0], tp8, sizing.pair_classes(frame, 1000.0, 50.0))
    assert rag["levers"].startswith("a faster GPU (TP8 fills a node of 8), trimmed or cached prompts")
    # a node's worth of GPUs would carry it: then auto goes up to TP8, not beyond
    dep, _, left = sizing.auto_tp(frame, fits, lambda tp: replace(fits, tp=tp),
                                  sizing.pair_classes(frame, 1200.0, 50.0))
    assert dep.tp == 8 and left == []


def test_a_tp_the_user_sets_beyond_one_node_says_it_spans_nodes(tmp_path: Path, capsys) -> None:
    log = tmp_path / "chat.csv"
    _chat_and_rag(1_000).to_csv(log, index=False)
    argv = ["plan", str(log), "--gpu", "h100", "--model", "llama-3.1-70b", "--method", "analytic", "--json"]
    assert main([*argv, "--tp", "16"]) == 0
    doc = json.loads(capsys.readouterr().out)
    spans = "TP16 spans 2 nodes of 8 H100 SXM5 80GB"
    assert doc["assumptions"]["tp_source"].startswith("set by user; " + spans)
    assert f"GPUs per replica: set by user; {spans}" in plan_text(doc)
    assert main([*argv, "--tp", "8"]) == 0
    assert json.loads(capsys.readouterr().out)["assumptions"]["tp_source"] == "set by user"


def _chat_and_agent() -> pd.DataFrame:
    # ten minutes of chat beside an agent whose 200k-token contexts no Llama-3.1-70B engine accepts (131,072 tokens)
    frame = _chat_and_rag(200_000)
    frame["product"] = frame["product"].replace({"rag": "agent"})
    return frame


def test_design_refuses_requests_beyond_the_context_window_as_plan_does() -> None:
    frame = _chat_and_agent()
    classes = resolve_classes(frame, {"*": (1000.0, 50.0)})
    doc = design_fleet(frame, classes, gpus=["h100-sxm"], prices={"h100-sxm": 2.79}, model="llama-3.1-70b",
                       precision=None, families=("shared",), top=1)
    dep, _, _ = sizing.default_deployment_for(None)
    _, plan, _, _ = sizing.fleet_answer(sizing.Workload.from_frame(frame), dep, frame, classes=classes)
    # the same product named, for the same reason, and the same requests refused
    (agent,) = doc["unreachable"]
    assert agent == next(u for u in plan.unreachable if u["product"] == "agent")
    assert agent["cause"] == "context" and agent["refused_share"] == 1.0
    assert doc["sized_on"]["refused"] == plan.sized_on["refused"] == 120
    assert doc["note"].startswith("no design serves agent: 100% of its requests")
    # the shared pool serves the chat as plan's fleet does: refused requests load no replica (before: it replayed
    # 120 prompts of 200k tokens and judged the agent, which no size met)
    (best,) = doc["designs"]
    assert best["meets"] and list(best["products"]) == ["chat"]
    assert doc["baseline"]["fleet"]["pools"][0]["replicas"] == plan.replicas


def test_a_fleets_pool_refuses_what_its_model_cannot_hold() -> None:
    # simulate --fleet: each pool's own model decides; on Llama-3.1-70B the agent is turned away, on a pool of a
    # model with a longer context window (Llama 4 Scout, 10M tokens) it is served
    frame = _chat_and_agent()
    classes = resolve_classes(frame, {"*": (1000.0, 50.0)})
    req = fleet_requests(frame)
    one = simulate_fleet(req, Fleet((Pool("all", replicas=2),), "llama-3.1-70b"), classes)
    assert len(one.requests) == 840 and set(one.requests["product"]) == {"chat"}
    assert any("120 of the pool's 960 requests (agent 120)" in n for n in one.pools[0].notes)
    two = simulate_fleet(req, Fleet((Pool("chat", ("chat",), replicas=2),
                                     Pool("long", ("agent",), replicas=2, model="llama-4-scout")), "llama-3.1-70b"),
                         classes)
    assert len(two.requests) == 960 and (two.requests["product"] == "agent").sum() == 120
    assert not any("context window" in n for r in two.pools for n in r.notes)


def test_design_sizes_replicas_within_one_node_of_each_gpu() -> None:
    # GH200 NVL2 holds two superchips per node: design's pools stop at TP2 there, as "auto" stops at a node (the
    # 20k-token RAG prompts then need more than a GH200 node; before, design tried TP4 and TP8 over the network)
    frame = _chat_and_rag(20_000)
    classes = resolve_classes(frame, {"*": (1000.0, 50.0)})
    doc = design_fleet(frame, classes, gpus=["gh200"], prices={"gh200": 3.2}, model="llama-3.1-70b", precision=None,
                       families=("per_product",), top=1)
    assert "rag on gh200: even unloaded, a class it serves is out of reach up to TP2" in doc["note"]
