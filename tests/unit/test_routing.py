"""Prefix caches on replicas and the routers in front of them.

The simulator's caches must reproduce the offline analysis where the two describe the same thing (one replica,
an unbounded cache or an LRU cache of C blocks, on both Mooncake traces); routers are checked on hand-built logs
whose right answer is known; hashed logs read with the wrong block size are caught.
"""
from __future__ import annotations

import json
import math
from dataclasses import replace

import numpy as np
import pandas as pd
import pytest

from shapeviz.analyses.prefix import block_reuse, infer_block_size, prefix_reuse
from shapeviz.cli import main
from shapeviz.ingest import load_log
from shapeviz.physics.steps import Deployment
from shapeviz.serving import prefix_cache
from shapeviz.serving.planner import WhatIf
from shapeviz.serving.prefix_cache import PrefixCache
from shapeviz.serving.simulator import simulate

# a large KV pool at a fifth of the trace's rate: the replica keeps up, so only the cache decides the hits
SMALL_MODEL = Deployment("llama-3.1-8b", "h100-sxm", "fp8", None, 1)
SLOW = WhatIf(traffic_multiplier=0.2)
MOONCAKE = {"conversation": "mooncake_fast25/conversation_trace.jsonl.gz",
            "synthetic": "mooncake_fast25/synthetic_trace.jsonl"}


@pytest.fixture(scope="module")
def mooncake(traces):
    return {name: load_log(traces / rel).frame for name, rel in MOONCAKE.items()}


# --- the simulator's caches against the offline analysis -----------------------------------------------------
@pytest.mark.parametrize("name, blocks_pct", [("conversation", 36.64), ("synthetic", 63.96)])
def test_one_replica_with_an_unbounded_cache_reproduces_the_offline_hit_ratio(mooncake, name, blocks_pct):
    frame = mooncake[name]
    offline = block_reuse(frame, curve=False)
    res = simulate(frame, SMALL_MODEL, replicas=1, prefix_cache_blocks=math.inf, whatif=SLOW)
    p = res.prefix
    assert p["source"] == "block_hashes" and p["block_size"] == 512
    assert 100 * p["hit_ratio_blocks"] == pytest.approx(blocks_pct, abs=0.5)
    assert p["hit_ratio_tokens"] == pytest.approx(offline.hit_ratio_tokens, abs=0.005)
    # every request's cached tokens are its own simulated hit, in the per-request result too
    assert res.requests["cached_tokens"].sum() == pytest.approx(p["hit_ratio_tokens"] * frame["input_tokens"].sum(),
                                                                rel=1e-9)


@pytest.mark.parametrize("name, rows, capacity", [("conversation", 4000, 4000), ("synthetic", None, 4000),
                                                  ("synthetic", None, 960)])
def test_a_cache_of_c_blocks_lands_on_the_offline_lru_curve(mooncake, name, rows, capacity):
    frame = mooncake[name].sort_values("timestamp", kind="stable")
    frame = frame.head(rows) if rows else frame
    want = float(block_reuse(frame, capacities=[capacity]).curve.points["hit_ratio_tokens"].iloc[0])
    res = simulate(frame, SMALL_MODEL, replicas=1, prefix_cache_blocks=capacity, whatif=SLOW)
    assert 0.02 < want < 0.9   # a capacity where eviction matters
    assert res.prefix["hit_ratio_tokens"] == pytest.approx(want, abs=0.02)


def test_a_literal_cache_evicts_least_recently_used_blocks_and_never_a_running_one():
    cache = PrefixCache(block_size=16, capacity_blocks=4)
    cache.pin([1, 2, 3])
    cache.release([1, 2, 3], [1, 2, 3])
    cache.pin([7])                       # a running sequence holds block 7
    cache.release([], [8, 9])            # 1,2,3,8,9 cached + 7 in use: over 4, the oldest go
    cache.fit(0)
    assert list(cache.free) == [3, 8, 9] and cache.pinned == {7: 1} and cache.evicted == 2
    assert cache.match([3, 8, 1]) == 2 and cache.match([7, 3]) == 2
    pool = PrefixCache(block_size=16)     # engine mode: cached blocks live in the pool's free room
    pool.release([], [1, 2, 3, 4])
    pool.fit(room_tokens=40)
    assert list(pool.free) == [3, 4]


# --- routers on a hand-built log whose right answer is known ----------------------------------------------------
def _two_sessions(turns: int = 6, gap_s: float = 120.0) -> pd.DataFrame:
    """Sessions A and B, two turns at a time (A1 A2 B1 B2 A3 A4 ...): round-robin over two replicas sends every
    session's consecutive turns to different replicas. Each turn's prompt is the previous context + 300 tokens."""
    rows, ctx = [], {"A": 0, "B": 0}
    order = [s for k in range(turns // 2) for s in ("A", "A", "B", "B")]
    for i, s in enumerate(order):
        n = ctx[s] + 300
        rows.append({"timestamp": pd.Timestamp("2025-01-01", tz="UTC") + pd.Timedelta(seconds=gap_s * i),
                     "session_id": s, "input_tokens": n, "output_tokens": 100, "product": "chat"})
        ctx[s] = n + 100
    frame = pd.DataFrame(rows)
    frame["session_id"] = frame["session_id"].astype("category")
    frame["product"] = frame["product"].astype("category")
    return frame


@pytest.mark.parametrize("router", ["session", "prefix"])
def test_two_sessions_on_two_replicas_keep_their_context_with_affinity(router):
    frame = _two_sessions()
    res = simulate(frame, SMALL_MODEL, replicas=2, router=router)
    r = res.requests.assign(session=frame["session_id"].astype(str).to_numpy())
    first = r.groupby("session")["arrival_s"].transform("min") == r["arrival_s"]
    # every later turn finds its whole previous context (input + output) cached, floored to 16-token blocks
    prev_ctx = r["input_tokens"] - 300
    assert (r.loc[first, "cached_tokens"] == 0).all()
    assert (r.loc[~first, "cached_tokens"] == (prev_ctx[~first] // 16) * 16).all()
    assert r.groupby("session")["replica"].nunique().max() == 1
    assert res.prefix["source"] == "sessions" and res.prefix["hit_ratio_requests"] == pytest.approx(10 / 12)


def test_round_robin_splits_the_two_sessions_and_loses_their_reuse():
    frame = _two_sessions()
    rr = simulate(frame, SMALL_MODEL, replicas=2, router="round_robin")
    aff = simulate(frame, SMALL_MODEL, replicas=2, router="session")
    split = rr.requests.assign(s=frame["session_id"].to_numpy()).groupby("s", observed=True)["replica"].nunique()
    assert split.min() == 2
    # each turn finds what the same replica kept of its session: the context of the session's last turn there
    r = rr.requests.assign(s=frame["session_id"].astype(str).to_numpy())
    expected = []
    for i, row in r.iterrows():
        before = r[(r.index < i) & (r["s"] == row["s"]) & (r["replica"] == row["replica"])]
        ctx = int((before["input_tokens"] + before["output_tokens"]).max()) if len(before) else 0
        expected.append(ctx // 16 * 16)
    assert r["cached_tokens"].tolist() == expected
    assert rr.prefix["hit_ratio_tokens"] < 0.75 * aff.prefix["hit_ratio_tokens"]
    # one replica holds both sessions: nothing lost, the router only matters once there are more caches
    one = simulate(frame, SMALL_MODEL, replicas=1, router="round_robin")
    assert one.prefix["hit_ratio_tokens"] == pytest.approx(aff.prefix["hit_ratio_tokens"])


def test_a_trimmed_prompt_keeps_its_share_of_cached_tokens(mooncake):
    # the what-if's trim removes cached and uncached prompt tokens alike (as the planner's trim does): a trimmed
    # session turn must not find its untrimmed context covering nearly all of its shorter prompt
    frame = _two_sessions()
    whole = simulate(frame, SMALL_MODEL, replicas=2, router="session")
    trimmed = simulate(frame, SMALL_MODEL, replicas=2, router="session", whatif=WhatIf(trim_input=0.3))
    assert trimmed.prefix["hit_ratio_tokens"] == pytest.approx(whole.prefix["hit_ratio_tokens"], abs=0.03)
    uncached = [(r.requests["input_tokens"] - r.requests["cached_tokens"]).sum() for r in (whole, trimmed)]
    assert 0.6 < uncached[1] / uncached[0] < 0.8
    # a hashed log keeps each trimmed prompt's leading blocks only
    rows = mooncake["conversation"].iloc[:300]
    whole = simulate(rows, SMALL_MODEL, replicas=1, whatif=SLOW)
    trimmed = simulate(rows, SMALL_MODEL, replicas=1, whatif=replace(SLOW, trim_input=0.5))
    assert trimmed.prefix["hit_ratio_tokens"] <= whole.prefix["hit_ratio_tokens"] + 0.02


def _hot_prefix(n: int = 400) -> pd.DataFrame:
    """``n`` requests within two seconds, all opening with the same 32 blocks (a shared tool schema)."""
    hashes = [np.r_[np.arange(32), 1000 + 10 * i + np.arange(2)].astype(np.int64) for i in range(n)]
    return pd.DataFrame({
        "timestamp": pd.Timestamp("2025-01-01", tz="UTC") + pd.to_timedelta(np.linspace(0, 2, n), unit="s"),
        "input_tokens": 34 * 64, "output_tokens": 200, "hash_ids": hashes,
        "product": pd.Categorical(["agent"] * n)})


def test_the_load_guard_keeps_one_hot_prefix_from_piling_onto_one_replica(monkeypatch):
    frame = _hot_prefix()
    guarded = simulate(frame, SMALL_MODEL, replicas=2, router="prefix", block_size=64)
    share = guarded.requests["replica"].value_counts(normalize=True)
    assert len(share) == 2 and share.min() > 0.25
    assert guarded.prefix["block_size"] == 64 and guarded.prefix["hit_ratio_tokens"] > 0.8
    constants = prefix_cache.routing_constants()
    unguarded = json.loads(json.dumps(constants))
    unguarded["prefix_aware"]["balance_abs_threshold"]["value"] = 10**9
    monkeypatch.setattr("shapeviz.serving.routers.routing_constants", lambda: unguarded)
    piled = simulate(frame, SMALL_MODEL, replicas=2, router="prefix", block_size=64)
    assert piled.requests["replica"].value_counts(normalize=True).max() > 0.95
    assert piled.summary()["ttft_ms"]["p90"] > guarded.summary()["ttft_ms"]["p90"]


def test_a_log_without_hashes_or_sessions_keeps_todays_results_and_says_the_router_cannot_help(trace):
    frame = load_log(trace("azure_llm_2023/AzureLLMInferenceTrace_code.csv")).frame.head(400)
    rr = simulate(frame, SMALL_MODEL, replicas=2)
    pref = simulate(frame, SMALL_MODEL, replicas=2, router="prefix")
    lt = simulate(frame, SMALL_MODEL, replicas=2, router="least_tokens")
    pd.testing.assert_frame_equal(pref.requests, lt.requests)
    assert rr.prefix["source"] == "none" and rr.prefix["evicted_blocks"] is None
    assert any("no block hashes or sessions" in n for n in pref.notes)


# --- block size ----------------------------------------------------------------------------------------------
def _conversations_64(conversations: int = 60, turns: int = 4, new_tokens: int = 1200, seed: int = 0) -> pd.DataFrame:
    """Multi-turn conversations hashed in 64-token blocks (ceil, as Mooncake hashes: a partial last block has a
    hash of its own): turn t's prompt is turn t-1's prompt + its 120-token answer + ``new_tokens``."""
    rng = np.random.default_rng(seed)
    rows, t0 = [], pd.Timestamp("2025-01-01", tz="UTC")
    for c in range(conversations):
        n = 0
        for t in range(turns):
            n = n + (120 if t else 0) + int(new_tokens * rng.uniform(0.5, 1.5))
            ids = c * 10_000 + np.arange(-(-n // 64))
            if n % 64:
                ids[-1] = 5_000_000 + len(rows)
            rows.append({"timestamp": t0 + pd.Timedelta(seconds=30 * t + c), "input_tokens": n,
                         "output_tokens": 120, "hash_ids": ids.tolist()})
    return pd.DataFrame(rows).sort_values("timestamp", kind="stable").reset_index(drop=True)


def test_a_log_of_64_token_blocks_is_read_as_64_token_blocks(tmp_path, capsys):
    frame = _conversations_64()
    truth = prefix_reuse(frame, block_size=64).hit_ratio_tokens
    assert infer_block_size(frame) == (64, 1.0)
    assert 0.4 < truth < 0.7
    # read as Mooncake's 512-token blocks, each hit block would count 8 times over
    assert prefix_reuse(frame, block_size=512).hit_ratio_tokens > max(0.85, truth + 0.25)
    path = tmp_path / "agent.jsonl"
    with path.open("w") as f:
        for r in frame.itertuples(index=False):
            f.write(json.dumps({"timestamp": int(r.timestamp.timestamp() * 1000), "input_length": int(r.input_tokens),
                                "output_length": int(r.output_tokens), "hash_ids": r.hash_ids}) + "\n")
    assert main(["summary", str(path), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    block = doc["prefix_cache"] if "prefix_cache" in doc else doc["products"][0]["prefix_cache"]
    assert block["block_size"] == 64 and block["hit_ratio_tokens"] == pytest.approx(truth, abs=1e-9)
    # the simulator infers it too, and --block-size overrides it
    assert simulate(frame, SMALL_MODEL, prefix_cache_blocks=math.inf).prefix["block_size"] == 64
    assert simulate(frame, SMALL_MODEL, prefix_cache_blocks=math.inf, block_size=128).prefix["block_size"] == 128


def test_mooncake_hashes_are_512_token_blocks(mooncake):
    for frame in mooncake.values():
        assert infer_block_size(frame) == (512, 1.0)


# --- the command line ---------------------------------------------------------------------------------------
def test_simulate_json_reports_the_prefix_reuse_per_replica(trace, capsys):
    path = trace(MOONCAKE["synthetic"])
    assert main(["simulate", str(path), "--requests", "300", "--replicas", "3", "--router", "prefix",
                 "--model", "llama-3.1-8b", "--tp", "1", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    p = doc["prefix"]
    assert {"source", "hit_ratio_tokens", "hit_ratio_requests", "per_replica", "evicted_blocks"} <= set(p)
    assert p["source"] == "block_hashes" and p["router"] == "prefix" and len(p["per_replica"]) == 3
    assert 0 < p["hit_ratio_tokens"] < 1 and sum(r["requests"] for r in p["per_replica"]) == doc["requests"]
    assert doc["settings"]["router"] == "prefix"
    with pytest.raises(SystemExit) as exit_:
        main(["simulate", str(path), "--requests", "50", "--router", "nearest"])
    assert exit_.value.code == 2


def test_plan_and_config_with_a_router_plan_with_the_reuse_it_keeps(trace, capsys):
    path = str(trace("burstgpt/burstgpt3_slice.csv"))   # sessions, no hashes, no reported cached tokens
    assert main(["plan", path, "--json"]) == 0
    plain = json.loads(capsys.readouterr().out)
    assert main(["plan", path, "--router", "session", "--json"]) == 0
    routed = json.loads(capsys.readouterr().out)
    p = routed["prefix"]
    assert p["source"] == "sessions" and p["router"] == "session" and p["hit_ratio_tokens"] > 0.3
    assert plain["workload"]["mean_cached_tokens"] == 0 and "prefix" not in plain
    assert any("session affinity" in n for n in routed["notes"])
    assert main(["config", path, "--router", "prefix", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["router"]["router"] == "prefix" and "cache_aware" in doc["router"]["run_it_as"]
    assert doc["router"]["prefix"]["source"] == "sessions"
