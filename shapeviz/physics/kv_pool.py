"""The KV pool as the engines set it: a token count per replica, or vLLM's share of GPU memory.

By default a replica's KV pool is the capacity model's serving fraction of the memory left after weights and the
runtime reserve (``Deployment.kv_pool_bytes_per_gpu``). An engine lets the operator set it instead:

* ``tokens`` per replica: vLLM ``--num-gpu-blocks-override`` (blocks of ``--block-size`` tokens), SGLang
  ``--max-total-tokens``, TensorRT-LLM ``kv_cache_config.max_tokens``;
* ``gpu_memory_utilization`` F, vLLM's meaning: each GPU may use F of its memory for weights, the runtime
  (activations, NCCL buffers, CUDA graphs) and the KV pool, so the pool is F × memory − weights − reserve.

Given both, the smaller pool holds (as TensorRT-LLM and SGLang combine a token cap with a memory fraction).
``with_kv_pool`` returns the deployment whose serving (and offline) KV fraction gives that pool, so the planner,
the load curve and the simulator all see it without knowing where it came from.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace

from shapeviz.physics.catalogue import GIB
from shapeviz.physics.steps import Deployment


@dataclass(frozen=True)
class KVPool:
    """The user's KV pool setting: tokens per replica and/or vLLM's GPU memory utilisation (None: not set)."""

    tokens: int | None = None
    gpu_memory_utilization: float | None = None

    def __post_init__(self) -> None:
        t, f = self.tokens, self.gpu_memory_utilization
        if t is not None and (isinstance(t, bool) or not isinstance(t, (int, float)) or not math.isfinite(t)
                              or t < 1 or t != int(t)):
            raise ValueError(f"--kv-cache-tokens must be a whole number of tokens ≥ 1, got {t!r}")
        if f is not None and (isinstance(f, bool) or not isinstance(f, (int, float)) or not math.isfinite(f)
                              or not 0.0 < f <= 1.0):
            raise ValueError(f"--gpu-memory-utilization must be a fraction in (0, 1], got {f!r}")
        if t is not None:
            object.__setattr__(self, "tokens", int(t))

    @property
    def is_set(self) -> bool:
        """True when the user set either knob."""
        return self.tokens is not None or self.gpu_memory_utilization is not None

    def describe(self) -> str:
        """The flags as given, e.g. ``--kv-cache-tokens 141,000``."""
        parts = []
        if self.tokens is not None:
            parts.append(f"--kv-cache-tokens {self.tokens:,}")
        if self.gpu_memory_utilization is not None:
            parts.append(f"--gpu-memory-utilization {self.gpu_memory_utilization:g}")
        return " and ".join(parts)


def kv_pool_tokens(dep: Deployment) -> int:
    """Tokens one replica's KV pool holds (the simulator's pool size; the planner's KV cap)."""
    return int(dep.kv_pool_bytes_per_gpu() // max(float(dep.kv_bytes_per_gpu(1.0)), 1e-9))


def with_kv_pool(dep: Deployment, pool: KVPool | None) -> Deployment:
    """``dep`` with the KV pool the user set (unchanged when nothing is set); a one-line ValueError when it cannot fit."""
    if pool is None or not pool.is_set:
        return dep
    free = dep.free_bytes_per_gpu        # memory − weights − reserve, per GPU
    draft = dep.speculative.kv_pool_share(dep) if dep.speculative is not None else 0.0
    room = free * (1.0 - draft)          # the most the target's KV can take at a fraction of 1
    per_token = float(dep.kv_bytes_per_gpu(1.0))
    fractions = []
    if pool.gpu_memory_utilization is not None:
        f = pool.gpu_memory_utilization
        kv = f * dep.gpu.memory_bytes - dep.weight_bytes_per_gpu - dep.eff.memory_reserve_gib * GIB
        if kv < per_token:
            need = (dep.weight_bytes_per_gpu + dep.eff.memory_reserve_gib * GIB) / dep.gpu.memory_bytes
            raise ValueError(
                f"--gpu-memory-utilization {f:g} leaves no KV pool on {dep.describe()}: weights "
                f"{dep.weight_bytes_per_gpu / GIB:.1f} GiB + runtime reserve {dep.eff.memory_reserve_gib:.1f} GiB "
                f"already take {need:.2f} of each GPU's {dep.gpu.memory_bytes / GIB:.0f} GiB")
        fractions.append(kv / free)
    if pool.tokens is not None:
        most = int(room // per_token)
        if pool.tokens > most:
            raise ValueError(f"--kv-cache-tokens {pool.tokens:,} does not fit {dep.describe()}: its GPUs hold at most "
                             f"{most:,} tokens of KV after weights and the runtime reserve")
        # half a token more, so that the pool's floor is exactly the tokens asked for despite rounding
        fractions.append((pool.tokens + 0.5) * per_token / room)
    f = min(min(fractions), 1.0)
    source = f"set by user ({pool.describe()})"
    eff = dep.eff.replace(kv_fraction_serving=f, kv_fraction_offline=f,
                          sources={**dep.eff.sources, "kv_fraction_serving": source, "kv_fraction_offline": source})
    return replace(dep, efficiency=eff)
