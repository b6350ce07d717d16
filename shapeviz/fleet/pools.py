"""A fleet is a list of pools; each pool serves some products on its own deployment, and the simulator runs them.

A ``Pool`` has its own deployment (model, GPU type, TP, precision), engine settings (scheduler, chunk budget,
``max_num_seqs``), the products it serves (``"*"``: every product no other pool names) and optionally the prompt
sizes it takes (``input_tokens`` ranges: a Mélange-style split of one product's traffic by request size, known
when the request arrives). It is colocated (``replicas`` of ``gpu``) or split into a prefill and a decode side
(``prefill``/``decode``), whose GPU types may differ (Splitwise: prefill on a compute-dense GPU, decode on a
bandwidth-rich one), with the KV cache sent over ``kv_link_gbps``.

``simulate_fleet`` routes every request to its pool and replays each pool on its own (pools share nothing). A
split pool is two replays: the prefill side (each request's prompt and first token), then the decode side, whose
arrivals are the first tokens plus the KV transfer; a decode-side request holds its prompt's KV (the prompt is
"cached": only one token is computed on arrival), so its queueing, batching and KV limits are the decode GPU's.
The fleet's JSON form is what ``design --json`` reports and ``simulate --fleet`` / ``config --fleet`` read.
"""
from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from shapeviz.ingest.documents import finite_number, parse_json, parse_yaml, read_capped, short, whole_number
from shapeviz.physics.catalogue import get_gpu
from shapeviz.physics.engines import check_engine
from shapeviz.physics.kv_pool import KVPool, with_kv_pool
from shapeviz.physics.steps import Deployment, smallest_tp
from shapeviz.serving.parallel import Runner, map_jobs
from shapeviz.serving.planner import WhatIf, Workload
from shapeviz.serving.products import (
    SloClass,
    beyond_context,
    product_outcomes,
    products_meet,
    refused_words,
    ttft_targets_ms,
)
from shapeviz.serving.simulator import (
    ROUTERS,
    SCHEDULERS,
    Requests,
    requests_from_frame,
    simulate,
)

ANY_PRODUCT = "*"
DEFAULT_MODEL = "llama-3.1-70b"
SEED_BLOCK_S = 600.0   # a re-seeded replay permutes each product's requests and gaps within 10-minute blocks
# Bounds on a fleet file (untrusted: people pass them around). Far past any real fleet, far below what would
# exhaust the simulator's memory (replicas: 1e12 once took 15 GB before failing).
MAX_POOLS = 64
MAX_REPLICAS = 10_000          # per pool or side
MAX_TP = 64                    # GPUs per replica
MAX_NUM_SEQS = 65_536
MAX_BATCHED_TOKENS = 1 << 24
MAX_PROMPT_TOKENS = 1 << 31    # the bounds of an input_tokens range


@dataclass(frozen=True)
class Side:
    """One side of a split pool: ``replicas`` replicas of ``tp`` GPUs of type ``gpu``."""

    gpu: str
    replicas: int
    tp: int | None = None


@dataclass(frozen=True)
class Pool:
    """Replicas serving some products (or some prompt sizes of them) with their own deployment and settings."""

    name: str
    products: tuple[str, ...] = (ANY_PRODUCT,)
    gpu: str = "h100-sxm"
    replicas: int = 1
    tp: int | None = None                       # None: the smallest TP that fits the model
    model: str | None = None                    # None: the fleet's model
    precision: str | None = "fp8"
    scheduler: str = "fcfs"
    router: str = "least_tokens"
    max_num_seqs: int | None = None
    max_num_batched_tokens: int = 8192
    input_tokens: tuple[tuple[int, int], ...] | None = None   # [lo, hi) prompt-size ranges this pool takes
    prefill: Side | None = None
    decode: Side | None = None
    kv_link_gbps: float | None = None           # None: the calibrated prefill→decode transfer rate
    kv_cache_tokens: int | None = None          # the KV pool per replica in tokens (None: the capacity model's)
    gpu_memory_utilization: float | None = None  # vLLM's share of GPU memory; the KV pool is what it leaves
    engine: str | None = None                   # the serving engine (vllm, sglang, trtllm; None: vllm, what config writes)

    def __post_init__(self) -> None:
        # the engine named even when left out, so a pool and its fleet file's round trip are the same pool
        object.__setattr__(self, "engine", check_engine(self.engine))

    @property
    def split(self) -> bool:
        """True when prefill and decode run on separate replicas."""
        return self.prefill is not None and self.decode is not None


@dataclass(frozen=True)
class Fleet:
    """Pools plus the model they serve by default and the SLO targets the fleet was designed for."""

    pools: tuple[Pool, ...]
    model: str = DEFAULT_MODEL
    slo: Mapping[str, tuple[float, float]] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """The JSON form (``simulate --fleet`` / ``config --fleet`` read it back with ``fleet_from_dict``)."""
        pools = []
        for p in self.pools:
            d = asdict(p)
            d["products"] = list(p.products)
            d["input_tokens"] = None if p.input_tokens is None else [list(r) for r in p.input_tokens]
            for key in ("prefill", "decode", "kv_link_gbps", "input_tokens", "model", "kv_cache_tokens",
                        "gpu_memory_utilization"):
                if d[key] is None:
                    d.pop(key)
            pools.append(d)
        return {"model": self.model, "pools": pools,
                "slo": {k: {"ttft_ms": v[0], "tpot_ms": v[1]} for k, v in self.slo.items()}}


def _side(value: Any, where: str) -> Side | None:
    if value is None:
        return None
    if not isinstance(value, Mapping) or "gpu" not in value or "replicas" not in value:
        raise ValueError(f"{where} must be an object with gpu and replicas, got {short(value)}")
    return Side(str(value["gpu"]), _count(value["replicas"], f"{where}.replicas"),
                None if value.get("tp") is None else whole_number(value["tp"], f"{where}.tp", high=MAX_TP))


def _count(value: Any, where: str) -> int:
    return whole_number(value, where, high=MAX_REPLICAS)


def fleet_from_dict(doc: Mapping[str, Any]) -> Fleet:
    """A Fleet from its JSON form; ValueError naming the bad field."""
    if not isinstance(doc, Mapping) or not isinstance(doc.get("pools"), list) or not doc["pools"]:
        raise ValueError("a fleet file needs a non-empty 'pools' list")
    if len(doc["pools"]) > MAX_POOLS:
        raise ValueError(f"a fleet file has at most {MAX_POOLS} pools, got {len(doc['pools']):,}")
    known = set(Pool.__dataclass_fields__)
    pools = []
    for i, raw in enumerate(doc["pools"]):
        where = f"pools[{i}]"
        if not isinstance(raw, Mapping):
            raise ValueError(f"{where} must be an object, got {short(raw)}")
        extra = sorted(set(map(str, raw)) - known)
        if extra:
            raise ValueError(f"{where} has unknown field(s) {short(', '.join(extra))}; known: {', '.join(sorted(known))}")
        kw = dict(raw)
        kw.setdefault("name", f"pool-{i + 1}")
        kw["name"] = str(kw["name"]) if isinstance(kw["name"], (str, int)) else short(kw["name"])
        products = kw.get("products", [ANY_PRODUCT])
        if isinstance(products, str) or not isinstance(products, list) or not products:
            raise ValueError(f"{where}.products must be a non-empty list of product names")
        kw["products"] = tuple(str(p) for p in products)
        if "replicas" in kw:
            kw["replicas"] = _count(kw["replicas"], f"{where}.replicas")
        if kw.get("tp") is not None:
            kw["tp"] = whole_number(kw["tp"], f"{where}.tp", high=MAX_TP)
        if kw.get("engine") is not None:
            try:
                kw["engine"] = check_engine(kw["engine"] if isinstance(kw["engine"], str) else short(kw["engine"]))
            except ValueError as exc:
                raise ValueError(f"{where}.engine: {exc}") from None
        if kw.get("max_num_seqs") is not None:
            kw["max_num_seqs"] = whole_number(kw["max_num_seqs"], f"{where}.max_num_seqs", high=MAX_NUM_SEQS)
        if "max_num_batched_tokens" in kw:
            kw["max_num_batched_tokens"] = whole_number(kw["max_num_batched_tokens"], f"{where}.max_num_batched_tokens",
                                                        high=MAX_BATCHED_TOKENS)
        if kw.get("kv_link_gbps") is not None:
            kw["kv_link_gbps"] = finite_number(kw["kv_link_gbps"], f"{where}.kv_link_gbps")
        if kw.get("input_tokens") is not None:
            if not isinstance(kw["input_tokens"], list):
                raise ValueError(f"{where}.input_tokens must be a list of [lo, hi) pairs, got {short(kw['input_tokens'])}")
            ranges = []
            for r in kw["input_tokens"]:
                if not (isinstance(r, (list, tuple)) and len(r) == 2):
                    raise ValueError(f"{where}.input_tokens must be [lo, hi) pairs with 0 ≤ lo < hi, got {short(r)}")
                lo = whole_number(r[0], f"{where}.input_tokens", low=0, high=MAX_PROMPT_TOKENS)
                hi = whole_number(r[1], f"{where}.input_tokens", low=0, high=MAX_PROMPT_TOKENS)
                if lo >= hi:
                    raise ValueError(f"{where}.input_tokens must be [lo, hi) pairs with 0 ≤ lo < hi, got {short(r)}")
                ranges.append((lo, hi))
            kw["input_tokens"] = tuple(ranges)
        kw["prefill"] = _side(kw.get("prefill"), f"{where}.prefill")
        kw["decode"] = _side(kw.get("decode"), f"{where}.decode")
        if (kw["prefill"] is None) != (kw["decode"] is None):
            raise ValueError(f"{where}: a split pool needs both a prefill and a decode side")
        if kw.get("scheduler", "fcfs") not in SCHEDULERS:
            raise ValueError(f"{where}.scheduler must be one of {SCHEDULERS}, got {short(kw['scheduler'])}")
        if kw.get("router", "least_tokens") not in ROUTERS:
            raise ValueError(f"{where}.router must be one of {ROUTERS}, got {short(kw['router'])}")
        get_gpu(kw.get("gpu", "h100-sxm"))  # an unknown GPU fails here, with the catalogue's message
        pools.append(Pool(**kw))
    names = [p.name for p in pools]
    if len(set(names)) != len(names):
        raise ValueError(f"pool names must be unique, got {short(names)}")
    slo = {}
    targets_of = doc.get("slo") or {}
    if not isinstance(targets_of, Mapping):
        raise ValueError(f"slo must be an object of products, got {short(targets_of)}")
    for product, targets in targets_of.items():
        where = f"slo.{short(str(product))}"
        if not isinstance(targets, Mapping) or "ttft_ms" not in targets or "tpot_ms" not in targets:
            raise ValueError(f"{where} must be {{\"ttft_ms\": N, \"tpot_ms\": M}}, got {short(targets)}")
        slo[str(product)] = (finite_number(targets["ttft_ms"], f"{where}.ttft_ms"),
                             finite_number(targets["tpot_ms"], f"{where}.tpot_ms"))
    return Fleet(tuple(pools), str(doc.get("model") or DEFAULT_MODEL), slo)


def load_fleet(path: str | Path) -> Fleet:
    """A fleet file (JSON, or YAML when it ends in .yaml/.yml)."""
    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"fleet file {str(p)!r} not found")
    # bounded: size, integers, nesting and YAML aliases are checked before anything is built (ingest.documents)
    data = read_capped(p, "fleet file")
    name = f"fleet file {p.name!r}"
    if p.suffix.lower() in (".yaml", ".yml"):
        try:
            text = data.decode("utf-8-sig")
        except UnicodeDecodeError:
            raise ValueError(f"{name}: not UTF-8 text") from None
        doc = parse_yaml(text, name)
    else:
        doc = parse_json(data, name)
    try:
        return fleet_from_dict(doc)
    except (TypeError, OverflowError, RecursionError) as exc:   # a shape no check above foresaw: still one line
        raise ValueError(f"{name}: {type(exc).__name__}: {short(str(exc))}") from None


# --- deployments and cost --------------------------------------------------------------------------------
def pool_deployment(pool: Pool, model: str, gpu: str | None = None, tp: int | None = None) -> Deployment:
    """The replica a pool (or one side of it) runs: its model on ``gpu`` at ``tp`` (default: smallest that fits)."""
    m = pool.model or model
    g = gpu or pool.gpu
    t = tp if tp is not None else pool.tp
    if t is None:
        t = smallest_tp(m, g, pool.precision)
    dep = Deployment(m, g, pool.precision, None, t, engine=pool.engine)
    return with_kv_pool(dep, KVPool(pool.kv_cache_tokens, pool.gpu_memory_utilization))


def pool_gpus(pool: Pool, model: str) -> dict[str, int]:
    """GPUs by type a pool holds."""
    out: dict[str, int] = {}
    if pool.split:
        for side in (pool.prefill, pool.decode):
            dep = pool_deployment(pool, model, side.gpu, side.tp)  # type: ignore[union-attr]
            out[dep.gpu.id] = out.get(dep.gpu.id, 0) + dep.tp * side.replicas  # type: ignore[union-attr]
    else:
        dep = pool_deployment(pool, model)
        out[dep.gpu.id] = dep.tp * pool.replicas
    return out


def fleet_gpus(fleet: Fleet) -> dict[str, int]:
    """GPUs by type over the whole fleet."""
    out: dict[str, int] = {}
    for p in fleet.pools:
        for g, n in pool_gpus(p, fleet.model).items():
            out[g] = out.get(g, 0) + n
    return dict(sorted(out.items()))


def cost_per_hour(gpus: Mapping[str, int], prices: Mapping[str, float]) -> float:
    """US dollars per hour of ``gpus`` at ``prices`` (per GPU-hour)."""
    missing = sorted(set(gpus) - set(prices))
    if missing:
        raise ValueError(f"no price for GPU(s) {', '.join(missing)}: give --gpu-hour-usd GPU=PRICE")
    return float(sum(n * float(prices[g]) for g, n in gpus.items()))


# --- requests ------------------------------------------------------------------------------------------
def fleet_requests(frame: pd.DataFrame, whatif: WhatIf = WhatIf(), seed: int = 0,
                   rate_rps: float | None = None) -> Requests:
    """The log's requests with arrival times: its own timestamps (seed 0) or a re-seeded replay of them.

    A seed other than 0 permutes, within each product and each 10-minute block, the order of the requests and
    of the gaps between them: the same rate per block, the same burstiness, another realisation. A log without
    timestamps gets Poisson arrivals at ``rate_rps`` (default: the rate the workload reports). The requests carry
    their prompt blocks (the log's hashes or sessions), so each pool's replicas keep prefix caches, as the headline's
    replay (``sizing.size_fleet``) and ``simulate`` do: one log, one answer.
    """
    req = requests_from_frame(frame, whatif)
    n = len(req)
    if n == 0:
        raise ValueError("no requests to simulate")
    product = req.product if req.product is not None else np.full(n, "all", dtype=object)
    rng = np.random.default_rng(seed)
    if req.arrival_s is None:
        rate = rate_rps or Workload.from_frame(frame).rate_rps * whatif.traffic_multiplier
        arrival = np.cumsum(rng.exponential(1.0 / rate, size=n))
        arrival -= arrival[0]
        return replace(req, arrival_s=arrival, product=product)
    arrival = np.asarray(req.arrival_s, dtype=np.float64)
    return reseeded(replace(req, arrival_s=arrival, product=product), seed)


def reseeded(req: Requests, seed: int) -> Requests:
    """Another realisation of ``req`` (with arrivals and products): seed 0 is ``req`` itself; another seed permutes,
    within each product and each 10-minute block, the order of the requests and of the gaps between them."""
    if seed == 0:
        return req
    n = len(req)
    rng = np.random.default_rng(seed)
    product = np.asarray(req.product, dtype=object)
    arrival = np.asarray(req.arrival_s, dtype=np.float64)
    new_arrival = arrival.copy()
    order = np.arange(n)
    frame_idx = pd.DataFrame({"product": product, "block": np.floor(arrival / SEED_BLOCK_S), "i": order})
    for _, idx in frame_idx.groupby(["product", "block"], sort=False)["i"]:
        ids = idx.to_numpy()
        if ids.size < 2:
            continue
        t = arrival[ids]
        gaps = np.diff(t)
        new_t = t[0] + np.concatenate([[0.0], np.cumsum(rng.permutation(gaps))])
        new_arrival[ids] = new_t
        order[ids] = ids[rng.permutation(ids.size)]  # which request arrives at each of the block's times
    sort = np.argsort(new_arrival, kind="stable")
    return replace(req.take(order[sort]), arrival_s=new_arrival[sort], product=product[order[sort]])


def subset(req: Requests, mask: np.ndarray) -> Requests:
    """The requests where ``mask`` holds (arrival order kept)."""
    return req.take(mask)


def route(req: Requests, pools: Sequence[Pool]) -> np.ndarray:
    """Index of the pool each request goes to (by product, then prompt size); ValueError if a product has none."""
    product = np.asarray(req.product if req.product is not None else np.full(len(req), "all"), dtype=object)
    target = np.full(len(req), -1, dtype=np.int64)
    named = {p for pool in pools for p in pool.products if p != ANY_PRODUCT}
    for i, pool in enumerate(pools):
        if ANY_PRODUCT in pool.products:
            mine = ~np.isin(product, list(named)) | np.isin(product, list(pool.products))
        else:
            mine = np.isin(product, list(pool.products))
        if pool.input_tokens is not None:
            size_ok = np.zeros(len(req), dtype=bool)
            for lo, hi in pool.input_tokens:
                size_ok |= (req.input_tokens >= lo) & (req.input_tokens < hi)
            mine &= size_ok
        target[(target < 0) & mine] = i
    if (target < 0).any():
        lost = pd.Series(product[target < 0]).value_counts()
        raise ValueError("no pool serves product(s) " + ", ".join(f"{p!r} ({n} requests)" for p, n in lost.items())
                         + ": add them to a pool's products (or use \"*\")")
    return target


def route_frame(frame: pd.DataFrame, pools: Sequence[Pool]) -> np.ndarray:
    """Index of the pool each row of a canonical frame goes to (the frame's own row order)."""
    product = frame["product"].astype(str).to_numpy(dtype=object) if "product" in frame.columns else None
    inp = frame["input_tokens"].to_numpy(dtype=np.int64)
    zeros = np.zeros(inp.size, dtype=np.int64)
    return route(Requests(inp, zeros, zeros, None, product), pools)


# --- simulation ----------------------------------------------------------------------------------------
@dataclass
class PoolResult:
    """One pool's replay: per-request frame, saturation, and what it was."""

    pool: Pool
    requests: pd.DataFrame
    saturated: bool
    gpus: dict[str, int]
    notes: list[str] = field(default_factory=list)
    busy: float = float("nan")   # mean share of time its replicas were stepping (both sides of a split pool)


@dataclass
class FleetResult:
    """A fleet's replay: every request with its pool, per pool results, per product outcomes."""

    fleet: Fleet
    requests: pd.DataFrame
    pools: list[PoolResult]
    products: dict[str, dict[str, Any]]
    gpus: dict[str, int]

    @property
    def saturated(self) -> bool:
        """True when any pool's queue grows without bound."""
        return any(p.saturated for p in self.pools)

    @property
    def meets(self) -> bool:
        """Every product within its class and no pool saturated."""
        return not self.saturated and products_meet(self.products)


def _with_targets(req: Requests, classes: Mapping[str, SloClass], default_ms: float) -> Requests:
    return replace(req, ttft_target_ms=ttft_targets_ms(req.product, classes, default_ms))


def simulate_pool(pool: Pool, req: Requests, model: str, classes: Mapping[str, SloClass], seed: int = 0) -> PoolResult:
    """Replay one pool's requests (trace arrivals) on its colocated replicas, or on its prefill then decode side.

    Requests beyond the model's context window are refused, not replayed, as ``plan``'s sizing refuses them
    (``serving.products.beyond_context``): an engine turns them away at once, so they load no replica; the pool's
    notes say how many, of which products."""
    strict_ttft = min((c.ttft_ms for p, c in classes.items()), default=1000.0)
    strict_tpot = min((c.tpot_ms for p, c in classes.items()), default=50.0)
    first = (pool_deployment(pool, model) if not pool.split
             else pool_deployment(pool, model, pool.prefill.gpu, pool.prefill.tp))  # type: ignore[union-attr]
    over = beyond_context(req, first)
    refused = [refused_words(req, first, over, "the pool's")] if over.any() else []
    if over.all():
        return PoolResult(pool, _NOTHING_SERVED.copy(), False, pool_gpus(pool, model), refused, 0.0)
    if over.any():
        req = req.take(np.flatnonzero(~over))
    req = _with_targets(req, classes, strict_ttft)
    common = dict(arrivals="trace", seed=seed, router=pool.router, max_num_batched_tokens=pool.max_num_batched_tokens,
                  ttft_slo_ms=strict_ttft, tpot_slo_ms=strict_tpot)
    if not pool.split:
        res = simulate(req, first, replicas=pool.replicas, scheduler=pool.scheduler, max_num_seqs=pool.max_num_seqs,
                       **common)
        frame = res.requests
        return PoolResult(pool, frame, queue_grows(frame), pool_gpus(pool, model), refused + list(res.notes),
                          _busy(res))
    pre_dep = first
    dec_dep = pool_deployment(pool, model, pool.decode.gpu, pool.decode.tp)    # type: ignore[union-attr]
    one = np.ones(len(req), dtype=np.int64)
    pre = simulate(replace(req, output_tokens=one),
                   pre_dep, replicas=pool.prefill.replicas, scheduler=pool.scheduler,  # type: ignore[union-attr]
                   max_num_seqs=pool.max_num_seqs, **common)
    p = pre.requests
    link = pool.kv_link_gbps or pre_dep.eff.kv_transfer_gbps
    transfer_s = pre_dep.kv_bytes_per_gpu(req.input_tokens.astype(np.float64)) * pre_dep.tp / (link * 1e9)
    first_s = req.arrival_s + p["ttft_ms"].to_numpy() / 1000.0 + transfer_s  # type: ignore[operator]
    more = req.output_tokens > 1
    frame = p.copy()
    frame["ttft_ms"] = (first_s - req.arrival_s) * 1000.0  # type: ignore[operator]
    frame["output_tokens"] = req.output_tokens
    frame["tpot_ms"] = np.nan
    frame["e2e_ms"] = frame["ttft_ms"]
    saturated = queue_grows(p)
    notes = refused + [f"prefill side: {n}" for n in pre.notes]
    busy = [(_busy(pre), pool.prefill.replicas)]  # type: ignore[union-attr]
    if more.any():
        ids = np.flatnonzero(more)
        order = ids[np.argsort(first_s[ids], kind="stable")]
        dec_req = Requests(req.input_tokens[order] + 1, req.output_tokens[order] - 1, req.input_tokens[order],
                           first_s[order], None if req.product is None else req.product[order])
        dec = simulate(dec_req, dec_dep, replicas=pool.decode.replicas,  # type: ignore[union-attr]
                       max_num_seqs=pool.max_num_seqs, **{**common, "ttft_slo_ms": 1e9})
        d = dec.requests
        e2e_d = d["e2e_ms"].to_numpy()
        frame.loc[order, "tpot_ms"] = e2e_d / (req.output_tokens[order] - 1)
        frame.loc[order, "e2e_ms"] = frame.loc[order, "ttft_ms"].to_numpy() + e2e_d
        saturated = saturated or queue_grows(d)
        notes += [f"decode side: {n}" for n in dec.notes]
        busy.append((_busy(dec), pool.decode.replicas))  # type: ignore[union-attr]
    frame["itl_ms"] = frame["tpot_ms"]
    mean_busy = sum(b * k for b, k in busy) / sum(k for _, k in busy)
    return PoolResult(pool, frame, saturated, pool_gpus(pool, model), notes, mean_busy)


# a pool whose every request is refused (beyond the context window) serves none: its replay is this empty frame
_NOTHING_SERVED = pd.DataFrame({c: pd.Series(dtype=np.float64) for c in (
    "arrival_s", "input_tokens", "output_tokens", "cached_tokens", "queue_ms", "ttft_ms", "tpot_ms", "itl_ms",
    "e2e_ms")} | {"product": pd.Series(dtype=object)})


def queue_grows(requests: pd.DataFrame) -> bool:
    """True when the queue wait keeps growing over the replay: the last fifth's p90 wait is over 4× the first
    fifth's plus 1 s. (Judged on the wait alone: in a short replay window, requests that stream for longer than
    the window pile up in the system without the replicas falling behind.)"""
    q = requests.sort_values("arrival_s")["queue_ms"].to_numpy()
    if q.size < 20:
        return False
    k = max(q.size // 5, 1)
    return bool(np.percentile(q[-k:], 90) > 4.0 * np.percentile(q[:k], 90) + 1000.0)


def _busy(result: Any) -> float:
    u = result.utilization
    return float(u["busy"].mean()) if len(u) else 0.0


def simulate_fleet(requests: Requests, fleet: Fleet, classes: Mapping[str, SloClass], seed: int = 0,
                   progress: Callable[[float], None] | None = None, runner: Runner | None = None,
                   done: dict[Pool, PoolResult] | None = None) -> FleetResult:
    """Route every request to its pool, replay each pool on its own, and judge every product against its class.

    ``runner``: the pools' replays run side by side there (``serving.parallel``: local processes or Dask); None
    runs them here, one after the other. The result is the same either way. ``done``: pools already replayed on
    these requests (with the same pools routing them): taken from there, and the new replays added to it.
    """
    target = route(requests, fleet.pools)
    jobs = [(pool, subset(requests, target == i), fleet.model, classes, seed)
            for i, pool in enumerate(fleet.pools) if (target == i).any() and (done is None or pool not in done)]
    each = None if progress is None else (lambda n: progress(n / len(jobs)))
    fresh = {job[0]: r for job, r in zip(jobs, map_jobs(runner, simulate_pool, jobs, each))}
    if done is not None:
        done.update(fresh)
    known = {**(done or {}), **fresh}
    replays = [known[pool] for i, pool in enumerate(fleet.pools) if (target == i).any()]
    results, frames = [], []
    for r in replays:
        f = r.requests.copy()
        f["pool"] = r.pool.name
        frames.append(f)
        results.append(r)
    frame = pd.concat(frames, ignore_index=True).sort_values("arrival_s", kind="stable").reset_index(drop=True)
    return FleetResult(fleet, frame, results, product_outcomes(frame, classes), fleet_gpus(fleet))


def fleet_document(result: FleetResult, prices: Mapping[str, float] | None = None) -> dict[str, Any]:
    """The ``simulate --fleet`` JSON document: the fleet, GPUs, cost, per-pool and per-product outcomes."""
    pools = []
    for r in result.pools:
        f = r.requests
        tpot = f["tpot_ms"].dropna()
        pools.append({"name": r.pool.name, "requests": len(f), "gpus": r.gpus, "saturated": bool(r.saturated),
                      "ttft_p90_ms": float(f["ttft_ms"].quantile(0.9)),
                      "tpot_p90_ms": float(tpot.quantile(0.9)) if len(tpot) else None, "busy": r.busy,
                      "notes": r.notes})
    doc: dict[str, Any] = {"method": "simulated", "fleet": result.fleet.to_dict(), "gpus": result.gpus,
                           "requests": len(result.requests), "pools": pools, "products": result.products,
                           "saturated": result.saturated, "meets": result.meets}
    if prices is not None:
        try:
            doc["cost_per_hour"] = cost_per_hour(result.gpus, prices)
        except ValueError:
            doc["cost_per_hour"] = None
    return doc
