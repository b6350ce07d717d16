"""The GPU and model catalogues: coverage, sources, forgiving ids, model shapes a planner relies on, SLO ranges."""
from __future__ import annotations

import pandas as pd
import pytest

from shapeviz.analyses.shapes import SHAPES
from shapeviz.physics import get_gpu, get_model, list_gpus, list_models
from shapeviz.physics.catalogue import DATA_DIR
from shapeviz.serving import slo_range, slo_ranges

REQUIRED_GPUS = ["a100-40gb", "a100-80gb", "a100-pcie", "h100-sxm", "h100-pcie", "h200", "b200", "l40s", "l4", "mi300x"]
REQUIRED_MODELS = ["llama-3.1-8b", "llama-3.1-70b", "llama-3.1-405b", "qwen3-32b", "qwen3-235b-a22b",
                   "mixtral-8x7b", "deepseek-v3", "gpt-oss-120b"]


def test_catalogues_cover_the_hardware_and_models_a_meeting_asks_about() -> None:
    assert set(REQUIRED_GPUS) <= set(list_gpus())
    assert set(REQUIRED_MODELS) <= set(list_models())


@pytest.mark.parametrize("name", ["gpus.csv", "models.csv"])
def test_every_catalogue_row_names_its_source(name: str) -> None:
    table = pd.read_csv(DATA_DIR / name)
    assert table["source"].notna().all() and (table["source"].str.len() > 20).all()


def test_gpu_figures_match_the_published_specs(reference) -> None:
    """The catalogue's peaks are the shared reference's, row for row (a typo would show up here)."""
    ref = pd.read_csv(reference / "gpu_specs.csv").set_index("gpu")
    for ref_name, gpu_id in [("H100 SXM5 80GB", "h100-sxm"), ("A100 PCIe 80GB", "a100-pcie"),
                             ("MI300X 192GB", "mi300x"), ("L4 24GB", "l4"), ("B200 (HGX/DGX) 180GB", "b200")]:
        row, gpu = ref.loc[ref_name], get_gpu(gpu_id)
        assert gpu.hbm_bw_tbps == pytest.approx(row["hbm_bw_TBps"])
        assert gpu.bf16_tflops == pytest.approx(row["bf16_dense_TFLOPS"])
        assert gpu.scaleup_gbps == pytest.approx(row["scaleup_bw_unidir_GBps_per_gpu"])
        assert gpu.memory_gb == pytest.approx(row["mem_GB"])


@pytest.mark.parametrize("query", ["h100", "H100-SXM", "h100_sxm", "H100 SXM5 80GB", " h100-sxm "])
def test_gpu_ids_are_forgiving(query: str) -> None:
    assert get_gpu(query).id == "h100-sxm"


@pytest.mark.parametrize("query", ["llama-3.1-70b", "Llama-3.1-70B", "llama70b", "meta-llama/Llama-3.1-70B-Instruct"])
def test_model_ids_are_forgiving(query: str) -> None:
    assert get_model(query).id == "llama-3.1-70b"


def test_an_unknown_id_names_the_known_ones_in_one_line() -> None:
    with pytest.raises(ValueError) as err:
        get_gpu("h900")
    message = str(err.value)
    assert "'h900'" in message and "h100-sxm" in message and "mi300x" in message and "\n" not in message
    with pytest.raises(ValueError, match="llama-3.1-8b"):
        get_model("llama-9-1b")


def test_every_model_has_its_context_limit_with_a_source() -> None:
    """config generation caps max-model-len there: a missing or zero limit would silently drop the cap."""
    table = pd.read_csv(DATA_DIR / "models.csv").set_index("id")
    for model_id in list_models():
        limit = get_model(model_id).max_context_tokens
        assert isinstance(limit, int) and limit > 0, model_id
        assert "max_context_tokens:" in table.loc[model_id, "source"], model_id
    # Optional YaRN extensions are not counted: Qwen's limits stay the config.json's, below 131,072.
    assert get_model("qwen2.5-72b").max_context_tokens < get_model("llama-3.1-70b").max_context_tokens


def test_kv_bytes_per_token_follow_from_the_attention_shape() -> None:
    """2 (K and V) × layers × KV heads × head dim × 2 bytes, for every grouped-query model."""
    for model_id in list_models():
        m = get_model(model_id)
        if m.attention == "gqa":
            assert m.kv_bytes_per_token_bf16_full == 2 * m.layers * m.kv_heads * m.head_dim * 2, model_id


def test_mla_caches_a_latent_far_smaller_than_gqa() -> None:
    ratio = get_model("llama-3.1-70b").kv_bytes_per_token_bf16 / get_model("deepseek-v3").kv_bytes_per_token_bf16
    assert 4.0 < ratio < 5.5  # physics reference: about 4.7× smaller


def test_gpt_oss_long_context_kv_is_half_of_full_attention() -> None:
    m = get_model("gpt-oss-120b")
    assert m.kv_bytes_per_token_bf16 == pytest.approx(m.kv_bytes_per_token_bf16_full / 2)


def test_moe_models_split_active_and_total_parameters() -> None:
    for model_id, total_b, active_b in [("qwen3-235b-a22b", 235.09, 22.19), ("mixtral-8x7b", 46.7, 12.88),
                                        ("deepseek-v3", 671.03, 37.55)]:
        m = get_model(model_id)
        assert m.is_moe and m.total_params / 1e9 == pytest.approx(total_b) and m.active_params / 1e9 == pytest.approx(active_b)
        # active = shared + experts·k/E, with the expert pool derived from the two published counts
        shared = m.total_params - m.expert_params
        assert shared + m.expert_params * m.experts_per_token / m.experts == pytest.approx(m.active_params)
    assert not get_model("llama-3.1-70b").is_moe


def test_slo_ranges_cover_every_shape_and_match_the_published_ones() -> None:
    assert set(slo_ranges()["shape"]) == set(SHAPES)
    assert slo_range("autocomplete") == (50, 200, 10, 35)
    assert slo_range("chat") == (100, 500, 15, 50)
    assert slo_range("rag") == (400, 1200, 25, 60)
    assert (slo_ranges()["source"].str.len() > 10).all()
    for shape in SHAPES:
        ttft_lo, ttft_hi, tpot_lo, tpot_hi = slo_range(shape)
        assert ttft_lo < ttft_hi and tpot_lo < tpot_hi
    with pytest.raises(ValueError, match="rag"):
        slo_range("batch")
