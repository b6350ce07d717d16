"""Prefill, decode and KV memory of one deployment: the consolidated step-time model.

Every function takes numpy arrays (or scalars) and returns arrays; nothing loops over requests.

    t_prefill(n, p) = max(F / (TP·P·η_c), W / (BW·η_m)) + 2·L·t_AR(n) + L·t_layer + t_step
        F = 2·N_active·(n−p) + 2·V·d + 2·L·H·d_h·(n² − p²)          (causal attention, prefix hits skipped)
    t_decode(B, c̄) = max((W(B) + B·KV(c̄)) / (BW·η_m), F(B, c̄) / (TP·P·η_c)) + 2·L·t_AR(B) + L·t_layer + t_step
    t_AR(tokens) = log2(TP)·t_lat + 2·(TP−1)/TP · tokens·d·2 bytes / (scale-up BW · η_link)

Layouts of one replica of ``tp`` GPUs (TensorRT-LLM's mapping: ``moe_tp × ep = tp``):
    TP        every weight and (GQA) KV head sharded over tp; 2 all-reduces per layer.
    TP + EP   routed experts whole on ep ranks (split further by tp/ep); same bytes per GPU as TP, but the
              busiest EP rank carries ``expert_imbalance`` × the mean expert load.
    DEP       attention data parallel + EP ("DEP8"): attention, dense layers and embeddings replicated on every
              GPU, each GPU serves its own sequences with their whole KV (no MLA replication), and the expert
              layers exchange tokens with an all-to-all dispatch and combine instead of all-reduces.
Weights are stored at the precision's bytes per weight with block scales (``data/precisions.csv``): a 4-bit
checkpoint quantizes what the model's ``four_bit_scope`` says (all linear layers, or only the routed experts as
gpt-oss and the DeepSeek NVFP4 checkpoints do) and keeps the rest in BF16. Each part multiplies at the rate the
GPU has for it (FP4 tensor cores on Blackwell; weight-only, at the BF16 rate, where they are missing); attention
scores at the tensor-core rate or the SFU's softmax-exponential rate, whichever is slower (Blackwell: the SFU).

P is the GPU's measured maximum achievable matmul rate (MAMF) at the compute precision and BW its measured
maximum achievable HBM bandwidth (where published; else the spec times a default fraction), so a single η_c and
η_m work across GPUs. The efficiencies (η_c = ``mfu``, η_m = ``mbu``) and the fixed costs
come from ``data/efficiency.json``, fitted by ``calibration.py`` on published measurements.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field, fields
from datetime import date
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np

from shapeviz.physics.catalogue import (
    DATA_DIR,
    GIB,
    GPU,
    PRECISIONS,
    Model,
    Precision,
    check_precision,
    get_gpu,
    get_model,
    get_precision,
)
from shapeviz.physics.engines import (
    EngineEfficiency,
    SequenceCap,
    check_engine,
    engine_efficiency,
    engine_note,
    engine_sequence_cap,
)

EFFICIENCY_PATH = DATA_DIR / "efficiency.json"
ACTIVATION_BYTES = 2  # activations and all-reduce messages stay in BF16 even when weights are FP8
EMBEDDING_BYTES = 2   # FP8 checkpoints (ModelOpt) keep the embedding and lm_head in BF16
UNQUANTIZED_BYTES = 2  # what a 4-bit checkpoint leaves out of its scope stays BF16
TP_CHOICES = (1, 2, 4, 8, 16)
DEFAULT_TPOT_SLO_MS = 50.0


@dataclass(frozen=True)
class Efficiency:
    """The global efficiency parameters of the step-time model (one set for every GPU)."""

    mfu: float                      # fraction of MAMF reached by prefill and compute-bound decode
    mbu: float                      # fraction of the measured max HBM bandwidth reached by the decode weight stream
    step_overhead_ms: float         # fixed cost per decode iteration (scheduling, sampling, launches)
    prefill_overhead_ms: float      # extra fixed cost of a prefill (context) pass: no CUDA graphs, KV setup
    layer_overhead_us: float        # fixed cost per layer per iteration (small kernels, norms)
    sequence_overhead_us: float     # cost per sequence per iteration (sampling, scheduling, detokenising)
    allreduce_latency_us: float     # per all-reduce, per doubling of TP (NCCL small-message latency)
    allreduce_bus_efficiency: float  # fraction of the scale-up link reached by large all-reduces
    memory_reserve_gib: float       # runtime, NCCL buffers and activations, per GPU
    kv_fraction_offline: float      # share of free memory given to KV in max-throughput runs
    kv_fraction_serving: float      # the same for online serving
    max_batch: int                  # engine cap on concurrent sequences
    kv_transfer_gbps: float         # prefill → decode KV transfer when disaggregated
    mamf_fraction_default: float    # MAMF / spec peak for GPUs without a MAMF measurement
    mamb_fraction_default: float    # measured max bandwidth / spec for GPUs without a measurement
    expert_imbalance: float = 1.0   # busiest EP rank's expert load / the mean (EP layouts only; an assumption)
    weight_only_efficiency: float = 1.0  # rate of weight-only matmuls (dequantised in the kernel) / the BF16 rate
    sources: dict[str, str] = field(default_factory=dict, compare=False)
    fitted_on: str = field(default="", compare=False)

    def replace(self, **changes: float) -> "Efficiency":
        """A copy with some parameters changed (what-if, or a calibration step)."""
        values = {f.name: getattr(self, f.name) for f in fields(self)}
        unknown = set(changes) - set(values)
        if unknown:
            raise ValueError(f"unknown efficiency parameter(s) {sorted(unknown)}; known: {sorted(PARAMETERS)}")
        values.update(changes)
        return Efficiency(**values)

    def to_dict(self) -> dict[str, float]:
        """The numeric parameters by name."""
        return {name: getattr(self, name) for name in PARAMETERS}


PARAMETERS: tuple[str, ...] = tuple(
    f.name for f in fields(Efficiency) if f.name not in ("sources", "fitted_on")
)
OPTIONAL_PARAMETERS = ("expert_imbalance", "weight_only_efficiency")  # older efficiency files lack them: the dataclass default applies


def efficiency_from_document(document: dict[str, Any]) -> Efficiency:
    """Build an ``Efficiency`` from the ``efficiency.json`` document."""
    params = document.get("parameters", {})
    missing = [name for name in PARAMETERS if name not in params and name not in OPTIONAL_PARAMETERS]
    if missing:
        raise ValueError(f"efficiency file lacks parameter(s) {missing}; refit with benchmarks/bench_calibration.py --write")
    values: dict[str, Any] = {name: params[name]["value"] for name in PARAMETERS if name in params}
    values["max_batch"] = int(values["max_batch"])
    return Efficiency(
        **values,
        sources={name: str(params[name].get("source", "")) for name in PARAMETERS if name in params},
        fitted_on=str(document.get("fitted_on", "")),
    )


@lru_cache(maxsize=4)
def load_efficiency(path: Path | None = None) -> Efficiency:
    """The calibrated efficiencies from ``data/efficiency.json`` (cached)."""
    with open(path or EFFICIENCY_PATH, encoding="utf-8") as fh:
        return efficiency_from_document(json.load(fh))


def _achievable_tflops(g: GPU, kind: str, mamf_fraction_default: float) -> float:
    """A GPU's achievable dense matmul TFLOPS at ``kind``: MAMF, else the spec peak × the default fraction; a card with a
    ``power_peer`` capped at the peer's achievable rate × ``tdp_w`` / the peer's ``tdp_w`` (``data/gpus.csv``)."""
    if kind == "fp4" and g.has_fp4:
        peak, mamf = float(g.fp4_tflops or 0.0), None
    elif kind in ("fp4", "fp8") and g.has_fp8:
        peak, mamf = float(g.fp8_tflops or 0.0), g.mamf_fp8_tflops
    else:
        peak, mamf = g.bf16_tflops, g.mamf_bf16_tflops
    ceiling = mamf if mamf else peak * mamf_fraction_default
    if g.power_peer and g.tdp_w:
        peer = get_gpu(g.power_peer)
        if peer.tdp_w:
            ceiling = min(ceiling, _achievable_tflops(peer, kind, mamf_fraction_default) * g.tdp_w / peer.tdp_w)
    return ceiling


def engine_scaled(base: Efficiency, gpu_id: str, engine: str, precision: str, release: str | None = None) -> Efficiency:
    """``base`` with the engine's compute and memory factors for this GPU and precision (unchanged without a row).

    ``release``: the engine's software release (an MLPerf round, ``physics.engines``); None: the newest.
    """
    row = engine_efficiency(gpu_id, engine, precision, release)
    if row is None:
        return base
    sources = {**base.sources, "mfu": f"{base.sources.get('mfu', '')}; × {row.describe()}",
               "mbu": f"{base.sources.get('mbu', '')}; × {row.describe()}"}
    values = {name: getattr(base, name) for name in PARAMETERS}
    values.update(mfu=min(base.mfu * row.mfu_scale, 1.0), mbu=min(base.mbu * row.mbu_scale, 1.0))
    return Efficiency(**values, sources=sources, fitted_on=base.fitted_on)


@dataclass(frozen=True)
class Deployment:
    """A model served on ``tp`` GPUs of one type at a weight (and KV) precision and a layout: one replica.

    ``tp`` is the number of GPUs of the replica; ``ep`` of them hold whole experts (``tp/ep`` shards each), and
    ``attention_dp`` replicates attention so that every GPU serves its own sequences (DEP when ``ep == tp``).
    ``precision=None`` is the model's native checkpoint (gpt-oss: MXFP4), else FP8.
    """

    model: Model
    gpu: GPU
    precision: str | None = "fp8"
    kv_precision: str | None = None
    tp: int = 1
    efficiency: Efficiency | None = None
    ep: int = 1
    attention_dp: bool = False
    # ``physics.speculative.Speculative`` (duck-typed here: that module builds on this one), or None
    speculative: Any = None
    # the serving engine (vllm, sglang, trtllm; None: the default `config` writes): its efficiency on this GPU family
    # at this precision scales the generic calibration (``physics.engines``)
    engine: str | None = None

    def __post_init__(self) -> None:
        # Forgiving construction: ids are accepted wherever a Model or GPU is.
        object.__setattr__(self, "model", get_model(self.model))
        object.__setattr__(self, "gpu", get_gpu(self.gpu))
        precision = self.precision if self.precision is not None else self.model.checkpoint_precision
        object.__setattr__(self, "precision", check_precision(precision))
        default_kv = get_precision(self.precision).default_kv
        kv = default_kv if self.kv_precision is None else check_precision(self.kv_precision, "KV precision")
        object.__setattr__(self, "kv_precision", kv)
        object.__setattr__(self, "engine", check_engine(self.engine))
        if self.efficiency is None:
            # the calibration as this engine reaches it on this GPU family at this precision; an efficiency given
            # explicitly (a fit, a log's calibration) is taken as it is
            object.__setattr__(self, "efficiency", engine_scaled(load_efficiency(), self.gpu.id, str(self.engine),
                                                                 str(self.precision)))
        if isinstance(self.tp, bool) or not isinstance(self.tp, (int, np.integer)) or self.tp not in TP_CHOICES:
            raise ValueError(f"tensor parallelism tp={self.tp!r} must be one of {TP_CHOICES}")
        object.__setattr__(self, "tp", int(self.tp))
        self._check_layout()
        if self.speculative is not None:
            self.speculative.check(self)
        free = self.free_bytes_per_gpu
        if free <= 0:
            need = self.weight_bytes_per_gpu / GIB
            have = self.gpu.memory_bytes / GIB
            hint = smallest_tp_or_none(self.model, self.gpu, self.precision, attention_dp=self.attention_dp)
            raise ValueError(
                f"{self.model.name} in {self.precision.upper()} needs {need:.0f} GiB of weights per GPU as "
                f"{self.layout}; {self.gpu.name} ({have:.0f} GiB per GPU) cannot hold them with the runtime reserve: "
                f"raise --tp (smallest that fits: {hint})"
                + ("" if get_precision(self.precision).is_four_bit else " or use a smaller precision (fp8, nvfp4)")
            )

    def _check_layout(self) -> None:
        """One-line errors for layouts an engine cannot run."""
        m, ep = self.model, self.ep
        if isinstance(ep, bool) or not isinstance(ep, (int, np.integer)) or ep < 1:
            raise ValueError(f"expert parallelism ep={ep!r} must be a whole number ≥ 1")
        object.__setattr__(self, "ep", int(ep))
        object.__setattr__(self, "attention_dp", bool(self.attention_dp))
        if self.ep > 1 and not m.is_moe:
            raise ValueError(f"--ep {self.ep}: {m.name} is dense (no experts); use --tp only")
        if self.attention_dp and not m.is_moe:
            raise ValueError(f"--attention-dp: {m.name} is dense; for more throughput run more replicas instead")
        if self.attention_dp and self.tp == 1:
            raise ValueError("--attention-dp needs a replica of at least 2 GPUs (--tp 2 or more)")
        if self.tp % self.ep:
            raise ValueError(f"--ep {self.ep} must divide the {self.tp} GPUs of the replica (--tp)")
        if m.is_moe and m.experts % self.ep:
            raise ValueError(f"--ep {self.ep} must divide the {m.experts} experts of {m.name}")
        if not self.attention_dp and self.tp > m.heads:
            raise ValueError(f"tp={self.tp} exceeds the {m.heads} attention heads of {m.name}")

    # --- layout ---------------------------------------------------------------------------------------
    @property
    def layout(self) -> str:
        """``TP8``, ``TP8 EP8`` or ``DEP8`` (attention-DP with EP over all GPUs), as engines write them."""
        if self.attention_dp:
            return f"DEP{self.tp}" if self.ep == self.tp else f"ADP{self.tp} EP{self.ep}"
        return f"TP{self.tp}" + (f" EP{self.ep}" if self.ep > 1 else "")

    @property
    def imbalance(self) -> float:
        """Load of the busiest expert rank over the mean (1 without expert parallelism)."""
        return self.eff.expert_imbalance if self.ep > 1 else 1.0

    @property
    def sequence_cap(self) -> SequenceCap | None:
        """The engine's default cap on the replica's running sequences on this GPU (vLLM's ``max_num_seqs``), or None."""
        return engine_sequence_cap(str(self.engine), self.gpu.id, self.gpu.memory_bytes / GIB)

    @property
    def engine_max_seqs(self) -> int:
        """Sequences one scheduler runs at once: the engine's default cap (``data/engine_sequence_caps.csv``), at
        most the calibrated cap (``efficiency.json`` ``max_batch``); the simulator's default ``max_num_seqs``."""
        cap = self.sequence_cap
        return int(self.eff.max_batch) if cap is None else min(int(self.eff.max_batch), cap.max_num_seqs)

    @property
    def max_batch(self) -> int:
        """Engine cap on concurrent sequences of the replica: per rank under attention-DP (each schedules its own)."""
        return self.engine_max_seqs * (self.tp if self.attention_dp else 1)

    @property
    def dense_split(self) -> int:
        """GPUs the non-expert weights (attention, dense layers, embeddings) are split over: 1 under attention-DP."""
        return 1 if self.attention_dp else self.tp

    # --- sizes ------------------------------------------------------------------------------------------
    @property
    def eff(self) -> Efficiency:
        """The efficiency parameters in use (never None after construction)."""
        assert self.efficiency is not None
        return self.efficiency

    @property
    def precision_spec(self) -> Precision:
        """The weight format (bytes per weight with block scales, compute rules)."""
        return get_precision(str(self.precision))

    @property
    def weight_bytes_per_param(self) -> float:
        """Bytes per quantized weight, block scales included: 2 BF16, 1 FP8, 0.5625 NVFP4, 0.53125 MXFP4."""
        return PRECISIONS[str(self.precision)]

    @property
    def kv_bytes_per_element(self) -> int:
        """1 for an FP8 KV cache, 2 for BF16."""
        return int(PRECISIONS[str(self.kv_precision)])

    @property
    def kv_bytes_per_token(self) -> float:
        """KV bytes one token of long context holds (all layers, the KV precision; windowed layers excluded).

        The size of the model's cache per token, not per GPU: the figure a prefix cache or a session is sized in.
        """
        return float(self.model.kv_bytes_per_token_bf16 / 2.0 * self.kv_bytes_per_element)

    @property
    def compute_precision(self) -> str:
        """Matmul rate of the quantized weights: native where the GPU has the tensor cores, else weight-only BF16."""
        return self.precision_spec.compute_on(self.gpu)

    @property
    def fp8_emulated(self) -> bool:
        """Low-precision weights on a GPU without their tensor cores (FP8 on A100, FP4 on Hopper): BF16 FLOPs."""
        spec = self.precision_spec
        return spec.needs_tensor_cores is not None and spec.compute_on(self.gpu) == spec.emulated_compute \
            and spec.emulated_compute != spec.native_compute

    @property
    def emulation_note(self) -> str | None:
        """One line when the GPU lacks tensor cores for the weight format (the stated assumption), else None."""
        if not self.fp8_emulated:
            return None
        kind = str(self.precision_spec.needs_tensor_cores).upper()
        factor = f" × {self.eff.weight_only_efficiency:.2f}" if self.precision_spec.is_four_bit else ""
        return (f"{self.gpu.name} has no {kind} tensor cores: {str(self.precision).upper()} weights are stored and "
                f"read at {self.weight_bytes_per_param:g} bytes each but run weight-only, dequantised to BF16 in the "
                f"kernel (matmuls at the BF16 rate{factor}; an assumption)")

    @property
    def _quantizes_only_experts(self) -> bool:
        return self.precision_spec.is_four_bit and self.model.four_bit_scope == "experts"

    @property
    def expert_weight_bytes(self) -> float:
        """Routed-expert weights of the replica at the weight precision (0 for dense models)."""
        return self.model.expert_params * self.weight_bytes_per_param

    @property
    def dense_weight_bytes(self) -> float:
        """Everything else: attention, dense/shared MLPs, router (BF16 where a 4-bit checkpoint leaves them out)."""
        m = self.model
        rest = m.total_params - m.embedding_params - m.expert_params
        per = UNQUANTIZED_BYTES if self._quantizes_only_experts else self.weight_bytes_per_param
        return rest * per

    @property
    def embedding_bytes(self) -> float:
        """Input embedding and lm_head, kept in BF16 by every checkpoint in the catalogue."""
        return self.model.embedding_params * EMBEDDING_BYTES

    @property
    def weight_bytes(self) -> float:
        """All weights of the model once: experts + the rest at their precisions + embeddings in BF16."""
        return self.expert_weight_bytes + self.dense_weight_bytes + self.embedding_bytes

    @property
    def weight_bytes_per_gpu(self) -> float:
        """Weights each GPU holds: experts over all ``tp`` GPUs; the rest too, or whole on each under attention-DP.

        A speculative draft (head, MTP module or draft model) adds its own weights, spread over the replica.
        """
        draft = self.speculative.weight_bytes(self) / self.tp if self.speculative is not None else 0.0
        return (self.expert_weight_bytes / self.tp + (self.dense_weight_bytes + self.embedding_bytes) / self.dense_split
                + draft)

    @property
    def free_bytes_per_gpu(self) -> float:
        """Memory left per GPU after weights and the runtime reserve (before the KV fraction)."""
        return self.gpu.memory_bytes - self.weight_bytes_per_gpu - self.eff.memory_reserve_gib * GIB

    def kv_pool_bytes_per_gpu(self, fraction: float | None = None) -> float:
        """KV pool per GPU: (memory − weights − reserve) × fraction (serving fraction by default)."""
        f = self.eff.kv_fraction_serving if fraction is None else fraction
        # a speculative draft keeps its own KV for every sequence: the target's share of the pool is what is left
        draft = self.speculative.kv_pool_share(self) if self.speculative is not None else 0.0
        return max(self.free_bytes_per_gpu, 0.0) * f * (1.0 - draft)

    @property
    def kv_replication(self) -> float:
        """How many copies of each KV head the replica holds.

        TP with GQA: a KV head is replicated once TP exceeds the KV heads. TP with MLA: every rank holds the whole
        latent. Attention-DP: one copy (each sequence lives on one GPU).
        """
        if self.attention_dp:
            return 1.0
        if self.model.attention == "mla":
            return float(self.tp)
        return max(1.0, self.tp / self.model.kv_heads)

    def kv_bytes_per_sequence(self, context_tokens: np.ndarray | float) -> np.ndarray:
        """KV bytes of one sequence of ``context_tokens``, one copy (sliding-window layers capped)."""
        m = self.model
        c = np.asarray(context_tokens, dtype=np.float64)
        per_token_all_layers = m.kv_bytes_per_token_bf16_full / 2.0 * self.kv_bytes_per_element
        windowed = 0.0 if m.sliding_window is None else m.sliding_layer_fraction
        effective = (1.0 - windowed) * c
        if m.sliding_window is not None:
            effective = effective + windowed * np.minimum(c, m.sliding_window)
        return per_token_all_layers * effective

    def kv_bytes_per_gpu(self, context_tokens: np.ndarray | float) -> np.ndarray:
        """KV bytes one sequence of ``context_tokens`` costs each GPU, on average over the replica's GPUs.

        TP: its share of the heads (times the replication). Attention-DP: the sequence sits whole on one GPU, so
        the average is one copy over ``tp`` GPUs (``max_batch_kv`` also checks it fits that one GPU).
        """
        return self.kv_bytes_per_sequence(context_tokens) * self.kv_replication / self.tp

    def max_batch_kv(self, context_tokens: np.ndarray | float, fraction: float | None = None) -> np.ndarray:
        """Sequences of ``context_tokens`` that fit the KV pool at once (may be 0)."""
        pool = self.kv_pool_bytes_per_gpu(fraction)
        if self.attention_dp:
            # Whole sequences per GPU: each rank fits floor(pool / one sequence), the replica tp times that.
            per_seq = np.maximum(self.kv_bytes_per_sequence(context_tokens), 1.0)
            return self.tp * np.floor(pool / per_seq)
        per_seq = np.maximum(self.kv_bytes_per_gpu(context_tokens), 1.0)
        return np.floor(pool / per_seq)

    # --- rates ------------------------------------------------------------------------------------------
    def matmul_rate(self, kind: str) -> float:
        """Achievable matmul FLOP/s per GPU at ``kind`` ("fp4", "fp8", "bf16"): measured MAMF (else spec × default) × mfu.

        A power-capped card (``GPU.power_peer``: H100 NVL, H200 NVL) reaches at most its full-power peer's achievable
        rate × the ratio of their datasheet powers: the datasheet peak is a boost clock its power cap cannot hold
        under matmul-bound work (energy per FLOP taken as the peer's, an assumption: no credit for lower voltage).
        """
        ceiling = _achievable_tflops(self.gpu, kind, self.eff.mamf_fraction_default)
        return ceiling * 1e12 * self.eff.mfu

    @property
    def matmul_flops_per_gpu(self) -> float:
        """Achievable matmul FLOP/s per GPU for the quantized weights: MAMF × mfu at their compute precision.

        4-bit weight-only (no FP4 tensor cores, e.g. MXFP4 on Hopper): the BF16 rate × ``weight_only_efficiency``,
        since the kernel unpacks every weight and its block scale to BF16 in registers first. FP8 weight-only (A100)
        keeps the plain BF16 rate, as before: no FP8-on-A100 rows constrain a factor for it.
        """
        rate = self.matmul_rate(self.compute_precision)
        if self.fp8_emulated and self.precision_spec.is_four_bit:
            return rate * self.eff.weight_only_efficiency
        return rate

    @property
    def dense_flops_per_gpu(self) -> float:
        """Rate of the non-expert matmuls: BF16 where a 4-bit checkpoint keeps them in BF16 (gpt-oss attention)."""
        return self.matmul_rate("bf16") if self._quantizes_only_experts else self.matmul_flops_per_gpu

    @property
    def attention_flops_per_gpu(self) -> float:
        """Tensor-core rate of the attention-score matmuls: FP8 at most (no FP4 attention), BF16 beside BF16 layers."""
        kind = "bf16" if self._quantizes_only_experts else self.compute_precision
        return self.matmul_rate("fp8" if kind == "fp4" else kind)

    def attention_rate(self, decode: bool) -> float:
        """Attention FLOP/s per GPU: the tensor cores, or the softmax exponentials if those are slower.

        Every (query, key) score needs one exponential on the SFU (16 per clock per SM), which Blackwell did not
        speed up while it doubled the tensor cores: with ``4·d_h`` FLOPs per score (256 for gpt-oss's 64-dim heads)
        the SFU, not the FP8/BF16 matmul rate, bounds a B200's attention. Both at the same achievable fraction (mfu).
        """
        tensor = self.attention_flops_per_gpu
        if not self.gpu.sfu_exp_per_s:
            return tensor
        per_exp = self.model.attention_flops_per_context_token(decode) / self.model.heads
        return min(tensor, self.gpu.sfu_exp_per_s * per_exp * self.eff.mfu)

    @property
    def hbm_ceiling_bytes_per_gpu(self) -> float:
        """Measured max achievable HBM bytes/s (else the spec × the default fraction)."""
        g = self.gpu
        return (g.mamb_tbps or g.hbm_bw_tbps * self.eff.mamb_fraction_default) * 1e12

    @property
    def hbm_bytes_per_gpu(self) -> float:
        """HBM bytes/s per GPU for the decode stream (weights and KV): measured ceiling × mbu."""
        return self.hbm_ceiling_bytes_per_gpu * self.eff.mbu

    @property
    def engine_efficiency(self) -> EngineEfficiency | None:
        """The engine's row for this GPU family and precision (``data/engine_efficiency.csv``), or None."""
        return engine_efficiency(self.gpu.id, str(self.engine), str(self.precision))

    @property
    def engine_note(self) -> str:
        """Where the engine's efficiency comes from, in one line."""
        return engine_note(self.gpu.id, self.gpu.name, str(self.engine), str(self.precision))

    @property
    def nodes(self) -> int:
        """Nodes one replica spans: its GPUs over the GPUs of one node of its GPU (``GPU.gpus_per_node``)."""
        return -(-self.tp // self.gpu.gpus_per_node)

    @property
    def node_note(self) -> str:
        """"" when the replica fits one node; else that it spans nodes, in words (the page and ``plan`` say it beside
        a TP the user chose; "auto" never picks one)."""
        if self.nodes <= 1:
            return ""
        return (f"TP{self.tp} spans {self.nodes} nodes of {self.gpu.gpus_per_node} {self.gpu.name}: its all-reduces "
                "run over the network between them, which engines do not deploy for one replica")

    def describe(self) -> str:
        """``Llama-3.1-70B on 2× H100 SXM5 80GB, FP8 (KV FP8)``, with the layout when it is not plain TP."""
        layout = "" if self.ep == 1 and not self.attention_dp else f" as {self.layout}"
        spec = "" if self.speculative is None else f", speculative {self.speculative.describe()}"
        return (
            f"{self.model.name} on {self.tp}× {self.gpu.name}{layout}, {str(self.precision).upper()} "
            f"(KV {str(self.kv_precision).upper()}){spec}"
        )


def max_tp_in_node(gpu: GPU | str) -> int:
    """The widest tensor-parallel replica within one node of ``gpu`` (``GPU.gpus_per_node``; at most the largest TP)."""
    node = get_gpu(gpu).gpus_per_node
    return max((t for t in TP_CHOICES if t <= node), default=TP_CHOICES[0])


def smallest_tp_or_none(
    model: Model | str,
    gpu: GPU | str,
    precision: str | None = "fp8",
    *,
    attention_dp: bool = False,
) -> int | None:
    """Smallest TP whose GPUs hold the weights at all (None if even the largest cannot)."""
    m, g = get_model(model), get_gpu(gpu)
    eff = load_efficiency()
    spec = get_precision(precision if precision is not None else m.checkpoint_precision)
    experts = m.expert_params * spec.bytes_per_weight
    rest = (m.total_params - m.embedding_params - m.expert_params) * (
        UNQUANTIZED_BYTES if spec.is_four_bit and m.four_bit_scope == "experts" else spec.bytes_per_weight)
    embeddings = m.embedding_params * EMBEDDING_BYTES
    for tp in TP_CHOICES:
        dp = attention_dp and m.is_moe and tp > 1
        if not dp and tp > m.heads:
            continue
        per_gpu = experts / tp + (rest + embeddings) / (1 if dp else tp)
        if g.memory_bytes - per_gpu - eff.memory_reserve_gib * GIB > 0:
            return tp
    return None


# Room for KV the automatic TP asks for: a pool that holds this many tokens of context per replica
# (e.g. 16 requests of 8k). Below it a deployment "fits" but serves almost nobody at once.
MIN_KV_TOKENS_FOR_AUTO_TP = 131_072


def smallest_tp(
    model: Model | str,
    gpu: GPU | str,
    precision: str | None = "fp8",
    kv_precision: str | None = None,
    min_kv_tokens: int = MIN_KV_TOKENS_FOR_AUTO_TP,
    *,
    ep: int | None = 1,
    attention_dp: bool = False,
) -> int:
    """Smallest TP that fits the weights with room for ``min_kv_tokens`` of KV; ValueError if none does.

    ``ep=None`` means expert parallelism over the whole replica (``ep = tp``, DEP with ``attention_dp``).
    """
    m, g = get_model(model), get_gpu(gpu)
    last_error = ""
    for tp in TP_CHOICES:
        if tp > m.heads and not attention_dp:
            break
        if attention_dp and tp == 1:
            continue
        layout_ep = tp if ep is None else ep
        if layout_ep > tp or tp % layout_ep or (m.is_moe and m.experts % layout_ep):
            continue
        try:
            dep = Deployment(m, g, precision, kv_precision, tp, ep=layout_ep, attention_dp=attention_dp)
        except ValueError as exc:
            last_error = str(exc)
            continue
        if float(dep.max_batch_kv(min_kv_tokens)) >= 1:
            return tp
    shown = check_precision(precision if precision is not None else m.checkpoint_precision).upper()
    raise ValueError(
        f"{m.name} in {shown} does not fit {g.name} even at TP{TP_CHOICES[-1]}"
        + (f" ({last_error})" if last_error else "")
    )


# --- FLOPs and bytes ----------------------------------------------------------------------------------------
def _active_body_params(m: Model) -> float:
    """Parameters a token multiplies through, without the embedding lookup and the lm_head."""
    return m.active_params - m.embedding_params


def _active_expert_params(m: Model) -> float:
    """Routed-expert parameters one token multiplies through (k of E experts); 0 for dense models."""
    return m.expert_params * m.experts_per_token / m.experts if m.is_moe else 0.0


def _lm_head_params(m: Model) -> float:
    return float(m.vocab * m.hidden)


def _effective_context(m: Model, context: np.ndarray) -> np.ndarray:
    """Context the attention of an average layer sees (windowed layers stop at the window)."""
    if m.sliding_window is None:
        return context
    f = m.sliding_layer_fraction
    return (1.0 - f) * context + f * np.minimum(context, m.sliding_window)


def _prefill_flop_parts(
    dep: Deployment, input_tokens: np.ndarray, cached_tokens: np.ndarray | float = 0
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(non-expert linear, routed-expert linear, attention-score) FLOPs of one prefill."""
    m = dep.model
    n = np.asarray(input_tokens, dtype=np.float64)
    p = np.minimum(np.asarray(cached_tokens, dtype=np.float64), n)
    new = n - p
    experts = 2.0 * _active_expert_params(m) * new
    dense = 2.0 * (_active_body_params(m) - _active_expert_params(m)) * new + 2.0 * _lm_head_params(m) * (new > 0)
    per_pair = m.layers * m.attention_flops_per_context_token(decode=False)  # 4·L·H·d_h for GQA
    full = per_pair / 2.0 * (n**2 - p**2)  # causal: each new token attends to the tokens before it
    if m.sliding_window is None:
        attention = full
    else:
        f = m.sliding_layer_fraction
        windowed = per_pair * new * np.minimum(n, m.sliding_window)
        attention = (1.0 - f) * full + f * windowed
    return dense, experts, attention


def prefill_flops(dep: Deployment, input_tokens: np.ndarray, cached_tokens: np.ndarray | float = 0) -> np.ndarray:
    """FLOPs of one prefill: linear ``2·N·(n−p)`` + lm_head once + causal attention ``2·L·H·d_h·(n²−p²)``."""
    dense, experts, attention = _prefill_flop_parts(dep, input_tokens, cached_tokens)
    return dense + experts + attention


def _compute_s(dep: Deployment, dense: np.ndarray, experts: np.ndarray, attention: np.ndarray,
               spread: bool = True, decode: bool = False) -> np.ndarray:
    """Matmul time of FLOP parts on the replica, each part at its own rate.

    Experts spread over all GPUs (the busiest EP rank carries ``imbalance`` × the mean). Dense and attention work
    spread over the TP group, or, for one request alone under attention-DP (``spread=False``), run on one GPU.
    """
    split = dep.tp if (spread or not dep.attention_dp) else 1
    return (dense / (split * dep.dense_flops_per_gpu)
            + experts * dep.imbalance / (dep.tp * dep.matmul_flops_per_gpu)
            + attention / (split * dep.attention_rate(decode)))


def _weight_read_bytes_per_gpu(dep: Deployment, tokens: np.ndarray) -> np.ndarray:
    """Weight bytes one forward pass over ``tokens`` tokens reads on the busiest GPU.

    Dense: every weight once. MoE: the rest plus the experts the tokens touch, expected
    ``E·(1 − (1 − k/E)^tokens)`` of ``E`` per layer, so small batches read only the active experts. Under
    attention-DP every GPU reads its whole copy of the non-expert weights.
    """
    m = dep.model
    t = np.maximum(np.asarray(tokens, dtype=np.float64), 1.0)
    lm_head = _lm_head_params(m) * EMBEDDING_BYTES
    rest = (dep.dense_weight_bytes + lm_head) / dep.dense_split
    if not m.is_moe:
        return np.broadcast_to(rest, t.shape).astype(np.float64)
    touched = 1.0 - (1.0 - m.experts_per_token / m.experts) ** t
    return rest + dep.expert_weight_bytes * touched * dep.imbalance / dep.tp


def allreduce_s(dep: Deployment, tokens: np.ndarray | float) -> np.ndarray:
    """Tensor-parallel all-reduce time of one forward pass over ``tokens`` tokens (2 per layer, ring)."""
    t = np.asarray(tokens, dtype=np.float64)
    if dep.tp == 1 or dep.attention_dp:
        return np.zeros_like(t)
    e = dep.eff
    message = t * dep.model.hidden * ACTIVATION_BYTES
    wire = 2.0 * (dep.tp - 1) / dep.tp * message / (dep.gpu.scaleup_gbps * 1e9 * e.allreduce_bus_efficiency)
    latency = np.log2(dep.tp) * e.allreduce_latency_us * 1e-6
    return 2.0 * dep.model.layers * (latency + wire)


def _alltoall_remote_ranks(dep: Deployment) -> float:
    """GPUs one token's activations are sent to in a dispatch, besides its own (uniform routing).

    Its k experts hit ``1 − (1 − 1/ep)^k`` of the ``ep`` expert groups on average; each group is ``tp/ep`` GPUs.
    """
    m = dep.model
    hit = 1.0 - (1.0 - 1.0 / dep.ep) ** m.experts_per_token
    return hit * (dep.tp - 1)


def alltoall_s(dep: Deployment, tokens: np.ndarray | float, latency: bool = True) -> np.ndarray:
    """Attention-DP expert layers: dispatch + combine all-to-all of one pass over ``tokens`` (replica-wide).

    Each GPU sends its ``tokens/tp`` tokens' activations (BF16, an assumption: engines may dispatch in FP8/FP4)
    to the GPUs holding their experts and receives the results back, on every MoE layer. Link efficiency and
    latency per doubling are the all-reduce's (an assumption: no all-to-all measurements in the fit).
    """
    t = np.asarray(tokens, dtype=np.float64)
    if not dep.attention_dp:
        return np.zeros_like(t)
    e = dep.eff
    per_gpu = t / dep.tp * dep.model.hidden * ACTIVATION_BYTES * _alltoall_remote_ranks(dep)
    wire = per_gpu / (dep.gpu.scaleup_gbps * 1e9 * e.allreduce_bus_efficiency)
    lat = np.log2(dep.tp) * e.allreduce_latency_us * 1e-6 if latency else 0.0
    return 2.0 * dep.model.moe_layers * (lat + wire)


def communication_s(dep: Deployment, tokens: np.ndarray | float) -> np.ndarray:
    """Collective time of one forward pass: all-reduces (TP, TP+EP) or the expert all-to-all (attention-DP)."""
    return allreduce_s(dep, tokens) + alltoall_s(dep, tokens)


def _wire_only_s(dep: Deployment, tokens: np.ndarray) -> np.ndarray:
    """Link time of a pass without the per-collective latency (shared by a batch)."""
    if dep.tp == 1:
        return np.zeros_like(tokens)
    if dep.attention_dp:
        return alltoall_s(dep, tokens, latency=False)
    e = dep.eff
    wire = 2.0 * dep.model.layers * 2.0 * (dep.tp - 1) / dep.tp * tokens * dep.model.hidden * ACTIVATION_BYTES
    return wire / (dep.gpu.scaleup_gbps * 1e9 * e.allreduce_bus_efficiency)


def _fixed_s(dep: Deployment) -> float:
    e = dep.eff
    return dep.model.layers * e.layer_overhead_us * 1e-6 + e.step_overhead_ms * 1e-3


def prefill_time_s(
    dep: Deployment,
    input_tokens: np.ndarray,
    cached_tokens: np.ndarray | float = 0,
) -> np.ndarray:
    """Latency of one prefill run alone (batch 1): the roofline of its FLOPs and weight reads, plus collectives and fixed costs.

    Under attention-DP a lone request's attention and dense layers run on the one GPU that owns it.
    """
    n = np.asarray(input_tokens, dtype=np.float64)
    new = n - np.minimum(np.asarray(cached_tokens, dtype=np.float64), n)
    compute = _compute_s(dep, *_prefill_flop_parts(dep, n, cached_tokens), spread=False)
    memory = _weight_read_bytes_per_gpu(dep, new) / dep.hbm_bytes_per_gpu
    return np.maximum(compute, memory) + communication_s(dep, new) + _fixed_s(dep) + dep.eff.prefill_overhead_ms * 1e-3


def prefill_work_s(
    dep: Deployment,
    input_tokens: np.ndarray,
    cached_tokens: np.ndarray | float = 0,
) -> np.ndarray:
    """Replica-seconds one prefill costs when batched with others: its FLOPs and collective traffic only.

    Under load, prefills share weight reads and fixed costs with the rest of the batch, so what a request
    really consumes is compute (and link time on multi-GPU replicas).
    """
    n = np.asarray(input_tokens, dtype=np.float64)
    new = n - np.minimum(np.asarray(cached_tokens, dtype=np.float64), n)
    compute = _compute_s(dep, *_prefill_flop_parts(dep, n, cached_tokens))
    return compute + _wire_only_s(dep, new)


def decode_step_s(dep: Deployment, batch: np.ndarray | float, context_tokens: np.ndarray | float) -> np.ndarray:
    """Time per output token of ``batch`` decoding sequences at mean context ``context_tokens``: the TPOT of each.

    One decode pass (``decode_pass_s``); with speculative decoding, one draft-and-verify iteration over the tokens
    it keeps on average (``physics.speculative``).
    """
    if dep.speculative is not None:
        return dep.speculative.token_time_s(dep, batch, context_tokens)
    return decode_pass_s(dep, batch, context_tokens)


def decode_pass_s(
    dep: Deployment,
    batch: np.ndarray | float,
    context_tokens: np.ndarray | float,
    tokens_per_sequence: float = 1.0,
    step_overhead: bool = True,
) -> np.ndarray:
    """One forward pass of ``batch`` decoding sequences, each with ``tokens_per_sequence`` new tokens (a plain decode
    step at 1; a speculative verification of k drafts at k+1), whatever ``dep.speculative`` says.

    Memory-bound (weights once + every sequence's KV, read once however many of its tokens are in the pass) until
    the tokens are enough to be compute-bound. ``step_overhead=False`` leaves out the engine's per-iteration
    scheduling cost (a draft model's pass inside a speculative iteration).
    """
    m = dep.model
    b = np.maximum(np.asarray(batch, dtype=np.float64), 1.0)
    c = np.asarray(context_tokens, dtype=np.float64)
    t = b * float(tokens_per_sequence)
    memory = (_weight_read_bytes_per_gpu(dep, t) + b * dep.kv_bytes_per_gpu(c)) / dep.hbm_bytes_per_gpu
    experts = 2.0 * _active_expert_params(m)
    dense = 2.0 * (_active_body_params(m) - _active_expert_params(m) + _lm_head_params(m))
    attention = m.layers * m.attention_flops_per_context_token(decode=True) * _effective_context(m, c)
    compute = _compute_s(dep, t * dense, t * experts, t * attention, decode=True)
    # Fitted on TP rows, where every rank samples and schedules the whole batch. Under attention-DP it is kept per
    # replica: ranks wait for each other at every expert layer, and the H100 rows (DEP8 ≈ TP8 measured) reject /tp.
    # Charged per token of the pass: a verification samples (and checks) every one of its k+1 positions.
    per_sequence = t * dep.eff.sequence_overhead_us * 1e-6
    fixed = _fixed_s(dep) if step_overhead else dep.model.layers * dep.eff.layer_overhead_us * 1e-6
    return np.maximum(memory, compute) + communication_s(dep, t) + fixed + per_sequence


def batch_for_tpot(dep: Deployment, context_tokens: np.ndarray | float, tpot_slo_ms: float) -> np.ndarray:
    """Largest batch whose decode step stays within ``tpot_slo_ms`` (at least 1; bisection, vectorised).

    Above a few hundred values the bisection runs on a log grid of contexts and is interpolated: the batch
    changes smoothly with the context, and a million requests then cost a few array passes.
    """
    c = np.asarray(context_tokens, dtype=np.float64)
    if c.size > CONTEXT_GRID:
        lo_c, hi_c = max(float(c.min()), 1.0), max(float(c.max()), 1.0)
        grid = np.geomspace(lo_c, max(hi_c, lo_c * 1.001), CONTEXT_GRID)
        on_grid = _batch_for_tpot_exact(dep, grid, tpot_slo_ms)
        return np.floor(np.exp(np.interp(np.log(np.maximum(c, 1.0)), np.log(grid), np.log(on_grid))))
    return _batch_for_tpot_exact(dep, c, tpot_slo_ms)


CONTEXT_GRID = 256


def _batch_for_tpot_exact(dep: Deployment, c: np.ndarray, tpot_slo_ms: float) -> np.ndarray:
    slo = tpot_slo_ms * 1e-3
    lo = np.ones_like(c)
    hi = np.full_like(c, float(dep.max_batch))
    ok_hi = decode_step_s(dep, hi, c) <= slo
    for _ in range(int(np.ceil(np.log2(dep.max_batch))) + 1):
        mid = np.floor((lo + hi) / 2.0)
        ok = decode_step_s(dep, mid, c) <= slo
        lo = np.where(ok, mid, lo)
        hi = np.where(ok, hi, mid)
    return np.where(ok_hi, float(dep.max_batch), lo)


def operating_batch(
    dep: Deployment,
    context_tokens: np.ndarray | float,
    tpot_slo_ms: float = DEFAULT_TPOT_SLO_MS,
) -> np.ndarray:
    """The decode batch a planner runs at: capped by the KV pool, the TPOT SLO and the engine (at least 1)."""
    kv = dep.max_batch_kv(context_tokens)
    slo = batch_for_tpot(dep, context_tokens, tpot_slo_ms)
    return np.maximum(np.minimum(np.minimum(kv, slo), dep.max_batch), 1.0)


def request_gpu_seconds(
    dep: Deployment,
    input_tokens: np.ndarray,
    output_tokens: np.ndarray,
    cached_tokens: np.ndarray | float = 0,
    *,
    batch: np.ndarray | float | None = None,
    tpot_slo_ms: float = DEFAULT_TPOT_SLO_MS,
) -> tuple[np.ndarray, np.ndarray]:
    """(prefill GPU-seconds, decode GPU-seconds) of each request at the deployment's operating batch.

    Prefill: its FLOPs (batched, compute-bound). Decode: its share of every step it is in, i.e.
    ``output · t_step(B, c̄) / B`` with ``c̄ = input + output/2``; all on ``tp`` GPUs.
    """
    n = np.asarray(input_tokens, dtype=np.float64)
    m = np.asarray(output_tokens, dtype=np.float64)
    if np.any(n < 0) or np.any(m < 0):
        raise ValueError("token counts must be ≥ 0; drop or fix negative input/output token counts")
    prefill = dep.tp * prefill_work_s(dep, n, cached_tokens)
    context = n + m / 2.0
    b = operating_batch(dep, context, tpot_slo_ms) if batch is None else np.asarray(batch, dtype=np.float64)
    decode = dep.tp * m * decode_step_s(dep, b, context) / np.maximum(b, 1.0)
    return prefill, decode


def balance_ratio(
    dep: Deployment,
    input_tokens: np.ndarray,
    cached_tokens: np.ndarray | float = 0,
    *,
    batch: np.ndarray | float | None = None,
    tpot_slo_ms: float = DEFAULT_TPOT_SLO_MS,
) -> np.ndarray:
    """Output/input ratio at which a request's prefill and decode GPU-time are equal (above it: decode-dominated).

    Decode GPU-time grows monotonically with the output length, so the crossing is found on a log grid of
    output/input ratios (one vectorised evaluation) and refined by interpolation in log space.
    """
    n = np.maximum(np.atleast_1d(np.asarray(input_tokens, dtype=np.float64)), 1.0)
    p = np.broadcast_to(np.asarray(cached_tokens, dtype=np.float64), n.shape)
    prefill, _ = request_gpu_seconds(dep, n, np.zeros_like(n), p, batch=1.0)
    ratios = np.geomspace(1e-4, 1e4, RATIO_GRID)
    m = n[:, None] * ratios[None, :]
    b = None if batch is None else np.broadcast_to(np.asarray(batch, dtype=np.float64), n.shape)[:, None]
    _, decode = request_gpu_seconds(dep, np.broadcast_to(n[:, None], m.shape), m,
                                    np.broadcast_to(p[:, None], m.shape), batch=b, tpot_slo_ms=tpot_slo_ms)
    gap = np.log(np.maximum(decode, 1e-30)) - np.log(np.maximum(prefill, 1e-30))[:, None]
    above = gap > 0
    first = np.where(above.any(axis=1), above.argmax(axis=1), RATIO_GRID - 1)
    first = np.maximum(first, 1)
    rows = np.arange(n.size)
    g0, g1 = gap[rows, first - 1], gap[rows, first]
    x0, x1 = np.log(ratios[first - 1]), np.log(ratios[first])
    frac = np.where(g1 - g0 > 0, -g0 / np.maximum(g1 - g0, 1e-30), 0.5)
    out = np.exp(x0 + np.clip(frac, 0.0, 1.0) * (x1 - x0))
    return out.reshape(np.shape(input_tokens)) if np.ndim(input_tokens) else out


RATIO_GRID = 97  # 12 points per decade from 1e-4 to 1e4: ±10% before the log interpolation


def max_throughput(
    dep: Deployment,
    isl: np.ndarray | float,
    osl: np.ndarray | float,
    kv_fraction: float | None = None,
) -> np.ndarray:
    """Offline max output tokens/s of one replica (all its TP GPUs), as TensorRT-LLM's max-throughput tables.

    Unlimited concurrency; the batch is what the KV pool (fraction 0.95) holds at the full ``isl + osl``
    (no eviction), capped by the engine; each cycle of ``osl`` decode steps also prefills the next batch.
    """
    i = np.asarray(isl, dtype=np.float64)
    o = np.asarray(osl, dtype=np.float64)
    f = dep.eff.kv_fraction_offline if kv_fraction is None else kv_fraction
    b = np.minimum(dep.max_batch_kv(i + o, f), dep.max_batch)
    fits = b >= 1
    b = np.maximum(b, 1.0)
    cycle = b * prefill_work_s(dep, i) + o * decode_step_s(dep, b, i + o / 2.0)
    return np.where(fits, b * o / cycle, 0.0)


def today() -> str:
    """ISO date, for stamping a calibration."""
    return date.today().isoformat()


@lru_cache(maxsize=64)
def _compute_rates(dep: Deployment, spread: bool, decode: bool) -> tuple[float, float, float]:
    """Seconds per FLOP of each part (dense, experts, attention): ``_compute_s`` is linear in its parts, so the
    simulator's many iterations read three numbers instead of re-deriving each GPU rate every time."""
    return tuple(float(_compute_s(dep, *unit, spread=spread, decode=decode))  # type: ignore[return-value]
                 for unit in ((1.0, 0.0, 0.0), (0.0, 1.0, 0.0), (0.0, 0.0, 1.0)))


@lru_cache(maxsize=32_768)
def _pass_costs(dep: Deployment, tokens: int) -> tuple[float, float]:
    """(weight bytes read on the busiest GPU, collective seconds) of one pass over ``tokens`` tokens, memoised."""
    t = np.asarray(float(tokens))
    return float(_weight_read_bytes_per_gpu(dep, t)), float(communication_s(dep, t))


@lru_cache(maxsize=64)
def _iteration_constants(dep: Deployment) -> tuple[float, float, float, float]:
    """(HBM bytes/s, fixed seconds per iteration, seconds per sequence, extra seconds of a prefill pass)."""
    e = dep.eff
    return dep.hbm_bytes_per_gpu, _fixed_s(dep), e.sequence_overhead_us * 1e-6, e.prefill_overhead_ms * 1e-3


def mixed_step_s(
    dep: Deployment,
    chunk_end: np.ndarray,
    chunk_start: np.ndarray,
    decode_batch: float,
    decode_context: float,
) -> float:
    """Time of one engine iteration that prefills prompt chunks ``[start, end)`` and decodes ``decode_batch`` sequences.

    The same roofline as ``prefill_time_s`` and ``decode_step_s`` on the combined batch (chunked prefill, as vLLM
    and TensorRT-LLM run it): every chunk's FLOP parts (attention over its prefix) plus the decodes' against one
    weight read plus the decodes' KV, one collective over all tokens, the fixed costs once. With no decodes and
    one whole prompt it equals ``prefill_time_s``; with no chunks it equals ``decode_step_s`` (unit-tested).
    """
    m = dep.model
    end = np.asarray(chunk_end, dtype=np.float64)
    start = np.asarray(chunk_start, dtype=np.float64)
    new = float(np.sum(end - start))
    b = float(decode_batch)
    compute = 0.0
    if new > 0:
        parts = [float(np.sum(x)) for x in _prefill_flop_parts(dep, end, start)]
        # one prompt alone runs as prefill_time_s does (on its own GPU under attention-DP); a batch spreads
        rates = _compute_rates(dep, not (end.size == 1 and b == 0), False)
        compute += sum(x * r for x, r in zip(parts, rates))
    kv = 0.0
    spec = dep.speculative if b > 0 else None
    q = 1.0 if spec is None else spec.draft_tokens + 1.0  # tokens each decoding sequence puts through the target
    if b > 0:
        c = np.asarray(float(decode_context))
        experts = 2.0 * _active_expert_params(m)
        dense = 2.0 * (_active_body_params(m) - _active_expert_params(m) + _lm_head_params(m))
        attention = m.layers * m.attention_flops_per_context_token(decode=True) * _effective_context(m, c)
        rates = _compute_rates(dep, True, True)
        compute += b * q * (dense * rates[0] + experts * rates[1] + float(attention) * rates[2])
        kv = b * float(dep.kv_bytes_per_gpu(c))
    weights, collective = _pass_costs(dep, int(round(new + b * q)))
    hbm, fixed, per_sequence, prefill_extra = _iteration_constants(dep)
    memory = (weights + kv) / hbm
    fixed += b * q * per_sequence + (prefill_extra if new > 0 else 0.0)
    step = max(compute, memory) + collective + fixed
    if spec is None:
        return step
    # Speculative: the iteration also runs the k draft passes, and emits τ tokens per decoding sequence where the
    # simulator counts one; so the decodes' own iteration is charged per token kept, the prompt chunks' in full.
    full = float(spec.iteration_s(dep, b, float(decode_context)))
    return step + float(spec.draft_s(dep, b, float(decode_context))) - full * (1.0 - 1.0 / spec.acceptance_length)
