"""The planner's rules (PRODUCT.md): from the shape of a log to the levers a capacity meeting can pull.

A rule is a small function ``rule(facts) -> list[Recommendation]``; ``RULES`` lists them in the order a planner
reads them, and ``recommend`` runs them all, keeps the strongest recommendation of each (lever, scope) and
orders the result by the share of the log's GPU-time each one touches. The facts are the shape profile, the
clusters with their mixed flags when computed, and what other analyses know: the prefix-cache hit ratio and
which products are agents (sessions whose context grows turn after turn).

The rules, as a planner says them:
- Most GPU-time in prefill (long in, short out): buy prefill capacity, prefix caching and trim the input;
  not another decode kernel. (p50 6k in / 150 out.)
- Most GPU-time in decode (short in, long out): buy decode bandwidth and a stable decode batch; watch TPOT.
  (p50 800 in / 2.5k out.) Output tokens are then the bill: trim output, and always for reasoning.
- Neither phase dominates: chunked prefill, so long prompts stop stalling the decode stream.
- Products in different corners on one pool: split pools, or at least priority queues; when the mixed mass is
  large (``disaggregate_mass``), separate prefill and decode pools.
- A product with two modes or more (mixed inside itself): priority queues, and chunked prefill when its modes lean
  on different phases.
- Agents (the long-in/long-out corner, or products known to be agents): KV grows each round, and shared system
  prompts and tool schemas make prefix caching pay.
"""
from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, dataclass, field, replace

from shapeviz.analyses.clusters import ClusterResult, CornerMass, MixedFlag
from shapeviz.analyses.shapes import OVERALL, ShapeProfile, ShapeStats

LEVERS: tuple[str, ...] = (
    "prefix_cache", "trim_input", "trim_output", "decode_bandwidth", "stable_decode_batch",
    "prefill_capacity", "chunked_prefill", "split_pools", "priority_queues", "disaggregate",
)
METRICS: tuple[str, ...] = ("ttft", "tpot")

# How a planner says each lever, for the UI and the report (plain words first, numbers second).
LEVER_LABELS: dict[str, str] = {
    "prefix_cache": "Turn on prefix caching",
    "trim_input": "Trim the input",
    "trim_output": "Trim the output",
    "decode_bandwidth": "Buy decode bandwidth",
    "stable_decode_batch": "Keep a stable decode batch",
    "prefill_capacity": "Buy prefill capacity",
    "chunked_prefill": "Use chunked prefill",
    "split_pools": "Split the pools",
    "priority_queues": "Queue by shape",
    "disaggregate": "Disaggregate prefill and decode",
}


@dataclass(frozen=True)
class Recommendation:
    """One lever for one scope, the metric it protects, and the one-sentence reason with its numbers."""

    lever: str      # an id of LEVERS
    metric: str     # "ttft" or "tpot"
    scope: str      # "overall", a product name, or a model pool name
    reason: str
    weight: float = 0.0  # share of the log's GPU-time the lever touches: the ordering key

    def __post_init__(self) -> None:
        if self.lever not in LEVERS:
            raise ValueError(f"unknown lever {self.lever!r}; use one of {', '.join(LEVERS)}")
        if self.metric not in METRICS:
            raise ValueError(f"unknown metric {self.metric!r}; use 'ttft' or 'tpot'")

    def to_dict(self) -> dict[str, object]:
        """Plain JSON-ready dict."""
        return asdict(self)


@dataclass(frozen=True)
class Thresholds:
    """The judgement calls of the rules, in one place the UI can expose."""

    # Share of a scope's requests or GPU-time that counts: the same 15% as a material cluster share.
    material_share: float = 0.15
    # GPU-time outside a mixed pool's heaviest corner from which disaggregated prefill/decode pools pencil out:
    # below a quarter, colocated scheduling with priorities absorbs the minority; above it, the minority's
    # phase is big enough to fill its own pool.
    disaggregate_mass: float = 0.25
    # Share of a scope's GPU-time in the reasoning corner from which output tokens are called the cost line.
    reasoning_gpu_share: float = 0.30
    # A prefix-hit potential (measured, simulated or estimated) below this does not pay for a prefix cache.
    min_prefix_hit: float = 0.05

    def __post_init__(self) -> None:
        for name, value in asdict(self).items():
            if not (0.0 <= value <= 1.0):
                raise ValueError(f"threshold {name}={value!r} must be a fraction in [0, 1]")


@dataclass(frozen=True)
class Facts:
    """What the rules read: the profile, the clusters if computed, and what other analyses know."""

    profile: ShapeProfile
    clusters: ClusterResult | None = None
    prefix_hit_ratio: float | Mapping[str, float] | None = None  # overall, or per product (key "overall" too)
    agent_products: frozenset[str] = field(default_factory=frozenset)
    thresholds: Thresholds = field(default_factory=Thresholds)
    prefix_method: str | None = None   # how the prefix-hit ratio was found (PrefixReuse.method): its wording

    def scopes(self) -> list[ShapeStats]:
        """Overall, then each product when there are several (one product is the overall scope again)."""
        products = list(self.profile.products.values())
        return [self.profile.overall, *products] if len(products) > 1 else [self.profile.overall]

    def prefix_hit(self, scope: str) -> float | None:
        """The known prefix-hit ratio of a scope, falling back to the overall one."""
        if self.prefix_hit_ratio is None or isinstance(self.prefix_hit_ratio, (int, float)):
            return None if self.prefix_hit_ratio is None else float(self.prefix_hit_ratio)
        value = self.prefix_hit_ratio.get(scope, self.prefix_hit_ratio.get(OVERALL))
        return None if value is None else float(value)


Rule = Callable[[Facts], list[Recommendation]]


def _pct(x: float) -> str:
    return f"{x:.0%}"


def _who(stats: ShapeStats) -> str:
    return "The log" if stats.scope == OVERALL else f"Product '{stats.scope}'"


def _shape_text(stats: ShapeStats) -> str:
    return f"p50 {stats.input['p50']:,.0f} in / {stats.output['p50']:,.0f} out"


# How a prefix-hit figure is named, by how it was found: only a figure the log reports is "measured".
PREFIX_WORDING = {
    "reported_cached_tokens": "a measured prefix-hit ratio of {} (the cached tokens the log reports)",
    "block_hashes": "a prefix-hit potential of {} (simulated from the log's block hashes)",
    "session_estimate": "an estimated prefix-hit potential of {} (each turn of a session assumed to reuse the last)",
}


def _prefix_clause(hit: float | None, method: str | None = None) -> str:
    if hit is None:
        return ""
    return ", with " + PREFIX_WORDING.get(method or "", "a prefix-hit potential of {}").format(_pct(hit))


def prefill_heavy(facts: Facts) -> list[Recommendation]:
    """Prefill holds most GPU-time: prefill capacity, prefix cache, trim input (TTFT first)."""
    recs = []
    for s in facts.scopes():
        if s.phase != "prefill":
            continue
        weight = s.share_of_gpu * s.prefill_gpu_share
        head = f"{_who(s)} ({_shape_text(s)}) spends {_pct(s.prefill_gpu_share)} of its GPU-time in prefill"
        recs.append(Recommendation("prefill_capacity", "ttft", s.scope,
                                   f"{head}: size for prefill and a TTFT SLO, not for another decode kernel.", weight))
        hit = facts.prefix_hit(s.scope)
        if hit is None or hit >= facts.thresholds.min_prefix_hit:
            recs.append(Recommendation("prefix_cache", "ttft", s.scope,
                                       f"{head}{_prefix_clause(hit, facts.prefix_method)}: every prompt token "
                                       "served from a prefix cache is prefill not computed.", weight))
        recs.append(Recommendation("trim_input", "ttft", s.scope,
                                   f"{head}: input tokens are the bill, so better retrieval, summarisation or "
                                   f"shorter prompts cut TTFT and GPUs (input p90 {s.input['p90']:,.0f}).", weight))
    return recs


def decode_heavy(facts: Facts) -> list[Recommendation]:
    """Decode holds most GPU-time: decode bandwidth and a stable decode batch (TPOT first)."""
    recs = []
    for s in facts.scopes():
        if s.phase != "decode":
            continue
        decode_share = 1.0 - s.prefill_gpu_share
        weight = s.share_of_gpu * decode_share
        head = f"{_who(s)} ({_shape_text(s)}) spends {_pct(decode_share)} of its GPU-time in decode"
        recs.append(Recommendation("decode_bandwidth", "tpot", s.scope,
                                   f"{head}: buy memory bandwidth (quantisation, speculative decoding, replicas "
                                   "tuned for batch) and watch TPOT, not only the first token.", weight))
        recs.append(Recommendation("stable_decode_batch", "tpot", s.scope,
                                   f"{head}: keep the decode batch large and steady (output p90 "
                                   f"{s.output['p90']:,.0f} tokens hold KV for long) so TPOT stays flat.", weight))
    return recs


def output_cost_line(facts: Facts) -> list[Recommendation]:
    """Output tokens are the cost line (decode-heavy or reasoning-heavy): trim output."""
    recs = []
    for s in facts.scopes():
        reasoning = s.gpu_share["reasoning"]
        heavy_reasoning = reasoning >= facts.thresholds.reasoning_gpu_share
        if s.phase != "decode" and not heavy_reasoning:
            continue
        decode_share = 1.0 - s.prefill_gpu_share
        why = (f"the reasoning corner holds {_pct(reasoning)} of its GPU-time" if heavy_reasoning
               else f"decode holds {_pct(decode_share)} of its GPU-time")
        recs.append(Recommendation(
            "trim_output", "tpot", s.scope,
            f"{_who(s)}: {why} (output p50 {s.output['p50']:,.0f}, p90 {s.output['p90']:,.0f}), so output tokens are "
            "the dominant cost line: tighter prompts, stopping criteria and output budgets shrink the bill.",
            s.share_of_gpu * max(decode_share, reasoning)))
    return recs


def balanced_phases(facts: Facts) -> list[Recommendation]:
    """Neither phase dominates: chunked prefill keeps long prompts from stalling the decode stream."""
    recs = []
    for s in facts.scopes():
        if s.phase != "balanced":
            continue
        p = s.prefill_gpu_share
        recs.append(Recommendation(
            "chunked_prefill", "tpot", s.scope,
            f"{_who(s)} ({_shape_text(s)}) splits its GPU-time {_pct(p)} prefill / {_pct(1 - p)} decode on the same "
            "replicas: chunked prefill keeps long prompts from stalling the decode stream, so TTFT and TPOT both hold.",
            s.share_of_gpu * min(p, 1 - p)))
    return recs


def agents(facts: Facts) -> list[Recommendation]:
    """Agents (long-in/long-out corner, or known agent products): KV grows, prefix caching pays."""
    recs = []
    unknown = sorted(set(facts.agent_products) - set(facts.profile.products))
    if unknown:
        raise ValueError(f"agent product(s) {', '.join(map(repr, unknown))} not in the log; "
                         f"known products: {', '.join(map(repr, facts.profile.products))}")
    for s in facts.scopes():
        corner_req, corner_gpu = s.request_share["agent"], s.gpu_share["agent"]
        known = s.scope in facts.agent_products
        in_corner = max(corner_req, corner_gpu) >= facts.thresholds.material_share
        if not (known or in_corner):
            continue
        hit = facts.prefix_hit(s.scope)
        if hit is not None and hit < facts.thresholds.min_prefix_hit:
            continue
        why = ("is known to be an agent" if known else
               f"has {_pct(corner_req)} of its requests and {_pct(corner_gpu)} of its GPU-time in the long-in/long-out "
               "corner")
        recs.append(Recommendation(
            "prefix_cache", "ttft", s.scope,
            f"{_who(s)} {why}{_prefix_clause(hit, facts.prefix_method)}: its KV grows every round, so later rounds "
            "are slower and dearer than the first, and the shared system prompts and tool schemas re-prefilled each "
            "time are what a prefix cache saves.",
            s.share_of_gpu * (1.0 if known else max(corner_gpu, corner_req))))
    return recs


def _profile_pool_flag(facts: Facts) -> list[MixedFlag]:
    """Without clusters: the log is a mixed pool when material products have different dominant shapes."""
    m = facts.thresholds.material_share
    material = [s for s in facts.profile.products.values() if max(s.share_of_requests, s.share_of_gpu) >= m]
    homes: dict[str, list[ShapeStats]] = {}
    for s in material:
        homes.setdefault(s.dominant_shape, []).append(s)
    if len(homes) < 2:
        return []
    corners = {
        shape: CornerMass(requests=sum(s.share_of_requests for s in members),
                          gpu_time=sum(s.share_of_gpu for s in members), clusters=[],
                          products=[s.scope for s in members])
        for shape, members in sorted(homes.items(), key=lambda kv: -sum(s.share_of_requests for s in kv[1]))
    }
    gpu = [c.gpu_time for c in corners.values()]
    parts = [f"{' and '.join(repr(p) for p in c.products)} in {shape} ({_pct(c.requests)} of requests, "
             f"{_pct(c.gpu_time)} of GPU-time)" for shape, c in corners.items()]
    reason = f"The whole log (one pool) serves products in {len(corners)} corners: " + "; ".join(parts) + "."
    return [MixedFlag("pool", OVERALL, corners, float(sum(gpu) - max(gpu)), 1.0, reason)]


def _phases(facts: Facts, flag: MixedFlag) -> set[str]:
    """Phases of the clusters a mixed flag names (empty without clusters)."""
    if facts.clusters is None:
        return set()
    return {facts.clusters.cluster(cid).phase for c in flag.corners.values() for cid in c.clusters}


def mixed_pools(facts: Facts) -> list[Recommendation]:
    """Products in different corners on one pool: split pools, priority queues; disaggregate when the mix is large."""
    flags = list(facts.clusters.mixed_pools) if facts.clusters is not None else _profile_pool_flag(facts)
    recs = []
    for flag in flags:
        # the GPU-time of the material products in the pool, as a share of the whole log's
        weight = flag.gpu_share * sum(c.gpu_time for c in flag.corners.values())
        # When one side is decode-bound, the other's prefill bursts make its stream hitch: TPOT is hurt first.
        split_metric = "tpot" if "decode" in _phases(facts, flag) else "ttft"
        summary = ", ".join(f"{shape} {_pct(c.gpu_time)}" for shape, c in flag.corners.items())
        recs.append(Recommendation(
            "split_pools", split_metric, flag.scope,
            f"{flag.reason} Give each corner its own replicas, sized for its phase (GPU-time: {summary}).", weight))
        recs.append(Recommendation(
            "priority_queues", "ttft", flag.scope,
            f"{flag.reason} If the pool stays shared, queue by shape so short prompts are not stuck behind long "
            "prefills.",
            weight * 0.999))  # just after split_pools: the fallback, not the first choice
        if flag.mixed_mass >= facts.thresholds.disaggregate_mass:
            recs.append(Recommendation(
                "disaggregate", "tpot", flag.scope,
                f"{_pct(flag.mixed_mass)} of the pool's GPU-time sits outside its heaviest corner (at least "
                f"{_pct(facts.thresholds.disaggregate_mass)}): colocated scheduling gets ugly, and separate prefill "
                "and decode pools pencil out.", weight * flag.mixed_mass))
    return recs


def mixed_products(facts: Facts) -> list[Recommendation]:
    """A product with two modes or more: priority queues, and chunked prefill when its modes lean on different phases."""
    if facts.clusters is None:
        return []
    recs = []
    for flag in facts.clusters.mixed_products:
        weight = flag.gpu_share
        recs.append(Recommendation(
            "priority_queues", "ttft", flag.scope,
            f"{flag.reason} Queue its requests by mode so the short ones are not stuck behind its long prefills.",
            weight * flag.mixed_mass))
        phases = {m.phase for m in flag.modes}
        if len(phases) > 1:
            recs.append(Recommendation(
                "chunked_prefill", "tpot", flag.scope,
                f"{flag.reason} Its modes lean on different phases ({', '.join(sorted(phases))}): chunked prefill "
                "keeps its long prompts from stalling its own decode stream.", weight * flag.mixed_mass))
    return recs


RULES: tuple[Rule, ...] = (
    mixed_pools, prefill_heavy, decode_heavy, output_cost_line, balanced_phases, agents, mixed_products,
)


def recommend(
    profile: ShapeProfile,
    clusters: ClusterResult | None = None,
    *,
    prefix_hit_ratio: float | Mapping[str, float] | None = None,
    agent_products: Iterable[str] = (),
    thresholds: Thresholds = Thresholds(),
    rules: Iterable[Rule] = RULES,
    prefix_method: str | None = None,
) -> list[Recommendation]:
    """The planner's levers for this log, strongest first (by share of GPU-time touched, then rule order)."""
    if not isinstance(profile, ShapeProfile):
        raise ValueError(f"recommend needs a ShapeProfile from shapeviz.analyses.shapes.shape_profile, "
                         f"got {type(profile).__name__}")
    if isinstance(prefix_hit_ratio, (int, float)) and not (0.0 <= prefix_hit_ratio <= 1.0):
        raise ValueError(f"prefix_hit_ratio={prefix_hit_ratio!r} must be a fraction in [0, 1]")
    if isinstance(agent_products, str):
        agent_products = (agent_products,)  # one name, not its letters
    facts = Facts(profile, clusters, prefix_hit_ratio, frozenset(agent_products), thresholds, prefix_method)
    best: dict[tuple[str, str], tuple[int, Recommendation]] = {}
    position = 0
    for rule in rules:
        for rec in rule(facts):
            key = (rec.lever, rec.scope)
            if key not in best or rec.weight > best[key][1].weight:
                best[key] = (best[key][0] if key in best else position, rec)
            position += 1
    ranked = sorted(best.values(), key=lambda pr: (-round(pr[1].weight, 9), pr[0]))
    return [rec for _, rec in ranked]


def cite_simulated(recommendations: Iterable[Recommendation], citations: Mapping[str, str]) -> list[Recommendation]:
    """The recommendations with the simulated gain of their lever appended to the reason (same order, same weight).

    ``citations`` maps a lever id to one sentence from ``shapeviz.fleet.levers.lever_citations``, e.g.
    "simulated: one pool per corner saves 18 → 12 GPUs at the same p90 SLOs (...)".
    """
    out = []
    for rec in recommendations:
        cite = citations.get(rec.lever)
        out.append(replace(rec, reason=f"{rec.reason} ({cite}.)") if cite else rec)
    return out


def by_lever(recommendations: Iterable[Recommendation]) -> list[tuple[str, list[str]]]:
    """Each lever once, in the order it first comes, with every scope it was recommended for: a section citing a
    lever names it once, not once per product."""
    scopes: dict[str, list[str]] = {}
    for rec in recommendations:
        scopes.setdefault(rec.lever, [])
        if rec.scope not in scopes[rec.lever]:
            scopes[rec.lever].append(rec.scope)
    return list(scopes.items())


def said_before(reason: str, findings: Iterable[str]) -> str:
    """``reason`` without a finding the page has already said (a mixed pool's sentence, shown in its warning, that
    begins the advice to split it and the advice to queue by shape): only the advice is left, marked as following
    from it."""
    for finding in findings:
        finding = finding.strip()
        if finding and reason.startswith(finding) and len(reason) > len(finding):
            rest = reason[len(finding):].strip()
            return "Given the mix above, " + rest[:1].lower() + rest[1:]
    return reason
