"""Physical properties of prefill, decode and KV memory that a capacity planner relies on."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from shapeviz.physics import (
    Deployment,
    balance_ratio,
    decode_step_s,
    default_deployment,
    max_throughput,
    prefill_time_s,
    request_gpu_seconds,
    smallest_tp,
)
from shapeviz.physics.steps import prefill_flops, smallest_tp_or_none


def test_default_deployment_is_llama70b_fp8_tp2_on_h100() -> None:
    dep = default_deployment()
    assert (dep.model.id, dep.gpu.id, dep.precision, dep.kv_precision, dep.tp) == (
        "llama-3.1-70b", "h100-sxm", "fp8", "fp8", 2)


def test_bf16_70b_does_not_fit_one_80gb_gpu_and_says_what_to_do() -> None:
    with pytest.raises(ValueError) as err:
        Deployment("llama-3.1-70b", "h100-sxm", "bf16", tp=1)
    assert "raise --tp" in str(err.value) and "\n" not in str(err.value)
    # the weights alone fit two GPUs, but leaving room for KV takes four; FP8 halves that
    assert smallest_tp_or_none("llama-3.1-70b", "h100-sxm", "bf16") == 2
    assert smallest_tp("llama-3.1-70b", "h100-sxm", "bf16") == 4
    assert smallest_tp("llama-3.1-70b", "h100-sxm", "fp8") == 2
    assert smallest_tp("llama-3.1-8b", "l4", "fp8") == 1


def test_kv_pool_binds_70b_on_one_80gb_gpu_at_long_contexts() -> None:
    one = Deployment("llama-3.1-70b", "h100-sxm", "fp8", tp=1)
    two = Deployment("llama-3.1-70b", "h100-sxm", "fp8", tp=2)
    assert one.max_batch_kv(32_768) <= 1        # a single 32k conversation nearly fills what the weights leave
    assert two.max_batch_kv(32_768) >= 10
    # so a decode-heavy shape gets several times more throughput per GPU from the second GPU's memory
    per_gpu_one = max_throughput(one, 128, 4096)
    per_gpu_two = max_throughput(two, 128, 4096) / 2
    assert per_gpu_two > 3 * per_gpu_one


def test_fp8_raises_decode_throughput() -> None:
    fp8 = Deployment("llama-3.1-70b", "h100-sxm", "fp8", tp=4)
    bf16 = Deployment("llama-3.1-70b", "h100-sxm", "bf16", tp=4)
    assert max_throughput(fp8, 128, 2048) > 1.5 * max_throughput(bf16, 128, 2048)
    assert decode_step_s(fp8, 64, 2_000) < decode_step_s(bf16, 64, 2_000)
    # an FP8 KV cache alone (BF16 weights) already shortens long-context steps
    fp8_kv = Deployment("llama-3.1-70b", "h100-sxm", "bf16", kv_precision="fp8", tp=4)
    assert decode_step_s(fp8_kv, 64, 16_000) < decode_step_s(bf16, 64, 16_000)


def test_fp8_on_a100_stores_fp8_bytes_but_computes_at_bf16() -> None:
    fp8 = Deployment("llama-3.1-70b", "a100-80gb", "fp8", tp=2)
    bf16 = Deployment("llama-3.1-70b", "a100-80gb", "bf16", tp=2)
    assert fp8.fp8_emulated and fp8.compute_precision == "bf16"
    assert fp8.matmul_flops_per_gpu == pytest.approx(bf16.matmul_flops_per_gpu)
    assert fp8.weight_bytes < 0.6 * bf16.weight_bytes
    # long prompts are compute-bound: no faster; small-batch decode is bandwidth-bound: faster
    assert prefill_time_s(fp8, 8_000) == pytest.approx(prefill_time_s(bf16, 8_000), rel=0.02)
    assert decode_step_s(fp8, 1, 1_000) < 0.7 * decode_step_s(bf16, 1, 1_000)


def test_more_tensor_parallelism_lowers_prefill_time() -> None:
    times = [float(prefill_time_s(Deployment("llama-3.1-70b", "h100-sxm", "fp8", tp=tp), 8_192)) for tp in (1, 2, 4, 8)]
    assert times == sorted(times, reverse=True)
    assert times[0] > 2 * times[-1]


def test_pcie_cards_are_bound_by_all_reduce_traffic(reference) -> None:
    """A100 PCIe vs SXM at TP8: the model reproduces the measured penalty of tensor parallelism over PCIe."""
    table = pd.read_csv(reference / "calibration" / "trtllm_max_throughput_h100_a100.csv")
    rows = table[(table["model"] == "Llama-3.1 70B") & (table["tp"] == 8) & (table["source_version"] == "v0.14.0")
                 & (table["isl"] == 128) & (table["osl"] == 2048)].set_index("gpu")["throughput_tokens_per_s"]
    measured = rows["A100 SXM4 80GB"] / rows["A100 PCIe 80GB"]
    sxm = Deployment("llama-3.1-70b", "a100-80gb", "bf16", tp=8)
    pcie = Deployment("llama-3.1-70b", "a100-pcie", "bf16", tp=8)
    predicted = max_throughput(sxm, 128, 2048) / max_throughput(pcie, 128, 2048)
    assert measured > 2 and predicted == pytest.approx(measured, rel=0.3)


def test_decode_turns_compute_bound_at_large_batch() -> None:
    dep = Deployment("llama-3.1-8b", "h100-sxm", "fp8", tp=1)
    small = decode_step_s(dep, 2, 256) / decode_step_s(dep, 1, 256)
    large = decode_step_s(dep, 2048, 256) / decode_step_s(dep, 1024, 256)
    assert small < 1.05      # memory-bound: one more sequence barely costs anything
    assert large > 1.8       # compute-bound: twice the sequences, nearly twice the time


def test_prefix_hits_cut_prefill_flops_and_time() -> None:
    dep = default_deployment()
    full = prefill_time_s(dep, 8_000)
    half = prefill_time_s(dep, 8_000, 4_000)
    assert half < 0.6 * full
    # causal attention: the cached half skipped its p² share, the linear part its 2·N·p
    assert prefill_flops(dep, 8_000, 4_000) == pytest.approx(
        prefill_flops(dep, 8_000) - 2 * (dep.model.active_params - dep.model.embedding_params) * 4_000
        - 2 * dep.model.layers * dep.model.heads * dep.model.head_dim * 4_000**2)


def test_moe_uses_active_params_for_flops_and_total_for_memory() -> None:
    moe = Deployment("mixtral-8x7b", "h100-sxm", "fp8", tp=2)
    m = moe.model
    per_token = (prefill_flops(moe, 2_000) - prefill_flops(moe, 1_000)) / 1_000
    assert per_token < 2 * 1.2 * m.active_params          # FLOPs follow the 12.9B active parameters …
    assert moe.weight_bytes > 0.95 * m.total_params       # … memory holds all 46.7B (FP8: 1 byte each)
    from shapeviz.physics.steps import _weight_read_bytes_per_gpu

    one, many = _weight_read_bytes_per_gpu(moe, np.array([1.0, 512.0])) * moe.tp
    assert one < 0.35 * many   # one token reads its 2 experts; a big batch touches all 8


def test_request_gpu_seconds_is_vectorised_and_splits_the_phases() -> None:
    dep = default_deployment()
    n = np.array([6_000, 800, 1_000])
    m = np.array([150, 2_500, 130])
    prefill, decode = request_gpu_seconds(dep, n, m)
    assert prefill.shape == decode.shape == (3,)
    assert prefill[0] > decode[0]            # RAG: prefill-heavy
    assert decode[1] > prefill[1]            # reasoning: decode-heavy
    with pytest.raises(ValueError, match="≥ 0"):
        request_gpu_seconds(dep, np.array([-1]), np.array([10]))


def test_balance_line_separates_prefill_from_decode_dominated_requests() -> None:
    dep = default_deployment()
    n = np.array([200.0, 2_000.0, 20_000.0])
    ratio = balance_ratio(dep, n)
    above_p, above_d = request_gpu_seconds(dep, n, 1.5 * ratio * n)
    below_p, below_d = request_gpu_seconds(dep, n, ratio * n / 1.5)
    assert np.all(above_d > above_p) and np.all(below_p > below_d)


def test_balance_line_moves_as_physics_says() -> None:
    dep = default_deployment()
    n = np.array([500.0, 4_000.0, 32_000.0])
    balance_output = balance_ratio(dep, n) * n
    # shorter prompts: decode dominates after fewer output tokens
    assert np.all(np.diff(balance_output) > 0)
    # more bandwidth for the same compute (H200 vs H100): where decode is bandwidth-bound (long contexts, small
    # batches), it gets cheaper and the line moves up; short contexts batch up to the compute bound, unchanged
    h200 = Deployment("llama-3.1-70b", "h200", "fp8", tp=2)
    assert np.all(balance_ratio(h200, n[1:]) > 1.3 * balance_ratio(dep, n[1:]))
    assert balance_ratio(h200, n[:1]) == pytest.approx(balance_ratio(dep, n[:1]), rel=0.1)
    # a BF16 KV cache doubles the KV read of long contexts: decode dominates sooner there
    bf16_kv = Deployment("llama-3.1-70b", "h100-sxm", "fp8", kv_precision="bf16", tp=2)
    assert balance_ratio(bf16_kv, n)[-1] < balance_ratio(dep, n)[-1]
    # a looser TPOT SLO allows a bigger decode batch: decode is cheaper per token
    assert np.all(balance_ratio(dep, n, tpot_slo_ms=100) >= balance_ratio(dep, n, tpot_slo_ms=20))


def test_bad_deployments_are_refused_with_one_line() -> None:
    for kwargs, fragment in [({"precision": "int4"}, "bf16, fp8"), ({"tp": 3}, "tp=3"), ({"tp": 0}, "tp=0")]:
        with pytest.raises(ValueError, match=fragment):
            Deployment("llama-3.1-8b", "h100-sxm", **kwargs)
