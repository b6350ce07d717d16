"""The catalogues of GPUs and models (``data/gpus.csv``, ``data/models.csv``) and forgiving ids.

Every number comes from the data files, each row with its source. Ids are forgiving: case, spaces, dashes,
underscores and a parenthesised remark are ignored, and each row lists aliases (``h100``, ``H100-SXM``,
``h100_sxm``, ``llama70b`` all resolve). An unknown id raises ``ValueError`` naming the known ids.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache

import pandas as pd

from shapeviz.datadir import DATA_DIR

GIB = 2**30
MIB = 2**20


@dataclass(frozen=True)
class GPU:
    """One accelerator: memory, HBM bandwidth, dense peaks, scale-up bandwidth, assumed price."""

    id: str
    name: str
    memory_gb: float            # vendor figure
    memory_bytes: float         # usable total as the driver reports it (nvidia-smi), else vendor GB as GiB
    hbm_bw_tbps: float
    mamb_tbps: float | None     # measured max achievable HBM bandwidth (weight stream), when published
    bf16_tflops: float          # dense, no sparsity
    fp8_tflops: float | None    # None: no FP8 tensor cores (A100, A10G)
    mamf_bf16_tflops: float | None  # measured maximum achievable matmul FLOPS, when published
    mamf_fp8_tflops: float | None
    fp4_tflops: float | None    # dense FP4 (NVFP4/MXFP4 block-scaled) tensor-core peak; None: no FP4 tensor cores
    sfu_exp_per_s: float | None  # softmax exponentials per second (SMs × 16 × clock); None: not catalogued
    scaleup_gbps: float         # unidirectional GB/s per GPU on the tensor-parallel link
    scaleup_link: str
    usd_per_gpu_hour: float     # an assumption, see price_source
    price_source: str
    source: str
    notes: str
    # the datasheet's maximum board power, and the same silicon's full-power part whose achievable rate sustains at
    # its own power (power_source); a card with a peer runs compute-bound work at most at the peer's achievable
    # rate × tdp_w / the peer's tdp_w (``physics.steps.Deployment.matmul_rate``)
    tdp_w: float | None = None
    power_peer: str | None = None
    power_source: str = ""
    # GPUs one tensor-parallel replica can span on the scale-up link: one server's NVLink/xGMI/PCIe (8 on HGX-class
    # boards), the NVL72 rack for GB200 (gpus_per_node_source). A wider TP runs its all-reduces over the network
    # between nodes, which no engine deploys for one replica of a dense model.
    gpus_per_node: int = 8
    gpus_per_node_source: str = ""

    @property
    def has_fp8(self) -> bool:
        """Whether the GPU has FP8 tensor cores."""
        return self.fp8_tflops is not None

    @property
    def has_fp4(self) -> bool:
        """Whether the GPU has FP4 (block-scaled) tensor cores (Blackwell)."""
        return self.fp4_tflops is not None

    def has_tensor_cores_for(self, kind: str) -> bool:
        """Whether the GPU has tensor cores for ``kind`` ("bf16", "fp8" or "fp4")."""
        return {"bf16": True, "fp8": self.has_fp8, "fp4": self.has_fp4}[kind]

    @property
    def nvlink_class(self) -> bool:
        """True when tensor parallelism runs over a fast scale-up fabric (NVLink, XGMI, on-chip RoCE)."""
        return "pcie" not in self.scaleup_link.lower()


@dataclass(frozen=True)
class Model:
    """One model's shape: layers, heads, parameters (total and active) and KV cache per token."""

    id: str
    name: str
    layers: int
    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    attention: str              # "gqa" (incl. multi-head) or "mla" (compressed latent, not split by TP)
    vocab: int
    tie_embeddings: bool
    total_params: float         # parameters (not billions)
    active_params: float        # per token; equals total for dense models
    experts: int                # routed experts per MoE layer; 0 for dense
    experts_per_token: int
    kv_bytes_per_token_bf16_full: float  # every layer at full attention
    sliding_window: int | None
    sliding_layer_fraction: float
    source: str
    notes: str
    moe_layers: int = 0          # layers with routed experts (the others are dense); 0 for dense models
    four_bit_scope: str = "body"  # what a 4-bit checkpoint quantizes: "body" (all linear layers) or "experts"
    native_precision: str | None = None  # the precision the model ships in, if not BF16 (gpt-oss: mxfp4)
    mla_latent_dim: int = 0      # MLA: compressed KV latent per layer (DeepSeek 512); 0 for GQA
    mla_rope_dim: int = 0        # MLA: decoupled RoPE key dims per layer (DeepSeek 64)
    # The checkpoint's max_position_embeddings: the longest sequence an engine starts with (no optional YaRN
    # extension assumed); None when the catalogue row does not say.
    max_context_tokens: int | None = None

    @property
    def checkpoint_precision(self) -> str:
        """The precision of the checkpoint the model ships in: what a team serves when it chooses nothing."""
        return self.native_precision or "bf16"

    def attention_flops_per_context_token(self, decode: bool) -> float:
        """Attention-score FLOPs (QKᵀ and PV) per layer per query token per context token.

        GQA/MHA: ``4·H·d_h``. MLA decode runs "absorbed" over the cached latent: ``2·H·(d_c + d_r) + 2·H·d_c``;
        MLA prefill expands the heads: ``2·H·(d_h + d_r) + 2·H·d_h`` (qk head 128+64, v head 128 for DeepSeek).
        """
        if self.attention != "mla" or not self.mla_latent_dim:
            return 4.0 * self.heads * self.head_dim
        if decode:
            return 2.0 * self.heads * (2 * self.mla_latent_dim + self.mla_rope_dim)
        return 2.0 * self.heads * (2 * self.head_dim + self.mla_rope_dim)

    @property
    def is_moe(self) -> bool:
        """Mixture of experts: FLOPs follow the active parameters, memory the total."""
        return self.experts > 0

    @property
    def embedding_params(self) -> float:
        """Input embedding plus (if untied) the lm_head."""
        return self.vocab * self.hidden * (1 if self.tie_embeddings else 2)

    @property
    def kv_bytes_per_token_bf16(self) -> float:
        """KV bytes per token of a long context in BF16 (sliding-window layers stop growing)."""
        return self.kv_bytes_per_token_bf16_full * (1.0 - self.sliding_layer_fraction)

    @property
    def expert_params(self) -> float:
        """Routed-expert parameters (all experts); 0 for dense models.

        From total = shared + experts and active = shared + experts·k/E, so experts = (total − active)/(1 − k/E).
        """
        if not self.is_moe:
            return 0.0
        return (self.total_params - self.active_params) / (1.0 - self.experts_per_token / self.experts)


def _norm(text: str) -> str:
    """``"H100 SXM5 (80GB)"`` → ``"h100sxm5"``: case, punctuation and remarks in parentheses ignored."""
    text = re.sub(r"\(.*?\)", "", str(text)).lower()
    return re.sub(r"[^a-z0-9]", "", text)


# What people append to a model's name that does not change its shape: the tuning (instruct, chat), the
# quantisation a checkpoint was saved in (fp8, awq, gptq-int4, w8a16, dynamic), a host's label (turbo, latest)
# and a release date or version (2024-07-23, 20250514, 0324, v0.3). Stripped from the end, one at a time.
_DECORATION = re.compile(
    r"[-_ .:](instruct|chat|hf|base|it|turbo|latest|preview|dynamic|quantized|fp8|fp16|bf16|fp4|nvfp4|mxfp4|int4|"
    r"int8|awq|gptq|gguf|exl2|w4a16|w8a8|w8a16|w4a4|\d{4}-\d{2}-\d{2}|\d{8}|\d{4}|v\d+(?:\.\d+)*)$",
    re.IGNORECASE)


def _strip_decorations(text: str) -> str:
    """Drop an org prefix and the suffixes that leave the shape alone (``meta-llama/…-Instruct-FP8``, ``…-AWQ``,
    ``…-20240723``, ``…-v0.3``)."""
    text = str(text).split("/")[-1].strip()
    text = re.sub(r"^meta-(?=llama)", "", text, flags=re.IGNORECASE)
    while True:
        stripped = _DECORATION.sub("", text)
        if stripped == text or not stripped:
            return text
        text = stripped


def _index(ids: list[str], names: list[str], aliases: list[str], what: str) -> dict[str, str]:
    index: dict[str, str] = {}
    for row_id, name, alias_field in zip(ids, names, aliases):
        keys = {_norm(row_id), _norm(name)} | {_norm(a) for a in str(alias_field or "").split(";") if a.strip()}
        for key in keys:
            if key in index and index[key] != row_id:
                raise ValueError(f"{what} catalogue: alias {key!r} names both {index[key]} and {row_id}")
            index[key] = row_id
    return index


def _opt(value: object) -> float | None:
    return None if pd.isna(value) else float(value)


@lru_cache(maxsize=1)
def _gpus() -> tuple[dict[str, GPU], dict[str, str]]:
    frame = pd.read_csv(DATA_DIR / "gpus.csv", dtype={"aliases": str}, keep_default_na=True)
    gpus: dict[str, GPU] = {}
    for row in frame.itertuples(index=False):  # a catalogue of a dozen rows, not request data
        reported = _opt(row.memory_mib_reported)
        gpus[row.id] = GPU(
            id=row.id,
            name=row.name,
            memory_gb=float(row.memory_gb),
            memory_bytes=reported * MIB if reported else float(row.memory_gb) * GIB,
            hbm_bw_tbps=float(row.hbm_bw_tbps),
            mamb_tbps=_opt(row.mamb_tbps),
            bf16_tflops=float(row.bf16_dense_tflops),
            fp8_tflops=_opt(row.fp8_dense_tflops),
            mamf_bf16_tflops=_opt(row.mamf_bf16_tflops),
            mamf_fp8_tflops=_opt(row.mamf_fp8_tflops),
            fp4_tflops=_opt(row.fp4_dense_tflops),
            sfu_exp_per_s=None if _opt(row.sfu_exp_tera_per_s) is None else float(row.sfu_exp_tera_per_s) * 1e12,
            scaleup_gbps=float(row.scaleup_gbps_per_gpu),
            scaleup_link=str(row.scaleup_link),
            usd_per_gpu_hour=float(row.usd_per_gpu_hour),
            price_source=str(row.price_source),
            source=str(row.source),
            notes="" if pd.isna(row.notes) else str(row.notes),
            tdp_w=_opt(row.tdp_w),
            power_peer=None if pd.isna(row.power_peer) else str(row.power_peer),
            power_source="" if pd.isna(row.power_source) else str(row.power_source),
            gpus_per_node=int(row.gpus_per_node),
            gpus_per_node_source=str(row.gpus_per_node_source),
        )
    index = _index(list(frame["id"]), list(frame["name"]), list(frame["aliases"].fillna("")), "GPU")
    return gpus, index


@lru_cache(maxsize=1)
def _models() -> tuple[dict[str, Model], dict[str, str]]:
    frame = pd.read_csv(DATA_DIR / "models.csv", dtype={"aliases": str})
    models: dict[str, Model] = {}
    for row in frame.itertuples(index=False):
        experts = 0 if pd.isna(row.experts) else int(row.experts)
        models[row.id] = Model(
            id=row.id,
            name=row.name,
            layers=int(row.layers),
            hidden=int(row.hidden),
            heads=int(row.heads),
            kv_heads=int(row.kv_heads),
            head_dim=int(row.head_dim),
            attention=str(row.attention),
            vocab=int(row.vocab),
            tie_embeddings=bool(row.tie_embeddings),
            total_params=float(row.total_params_b) * 1e9,
            active_params=float(row.active_params_b) * 1e9,
            experts=experts,
            experts_per_token=0 if experts == 0 else int(row.experts_per_token),
            kv_bytes_per_token_bf16_full=float(row.kv_bytes_per_token_bf16),
            sliding_window=None if pd.isna(row.sliding_window) else int(row.sliding_window),
            sliding_layer_fraction=0.0 if pd.isna(row.sliding_layer_fraction) else float(row.sliding_layer_fraction),
            source=str(row.source),
            notes="" if pd.isna(row.notes) else str(row.notes),
            moe_layers=0 if experts == 0 else int(row.layers if pd.isna(row.moe_layers) else row.moe_layers),
            four_bit_scope="experts" if experts and str(row.four_bit_scope) == "experts" else "body",
            native_precision=None if pd.isna(row.native_precision) else str(row.native_precision),
            mla_latent_dim=0 if pd.isna(row.mla_latent_dim) else int(row.mla_latent_dim),
            mla_rope_dim=0 if pd.isna(row.mla_rope_dim) else int(row.mla_rope_dim),
            max_context_tokens=None if pd.isna(row.max_context_tokens) else int(row.max_context_tokens),
        )
    index = _index(list(frame["id"]), list(frame["name"]), list(frame["aliases"].fillna("")), "model")
    return models, index


def _resolve(query: str, index: dict[str, str], what: str, known: list[str], flag: str) -> str:
    if not isinstance(query, str) or not query.strip():
        raise ValueError(f"{what} id must be a non-empty string, got {query!r}; known: {', '.join(known)}")
    for candidate in (query, _strip_decorations(query)):
        key = _norm(candidate)
        if key in index:
            return index[key]
    raise ValueError(f"unknown {what} {query!r}; use {flag} with one of: {', '.join(known)}")


@dataclass(frozen=True)
class StandIn:
    """The self-hosted catalogue model a hosted-API model is planned on, and why (``data/hosted_models.csv``)."""

    name: str          # the log's own name for it (shown literally)
    provider: str
    model_id: str      # the catalogue model planned in its place
    why: str


@lru_cache(maxsize=1)
def _hosted() -> tuple[tuple[str, str, str, str], ...]:
    frame = pd.read_csv(DATA_DIR / "hosted_models.csv", dtype=str)
    return tuple((r.prefix.lower(), r.provider, r.stand_in, r.why) for r in frame.itertuples(index=False))


def hosted_stand_in(name: str) -> StandIn | None:
    """The stand-in for a hosted-API model name (``claude-sonnet-4-20250514``, ``anthropic/claude-3-5-haiku``),
    None for any other name. Catalogue models come first: ``gpt-oss-120b`` is an open model, not a hosted one."""
    try:
        get_model(name)
        return None
    except ValueError:
        pass
    key = str(name).strip().split("/")[-1].lower()
    for prefix, provider, stand_in, why in _hosted():
        if key.startswith(prefix):
            return StandIn(str(name), provider, get_model(stand_in).id, why)
    return None


def list_gpus() -> list[str]:
    """Ids of the GPUs in the catalogue, in file order."""
    return list(_gpus()[0])


def list_models() -> list[str]:
    """Ids of the models in the catalogue, in file order."""
    return list(_models()[0])


def get_gpu(gpu_id: str | GPU) -> GPU:
    """The GPU for a forgiving id (``h100``, ``H100-SXM``, ``h100_sxm``); ValueError listing known ids."""
    if isinstance(gpu_id, GPU):
        return gpu_id
    gpus, index = _gpus()
    return gpus[_resolve(gpu_id, index, "GPU", list(gpus), "--gpu")]


def get_model(model_id: str | Model) -> Model:
    """The model for a forgiving id (``llama-3.1-70b``, ``Llama-3.1-70B``, ``llama70b``); ValueError if unknown."""
    if isinstance(model_id, Model):
        return model_id
    models, index = _models()
    return models[_resolve(model_id, index, "model", list(models), "--model")]


@dataclass(frozen=True)
class Precision:
    """One weight format: bytes per weight (block scales included) and the matmul rate it runs at."""

    id: str
    bits_per_weight: float      # element bits + scale bits / block size (NVFP4 4 + 8/16 = 4.5)
    block_size: int | None
    scale_format: str
    needs_tensor_cores: str | None  # "fp8"/"fp4": the tensor cores that run it natively; None: any GPU
    native_compute: str         # matmul rate with those tensor cores ("fp4", "fp8", "bf16")
    emulated_compute: str       # matmul rate without them (weight-only: dequantised in the kernel)
    kv_allowed: bool            # usable as a KV-cache precision
    default_kv: str             # KV precision when none is given
    source: str
    notes: str

    @property
    def bytes_per_weight(self) -> float:
        """Bytes per weight with the block scales (FP8 1, BF16 2, NVFP4 0.5625, MXFP4 0.53125)."""
        return self.bits_per_weight / 8.0

    @property
    def is_four_bit(self) -> bool:
        """An FP4 format (quantizes what the model's ``four_bit_scope`` says, the rest stays BF16)."""
        return self.bits_per_weight < 8

    def compute_on(self, gpu: GPU) -> str:
        """The matmul rate this format runs at on ``gpu`` (native where its tensor cores exist)."""
        native = self.needs_tensor_cores is None or gpu.has_tensor_cores_for(self.needs_tensor_cores)
        return self.native_compute if native else self.emulated_compute


@lru_cache(maxsize=1)
def _precisions() -> tuple[dict[str, Precision], dict[str, str]]:
    frame = pd.read_csv(DATA_DIR / "precisions.csv", dtype={"aliases": str, "block_size": "Int64"})
    table: dict[str, Precision] = {}
    for row in frame.itertuples(index=False):
        table[row.id] = Precision(
            id=row.id, bits_per_weight=float(row.bits_per_weight),
            block_size=None if pd.isna(row.block_size) else int(row.block_size),
            scale_format="" if pd.isna(row.scale_format) else str(row.scale_format),
            needs_tensor_cores=None if pd.isna(row.needs_tensor_cores) else str(row.needs_tensor_cores),
            native_compute=str(row.native_compute), emulated_compute=str(row.emulated_compute),
            kv_allowed=bool(row.kv_allowed), default_kv=str(row.default_kv),
            source=str(row.source), notes="" if pd.isna(row.notes) else str(row.notes),
        )
    index = _index(list(frame["id"]), list(frame["id"]), list(frame["aliases"].fillna("")), "precision")
    return table, index


def get_precision(precision: str | Precision) -> Precision:
    """The weight format for ``bf16``/``fp16``, ``fp8``, ``nvfp4``/``fp4`` or ``mxfp4``; ValueError otherwise."""
    if isinstance(precision, Precision):
        return precision
    return _precisions()[0][check_precision(precision)]


def list_precisions() -> list[str]:
    """Ids of the weight precisions, in file order (bf16, fp8, nvfp4, mxfp4)."""
    return list(_precisions()[0])


def kv_precisions() -> list[str]:
    """Precisions a KV cache can be stored in (bf16, fp8)."""
    return [p for p, spec in _precisions()[0].items() if spec.kv_allowed]


class _BytesPerWeight(dict):
    """``PRECISIONS[p]``: bytes per weight of each precision, read from ``data/precisions.csv``."""

    def __missing__(self, key: str) -> float:
        return get_precision(key).bytes_per_weight


PRECISIONS: dict[str, float] = _BytesPerWeight(
    {p: spec.bytes_per_weight for p, spec in _precisions()[0].items()}
)


def check_precision(precision: str, what: str = "precision") -> str:
    """``"FP8"`` → ``"fp8"``, ``fp4`` → ``nvfp4``, ``fp16`` → ``bf16``; ValueError naming the supported ones.

    A KV precision (``what`` starting with "KV") must be one a cache can hold: bf16 or fp8.
    """
    table, index = _precisions()
    key = _norm(str(precision))
    if key not in index:
        raise ValueError(f"{what} {precision!r} is not supported; use one of: {', '.join(table)}")
    p = index[key]
    if what.lower().startswith("kv") and not table[p].kv_allowed:
        allowed = [q for q, spec in table.items() if spec.kv_allowed]
        raise ValueError(f"{what} {precision!r} is not supported for the KV cache; use one of: {', '.join(allowed)}")
    return p
