"""Batch jobs: the fewest replicas that finish a set of requests by a deadline, found by replaying them.

An offline job (an evaluation, bulk generation, synthetic data) is sized by a deadline, not a latency: every
request is offered at once (or through a fixed number of concurrent clients), the replicas admit what their KV
pools hold as the engine does (``simulator.ADMISSIONS``), and the job is done when its last request is. The answer
is the smallest replica count whose replay finishes within the deadline; one replica fewer is replayed and shown
missing it. ``plan --deadline`` and the Capacity page's batch job both ask ``size_batch_job``.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import pandas as pd

from shapeviz.physics.steps import Deployment, decode_step_s, prefill_time_s
from shapeviz.plain import json_safe
from shapeviz.serving.planner import WhatIf, Workload
from shapeviz.serving.simulator import (
    Requests,
    SimResult,
    requests_from_frame,
    requests_from_workload,
    simulate,
)

MAX_BATCH_REPLICAS = 4096    # the search stops here: a job no fleet this size finishes says so
ESTIMATE_SAMPLE = 2000       # requests replayed on one replica for the first guess
ALONE_CANDIDATES = 8         # requests replayed alone for the job's floor: the longest by the step times' estimate


@dataclass(frozen=True)
class BatchTrial:
    """One replay of the job on ``replicas`` replicas: how long it took, and whether that is within the deadline."""

    replicas: int
    makespan_s: float
    meets: bool
    output_tokens_per_s: float
    preemptions: int

    def to_dict(self) -> dict[str, Any]:
        return json_safe(self.__dict__.copy())


@dataclass
class BatchJob:
    """The fleet a batch job needs: the answer's replay, one replica fewer's, and what it costs."""

    deadline_s: float
    requests: int
    offered: str                         # "all_at_once" or "closed" (``concurrency`` clients)
    concurrency: int | None
    tp: int
    gpu_hour_usd: float
    answer: BatchTrial | None            # None: no fleet up to MAX_BATCH_REPLICAS finishes in time
    one_fewer: BatchTrial | None
    trials: list[BatchTrial] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def replicas(self) -> int | None:
        return None if self.answer is None else self.answer.replicas

    @property
    def meets(self) -> bool:
        return self.answer is not None

    def to_dict(self) -> dict[str, Any]:
        """The ``batch_job`` block of ``plan --deadline --json``."""
        a = self.answer
        gpu_hours = None if a is None else a.replicas * self.tp * a.makespan_s / 3600.0
        return json_safe({
            "deadline_s": self.deadline_s, "requests": self.requests, "offered": self.offered,
            "concurrency": self.concurrency, "meets": self.meets,
            "replicas": self.replicas, "gpus": None if a is None else a.replicas * self.tp,
            "makespan_s": None if a is None else a.makespan_s,
            "output_tokens_per_s": None if a is None else a.output_tokens_per_s,
            "gpu_hours": gpu_hours,
            "cost_usd": None if gpu_hours is None else gpu_hours * self.gpu_hour_usd,
            "cost_usd_if_held_to_deadline": (None if a is None else
                                             a.replicas * self.tp * self.deadline_s / 3600.0 * self.gpu_hour_usd),
            "usd_per_gpu_hour": self.gpu_hour_usd,
            "one_fewer": None if self.one_fewer is None else self.one_fewer.to_dict(),
            "trials": [t.to_dict() for t in self.trials],
            "method": "simulated: every request replayed on the candidate fleet",
            "notes": self.notes,
        })


def duration_words(seconds: float) -> str:
    """A job's length as the page and ``plan --deadline`` say it: hours from two hours up, else minutes."""
    return f"{seconds / 3600:,.2f} h" if seconds >= 7200 else f"{seconds / 60:,.1f} min"


def _replay(req: Requests, dep: Deployment, replicas: int, concurrency: int | None, admission: str | None,
            router: str) -> SimResult:
    if concurrency is None:
        return simulate(req, dep, all_at_once=True, replicas=replicas, admission=admission, router=router)
    return simulate(req, dep, concurrency=concurrency, replicas=replicas, admission=admission, router=router)


def size_batch_job(req: Requests, dep: Deployment, deadline_s: float, *, concurrency: int | None = None,
                   gpu_hour_usd: float | None = None, admission: str | None = None,
                   router: str = "round_robin", max_replicas: int = MAX_BATCH_REPLICAS) -> BatchJob:
    """The fewest replicas of ``dep`` whose replay of ``req`` (all at once, or through ``concurrency`` clients)
    finishes within ``deadline_s`` seconds; one replica fewer is replayed as the proof."""
    if not (math.isfinite(deadline_s) and deadline_s > 0):
        raise ValueError(f"deadline={deadline_s!r} must be a positive number of seconds")
    if concurrency is not None and concurrency < 1:
        raise ValueError(f"concurrency={concurrency!r} must be ≥ 1")
    price = dep.gpu.usd_per_gpu_hour if gpu_hour_usd is None else float(gpu_hour_usd)
    job = BatchJob(float(deadline_s), len(req), "all_at_once" if concurrency is None else "closed", concurrency,
                   dep.tp, price, None, None)
    tried: dict[int, BatchTrial] = {}

    def trial(replicas: int) -> BatchTrial:
        if replicas not in tried:
            res = _replay(req, dep, replicas, concurrency, admission, router)
            s = res.summary()
            tried[replicas] = BatchTrial(replicas, res.makespan_s, res.makespan_s <= deadline_s,
                                         float(s["throughput"]["output_tokens_per_s"]), res.preemptions)
            job.trials.append(tried[replicas])
        return tried[replicas]

    # no fleet finishes before its slowest request would alone: a deadline under that is answered without a search
    # (which grew to MAX_BATCH_REPLICAS replicas, replaying the whole job at each size, to say "none")
    alone = alone_floor(req, dep, admission)
    if alone is not None and alone[0] > deadline_s:
        floor, i = alone
        job.notes.append(
            f"the deadline is shorter than the longest request alone: {int(req.input_tokens[i]):,} in / "
            f"{int(req.output_tokens[i]):,} out tokens take {floor:,.1f} s on an idle replica of {dep.describe()}, so "
            f"no fleet finishes in {deadline_s:,.0f} s; a longer deadline, more GPUs per replica or that request "
            "trimmed")
        return job
    # more replicas than requests (or than clients) sit idle
    cap = min(max_replicas, len(req), max_replicas if concurrency is None else concurrency)
    # first guess: one replica's pace on a sample, all at once, scaled to the whole job
    n = min(len(req), ESTIMATE_SAMPLE)
    sample = req.take(np.arange(n))
    pace = simulate(sample, dep, all_at_once=True, admission=admission).makespan_s / n
    guess = min(max(int(math.ceil(pace * len(req) / deadline_s)), 1), cap)
    # grow until the job finishes in time, then bisect down to the fewest that do
    lo, hi = 0, guess
    while not trial(hi).meets:
        lo = hi
        if hi >= cap:
            job.notes.append(
                f"no fleet of up to {hi} replicas finishes {len(req):,} requests in {deadline_s:,.0f} s"
                + (f": {concurrency} concurrent clients cap the pace; raise --concurrency" if concurrency is not None
                   and hi >= concurrency else "; a longer deadline, a faster deployment or fewer requests"))
            return job
        hi = min(max(int(math.ceil(hi * 1.5)), hi + 1), cap)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if trial(mid).meets:
            hi = mid
        else:
            lo = mid
    job.answer = trial(hi)
    job.one_fewer = trial(hi - 1) if hi > 1 else None
    job.trials.sort(key=lambda t: t.replicas)
    return job


def alone_floor(req: Requests, dep: Deployment, admission: str | None = None) -> tuple[float, int] | None:
    """``(seconds, position)`` of the job's slowest request alone on an idle replica: no fleet finishes the job
    sooner. The few slowest by prefill plus decode at batch one are replayed alone, so the floor is the replay's own.
    None with prompt blocks: there a request's prefix hits in the fleet can make it faster than alone."""
    if len(req) == 0 or req.blocks is not None:
        return None
    n_in = np.asarray(req.input_tokens, dtype=np.float64)
    n_out = np.asarray(req.output_tokens, dtype=np.float64)
    estimate = (prefill_time_s(dep, n_in, np.asarray(req.cached_tokens, dtype=np.float64))
                + n_out * decode_step_s(dep, 1.0, n_in + n_out / 2.0))
    slowest = np.argsort(estimate, kind="stable")[-ALONE_CANDIDATES:]
    took = [simulate(req.take(np.array([i])), dep, all_at_once=True, admission=admission).makespan_s
            for i in slowest]
    k = int(np.argmax(took))
    return float(took[k]), int(slowest[k])


def batch_requests(frame: pd.DataFrame, whatif: WhatIf = WhatIf(), requests: int | None = None,
                   seed: int = 0) -> Requests:
    """A log's batch job: its own requests, or ``requests`` drawn from its shape (seeded); the trims and cache
    share of the what-if apply, its traffic multiplier does not (a batch job has no rate)."""
    whatif = replace(whatif, traffic_multiplier=1.0)
    if requests is None:
        return requests_from_frame(frame, whatif, reuse=False)
    if requests < 1:
        raise ValueError(f"requests={requests!r} must be ≥ 1")
    return requests_from_workload(Workload.from_frame(frame, rate_rps=1.0), requests, seed, whatif)


def log_batch_job(frame: pd.DataFrame, dep: Deployment, deadline_s: float, *, whatif: WhatIf = WhatIf(),
                  requests: int | None = None, concurrency: int | None = None, gpu_hour_usd: float | None = None,
                  admission: str | None = None) -> tuple[Requests, BatchJob]:
    """The batch job of a log (``batch_requests``) sized by ``size_batch_job``: what ``plan LOG --deadline`` and
    the Capacity page's batch job both show."""
    req = batch_requests(frame, whatif, requests)
    return req, size_batch_job(req, dep, deadline_s, concurrency=concurrency, gpu_hour_usd=gpu_hour_usd,
                               admission=admission)
