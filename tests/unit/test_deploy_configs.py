"""Engine configs and the Kubernetes manifest: every emitted flag exists in the engine's own argument parser (as
extracted from its pinned source into data/engine_cli_source.json, and as described in data/engine_flags.json),
every value parses as its type and says where it came from, and the values follow the plan and the log."""
from __future__ import annotations

import json
import shlex
import subprocess
from functools import lru_cache
from pathlib import Path

import numpy as np
import pytest

from shapeviz.ingest import load_log
from shapeviz.outputs.deploy import (
    check_args,
    check_command,
    check_yaml_keys,
    deployment_bundle,
    load_flags,
)
from shapeviz.outputs.deploy.build import (
    config_dict,
    longest_context,
    prefix_signal,
    settings_dict,
)
from shapeviz.outputs.deploy.flags import check_value
from shapeviz.outputs.deploy.settings import CONTEXT_HEADROOM, CONTEXT_ROUND, SOURCES
from shapeviz.physics import Deployment, get_gpu, get_model
from shapeviz.serving import WhatIf, Workload
from tests.needs import require_module

yaml = require_module("yaml", "the emitted manifest and TensorRT-LLM options are checked by parsing them as YAML")

ENGINES = ("vllm", "sglang", "trtllm")
DEP = Deployment(get_model("llama-3.1-70b"), get_gpu("h100-sxm"), "fp8", tp=2)


def _shape_bundle(engine: str, isl: int = 2048, osl: int = 256, rate: float = 20.0, **kw):
    w = Workload.fixed(isl, osl, rate_rps=rate)
    return deployment_bundle(w, DEP, engine=engine, ttft_slo_ms=1000, tpot_slo_ms=50,
                             max_context_tokens=isl + osl, context_source="assumed", **kw)


MOONCAKE = "mooncake_fast25/conversation_trace.jsonl.gz"
MAX_LEN_FLAG = {"vllm": "--max-model-len", "sglang": "--context-length", "trtllm": "--max_seq_len"}


@lru_cache(maxsize=2)
def _frame(path: Path):
    return load_log(path).frame


@pytest.fixture(scope="module")
def mooncake(traces):
    """The Mooncake conversation trace (block hashes: prefix reuse is visible)."""
    return _frame(traces / MOONCAKE)


def _log_bundle(frame, engine: str, layout: str = "all", dep: Deployment = DEP):
    w = Workload.from_frame(frame)
    return deployment_bundle(w, dep, engine=engine, ttft_slo_ms=5000, tpot_slo_ms=50,
                             max_context_tokens=longest_context(frame), context_source="measured",
                             prefix=prefix_signal(frame), layout=layout)


def _script_args(script: str) -> list[str]:
    """The arguments a bash ``args=( ... )`` array of the script holds (comments dropped as bash does)."""
    body = script.split("args=(\n", 1)[1].split("\n)\n", 1)[0]
    return shlex.split(body, comments=True)


def _all_problems(cfg) -> list[str]:
    problems = check_args(cfg.engine, cfg.argv())
    problems += check_command(cfg.engine, " ".join([cfg.command, *map(shlex.quote, cfg.model_args()),
                                                    *map(shlex.quote, cfg.argv())]))
    if cfg.yaml_options:
        problems += check_yaml_keys(cfg.engine, cfg.plain_yaml_options())
    return problems


SOURCE_FLAGS = Path(__file__).resolve().parents[2] / "data" / "engine_cli_source.json"
NO_VALUE = ("flag", "bool_optional")


@lru_cache(maxsize=1)
def _source_flags() -> dict:
    """Every flag of each engine's own argument parser, extracted from its source (scripts/extract_engine_flags.py)."""
    return json.loads(SOURCE_FLAGS.read_text(encoding="utf-8"))["engines"]


def _parses(spec: dict, value: str) -> bool:
    kind = spec["type"]
    if kind == "int":
        return value.lstrip("-").isdigit()
    if kind == "float":
        try:
            return np.isfinite(float(value))
        except ValueError:
            return False
    if kind == "choice":
        return spec["choices"] == "dynamic" or value in spec["choices"]
    if kind == "json":
        try:
            return isinstance(json.loads(value), dict)
        except json.JSONDecodeError:
            return False
    return value != ""   # str, list: any non-empty text


def _engine_rejects(engine: str, words: list[str]) -> list[str]:
    """What the engine's own parser (as read from its source) would refuse in these arguments."""
    flags, problems, i = _source_flags()[engine]["flags"], [], 0
    while i < len(words):
        word = words[i]
        spec = flags.get(word)
        if spec is None:
            problems.append(f"{engine}: {word!r} is not a flag of the engine's parser")
            i += 1
        elif spec["type"] in NO_VALUE:
            i += 1
        elif i + 1 >= len(words) or words[i + 1] in flags:
            problems.append(f"{engine}: {word} needs a {spec['type']} value")
            i += 1
        else:
            if not _parses(spec, words[i + 1]):
                problems.append(f"{engine}: {word} {words[i + 1]!r} does not parse as {spec['type']}")
            i += 2
    return problems


def _emitted(cfg) -> list[str]:
    """The config's flags and values as the engine receives them (the positional model path left out)."""
    model = cfg.model_args()
    return (model if model and model[0].startswith("--") else model[1:]) + cfg.argv()


@pytest.mark.parametrize("engine", ENGINES)
def test_every_flag_of_every_layout_exists_and_parses(engine):
    bundle = _shape_bundle(engine)
    assert set(bundle.configs) == {"colocated", "disaggregated"}
    roles = [c.role for c in bundle.all_configs()]
    assert roles == ["colocated", "prefill", "decode"]
    for cfg in bundle.all_configs():
        assert _all_problems(cfg) == []
        assert _engine_rejects(engine, _emitted(cfg)) == []


def test_the_engine_source_check_rejects_what_the_parser_would_reject():
    # Not vacuous: a flag renamed by one letter, a value of the wrong type and an unknown choice all fail.
    assert _engine_rejects("vllm", ["--max-num-seq", "8"])[0] == "vllm: '--max-num-seq' is not a flag of the engine's parser"
    assert _engine_rejects("vllm", ["--max-num-seqs", "8.5"]) and _engine_rejects("sglang", ["--kv-cache-dtype", "fp4"])
    assert _engine_rejects("trtllm", ["--tensor-parallel-size", "2"]) and not _engine_rejects("trtllm", ["--tp_size", "2"])
    assert _engine_rejects("vllm", ["--tensor-parallel-size"]) and not _engine_rejects("vllm", ["--no-enable-prefix-caching"])


def test_the_engine_source_file_says_where_each_engine_was_read():
    engines = _source_flags()
    assert set(engines) == set(ENGINES)
    for name, engine in engines.items():
        pinned = engine.get("sha256") or engine.get("commit")
        assert pinned and len(pinned) in (40, 64) and engine["paths"] and engine["release"], name
        assert len(engine["flags"]) > 30, name   # the whole parser, not only what shapeviz emits
        for flag, spec in engine["flags"].items():
            assert flag.startswith("--") and spec["file"] in engine["paths"], (name, flag)


@pytest.mark.parametrize("engine", ENGINES)
def test_every_value_says_where_it_came_from(engine):
    for cfg in _shape_bundle(engine).all_configs():
        for a in (*cfg.args, *cfg.defaults):
            assert a.source in SOURCES and a.why.strip(), a
        script = cfg.shell()
        inside = script.split("args=(\n", 1)[1].split("\n)\n", 1)[0].splitlines()
        assert inside and all("# " in line for line in inside)   # one comment per argument line
        if cfg.yaml_options:
            values = [ln for ln in cfg.trtllm_yaml().splitlines() if ln.strip() and not ln.lstrip().startswith("#")
                      and not ln.rstrip().endswith(":")]
            assert values and all(" # " in ln for ln in values)


@pytest.mark.parametrize("engine", ENGINES)
def test_the_script_is_valid_bash_and_passes_exactly_the_checked_arguments(engine, tmp_path):
    for cfg in _shape_bundle(engine).all_configs():
        script = cfg.shell()
        assert _script_args(script) == cfg.argv()
        path = tmp_path / f"{cfg.role}.sh"
        path.write_text(script)
        assert subprocess.run(["bash", "-n", str(path)], capture_output=True).returncode == 0


def test_the_checker_rejects_what_an_engine_would_reject():
    # Not vacuous: a renamed flag, a bad number and a value outside the read choices all fail.
    assert check_args("vllm", ["--max-num-seq", "8"])[0] == "vllm: unknown flag '--max-num-seq'"
    assert check_args("vllm", ["--max-num-seqs", "8.5"])
    assert check_args("vllm", ["--kv-cache-dtype", "fp4"])
    assert check_args("vllm", ["--gpu-memory-utilization", "1.2"])
    assert check_args("sglang", ["--disable-radix-cache", "true"])   # a switch takes no value
    assert check_args("trtllm", ["--tensor-parallel-size", "2"])      # vLLM's name, not trtllm-serve's
    assert check_yaml_keys("trtllm", {"kv_cache_config": {"dtype": "int4"}})
    assert check_command("vllm", "vllm serve --max-num-seqs 8") != []   # the model is missing
    assert check_value({"type": "json", "json_keys": {"kv_role": ["kv_both"]}}, '{"kv_role":"x"}')


def test_the_flags_file_names_its_sources_and_versions():
    doc = load_flags()
    known = {"int", "float", "str", "choice", "flag", "bool_optional", "json", "bool"}
    for name, engine in doc["engines"].items():
        assert engine["version"] and engine["source"] and engine["command"], name
        for flag, spec in {**engine["flags"], **engine.get("yaml_keys", {})}.items():
            assert spec["type"] in known and spec["source"], (name, flag)
            if spec["type"] == "choice":
                assert spec["choices"], (name, flag)


def test_values_follow_the_plan():
    bundle = _shape_bundle("vllm")
    p, s = bundle.plan, bundle.settings
    colo = bundle.configs["colocated"][0]
    argv = colo.argv()

    def value(flag: str) -> str:
        return argv[argv.index(flag) + 1]

    assert value("--tensor-parallel-size") == str(DEP.tp)
    assert colo.replicas.value == p.replicas
    assert int(value("--max-model-len")) >= 2048 + 256            # the longest context fits
    assert int(value("--max-num-batched-tokens")) >= int(value("--max-num-seqs"))
    # The sequence cap is what the KV pool holds at the decode context: never more sequences than fit.
    assert int(value("--max-num-seqs")) <= float(DEP.max_batch_kv(2048 + 128))
    prefill, decode = bundle.configs["disaggregated"]
    assert prefill.replicas.value == p.disaggregated["prefill_replicas"]
    assert decode.replicas.value == p.disaggregated["decode_replicas"]
    assert s.memory["vllm_gpu_memory_utilization"].value <= 0.98


def test_bf16_and_a_user_tp_change_the_flags_and_their_provenance():
    dep = Deployment(get_model("llama-3.1-8b"), get_gpu("h100-sxm"), "bf16", tp=2)
    w = Workload.fixed(1000, 200, rate_rps=5)
    b = deployment_bundle(w, dep, engine="vllm", ttft_slo_ms=1000, tpot_slo_ms=50, max_context_tokens=1200,
                          context_source="assumed", tp_source="assumed", layout="colocated")
    cfg = b.configs["colocated"][0]
    argv = cfg.argv()
    assert "--quantization" not in argv and argv[argv.index("--dtype") + 1] == "bfloat16"
    assert argv[argv.index("--kv-cache-dtype") + 1] == "auto"
    tp_arg = next(a for a in cfg.args if a.flag == "--tensor-parallel-size")
    assert tp_arg.source == "assumed" and "user" in tp_arg.why


@pytest.mark.parametrize("engine", ENGINES)
def test_a_real_trace_with_prefix_reuse_turns_caching_on(engine, mooncake):
    bundle = _log_bundle(mooncake, engine, layout="colocated")
    s = bundle.settings
    assert s.prefix_caching.value is True and s.prefix_caching.source == "estimated"
    longest = float((mooncake["input_tokens"] + mooncake["output_tokens"]).max())
    assert longest <= s.max_model_len.value <= DEP.model.max_context_tokens
    cfg = bundle.configs["colocated"][0]
    assert _all_problems(cfg) == [] and _engine_rejects(engine, _emitted(cfg)) == []
    if engine == "vllm":
        assert "--enable-prefix-caching" in cfg.argv()
    elif engine == "trtllm":
        assert cfg.plain_yaml_options()["kv_cache_config"]["enable_block_reuse"] is True
    else:   # SGLang's radix cache is on by default: nothing to pass, but the script says so
        assert "--disable-radix-cache" not in cfg.argv() and "prefix caching" in cfg.shell()


def _max_len_arg(cfg):
    return next(a for a in cfg.args if a.flag == MAX_LEN_FLAG[cfg.engine])


@pytest.mark.parametrize("engine", ENGINES)
def test_max_model_len_stops_at_the_models_own_limit_on_a_real_trace(engine, trace):
    """Mooncake's longest context + 10% is past Llama-3.1's 131,072 positions: the engine would refuse to start."""
    frame = _frame(trace(MOONCAKE))
    longest = longest_context(frame)
    limit = DEP.model.max_context_tokens
    assert longest <= limit < longest * (1 + CONTEXT_HEADROOM)    # the case the cap exists for
    bundle = _log_bundle(frame, engine, layout="colocated")
    s = bundle.settings
    assert s.max_model_len.value == limit == 131072 and s.max_model_len.source == "assumed"
    assert f"{longest:,.0f}" in s.max_model_len.why and "(measured, in the log)" in s.max_model_len.why
    cfg = bundle.configs["colocated"][0]
    arg = _max_len_arg(cfg)
    assert int(arg.value) == limit and _all_problems(cfg) == []
    note = s.context_note
    assert note and "measured longest context" in note and "131,072" in note and "capped" in note
    # The note travels with the plan (settings JSON), every config (JSON and the script's header).
    assert note in settings_dict(s)["notes"] and note in config_dict(cfg)["notes"]
    assert f"# note: {note}" in cfg.shell()


def test_a_log_longer_than_the_model_limit_says_such_requests_will_be_refused(trace):
    frame = _frame(trace(MOONCAKE))
    dep = Deployment(get_model("qwen3-8b"), get_gpu("h100-sxm"), "fp8", tp=1)
    longest, limit = longest_context(frame), dep.model.max_context_tokens
    assert longest > limit
    bundle = _log_bundle(frame, "vllm", layout="colocated", dep=dep)
    s = bundle.settings
    assert s.max_model_len.value == limit and s.max_model_len.source == "assumed"
    assert s.context_note == (f"measured longest context {longest:,.0f} tokens in the log, model limit {limit:,} "
                              f"(Qwen3-8B): requests longer than {limit:,} tokens will be refused by the engine; "
                              "trim or pick a longer-context model")
    assert s.context_note in bundle.configs["colocated"][0].shell()


def test_a_short_log_keeps_its_longest_context_plus_headroom(trace):
    frame = _frame(trace(MOONCAKE))
    short = frame[(frame["input_tokens"] + frame["output_tokens"]) <= 16_000].head(2000)
    longest = longest_context(short)
    assert 0 < longest <= 16_000
    s = _log_bundle(short, "vllm", layout="colocated").settings
    expected = -(-longest * (1 + CONTEXT_HEADROOM) // CONTEXT_ROUND) * CONTEXT_ROUND
    assert s.max_model_len.value == expected and s.max_model_len.source == "measured"
    assert s.context_note is None and not any("model limit" in n or "capped" in n for n in s.notes)


def test_a_log_without_reuse_signal_keeps_the_engine_default(trace):
    frame = load_log(trace("azure_llm_2023/AzureLLMInferenceTrace_code.csv")).frame
    assert prefix_signal(frame) is None
    cfg = _log_bundle(frame, "vllm", layout="colocated").configs["colocated"][0]
    assert not {"--enable-prefix-caching", "--no-enable-prefix-caching"} & set(cfg.argv())
    assert "vLLM's default kept" in cfg.shell()
    # A what-if cache hit rate is the user's assumption and decides.
    assert prefix_signal(frame, WhatIf(cache_hit=0.0)).hit_ratio_tokens == 0.0


@pytest.mark.parametrize("engine", ENGINES)
def test_the_manifest_parses_and_matches_the_configs(engine):
    bundle = _shape_bundle(engine)
    for layout, configs in bundle.configs.items():
        docs = [d for d in yaml.safe_load_all(bundle.manifest(layout)) if d]
        deployments = [d for d in docs if d["kind"] == "Deployment"]
        assert len(deployments) == len(configs)
        for d, cfg in zip(deployments, configs):
            assert d["spec"]["replicas"] == cfg.replicas.value
            container = d["spec"]["template"]["spec"]["containers"][0]
            assert container["resources"]["limits"]["nvidia.com/gpu"] == DEP.tp
            assert container["command"] == cfg.command.split()
            assert container["args"] == cfg.model_args() + cfg.argv()
            labels = d["spec"]["template"]["metadata"]["labels"]
            selector = d["spec"]["selector"]["matchLabels"]
            assert selector.items() <= labels.items()
            if layout == "disaggregated":
                assert labels["llm-d.ai/role"] == cfg.role
                assert labels["nvidia.com/dynamo-sub-component-type"] == cfg.role
        if engine == "trtllm":
            maps = [d for d in docs if d["kind"] == "ConfigMap"]
            assert len(maps) == len(configs)
            options = yaml.safe_load(next(iter(maps[0]["data"].values())))
            assert check_yaml_keys("trtllm", options) == []


def test_bad_requests_get_one_clear_line():
    with pytest.raises(ValueError, match="unknown engine"):
        _shape_bundle("tgi")
    with pytest.raises(ValueError, match="DNS label"):
        _shape_bundle("vllm").manifest("colocated", app="My App")
    with pytest.raises(ValueError, match="port"):
        _shape_bundle("vllm", port=70000)
    # A shape whose disaggregated split cannot meet the SLOs: asking for it says so.
    w = Workload.fixed(60000, 100, rate_rps=1)
    with pytest.raises(ValueError, match="disaggregated"):
        deployment_bundle(w, DEP, engine="vllm", ttft_slo_ms=100, tpot_slo_ms=50, max_context_tokens=60100,
                          context_source="assumed", layout="disaggregated")


def test_user_text_cannot_break_out_of_a_comment_or_an_argument():
    with pytest.raises(ValueError, match="model-path"):
        _shape_bundle("vllm", model_path="x\nrm -rf /")
    evil = "x; rm -rf / # $(reboot) `id` ' \""
    bundle = _shape_bundle("vllm", model_path=evil, layout="colocated")
    cfg = bundle.configs["colocated"][0]
    script = cfg.shell()
    assert all(line.startswith(("#", "args=(", "  ", ")", "exec ")) or not line for line in script.splitlines())
    words = shlex.split(script.splitlines()[-1])
    assert words[3] == evil   # the model path reaches the engine as one literal argument
    docs = [d for d in yaml.safe_load_all(bundle.manifest("colocated")) if d]
    assert docs[0]["spec"]["template"]["spec"]["containers"][0]["args"][0] == evil
    argv = cfg.model_args() + cfg.argv()
    assert all(type(word) is str for word in argv) and argv.count(evil) == 1   # plain strings, the path once
    assert np.isfinite(bundle.settings.memory["sglang_mem_fraction_static"].value)


@pytest.mark.parametrize("engine, expected", [
    ("vllm", {"--data-parallel-size": "8", "--enable-expert-parallel": None, "--tensor-parallel-size": "1"}),
    ("sglang", {"--ep-size": "8", "--enable-dp-attention": None, "--dp-size": "8", "--tp-size": "8"}),
    ("trtllm", {"--ep_size": "8", "--tp_size": "8"}),
])
def test_an_moe_plan_with_expert_and_attention_data_parallelism(engine, expected):
    dep = Deployment(get_model("deepseek-v3"), get_gpu("h200"), "fp8", tp=8, ep=8, attention_dp=True)
    w = Workload.fixed(2000, 500, rate_rps=5)
    b = deployment_bundle(w, dep, engine=engine, ttft_slo_ms=1000, tpot_slo_ms=50, max_context_tokens=2500,
                          context_source="assumed", layout="colocated")
    cfg = b.configs["colocated"][0]
    assert _all_problems(cfg) == [] and _engine_rejects(engine, _emitted(cfg)) == []
    argv = cfg.argv()
    for flag, value in expected.items():
        assert flag in argv and (value is None or argv[argv.index(flag) + 1] == value), flag
    if engine == "trtllm":
        assert cfg.plain_yaml_options()["enable_attention_dp"] is True
    if engine == "vllm":   # vLLM's cap is per data-parallel rank
        cap = b.settings.pools["colocated"].max_num_seqs.value
        assert int(argv[argv.index("--max-num-seqs") + 1]) == -(-cap // 8)
    dense = _shape_bundle(engine).configs["colocated"][0].argv()
    assert not {"--ep-size", "--ep_size", "--enable-expert-parallel", "--enable-dp-attention"} & set(dense)
