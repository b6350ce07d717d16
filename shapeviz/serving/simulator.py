"""A discrete-event simulator of LLM serving: the log replayed on a fleet, iteration by iteration.

Requests arrive from the log's own timestamps (scaled by the traffic lever), as a Poisson stream, or from a
closed loop of C clients (how aiperf, guidellm and NIM benchmark). A router spreads them over replicas
(``shapeviz.serving.routers``: round-robin, least outstanding tokens, session affinity, prefix-aware). Each
replica runs an iteration-level scheduler like vLLM's and TensorRT-LLM's: every iteration decodes one token of
each running sequence first, then fills the rest of a token budget with prefill chunks (chunked prefill), up to
``max_num_seqs`` sequences, while a KV pool holds every running sequence's context; a request is admitted only
as the engine's admission policy allows (``ADMISSIONS``: vLLM's watermark, TensorRT-LLM's guaranteed-no-evict or
max-utilization), and when decode growth overflows the pool the newest sequence is preempted (recomputed later). Prefix-cache hits skip prefill work:
when the log carries block hashes or sessions, each replica keeps its own prefix cache in its KV pool
(``shapeviz.serving.prefix_cache``) and a request's hit is what that replica holds when it is admitted;
otherwise each request keeps the log's reported cached tokens (or the what-if share).
Disaggregated mode runs a prefill pool and a decode pool with the KV transfer in between.

Step times come from the calibrated physics (``physics.mixed_step_s`` and ``decode_step_s``), so the simulator
and the analytic planner share one source of truth. Speed: iterations that only decode, with nothing arriving
and nothing finishing, are advanced together as one vectorised run; an arrival cuts a run at the iteration in
progress, so the result is the same as stepping one iteration at a time. Colocated runs and disaggregated pools,
their prefix caches, every router and speculative decoding included, take the same loop compiled with numba
(``sim_core``, tens to hundreds of times faster, the same results bit for bit); the fixed-capacity validation cache
and caches whose state would pass ``MAX_CACHE_STATE_BYTES`` run the Python loop here.
"""
from __future__ import annotations

import heapq
import math
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np
import pandas as pd

from shapeviz.physics.steps import (
    DEFAULT_TPOT_SLO_MS,
    Deployment,
    decode_step_s,
    mixed_step_s,
    prefill_time_s,
)
from shapeviz.plain import json_safe
from shapeviz.serving.planner import (
    DEFAULT_TTFT_SLO_MS,
    WhatIf,
    Workload,
)
from shapeviz.serving import sim_core
from shapeviz.serving.prefix_cache import PrefixBlocks, PrefixCache
from shapeviz.serving.routers import LABELS as ROUTER_LABELS
from shapeviz.serving.routers import (
    LOAD_ROUTERS,
    ROUTERS,
    make_router,
    prefix_thresholds,
    random_words,
    session_owners,
)
from shapeviz.serving.stages import saturated_stages
from shapeviz.workload.requests import RequestTable, Requests, replayed_tokens

ARRIVALS = ("trace", "poisson", "closed", "all_at_once")
SCHEDULERS = ("fcfs", "priority", "deadline")
# How a replica admits a waiting request into its KV pool, as the engines do it:
# - "watermark" (vLLM's BlockSpaceManager.can_allocate, vllm/core/block_manager.py): admitted while the pool keeps
#   WATERMARK_SHARE of its blocks free after the new prompt; a running sequence that cannot grow preempts the
#   newest (recompute). vLLM's and SGLang's policy here (SGLang reserves decode room by an estimated ratio instead).
# - "guaranteed_no_evict" (TensorRT-LLM's default CapacitySchedulerPolicy, GuaranteedNoEvictScheduler in
#   cpp/tensorrt_llm/batch_manager/capacityScheduler.cpp): admitted only when its prompt and every token it will
#   generate fit beside what the running sequences still need to completion, so nothing is ever preempted.
# - "max_utilization" (TensorRT-LLM's MAX_UTILIZATION): admitted whenever the prompt fits; the newest is paused
#   (recomputed here) when the pool overflows.
ADMISSIONS = ("watermark", "guaranteed_no_evict", "max_utilization")
ENGINE_ADMISSION = {"vllm": "watermark", "sglang": "watermark", "trtllm": "guaranteed_no_evict"}
WATERMARK_SHARE = 0.01   # vLLM's default --watermark (SchedulerConfig / BlockSpaceManager watermark=0.01)
DEFAULT_MAX_NUM_SEQS: int | None = None  # None: the deployment's engine cap (Deployment.engine_max_seqs: vLLM's
# max_num_seqs default on that GPU, else the calibrated max_batch)
DEFAULT_MAX_BATCHED_TOKENS = 8192  # vLLM / TensorRT-LLM default token budget per iteration (max_num_tokens)
MAX_RUN_STEPS = 2048               # longest decode run advanced at once (bounds the arrays of one run)
CONTEXT_GRID = 48                  # contexts the decode-step table is evaluated at, per batch size
SATURATION_SERVED = 0.9            # served/offered rate below this: the queue grows without bound
QUANTILES = (50, 90, 99)
RANDOM_WORDS_PER_REQUEST = 3       # the random router's draws handed to the compiled loop per request (more if short)
COMPILED = True                    # runs take the compiled loop (sim_core) when numba is present (``_compiled``)
# the compiled loop's prefix caches keep 16 bytes per replica per distinct block of the window (per block a replica
# meets, with static routing): above this bound (which also keeps cell numbers in int32) the run takes the Python
# loop, whose caches hold only what they cache
MAX_CACHE_STATE_BYTES = 1 << 30


def latency_stats(values: np.ndarray) -> dict[str, float | None]:
    """``{mean, p50, p90, p99}`` of latencies in ms, NaN left out (all None when nothing is left)."""
    v = values[~np.isnan(values)]
    if v.size == 0:
        return {"mean": None, **{f"p{q}": None for q in QUANTILES}}
    return {"mean": float(v.mean()), **{f"p{q}": float(x) for q, x in zip(QUANTILES, np.percentile(v, QUANTILES))}}


@dataclass
class SimResult:
    """What a simulation measured: one row per request (``requests``) and fleet-level series."""

    requests: pd.DataFrame      # arrival_s, input_tokens, output_tokens, cached_tokens, queue_ms, ttft_ms, tpot_ms,
                                # itl_ms, e2e_ms, replica, preemptions (+ product when known)
    utilization: pd.DataFrame   # time_s, replica, busy (share of the bucket the replica was stepping)
    settings: dict[str, Any]
    ttft_slo_ms: float
    tpot_slo_ms: float
    offered_rps: float | None
    preemptions: int
    kv_peak_share: float
    sim_seconds: float = 0.0
    notes: list[str] = field(default_factory=list)
    prefix: dict[str, Any] = field(default_factory=dict)   # where reuse came from, hit ratios, per replica

    @property
    def goodput(self) -> float:
        """Share of requests that met both SLOs (TTFT and TPOT; single-token replies have no TPOT)."""
        r = self.requests
        if len(r) == 0:
            return float("nan")
        tpot_ok = r["tpot_ms"].isna() | (r["tpot_ms"] <= self.tpot_slo_ms)
        return float(((r["ttft_ms"] <= self.ttft_slo_ms) & tpot_ok).mean())

    @property
    def served_rps(self) -> float:
        """Completed requests per second over the run (first arrival to last completion)."""
        r = self.requests
        finish = r["arrival_s"] + r["e2e_ms"] / 1000.0
        span = float(finish.max() - r["arrival_s"].min()) if len(r) else 0.0
        return (len(r) - 1) / span if span > 0 and len(r) > 1 else float("nan")

    @property
    def makespan_s(self) -> float:
        """Seconds from the first arrival to the last completion (a batch job's duration)."""
        r = self.requests
        if len(r) == 0:
            return 0.0
        return float((r["arrival_s"] + r["e2e_ms"] / 1000.0).max() - r["arrival_s"].min())

    @property
    def saturated(self) -> bool:
        """True when the fleet cannot keep up in some stage of the log: its queue keeps growing there.

        Judged per stage of the arrival rate (``serving.stages``): a log at a steady rate is one stage; a staged log
        (a load test) is judged stage by stage, so that more requests in the system at a higher stage's rate are
        not mistaken for a queue that grows.
        """
        if self.offered_rps is None or len(self.requests) < 20:
            return False
        return any(saturated_stages(self.requests))

    def summary(self) -> dict[str, Any]:
        """The stable JSON summary (``simulate --json``): latencies, throughput, goodput, utilisation, saturation."""
        r = self.requests

        def stats(column: str) -> dict[str, float | None]:
            return latency_stats(r[column].to_numpy(dtype=np.float64))

        served = self.served_rps
        span_rate = served if math.isfinite(served) else 0.0
        mean_out = float(r["output_tokens"].mean()) if len(r) else 0.0
        busy = self.utilization
        util = float(busy["busy"].mean()) if len(busy) else 0.0
        return json_safe({
            "method": "simulated",
            "requests": int(len(r)),
            "ttft_ms": stats("ttft_ms"),
            "tpot_ms": stats("tpot_ms"),
            "itl_ms": stats("itl_ms"),
            "e2e_ms": stats("e2e_ms"),
            "queue_ms": stats("queue_ms"),
            "throughput": {"requests_per_s": span_rate, "output_tokens_per_s": span_rate * mean_out},
            "makespan_s": self.makespan_s,
            "offered_requests_per_s": self.offered_rps,
            "goodput": self.goodput,
            "slo": {"ttft_ms": self.ttft_slo_ms, "tpot_ms": self.tpot_slo_ms},
            "utilization": util,
            "saturated": self.saturated,
            "preemptions": self.preemptions,
            "kv_peak_share": self.kv_peak_share,
            "settings": self.settings,
            "prefix": self.prefix,
            "notes": self.notes,
        })


# --- inputs ----------------------------------------------------------------------------------------------
def requests_from_frame(frame: pd.DataFrame, whatif: WhatIf = WhatIf(), *, reuse: bool = True,
                        block_size: int | None = None) -> Requests:
    """Per-request arrays of a canonical frame after the what-if (arrival from ``timestamp`` when present): every
    row of its request table (``workload.requests.RequestTable``; a sizing builds the table once and slices it).

    The what-if uses the planner's own semantics (``Workload.apply``) with one point per request, and the
    traffic lever compresses the timeline (twice the traffic: arrivals twice as close). With ``reuse`` the
    requests carry their prompt blocks when the log has block hashes or sessions (``block_size``: the hashes'
    block size, inferred when None), so the replicas' prefix caches decide each request's hit.
    """
    return RequestTable.build(frame, whatif, reuse=reuse, block_size=block_size).requests()


def requests_from_workload(workload: Workload, n: int, seed: int = 0, whatif: WhatIf = WhatIf()) -> Requests:
    """``n`` requests drawn from a binned workload's weighted points (no arrival times: Poisson or closed loop)."""
    w = workload.apply(whatif)
    rng = np.random.default_rng(seed)
    pick = rng.choice(w.weight.size, size=int(n), p=w.weight) if w.weight.size > 1 else np.zeros(int(n), dtype=np.int64)
    n_in, n_out, n_cached = w.input_tokens[pick], w.output_tokens[pick], w.cached_tokens[pick]
    return Requests(*replayed_tokens(n_in, n_out, np.minimum(n_cached, n_in), WhatIf()))


def fixed_requests(isl: int, osl: int, n: int, cached_tokens: int = 0) -> Requests:
    """``n`` identical requests of ``isl`` input and ``osl`` output tokens (the published benchmarks' shape)."""
    if isl < 1 or osl < 1:
        raise ValueError(f"--isl and --osl must be ≥ 1 token, got isl={isl!r}, osl={osl!r}")
    if n < 1:
        raise ValueError(f"the number of requests must be ≥ 1, got {n}")
    return Requests(np.full(n, isl, dtype=np.int64), np.full(n, osl, dtype=np.int64),
                    np.full(n, min(max(cached_tokens, 0), isl - 1), dtype=np.int64))


# --- one replica -------------------------------------------------------------------------------------------
class _Pool:
    """Global per-request arrays and settings shared by the replicas of one simulation."""

    def __init__(self, dep: Deployment, req: Requests, max_num_seqs: int, max_batched_tokens: int,
                 scheduler: str, kv_tokens: int, chunked: bool = True,
                 cache_blocks: float | None = None, outputs: bool = True, admission: str = "watermark") -> None:
        self.dep = dep
        self.admission = admission
        self.watermark = int(WATERMARK_SHARE * kv_tokens) if admission == "watermark" else 0
        self.chunked = chunked
        self.n_in = req.input_tokens
        self.n_out = req.output_tokens
        self.n_cached = req.cached_tokens
        self.blocks = req.blocks
        self.cache_blocks = cache_blocks
        self.look: list[list[int]] = []
        self.keep: list[list[int]] = []
        if req.blocks is not None:   # a request with blocks has its hit simulated; one without keeps the log's
            self.n_cached = req.cached_before_lookup()
            if outputs:   # the Python loop walks lists (the compiled loop takes the CSR arrays)
                self.look, self.keep = req.blocks.lists()
        self.hit_blocks = np.zeros(len(req) if outputs else 0, dtype=np.int64)   # leading blocks found at admission
        self.max_num_seqs = max_num_seqs
        self.budget = max_batched_tokens
        self.scheduler = scheduler
        self.kv_tokens = kv_tokens
        self.ttft_target_s = None if req.ttft_target_ms is None else np.asarray(req.ttft_target_ms) / 1000.0
        self.default_ttft_s = DEFAULT_TTFT_SLO_MS / 1000.0   # requests without a target of their own
        # the per-request results, filled by the Python loop (the compiled loop returns its own: no second copy)
        size = len(req) if outputs else 0
        self.arrival = np.full(size, np.nan)
        self.start = np.full(size, np.nan)      # first scheduled (end of queue wait)
        self.first = np.full(size, np.nan)      # first token
        self.finish = np.full(size, np.nan)
        self.replica = np.full(size, -1, dtype=np.int64)
        self.preempted = np.zeros(size, dtype=np.int64)
        self.decode_tables: dict[int, np.ndarray] = {}
        hi = float(np.max(req.input_tokens + req.output_tokens)) + 1.0
        self.context_grid = np.unique(np.concatenate([[1.0], np.geomspace(1.0, max(hi, 2.0), CONTEXT_GRID)]))

    def decode_times(self, batch: int, context0: float, steps: int) -> np.ndarray:
        """Step times of ``steps`` decode iterations of ``batch`` sequences from mean context ``context0``.

        ``decode_step_s`` tabulated once per batch size over a log grid of contexts, then interpolated: one call of
        the physics per distinct batch instead of one per iteration.
        """
        table = self.decode_tables.get(batch)
        if table is None:
            table = decode_step_s(self.dep, float(batch), self.context_grid)
            self.decode_tables[batch] = table
        return np.interp(context0 + np.arange(steps, dtype=np.float64), self.context_grid, table)


class _Replica:
    """One replica's queue, running batch, KV pool and the iteration (or decode run) in progress."""

    def __init__(self, index: int, pool: _Pool, role: str, on_done: Callable[[int, float, int], None]) -> None:
        self.index = index
        self.pool = pool
        self.role = role                 # colocated | prefill | decode
        self.on_done = on_done           # (request, time, replica) → the simulation's bookkeeping
        self.waiting: deque[int] | list[tuple[int, int]] = deque() if pool.scheduler == "fcfs" else []
        self.ids = np.empty(0, dtype=np.int64)
        self.pre_done = np.empty(0, dtype=np.int64)   # prompt tokens in KV (prefill position)
        self.pre_total = np.empty(0, dtype=np.int64)  # prompt tokens to prefill (input, + generated after preemption)
        self.out_left = np.empty(0, dtype=np.int64)
        self.ctx = np.empty(0, dtype=np.int64)        # tokens held in KV
        self.kv_used = 0
        self.kv_peak = 0
        self.outstanding = 0                          # tokens routed here and not yet processed (router signal)
        self.clock = 0.0
        self.busy_until = math.inf                    # end of the planned iteration/run; inf when idle
        self.plan: tuple | None = None
        self.busy_log: list[tuple[float, float]] = []
        self.preemptions = 0
        self.resume: dict[int, tuple[int, int]] = {}  # request → (prompt to prefill, tokens left) when re-queued
        self.in_flight = 0                            # requests routed here and not finished (router signal)
        self.cache = (PrefixCache(pool.blocks.block_size, pool.cache_blocks)
                      if pool.blocks is not None and role != "decode" else None)
        # blocks shared by running sequences are held once in the pool (when the cache lives in it)
        self.refcounted = self.cache is not None and pool.cache_blocks is None
        self.own_blocks: dict[int, int] = {}          # running request → tokens of its prompt blocks (charged apart)

    # -- queue --
    def enqueue(self, rid: int, now: float) -> None:
        """A request arrives at this replica (a run in progress is cut at the iteration under way)."""
        self.in_flight += 1
        # what this cache holds now, exact at admission (a request without blocks keeps the log's cached tokens)
        if self.cache is not None and rid not in self.resume and self.pool.look[rid]:
            self.pool.n_cached[rid] = self._hit(rid, int(self.pool.n_in[rid]))[1]
        if self.pool.scheduler == "fcfs":
            self.waiting.append(rid)  # type: ignore[union-attr]
        elif self.pool.scheduler == "deadline":  # earliest TTFT deadline first: arrival + its class's TTFT target
            target = self.pool.default_ttft_s if self.pool.ttft_target_s is None else self.pool.ttft_target_s[rid]
            heapq.heappush(self.waiting, (now + float(target), rid))  # type: ignore[arg-type]
        else:  # shortest prompt first (uncached tokens), FCFS among equals
            heapq.heappush(self.waiting, (int(self.pool.n_in[rid] - self.pool.n_cached[rid]), rid))  # type: ignore[arg-type]
        prompt = 0 if self.role == "decode" else int(self.pool.n_in[rid] - self.pool.n_cached[rid])
        self.outstanding += prompt + int(self.pool.n_out[rid])
        if self.plan is None:
            self.clock = max(self.clock, now)
            self._start()
        elif self.plan[0] == "run" and now < self.busy_until:
            t0, cum = self.plan[1], self.plan[2]
            done = int(np.searchsorted(cum, now - t0, side="left")) + 1
            if done < cum.size:
                self._commit_run(done)
                self._start()

    def _hit(self, rid: int, prompt: int) -> tuple[int, int]:
        """Leading blocks of the request this replica's cache holds, and the tokens of ``prompt`` they cover (at
        least one token is always computed)."""
        blocks = self.cache.match(self.pool.look[rid])  # type: ignore[union-attr]
        return blocks, max(min(blocks * self.cache.block_size, prompt - 1), 0)  # type: ignore[union-attr]

    def _release(self, rid: int) -> None:
        """A sequence left the KV pool (finished, preempted, or sent to the decode pool): its blocks stay cached.

        The caller took the sequence's whole context off ``kv_used``; its prompt blocks were charged apart (once
        for all the sequences sharing them), so they are given back here and what the last holder lets go of is
        taken off instead."""
        if self.cache is not None:
            freed = self.cache.release(self.pool.look[rid], self.pool.keep[rid])
            self.kv_used += self.own_blocks.pop(rid, 0) - freed
            self.cache.fit(self.pool.kv_tokens - self.kv_used)

    def _block_tokens(self, rid: int) -> tuple[list[int], int]:
        """Tokens of each prompt block of the request in the pool, and of its distinct blocks (what it would hold
        alone); a block past the prompt's end holds nothing."""
        size, n = self.cache.block_size, int(self.pool.n_in[rid])  # type: ignore[union-attr]
        ids = self.pool.look[rid]
        tokens = [max(min(size, n - j * size), 0) for j in range(len(ids))]
        seen: set[int] = set()
        own = 0
        for b, t in zip(ids, tokens):
            if b not in seen:
                own += t
                seen.add(b)
        return tokens, own

    def _peek(self) -> int:
        return self.waiting[0] if self.pool.scheduler == "fcfs" else self.waiting[0][1]  # type: ignore[index,return-value]

    def _pop(self) -> int:
        if self.pool.scheduler == "fcfs":
            return self.waiting.popleft()  # type: ignore[union-attr]
        return heapq.heappop(self.waiting)[1]  # type: ignore[arg-type]

    def _push_front(self, rid: int) -> None:
        if self.pool.scheduler == "fcfs":
            self.waiting.appendleft(rid)  # type: ignore[union-attr]
        else:
            heapq.heappush(self.waiting, (-1, rid))  # type: ignore[arg-type]  # preempted work resumes first

    # -- scheduling --
    def _preempt_newest(self) -> None:
        """Free the KV of the most recently admitted sequence and queue it again (recompute, as vLLM does)."""
        i = self.ids.size - 1
        rid = int(self.ids[i])
        self.kv_used -= int(self.ctx[i])
        generated = int(self.pool.n_out[rid] - self.out_left[i])
        self.pool.preempted[rid] += 1
        self.preemptions += 1
        self.resume[rid] = (int(self.pool.n_in[rid]) + generated, int(self.out_left[i]))
        # the router's signal gets back the prompt to recompute (it had lost what was prefilled of this sequence)
        self.outstanding += self.resume[rid][0] - int(self.pre_total[i] - self.pre_done[i])
        self._keep(np.arange(self.ids.size) < i)
        self._release(rid)
        self._push_front(rid)

    def _keep(self, mask: np.ndarray) -> None:
        self.ids, self.pre_done, self.pre_total = self.ids[mask], self.pre_done[mask], self.pre_total[mask]
        self.out_left, self.ctx = self.out_left[mask], self.ctx[mask]

    def _start(self) -> None:
        """Plan the next iteration (a mixed prefill+decode step) or a run of decode-only iterations."""
        pool = self.pool
        while True:
            decoding = self.pre_done >= self.pre_total
            b = int(decoding.sum())
            if b and pool.kv_tokens - self.kv_used < b and self.ids.size > 1:
                self._preempt_newest()
                continue
            break
        budget = pool.budget - b
        # room for new prompts: the next step's growth kept aside, or (guaranteed-no-evict) every running
        # sequence's tokens still to generate
        no_evict = pool.admission == "guaranteed_no_evict"
        free = pool.kv_tokens - self.kv_used - (int(self.out_left.sum()) if no_evict else b)
        chunk = np.zeros(self.ids.size, dtype=np.int64)
        # running prompts first (their KV is already reserved), in admission order
        for i in np.flatnonzero(~decoding):
            if budget <= 0:
                break
            c = int(min(self.pre_total[i] - self.pre_done[i], budget))
            chunk[i] = c
            budget -= c
        # then admit waiting requests while the token budget, the sequence cap and the KV pool allow
        new_ids, new_done, new_total, new_out, new_chunk = [], [], [], [], []
        while self.waiting and self.ids.size + len(new_ids) < pool.max_num_seqs:
            rid = self._peek()
            total, out_left = self.resume.get(rid, (int(pool.n_in[rid]), int(pool.n_out[rid])))
            done = 0 if rid in self.resume else int(pool.n_cached[rid])
            # the replica's cache at admission (a preempted prompt may hit its own blocks); a request without blocks
            # keeps the log's cached tokens (``Requests.cached_before_lookup``)
            blocked = self.cache is not None and bool(pool.look[rid])
            if blocked:
                hit_blocks, done = self._hit(rid, total)
            if self.role == "decode":
                done = total  # the prompt's KV arrives from the prefill pool
            charge = total   # what admitting it takes from the pool: blocks running sequences hold are not taken twice
            if self.refcounted and blocked:
                tokens, own = self._block_tokens(rid)
                charge = total - self.cache.shared_tokens(pool.look[rid], tokens)  # type: ignore[union-attr]
            need = charge + out_left if no_evict else charge
            # the watermark keeps a share of the pool free, except for a request that would run alone
            if need > free - (pool.watermark if self.ids.size + len(new_ids) else 0):
                break
            c = min(total - done, budget)
            if total - done > 0 and c <= 0:
                break
            if not pool.chunked and c < total - done:
                # whole prompts only (TensorRT-LLM without context chunking): it waits for an iteration with
                # room, unless no other prompt is in this one (a prompt longer than the budget then runs alone)
                if budget < pool.budget - b:
                    break
                c = total - done
            self._pop()
            if rid in self.resume:   # a recompute skips what its cache hit (or the KV it holds) covers
                self.outstanding -= done
            if blocked:
                if rid not in self.resume:   # the counted hit, and the router's estimate made exact
                    self.outstanding += int(pool.n_cached[rid]) - done
                    pool.n_cached[rid] = done
                    pool.hit_blocks[rid] = hit_blocks
                if self.refcounted:
                    self.cache.pin(pool.look[rid], tokens)
                    self.own_blocks[rid] = own
                else:
                    self.cache.pin(pool.look[rid])
            self.resume.pop(rid, None)
            free -= need
            self.kv_used += charge
            budget -= c
            if math.isnan(pool.start[rid]):
                pool.start[rid] = self.clock
            new_ids.append(rid); new_done.append(done); new_total.append(total)
            new_out.append(out_left); new_chunk.append(c)
        if new_ids:
            self.ids = np.concatenate([self.ids, np.asarray(new_ids, dtype=np.int64)])
            self.pre_done = np.concatenate([self.pre_done, np.asarray(new_done, dtype=np.int64)])
            self.pre_total = np.concatenate([self.pre_total, np.asarray(new_total, dtype=np.int64)])
            self.out_left = np.concatenate([self.out_left, np.asarray(new_out, dtype=np.int64)])
            self.ctx = np.concatenate([self.ctx, np.asarray(new_total, dtype=np.int64)])
            chunk = np.concatenate([chunk, np.asarray(new_chunk, dtype=np.int64)])
            # decode-pool arrivals hold their prompt's KV already: they decode from this iteration on
            decoding = np.concatenate([decoding, np.asarray(new_done, dtype=np.int64) >= np.asarray(new_total)])
            b = int(decoding.sum())
            if self.cache is not None:   # the admitted sequences take room from the cached blocks
                self.cache.fit(pool.kv_tokens - self.kv_used)
        self.kv_peak = max(self.kv_peak, self.kv_used)
        if self.ids.size == 0:
            self.plan, self.busy_until = None, math.inf
            return
        mean_ctx = float(self.ctx[decoding].mean()) if b else 0.0
        if chunk.any():
            part = chunk > 0
            dt = mixed_step_s(pool.dep, self.pre_done[part] + chunk[part], self.pre_done[part], b, mean_ctx)
            self.plan = ("step", self.clock, chunk, decoding)
            self.busy_until = self.clock + dt
            return
        if b == 0:
            raise RuntimeError("scheduler planned an empty iteration")
        # decode-only: advance until the first sequence finishes or the KV pool fills (an arrival may cut it short)
        steps = int(min(self.out_left[decoding].min(), MAX_RUN_STEPS,
                        max((pool.kv_tokens - self.kv_used) // max(b, 1), 1)))
        cum = np.cumsum(pool.decode_times(b, mean_ctx, steps))
        self.plan = ("run", self.clock, cum, decoding)
        self.busy_until = self.clock + float(cum[-1])

    # -- completing work --
    def advance(self) -> None:
        """Finish the planned iteration or run (at ``busy_until``) and plan the next."""
        assert self.plan is not None
        if self.plan[0] == "run":
            self._commit_run(int(self.plan[2].size))
        else:
            self._commit_step()
        self._start()

    def _log_busy(self, t0: float, end: float) -> None:
        # A loaded replica steps back to back: one span per busy period, not one per iteration, so the log grows
        # with the idle gaps (at most one per request), not with the number of iterations simulated.
        if self.busy_log and t0 <= self.busy_log[-1][1]:
            self.busy_log[-1] = (self.busy_log[-1][0], end)
        else:
            self.busy_log.append((t0, end))

    def _commit_run(self, steps: int) -> None:
        _, t0, cum, decoding = self.plan  # type: ignore[misc]
        end = t0 + float(cum[steps - 1])
        self._log_busy(t0, end)
        b = int(decoding.sum())
        self.out_left[decoding] -= steps
        self.ctx[decoding] += steps
        self.kv_used += b * steps
        self.outstanding -= b * steps
        if self.cache is not None:
            self.cache.fit(self.pool.kv_tokens - self.kv_used)
        self.clock = end
        self.plan = None
        self._finish_done(end)

    def _commit_step(self) -> None:
        _, t0, chunk, decoding = self.plan  # type: ignore[misc]
        end = self.busy_until
        self._log_busy(t0, end)
        pool = self.pool
        was_prefilling = self.pre_done < self.pre_total
        self.pre_done = self.pre_done + chunk
        first_now = was_prefilling & (self.pre_done >= self.pre_total)
        # decoding sequences and prompts completed by this step each emit one token
        emit = decoding | first_now
        self.outstanding -= int(chunk.sum()) + int(emit.sum())
        for i in np.flatnonzero(first_now):
            rid = int(self.ids[i])
            if math.isnan(pool.first[rid]):
                pool.first[rid] = end
        self.out_left = self.out_left - emit
        grow = int(decoding.sum())
        self.ctx = self.ctx + decoding
        self.kv_used += grow
        if self.cache is not None:
            self.cache.fit(pool.kv_tokens - self.kv_used)
        self.clock = end
        self.plan = None
        if self.role == "prefill" and first_now.any():
            for i in np.flatnonzero(first_now):
                self.on_done(int(self.ids[i]), end, self.index)
            gone = first_now
            self.kv_used -= int(self.ctx[gone].sum())
            self.in_flight -= int(gone.sum())
            left = self.ids[gone]
            self._keep(~gone)
            for rid in left:
                self._release(int(rid))
        self._finish_done(end)

    def _finish_done(self, now: float) -> None:
        done = (self.out_left <= 0) & (self.pre_done >= self.pre_total)
        if not done.any():
            return
        pool = self.pool
        for i in np.flatnonzero(done):
            rid = int(self.ids[i])
            pool.finish[rid] = now
            self.on_done(rid, now, self.index)
        self.kv_used -= int(self.ctx[done].sum())
        self.in_flight -= int(done.sum())
        left = self.ids[done]
        self._keep(~done)
        for rid in left:
            self._release(int(rid))


# --- the fleet ---------------------------------------------------------------------------------------------
def admission_policy(dep: Deployment, admission: str | None = None) -> str:
    """The admission policy a replay uses: the one asked for, else the deployment's engine's (vLLM's watermark)."""
    if admission is None:
        return ENGINE_ADMISSION.get(getattr(dep, "engine", None) or "vllm", "watermark")
    if admission not in ADMISSIONS:
        raise ValueError(f"admission={admission!r} must be one of {ADMISSIONS}")
    return admission


def _parse_disaggregate(value: str | tuple[int, int] | None) -> tuple[int, int] | None:
    if value is None:
        return None
    if isinstance(value, str):
        left, sep, right = value.partition(":")
        try:
            p, d = int(left), int(right)
        except ValueError:
            p = d = -1
        if not sep or p < 1 or d < 1:
            raise ValueError(f"--disaggregate expects PREFILL:DECODE replica counts such as 2:6, got {value!r}")
        return p, d
    p, d = (int(value[0]), int(value[1]))
    if p < 1 or d < 1:
        raise ValueError(f"disaggregate={value!r} needs at least one prefill and one decode replica")
    return p, d


def simulate(
    workload_or_requests: Workload | Requests | pd.DataFrame,
    dep: Deployment,
    *,
    arrivals: str | None = None,
    rate_rps: float | None = None,
    concurrency: int | None = None,
    replicas: int = 1,
    requests: int | None = None,
    duration_s: float | None = None,
    seed: int = 0,
    scheduler: str = "fcfs",
    router: str = "round_robin",
    disaggregate: str | tuple[int, int] | None = None,
    max_num_seqs: int | None = DEFAULT_MAX_NUM_SEQS,
    max_num_batched_tokens: int = DEFAULT_MAX_BATCHED_TOKENS,
    whatif: WhatIf = WhatIf(),
    ttft_slo_ms: float = DEFAULT_TTFT_SLO_MS,
    tpot_slo_ms: float = DEFAULT_TPOT_SLO_MS,
    kv_fraction: float | None = None,
    chunked_prefill: bool = True,
    ramp: bool = True,
    progress: Callable[[float], None] | None = None,
    block_size: int | None = None,
    prefix_cache_blocks: float | None = None,
    replica_schedule: tuple[np.ndarray, np.ndarray] | None = None,
    admission: str | None = None,
    all_at_once: bool = False,
) -> SimResult:
    """Replay requests on ``replicas`` replicas of ``dep`` and measure queue wait, TTFT, TPOT/ITL and E2E per request.

    ``arrivals``: "trace" (the log's timestamps, compressed by ``whatif.traffic_multiplier``), "poisson" at
    ``rate_rps``, or "closed" with ``concurrency`` clients that each send the next request when the previous one
    completes, or "all_at_once" (``all_at_once=True``: every request offered at time 0, a batch job or MLPerf's
    Offline scenario; a Workload then draws ``requests``, default 500). Default: "closed" when ``concurrency`` is given, else "poisson" when ``rate_rps`` is given, else
    "trace". ``requests`` keeps the first N arrivals; ``duration_s`` keeps those arriving within it (open loop;
    a closed loop sends ``requests`` requests, default max(500, 8·C) when drawn from a Workload).
    ``scheduler``: "fcfs", "priority" (shortest uncached prompt first) or "deadline" (earliest TTFT deadline
    first: arrival + the request's own ``Requests.ttft_target_ms``, its product's class, else ``ttft_slo_ms``).
    ``disaggregate=(P, D)`` (or "P:D") replaces the colocated replicas by P prefill and D decode replicas.
    ``chunked_prefill=False`` schedules whole prompts only (TensorRT-LLM's default without context chunking):
    a prompt that does not fit the rest of an iteration's token budget waits for the next iteration.
    ``router``: one of ``shapeviz.serving.routers.ROUTERS``. When the requests carry prompt blocks (a frame with
    ``hash_ids`` or sessions; ``block_size`` is the hashes' block size, inferred when None) every replica keeps
    its own prefix cache in its KV pool; ``prefix_cache_blocks`` caps it at that many blocks outside the pool
    instead (math.inf: unbounded), to check the simulator against the offline hit ratio and LRU curve.
    ``replica_schedule=(times_s, serving)``: from each time on, only the first ``serving`` colocated replicas take
    new requests (an autoscaler's replicas joining and draining; a draining replica finishes what it holds).
    ``admission``: how a replica admits into its KV pool, one of ``ADMISSIONS``; None: the deployment's engine's
    (``ENGINE_ADMISSION``: TensorRT-LLM guaranteed-no-evict, vLLM and SGLang the watermark; no engine: vLLM's).
    """
    import time

    started = time.process_time()
    admission, max_num_seqs, arrivals = _checked(dep, scheduler, router, admission, replicas, max_num_seqs,
                                                 max_num_batched_tokens, ttft_slo_ms, tpot_slo_ms, all_at_once,
                                                 arrivals, rate_rps, concurrency, requests)
    split = _parse_disaggregate(disaggregate)
    serving_at = _serving_schedule(replica_schedule, replicas, split)
    rng = np.random.default_rng(seed)
    req, arrivals, rate_rps = _requests_of(workload_or_requests, arrivals, rate_rps, concurrency, requests,
                                           duration_s, seed, whatif, block_size)
    arrival = _arrival_times(req, arrivals, rate_rps, rng)
    req, arrival = _kept(req, arrival, arrivals, requests, duration_s)
    size = len(req)

    # -- the fleet --
    per_gpu_token = float(dep.kv_bytes_per_gpu(1.0))
    kv_tokens = int(dep.kv_pool_bytes_per_gpu(kv_fraction) // max(per_gpu_token, 1e-9))
    longest = int(np.max(req.input_tokens + req.output_tokens))
    if longest > kv_tokens:
        raise ValueError(
            f"a request of {longest:,} tokens (input + output) does not fit one replica's KV pool "
            f"({kv_tokens:,} tokens on {dep.describe()}): raise TP, or trim or drop the longest requests")
    # the compiled loop's view of the prompt blocks (a fixed-capacity validation cache is the Python loop's); the
    # caches are the front replicas' (a disaggregated fleet's prefill pool)
    front = replicas if split is None else split[0]
    caches = (_caches(req.blocks, front, router, replica_schedule, arrivals == "closed", req.input_tokens)
              if req.blocks is not None and prefix_cache_blocks is None and COMPILED else None)
    compiled = _compiled(dep, int(max_num_seqs), split, req, router, caches, front)
    pool = _Pool(dep, req, int(max_num_seqs), int(max_num_batched_tokens), scheduler, kv_tokens, chunked_prefill,
                 prefix_cache_blocks, outputs=not compiled, admission=admission)
    pool.default_ttft_s = float(ttft_slo_ms) / 1000.0
    starts = np.empty(0)
    if arrivals == "closed":
        # Clients start spread over one request's latency: otherwise identical requests started together stay
        # in lock-step forever (every completion wave re-arrives as a burst), which no real benchmark shows.
        c = min(int(concurrency), size)  # type: ignore[arg-type]
        starts = np.sort(rng.uniform(0.0, _one_request_s(dep, req, c), size=c)) if ramp else np.zeros(c)
    if compiled:
        fleet = _replay_compiled(pool, dep, arrival if arrivals != "closed" else np.empty(0), starts, replicas, router,
                                 replica_schedule, seed, caches, split)
        if progress is not None:
            progress(1.0)
    else:
        fleet = _replay(pool, dep, req, arrival, arrivals, starts, split, replicas, router, serving_at, progress, seed)

    unfinished = int(np.isnan(pool.finish).sum())
    if unfinished:
        raise RuntimeError(f"simulation ended with {unfinished} unfinished requests (a scheduler bug)")
    settings = {
        "deployment": dep.describe(), "arrivals": arrivals, "rate_rps": rate_rps, "concurrency": concurrency,
        "replicas": replicas if split is None else None, "disaggregate": list(split) if split else None,
        "scheduler": scheduler, "router": router, "router_rule": ROUTER_LABELS[router],
        "max_num_seqs": int(max_num_seqs),
        "max_num_batched_tokens": int(max_num_batched_tokens), "kv_pool_tokens_per_replica": kv_tokens,
        "chunked_prefill": bool(chunked_prefill), "admission": admission,
        "seed": seed, "whatif": {k: getattr(whatif, k) for k in ("trim_input", "trim_output", "cache_hit",
                                                                   "traffic_multiplier")},
    }
    offered = None  # the realised offered rate of an open loop (a closed loop offers what it is served)
    if arrivals != "closed" and size > 1 and float(arrival[-1] - arrival[0]) > 0:
        offered = (size - 1) / float(arrival[-1] - arrival[0])
    util = _utilization(fleet, float(np.nanmax(pool.finish)))
    result = SimResult(_per_request(pool, req), util, settings,
                       float(ttft_slo_ms), float(tpot_slo_ms), offered, int(sum(r.preemptions for r in fleet)),
                       max(r.kv_peak for r in fleet) / max(kv_tokens, 1))
    if result.preemptions:
        result.notes.append(f"{result.preemptions} preemption(s): the KV pool ran out and sequences were recomputed")
    result.prefix = _prefix_summary(req, pool, fleet, router, whatif)
    result.notes.extend(_router_notes(req, router, whatif))
    result.sim_seconds = time.process_time() - started
    return result


def _checked(dep: Deployment, scheduler: str, router: str, admission: str | None, replicas: int,
             max_num_seqs: int | None, max_num_batched_tokens: int, ttft_slo_ms: float, tpot_slo_ms: float,
             all_at_once: bool, arrivals: str | None, rate_rps: float | None, concurrency: int | None,
             requests: int | None) -> tuple[str, int, str]:
    """``simulate``'s settings checked, each bad one named: ``(admission, max_num_seqs, arrivals)`` resolved."""
    if scheduler not in SCHEDULERS:
        raise ValueError(f"scheduler={scheduler!r} must be one of {SCHEDULERS}")
    if router not in ROUTERS:
        raise ValueError(f"router={router!r} must be one of {ROUTERS}")
    admission = admission_policy(dep, admission)
    if not (isinstance(replicas, (int, np.integer)) and replicas >= 1):
        raise ValueError(f"replicas={replicas!r} must be a whole number ≥ 1")
    if max_num_seqs is None:
        max_num_seqs = dep.engine_max_seqs
    if max_num_seqs < 1 or max_num_batched_tokens < 1:
        raise ValueError("max_num_seqs and max_num_batched_tokens must be ≥ 1")
    for name, v in (("ttft_slo_ms", ttft_slo_ms), ("tpot_slo_ms", tpot_slo_ms)):
        if not (math.isfinite(v) and v > 0):
            raise ValueError(f"{name}={v!r} must be a positive number of milliseconds")
    if all_at_once:
        if arrivals not in (None, "all_at_once") or rate_rps is not None or concurrency is not None:
            raise ValueError("all at once offers every request at time 0: give no rate, concurrency or arrivals")
        arrivals = "all_at_once"
    if arrivals is None:
        arrivals = "closed" if concurrency is not None else "poisson" if rate_rps is not None else "trace"
    if arrivals not in ARRIVALS:
        raise ValueError(f"arrivals={arrivals!r} must be one of {ARRIVALS}")
    if arrivals == "closed" and not (concurrency is not None and concurrency >= 1):
        raise ValueError("a closed loop needs concurrency ≥ 1 (--concurrency C)")
    if requests is not None and requests < 1:
        raise ValueError(f"requests={requests!r} must be ≥ 1")
    return admission, max_num_seqs, arrivals


def _requests_of(source: Workload | Requests | RequestTable | pd.DataFrame, arrivals: str, rate_rps: float | None,
                 concurrency: int | None, requests: int | None, duration_s: float | None, seed: int, whatif: WhatIf,
                 block_size: int | None) -> tuple[Requests, str, float | None]:
    """The requests to replay, and the arrivals and rate they take: a request table's rows (a frame's, built here),
    ``Requests`` as given, or a Workload's points drawn (Poisson at its rate unless one is given)."""
    if isinstance(source, pd.DataFrame):
        req = RequestTable.build(source, whatif, block_size=block_size).requests()
    elif isinstance(source, RequestTable):
        req = source.requests()
    elif isinstance(source, Workload):
        n_draw = requests or (max(500, 8 * int(concurrency or 0)) if arrivals == "closed"
                              else 500 if arrivals == "all_at_once" else None)
        if n_draw is None:
            span = duration_s if duration_s is not None else 500 / (rate_rps or source.rate_rps)
            n_draw = max(int(math.ceil(span * (rate_rps or source.rate_rps * whatif.traffic_multiplier))), 1)
        req = requests_from_workload(source, n_draw, seed, whatif)
        if rate_rps is None and arrivals == "poisson":
            rate_rps = source.rate_rps * whatif.traffic_multiplier
    elif isinstance(source, Requests):
        req = source
    else:
        raise ValueError("simulate needs a Workload, a Requests set, a request table or a canonical frame")
    if arrivals == "trace":
        if req.arrival_s is None:
            if rate_rps is None:
                raise ValueError("the log has no timestamps: give a rate (--rate R) or a concurrency (--concurrency C)")
            arrivals = "poisson"
    if arrivals == "poisson" and not (rate_rps is not None and math.isfinite(rate_rps) and rate_rps > 0):
        raise ValueError("Poisson arrivals need a positive rate (--rate R, requests per second)")
    return req, arrivals, rate_rps


def _arrival_times(req: Requests, arrivals: str, rate_rps: float | None, rng: np.random.Generator) -> np.ndarray:
    """Each request's arrival in seconds: the log's, a Poisson stream's, all at 0, or NaN (a closed loop sets them)."""
    if arrivals == "trace":
        return np.asarray(req.arrival_s, dtype=np.float64)
    if arrivals == "poisson":
        arrival = np.cumsum(rng.exponential(1.0 / float(rate_rps), size=len(req)))  # type: ignore[arg-type]
        arrival -= arrival[0]
        return arrival
    if arrivals == "all_at_once":
        return np.zeros(len(req))
    return np.full(len(req), np.nan)


def _kept(req: Requests, arrival: np.ndarray, arrivals: str, requests: int | None,
          duration_s: float | None) -> tuple[Requests, np.ndarray]:
    """The first ``requests`` arrivals, those within ``duration_s`` (open loop); an error when none is left."""
    keep = np.ones(len(req), dtype=bool)
    if duration_s is not None and arrivals != "closed":
        keep &= arrival <= duration_s
    if requests is not None:
        keep &= np.cumsum(keep) <= requests
    if not keep.all():
        req = req.take(keep)
        arrival = arrival[keep]
    if len(req) == 0:
        raise ValueError("no requests left to simulate (check --requests / --duration)")
    return req, arrival


def _per_request(pool: _Pool, req: Requests) -> pd.DataFrame:
    """``SimResult.requests``: one row per request, its latencies in ms (the pool's instants become its columns)."""
    out = req.output_tokens
    tpot = np.where(out > 1, (pool.finish - pool.first) / np.maximum(out - 1, 1) * 1000.0, np.nan)
    # The result columns, one array each and each the frame's own: the times since arrival are computed in the
    # loop's own arrays (the same numbers), and copy=False keeps pandas from copying every column into 2-D blocks,
    # so the result costs its columns and no second copy of them
    queue_ms, ttft_ms, e2e_ms = pool.start, pool.first, pool.finish
    for column in (queue_ms, ttft_ms, e2e_ms):
        np.subtract(column, pool.arrival, out=column)
        np.multiply(column, 1000.0, out=column)
    frame = pd.DataFrame({
        "arrival_s": pool.arrival,
        "input_tokens": req.input_tokens.copy(),
        "output_tokens": out.copy(),
        "cached_tokens": pool.n_cached.copy(),   # the simulated hit when the replicas keep prefix caches
        "queue_ms": queue_ms,
        "ttft_ms": ttft_ms,
        "tpot_ms": tpot,
        "itl_ms": tpot.copy(),
        "e2e_ms": e2e_ms,
        "replica": pool.replica,
        "preemptions": pool.preempted,
    }, copy=False)
    pool.start = pool.first = pool.finish = np.empty(0)   # those are result columns now, no longer instants
    if req.product is not None:
        frame["product"] = req.product
    return frame



def _replay(pool: _Pool, dep: Deployment, req: Requests, arrival: np.ndarray, arrivals: str, starts: np.ndarray,
            split: tuple[int, int] | None, replicas: int, router: str,
            serving_at: Callable[[float], int] | None, progress: Callable[[float], None] | None,
            seed: int) -> list[_Replica]:
    """The reference event loop (Python): every mode (prefix caches, disaggregated pools, speculative decoding).

    The oracle the compiled loop is tested against (tests/unit/test_loops_agree.py and the pinned cases), and the
    loop of the modes the compiled one does not take (``_compiled``).
    """
    size = len(req)
    heap: list[tuple[float, int, int, int]] = []   # (time, tie, request, target pool: 0 front, 1 decode pool)
    tie = 0
    clients = {"next": 0}

    def on_done(rid: int, now: float, replica: int) -> None:
        nonlocal tie
        r = fleet[replica]
        if r.role == "prefill":
            # KV travels to the decode pool; the first token is counted once it is there, as the planner does
            transfer = kv_transfer_s(dep, int(pool.n_in[rid]))
            pool.first[rid] = now + transfer
            if pool.n_out[rid] <= 1:
                pool.finish[rid] = now + transfer
                _closed_next(now + transfer)
            else:
                tie += 1
                heapq.heappush(heap, (now + transfer, tie, rid, 1))
            return
        _closed_next(now)

    def _closed_next(now: float) -> None:
        nonlocal tie
        if arrivals == "closed" and clients["next"] < size:
            tie += 1
            heapq.heappush(heap, (now, tie, clients["next"], 0))
            clients["next"] += 1

    fleet: list[_Replica] = []
    if split is None:
        fleet = [_Replica(i, pool, "colocated", on_done) for i in range(replicas)]
        front_ids, back_ids = list(range(replicas)), []
    else:
        fleet = [_Replica(i, pool, "prefill", on_done) for i in range(split[0])]
        fleet += [_Replica(split[0] + i, pool, "decode", on_done) for i in range(split[1])]
        front_ids, back_ids = list(range(split[0])), list(range(split[0], split[0] + split[1]))

    for k in range(starts.size):
        _closed_next(float(starts[k]))
    blocks = req.blocks
    routers = {0: make_router(router, front_ids, None if blocks is None else blocks.key, pool.look or None,
                              req.input_tokens, seed=seed),
               # the decode pool holds no prefix cache: it balances load (as SGLang's PD router does)
               1: make_router(router if router in LOAD_ROUTERS else "least_tokens", back_ids, seed=seed)}

    def route(rid: int, now: float, target: int) -> None:
        ids = front_ids if target == 0 else back_ids
        if serving_at is not None and target == 0:
            ids = ids[:serving_at(now)]
        k = routers[target].pick(rid, ids, fleet)
        if target == 0:
            pool.arrival[rid] = now
        pool.replica[rid] = k if target == 0 or split is None else pool.replica[rid]
        if target == 1:  # decode pool: the prompt's KV arrived, the first token came from the prefill pool
            fleet[k].resume[rid] = (int(pool.n_in[rid]), int(pool.n_out[rid]) - 1)
        fleet[k].enqueue(rid, now)

    ptr = 0
    open_loop = arrivals != "closed"
    report_every = max(size // 50, 1)
    completed_marks = 0
    while True:
        t_ext = float(arrival[ptr]) if open_loop and ptr < size else math.inf
        t_int = heap[0][0] if heap else math.inf
        t_a = min(t_ext, t_int)
        busy = min(fleet, key=lambda r: r.busy_until)
        t_r = busy.busy_until
        if t_a == math.inf and t_r == math.inf:
            break
        if t_a <= t_r:
            if t_ext <= t_int:
                route(ptr, t_ext, 0)
                ptr += 1
            else:
                t, _, rid, target = heapq.heappop(heap)
                route(rid, t, target)
        else:
            busy.advance()
        if progress is not None:
            marks = int(np.count_nonzero(~np.isnan(pool.finish[:: report_every])))
            if marks != completed_marks:
                completed_marks = marks
                progress(min(marks / max(len(pool.finish[::report_every]), 1), 1.0))

    return fleet


@dataclass
class _CacheTally:
    """What the compiled loop leaves of one replica's prefix cache (what the ``prefix`` summary reads)."""

    evicted: int
    cached_blocks: int


@dataclass
class _Served:
    """What the compiled loop leaves of one replica (the fields the result reads off a ``_Replica``)."""

    index: int
    busy_log: np.ndarray          # (spans, 2): start and end of each busy period
    preemptions: int
    kv_peak: int
    role: str = "colocated"
    cache: _CacheTally | None = None


def _compiled(dep: Deployment, max_num_seqs: int, split: tuple[int, int] | None, req: Requests, router: str,
              caches: sim_core.Caches | None = None, replicas: int = 1) -> bool:
    """Whether this run takes the compiled loop: colocated or disaggregated (``split``), with or without speculative
    decoding, numba present; prompt blocks only with their ``caches`` (``_caches``: prefix caches in the KV pool of the
    ``replicas`` that keep them) within ``MAX_CACHE_STATE_BYTES``."""
    if not COMPILED:
        return False
    if req.blocks is not None and (caches is None or caches.state_bytes(replicas) > MAX_CACHE_STATE_BYTES):
        return False
    # without numba (sim_core.loop() is None) the Python loop gives the same results, slower
    return router in sim_core.ROUTER_CODES and sim_core.supports(dep, max_num_seqs)


def _replay_compiled(pool: _Pool, dep: Deployment, arrival: np.ndarray, starts: np.ndarray, replicas: int,
                     router: str, schedule: tuple[np.ndarray, np.ndarray] | None, seed: int = 0,
                     caches: sim_core.Caches | None = None, split: tuple[int, int] | None = None) -> list[_Served]:
    """The compiled loop (``sim_core``): fills the pool's per-request arrays, returns what each replica did.

    ``split=(P, D)``: P prefill and D decode replicas (``replicas`` is then not read), the KV transfer between them
    at the deployment's ``kv_transfer_gbps``, the decode pool balanced by a load router (SGLang's PD router).
    """
    transfer = None
    if split is not None:
        replicas = split[0] + split[1]
        transfer = _transfer_s(dep, pool.n_in)
    longest = int(np.max(pool.n_in + pool.n_out))
    # a pass's tokens: the prompt chunks, and each decoding sequence's one (k + 1 when speculative: its drafts too)
    per_decode = 1 if dep.speculative is None else dep.speculative.draft_tokens + 1
    physics = sim_core.constants(dep, pool.max_num_seqs, max(pool.budget, longest) + pool.max_num_seqs * per_decode,
                                 pool.context_grid)
    # TTFT targets are read by the deadline scheduler only (the others get one placeholder, not a column)
    target = (np.zeros(1) if pool.scheduler != "deadline" else np.full(pool.n_in.size, pool.default_ttft_s)
              if pool.ttft_target_s is None else np.asarray(pool.ttft_target_s, dtype=np.float64))
    times, serving = (np.empty(0), np.empty(0, dtype=np.int64)) if schedule is None else (
        np.asarray(schedule[0], dtype=np.float64), np.asarray(schedule[1], dtype=np.int64))
    settings = {"replicas": replicas, "max_num_seqs": pool.max_num_seqs, "budget": pool.budget,
                "scheduler": pool.scheduler, "router": router,
                "kv_tokens": pool.kv_tokens, "chunked": pool.chunked, "max_run_steps": MAX_RUN_STEPS,
                "admission": pool.admission, "watermark": pool.watermark}
    if split is not None:
        settings.update(prefill=split[0], decode_router=router if router in LOAD_ROUTERS else "least_tokens")
    as_int = np.ascontiguousarray
    # the random router's draws: a draw takes one word, or more when it falls above the replica count (under half
    # the time), so a few per request almost never run out; a run that does is run again with twice as many
    n_words = RANDOM_WORDS_PER_REQUEST * pool.n_in.size + 64 if router == "random" else 0
    while True:
        out = sim_core.run(np.asarray(arrival, dtype=np.float64), np.asarray(starts, dtype=np.float64),
                           as_int(pool.n_in, dtype=np.int64), as_int(pool.n_out, dtype=np.int64),
                           as_int(pool.n_cached, dtype=np.int64), target, settings, physics,
                           pool.context_grid, times, serving, random_words(seed, n_words), caches, transfer)
        if out is not None:
            break
        n_words *= 2
    (pool.arrival, pool.start, pool.first, pool.finish, pool.replica, pool.preempted, preemptions, kv_peak,
     lo, hi, rep, n_cached, hit_blocks, evicted, cached_blocks) = out
    if caches is not None:
        pool.n_cached, pool.hit_blocks = n_cached, hit_blocks
    front = replicas if split is None else split[0]
    return [_Served(k, np.column_stack([lo[rep == k], hi[rep == k]]), int(preemptions[k]), int(kv_peak[k]),
                    role="colocated" if split is None else "prefill" if k < front else "decode",
                    cache=None if caches is None or k >= front else _CacheTally(int(evicted[k]), int(cached_blocks[k])))
            for k in range(replicas)]


def kv_transfer_s(dep: Deployment, prompt_tokens: int) -> float:
    """Seconds a prompt's KV takes from a prefill replica to a decode replica (all its GPUs' shares, over the
    deployment's ``kv_transfer_gbps``)."""
    return float(dep.kv_bytes_per_gpu(float(prompt_tokens))) * dep.tp / (dep.eff.kv_transfer_gbps * 1e9)


def _transfer_s(dep: Deployment, n_in: np.ndarray) -> np.ndarray:
    """``kv_transfer_s`` of each request, computed once per distinct prompt length."""
    lengths, where = np.unique(n_in, return_inverse=True)
    return np.array([kv_transfer_s(dep, int(n)) for n in lengths], dtype=np.float64)[where]


def _caches(blocks: PrefixBlocks, replicas: int, router: str,
            schedule: tuple[np.ndarray, np.ndarray] | None, closed: bool = False,
            n_in: np.ndarray | None = None) -> sim_core.Caches:
    """The prompt blocks as the compiled loop takes them, with the prefix router's thresholds.

    Round-robin and session affinity in an open loop without a replica schedule route every request where it
    would go anyway (``RoundRobin``: in turn; ``SessionAffinity``: the session's point on the ring, keyless
    requests in turn): the picks are computed here and the block ids numbered per replica, so a replica's state
    covers only the blocks of the requests it serves (a big fleet's state grows with the blocks, not with replicas
    times blocks). A ``closed`` loop routes its requests in the order clients send them, which is not their index
    order (a client whose request finishes early sends the next before another client's first): "in turn" is
    then the loop's own.

    Blocks built from sessions (``PrefixBlocks.in_runs``, every prompt ``n_in`` tokens filling its blocks but the
    last) go as session runs (``_session_runs``): no block ids, no renumbering per replay.
    """
    picks = np.empty(0, dtype=np.int64)
    if router == "session":
        picks = session_owners(blocks.key, range(replicas))
    static = schedule is None and not closed and router in ("round_robin", "session")
    if static and router == "round_robin":
        picks = np.arange(len(blocks), dtype=np.int64) % replicas
    elif static:
        keyless = picks < 0
        picks = picks.copy()
        picks[keyless] = np.arange(int(keyless.sum()), dtype=np.int64) % replicas
    if n_in is not None and blocks.in_runs:
        look_len, keep_len = blocks.look_len, blocks.keep_len
        # a block past the prompt's end would hold no tokens: the runs' closed forms count every block but the last full
        if not np.any((look_len > 0) & (np.asarray(n_in) <= (look_len - 1) * int(blocks.block_size))):
            return _session_runs(blocks, picks, static, look_len, keep_len)
    look, keep, first, distinct = blocks.dense(picks if static else None)
    return sim_core.Caches(int(blocks.block_size), distinct, static,
                           np.ascontiguousarray(blocks.look_ptr, dtype=np.int64), look, first,
                           np.ascontiguousarray(blocks.keep_ptr, dtype=np.int64), keep,
                           np.ascontiguousarray(picks, dtype=np.int64), prefix_thresholds())


def _session_runs(blocks: PrefixBlocks, picks: np.ndarray, static: bool, look_len: np.ndarray,
                  keep_len: np.ndarray) -> sim_core.Caches:
    """``Caches`` as session runs: each request's (replica, session) pair, numbered per replica with static routing
    (only the pairs a replica meets take state), else its session's code; per request its blocks' counts."""
    has = (look_len > 0) | (keep_len > 0)
    key = np.asarray(blocks.key, dtype=np.int64)
    pair = np.full(len(blocks), -1, dtype=np.int64)
    if static:
        codes, pair[has] = np.unique(picks[has] * (int(key.max(initial=0)) + 1) + key[has], return_inverse=True)
        n_pairs = int(codes.size)
    else:
        pair[has] = key[has]
        n_pairs = int(key.max(initial=-1)) + 1
    empty = np.empty(0, dtype=np.int64)
    return sim_core.Caches(int(blocks.block_size), 0, static,
                           np.ascontiguousarray(blocks.look_ptr, dtype=np.int64), empty, np.empty(0, dtype=np.bool_),
                           np.ascontiguousarray(blocks.keep_ptr, dtype=np.int64), empty,
                           np.ascontiguousarray(picks, dtype=np.int64), prefix_thresholds(), True, pair, n_pairs,
                           np.ascontiguousarray(look_len, dtype=np.int64), np.ascontiguousarray(keep_len, dtype=np.int64))


def _prefix_summary(req: Requests, pool: _Pool, fleet: list[_Replica], router: str, whatif: WhatIf) -> dict[str, Any]:
    """The ``prefix`` block of ``simulate --json``: where reuse came from, the hit ratios, per replica, evictions.

    Ratios are token-weighted (Σ cached / Σ input) over the requests that carry blocks (all requests when the
    reuse is the log's reported share or the what-if's); hit_ratio_requests is the share of them with any hit.
    """
    blocks = req.blocks
    # token counts summed per replica by bincount: whole numbers, so the sums are exact in any order, and no
    # per-replica copy of a column is made
    counted = blocks.with_blocks if blocks is not None else slice(None)   # the requests that carry blocks
    hit = pool.n_cached[counted].astype(np.float64)
    inp = req.input_tokens[counted].astype(np.float64)
    rep = pool.replica[counted]
    size = int(max((r.index for r in fleet), default=-1)) + 1
    n_per = np.bincount(rep, minlength=size)
    hit_per = np.bincount(rep, weights=hit, minlength=size)
    inp_per = np.bincount(rep, weights=inp, minlength=size)
    if blocks is not None:
        source = blocks.source
    elif whatif.cache_hit is not None:
        source = "whatif"
    else:
        source = "reported_cached_tokens" if hit.any() else "none"
    per_replica = []
    for r in fleet:
        if r.role == "decode":
            continue
        per_replica.append({
            "replica": r.index, "requests": int(n_per[r.index]),
            "hit_ratio_tokens": float(hit_per[r.index] / inp_per[r.index]) if n_per[r.index] else None,
            "evicted_blocks": None if r.cache is None else int(r.cache.evicted),
            "cached_blocks_at_end": None if r.cache is None else int(r.cache.cached_blocks),
        })
    caches = [r.cache for r in fleet if r.cache is not None]
    return {
        "source": source,
        "router": router,
        "block_size": None if blocks is None else blocks.block_size,
        "block_size_source": None if blocks is None else blocks.block_size_source,
        "cache": (None if blocks is None else "per replica, in its KV pool (LRU)" if pool.cache_blocks is None
                  else f"per replica, {pool.cache_blocks:g} blocks (validation)"),
        "requests": int(hit.size),
        "hit_ratio_tokens": float(hit.sum() / inp.sum()) if hit.size else None,
        "hit_ratio_blocks": (float(pool.hit_blocks.sum() / max(int(blocks.look_ptr[-1]), 1)) if blocks is not None
                             else None),
        "hit_ratio_requests": float(np.count_nonzero(hit) / hit.size) if hit.size else None,
        "per_replica": per_replica,
        "evicted_blocks": int(sum(c.evicted for c in caches)) if caches else None,
    }


def _router_notes(req: Requests, router: str, whatif: WhatIf) -> list[str]:
    """What the reader must know about where reuse came from and what the router could see."""
    notes = []
    blocks = req.blocks
    if blocks is not None:
        what = ("the log's block hashes" if blocks.source == "block_hashes"
                else "sessions (each turn starts with the previous turn's whole context)")
        notes.append(f"prefix reuse simulated per replica from {what}, {blocks.block_size}-token blocks "
                     f"({blocks.block_size_source})")
        if whatif.cache_hit is not None:
            notes.append("the what-if prefix-cache share is not used for requests with prompt blocks: the log's own "
                         "reuse is simulated instead (a request without blocks keeps its share)")
        if router == "session" and (blocks.key < 0).all():
            notes.append("the log has no session ids: session affinity has no key, so requests go round-robin")
    elif router in ("session", "prefix"):
        fallback = "round-robin" if router == "session" else "least outstanding tokens"
        notes.append(f"the log has no block hashes or sessions: the {router} router works as {fallback}, and "
                     "every request keeps its " + ("what-if" if whatif.cache_hit is not None else "reported")
                     + " cached share")
    return notes


def _serving_schedule(schedule: tuple[np.ndarray, np.ndarray] | None, replicas: int,
                      split: tuple[int, int] | None) -> Callable[[float], int] | None:
    """The replicas taking new requests at a time, from ``(times_s, serving)`` steps (None: all, always)."""
    if schedule is None:
        return None
    if split is not None:
        raise ValueError("a replica schedule applies to colocated replicas, not to disaggregated pools")
    times = np.asarray(schedule[0], dtype=np.float64)
    serving = np.asarray(schedule[1], dtype=np.int64)
    if times.size == 0 or times.size != serving.size or np.any(np.diff(times) < 0):
        raise ValueError("replica_schedule needs increasing times and one replica count per time")
    if serving.min() < 1 or serving.max() > replicas:
        raise ValueError(f"replica_schedule counts must lie in 1..replicas ({replicas}), got {serving.min()}..{serving.max()}")

    def serving_at(now: float) -> int:
        return int(serving[max(int(np.searchsorted(times, now, side="right")) - 1, 0)])

    return serving_at


def _one_request_s(dep: Deployment, req: Requests, concurrency: int) -> float:
    """Latency of a mean request at a decode batch of ``concurrency`` (prefill alone + its decode steps)."""
    n = float(np.mean(req.input_tokens))
    m = float(np.mean(req.output_tokens))
    return float(prefill_time_s(dep, n, float(np.mean(req.cached_tokens)))) + m * float(
        decode_step_s(dep, float(concurrency), n + m / 2.0))


def _utilization(fleet: list[_Replica], makespan: float, buckets: int = 60) -> pd.DataFrame:
    """Busy share of each replica over ``buckets`` equal time buckets (stepping = busy).

    Every replica's busy spans at once: each span is cut at the bucket edges it crosses (most cross none) and its
    pieces summed per (replica, bucket); a loop over replicas with a span × bucket matrix each was a twentieth of a
    big fleet's sizing."""
    edges = np.linspace(0.0, max(makespan, 1e-9), buckets + 1)
    width = np.diff(edges)
    counts = np.array([len(r.busy_log) for r in fleet], dtype=np.int64)
    busy = np.zeros(len(fleet) * buckets)
    if counts.sum():
        spans = np.concatenate([np.asarray(r.busy_log, dtype=np.float64).reshape(-1, 2)
                                for r in fleet if len(r.busy_log)])
        owner = np.repeat(np.arange(len(fleet), dtype=np.int64), counts)
        first = np.clip(np.searchsorted(edges, spans[:, 0], side="right") - 1, 0, buckets - 1)
        last = np.clip(np.searchsorted(edges, spans[:, 1], side="left") - 1, 0, buckets - 1)
        pieces = np.maximum(last - first, 0) + 1
        span = np.repeat(np.arange(spans.shape[0], dtype=np.int64), pieces)
        bucket = first[span] + (np.arange(span.size, dtype=np.int64) - np.repeat(np.cumsum(pieces) - pieces, pieces))
        lo_edge, hi_edge = edges[bucket], edges[bucket + 1]
        piece = np.clip(spans[span, 1], lo_edge, hi_edge) - np.clip(spans[span, 0], lo_edge, hi_edge)
        busy = np.bincount(owner[span] * buckets + bucket, weights=piece, minlength=len(fleet) * buckets)
    shares = np.clip(busy.reshape(len(fleet), buckets) / width, 0, 1).reshape(-1)
    # one frame for the fleet (a frame per replica was a third of a big fleet's replay outside the loop)
    return pd.DataFrame({"time_s": np.tile(edges[:-1], len(fleet)),
                         "replica": np.repeat(np.array([r.index for r in fleet], dtype=np.int64), buckets),
                         "busy": shares})
