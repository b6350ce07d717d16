"""Generated products for the mixed-product benchmark: one-mode products of many spreads and shapes, two-mode products.

Written and committed before the mixed rule's thresholds were chosen (issue 31, item 3). Every case is a
function of its parameters and a seed; seeds 0-4 are the tuning set, seeds 5-9 the held-out set.

One-mode kinds (each at the five corner anchors and at five centres that straddle corner borders):
- ``lognormal``: lognormal input and output (sigma 0.2, 0.5, 0.8, 1.2 in log-tokens), correlated by a seeded rho;
- ``clipped_normal``: a load generator's normal lengths clipped to the mean ± 1.67 or 3 sd (cv 7.5 % or 20 %);
  the issue's case, input N(4000, 300) clipped to 3,500-4,500 and output N(1000, 80) clipped to 900-1,100, is one;
- ``uniform``: uniform token counts over [c / f, c * f], f = 2 or 4 on each axis;
- ``log_uniform``: uniform in log-tokens over log c ± a, a = 0.5 or 1.5.

Two-mode kinds (pairs of lognormal modes whose centres sit in different corners, default corner borders):
- ``two_lognormal``: six pairs (RAG + coding agent, autocomplete + chat, chat + RAG, chat + reasoning,
  RAG + reasoning, autocomplete + RAG), sigma 0.3, 0.5 or 0.7, minor share 0.2, 0.35 or 0.5, and the modes at
  the anchors or pulled to 0.6 of their distance around the midpoint (pairs that then share a corner are left out);
- ``two_clipped``: the same pairs with clipped-normal modes (cv 10 %, clipped at ± 2 sd), minor share 0.2 or 0.5.

Among eight: each seed also makes logs of eight products, two of them two-mode, six one-mode, drawn by the seed.
"""
from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from shapeviz.analyses.shapes import corner_of

TUNING_SEEDS: tuple[int, ...] = (0, 1, 2, 3, 4)
HELD_OUT_SEEDS: tuple[int, ...] = (5, 6, 7, 8, 9)

# Typical p50 (input, output) tokens of a product living in each corner (default corner borders 4096 / 1024 / 48).
ANCHORS: dict[str, tuple[float, float]] = {
    "chat": (800.0, 250.0),
    "rag": (8000.0, 250.0),
    "reasoning": (600.0, 3000.0),
    "agent": (20000.0, 2000.0),
    "autocomplete": (1500.0, 16.0),
}
# Centres on a corner border (or on two): one mode here straddles corners.
BORDERS: dict[str, tuple[float, float]] = {
    "chat|rag": (4096.0, 300.0),
    "chat|reasoning": (700.0, 1024.0),
    "rag|agent": (10000.0, 1024.0),
    "four corners": (4096.0, 1024.0),
    "chat|autocomplete": (1000.0, 48.0),
}
CENTRES: dict[str, tuple[float, float]] = ANCHORS | BORDERS
PAIRS: tuple[tuple[str, str], ...] = (
    ("rag", "agent"), ("autocomplete", "chat"), ("chat", "rag"), ("chat", "reasoning"), ("rag", "reasoning"),
    ("autocomplete", "rag"),
)


@dataclass(frozen=True)
class Case:
    """One generated product: its kind, parameters, seed and whether it truly has two modes."""

    kind: str
    params: dict[str, object]
    seed: int
    two_modes: bool
    separation: float | None = None  # two-mode: distance of the centres in log-tokens / sigma
    bimodal: bool = False            # two-mode: the mixture's true density has two peaks (see ``density_bimodal``)
    n: int = 0
    input_tokens: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64), repr=False)
    output_tokens: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64), repr=False)

    @property
    def label(self) -> str:
        """Readable id, e.g. ``lognormal centre=rag sigma=0.5 seed=3``."""
        return " ".join([self.kind, *(f"{k}={v}" for k, v in self.params.items()), f"seed={self.seed}"])


def _tokens(x: np.ndarray) -> np.ndarray:
    return np.maximum(np.rint(x), 1).astype(np.int64)


def _size(rng: np.random.Generator) -> int:
    # products of 1,000 to 20,000 requests (log-uniform)
    return int(np.exp(rng.uniform(np.log(1000), np.log(20000))))


def _lognormal_mode(rng: np.random.Generator, n: int, centre: tuple[float, float], sigma: float,
                    rho: float) -> tuple[np.ndarray, np.ndarray]:
    z1 = rng.standard_normal(n)
    z2 = rho * z1 + np.sqrt(1 - rho * rho) * rng.standard_normal(n)
    return (_tokens(np.exp(np.log(centre[0]) + sigma * z1)), _tokens(np.exp(np.log(centre[1]) + sigma * z2)))


def _clipped_mode(rng: np.random.Generator, n: int, centre: tuple[float, float], cv: float,
                  clip_sd: float) -> tuple[np.ndarray, np.ndarray]:
    out = []
    for c in centre:
        sd = cv * c
        out.append(_tokens(np.clip(rng.normal(c, sd, n), max(c - clip_sd * sd, 1), c + clip_sd * sd)))
    return out[0], out[1]


def one_mode_cases(seed: int) -> Iterator[Case]:
    """The one-mode products of one seed (each drawn from its own stream, so cases do not depend on each other)."""
    i = 0

    def rng() -> np.random.Generator:
        nonlocal i
        i += 1
        return np.random.default_rng([seed, 1, i])

    for name, c in CENTRES.items():
        for sigma in (0.2, 0.5, 0.8, 1.2):
            r = rng()
            n, rho = _size(r), float(r.uniform(-0.2, 0.6))
            inp, out = _lognormal_mode(r, n, c, sigma, rho)
            yield Case("lognormal", {"centre": name, "sigma": sigma}, seed, False, None, False, n, inp, out)
        for cv in (0.075, 0.2):
            for clip_sd in (1.67, 3.0):
                r = rng()
                n = _size(r)
                inp, out = _clipped_mode(r, n, c, cv, clip_sd)
                yield Case("clipped_normal", {"centre": name, "cv": cv, "clip_sd": clip_sd}, seed, False, None, False, n,
                           inp, out)
        for f in (2.0, 4.0):
            r = rng()
            n = _size(r)
            inp, out = (_tokens(r.uniform(v / f, v * f, n)) for v in c)
            yield Case("uniform", {"centre": name, "f": f}, seed, False, None, False, n, inp, out)
        for a in (0.5, 1.5):
            r = rng()
            n = _size(r)
            inp, out = (_tokens(np.exp(r.uniform(np.log(v) - a, np.log(v) + a, n))) for v in c)
            yield Case("log_uniform", {"centre": name, "a": a}, seed, False, None, False, n, inp, out)
    # the load generator: N(4000, 300) clipped to 3,500-4,500 in, N(1000, 80) clipped to 900-1,100 out
    r = rng()
    n = _size(r)
    inp = _tokens(np.clip(r.normal(4000, 300, n), 3500, 4500))
    out = _tokens(np.clip(r.normal(1000, 80, n), 900, 1100))
    yield Case("clipped_normal", {"centre": "issue 31 load generator"}, seed, False, None, False, n, inp, out)


def _pair_centres(a: str, b: str, pull: float) -> tuple[np.ndarray, np.ndarray]:
    la, lb = np.log(ANCHORS[a]), np.log(ANCHORS[b])
    mid = (la + lb) / 2
    return mid + pull * (la - mid), mid + pull * (lb - mid)


def density_bimodal(delta: np.ndarray, sigma: float, rho: float, minor: float) -> bool:
    """Whether a mixture of two lognormal modes (same sigma and rho, centres ``delta`` apart in log-tokens) has two
    peaks: along the line through the centres it is (1 - minor) N(0, 1) + minor N(d, 1), d their Mahalanobis distance.

    Added after the first look at the tuning seeds (the cases themselves are unchanged): centres 3 sigma apart
    with a 20 % minor mode make one peak and a shoulder, which no test of modes should be asked to call two.
    """
    cov = sigma * sigma * np.array([[1.0, rho], [rho, 1.0]])
    d = float(np.sqrt(delta @ np.linalg.solve(cov, delta)))
    t = np.linspace(-4.0, d + 4.0, 4001)
    f = (1 - minor) * np.exp(-0.5 * t * t) + minor * np.exp(-0.5 * (t - d) ** 2)
    peaks = np.flatnonzero((f[1:-1] > f[:-2]) & (f[1:-1] > f[2:]))
    return len(peaks) >= 2


def two_mode_cases(seed: int) -> Iterator[Case]:
    """The two-mode products of one seed: only pairs whose mode centres sit in different corners."""
    i = 0

    def rng() -> np.random.Generator:
        nonlocal i
        i += 1
        return np.random.default_rng([seed, 2, i])

    for a, b in PAIRS:
        for pull in (1.0, 0.6):
            ca, cb = _pair_centres(a, b, pull)
            if corner_of(*np.exp(ca)) == corner_of(*np.exp(cb)):
                continue
            distance = float(np.linalg.norm(ca - cb))
            for sigma in (0.3, 0.5, 0.7):
                for minor in (0.2, 0.35, 0.5):
                    r = rng()
                    n = _size(r)
                    n_b = int(round(minor * n))
                    rho = float(r.uniform(-0.2, 0.6))
                    ia, oa = _lognormal_mode(r, n - n_b, tuple(np.exp(ca)), sigma, rho)
                    ib, ob = _lognormal_mode(r, n_b, tuple(np.exp(cb)), sigma, rho)
                    yield Case("two_lognormal", {"pair": f"{a}+{b}", "pull": pull, "sigma": sigma, "minor": minor,
                                                 "rho": round(rho, 3)},
                               seed, True, distance / sigma, density_bimodal(ca - cb, sigma, rho, minor), n,
                               np.concatenate([ia, ib]), np.concatenate([oa, ob]))
        ca, cb = _pair_centres(a, b, 1.0)
        for minor in (0.2, 0.5):
            r = rng()
            n = _size(r)
            n_b = int(round(minor * n))
            ia, oa = _clipped_mode(r, n - n_b, tuple(np.exp(ca)), 0.1, 2.0)
            ib, ob = _clipped_mode(r, n_b, tuple(np.exp(cb)), 0.1, 2.0)
            yield Case("two_clipped", {"pair": f"{a}+{b}", "minor": minor}, seed, True,
                       float(np.linalg.norm(ca - cb)) / 0.1, True, n, np.concatenate([ia, ib]), np.concatenate([oa, ob]))


def eight_product_logs(seed: int, logs: int = 4) -> Iterator[tuple[pd.DataFrame, list[Case]]]:
    """Logs of eight products (two two-mode, six one-mode), drawn by the seed from that seed's cases.

    Each product keeps at most 5,000 requests so a log stays small; its name is its index and kind.
    """
    ones, twos = list(one_mode_cases(seed)), list(two_mode_cases(seed))
    r = np.random.default_rng([seed, 8])
    for _ in range(logs):
        picked = [twos[j] for j in r.choice(len(twos), 2, replace=False)]
        picked += [ones[j] for j in r.choice(len(ones), 6, replace=False)]
        parts, cases = [], []
        for j, case in enumerate(picked):
            keep = min(case.n, 5000)
            take = np.sort(r.choice(case.n, keep, replace=False))
            name = f"p{j}-{case.kind}"
            parts.append(pd.DataFrame({"product": name, "input_tokens": case.input_tokens[take],
                                       "output_tokens": case.output_tokens[take]}))
            cases.append(case)
        frame = pd.concat(parts, ignore_index=True)
        frame["product"] = frame["product"].astype("category")
        yield frame, cases
