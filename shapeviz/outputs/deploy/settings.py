"""From a capacity plan to engine-neutral serving settings, each value with where it came from.

A setting is ``measured`` when it is read off the log (its longest context, its prefix reuse), ``estimated``
when the capacity model computed it (batch caps, chunk size, replicas, memory fractions) and ``assumed`` when
it is a choice or a default (precision, headroom, the model's repo id). The engine renderers
(``engines.py``) only translate these settings into each engine's flag names.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from shapeviz.outputs.deploy.flags import model_repo
from shapeviz.physics.catalogue import GIB, Model
from shapeviz.physics.kv_pool import KVPool, kv_pool_tokens
from shapeviz.physics.speculative import load_speculative
from shapeviz.physics.steps import (
    Deployment,
    decode_step_s,
    load_efficiency,
    operating_batch,
    prefill_work_s,
)
from shapeviz.serving.planner import Plan, Workload

SOURCES = ("measured", "simulated", "estimated", "assumed")   # simulated: the log replayed (the fleet's size)
CONTEXT_HEADROOM = 0.10      # max-model-len above the longest context seen: a longer request should not fail
CONTEXT_ROUND = 256          # tokens: engines size KV blocks in 16-256 token pages
CHUNK_STEP = 512             # chunk sizes are searched in these steps ...
CHUNK_MAX = 32768            # ... up to this many tokens per scheduler step
CHUNK_FLOOR = 2048           # never below this: the engines' usual online step budget
PREFILL_CHUNK_MIN = 2048     # a prefill-only pool batches at least this many tokens per step
PREFIX_REUSE_ON = 0.05       # prefix caching pays off above this share of input tokens served from cache


@dataclass(frozen=True)
class Setting:
    """One value of a serving config, with its provenance (measured | estimated | assumed) and the reason."""

    value: Any
    source: str
    why: str

    def __post_init__(self) -> None:
        if self.source not in SOURCES:
            raise ValueError(f"internal: setting source {self.source!r} is not one of {SOURCES}")


@dataclass(frozen=True)
class PoolSettings:
    """What differs between pools: role, replica count, the sequence cap and the per-step token budget."""

    role: str                    # colocated | prefill | decode
    replicas: Setting
    max_num_seqs: Setting
    max_batched_tokens: Setting


@dataclass(frozen=True)
class PrefixSignal:
    """How much prefix reuse the log shows (``shapeviz.analyses.prefix.prefix_reuse``), or that it cannot be seen."""

    hit_ratio_tokens: float | None
    method: str                  # block_hashes | reported_cached_tokens | session_estimate | none | set by user
    provenance: str              # simulated | measured | estimated | none | assumed


@dataclass(frozen=True)
class ServingSettings:
    """Engine-neutral serving settings of a plan: shared values and one ``PoolSettings`` per pool."""

    model_id: str
    gpu_name: str
    model_path: Setting
    tp: Setting
    ep: Setting                  # expert-parallel GPUs of a replica (1: experts sharded like the rest by TP)
    attention_dp: Setting        # attention data-parallel across the replica's GPUs (DEP when ep == tp)
    precision: Setting
    kv_precision: Setting
    max_model_len: Setting
    prefix_caching: Setting      # True | False | None (keep the engine's default)
    memory: dict[str, Setting]   # vllm_gpu_memory_utilization | sglang_mem_fraction_static | trtllm_kv_free_fraction
    rate_rps: Setting
    pools: dict[str, PoolSettings]
    notes: list[str] = field(default_factory=list)
    context_note: str | None = None  # max-model-len capped at the model's limit: every config's header says so
    # speculative decoding of the pools that decode: method, draft_tokens, draft (repo or None), acceptance_length
    speculative: Setting | None = None

    def layouts(self) -> list[str]:
        """The layouts this plan supports: colocated always, disaggregated when both pools could be sized."""
        return ["colocated"] + (["disaggregated"] if "prefill" in self.pools and "decode" in self.pools else [])


def _round_up(x: float, step: int) -> int:
    return int(math.ceil(max(x, 1.0) / step) * step)


def _weighted_quantile(values: np.ndarray, weights: np.ndarray, q: float) -> float:
    order = np.argsort(values)
    v, w = values[order], weights[order]
    cdf = np.cumsum(w) / w.sum()
    return float(v[min(int(np.searchsorted(cdf, q)), v.size - 1)])


def decode_context(workload: Workload) -> float:
    """Mean context a decode step sees: each request weighs by its output tokens (the steps it is in)."""
    w = workload.weight * np.maximum(workload.output_tokens, 1.0)
    return float(np.dot(w, workload.input_tokens + workload.output_tokens / 2.0) / w.sum())


def chunk_tokens(dep: Deployment, batch: float, context: float, tpot_slo_ms: float) -> tuple[int, bool]:
    """Largest prefill chunk that fits one scheduler step next to ``batch`` decodes within the TPOT SLO.

    Returns (tokens, fits): when not even ``CHUNK_STEP`` tokens fit, the smallest chunk and False.
    """
    sizes = np.arange(CHUNK_STEP, CHUNK_MAX + 1, CHUNK_STEP, dtype=np.float64)
    step_s = prefill_work_s(dep, sizes) + float(decode_step_s(dep, max(batch, 1.0), context))
    ok = step_s <= tpot_slo_ms / 1000.0
    if not ok.any():
        return CHUNK_STEP, False
    return int(sizes[np.flatnonzero(ok)[-1]]), True


def memory_settings(dep: Deployment, kv_pool: KVPool | None = None) -> dict[str, Setting]:
    """Each engine's memory knob set so that its KV pool matches the plan's (weights + reserve + KV pool).

    ``kv_pool``: what the user set (``--kv-cache-tokens``, ``--gpu-memory-utilization``), already in ``dep``'s
    pool; vLLM then gets the user's utilisation as given, and a token count becomes each engine's token cap
    (``kv_cache_tokens``: vLLM ``--num-gpu-blocks-override``, SGLang ``--max-total-tokens``, TensorRT-LLM
    ``kv_cache_config.max_tokens``).
    """
    mem = dep.gpu.memory_bytes
    kv = dep.kv_pool_bytes_per_gpu()
    weights, reserve = dep.weight_bytes_per_gpu, dep.eff.memory_reserve_gib * GIB
    kv_gib = kv / GIB
    user = kv_pool if kv_pool is not None and kv_pool.is_set else None
    whose = "the KV pool set by the user" if user else "the plan's KV pool"
    # vLLM's budget covers weights, activations and KV; SGLang's static fraction covers weights and KV only.
    # A token cap fixes the pool's size: the memory budget is then rounded up, never below what the cap needs.
    rounding = math.ceil if user is not None and user.tokens is not None else math.floor
    vllm = rounding(min((weights + reserve + kv) / mem, 0.98) * 100) / 100
    sglang = rounding(min((weights + kv) / mem, 0.98) * 100) / 100
    trt = min(dep.eff.kv_fraction_serving, 1.0)
    settings = {
        "vllm_gpu_memory_utilization": Setting(vllm, "estimated", (
            f"weights {weights / GIB:.1f} GiB + runtime reserve {reserve / GIB:.1f} GiB + {whose} "
            f"{kv_gib:.1f} GiB of {mem / GIB:.1f} GiB per GPU")),
        "sglang_mem_fraction_static": Setting(sglang, "estimated", (
            f"weights {weights / GIB:.1f} GiB + {whose} {kv_gib:.1f} GiB of {mem / GIB:.1f} GiB per GPU")),
        "trtllm_kv_free_fraction": Setting(trt, "assumed", (
            f"the capacity model's serving KV fraction of free memory ({dep.eff.sources.get('kv_fraction_serving', '')})")),
    }
    if user is not None and user.gpu_memory_utilization is not None:
        settings["vllm_gpu_memory_utilization"] = Setting(user.gpu_memory_utilization, "assumed", (
            f"set by the user (--gpu-memory-utilization); the KV pool is what is left of it after weights "
            f"{weights / GIB:.1f} GiB and runtime reserve {reserve / GIB:.1f} GiB: {kv_gib:.1f} GiB per GPU"))
    if user is not None and user.gpu_memory_utilization is not None:
        free = max(dep.free_bytes_per_gpu, 1.0)
        share = math.floor(min((user.gpu_memory_utilization * mem - weights - reserve) / free, 1.0) * 1000) / 1000
        settings["trtllm_kv_free_fraction"] = Setting(share, "estimated", (
            f"--gpu-memory-utilization {user.gpu_memory_utilization:g} set by the user, as a share of the memory "
            f"free after weights and runtime reserve ({free / GIB:.1f} GiB per GPU)"))
    elif user is not None:   # a token cap alone: TensorRT-LLM holds the smaller pool, so the cap decides
        default = load_efficiency()
        settings["trtllm_kv_free_fraction"] = Setting(default.kv_fraction_serving, "assumed", (
            f"the capacity model's serving KV fraction of free memory "
            f"({default.sources.get('kv_fraction_serving', '')}); kv_cache_config.max_tokens caps the pool below it"))
    if user is not None and user.tokens is not None:
        tokens = kv_pool_tokens(dep)
        settings["kv_cache_tokens"] = Setting(tokens, "assumed", (
            f"the KV pool per replica set by the user ({user.describe()})" if tokens == user.tokens else
            f"the KV pool per replica: {user.describe()}, held to {tokens:,} tokens by the memory fraction"))
    return settings


def _prefix_setting(prefix: PrefixSignal | None) -> Setting:
    if prefix is None or prefix.hit_ratio_tokens is None:
        return Setting(None, "assumed", "no block hashes, cached tokens or sessions show prefix reuse (or the plan is "
                                        "a fixed --isl/--osl shape): the engine's default is kept")
    # Reported cached tokens are measured; a replay of the log's block hashes or its sessions is an estimate.
    source = {"measured": "measured", "assumed": "assumed"}.get(prefix.provenance, "estimated")
    ratio = prefix.hit_ratio_tokens
    on = ratio >= PREFIX_REUSE_ON
    how = {"block_hashes": "prefix-block hashes replayed through an ideal cache",
           "reported_cached_tokens": "cached tokens the log reports",
           "session_estimate": "sessions whose turns reuse the previous context",
           "set by user": "the what-if's cache hit rate"}.get(prefix.method, prefix.method)
    return Setting(on, source, f"{ratio:.0%} of input tokens reusable ({how}); on above {PREFIX_REUSE_ON:.0%}")


def context_setting(model: Model, longest: float, context_source: str) -> tuple[Setting, str | None]:
    """max-model-len: the longest context + headroom, capped at the model's own limit; and a note when capped.

    An engine refuses to start with a max-model-len above the checkpoint's ``max_position_embeddings``, so the
    headroom never goes past it; when the log's longest context itself is longer, the note says those requests
    will be refused.
    """
    source = context_source if context_source in SOURCES else "assumed"
    where = "in the log" if context_source == "measured" else "of the shape"
    wanted = _round_up(longest * (1.0 + CONTEXT_HEADROOM), CONTEXT_ROUND)
    why = (f"longest context {longest:,.0f} tokens ({source}, {where}) + {CONTEXT_HEADROOM:.0%} headroom (assumed), "
           f"rounded up to {CONTEXT_ROUND}")
    limit = model.max_context_tokens
    if limit is None or wanted <= limit:
        return Setting(wanted, source, why), None
    # The cap is the catalogue's max_position_embeddings of the checkpoint assumed for the model (a --model-path
    # checkpoint may differ, e.g. with YaRN enabled): assumed, whatever the longest context's provenance.
    limit_why = f"{model.name}'s limit of {limit:,} tokens (max_position_embeddings of its config.json, no RoPE extension)"
    if longest > limit:
        note = (f"{source} longest context {longest:,.0f} tokens {where}, model limit {limit:,} "
                f"({model.name}): requests longer than {limit:,} tokens will be refused by the engine; trim or pick a "
                "longer-context model")
        return Setting(limit, "assumed", f"capped at {limit_why}: the {source} longest context {longest:,.0f} "
                                         f"tokens {where} is longer; such requests will be refused"), note
    note = (f"{source} longest context {longest:,.0f} tokens fits {model.name}'s limit of {limit:,}, but the "
            f"{CONTEXT_HEADROOM:.0%} headroom ({wanted:,}) does not: max-model-len is capped at {limit:,}")
    return Setting(limit, "assumed", f"{why} = {wanted:,}, capped at {limit_why}"), note


def serving_settings(
    plan: Plan,
    dep: Deployment,
    workload: Workload,
    *,
    tpot_slo_ms: float,
    max_context_tokens: float,
    context_source: str,
    prefix: PrefixSignal | None = None,
    tp_source: str = "estimated",
    model_path: str | None = None,
    kv_pool: KVPool | None = None,
) -> ServingSettings:
    """The serving settings of a plan: ``workload`` is the one planned (after the what-if).

    ``kv_pool``: the KV pool the user set (already in ``dep``), so the engines' memory flags say so.
    """
    if not (math.isfinite(max_context_tokens) and max_context_tokens >= 1):
        raise ValueError(f"max_context_tokens={max_context_tokens!r} must be a token count ≥ 1")
    notes: list[str] = []
    if model_path is not None and (not model_path.strip() or len(model_path) > 1000
                                   or any(ord(ch) < 32 or ord(ch) == 127 for ch in model_path)):
        raise ValueError("--model-path must be a checkpoint path or repo id on one line (no control characters)")
    repo = model_repo(dep.model.id)
    if model_path:
        path = Setting(model_path, "assumed", "set by the user (--model-path)")
    elif repo:
        path = Setting(repo, "assumed", f"the Hugging Face repo assumed for {dep.model.name}; set --model-path for yours")
    else:
        path = Setting(dep.model.id, "assumed", "no repo id known for this model: replace with your checkpoint path")
    tp = Setting(dep.tp, "assumed" if tp_source == "assumed" else "estimated",
                 "set by the user" if tp_source == "assumed"
                 else f"smallest TP whose {dep.gpu.name} GPUs hold the {dep.precision.upper()} weights with room for KV")
    ep_value, adp = int(getattr(dep, "ep", 1) or 1), bool(getattr(dep, "attention_dp", False))
    ep = Setting(ep_value, "assumed", "the plan's expert parallelism (set by the user, or none)" if dep.model.is_moe
                 else "a dense model has no experts to spread")
    attention_dp = Setting(adp, "assumed", "the plan's attention data parallelism (set by the user)" if adp
                           else "attention is tensor-parallel (the default)")
    precision = Setting(dep.precision, "assumed", "the plan's weight precision (a choice; FP8 on GPUs with FP8 tensor cores)")
    kv_precision = Setting(dep.kv_precision, "assumed", "the plan's KV-cache precision (a choice)")

    max_model_len, context_note = context_setting(dep.model, float(max_context_tokens), context_source)
    if context_note:
        notes.append(context_note)
    model_len = int(max_model_len.value)
    if float(dep.max_batch_kv(model_len)) < 1:
        notes.append(f"one {model_len:,}-token sequence does not fit one replica's KV pool "
                     f"({dep.kv_pool_bytes_per_gpu() / GIB:.1f} GiB per GPU): raise TP or lower max-model-len")

    context = decode_context(workload)
    cap = int(operating_batch(dep, context, tpot_slo_ms))
    engine_cap = dep.engine_max_seqs
    seqs_why = (f"decode batch the KV pool and the {tpot_slo_ms:g} ms TPOT SLO allow at the mean decode context "
                f"{context:,.0f} tokens (capped at the engine's {engine_cap:,})")
    running = plan.operating_batch or 1.0
    fitting, fits = chunk_tokens(dep, running, context, tpot_slo_ms)
    if fits and fitting >= CHUNK_FLOOR:
        chunk = Setting(fitting, "estimated", (
            f"largest chunk (in {CHUNK_STEP}s) whose prefill fits one step next to the planned mean decode batch "
            f"({running:,.0f} sequences) within the TPOT SLO"))
    else:
        chunk = Setting(CHUNK_FLOOR, "assumed", (
            f"the usual online default: no chunk of {CHUNK_FLOOR} tokens fits one step next to the planned mean "
            f"decode batch ({running:,.0f}) within the {tpot_slo_ms:g} ms TPOT SLO, and smaller chunks would only "
            "slow prompts down (the plan already counts decode stalls while prompts prefill)"))
        notes.append(f"prefill chunks stall the decode batch beyond the {tpot_slo_ms:g} ms TPOT SLO for a step; the "
                     "plan's TPOT counts that stretch, disaggregated pools avoid it")
    if cap > chunk.value:  # the engines reject a step budget below the sequence cap (one token per sequence)
        chunk = Setting(_round_up(cap, CHUNK_STEP), "estimated", f"at least one token per running sequence ({cap:,})")
    pools: dict[str, PoolSettings] = {}
    if plan.replicas:
        pools["colocated"] = PoolSettings(
            "colocated",
            Setting(int(plan.replicas), "simulated", "the smallest colocated fleet whose replay of the log meets "
                    "every product's p90 class (one replica fewer misses)")
            if plan.provenance.get("gpus") == "simulated" and plan.meets_slo else
            Setting(int(plan.replicas), "estimated", f"colocated replicas that meet both SLOs at {plan.rate_rps:,.3g} req/s"
                    if plan.meets_slo else "replicas sized for 80% utilisation: the SLOs cannot be met colocated"),
            Setting(cap, "estimated", seqs_why),
            chunk,
        )
    dis = plan.disaggregated or {}
    k_p, k_d = dis.get("prefill_replicas"), dis.get("decode_replicas")
    if k_p and k_d:
        uncached = np.maximum(workload.input_tokens - workload.cached_tokens, 1.0)
        p90_in = _weighted_quantile(uncached, workload.weight, 0.9)
        prefill_chunk = int(min(max(_round_up(p90_in, 1024), PREFILL_CHUNK_MIN), CHUNK_MAX))
        mean_in = float(np.dot(workload.weight, workload.input_tokens))
        prefill_seqs = int(max(1, min(float(dep.max_batch_kv(mean_in)), engine_cap)))
        pools["prefill"] = PoolSettings(
            "prefill",
            Setting(int(k_p), "estimated", "prefill replicas that meet the TTFT SLO (with the KV transfer) alone"),
            Setting(prefill_seqs, "estimated", f"prompts of the mean input ({mean_in:,.0f} tokens) the KV pool holds "
                                               "while they wait for transfer (capped at the engine's limit)"),
            Setting(prefill_chunk, "estimated", f"p90 uncached prompt ({p90_in:,.0f} tokens) rounded up to 1024 "
                                                f"(at least {PREFILL_CHUNK_MIN}): most prompts prefill in one step"),
        )
        pools["decode"] = PoolSettings(
            "decode",
            Setting(int(k_d), "estimated", "decode replicas that meet the TPOT SLO without prefill interference"),
            Setting(cap, "estimated", seqs_why),
            Setting(_round_up(cap, 256), "estimated", "one token per running sequence per step, rounded up to 256"),
        )
    elif "colocated" in pools:
        notes.append("the disaggregated split cannot meet the SLOs (or was not sized): only colocated configs")
    if not pools:
        raise ValueError("the plan has no replica count to configure; check the deployment fits the model")
    rate = Setting(plan.rate_rps, "measured" if plan.rate_source == "measured" else "assumed",
                   f"the planned request rate ({plan.rate_source})")
    return ServingSettings(
        model_id=dep.model.id, gpu_name=dep.gpu.name, model_path=path, tp=tp, ep=ep, attention_dp=attention_dp,
        precision=precision,
        kv_precision=kv_precision, max_model_len=max_model_len, prefix_caching=_prefix_setting(prefix),
        memory=memory_settings(dep, kv_pool), rate_rps=rate, pools=pools, notes=notes, context_note=context_note,
        speculative=speculative_setting(dep),
    )


def speculative_setting(dep: Deployment) -> Setting | None:
    """The plan's speculative decoding as engine-neutral values (None without it); the draft's repo is assumed."""
    spec = dep.speculative
    if spec is None:
        return None
    draft, why = None, ""
    if spec.method == "eagle3":
        heads = load_speculative()["eagle3_heads"]
        draft = heads.get(dep.model.id) or f"EAGLE3_HEAD_FOR_{dep.model.id.upper().replace('-', '_').replace('.', '_')}"
        why = ("a published EAGLE-3 head for this model" if dep.model.id in heads
               else "no published EAGLE-3 head is known for this model: replace the placeholder with one trained for it")
    elif spec.method == "draft":
        draft = model_repo(str(spec.draft_model)) or str(spec.draft_model)
        why = f"{spec.draft_model}, the catalogue's smallest model with {dep.model.name}'s tokenizer"
    elif spec.method == "mtp":
        why = "the MTP layers ship in the model's own checkpoint"
    else:
        why = "drafts are copied from the prompt: no draft weights"
    value = {"method": spec.method, "draft_tokens": spec.draft_tokens, "draft": draft,
             "acceptance_length": spec.acceptance_length}
    return Setting(value, "assumed", f"speculative decoding chosen for the plan ({spec.describe()}); {why}")
