"""4-bit precisions and MoE layouts: bytes per GPU pinned to hand computations, rates, collectives, refusals."""
from __future__ import annotations

import json

import numpy as np
import pytest

from shapeviz.physics import Deployment, get_model
from shapeviz.physics.catalogue import PRECISIONS, check_precision, get_precision
from shapeviz.physics.steps import (
    GIB,
    allreduce_s,
    alltoall_s,
    decode_step_s,
    load_efficiency,
    max_throughput,
    prefill_time_s,
    smallest_tp,
)


def test_block_scales_are_counted_in_the_bytes_per_weight() -> None:
    # NVFP4: 4-bit E2M1 + one FP8 E4M3 scale per 16 weights; MXFP4: 4-bit + one E8M0 scale per 32 weights.
    assert PRECISIONS["nvfp4"] == pytest.approx((4 + 8 / 16) / 8) == pytest.approx(0.5625)
    assert PRECISIONS["mxfp4"] == pytest.approx((4 + 8 / 32) / 8) == pytest.approx(0.53125)
    assert PRECISIONS["fp8"] == 1 and PRECISIONS["bf16"] == 2
    assert check_precision("FP4") == "nvfp4" and check_precision("fp16") == "bf16"
    assert get_precision("nvfp4").block_size == 16 and get_precision("mxfp4").block_size == 32


def test_gpt_oss_120b_plans_on_one_h100_in_its_native_mxfp4() -> None:
    dep = Deployment("gpt-oss-120b", "h100-sxm", None, tp=1)  # None: the model's native checkpoint
    assert dep.precision == "mxfp4"
    # Hand computation: routed experts in MXFP4, attention/router in BF16, embedding + lm_head in BF16.
    embeddings = 201_088 * 2_880 * 2                     # vocab × hidden, input table and untied lm_head
    experts = (116.83e9 - 5.71e9) / (1 - 4 / 128)        # total − active = experts × (1 − k/E)
    rest = 116.83e9 - embeddings - experts               # attention, router, norms, sinks
    expected = experts * 0.53125 + rest * 2 + embeddings * 2
    assert dep.weight_bytes_per_gpu == pytest.approx(expected)
    assert expected / GIB == pytest.approx(60.7, abs=0.1)
    # ...which leaves room for a real KV pool: at least 64 requests of 8k context on one 80 GB GPU.
    assert float(dep.max_batch_kv(8192)) >= 64
    assert float(max_throughput(dep, 1024, 1024)) > 0
    h200 = Deployment("gpt-oss-120b", "h200", None, tp=1)
    assert float(max_throughput(h200, 1024, 1024)) > float(max_throughput(dep, 1024, 1024))
    # In FP8 the same model needs 117 GB of weights: the refusal the issue quoted is right for FP8.
    with pytest.raises(ValueError, match="cannot hold"):
        Deployment("gpt-oss-120b", "h100-sxm", "fp8", tp=1)


def test_nvfp4_quantizes_every_linear_layer_of_a_dense_model() -> None:
    dep = Deployment("llama-3.3-70b", "b200", "nvfp4", tp=1)
    embeddings = 128_256 * 8_192 * 2
    expected = (70.55e9 - embeddings) * 0.5625 + embeddings * 2
    assert dep.weight_bytes_per_gpu == pytest.approx(expected)
    assert dep.kv_precision == "fp8"  # ModelOpt FP4 checkpoints keep an FP8 KV cache
    assert dep.compute_precision == "fp4" and not dep.fp8_emulated


def test_deepseek_r1_weights_and_kv_per_gpu_under_tp8_and_dep8() -> None:
    tp8 = Deployment("deepseek-r1", "h200", "fp8", tp=8)
    dep8 = Deployment("deepseek-r1", "h200", "fp8", tp=8, ep=8, attention_dp=True)
    embeddings = 129_280 * 7_168 * 2
    experts = (671.03e9 - 37.55e9) / (1 - 8 / 256)
    rest = 671.03e9 - embeddings - experts  # MLA attention, 3 dense layers, shared experts, routers
    # TP8: every weight split 8 ways (embeddings in BF16).
    assert tp8.weight_bytes_per_gpu == pytest.approx((experts + rest) * 1 / 8 + embeddings * 2 / 8)
    # DEP8: experts split 8 ways, everything else whole on every GPU.
    assert dep8.weight_bytes_per_gpu == pytest.approx(experts / 8 + rest * 1 + embeddings * 2)
    # MLA latent: (512 + 64) × 61 layers × 1 byte (FP8) = 35,136 bytes per token, not split by heads.
    latent = (512 + 64) * 61 * 1
    assert tp8.kv_bytes_per_token == pytest.approx(latent)
    assert tp8.kv_bytes_per_gpu(1000) == pytest.approx(latent * 1000)        # every TP rank holds all of it
    assert dep8.kv_bytes_per_gpu(1000) == pytest.approx(latent * 1000 / 8)   # one copy, on one GPU of 8
    # Attention-DP: whole sequences per GPU, so the batch is 8 × what one GPU's pool holds.
    pool = dep8.kv_pool_bytes_per_gpu(0.95)
    assert float(dep8.max_batch_kv(4096, 0.95)) == 8 * np.floor(pool / (latent * 4096))
    assert float(dep8.max_batch_kv(4096, 0.95)) > 4 * float(tp8.max_batch_kv(4096, 0.95))


def test_gqa_kv_heads_are_replicated_beyond_the_kv_heads_under_tp_but_not_under_dep() -> None:
    # Qwen3-235B-A22B: 4 KV heads × 128 dims × 94 layers × 2 (K and V) × 1 byte = 96,256 bytes per token in FP8.
    tp8 = Deployment("qwen3-235b-a22b", "h100-sxm", "fp8", tp=8)
    dep8 = Deployment("qwen3-235b-a22b", "h100-sxm", "fp8", tp=8, ep=8, attention_dp=True)
    per_token = 4 * 128 * 94 * 2 * 1
    assert tp8.kv_bytes_per_token == pytest.approx(per_token)
    assert tp8.kv_bytes_per_gpu(1) == pytest.approx(per_token * (8 / 4) / 8)  # each KV head on 2 of 8 GPUs
    assert dep8.kv_bytes_per_gpu(1) == pytest.approx(per_token / 8)


def test_expert_parallel_keeps_the_bytes_of_tp_and_pays_the_imbalance() -> None:
    tp8 = Deployment("qwen3-235b-a22b", "h100-sxm", "fp8", tp=8)
    ep8 = Deployment("qwen3-235b-a22b", "h100-sxm", "fp8", tp=8, ep=8)
    assert ep8.layout == "TP8 EP8" and ep8.weight_bytes_per_gpu == pytest.approx(tp8.weight_bytes_per_gpu)
    balanced = Deployment("qwen3-235b-a22b", "h100-sxm", "fp8", tp=8, ep=8,
                          efficiency=load_efficiency().replace(expert_imbalance=1.0))
    batch, context = np.array([1.0, 64.0, 512.0]), 2048.0
    assert decode_step_s(balanced, batch, context) == pytest.approx(decode_step_s(tp8, batch, context))
    assert load_efficiency().expert_imbalance > 1.0  # the stated assumption in data/efficiency.json
    assert np.all(decode_step_s(ep8, batch, context) > decode_step_s(tp8, batch, context))


def test_dep_replaces_all_reduces_with_an_all_to_all_on_the_expert_layers() -> None:
    eff = load_efficiency().replace(allreduce_latency_us=0.0)  # wire time only, to check the bytes
    dep8 = Deployment("qwen3-235b-a22b", "h200", "fp8", tp=8, ep=8, attention_dp=True, efficiency=eff)
    tp8 = Deployment("qwen3-235b-a22b", "h200", "fp8", tp=8, efficiency=eff)
    tokens = 4096.0
    assert float(allreduce_s(dep8, tokens)) == 0.0 and float(alltoall_s(tp8, tokens)) == 0.0
    # Each GPU sends its 512 tokens × 4096 hidden × 2 bytes to the GPUs of their experts: top-8 of 8 ranks hit
    # 1 − (7/8)^8 of the ranks, i.e. that share of the 7 others; the combine brings as much back; 94 MoE layers.
    per_layer = 512 * 4096 * 2 * (1 - (7 / 8) ** 8) * 7
    link = 450e9 * eff.allreduce_bus_efficiency
    assert float(alltoall_s(dep8, tokens)) == pytest.approx(94 * 2 * per_layer / link)
    # Two ring all-reduces of the whole 4096-token activation per layer cost more than the dispatch/combine.
    assert float(allreduce_s(tp8, tokens)) > float(alltoall_s(dep8, tokens))


def test_a_lone_request_under_attention_dp_runs_its_attention_on_one_gpu() -> None:
    tp8 = Deployment("deepseek-r1", "b200", "nvfp4", tp=8)
    dep8 = Deployment("deepseek-r1", "b200", "nvfp4", tp=8, ep=8, attention_dp=True)
    # Batch-1 latency of a long prompt: DEP does the attention of that one request on a single GPU.
    assert float(prefill_time_s(dep8, 32_000)) > float(prefill_time_s(tp8, 32_000))


def test_mla_decode_attention_runs_over_the_latent() -> None:
    m = get_model("deepseek-r1")
    # absorbed MLA: QKᵀ over 512 + 64 dims and PV over 512, for each of 128 heads
    assert m.attention_flops_per_context_token(decode=True) == 2 * 128 * (512 + 64) + 2 * 128 * 512
    assert m.attention_flops_per_context_token(decode=False) == 2 * 128 * (128 + 64) + 2 * 128 * 128
    assert get_model("llama-3.1-70b").attention_flops_per_context_token(decode=True) == 4 * 64 * 128


def test_each_precision_runs_at_the_rate_of_the_tensor_cores_the_gpu_has() -> None:
    b200 = Deployment("qwen3-235b-a22b", "b200", "nvfp4", tp=4, ep=4, attention_dp=True)
    assert b200.compute_precision == "fp4"
    assert b200.matmul_flops_per_gpu > Deployment("qwen3-235b-a22b", "b200", "fp8", tp=4).matmul_flops_per_gpu
    hopper = Deployment("llama-3.1-8b", "h100-sxm", "nvfp4", tp=1)  # no FP4 tensor cores: weight-only
    assert hopper.fp8_emulated and hopper.compute_precision == "bf16"
    assert "no FP4 tensor cores" in str(hopper.emulation_note)
    assert hopper.matmul_flops_per_gpu < hopper.matmul_rate("bf16")
    # gpt-oss: MXFP4 experts at the FP8 rate on Blackwell (W4A8), BF16 attention everywhere.
    oss = Deployment("gpt-oss-20b", "b200", None, tp=1)
    assert oss.compute_precision == "fp8" and oss.dense_flops_per_gpu == pytest.approx(oss.matmul_rate("bf16"))


def test_layouts_an_engine_cannot_run_are_refused_in_one_line() -> None:
    cases = [
        (dict(model="llama-3.1-70b", ep=2, tp=2), "dense"),
        (dict(model="llama-3.1-70b", attention_dp=True, tp=2), "dense"),
        (dict(model="qwen3-235b-a22b", attention_dp=True, tp=1, precision="nvfp4"), "at least 2 GPUs"),
        (dict(model="qwen3-235b-a22b", ep=3, tp=8), "divide"),
        (dict(model="mixtral-8x7b", ep=16, tp=16), "divide"),
    ]
    for kwargs, words in cases:
        kwargs.setdefault("precision", "fp8")
        with pytest.raises(ValueError, match=words) as info:
            Deployment(gpu="b200", **kwargs)
        assert "\n" not in str(info.value)
    with pytest.raises(ValueError, match="KV cache"):
        Deployment("llama-3.1-8b", "b200", "nvfp4", kv_precision="nvfp4")


def test_auto_tp_under_dep_looks_for_the_smallest_replica_that_fits() -> None:
    tp = smallest_tp("deepseek-r1", "b200", "nvfp4", ep=None, attention_dp=True)
    assert tp == 4  # 654B experts in NVFP4 over 4 GPUs + the rest whole: fits 180 GB, 2 GPUs do not
    assert Deployment("deepseek-r1", "b200", "nvfp4", tp=tp, ep=tp, attention_dp=True).layout == "DEP4"


def test_new_catalogue_models_have_their_published_shapes() -> None:
    scout, maverick = get_model("Llama-4-Scout-17B-16E-Instruct"), get_model("llama4 maverick")
    assert (scout.experts, maverick.experts) == (16, 128) and scout.experts_per_token == 1
    assert scout.active_params == pytest.approx(maverick.active_params) == pytest.approx(17.17e9)
    assert maverick.moe_layers == 24 and scout.moe_layers == 48
    assert get_model("deepseek-r1").id == "deepseek-r1" and get_model("deepseek-v3").id == "deepseek-v3"
    assert get_model("gpt-oss-120b").native_precision == "mxfp4"
    assert get_model("kimi-k2").attention == "mla"


def test_plan_cli_takes_the_layout_options(tmp_path) -> None:
    from shapeviz.cli import main

    out = tmp_path / "plan.json"
    import contextlib
    import io

    buffer = io.StringIO()
    with contextlib.redirect_stdout(buffer):
        assert main(["plan", "--model", "qwen3-235b-a22b", "--gpu", "h200", "--tp", "8", "--attention-dp",
                     "--isl", "1024", "--osl", "1024", "--json"]) == 0
    out.write_text(buffer.getvalue())
    detail = json.loads(out.read_text())["deployment_detail"]
    assert (detail["layout"], detail["ep"], detail["attention_dp"]) == ("DEP8", 8, True)
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()) as err:
        assert main(["plan", "--model", "llama-3.1-70b", "--gpu", "h100", "--tp", "2", "--ep", "2",
                     "--isl", "1024", "--osl", "128"]) == 2
    assert "dense" in err.getvalue() and "Traceback" not in err.getvalue()


def test_deployment_comparison_covers_b200_fp4_and_h200_dep8() -> None:
    from shapeviz.serving.compare import compare_deployments, precisions_for
    from shapeviz.serving.planner import Workload

    assert "nvfp4" in precisions_for("qwen3-235b-a22b", "b200")
    assert "nvfp4" not in precisions_for("qwen3-235b-a22b", "h200")      # no FP4 tensor cores on Hopper
    assert "mxfp4" in precisions_for("gpt-oss-120b", "h100-sxm")         # but gpt-oss ships in it
    table = compare_deployments(Workload.fixed(2000, 500, rate_rps=20.0), "qwen3-235b-a22b",
                                gpus=["b200", "h200"], tps=(4, 8))
    configs = set(zip(table["gpu"], table["precision"], table["layout"]))
    assert ("B200 (HGX/DGX) 180GB", "nvfp4", "DEP4") in configs
    assert ("H200 SXM 141GB", "fp8", "DEP8") in configs and ("H200 SXM 141GB", "fp8", "TP8") in configs
    assert table["usd_per_million_tokens"].notna().all()


def test_softmax_exponentials_bound_attention_on_blackwell_but_not_on_hopper() -> None:
    mfu = load_efficiency().mfu
    # B200: 148 SMs × 16 exponentials per clock × 1.856 GHz = 4.39e12/s; a 128-dim head does 4 × 128 = 512 FLOPs
    # per score (QKᵀ and PV), so the SFU allows 2.25 PFLOPS of attention, less than FP8 MAMF (3,432 TFLOPS).
    b200 = Deployment("qwen3-235b-a22b", "b200", "nvfp4", tp=4, ep=4, attention_dp=True)
    assert b200.attention_rate(decode=False) == pytest.approx(148 * 16 * 1.8557e9 * 512 * mfu, rel=1e-3)
    assert b200.attention_rate(decode=False) < b200.attention_flops_per_gpu
    # H100: 132 × 16 × 1.829 GHz × 512 = 1.98 PFLOPS, above its FP8 MAMF (1,403): the tensor cores bound it.
    h100 = Deployment("qwen3-235b-a22b", "h100-sxm", "fp8", tp=8)
    assert h100.attention_rate(decode=False) == pytest.approx(1402.6e12 * mfu)
    # gpt-oss's 64-dim heads: 256 FLOPs per exponential, half the bound.
    oss = Deployment("gpt-oss-20b", "b200", None, tp=1)
    assert oss.attention_rate(decode=False) == pytest.approx(148 * 16 * 1.8557e9 * 256 * mfu, rel=1e-3)
