"""Speculative decoding on the calibrated step model: the draft's cost, the verification of k+1 tokens, the tokens kept.

One speculative iteration of a decode batch of ``B`` sequences at mean context ``c`` with ``k`` draft tokens each:

    t_iter(B, c) = t_verify(B, c) + t_draft(B, c)
    t_verify     = ``steps.decode_pass_s(dep, B, c, tokens_per_sequence=k+1)``: the same roofline as a decode step,
                   with B·(k+1) tokens through the weights (FLOPs, MoE experts touched, collectives) and each
                   sequence's KV read once, so it is memory-bound at small B and compute-bound as B·(k+1) grows
    t_draft      = k chained draft passes over B tokens: an EAGLE head (one decoder layer of the target's shape, a
                   fused projection and its own lm_head), an MTP module (one target layer, the target's lm_head), a
                   draft model (its own decode step), or 0 for n-gram prompt lookup (on the CPU)
    τ(α, k)      = (1 − α^(k+1)) / (1 − α): tokens emitted per iteration with chain drafting at per-token acceptance α
    TPOT         = t_iter / τ,   speed-up at batch B = τ · t_decode(B) / t_iter(B)

At batch 1 with a free draft and a memory-bound verification the speed-up is τ itself (unit-tested). The draft's
weights take memory beside the target's and its KV a share of the pool (``weight_bytes``, ``kv_pool_share``).
Acceptance comes from ``data/speculative.json`` (published acceptance lengths by dataset); it is always assumed.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np

from shapeviz.datadir import DATA_DIR
from shapeviz.physics.catalogue import get_model
from shapeviz.physics.steps import (
    EMBEDDING_BYTES,
    Deployment,
    _compute_s,
    _lm_head_params,
    _weight_read_bytes_per_gpu,
    allreduce_s,
    alltoall_s,
    decode_pass_s,
)

SPECULATIVE_PATH = DATA_DIR / "speculative.json"
METHODS: tuple[str, ...] = ("eagle3", "mtp", "ngram", "draft")   # the command line's choices (besides "none")
ALL_METHODS: tuple[str, ...] = METHODS + ("eagle",)              # + EAGLE-1/2 heads, for judging on engine tables
MAX_DRAFT_TOKENS = 16


@lru_cache(maxsize=2)
def load_speculative(path: Path | None = None) -> dict[str, Any]:
    """The ``data/speculative.json`` document (methods, acceptance by dataset, corner datasets, draft models)."""
    with open(path or SPECULATIVE_PATH, encoding="utf-8") as fh:
        return json.load(fh)


def acceptance_length(alpha: np.ndarray | float, draft_tokens: np.ndarray | float) -> np.ndarray:
    """Expected tokens per verification step of chain drafting: ``(1 − α^(k+1)) / (1 − α)`` (``k+1`` at α = 1)."""
    a = np.clip(np.asarray(alpha, dtype=np.float64), 0.0, 1.0)
    k = np.asarray(draft_tokens, dtype=np.float64)
    near_one = a > 1.0 - 1e-9
    safe = np.where(near_one, 0.5, a)
    return np.where(near_one, k + 1.0, (1.0 - safe ** (k + 1.0)) / (1.0 - safe))


def acceptance_rate(length: float, draft_tokens: int) -> float:
    """The per-token acceptance α at which ``k`` chain drafts give a mean acceptance length ``length`` (bisection)."""
    k = int(draft_tokens)
    if not (1.0 <= length <= k + 1.0):
        raise ValueError(f"an acceptance length of {length:g} is impossible with {k} draft tokens: it counts the "
                         f"tokens kept per step, the bonus token included, so it lies between 1 and {k + 1}")
    lo, hi = 0.0, 1.0
    for _ in range(60):
        mid = (lo + hi) / 2.0
        if float(acceptance_length(mid, k)) < length:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2.0


def dataset_alpha(method: str, dataset: str) -> float:
    """Per-token acceptance rate of chain drafting for one method on one published dataset (from the data file)."""
    table = load_speculative()["acceptance"]
    if method not in table:
        raise ValueError(f"no published acceptance for {method!r}; known: {sorted(k for k in table if k != '_about')}")
    row = table[method]
    if "alpha" in row:
        return float(row["alpha"])
    tau = row["tau"]
    if dataset not in tau:
        raise ValueError(f"no published acceptance for {method} on {dataset!r}; known: {sorted(tau)}")
    if row["structure"] == "chain":
        return acceptance_rate(float(tau[dataset]), int(row["draft_tokens"]))
    # Tree drafting accepts more than a chain: keep only the dataset's (τ − 1) relative to the reference dataset,
    # on the chain rate fitted to an engine measurement.
    ref = row["reference_fit"]
    k = int(ref["draft_tokens"])
    chain_ref = float(acceptance_length(float(ref["alpha"]), k))
    scaled = 1.0 + (chain_ref - 1.0) * (float(tau[dataset]) - 1.0) / (float(tau[ref["dataset"]]) - 1.0)
    return acceptance_rate(min(scaled, k + 1.0), k)


def default_draft_tokens(method: str) -> int:
    """Tokens a method drafts per step unless told otherwise (``data/speculative.json``)."""
    return int(load_speculative()["methods"][method]["default_draft_tokens"])


def default_draft_model(model_id: str) -> str:
    """The catalogue draft model assumed for a target (same tokenizer); ValueError naming the other methods."""
    table = load_speculative()["draft_models"]
    if model_id not in table or model_id == "_about":
        raise ValueError(f"no draft model with {model_id}'s tokenizer in the catalogue: use --speculative eagle3, "
                         "mtp (DeepSeek models) or ngram")
    return str(table[model_id])


@dataclass(frozen=True)
class Speculative:
    """Speculative decoding of a replica: method, draft tokens per step, per-token acceptance and where it came from.

    ``acceptance_source`` says whether the acceptance was set by the user or assumed from a published dataset.
    """

    method: str
    draft_tokens: int
    acceptance_rate: float
    acceptance_source: str = "assumed"
    draft_model: str | None = None   # method "draft": the draft model's catalogue id

    def __post_init__(self) -> None:
        if self.method not in ALL_METHODS:
            raise ValueError(f"unknown speculative method {self.method!r}; choose none, {', '.join(METHODS)}")
        k = self.draft_tokens
        if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or not 1 <= int(k) <= MAX_DRAFT_TOKENS:
            raise ValueError(f"--draft-tokens must be a whole number from 1 to {MAX_DRAFT_TOKENS}, got {k!r}")
        object.__setattr__(self, "draft_tokens", int(k))
        a = float(self.acceptance_rate)
        if not (np.isfinite(a) and 0.0 <= a <= 1.0):
            raise ValueError(f"acceptance rate {self.acceptance_rate!r} must be a fraction between 0 and 1")
        object.__setattr__(self, "acceptance_rate", a)
        if self.method == "draft" and not self.draft_model:
            raise ValueError("a draft-model speculative decoder needs its draft model")

    @classmethod
    def from_length(cls, method: str, draft_tokens: int, length: float, source: str = "set by user",
                    draft_model: str | None = None) -> "Speculative":
        """Build from a mean acceptance length (tokens kept per step, bonus included), as engines report it."""
        return cls(method, draft_tokens, acceptance_rate(length, draft_tokens), source, draft_model)

    @property
    def acceptance_length(self) -> float:
        """Mean tokens emitted per verification step (τ), the bonus token included."""
        return float(acceptance_length(self.acceptance_rate, self.draft_tokens))

    @property
    def label(self) -> str:
        """The method as engines and papers name it."""
        return str(load_speculative()["methods"][self.method]["label"])

    def describe(self) -> str:
        """``EAGLE-3, 3 draft tokens, 2.4 accepted per step (assumed)``."""
        draft = f" ({self.draft_model} drafting)" if self.method == "draft" else ""
        source = "set by user" if self.acceptance_source == "set by user" else "assumed"
        return (f"{self.label}{draft}, {self.draft_tokens} draft tokens, {self.acceptance_length:.2f} tokens per step "
                f"({source})")

    def to_dict(self) -> dict[str, Any]:
        """The settings as plain values (method, draft_tokens, acceptance_length/rate and their source)."""
        return {"method": self.method, "draft_tokens": self.draft_tokens, "draft_model": self.draft_model,
                "acceptance_length": self.acceptance_length, "acceptance_rate": self.acceptance_rate,
                "acceptance_source": self.acceptance_source}

    # --- the deployment's hooks (Deployment calls these; no import back from steps) --------------------------
    def check(self, dep: Deployment) -> None:
        """One-line errors for a method the target cannot run."""
        data = load_speculative()
        if self.method == "mtp" and dep.model.id not in data["mtp_models"]:
            raise ValueError(f"--speculative mtp: {dep.model.name} has no multi-token-prediction layers "
                             "(DeepSeek-V3/R1 do); use eagle3, ngram or draft")
        if self.method == "draft":
            draft = get_model(str(self.draft_model))
            if draft.id == dep.model.id:
                raise ValueError(f"the draft model must be smaller than the target, got {draft.name} for both")

    def weight_bytes(self, dep: Deployment) -> float:
        """Bytes of the draft's weights on the whole replica (spread over its GPUs like the target's)."""
        m = dep.model
        head = load_speculative()["methods"][self.method]
        if head["draft"] == "none":
            return 0.0
        if head["draft"] == "model":
            return float(_draft_deployment(dep, str(self.draft_model)).weight_bytes)
        layer, projection, lm_head = _head_params(dep, self.method)
        per = float(head["head_bytes_per_param"] or dep.weight_bytes_per_param)
        if head["draft"] == "target_layer":
            # the MTP module holds one whole layer (every expert), stored like the target; it shares the lm_head
            whole_layer = (m.total_params - m.embedding_params) / m.layers
            return whole_layer * dep.weight_bytes_per_param + projection * EMBEDDING_BYTES
        return (layer + projection) * per + lm_head * EMBEDDING_BYTES

    def kv_pool_share(self, dep: Deployment) -> float:
        """Share of the KV pool the draft's own KV takes (one extra layer for a head or MTP; a draft model's)."""
        head = load_speculative()["methods"][self.method]
        if head["draft"] == "none":
            return 0.0
        if head["draft"] == "model":
            draft = _draft_deployment(dep, str(self.draft_model))
            ratio = float(draft.kv_bytes_per_sequence(1.0) * draft.kv_replication / draft.tp) / max(
                float(dep.kv_bytes_per_gpu(1.0)), 1e-30)
        else:
            ratio = 1.0 / dep.model.layers
        return ratio / (1.0 + ratio)

    def draft_s(self, dep: Deployment, batch: np.ndarray | float, context: np.ndarray | float) -> np.ndarray:
        """Time of the k chained draft passes over ``batch`` sequences at mean context ``context``."""
        b = np.maximum(np.asarray(batch, dtype=np.float64), 1.0)
        c = np.asarray(context, dtype=np.float64)
        data = load_speculative()
        head = data["methods"][self.method]
        overhead = float(data["draft_pass_overhead_ms"]["value"]) * 1e-3
        if head["draft"] == "none":
            return np.zeros(np.broadcast(b, c).shape)
        if head["draft"] == "model":
            draft = _draft_deployment(dep, str(self.draft_model))
            one = decode_pass_s(draft, b, c, step_overhead=False) + overhead
        else:
            one = _head_pass_s(dep, self.method, b, c) + overhead
        return self.draft_tokens * one

    def iteration_s(self, dep: Deployment, batch: np.ndarray | float, context: np.ndarray | float) -> np.ndarray:
        """One speculative iteration: the draft passes, then the target verifying k+1 tokens per sequence."""
        verify = decode_pass_s(dep, batch, context, tokens_per_sequence=self.draft_tokens + 1.0)
        return verify + self.draft_s(dep, batch, context)

    def token_time_s(self, dep: Deployment, batch: np.ndarray | float, context: np.ndarray | float) -> np.ndarray:
        """Time per emitted token of each sequence (the TPOT): one iteration over the tokens it keeps."""
        return self.iteration_s(dep, batch, context) / self.acceptance_length


def speedup(dep: Deployment, batch: np.ndarray | float, context: np.ndarray | float) -> np.ndarray:
    """Decode speed-up of the deployment's speculative decoding at ``batch`` (plain step / speculative TPOT)."""
    spec = dep.speculative
    if spec is None:
        return np.ones(np.broadcast(np.asarray(batch), np.asarray(context)).shape)
    return decode_pass_s(dep, batch, context) / spec.token_time_s(dep, batch, context)


@lru_cache(maxsize=64)
def _draft_deployment(dep: Deployment, draft_model: str) -> Deployment:
    """The draft model on the replica's GPUs, at the target's precision and TP (its own weights and KV)."""
    draft = get_model(draft_model)
    tp = dep.tp if dep.tp <= draft.heads else 1
    return Deployment(draft, dep.gpu, dep.precision if draft.native_precision is None else None,
                      dep.kv_precision, tp, engine=dep.engine)


def _head_params(dep: Deployment, method: str) -> tuple[float, float, float]:
    """(one decoder layer's active parameters, the feature projection, the draft lm_head) of a head or MTP module."""
    m = dep.model
    head = load_speculative()["methods"][method]
    body = m.active_params - m.embedding_params
    layer = body / m.layers
    projection = float(head["projection_inputs"]) * m.hidden * m.hidden
    vocab = head["draft_vocab"] or m.vocab
    return layer, projection, float(vocab * m.hidden)


def _head_pass_s(dep: Deployment, method: str, b: np.ndarray, c: np.ndarray) -> np.ndarray:
    """One pass of an EAGLE head or an MTP module over ``b`` tokens: roofline of one target-shaped layer plus its
    projection and lm_head, each sequence's one-layer KV, one layer's collectives and per-layer cost."""
    m = dep.model
    data = load_speculative()["methods"][method]
    layer, projection, lm_head = _head_params(dep, method)
    # Bytes: one average layer of the target as the whole pass reads it (MoE: the experts these tokens touch).
    whole = _weight_read_bytes_per_gpu(dep, b)
    target_lm = _lm_head_params(m) * EMBEDDING_BYTES / dep.dense_split
    layer_bytes = (whole - target_lm) / m.layers
    if data["head_bytes_per_param"]:
        layer_bytes = layer_bytes * float(data["head_bytes_per_param"]) / dep.weight_bytes_per_param
    weights = layer_bytes + (projection + lm_head) * EMBEDDING_BYTES / dep.dense_split
    kv = b * dep.kv_bytes_per_gpu(c) / m.layers
    memory = (weights + kv) / dep.hbm_bytes_per_gpu
    attention = m.attention_flops_per_context_token(decode=True) * c
    compute = _compute_s(dep, b * 2.0 * (layer + projection + lm_head), np.zeros_like(b), b * attention, decode=True)
    collective = (allreduce_s(dep, b) + alltoall_s(dep, b)) / m.layers
    sampling = b * dep.eff.sequence_overhead_us * 1e-6  # each pass samples a draft token for every sequence
    return np.maximum(memory, compute) + collective + dep.eff.layer_overhead_us * 1e-6 + sampling
