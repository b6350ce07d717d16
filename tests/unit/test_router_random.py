"""The random router (the baseline every routing benchmark reports), and --block-size honoured by the command line."""
from __future__ import annotations

import json

import numpy as np
import pytest

from shapeviz.cli import build_parser, main
from shapeviz.fleet.routing import reuse_window, router_table
from shapeviz.ingest import load_log
from shapeviz.physics.steps import Deployment
from shapeviz.serving.planner import WhatIf
from shapeviz.serving.routers import ROUTERS
from shapeviz.serving import simulator
from shapeviz.serving.simulator import fixed_requests, simulate

SMALL_MODEL = Deployment("llama-3.1-8b", "h100-sxm", "fp8", None, 1)
SYNTHETIC = "mooncake_fast25/synthetic_trace.jsonl"


def _replicas(seed: int) -> np.ndarray:
    res = simulate(fixed_requests(1000, 100, 800), SMALL_MODEL, rate_rps=20.0, replicas=4, router="random", seed=seed)
    return res.requests["replica"].to_numpy()


# both event loops: the compiled one draws the Python router's stream (routers.random_words), prefix caches the other
@pytest.mark.parametrize("loop", ["compiled", "python"])
def test_the_random_router_is_seeded_uniform_and_not_in_turn(loop, monkeypatch):
    monkeypatch.setattr(simulator, "COMPILED", loop == "compiled")
    a, again, other = _replicas(1), _replicas(1), _replicas(2)
    assert np.array_equal(a, again)                     # the same seed, the same picks
    assert (a != other).mean() > 0.5                    # another seed, another draw
    shares = np.bincount(a, minlength=4) / a.size
    assert shares.min() > 0.18 and shares.max() < 0.32   # every replica gets about a quarter
    assert (a != np.arange(a.size) % 4).mean() > 0.5     # and not in turn: that would be round-robin
    # no load signal: unlike least-tokens, it leaves replicas unevenly loaded over any short stretch
    runs = [np.bincount(a[i:i + 40], minlength=4).max() for i in range(0, a.size, 40)]
    assert max(runs) >= 15


def test_random_is_offered_wherever_routers_are_listed(trace, capsys):
    choices = next(a.choices for a in build_parser()._subparsers._group_actions[0].choices["simulate"]._actions
                   if a.dest == "router")
    assert tuple(choices) == ROUTERS and "random" in ROUTERS
    assert main(["simulate", "--isl", "512", "--osl", "64", "--rate", "5", "--requests", "60", "--model",
                 "llama-3.1-8b", "--tp", "1", "--replicas", "3", "--router", "random", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["settings"]["router"] == "random"
    assert [r["requests"] > 0 for r in d["prefix"]["per_replica"]] == [True] * 3   # every replica drawn
    # the routing comparison runs it beside the others
    frame = load_log(trace(SYNTHETIC)).frame
    window = reuse_window(frame, WhatIf(), n=120)
    _, summary = router_table(window, SMALL_MODEL, 2.0, 2, 2000.0, 100.0, counts=(2,))
    assert "random" in set(summary["router"])


# --- --block-size through the command line -----------------------------------------------------------------------
@pytest.mark.parametrize("size", [128, 2048])
def test_simulate_honours_block_size_from_the_command_line(trace, capsys, size):
    path = str(trace(SYNTHETIC))
    # FP8 set, as this case was built on (the BF16 checkpoint's smaller KV pool evicts most reuse either way)
    args = ["simulate", path, "--model", "llama-3.1-8b", "--precision", "fp8", "--tp", "1", "--replicas", "2",
            "--requests", "400", "--router", "prefix", "--traffic", "0.2", "--json"]
    assert main(args) == 0
    inferred = json.loads(capsys.readouterr().out)["prefix"]
    assert main(args + ["--block-size", str(size)]) == 0
    given = json.loads(capsys.readouterr().out)["prefix"]
    assert inferred["block_size"] == 512            # the Mooncake hashes' own block size, inferred
    assert given["block_size"] == size and given["block_size_source"] != inferred["block_size_source"]
    # read with the wrong block size, the same hashes promise a different reuse
    assert given["hit_ratio_tokens"] != pytest.approx(inferred["hit_ratio_tokens"], abs=0.01)
