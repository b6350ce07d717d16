"""The simulator's event loop compiled with numba: a colocated or disaggregated fleet, its prefix caches and routers.

The same scheduler, routers, prefix caches and step physics as ``simulator._Replica`` (the reference, which still
runs the fixed-capacity validation cache), written over arrays a
compiler can take: the running batch of replica ``r`` is row ``r`` of ``(replicas, max_num_seqs)`` arrays, each
waiting queue a binary heap, and the physics of ``physics.mixed_step_s`` and ``decode_step_s`` comes in as
constants and tables computed once by the physics module itself (``constants``). Sums use numpy's pairwise order
and interpolation numpy's rule, so a run gives the reference's numbers bit for bit
(tests/unit/test_simulator_core.py and test_sim_core_prefix.py compare them).

Prefix caches (``prefix_cache.PrefixCache``'s semantics, ``Caches``): the window's block ids renumbered 0..U-1
once, then per replica and block a state (not cached, cached and free, or pinned by n running sequences), the
tokens a pinned block holds in the pool, and the free blocks' LRU order as a doubly linked list (released blocks
appended in block order, eviction from the head): 16 bytes per replica per distinct block, or, when the routing is
static (round-robin, session affinity: the picks are precomputed, ``routers.session_owners``), per distinct block
a replica meets; the simulator bounds it (``simulator.MAX_CACHE_STATE_BYTES``). Blocks built from sessions (every
turn looks up blocks 0..L-1 of its session's stream) are kept as runs instead (``Caches.runs``): per replica and
session the prefix its running turns pin and the free runs of the stream in the LRU list, a few operations a turn
rather than one per block, nothing renumbered per replay, the state following the sessions a replica meets and its
pool rather than the blocks. The prefix-aware router reads the caches as the Python one does.

Disaggregated pools (``run``'s ``settings['prefill']``): replicas 0..P-1 prefill and keep the prefix caches, the
rest decode; a prompt that finishes leaves its prefill replica, and its KV reaches the decode pool after the
transfer as an event on the loop's own heap (the closed loop's clients share it), where a load router places it and
it decodes from the next iteration on, as ``simulator._Replica`` with roles "prefill" and "decode" does.

Speculative decoding (``dep.speculative``): decode-only runs read the decode table, which ``decode_step_s`` already
gives per token kept; an iteration that prefills beside decodes puts k + 1 tokens of each decode through the target
(``P_Q``) and then adds the draft passes and charges the verification per token kept (``_speculative_step``, the
tail of ``physics.mixed_step_s``), from the same physics evaluated in the same order (``speculative_constants``:
``physics.decode_pass_s`` of the target and of a draft model, ``physics.speculative._head_pass_s`` of an EAGLE head
or MTP module), so the frames equal the reference's bit for bit.

Compiled on first use (``loop()``: numba is imported then, not when the simulator is) and cached on disk
(``cache=True``): the first call in a fresh environment pays the compile (about half a minute of CPU, see
benchmarks/README.md), later processes load it in under a second. Without numba, ``loop()`` is None and the
simulator runs its Python loop.
"""
from __future__ import annotations

import math
import threading
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, Callable

import numpy as np

from shapeviz.physics.speculative import _draft_deployment, _head_params, load_speculative
from shapeviz.physics.steps import (
    EMBEDDING_BYTES,
    Deployment,
    _active_body_params,
    _active_expert_params,
    _compute_rates,
    _fixed_s,
    _iteration_constants,
    _lm_head_params,
    _weight_read_bytes_per_gpu,
    communication_s,
    decode_step_s,
)

SCHEDULER_CODES = {"fcfs": 0, "priority": 1, "deadline": 2}
ADMISSION_CODES = {"max_utilization": 0, "watermark": 1, "guaranteed_no_evict": 2}   # simulator.ADMISSIONS
# without prompt blocks the session router has no key (round-robin) and the prefix router no cache (least tokens)
ROUTER_CODES = {"round_robin": 0, "least_tokens": 1, "session": 0, "prefix": 1, "random": 2}
# with prompt blocks: session affinity (its picks precomputed, ``routers.session_owners``) and prefix-aware
CACHE_ROUTER_CODES = {"round_robin": 0, "least_tokens": 1, "random": 2, "session": 3, "prefix": 4}
MAX_TABLE_SEQS = 4096   # decode-step table rows (one per batch size): beyond this cap the reference loop runs

# indices into the physics constants vector
(P_DENSE2, P_LM2, P_EXPERT2, P_PAIR, P_HALF_PAIR, P_WINDOW_SHARE, P_WINDOW, P_DECODE_DENSE2, P_DECODE_ATTENTION,
 P_KV_PER_TOKEN, P_KV_REPLICATION, P_TP, P_HBM, P_FIXED, P_PER_SEQUENCE, P_PREFILL_EXTRA) = range(16)
P_R_SPREAD, P_R_ALONE, P_R_DECODE = 16, 19, 22   # seconds per FLOP (dense, experts, attention) of each pass kind
P_Q = 25   # tokens each decoding sequence puts through the target in an iteration (k + 1 with speculative decoding)
N_CONSTANTS = 26
# the speculative constants vector (``speculative_constants``): the method, then one block per decode pass
# (``physics.decode_pass_s``) of the target and of a draft model, then an EAGLE head's or MTP module's pass
(S_ON, S_DRAFTS, S_TAU, S_OVERHEAD, S_KIND) = range(5)
S_TARGET, S_DRAFT, S_HEAD = 5, 20, 35   # pass blocks of 15 numbers (B_* offsets), then the head's 8 (H_*)
(B_HBM, B_KV_PER_TOKEN, B_WINDOW_SHARE, B_WINDOW, B_KV_REPLICATION, B_TP, B_DENSE2, B_EXPERT2, B_ATTENTION, B_DENSE_DIV,
 B_IMBALANCE, B_EXPERT_DIV, B_ATTENTION_DIV, B_SEQUENCE_US, B_FIXED) = range(15)
(H_TARGET_LM, H_LAYERS, H_BYTES_PER_PARAM, H_WEIGHT_BYTES_PER_PARAM, H_OWN_WEIGHTS, H_ATTENTION, H_PARAMS,
 H_LAYER_OVERHEAD) = range(8)
N_SPECULATIVE = 43
DRAFT_KINDS = {"none": 0, "head": 1, "target_layer": 1, "model": 2}


def supports(dep: Deployment, max_num_seqs: int) -> bool:
    """Whether the compiled loop covers this deployment (huge batch caps do not)."""
    return max_num_seqs <= MAX_TABLE_SEQS and loop() is not None


# the functions numba compiles, callees before callers (each caller is typed against the compiled callees)
_COMPILED = ("_pairwise_block", "_pairwise", "_less", "_swap", "_grow_queue", "_heap_push", "_heap_pop", "_mixed_step",
             "_match", "_lru_unlink", "_lru_append", "_fit", "_shared_and_own", "_pin", "_release", "_grow_pool",
             "_run_hit", "_run_drop", "_run_trim", "_run_pin", "_run_release", "_run_fit", "_let_go",
             "_prefix_pick", "_load_pick", "_kv_per_gpu", "_pass_s", "_head_pass_s", "_speculative_step", "_loop")


_COMPILING = threading.Lock()   # replays on threads (a Dask worker's, an in-process cluster's) compile once


@lru_cache(maxsize=1)
def _compile() -> Callable[..., tuple[np.ndarray, ...]] | None:
    try:
        from numba import njit
    except ImportError:
        return None
    space = globals()
    for name in _COMPILED:
        space[name] = njit(cache=True)(space[name])
    return space["_loop"]


def loop() -> Callable[..., tuple[np.ndarray, ...]] | None:
    """The event loop compiled with numba (on first use; cached on disk), or None when numba is not installed."""
    with _COMPILING:
        return _compile()


def constants(dep: Deployment, max_num_seqs: int, max_tokens: int, grid: np.ndarray) -> tuple[np.ndarray, ...]:
    """The physics the loop needs, from the physics module: scalar constants, per-pass tables, decode tables.

    Returns (constants, weight bytes per pass by token count, collective seconds by token count, decode-step table
    (batch × context grid), then the speculative constants and the draft model's weight and collective tables, by
    ``speculative_constants``). Each number is computed by the same expression ``mixed_step_s`` evaluates, so the
    compiled step times equal the reference's. With speculative decoding ``max_tokens`` must cover the prompt
    chunks plus (k + 1) tokens of every decoding sequence.
    """
    m = dep.model
    c = np.zeros(N_CONSTANTS)
    body, expert, lm = _active_body_params(m), _active_expert_params(m), _lm_head_params(m)
    c[P_DENSE2] = 2.0 * (body - expert)
    c[P_LM2] = 2.0 * lm
    c[P_EXPERT2] = 2.0 * expert
    c[P_PAIR] = m.layers * m.attention_flops_per_context_token(decode=False)
    c[P_HALF_PAIR] = c[P_PAIR] / 2.0
    c[P_WINDOW_SHARE] = 0.0 if m.sliding_window is None else m.sliding_layer_fraction
    c[P_WINDOW] = -1.0 if m.sliding_window is None else float(m.sliding_window)
    c[P_DECODE_DENSE2] = 2.0 * (body - expert + lm)
    c[P_DECODE_ATTENTION] = m.layers * m.attention_flops_per_context_token(decode=True)
    c[P_KV_PER_TOKEN] = m.kv_bytes_per_token_bf16_full / 2.0 * dep.kv_bytes_per_element
    c[P_KV_REPLICATION] = dep.kv_replication
    c[P_TP] = dep.tp
    c[P_HBM], c[P_FIXED], c[P_PER_SEQUENCE], c[P_PREFILL_EXTRA] = _iteration_constants(dep)
    c[P_R_SPREAD:P_R_SPREAD + 3] = _compute_rates(dep, True, False)
    c[P_R_ALONE:P_R_ALONE + 3] = _compute_rates(dep, False, False)
    c[P_R_DECODE:P_R_DECODE + 3] = _compute_rates(dep, True, True)
    tokens = np.arange(max_tokens + 1, dtype=np.float64)
    weights = np.asarray(_weight_read_bytes_per_gpu(dep, tokens), dtype=np.float64)
    collective = np.asarray(communication_s(dep, tokens), dtype=np.float64)
    batches = np.arange(max_num_seqs + 1, dtype=np.float64)[:, None]
    decode = np.asarray(decode_step_s(dep, np.maximum(batches, 1.0), grid[None, :]), dtype=np.float64)
    spec = dep.speculative
    c[P_Q] = 1.0 if spec is None else spec.draft_tokens + 1.0
    return (c, weights, collective, decode) + speculative_constants(dep, max_num_seqs)


def _pass_block(sp: np.ndarray, o: int, dep: Deployment, step_overhead: bool) -> None:
    """The constants of ``physics.decode_pass_s`` on ``dep`` at offset ``o``, each as that function computes it."""
    m = dep.model
    body, expert, lm = _active_body_params(m), _active_expert_params(m), _lm_head_params(m)
    split = dep.tp   # _compute_s spreads a decode pass over the TP group
    sp[o + B_HBM] = dep.hbm_bytes_per_gpu
    sp[o + B_KV_PER_TOKEN] = m.kv_bytes_per_token_bf16_full / 2.0 * dep.kv_bytes_per_element
    sp[o + B_WINDOW_SHARE] = 0.0 if m.sliding_window is None else m.sliding_layer_fraction
    sp[o + B_WINDOW] = -1.0 if m.sliding_window is None else float(m.sliding_window)
    sp[o + B_KV_REPLICATION] = dep.kv_replication
    sp[o + B_TP] = dep.tp
    sp[o + B_DENSE2] = 2.0 * (body - expert + lm)
    sp[o + B_EXPERT2] = 2.0 * expert
    sp[o + B_ATTENTION] = m.layers * m.attention_flops_per_context_token(decode=True)
    sp[o + B_DENSE_DIV] = split * dep.dense_flops_per_gpu
    sp[o + B_IMBALANCE] = dep.imbalance
    sp[o + B_EXPERT_DIV] = dep.tp * dep.matmul_flops_per_gpu
    sp[o + B_ATTENTION_DIV] = split * dep.attention_rate(True)
    sp[o + B_SEQUENCE_US] = dep.eff.sequence_overhead_us
    sp[o + B_FIXED] = _fixed_s(dep) if step_overhead else dep.model.layers * dep.eff.layer_overhead_us * 1e-6


def speculative_constants(dep: Deployment, max_num_seqs: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """What the loop needs of ``physics.speculative`` for a mixed step's speculative part (``_speculative_step``):
    the constants vector (all zero without speculative decoding), the draft model's weight bytes and collective
    seconds by token count (one entry when there is no draft model)."""
    sp = np.zeros(N_SPECULATIVE)
    spec = dep.speculative
    empty = np.zeros(1)
    if spec is None:
        return sp, empty, empty
    data = load_speculative()
    head = data["methods"][spec.method]
    sp[S_ON] = 1.0
    sp[S_DRAFTS] = spec.draft_tokens
    sp[S_TAU] = spec.acceptance_length
    sp[S_OVERHEAD] = float(data["draft_pass_overhead_ms"]["value"]) * 1e-3
    sp[S_KIND] = DRAFT_KINDS[head["draft"]]
    _pass_block(sp, S_TARGET, dep, True)
    draft_weights, draft_collective = empty, empty
    if head["draft"] == "model":
        draft = _draft_deployment(dep, str(spec.draft_model))
        _pass_block(sp, S_DRAFT, draft, False)
        tokens = np.arange(max_num_seqs + 1, dtype=np.float64)
        draft_weights = np.asarray(_weight_read_bytes_per_gpu(draft, tokens), dtype=np.float64)
        draft_collective = np.asarray(communication_s(draft, tokens), dtype=np.float64)
    elif head["draft"] != "none":
        m = dep.model
        layer, projection, lm_head = _head_params(dep, spec.method)
        sp[S_HEAD + H_TARGET_LM] = _lm_head_params(m) * EMBEDDING_BYTES / dep.dense_split
        sp[S_HEAD + H_LAYERS] = m.layers
        sp[S_HEAD + H_BYTES_PER_PARAM] = float(head["head_bytes_per_param"] or 0.0)
        sp[S_HEAD + H_WEIGHT_BYTES_PER_PARAM] = dep.weight_bytes_per_param
        sp[S_HEAD + H_OWN_WEIGHTS] = (projection + lm_head) * EMBEDDING_BYTES / dep.dense_split
        sp[S_HEAD + H_ATTENTION] = m.attention_flops_per_context_token(decode=True)
        sp[S_HEAD + H_PARAMS] = layer + projection + lm_head
        sp[S_HEAD + H_LAYER_OVERHEAD] = dep.eff.layer_overhead_us * 1e-6
    return sp, draft_weights, draft_collective


def run(arrival: np.ndarray, closed_starts: np.ndarray, n_in: np.ndarray, n_out: np.ndarray, n_cached: np.ndarray,
        ttft_target_s: np.ndarray, settings: dict[str, Any], physics: tuple[np.ndarray, ...],
        grid: np.ndarray, schedule_times: np.ndarray, schedule_serving: np.ndarray,
        words: np.ndarray, caches: "Caches | None" = None,
        transfer_s: np.ndarray | None = None) -> tuple[np.ndarray, ...] | None:
    """Replay the requests (arrival order) on ``settings['replicas']`` replicas; per-request and per-replica arrays.

    ``arrival``: open-loop arrival times (NaN for a closed loop, whose clients start at ``closed_starts``).
    ``words``: the random router's draws (``routers.random_words``, the Python router's stream); None is returned
    when the run needed more of them. ``caches``: the requests' prompt blocks (each replica then keeps a prefix
    cache in its KV pool, ``prefix_cache.PrefixCache``'s semantics) and the session router's picks.
    Disaggregated (``settings['prefill']`` P below the replicas): replicas 0..P-1 prefill, with the prefix caches
    and ``settings['router']``; a finished prompt's KV reaches the decode replicas P.. ``transfer_s`` (per request)
    later, where ``settings['decode_router']`` (a load router) places it; ``replica`` is then the prefill replica.
    Returns (arrival, start, first, finish, replica, preemptions per request, preemptions per replica, KV peak per
    replica, busy spans (start, end, replica) in time order per replica, cached tokens per request, hit blocks per
    request, evicted blocks per replica, blocks cached per replica at the end).
    """
    consts, weights, collective, decode, spec, draft_weights, draft_collective = physics
    c = caches if caches is not None else Caches.none(n_in.size)
    router = (ROUTER_CODES[settings["router"]] if caches is None
              else 3 if c.picks.size else CACHE_ROUTER_CODES[settings["router"]])
    replicas = int(settings["replicas"])
    front = int(settings.get("prefill", replicas))
    back_router = ROUTER_CODES[settings.get("decode_router", "round_robin")]
    transfer = np.zeros(1) if transfer_s is None else np.ascontiguousarray(transfer_s, dtype=np.float64)
    out = loop()(arrival, closed_starts, n_in, n_out, n_cached.copy(), ttft_target_s,
                 int(settings["replicas"]), int(settings["max_num_seqs"]), int(settings["budget"]),
                 SCHEDULER_CODES[settings["scheduler"]], router,
                 int(settings["kv_tokens"]), bool(settings["chunked"]), int(settings["max_run_steps"]),
                 consts, weights, collective, decode, grid, schedule_times, schedule_serving, words,
                 caches is not None, c.block_size, c.n_blocks, c.per_replica_ids, c.look_ptr, c.look_ids,
                 c.look_first, c.keep_ptr, c.keep_ids, c.picks, c.thresholds,
                 ADMISSION_CODES[settings["admission"]], int(settings["watermark"]),
                 c.runs, c.pair, c.n_pairs, c.look_len, c.keep_len, front, transfer, back_router, spec, draft_weights,
                 draft_collective)
    return out[:-1] if out[-1] else None


@dataclass(frozen=True)
class Caches:
    """What the loop needs for per-replica prefix caches: dense block ids (0..n_blocks-1) per request, CSR form.

    ``look_first``: True where a looked-up block first occurs in its request (a block is charged once per
    request); ``picks``: with static routing (round-robin or session affinity), each request's replica, precomputed
    (-1: no session key, round-robin in the loop), else empty; ``per_replica_ids``: the ids are numbered per
    replica (every request's replica is in ``picks``), so the loop keeps one cell per id rather than one per
    replica and id; ``thresholds``: the prefix router's (cache share, absolute and relative imbalance).

    ``runs`` (blocks built from sessions, ``PrefixBlocks.in_runs``): the loop keeps each replica's copy of a session
    as runs of its stream instead of a cell per block, and needs no block ids (``look_ids`` and ``keep_ids`` are
    empty, ``n_blocks`` 0): request ``i`` looks up blocks 0..look_len[i]-1 of its session and leaves 0..keep_len[i]-1;
    ``pair``: its (replica, session) copy, numbered per replica when ``per_replica_ids`` (``n_pairs`` in all), else
    its session's code (``n_pairs`` sessions, a copy on every replica); -1: no blocks.
    """

    block_size: int
    n_blocks: int
    per_replica_ids: bool
    look_ptr: np.ndarray
    look_ids: np.ndarray
    look_first: np.ndarray
    keep_ptr: np.ndarray
    keep_ids: np.ndarray
    picks: np.ndarray
    thresholds: np.ndarray
    runs: bool = False
    pair: np.ndarray = field(default_factory=lambda: np.empty(0, dtype=np.int64))
    n_pairs: int = 0
    look_len: np.ndarray = field(default_factory=lambda: np.empty(0, dtype=np.int64))
    keep_len: np.ndarray = field(default_factory=lambda: np.empty(0, dtype=np.int64))

    @staticmethod
    def none(size: int) -> "Caches":
        """No prefix caches: empty block arrays of the same types (one compiled version of the loop serves both)."""
        ptr = np.zeros(size + 1, dtype=np.int64)
        empty = np.empty(0, dtype=np.int64)
        return Caches(1, 0, False, ptr, empty, np.empty(0, dtype=np.bool_), ptr, empty, empty, np.zeros(3))

    def state_bytes(self, replicas: int) -> int:
        """What the loop's cache state takes on ``replicas`` replicas: 16 bytes a cell (state, LRU links, tokens),
        or with session runs 16 bytes a (replica, session) pair and 8 a request (its runs and partial blocks, a
        few per pair, are not counted: they follow the replicas' KV pools)."""
        if self.runs:
            return 16 * self.n_pairs * (1 if self.per_replica_ids else replicas) + 8 * self.look_len.size
        return 16 * self.n_blocks * (1 if self.per_replica_ids else replicas)


# --- numpy's summation order, so that sums equal np.sum bit for bit ----------------------------------------
def _pairwise_block(a: np.ndarray, lo: int, n: int) -> float:
    """np.add.reduce of ``n`` ≤ 128 numbers: a plain sum below 8, else eight interleaved partial sums."""
    if n < 8:
        res = 0.0
        for i in range(lo, lo + n):
            res += a[i]
        return res
    r0, r1, r2, r3 = a[lo], a[lo + 1], a[lo + 2], a[lo + 3]
    r4, r5, r6, r7 = a[lo + 4], a[lo + 5], a[lo + 6], a[lo + 7]
    i = 8
    whole = n - n % 8
    while i < whole:
        r0 += a[lo + i]
        r1 += a[lo + i + 1]
        r2 += a[lo + i + 2]
        r3 += a[lo + i + 3]
        r4 += a[lo + i + 4]
        r5 += a[lo + i + 5]
        r6 += a[lo + i + 6]
        r7 += a[lo + i + 7]
        i += 8
    res = ((r0 + r1) + (r2 + r3)) + ((r4 + r5) + (r6 + r7))
    while i < n:
        res += a[lo + i]
        i += 1
    return res


def _pairwise(a: np.ndarray, n: int) -> float:
    """``np.sum(a[:n])`` in numpy's order: halves (cut at a multiple of 8) summed apart above 128 numbers.

    Walked with explicit stacks (numba's on-disk cache does not take recursive functions)."""
    if n <= 128:
        return _pairwise_block(a, 0, n)
    los = np.zeros(64, dtype=np.int64)
    ns = np.zeros(64, dtype=np.int64)
    state = np.zeros(64, dtype=np.int64)
    values = np.zeros(64)
    top, filled = 0, 0
    los[0], ns[0], state[0] = 0, n, 0
    while top >= 0:
        lo, size = los[top], ns[top]
        if size <= 128:
            values[filled] = _pairwise_block(a, lo, size)
            filled += 1
            top -= 1
            continue
        half = size // 2
        half -= half % 8
        if state[top] == 0:
            state[top] = 1
            top += 1
            los[top], ns[top], state[top] = lo, half, 0
        elif state[top] == 1:
            state[top] = 2
            top += 1
            los[top], ns[top], state[top] = lo + half, size - half, 0
        else:
            filled -= 1
            values[filled - 1] = values[filled - 1] + values[filled]
            top -= 1
    return values[0]


# --- binary heaps keyed by (k1, k2), unique keys --------------------------------------------------------------
def _less(k1: np.ndarray, k2: np.ndarray, i: int, j: int) -> bool:
    return k1[i] < k1[j] or (k1[i] == k1[j] and k2[i] < k2[j])


def _swap(k1: np.ndarray, k2: np.ndarray, v: np.ndarray, i: int, j: int) -> None:
    k1[i], k1[j] = k1[j], k1[i]
    k2[i], k2[j] = k2[j], k2[i]
    v[i], v[j] = v[j], v[i]


def _grow_queue(qk1, qk2, qv, r: int, n: int) -> None:
    """Double replica ``r``'s waiting heap (its two keys and values), keeping its ``n`` entries."""
    grown1 = np.zeros(2 * n)
    grown2 = np.zeros(2 * n, dtype=np.int64)
    grownv = np.zeros(2 * n, dtype=np.int64)
    grown1[:n] = qk1[r]
    grown2[:n] = qk2[r]
    grownv[:n] = qv[r]
    qk1[r] = grown1
    qk2[r] = grown2
    qv[r] = grownv


def _heap_push(k1: np.ndarray, k2: np.ndarray, v: np.ndarray, size: int, a: float, b: int, value: int) -> None:
    k1[size], k2[size], v[size] = a, b, value
    i = size
    while i > 0:
        parent = (i - 1) // 2
        if _less(k1, k2, i, parent):
            _swap(k1, k2, v, i, parent)
            i = parent
        else:
            break


def _heap_pop(k1: np.ndarray, k2: np.ndarray, v: np.ndarray, size: int) -> None:
    """Remove the top of a heap of ``size`` entries (the caller shrinks its size by one)."""
    last = size - 1
    k1[0], k2[0], v[0] = k1[last], k2[last], v[last]
    i = 0
    while True:
        left = 2 * i + 1
        if left >= last:
            break
        child = left
        if left + 1 < last and _less(k1, k2, left + 1, left):
            child = left + 1
        if _less(k1, k2, child, i):
            _swap(k1, k2, v, child, i)
            i = child
        else:
            break


# --- the physics of one iteration --------------------------------------------------------------------------
def _mixed_step(c: np.ndarray, weights: np.ndarray, collective: np.ndarray, ends: np.ndarray, starts: np.ndarray,
                parts: int, b: float, ctx: float, dense: np.ndarray, expert: np.ndarray, attention: np.ndarray) -> float:
    """``physics.mixed_step_s`` before its speculative part (``_speculative_step``): chunks [start, end) and ``b``
    decodes at context ``ctx``, each decode putting ``c[P_Q]`` tokens through the target."""
    new_tokens = 0
    for i in range(parts):
        new_tokens += ends[i] - starts[i]
    new = float(new_tokens)
    compute = 0.0
    if new > 0:
        share, window = c[P_WINDOW_SHARE], c[P_WINDOW]
        for i in range(parts):
            n = float(ends[i])
            p = min(float(starts[i]), n)
            fresh = n - p
            expert[i] = c[P_EXPERT2] * fresh
            dense[i] = c[P_DENSE2] * fresh + c[P_LM2] * (1.0 if fresh > 0 else 0.0)
            full = c[P_HALF_PAIR] * (n ** 2 - p ** 2)
            if window < 0:
                attention[i] = full
            else:
                attention[i] = (1.0 - share) * full + share * (c[P_PAIR] * fresh * min(n, window))
        r = P_R_ALONE if (parts == 1 and b == 0) else P_R_SPREAD
        compute += _pairwise(dense, parts) * c[r] + _pairwise(expert, parts) * c[r + 1] \
            + _pairwise(attention, parts) * c[r + 2]
    kv = 0.0
    if b > 0:
        effective = ctx
        kv_effective = (1.0 - c[P_WINDOW_SHARE]) * ctx
        if c[P_WINDOW] >= 0:
            effective = (1.0 - c[P_WINDOW_SHARE]) * ctx + c[P_WINDOW_SHARE] * min(ctx, c[P_WINDOW])
            kv_effective = kv_effective + c[P_WINDOW_SHARE] * min(ctx, c[P_WINDOW])
        att = c[P_DECODE_ATTENTION] * effective
        compute += b * c[P_Q] * (c[P_DECODE_DENSE2] * c[P_R_DECODE] + c[P_EXPERT2] * c[P_R_DECODE + 1]
                                 + att * c[P_R_DECODE + 2])
        kv = b * (c[P_KV_PER_TOKEN] * kv_effective * c[P_KV_REPLICATION] / c[P_TP])
    q = c[P_Q] if b > 0 else 1.0
    tokens = int(round(new + b * q))
    memory = (weights[tokens] + kv) / c[P_HBM]
    fixed = c[P_FIXED] + (b * q * c[P_PER_SEQUENCE] + (c[P_PREFILL_EXTRA] if new > 0 else 0.0))
    return max(compute, memory) + collective[tokens] + fixed


def _kv_per_gpu(sp: np.ndarray, o: int, ctx: float) -> float:
    """``Deployment.kv_bytes_per_gpu`` of one sequence of ``ctx`` tokens, the pass block at ``o``."""
    effective = (1.0 - sp[o + B_WINDOW_SHARE]) * ctx
    if sp[o + B_WINDOW] >= 0:
        effective = effective + sp[o + B_WINDOW_SHARE] * min(ctx, sp[o + B_WINDOW])
    return sp[o + B_KV_PER_TOKEN] * effective * sp[o + B_KV_REPLICATION] / sp[o + B_TP]


def _pass_s(sp: np.ndarray, o: int, weights: np.ndarray, collective: np.ndarray, batch: float, ctx: float,
            per_sequence_tokens: float) -> float:
    """``physics.decode_pass_s``: one forward pass of ``batch`` sequences, ``per_sequence_tokens`` each."""
    b = max(batch, 1.0)
    t = b * per_sequence_tokens
    tokens = int(round(t))
    memory = (weights[tokens] + b * _kv_per_gpu(sp, o, ctx)) / sp[o + B_HBM]
    effective = ctx
    if sp[o + B_WINDOW] >= 0:
        effective = (1.0 - sp[o + B_WINDOW_SHARE]) * ctx + sp[o + B_WINDOW_SHARE] * min(ctx, sp[o + B_WINDOW])
    attention = sp[o + B_ATTENTION] * effective
    compute = (t * sp[o + B_DENSE2] / sp[o + B_DENSE_DIV] + t * sp[o + B_EXPERT2] * sp[o + B_IMBALANCE]
               / sp[o + B_EXPERT_DIV] + t * attention / sp[o + B_ATTENTION_DIV])
    per_sequence = t * sp[o + B_SEQUENCE_US] * 1e-6
    return max(memory, compute) + collective[tokens] + sp[o + B_FIXED] + per_sequence


def _head_pass_s(sp: np.ndarray, weights: np.ndarray, collective: np.ndarray, b: float, ctx: float) -> float:
    """``physics.speculative._head_pass_s``: one pass of an EAGLE head or an MTP module over ``b`` sequences."""
    h = S_HEAD
    whole = weights[int(round(b))]
    layer_bytes = (whole - sp[h + H_TARGET_LM]) / sp[h + H_LAYERS]
    if sp[h + H_BYTES_PER_PARAM] != 0:
        layer_bytes = layer_bytes * sp[h + H_BYTES_PER_PARAM] / sp[h + H_WEIGHT_BYTES_PER_PARAM]
    own = layer_bytes + sp[h + H_OWN_WEIGHTS]
    kv = b * _kv_per_gpu(sp, S_TARGET, ctx) / sp[h + H_LAYERS]
    memory = (own + kv) / sp[S_TARGET + B_HBM]
    attention = sp[h + H_ATTENTION] * ctx
    compute = (b * 2.0 * sp[h + H_PARAMS] / sp[S_TARGET + B_DENSE_DIV]
               + 0.0 * sp[S_TARGET + B_IMBALANCE] / sp[S_TARGET + B_EXPERT_DIV]
               + b * attention / sp[S_TARGET + B_ATTENTION_DIV])
    sampling = b * sp[S_TARGET + B_SEQUENCE_US] * 1e-6
    return (max(memory, compute) + collective[int(round(b))] / sp[h + H_LAYERS] + sp[h + H_LAYER_OVERHEAD]
            + sampling)


def _speculative_step(step: float, sp: np.ndarray, weights: np.ndarray, collective: np.ndarray,
                      draft_weights: np.ndarray, draft_collective: np.ndarray, batch: float, ctx: float) -> float:
    """``physics.mixed_step_s``'s speculative part: the iteration also runs the k draft passes, and its decodes are
    charged per token kept (``Speculative.draft_s`` and ``iteration_s`` at ``batch`` decodes of mean context ``ctx``)."""
    b = max(batch, 1.0)
    if sp[S_KIND] == 0:
        draft = 0.0
    elif sp[S_KIND] == 2:
        draft = sp[S_DRAFTS] * (_pass_s(sp, S_DRAFT, draft_weights, draft_collective, b, ctx, 1.0) + sp[S_OVERHEAD])
    else:
        draft = sp[S_DRAFTS] * (_head_pass_s(sp, weights, collective, b, ctx) + sp[S_OVERHEAD])
    full = _pass_s(sp, S_TARGET, weights, collective, batch, ctx, sp[S_DRAFTS] + 1.0) + draft
    return step + draft - full * (1.0 - 1.0 / sp[S_TAU])


# --- one replica's prefix cache (``prefix_cache.PrefixCache``) over dense block ids ---------------------------
# Replica r's copy of dense block u is cell base[r] + u of flat arrays: state -1 not cached, 0 cached and free (in
# the LRU list), n > 0 pinned by n running sequences; held: its tokens in the pool while pinned; nxt/prv link the
# free cells of each replica (head/tail per replica), least recently used first. With static routing the ids are
# numbered per replica already (base 0): only the blocks a replica can meet take cells.
def _match(state: np.ndarray, o: int, ids: np.ndarray, lo: int, hi: int) -> int:
    """``PrefixCache.match``: how many leading blocks of ids[lo:hi] the replica at base ``o`` holds."""
    hit = 0
    for j in range(lo, hi):
        if state[o + ids[j]] < 0:
            break
        hit += 1
    return hit


def _lru_unlink(nxt: np.ndarray, prv: np.ndarray, head: np.ndarray, tail: np.ndarray, r: int, a: int) -> None:
    p, n = prv[a], nxt[a]
    if p >= 0:
        nxt[p] = n
    else:
        head[r] = n
    if n >= 0:
        prv[n] = p
    else:
        tail[r] = p


def _lru_append(nxt: np.ndarray, prv: np.ndarray, head: np.ndarray, tail: np.ndarray, r: int, a: int) -> None:
    t = tail[r]
    prv[a] = t
    nxt[a] = -1
    if t >= 0:
        nxt[t] = a
    else:
        head[r] = a
    tail[r] = a


def _fit(state, nxt, prv, head, tail, n_free, evicted, r: int, room: int, block_size: int) -> None:
    """``PrefixCache.fit``: evict least recently used free blocks until they fit the pool's free room."""
    limit = max(room, 0) // block_size
    while n_free[r] > limit:
        a = head[r]
        _lru_unlink(nxt, prv, head, tail, r, a)
        state[a] = -1
        n_free[r] -= 1
        evicted[r] += 1


def _shared_and_own(state: np.ndarray, o: int, ids: np.ndarray, first: np.ndarray, lo: int, hi: int,
                    n: int, block_size: int) -> tuple[int, int]:
    """``PrefixCache.shared_tokens`` and ``_Replica._block_tokens``'s own: tokens of the request's distinct blocks
    that running sequences hold already, and of all its distinct blocks (a block past the prompt's end holds 0)."""
    shared = 0
    own = 0
    for j in range(lo, hi):
        if first[j]:
            t = max(min(block_size, n - (j - lo) * block_size), 0)
            own += t
            if state[o + ids[j]] > 0:
                shared += t
    return shared, own


def _pin(state, nxt, prv, head, tail, n_free, n_pinned, held, r: int, o: int, ids: np.ndarray, lo: int, hi: int,
         n: int, block_size: int) -> None:
    """``PrefixCache.pin`` with each block's tokens: the admitted sequence's prompt blocks are in use."""
    for j in range(lo, hi):
        a = o + ids[j]
        if state[a] > 0:
            state[a] += 1
        else:
            if state[a] == 0:
                _lru_unlink(nxt, prv, head, tail, r, a)
                n_free[r] -= 1
            state[a] = 1
            n_pinned[r] += 1
            held[a] = max(min(block_size, n - (j - lo) * block_size), 0)


def _release(state, nxt, prv, head, tail, n_free, n_pinned, held, r: int, o: int, look: np.ndarray, lo: int,
             hi: int, keep: np.ndarray, keep_lo: int, keep_hi: int) -> int:
    """``PrefixCache.release``: the sequence's blocks stay cached, most recently used, in block order; returns
    the tokens of the blocks no running sequence holds any more."""
    freed = 0
    for j in range(lo, hi):
        a = o + look[j]
        if state[a] > 1:
            state[a] -= 1
        else:
            state[a] = -1
            n_pinned[r] -= 1
            freed += held[a]
    for j in range(keep_lo, keep_hi):
        a = o + keep[j]
        if state[a] > 0:
            continue
        if state[a] == 0:
            _lru_unlink(nxt, prv, head, tail, r, a)
        else:
            n_free[r] += 1
        _lru_append(nxt, prv, head, tail, r, a)
        state[a] = 0
    return freed


# --- the same caches kept as runs of a session's stream (``Caches.runs``) ----------------------------------------
# When every request looks up blocks 0..L-1 of its own session's stream and leaves blocks 0..K-1 (blocks built from
# sessions), a replica's copy of a session (a "pair", number pbase[r] + pair[rid]) is described whole: the blocks
# running sequences pin are 0..top-1 (each running turn pins a prefix; top is the longest), and the free blocks
# are runs [lo, hi) of the stream ("segments"), each one release's blocks in block order, kept in the replica's
# LRU list as one node: an eviction takes blocks from the low end of the head run, a pin or release takes a
# run's low end. So a turn costs a few run operations instead of one per block, with the same block counts,
# order and hits as the cells. pst rows: 0 top, 1 first running turn (rids linked by run_next), 2 first segment
# (linked by seg row 5), 3 first record of a pinned block holding fewer than block_size tokens (the partial last
# block of the prompt that pinned it). seg rows: 0 lo, 1 hi, 2 pair, 3/4 next/previous in the replica's LRU list,
# 5 next of the pair's (or the free list's); rec rows: 0 block, 1 tokens, 2 next. fh: free seg and rec nodes.
def _grow_pool(pool: np.ndarray, fh: np.ndarray, which: int, link: int) -> np.ndarray:
    """Double a node pool (segments or records), its new nodes threaded onto its free list."""
    cap = pool.shape[1]
    grown = np.full((pool.shape[0], 2 * cap), -1, dtype=np.int64)
    grown[:, :cap] = pool
    for a in range(cap, 2 * cap - 1):
        grown[link, a] = a + 1
    grown[link, 2 * cap - 1] = fh[which]
    fh[which] = cap
    return grown


def _run_hit(pst, seg, p: int, L: int) -> int:
    """``_match`` for a turn looking up blocks 0..L-1 of pair ``p``: the pinned prefix, then the runs that follow."""
    c = pst[0, p]
    while c < L:
        s = pst[2, p]
        while s >= 0 and not (seg[0, s] <= c < seg[1, s]):
            s = seg[5, s]
        if s < 0:
            break
        c = seg[1, s]
    return min(c, L)


def _run_drop(pst, seg, fh, head, tail, r: int, p: int, prev: int, s: int) -> None:
    """Remove the empty segment ``s`` (after ``prev`` in its pair's list) from the LRU list and the pair's."""
    _lru_unlink(seg[3], seg[4], head, tail, r, s)
    if prev >= 0:
        seg[5, prev] = seg[5, s]
    else:
        pst[2, p] = seg[5, s]
    seg[5, s] = fh[0]
    fh[0] = s


def _run_trim(pst, seg, fh, head, tail, r: int, p: int, upto: int) -> int:
    """Take the free blocks below ``upto`` out of pair ``p``'s runs (each loses its low end); how many."""
    taken = 0
    prev = -1
    s = pst[2, p]
    while s >= 0:
        after = seg[5, s]
        if seg[0, s] < upto:
            cut = min(seg[1, s], upto)
            taken += cut - seg[0, s]
            seg[0, s] = cut
            if cut == seg[1, s]:
                _run_drop(pst, seg, fh, head, tail, r, p, prev, s)
                s = after
                continue
        prev = s
        s = after
    return taken


def _run_pin(pst, seg, rec, fh, head, tail, n_free, n_pinned, run_next, r: int, p: int, rid: int, L: int, n: int,
             block_size: int) -> None:
    """``_pin``: blocks 0..L-1 in use; those free leave the LRU runs, those past the pinned prefix are pinned now."""
    top = pst[0, p]
    if L > top:
        n_free[r] -= _run_trim(pst, seg, fh, head, tail, r, p, L)
        n_pinned[r] += L - top
        if n < L * block_size:   # the prompt's last block is partial: its tokens, held while it stays pinned
            a = fh[1]
            fh[1] = rec[2, a]
            rec[0, a], rec[1, a], rec[2, a] = L - 1, n - (L - 1) * block_size, pst[3, p]
            pst[3, p] = a
        pst[0, p] = L
    run_next[rid] = pst[1, p]
    pst[1, p] = rid


def _run_release(pst, seg, rec, fh, head, tail, n_free, n_pinned, run_next, look_len, r: int, p: int, rid: int,
                 L: int, K: int, block_size: int) -> int:
    """``_release``: blocks no other running turn of the pair pins leave the pool; blocks 0..K-1 not pinned are
    the newest run of the replica's LRU list. Returns the tokens the unpinned blocks held."""
    longest = 0   # the longest prompt among the pair's other running turns: what stays pinned
    prev = -1
    q = pst[1, p]
    walked = 0
    while q >= 0:
        walked += 1
        if walked > run_next.size:   # no-progress guard: more turns than requests, so the list loops (a bug)
            raise RuntimeError("the replay is stuck: replica " + str(r) + "'s list of the running turns of session "
                               "pair " + str(p) + " loops (a turn pinned again without being released; releasing "
                               "turn " + str(rid) + ")")
        after = run_next[q]
        if q == rid:
            if prev >= 0:
                run_next[prev] = after
            else:
                pst[1, p] = after
        else:
            longest = max(longest, look_len[q])
            prev = q
        q = after
    freed = 0
    if L > longest:
        n_pinned[r] -= L - longest
        freed = (L - longest) * block_size
        prev = -1
        a = pst[3, p]
        while a >= 0:
            after = rec[2, a]
            if rec[0, a] >= longest:
                freed -= block_size - rec[1, a]
                if prev >= 0:
                    rec[2, prev] = after
                else:
                    pst[3, p] = after
                rec[2, a] = fh[1]
                fh[1] = a
            else:
                prev = a
            a = after
        pst[0, p] = longest
    top = pst[0, p]
    if K > top:
        n_free[r] += (K - top) - _run_trim(pst, seg, fh, head, tail, r, p, K)
        s = fh[0]
        fh[0] = seg[5, s]
        seg[0, s], seg[1, s], seg[2, s] = top, K, p
        seg[5, s] = pst[2, p]
        pst[2, p] = s
        _lru_append(seg[3], seg[4], head, tail, r, s)
    return freed


def _run_fit(pst, seg, fh, head, tail, n_free, evicted, r: int, room: int, block_size: int) -> None:
    """``_fit``: evict from the low end of the replica's least recently used runs until the free blocks fit."""
    limit = max(room, 0) // block_size
    while n_free[r] > limit:
        s = head[r]
        e = min(n_free[r] - limit, seg[1, s] - seg[0, s]) if s >= 0 else 0
        if e <= 0:   # no-progress guard: the count says free blocks, the LRU list has none to evict (a bug)
            raise RuntimeError("the replay is stuck: replica " + str(r) + " counts " + str(n_free[r])
                               + " free cached blocks to evict but its least recently used run holds none")
        seg[0, s] += e
        n_free[r] -= e
        evicted[r] += e
        if seg[0, s] == seg[1, s]:
            p = seg[2, s]
            prev = -1
            q = pst[2, p]
            while q != s:
                prev = q
                q = seg[5, q]
            _run_drop(pst, seg, fh, head, tail, r, p, prev, s)


def _let_go(runs: bool, rid: int, k: int, pair, pbase, pst, seg, rec, fh, state, nxt, prv, head, tail, n_free,
            n_pinned, held, base, run_next, look_len, keep_len, look_ids, look_ptr, keep_ids, keep_ptr, own, kv_used,
            evicted, kv_tokens: int, block_size: int) -> np.ndarray:
    """Request ``rid`` leaves replica ``k``'s batch (finished or preempted): its blocks are released into the cache
    (runs of its session's stream, or cells), its own KV is given back, and the cache is evicted down to what fits.
    Returns the run pool, grown when a release needed a free record."""
    if runs:
        back = 0
        if pair[rid] >= 0:
            if fh[0] < 0:
                seg = _grow_pool(seg, fh, 0, 5)
            back = _run_release(pst, seg, rec, fh, head, tail, n_free, n_pinned, run_next, look_len, k,
                                pbase[k] + pair[rid], rid, look_len[rid], keep_len[rid], block_size)
    else:
        back = _release(state, nxt, prv, head, tail, n_free, n_pinned, held, k, base[k], look_ids,
                        look_ptr[rid], look_ptr[rid + 1], keep_ids, keep_ptr[rid], keep_ptr[rid + 1])
    kv_used[k] += own[rid] - back
    own[rid] = 0
    if runs:
        _run_fit(pst, seg, fh, head, tail, n_free, evicted, k, kv_tokens - kv_used[k], block_size)
    else:
        _fit(state, nxt, prv, head, tail, n_free, evicted, k, kv_tokens - kv_used[k], block_size)
    return seg


def _prefix_pick(state, base, in_flight, outstanding, serving: int, ids: np.ndarray, lo: int, hi: int, n: int,
                 block_size: int, thresholds: np.ndarray, runs: bool, pst, seg, pbase, pair: int) -> int:
    """``routers.PrefixAware.pick`` over the first ``serving`` replicas: the least loaded when the fleet is
    imbalanced, else the longest cached prefix when it covers enough of the prompt, else the fewest tokens."""
    most, fewest, fewest_at = in_flight[0], in_flight[0], 0
    for j in range(1, serving):
        if in_flight[j] > most:
            most = in_flight[j]
        if in_flight[j] < fewest:
            fewest, fewest_at = in_flight[j], j
    if most - fewest > thresholds[1] and most > thresholds[2] * fewest:
        return fewest_at
    least = 0
    for j in range(1, serving):
        if outstanding[j] < outstanding[least]:
            least = j
    if lo == hi:
        return least
    best, best_blocks = least, -1
    for j in range(serving):   # the longest cached prefix; among equals the one with fewer outstanding tokens
        hit = _run_hit(pst, seg, pbase[j] + pair, hi - lo) if runs else _match(state, base[j], ids, lo, hi)
        if hit > best_blocks or (hit == best_blocks and outstanding[j] < outstanding[best]):
            best, best_blocks = j, hit
    rate = min(best_blocks * block_size, n) / max(n, 1)
    return best if rate > thresholds[0] else least


def _load_pick(code: int, lo: int, n: int, outstanding: np.ndarray, words: np.ndarray, turn_word: np.ndarray) -> int:
    """A load router over replicas lo..lo+n-1 (a disaggregated decode pool): round-robin (code 0, its turn in
    ``turn_word[0]``), the fewest outstanding tokens (1, the first on a tie), or random (2, ``randrange(n)`` from
    ``words`` at ``turn_word[1]``); -1 when the random router ran out of words."""
    if code == 0:
        r = lo + turn_word[0] % n
        turn_word[0] += 1
        return r
    if code == 1:
        r = lo
        for j in range(lo + 1, lo + n):
            if outstanding[j] < outstanding[r]:
                r = j
        return r
    bits = 0
    v = n
    while v > 0:
        bits += 1
        v >>= 1
    r = n
    while r >= n and turn_word[1] < words.size:
        r = words[turn_word[1]] >> (32 - bits)
        turn_word[1] += 1
    return -1 if r >= n else lo + r


# --- the event loop ----------------------------------------------------------------------------------------
def _loop(arrival_in, closed_starts, n_in, n_out, n_cached, ttft_target_s, K, S, budget_max, scheduler, router,
          kv_tokens, chunked, max_run, consts, weights, collective, decode, grid, schedule_times, schedule_serving,
          words, cached, block_size, n_blocks, per_replica_ids, look_ptr, look_ids, look_first, keep_ptr, keep_ids,
          picks, thresholds, admission, watermark, runs, pair, n_pairs, look_len, keep_len, n_front, transfer,
          back_router, spec, draft_weights, draft_collective):
    size = n_in.size
    # disaggregated pools: replicas 0..n_front-1 prefill (they keep the prefix caches), n_front..K-1 decode
    split = n_front < K
    back = np.zeros(2, dtype=np.int64)            # the decode pool's router: its turn and its next random word
    inf = math.inf
    nan = math.nan
    open_loop = closed_starts.size == 0
    arrival = np.full(size, nan)
    start = np.full(size, nan)
    first = np.full(size, nan)
    finish = np.full(size, nan)
    replica = np.full(size, -1, dtype=np.int64)
    preempted = np.zeros(size, dtype=np.int64)
    resumed = np.zeros(size, dtype=np.bool_)
    resume_total = np.zeros(size, dtype=np.int64)
    resume_out = np.zeros(size, dtype=np.int64)

    # running batches: row r is replica r, the first count[r] entries in admission order
    ids = np.zeros((K, S), dtype=np.int64)
    pre_done = np.zeros((K, S), dtype=np.int64)
    pre_total = np.zeros((K, S), dtype=np.int64)
    out_left = np.zeros((K, S), dtype=np.int64)
    ctx = np.zeros((K, S), dtype=np.int64)
    chunk = np.zeros((K, S), dtype=np.int64)
    decoding = np.zeros((K, S), dtype=np.bool_)
    count = np.zeros(K, dtype=np.int64)
    kv_used = np.zeros(K, dtype=np.int64)
    kv_peak = np.zeros(K, dtype=np.int64)
    outstanding = np.zeros(K, dtype=np.int64)
    clock = np.zeros(K)
    busy_until = np.full(K, inf)
    plan = np.zeros(K, dtype=np.int64)            # 0 idle, 1 a mixed step, 2 a decode run
    plan_t0 = np.zeros(K)
    run_cum = np.zeros((K, max_run))
    run_len = np.zeros(K, dtype=np.int64)
    preemptions = np.zeros(K, dtype=np.int64)
    # busy spans, one per busy period (at most one per request routed, twice when disaggregated, plus one per replica)
    spans = size * (2 if split else 1) + K
    span_lo = np.zeros(spans)
    span_hi = np.zeros(spans)
    span_rep = np.zeros(spans, dtype=np.int64)
    last_span = np.full(K, -1, dtype=np.int64)
    n_spans = 0
    # waiting queues: one heap per replica, grown by doubling
    qk1 = [np.zeros(16) for _ in range(K)]
    qk2 = [np.zeros(16, dtype=np.int64) for _ in range(K)]
    qv = [np.zeros(16, dtype=np.int64) for _ in range(K)]
    qn = np.zeros(K, dtype=np.int64)
    order = 0                                     # FCFS order of appends and of pushes to the front
    # closed loop: the clients' next requests, a heap on (time, tie); a client has at most one pending
    clients = max(closed_starts.size, 1) + (size if split else 0)   # + every prompt's KV on its way to decode
    ek1 = np.zeros(clients)
    ek2 = np.zeros(clients, dtype=np.int64)
    ev = np.zeros(clients, dtype=np.int64)
    en = 0
    tie = 0
    next_client = 0
    if not open_loop:
        for j in range(closed_starts.size):
            if next_client < size:
                tie += 1
                _heap_push(ek1, ek2, ev, en, closed_starts[j], tie, next_client)
                en += 1
                next_client += 1
    in_flight = np.zeros(K, dtype=np.int64)       # requests routed here and not finished (the prefix router's)
    # prefix caches (``cached``): per replica and block, its state, LRU links and tokens held when pinned
    base = np.zeros(K, dtype=np.int64) if per_replica_ids else np.arange(K, dtype=np.int64) * n_blocks
    cells = n_blocks if per_replica_ids else n_front * n_blocks
    state = np.full(cells, -1, dtype=np.int32)
    nxt = np.full(cells, -1, dtype=np.int32)   # cell numbers: the simulator's bound keeps them below 2**31
    prv = np.full(cells, -1, dtype=np.int32)
    held = np.zeros(cells, dtype=np.int32)
    head = np.full(K, -1, dtype=np.int64)
    tail = np.full(K, -1, dtype=np.int64)
    n_free = np.zeros(K, dtype=np.int64)
    n_pinned = np.zeros(K, dtype=np.int64)
    evicted = np.zeros(K, dtype=np.int64)
    # session runs (``runs``): per pair its pinned prefix and the heads of its lists (running turns, runs, partial
    # blocks); the pools of runs and records start small and double when a release or pin finds none free
    pbase = np.zeros(K, dtype=np.int64) if per_replica_ids else np.arange(K, dtype=np.int64) * n_pairs
    pst = np.full((4, (n_pairs if per_replica_ids else n_front * n_pairs) if runs else 0), -1, dtype=np.int32)
    pst[0] = 0
    run_next = np.full(size if runs else 0, -1, dtype=np.int64)
    fh = np.full(2, -1, dtype=np.int64)
    seg = np.full((6, 1), -1, dtype=np.int64)
    rec = np.full((3, 1), -1, dtype=np.int64)
    fh[0], fh[1] = 0, 0
    own = np.zeros(size if cached else 0, dtype=np.int64)        # a running request's prompt blocks' tokens
    hit_blocks = np.zeros(size if cached else 0, dtype=np.int64)  # leading blocks found at admission
    own_all = np.full(size if cached else 0, -1, dtype=np.int64)  # tokens of a request's distinct blocks, once known
    gone = np.zeros(S, dtype=np.int64)
    # scratch for one step's physics
    scratch_end = np.zeros(S, dtype=np.int64)
    scratch_start = np.zeros(S, dtype=np.int64)
    dense = np.zeros(S)
    expert = np.zeros(S)
    attention = np.zeros(S)
    turn = 0
    word = 0                                      # the random router's next word
    ptr = 0
    n_grid = grid.size

    while True:
        t_ext = arrival_in[ptr] if (open_loop and ptr < size) else inf
        t_int = ek1[0] if en > 0 else inf
        t_a = min(t_ext, t_int)
        k = 0
        for j in range(1, K):
            if busy_until[j] < busy_until[k]:
                k = j
        t_r = busy_until[k]
        if t_a == inf and t_r == inf:
            break
        if t_a <= t_r:
            # -- an arrival: route it and queue it at its replica --
            if t_ext <= t_int:
                rid = ptr
                now = t_ext
                ptr += 1
            else:
                rid = ev[0]
                now = ek1[0]
                _heap_pop(ek1, ek2, ev, en)
                en -= 1
            to_decode = rid >= size   # a prompt's KV reached the decode pool (its event carries rid + size)
            if to_decode:
                rid -= size
            serving = n_front
            if schedule_times.size > 0:
                pos = np.searchsorted(schedule_times, now, side="right") - 1
                serving = schedule_serving[max(pos, 0)]
            if to_decode:   # the decode pool holds no prefix cache: a load router over its replicas
                r = _load_pick(back_router, n_front, K - n_front, outstanding, words, back)
                if r < 0:   # out of words: the caller runs again with more
                    return (arrival, start, first, finish, replica, preempted, preemptions, kv_peak,
                            span_lo[:0].copy(), span_hi[:0].copy(), span_rep[:0].copy(), n_cached, hit_blocks,
                            evicted, n_free + n_pinned, False)
            elif router == 0:
                r = turn % serving
                turn += 1
            elif router == 2:
                # Python's randrange(serving): the top bit-length bits of a word, again while not below serving
                bits = 0
                v = serving
                while v > 0:
                    bits += 1
                    v >>= 1
                r = serving
                while r >= serving and word < words.size:
                    r = words[word] >> (32 - bits)
                    word += 1
                if r >= serving:   # out of words: the caller runs again with more
                    return (arrival, start, first, finish, replica, preempted, preemptions, kv_peak,
                            span_lo[:0].copy(), span_hi[:0].copy(), span_rep[:0].copy(), n_cached, hit_blocks,
                            evicted, n_free + n_pinned, False)
            elif router == 3 and picks[rid] >= 0:
                r = picks[rid]   # static routing, precomputed: round-robin, or the session's replica on the ring
            elif router == 3:
                r = turn % serving
                turn += 1
            elif router == 4:
                # a session pair only with session runs: on block hashes ``pair`` is empty, and the compiled loop
                # checks no index (reading past it crashed a test process once)
                r = _prefix_pick(state, base, in_flight, outstanding, serving, look_ids, look_ptr[rid], look_ptr[rid + 1],
                                 n_in[rid], block_size, thresholds, runs, pst, seg, pbase, pair[rid] if runs else -1)
            else:
                r = 0
                for j in range(1, serving):
                    if outstanding[j] < outstanding[r]:
                        r = j
            if to_decode:   # the first token came from the prefill pool: it decodes the rest, its prompt's KV here
                resumed[rid] = True
                resume_total[rid] = n_in[rid]
                resume_out[rid] = n_out[rid] - 1
            else:
                arrival[rid] = now
                replica[rid] = r
            in_flight[r] += 1
            # what this cache holds now, exact at admission; a request without blocks keeps the log's cached tokens
            if cached and not to_decode and look_ptr[rid + 1] > look_ptr[rid]:
                if runs:
                    hit = 0 if pair[rid] < 0 else _run_hit(pst, seg, pbase[r] + pair[rid], look_len[rid])
                else:
                    hit = _match(state, base[r], look_ids, look_ptr[rid], look_ptr[rid + 1])
                n_cached[rid] = max(min(hit * block_size, n_in[rid] - 1), 0)
            n = qn[r]
            if n == qk1[r].size:
                _grow_queue(qk1, qk2, qv, r, n)
            if scheduler == 0:
                order += 1
                _heap_push(qk1[r], qk2[r], qv[r], n, 0.0, order, rid)
            elif scheduler == 2:
                _heap_push(qk1[r], qk2[r], qv[r], n, now + ttft_target_s[rid], rid, rid)
            else:
                _heap_push(qk1[r], qk2[r], qv[r], n, float(n_in[rid] - n_cached[rid]), rid, rid)
            qn[r] = n + 1
            outstanding[r] += (0 if to_decode else n_in[rid] - n_cached[rid]) + n_out[rid]
            replan = False
            if plan[r] == 0:
                clock[r] = max(clock[r], now)
                replan = True
            elif plan[r] == 2 and now < busy_until[r]:
                # cut the decode run at the iteration under way
                done = np.searchsorted(run_cum[r, :run_len[r]], now - plan_t0[r], side="left") + 1
                if done < run_len[r]:
                    run_len[r] = done
                    replan = True
            if not replan:
                continue
            k = r
            if plan[k] == 2:
                steps_done = run_len[k]
                commit = 2
            else:
                steps_done = 0
                commit = 0
        else:
            commit = plan[k]
            steps_done = run_len[k]

        here = cached and k < n_front   # replica k keeps a prefix cache (a decode replica holds none)
        hand_over = split and k < n_front   # a prefill replica: a finished prompt leaves for the decode pool
        # -- finish the planned iteration or run of replica k (commit 0: nothing to finish) --
        if commit != 0:
            t0 = plan_t0[k]
            if commit == 2:
                end = t0 + run_cum[k, steps_done - 1]
            else:
                end = busy_until[k]
            if last_span[k] >= 0 and t0 <= span_hi[last_span[k]]:
                span_hi[last_span[k]] = end
            else:
                span_lo[n_spans], span_hi[n_spans], span_rep[n_spans] = t0, end, k
                last_span[k] = n_spans
                n_spans += 1
            m = count[k]
            if commit == 2:
                b = 0
                for i in range(m):
                    if decoding[k, i]:
                        out_left[k, i] -= steps_done
                        ctx[k, i] += steps_done
                        b += 1
                kv_used[k] += b * steps_done
                outstanding[k] -= b * steps_done
                if here and runs:
                    _run_fit(pst, seg, fh, head, tail, n_free, evicted, k, kv_tokens - kv_used[k], block_size)
                elif here:
                    _fit(state, nxt, prv, head, tail, n_free, evicted, k, kv_tokens - kv_used[k], block_size)
            else:
                processed = 0
                grow = 0
                for i in range(m):
                    was_prefilling = pre_done[k, i] < pre_total[k, i]
                    pre_done[k, i] += chunk[k, i]
                    processed += chunk[k, i]
                    first_now = was_prefilling and pre_done[k, i] >= pre_total[k, i]
                    if first_now and math.isnan(first[ids[k, i]]):
                        first[ids[k, i]] = end
                    if decoding[k, i] or first_now:
                        out_left[k, i] -= 1
                        processed += 1
                    if decoding[k, i]:
                        ctx[k, i] += 1
                        grow += 1
                outstanding[k] -= processed
                kv_used[k] += grow
                if here and runs:
                    _run_fit(pst, seg, fh, head, tail, n_free, evicted, k, kv_tokens - kv_used[k], block_size)
                elif here:
                    _fit(state, nxt, prv, head, tail, n_free, evicted, k, kv_tokens - kv_used[k], block_size)
            clock[k] = end
            plan[k] = 0
            # sequences that are done leave the batch (the batch keeps its admission order)
            keep = 0
            freed = 0
            n_gone = 0
            for i in range(m):
                if hand_over and pre_done[k, i] >= pre_total[k, i]:
                    # its prompt is done: the KV travels to the decode pool, and the first token is counted once
                    # it is there, as the planner does
                    rid = ids[k, i]
                    there = end + transfer[rid]
                    first[rid] = there
                    freed += ctx[k, i]
                    gone[n_gone] = rid
                    n_gone += 1
                    if n_out[rid] <= 1:
                        finish[rid] = there
                        if not open_loop and next_client < size:
                            tie += 1
                            _heap_push(ek1, ek2, ev, en, there, tie, next_client)
                            en += 1
                            next_client += 1
                    else:
                        tie += 1
                        _heap_push(ek1, ek2, ev, en, there, tie, rid + size)
                        en += 1
                elif out_left[k, i] <= 0 and pre_done[k, i] >= pre_total[k, i]:
                    rid = ids[k, i]
                    finish[rid] = end
                    freed += ctx[k, i]
                    gone[n_gone] = rid
                    n_gone += 1
                    if not open_loop and next_client < size:
                        tie += 1
                        _heap_push(ek1, ek2, ev, en, end, tie, next_client)
                        en += 1
                        next_client += 1
                else:
                    if keep != i:
                        ids[k, keep] = ids[k, i]
                        pre_done[k, keep] = pre_done[k, i]
                        pre_total[k, keep] = pre_total[k, i]
                        out_left[k, keep] = out_left[k, i]
                        ctx[k, keep] = ctx[k, i]
                    keep += 1
            kv_used[k] -= freed
            count[k] = keep
            in_flight[k] -= n_gone
            if here:   # their blocks stay cached, in the order they left the batch
                for g in range(n_gone):
                    rid = gone[g]
                    seg = _let_go(runs, rid, k, pair, pbase, pst, seg, rec, fh, state, nxt, prv, head, tail, n_free,
                                  n_pinned, held, base, run_next, look_len, keep_len, look_ids, look_ptr, keep_ids,
                                  keep_ptr, own, kv_used, evicted, kv_tokens, block_size)

        # -- plan replica k's next iteration (a mixed step) or run of decode-only iterations --
        while True:
            m = count[k]
            b = 0
            for i in range(m):
                decoding[k, i] = pre_done[k, i] >= pre_total[k, i]
                if decoding[k, i]:
                    b += 1
            if b > 0 and kv_tokens - kv_used[k] < b and m > 1:
                # preempt the newest sequence: its KV is freed and it is recomputed later, ahead of the queue
                i = m - 1
                rid = ids[k, i]
                kv_used[k] -= ctx[k, i]
                generated = n_out[rid] - out_left[k, i]
                preempted[rid] += 1
                preemptions[k] += 1
                resumed[rid] = True
                resume_total[rid] = n_in[rid] + generated
                resume_out[rid] = out_left[k, i]
                # the router's signal gets back the prompt to recompute (it had lost what was prefilled)
                outstanding[k] += resume_total[rid] - (pre_total[k, i] - pre_done[k, i])
                count[k] = m - 1
                if here:
                    seg = _let_go(runs, rid, k, pair, pbase, pst, seg, rec, fh, state, nxt, prv, head, tail, n_free,
                                  n_pinned, held, base, run_next, look_len, keep_len, look_ids, look_ptr, keep_ids,
                                  keep_ptr, own, kv_used, evicted, kv_tokens, block_size)
                n = qn[k]
                if n == qk1[k].size:
                    _grow_queue(qk1, qk2, qv, k, n)
                if scheduler == 0:
                    order += 1
                    _heap_push(qk1[k], qk2[k], qv[k], n, -1.0, -order, rid)
                else:
                    _heap_push(qk1[k], qk2[k], qv[k], n, -1.0, rid, rid)
                qn[k] = n + 1
                continue
            break
        m = count[k]
        budget = budget_max - b
        # room for new prompts: the next step's growth kept aside, or (guaranteed-no-evict) every running
        # sequence's tokens still to generate
        if admission == 2:
            free = kv_tokens - kv_used[k]
            for i in range(m):
                free -= out_left[k, i]
        else:
            free = kv_tokens - kv_used[k] - b
        for i in range(m):
            chunk[k, i] = 0
        for i in range(m):
            if decoding[k, i]:
                continue
            if budget <= 0:
                break
            c = min(pre_total[k, i] - pre_done[k, i], budget)
            chunk[k, i] = c
            budget -= c
        admitted = False
        while qn[k] > 0 and count[k] < S:
            rid = qv[k][0]
            if resumed[rid]:
                total, left, done = resume_total[rid], resume_out[rid], 0
            else:
                total, left, done = n_in[rid], n_out[rid], n_cached[rid]
            charge = total   # what admitting it takes from the pool: blocks running sequences hold are not taken twice
            hit = 0
            own_tokens = 0
            # a request without blocks keeps the log's cached tokens (``Requests.cached_before_lookup``)
            lo, hi = look_ptr[rid], look_ptr[rid + 1]
            blocked = here and hi > lo
            if blocked:   # the replica's cache at admission (a preempted prompt may hit its own blocks)
                # two ways the head cannot be admitted, known without walking its blocks (the walk is the cost
                # of a long prompt waiting for room, tried again every iteration): no token budget left (a cached
                # prompt always has a token to compute), or its tokens beyond its own blocks do not fit
                if budget <= 0:
                    break
                if runs:   # the turn's blocks are 0..L-1 of its session: tokens in closed form
                    L = look_len[rid]
                    if total - max(min(L * block_size, n_in[rid]), 0) > free:
                        break
                    p = pbase[k] + pair[rid]
                    hit = 0 if pair[rid] < 0 else _run_hit(pst, seg, p, L)
                    done = max(min(hit * block_size, total - 1), 0)
                    top = 0 if pair[rid] < 0 else pst[0, p]
                    shared = max(min(min(L, top) * block_size, n_in[rid]), 0)
                    own_tokens = max(min(L * block_size, n_in[rid]), 0)
                else:
                    if own_all[rid] < 0:
                        own_all[rid] = _shared_and_own(state, base[k], look_ids, look_first, lo, hi, n_in[rid],
                                                       block_size)[1]
                    if total - own_all[rid] > free:
                        break
                    hit = _match(state, base[k], look_ids, lo, hi)
                    done = max(min(hit * block_size, total - 1), 0)
                    shared, own_tokens = _shared_and_own(state, base[k], look_ids, look_first, lo, hi, n_in[rid],
                                                         block_size)
                charge = total - shared
            if split and k >= n_front:
                done = total   # the prompt's KV arrived from the prefill pool
            need = charge + left if admission == 2 else charge
            # the watermark keeps a share of the pool free, except for a request that would run alone
            if need > free - (watermark if count[k] > 0 else 0):
                break
            c = min(total - done, budget)
            if total - done > 0 and c <= 0:
                break
            if not chunked and c < total - done:
                if budget < budget_max - b:
                    break
                c = total - done
            _heap_pop(qk1[k], qk2[k], qv[k], qn[k])
            qn[k] -= 1
            if resumed[rid]:   # a recompute skips what its cache hit (or the KV it holds) covers
                outstanding[k] -= done
            if blocked:
                if not resumed[rid]:   # the counted hit, and the router's estimate made exact
                    outstanding[k] += n_cached[rid] - done
                    n_cached[rid] = done
                    hit_blocks[rid] = hit
                if runs:
                    if pair[rid] >= 0:
                        if fh[1] < 0:
                            rec = _grow_pool(rec, fh, 1, 2)
                        _run_pin(pst, seg, rec, fh, head, tail, n_free, n_pinned, run_next, k, pbase[k] + pair[rid],
                                 rid, look_len[rid], n_in[rid], block_size)
                else:
                    _pin(state, nxt, prv, head, tail, n_free, n_pinned, held, k, base[k], look_ids, look_ptr[rid],
                         look_ptr[rid + 1], n_in[rid], block_size)
                own[rid] = own_tokens
            resumed[rid] = False
            admitted = True
            free -= need
            kv_used[k] += charge
            budget -= c
            if math.isnan(start[rid]):
                start[rid] = clock[k]
            i = count[k]
            ids[k, i], pre_done[k, i], pre_total[k, i] = rid, done, total
            out_left[k, i], ctx[k, i], chunk[k, i] = left, total, c
            decoding[k, i] = done >= total
            if decoding[k, i]:
                b += 1
            count[k] = i + 1
        if here and admitted:   # the admitted sequences take room from the cached blocks
            if runs:
                _run_fit(pst, seg, fh, head, tail, n_free, evicted, k, kv_tokens - kv_used[k], block_size)
            else:
                _fit(state, nxt, prv, head, tail, n_free, evicted, k, kv_tokens - kv_used[k], block_size)
        if kv_used[k] > kv_peak[k]:
            kv_peak[k] = kv_used[k]
        m = count[k]
        if m == 0:
            plan[k] = 0
            busy_until[k] = inf
            continue
        ctx_sum = 0
        parts = 0
        shortest = 1 << 62
        for i in range(m):
            if decoding[k, i]:
                ctx_sum += ctx[k, i]
                if out_left[k, i] < shortest:
                    shortest = out_left[k, i]
            if chunk[k, i] > 0:
                scratch_start[parts] = pre_done[k, i]
                scratch_end[parts] = pre_done[k, i] + chunk[k, i]
                parts += 1
        mean_ctx = ctx_sum / b if b > 0 else 0.0
        plan_t0[k] = clock[k]
        if parts > 0:
            dt = _mixed_step(consts, weights, collective, scratch_end, scratch_start, parts, float(b), mean_ctx,
                             dense, expert, attention)
            if spec[S_ON] > 0 and b > 0:
                dt = _speculative_step(dt, spec, weights, collective, draft_weights, draft_collective, float(b),
                                       mean_ctx)
            plan[k] = 1
            busy_until[k] = clock[k] + dt
            continue
        if b == 0:
            raise RuntimeError("scheduler planned an empty iteration")
        steps = min(shortest, max_run, max((kv_tokens - kv_used[k]) // max(b, 1), 1))
        contexts = mean_ctx + np.arange(steps).astype(np.float64)
        times = np.interp(contexts, grid, decode[b])
        total_t = 0.0
        for s in range(steps):
            total_t += times[s]
            run_cum[k, s] = total_t
        run_len[k] = steps
        plan[k] = 2
        busy_until[k] = clock[k] + run_cum[k, steps - 1]
    return (arrival, start, first, finish, replica, preempted, preemptions, kv_peak,
            span_lo[:n_spans], span_hi[:n_spans], span_rep[:n_spans], n_cached, hit_blocks, evicted, n_free + n_pinned,
            True)
