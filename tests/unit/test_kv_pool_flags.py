"""The KV pool as the engines set it: --kv-cache-tokens and --gpu-memory-utilization on plan, simulate and config.

The pool the user sets is the pool the plan sizes with, the pool the simulator replays on, and the pool each
engine's flags ask for; bad values end with one clear line.
"""
from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest

from shapeviz.cli import main
from shapeviz.outputs.deploy.flags import check_command, check_yaml_keys
from shapeviz.physics.catalogue import GIB
from shapeviz.physics.steps import Deployment

SHAPE = ["--isl", "2000", "--osl", "200", "--model", "llama-3.1-70b", "--gpu", "h100-sxm", "--tp", "4"]
SOURCE_FLAGS = json.loads((Path(__file__).resolve().parents[2] / "data" / "engine_cli_source.json")
                          .read_text())["engines"]


def _json(capsys, argv: list[str]) -> dict:
    assert main(argv + ["--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_a_small_kv_pool_is_what_the_plan_sizes_with(capsys):
    default = _json(capsys, ["plan", *SHAPE, "--rate", "20"])
    small = _json(capsys, ["plan", *SHAPE, "--rate", "20", "--kv-cache-tokens", "20000"])
    assert small["deployment_detail"]["kv_pool_tokens_per_replica"] == 20000
    # the default pool of 4 x H100 under the BF16 checkpoint's weights (the native precision is the default)
    assert default["deployment_detail"]["kv_pool_tokens_per_replica"] > 400_000
    assert "--kv-cache-tokens 20,000" in small["deployment_detail"]["kv_pool_source"]
    # ten 2.2k-token sequences fill 20k tokens: the batch is KV-capped, so more replicas are needed
    assert small["replicas"] > default["replicas"]


def test_gpu_memory_utilization_leaves_the_pool_vllm_would(capsys):
    d = _json(capsys, ["plan", *SHAPE, "--rate", "5", "--gpu-memory-utilization", "0.6"])
    dep = Deployment("llama-3.1-70b", "h100-sxm", None, None, 4)
    want = (0.6 * dep.gpu.memory_bytes - dep.weight_bytes_per_gpu - dep.eff.memory_reserve_gib * GIB) / GIB
    assert d["deployment_detail"]["kv_pool_gib_per_gpu"] == pytest.approx(want, rel=1e-6)
    assert want < 0.6 * dep.kv_pool_bytes_per_gpu() / GIB    # well below the default pool


def test_the_simulator_replays_on_the_pool_the_user_set(capsys):
    argv = ["simulate", *SHAPE, "--rate", "5", "--replicas", "1", "--requests", "300"]   # under the BF16 default pool, 8 req/s queues already
    default = _json(capsys, argv)
    small = _json(capsys, argv + ["--kv-cache-tokens", "20000"])
    assert small["settings"]["kv_pool_tokens_per_replica"] == 20000
    assert default["settings"]["kv_pool_tokens_per_replica"] > 400_000   # BF16 weights, the native default
    # a pool of nine sequences caps the running batch: requests queue for KV and wait
    assert small["queue_ms"]["p90"] > 10 * max(default["queue_ms"]["p90"], 1.0)
    assert small["kv_peak_share"] <= 1.0


@pytest.mark.parametrize("engine", ["vllm", "sglang", "trtllm"])
def test_config_writes_each_engines_kv_pool_flags(capsys, engine):
    d = _json(capsys, ["config", *SHAPE, "--rate", "5", "--engine", engine, "--layout", "colocated",
                       "--kv-cache-tokens", "141000", "--gpu-memory-utilization", "0.875"])
    cfg = d["layouts"]["colocated"][0]
    model = [] if engine == "sglang" else ["MODEL"]
    assert check_command(engine, shlex.join([*shlex.split(cfg["command"]), *model, *cfg["argv"]])) == []
    args = {a["flag"]: a["value"] for a in cfg["args"]}
    for flag in args:   # every flag the engine's own parser defines (its pinned source)
        assert flag in SOURCE_FLAGS[engine]["flags"], flag
    if engine == "vllm":
        assert args["--gpu-memory-utilization"] == "0.875"        # as given, not re-derived
        assert args["--block-size"] == "16" and args["--num-gpu-blocks-override"] == str(141000 // 16)
    elif engine == "sglang":
        assert args["--max-total-tokens"] == "141000"
        assert float(args["--mem-fraction-static"]) < 0.875       # SGLang's fraction leaves out the runtime
    else:
        options = cfg["yaml_options"]
        assert options["kv_cache_config"]["max_tokens"] == 141000
        assert check_yaml_keys("trtllm", options) == []
        assert 0 < float(args["--kv_cache_free_gpu_memory_fraction"]) < 1


def test_config_without_the_flags_keeps_the_plans_pool(capsys):
    d = _json(capsys, ["config", *SHAPE, "--rate", "5", "--engine", "vllm", "--layout", "colocated"])
    flags = {a["flag"] for a in d["layouts"]["colocated"][0]["args"]}
    assert "--num-gpu-blocks-override" not in flags and "--gpu-memory-utilization" in flags


@pytest.mark.parametrize("flags, says", [
    (["--kv-cache-tokens", "0"], "--kv-cache-tokens must be a whole number of tokens ≥ 1"),
    (["--kv-cache-tokens", "-5"], "--kv-cache-tokens must be a whole number of tokens ≥ 1"),
    (["--gpu-memory-utilization", "1.5"], "--gpu-memory-utilization must be a fraction in (0, 1]"),
    (["--gpu-memory-utilization", "0"], "--gpu-memory-utilization must be a fraction in (0, 1]"),
    (["--gpu-memory-utilization", "nan"], "--gpu-memory-utilization must be a fraction in (0, 1]"),
    (["--gpu-memory-utilization", "inf"], "--gpu-memory-utilization must be a fraction in (0, 1]"),
    (["--gpu-memory-utilization", "0.2"], "leaves no KV pool"),
    (["--kv-cache-tokens", "100000000"], "does not fit"),
], ids=["tokens-zero", "tokens-negative", "fraction-above-one", "fraction-zero", "fraction-nan", "fraction-inf",
        "fraction-below-weights", "tokens-too-many"])
@pytest.mark.parametrize("command", ["plan", "simulate", "config"])
def test_bad_kv_pool_values_get_one_clear_line(capsys, command, flags, says):
    assert main([command, *SHAPE, "--rate", "5", *flags]) == 2
    err = capsys.readouterr().err.strip()
    assert says in err and len(err.splitlines()) == 1 and "Traceback" not in err


# --- design: every pool the search tries has the pool set, and its fleet file keeps it -------------------------
def test_design_sizes_every_pool_on_the_kv_pool_set_and_config_keeps_it(tmp_path, capsys):
    from shapeviz.workload import synth

    frame = synth.scenario("shared_pool", 1200, seed=3)   # the brief's RAG search + coding agent, in 10 minutes
    start = frame["timestamp"].min()
    frame["timestamp"] = start + (frame["timestamp"] - start) / 144.0
    path = synth.write_log(frame, tmp_path / "brief.csv")
    d = _json(capsys, ["design", str(path), "--gpus", "h100", "--search-requests", "200", "--top", "1",
                       "--kv-cache-tokens", "150000"])
    fleet = d["designs"][0]["fleet"]
    assert [p["kv_cache_tokens"] for p in fleet["pools"]] == [150000] * len(fleet["pools"])
    fleet_file = tmp_path / "fleet.json"
    fleet_file.write_text(json.dumps(fleet))
    doc = _json(capsys, ["config", str(path), "--fleet", str(fleet_file), "--engine", "vllm"])
    for pool in doc["pools"]:
        for cfg in pool["configs"]:
            args = {a["flag"]: a["value"] for a in cfg["args"]}
            assert args["--num-gpu-blocks-override"] == str(150000 // 16)
            # the memory budget is the small pool's, not the capacity model's 90% of free memory
            assert float(args["--gpu-memory-utilization"]) < 0.8
    assert main(["design", str(path), "--gpu-memory-utilization", "2"]) == 2
    assert "--gpu-memory-utilization must be a fraction in (0, 1]" in capsys.readouterr().err
