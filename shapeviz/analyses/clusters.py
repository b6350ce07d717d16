"""The shapes actually present in a log: k-means on the log-token plane, products with several modes, mixed pools.

Requests are clustered on standardised (log input tokens, log output tokens): log, because token counts span
four orders of magnitude and a corner is a region of the log-log plane; standardised, so that neither axis
dominates the distance because it happens to spread wider. The model is fitted on a uniform sample (20k rows by
default) and every row is then labelled with its nearest centre, so a million requests cluster in about a
second. Everything is seeded by ``random_state``: the same frame gives the same clusters, ids and labels.

k is chosen by the best silhouette over k = 2..8 (on a smaller sample, since silhouette is quadratic), or set
by the user. Silhouette cannot choose k = 1, and k-means always splits one wide blob into pieces that may
straddle a corner boundary, so one shape is recognised explicitly. Each split is compared with the same split
of a single Gaussian blob of the sample's own covariance: the gap ``log(W_blob / W_log)`` of their
within-cluster sums of squares (Tibshirani's gap statistic, with a Gaussian rather than uniform reference).
A log of one lognormal shape, however wide, keeps the gap small at every k (measured below 0.1 on the seeded
single-product scenarios), while two shapes sharing a log reach 0.15 and more. The log is one cluster when no
k reaches ``one_shape_gap_threshold``, or when the best silhouette is weak and every centre sits in the same
corner (the split would change no conclusion).

A product is **mixed** when its requests form two modes or more whose centres sit in different corners (issue 31):
not when its cloud merely reaches into several corners, since k-means cuts any wide or clipped cloud into bubbles
on both sides of a border. Each product is tested on its own, against one mode, in log-token space (``split_test``,
on a seeded sample of at most ``MODE_SAMPLE`` requests): a two-component Gaussian mixture must beat one by BIC, its
components must be apart (Ashman's D), and, the measure that decides, the product's own points projected on the
axis that parts the components must dip between them (a valley below ``DEFAULT_MODE_VALLEY`` of the lower peak).
Each side must hold ``material_share`` of the product's requests or GPU-time; each side is then tested again
(at most four modes). Modes in one corner are named in a note, not flagged: they make one demand on the hardware.
The thresholds were chosen on generated products (``benchmarks/mixed_cases.py``) and checked on held-out ones.
A **pool** (the whole log, and each ``model`` when the frame has several) is mixed when its material products live
in different corners. Clusters in one corner are pooled before the test, because two clusters in one corner make
the same demand on the hardware.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from shapeviz.analyses.shapes import (
    DEFAULT_CORNERS,
    DEFAULT_PHASE_THRESHOLD,
    OVERALL,
    SHAPES,
    Corners,
    corner_of,
    phase_of,
    request_gpu_time,
)
from shapeviz.workload.view import WorkloadView, as_view

if TYPE_CHECKING:
    from sklearn.cluster import KMeans


def _kmeans() -> type[KMeans]:
    # scikit-learn (with scipy) takes 0.7-1.2 s to import: only a run that clusters pays for it, not a page or a
    # command that reads an analysis already made.
    from sklearn.cluster import KMeans

    return KMeans


def _one_thread() -> Any:
    # threadpoolctl comes with scikit-learn; imported with it, only when clustering runs. It limits only the
    # libraries loaded when it is called, so scikit-learn (and its OpenMP runtime) is loaded first: otherwise
    # k-means runs multi-threaded, and on a 20k x 2 sample the OpenMP start-up costs ten times the work.
    _kmeans()
    from threadpoolctl import threadpool_limits

    return threadpool_limits(limits=1)

DEFAULT_SAMPLE_SIZE = 20_000
DEFAULT_SILHOUETTE_SAMPLE = 2_000
DEFAULT_K_RANGE = (2, 8)
DEFAULT_MATERIAL_SHARE = 0.15
# Silhouette of k-means on one unimodal blob sits around 0.3-0.45 (it splits the blob in halves); two shapes
# that are really apart score 0.5 and more. Below this, a split whose centres share a corner is one shape.
DEFAULT_ONE_SHAPE_SILHOUETTE = 0.5
# Gap (log ratio of within-cluster sums of squares, Gaussian blob over the log) that some k must reach for the
# log to hold more than one shape: seeded single-shape scenarios peak at ≤ 0.09, mixtures at ≥ 0.15.
DEFAULT_ONE_SHAPE_GAP = 0.12
MAX_K = 12
# The mode test (``split_test``), chosen on the tuning seeds of benchmarks/mixed_cases.py (benchmarks/README.md):
# the valley does the work (no one-mode tuning product shows one below 0.74); two Gaussians must fit at least as
# well as one by BIC, and their Ashman's D reach 2 (the classic bound for two equal modes), as guards.
DEFAULT_MODE_BIC_GAIN = 0.0
DEFAULT_MODE_SEPARATION = 2.0
DEFAULT_MODE_VALLEY = 0.7
MODE_SAMPLE = 4_000   # requests of one product the mode test is fitted on (seeded)
# Fewer requests than this are one mode: the valley was tuned on products of 1,000 requests and more, and a
# kernel estimate of a few dozen points shows valleys that are noise (BurstGPT's 77 GPT-4 requests showed three).
MODE_MIN_POINTS = 500
# Kernel width of the valley measure, as a fraction of the narrower component's spread: narrow enough to keep
# a real valley, wide enough that 4,000 points of a flat cloud show no false one.
MODE_BANDWIDTH = 0.25
MODE_DEPTH = 2        # splits within splits: at most four modes
N_INIT = 2
SELECT_SIZE = 8_000  # points the candidate k are fitted on (the final centres use the whole sample)
BLOB_SIZE = 5_000  # points of the one-blob reference of the gap test


@dataclass(frozen=True)
class Cluster:
    """One shape found in the log: where its centre sits, how much of the traffic and GPU-time it holds."""

    id: int
    requests: int
    share: float                  # share of all requests
    gpu_share: float              # share of all GPU-seconds (prefill + decode)
    input_center: float           # geometric centre, tokens
    output_center: float          # geometric centre, tokens
    input_p50: float
    output_p50: float
    shape: str                    # the corner its centre sits in
    phase: str                    # prefill | decode | balanced, by this cluster's GPU-time
    prefill_gpu_share: float
    products: dict[str, float]    # product -> share of this cluster's requests, largest first

    def to_dict(self) -> dict[str, object]:
        """Plain JSON-ready dict."""
        return asdict(self)


@dataclass(frozen=True)
class CornerMass:
    """What one corner holds of a mixed product or pool: shares of its requests and GPU-time, and where."""

    requests: float                            # share of the scope's requests
    gpu_time: float                            # share of the scope's GPU-seconds
    clusters: list[int]                        # ids of the clusters in this corner that hold them
    products: list[str] = field(default_factory=list)  # pools only: the products living in this corner


@dataclass(frozen=True)
class Mode:
    """One mode of a product: where its centre sits and how much of the product's requests and GPU-time it holds."""

    input_center: float           # geometric centre, tokens
    output_center: float          # geometric centre, tokens
    share: float                  # share of the product's requests
    gpu_share: float              # share of the product's GPU-seconds
    shape: str                    # the corner its centre sits in
    phase: str                    # prefill | decode | balanced, by this mode's GPU-time
    prefill_gpu_share: float
    clusters: list[int]           # k-means clusters holding its requests

    def to_dict(self) -> dict[str, object]:
        """Plain JSON-ready dict."""
        return asdict(self)



@dataclass(frozen=True)
class MixedFlag:
    """A product with modes in several corners, or a pool serving several corners; ``reason`` is shown verbatim."""

    kind: str                                  # "product" or "pool"
    scope: str                                 # product name; for pools "overall" (whole log) or a model name
    corners: dict[str, CornerMass]             # the material corners, largest share of requests first
    mixed_mass: float                          # GPU-time share outside the heaviest corner (products: mode)
    gpu_share: float                           # the scope's share of the whole log's GPU-time
    reason: str
    modes: list[Mode] = field(default_factory=list)  # products: the modes found, largest first (pools: empty)

    def to_dict(self) -> dict[str, object]:
        """Plain JSON-ready dict."""
        return asdict(self)


@dataclass(frozen=True, eq=False)
class ClusterResult:
    """Clusters (ordered by share, ids 0..k-1), labels aligned with the view's rows, and the mixed flags."""

    clusters: tuple[Cluster, ...]
    labels: np.ndarray                         # int8, one per row of the view's ``rows``, value = Cluster.id
    k: int
    silhouette: float | None                   # of the chosen k; None when k = 1
    gap: float | None                          # largest gap over the k tried, against one Gaussian blob (auto k)
    k_scores: dict[int, float]                 # silhouette of every k tried (empty when k was set)
    k_source: str                              # "auto", "user" or "one_shape"
    mixed_products: tuple[MixedFlag, ...]
    mixed_pools: tuple[MixedFlag, ...]
    product_mix: dict[str, dict[int, dict[str, float]]]  # product -> cluster id -> share of its requests/GPU-time
    corners: Corners
    sample_size: int
    random_state: int
    notes: tuple[str, ...] = field(default=())

    def cluster(self, cluster_id: int) -> Cluster:
        """The cluster with this id."""
        return self.clusters[cluster_id]

    def product_table(self) -> pd.DataFrame:
        """Long table: product, cluster, shape, share of the product's requests and GPU-time in that cluster."""
        rows = [
            {"product": product, "cluster": cid, "shape": self.clusters[cid].shape,
             "request_share": shares["requests"], "gpu_share": shares["gpu_time"]}
            for product, by_cluster in self.product_mix.items()
            for cid, shares in by_cluster.items()
        ]
        return pd.DataFrame(rows, columns=["product", "cluster", "shape", "request_share", "gpu_share"])

    def to_dict(self) -> dict[str, object]:
        """Plain JSON-ready dict (labels left out: they are per row)."""
        return {
            "k": self.k,
            "k_source": self.k_source,
            "silhouette": self.silhouette,
            "gap": self.gap,
            "k_scores": {str(k): v for k, v in self.k_scores.items()},
            "sample_size": self.sample_size,
            "random_state": self.random_state,
            "corners": asdict(self.corners),
            "clusters": [c.to_dict() for c in self.clusters],
            "mixed_products": [f.to_dict() for f in self.mixed_products],
            "mixed_pools": [f.to_dict() for f in self.mixed_pools],
            "product_mix": {p: {str(c): s for c, s in by.items()} for p, by in self.product_mix.items()},
            "notes": list(self.notes),
        }


def log_plane(input_tokens: np.ndarray, output_tokens: np.ndarray) -> np.ndarray:
    """(n, 2) array of natural-log tokens; counts below 1 are read as 1 so that log stays finite."""
    return np.column_stack([np.log(np.maximum(input_tokens, 1)), np.log(np.maximum(output_tokens, 1))])


def _validate(k: int | None, sample_size: int, silhouette_sample: int, k_range: tuple[int, int],
              material_share: float, one_shape_silhouette: float, one_shape_gap_threshold: float) -> None:
    if k is not None and not (isinstance(k, (int, np.integer)) and 1 <= k <= MAX_K):
        raise ValueError(f"k={k!r} must be a whole number in 1..{MAX_K}, or None to choose it by silhouette")
    if not (isinstance(sample_size, (int, np.integer)) and sample_size >= 100):
        raise ValueError(f"sample_size={sample_size!r} must be a whole number ≥ 100 (rows the model is fitted on)")
    if not (isinstance(silhouette_sample, (int, np.integer)) and silhouette_sample >= 100):
        raise ValueError(f"silhouette_sample={silhouette_sample!r} must be a whole number ≥ 100")
    lo, hi = k_range
    if not (2 <= lo <= hi <= MAX_K):
        raise ValueError(f"k_range={k_range!r} must satisfy 2 ≤ low ≤ high ≤ {MAX_K}")
    if not (0.0 < material_share < 1.0):
        raise ValueError(f"material_share={material_share!r} must be a fraction in (0, 1), e.g. 0.15")
    if not (-1.0 <= one_shape_silhouette <= 1.0):
        raise ValueError(f"one_shape_silhouette={one_shape_silhouette!r} must be a silhouette in [-1, 1]")
    if not (0.0 <= one_shape_gap_threshold < 10.0):
        raise ValueError(f"one_shape_gap_threshold={one_shape_gap_threshold!r} must be a gap in [0, 10), e.g. 0.12")


def _fit(points: np.ndarray, k: int, random_state: int, n_init: int = N_INIT) -> KMeans:
    return _kmeans()(n_clusters=k, n_init=n_init, random_state=random_state).fit(points)


@dataclass(frozen=True)
class _Selection:
    fits: dict[int, KMeans]
    silhouettes: dict[int, float]
    gaps: dict[int, float]


def pairwise_distances(points: np.ndarray) -> np.ndarray:
    """Euclidean distance matrix of a few thousand points (n x n)."""
    sq = (points * points).sum(axis=1)
    distances = np.sqrt(np.maximum(sq[:, None] + sq[None, :] - 2.0 * points @ points.T, 0.0))
    np.fill_diagonal(distances, 0.0)
    return distances


def silhouette_from_distances(distances: np.ndarray, labels: np.ndarray) -> float:
    """Mean silhouette (sklearn's definition) from a precomputed distance matrix; -1 when it is no split.

    One matrix product per k instead of a pass over the distance matrix per k: the matrix is computed once and
    shared by every k tried, which is what keeps choosing k well under a second.
    """
    _, labels = np.unique(labels, return_inverse=True)
    k = int(labels.max()) + 1
    if k < 2:
        return -1.0  # a split that put everything on one side is no split at all
    onehot = np.zeros((len(labels), k))
    onehot[np.arange(len(labels)), labels] = 1.0
    counts = onehot.sum(axis=0)
    sums = distances @ onehot                      # sum of distances from each point to each cluster
    rows = np.arange(len(labels))
    own = counts[labels]
    a = sums[rows, labels] / np.maximum(own - 1.0, 1.0)
    mean_to = sums / counts
    mean_to[rows, labels] = np.inf
    b = mean_to.min(axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        s = np.where(own > 1, (b - a) / np.maximum(a, b), 0.0)
    return float(np.nan_to_num(s, nan=0.0).mean())


def _blob_gaps(select: np.ndarray, fits: dict[int, KMeans], random_state: int) -> dict[int, float]:
    """Gap of each fit against one Gaussian blob of the points' mean and covariance (inertias per point)."""
    rng = np.random.default_rng(random_state + 1)  # its own stream: the blob must not depend on other draws
    blob = rng.multivariate_normal(select.mean(axis=0), np.cov(select.T), size=min(len(select), BLOB_SIZE))
    gaps: dict[int, float] = {}
    for k, fit in fits.items():  # one small fit on the blob per k
        per_point = fit.inertia_ / len(select)
        reference = _fit(blob, k, random_state)
        gaps[k] = float(np.log((reference.inertia_ / len(blob)) / per_point)) if per_point > 0 else float("inf")
    return gaps


def _select_k(sample: np.ndarray, ks: range, silhouette_sample: int, random_state: int) -> _Selection:
    """Fit every k on the selection sample; score each by its gap against one Gaussian blob and by silhouette."""
    rng = np.random.default_rng(random_state)
    # Choosing k needs fewer points than placing the final centres: fit the candidates on a subsample.
    select = sample if len(sample) <= SELECT_SIZE else sample[rng.choice(len(sample), SELECT_SIZE, replace=False)]
    pick = np.arange(len(select)) if len(select) <= silhouette_sample else rng.choice(len(select), silhouette_sample,
                                                                                      replace=False)
    fits = {k: _fit(select, k, random_state) for k in ks}  # at most seven small fits
    gaps = _blob_gaps(select, fits, random_state)
    distances = pairwise_distances(select[pick])
    silhouettes = {k: silhouette_from_distances(distances, fit.labels_[pick]) for k, fit in fits.items()}
    return _Selection(fits, silhouettes, gaps)


@dataclass(frozen=True)
class _Judgement:
    """The automatic choice of k on one set of standardised points."""

    selection: _Selection | None
    best: int                  # the silhouette's k (1 when there was nothing to split)
    gap: float | None          # largest gap over the k tried
    one_shape: str | None      # why the points are one shape, or None when they hold several


def _judge(sample: np.ndarray, mean: np.ndarray, std: np.ndarray, *, corners: Corners, k_range: tuple[int, int],
           silhouette_sample: int, one_shape_silhouette: float, one_shape_gap_threshold: float,
           random_state: int) -> _Judgement:
    """Choose k by silhouette, then ask whether the points are really one shape (see the module docstring)."""
    distinct = len(np.unique(sample, axis=0))
    # k-means needs more distinct points than clusters to score a split
    ks = range(k_range[0], min(k_range[1], distinct - 1) + 1)
    if len(ks) == 0:
        return _Judgement(None, 1, None, f"only {distinct} distinct (input, output) point(s): one shape")
    selection = _select_k(sample, ks, silhouette_sample, random_state)
    gap = max(selection.gaps.values())
    if gap < one_shape_gap_threshold:
        best = max(selection.silhouettes, key=lambda k: (selection.silhouettes[k], -k))
        return _Judgement(selection, best, gap, f"no split fits much better than one blob of the same spread "
                                                f"(largest gap {gap:.3f} < {one_shape_gap_threshold:.3f}): one shape")
    # Highest silhouette wins; on a tie the smaller k, the simpler story.
    best = max(selection.silhouettes, key=lambda k: (selection.silhouettes[k], -k))
    silhouette = selection.silhouettes[best]
    centre_tokens = np.exp(selection.fits[best].cluster_centers_ * std + mean)
    centre_corners = {corner_of(i, o, corners) for i, o in centre_tokens}
    why = None
    if silhouette < one_shape_silhouette and len(centre_corners) == 1:
        why = (f"best split k={best} scored a weak silhouette {silhouette:.2f} < {one_shape_silhouette:.2f} "
               f"and all its centres sit in {next(iter(centre_corners))}: one shape")
    return _Judgement(selection, best, gap, why)


def _standardise(plane: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(points, mean, std): a constant axis keeps scale 1 rather than dividing by zero."""
    # column by column: reductions over a contiguous 1-D column are several times faster than over axis 0
    mean = np.array([plane[:, 0].mean(), plane[:, 1].mean()])
    std = np.array([plane[:, 0].std(), plane[:, 1].std()])
    std[std == 0] = 1.0
    return (plane - mean) / std, mean, std


def _silhouette(points: np.ndarray, labels: np.ndarray, n: int, random_state: int) -> float:
    """Silhouette of one labelling on a seeded subsample of at most ``n`` points (-1 when it is no split)."""
    if len(points) > n:
        pick = np.random.default_rng(random_state).choice(len(points), size=n, replace=False)
        points, labels = points[pick], labels[pick]
    return silhouette_from_distances(pairwise_distances(points), labels)


def _nearest(points: np.ndarray, centers: np.ndarray, chunk: int = 262_144) -> np.ndarray:
    """Index of the nearest centre of every point, in chunks so a million rows never make a big temporary."""
    # |x - c|² = |x|² - 2 x·c + |c|²; |x|² is the same for every centre, so -2 x·c + |c|² ranks them. Written
    # out for the two axes rather than as a matrix product: a (n, 2) @ (2, k) product goes to a threaded BLAS
    # whose start-up costs more than the arithmetic.
    w_in, w_out = -2.0 * centers[:, 0], -2.0 * centers[:, 1]
    offsets = (centers * centers).sum(axis=1)
    labels = np.empty(len(points), dtype=np.int64)
    for start in range(0, len(points), chunk):  # a handful of chunks, not a loop over rows
        block = points[start:start + chunk]
        scores = block[:, 0:1] * w_in + block[:, 1:2] * w_out + offsets
        labels[start:start + chunk] = scores.argmin(axis=1)
    return labels


# ── modes: is one product one shape or several? ─────────────────────────────────────────────────────────────


@dataclass(frozen=True)
class ModeThresholds:
    """What a split of one product must show to count as two modes (see ``split_test``)."""

    bic_gain: float = DEFAULT_MODE_BIC_GAIN        # BIC(one Gaussian) - BIC(two), per request of the sample
    separation: float = DEFAULT_MODE_SEPARATION    # Ashman's D of the two components along the axis that parts them
    valley: float = DEFAULT_MODE_VALLEY            # measured density at the valley / the lower of the two peaks

    def __post_init__(self) -> None:
        if not (0.0 <= self.bic_gain < 10.0):
            raise ValueError(f"bic_gain={self.bic_gain!r} must be a BIC gain per request in [0, 10), e.g. 0.05")
        if not (0.0 <= self.separation < 100.0):
            raise ValueError(f"separation={self.separation!r} must be an Ashman's D in [0, 100), e.g. 2")
        if not (0.0 < self.valley <= 1.0):
            raise ValueError(f"valley={self.valley!r} must be a density ratio in (0, 1], e.g. 0.7")


@dataclass(frozen=True)
class SplitTest:
    """One product's points against one mode: the two-component fit's gain, separation and measured valley."""

    bic_gain: float          # (BIC of one Gaussian - BIC of two) / points: > 0 when two fit better
    separation: float        # Ashman's D of the two components projected on ``axis``
    valley: float            # smoothed density of the projected points at the valley / the lower peak (1: no dip)
    axis: np.ndarray         # unit direction in the log-token plane that parts the two components best (Fisher)
    cut: float               # projection at the valley: points below it are one mode, the rest the other

    def splits(self, thresholds: ModeThresholds) -> bool:
        """True when all three measures say two modes."""
        return (self.bic_gain >= thresholds.bic_gain and self.separation >= thresholds.separation
                and self.valley <= thresholds.valley)


def _gaussian_mixture(k: int, random_state: int) -> Any:
    from sklearn.mixture import GaussianMixture  # imported with scikit-learn, only when clustering runs

    return GaussianMixture(n_components=k, covariance_type="full", n_init=1 if k == 1 else 2,
                           random_state=random_state)


def split_test(points: np.ndarray, random_state: int = 0) -> SplitTest | None:
    """Test (n, 2) log-token points against one mode; None when there are too few distinct points to tell.

    Three measures, because each alone is fooled: a two-component Gaussian mixture beats one by BIC on any
    skewed, clipped or flat cloud; Ashman's D of the two halves of a uniform cloud is 3.5; so the split must also
    show a valley in the points themselves. The points are projected on the axis that best parts the two
    components (Fisher's), smoothed with a kernel ``MODE_BANDWIDTH`` of the narrower component's spread, and the lowest
    density between the two component means is compared with the lower of the peaks on either side of it (between
    the means too).
    """
    n = len(points)
    if n < MODE_MIN_POINTS or len(np.unique(points, axis=0)) < 20:
        return None
    one = _gaussian_mixture(1, random_state).fit(points)
    two = _gaussian_mixture(2, random_state).fit(points)
    gain = float((one.bic(points) - two.bic(points)) / n)
    mu, cov = two.means_, two.covariances_
    diff = mu[1] - mu[0]
    axis = np.linalg.solve(cov[0] + cov[1], diff)
    norm = float(np.linalg.norm(axis))
    if not np.isfinite(norm) or norm == 0.0:
        return SplitTest(gain, 0.0, 1.0, np.array([1.0, 0.0]), float("inf"))
    axis = axis / norm
    m = mu @ axis
    s = np.sqrt(np.maximum(np.einsum("i,kij,j->k", axis, cov, axis), 1e-12))
    separation = float(np.sqrt(2.0) * abs(m[1] - m[0]) / np.sqrt(s[0] ** 2 + s[1] ** 2))
    z = points @ axis
    lo_k, hi_k = (0, 1) if m[0] <= m[1] else (1, 0)
    bandwidth = MODE_BANDWIDTH * float(s.min())
    grid_lo, grid_hi = float(z.min()), float(z.max())
    bins = max(int(np.ceil((grid_hi - grid_lo) / (bandwidth / 4))), 1)
    if bins > 4096:  # a stray far point: a coarser grid, the kernel still several bins wide
        bins = 4096
    counts, edges = np.histogram(z, bins=bins, range=(grid_lo, grid_hi))
    centres = (edges[:-1] + edges[1:]) / 2
    width = edges[1] - edges[0]
    half = int(np.ceil(4 * bandwidth / width))
    kernel = np.exp(-0.5 * ((np.arange(-half, half + 1) * width) / bandwidth) ** 2)
    density = np.convolve(counts, kernel, mode="same")
    between = np.flatnonzero((centres >= m[lo_k]) & (centres <= m[hi_k]))
    if len(between) == 0:
        return SplitTest(gain, separation, 1.0, axis, float((m[0] + m[1]) / 2))
    at = between[np.argmin(density[between])]
    # A mixture's peaks lie between its components' means; a peak searched beyond them would count the pile-up
    # at a clipped generator's bounds as a mode.
    lower_peak = min(density[between[0]:at + 1].max(), density[at:between[-1] + 1].max())
    valley = float(density[at] / lower_peak) if lower_peak > 0 else 1.0
    return SplitTest(gain, separation, valley, axis, float(centres[at]))


def _dequantised_plane(inp: np.ndarray, out: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    # Token counts are whole numbers: short outputs (autocomplete) sit on a few values, and a mixture would fit
    # a component to each spike. Spreading each count over its unit interval removes the spikes, not the shape.
    return np.column_stack([np.log(np.maximum(inp, 1) + rng.uniform(-0.5, 0.5, len(inp))),
                            np.log(np.maximum(out, 1) + rng.uniform(-0.5, 0.5, len(out)))])


def sampled_split_test(input_tokens: np.ndarray, output_tokens: np.ndarray, random_state: int = 0,
                       depth: int = 0) -> SplitTest | None:
    """``split_test`` of a seeded sample of at most ``MODE_SAMPLE`` requests, their counts dequantised."""
    n = len(input_tokens)
    pick = np.arange(n) if n <= MODE_SAMPLE else np.sort(
        np.random.default_rng([random_state, depth, n]).choice(n, MODE_SAMPLE, replace=False))
    points = _dequantised_plane(input_tokens[pick], output_tokens[pick], np.random.default_rng([random_state, 7, depth]))
    with _one_thread():  # a 4,000 x 2 fit: threads cost more to start than the work
        return split_test(points, random_state)


def _mode_cuts(plane: np.ndarray, rows: np.ndarray, gpu: np.ndarray, inp: np.ndarray, out: np.ndarray,
               thresholds: ModeThresholds, material_share: float, random_state: int,
               depth: int = 0) -> list[np.ndarray]:
    """Row indices (into the product's rows) of each mode, found by splitting at valleys while one is found."""
    total_n, total_gpu = len(plane), float(gpu.sum())
    test = sampled_split_test(inp[rows], out[rows], random_state, depth)
    if test is None or not test.splits(thresholds):
        return [rows]
    below = plane[rows] @ test.axis < test.cut
    sides = [rows[below], rows[~below]]

    def material(side: np.ndarray) -> bool:
        gpu_part = float(gpu[side].sum()) / total_gpu if total_gpu > 0 else 0.0
        return len(side) / total_n >= material_share or gpu_part >= material_share

    if not all(material(side) for side in sides):
        return [rows]
    if depth + 1 >= MODE_DEPTH:
        return sides
    return [group for side in sides
            for group in _mode_cuts(plane, side, gpu, inp, out, thresholds, material_share, random_state, depth + 1)]


def product_modes(input_tokens: np.ndarray, output_tokens: np.ndarray, prefill_s: np.ndarray, decode_s: np.ndarray,
                  *, labels: np.ndarray | None = None, corners: Corners = DEFAULT_CORNERS,
                  thresholds: ModeThresholds = ModeThresholds(), material_share: float = DEFAULT_MATERIAL_SHARE,
                  phase_threshold: float = DEFAULT_PHASE_THRESHOLD, random_state: int = 0) -> list[Mode]:
    """The modes of one product's requests, largest first: one mode unless a material split shows a valley.

    The test runs on a seeded sample of at most ``MODE_SAMPLE`` requests (a million requests cost what
    4,000 do); every request is then put on its side of the valley, so shares count every request.
    """
    inp, out = np.asarray(input_tokens), np.asarray(output_tokens)
    plane = log_plane(inp, out)
    gpu = prefill_s + decode_s
    groups = _mode_cuts(plane, np.arange(len(inp)), gpu, inp, out, thresholds, material_share, random_state)
    n, total_gpu = len(inp), float(gpu.sum())
    modes = []
    for rows in groups:
        g = float(gpu[rows].sum())
        centre_in, centre_out = np.exp(plane[rows].mean(axis=0))
        prefill_share = float(prefill_s[rows].sum() / g) if g > 0 else 0.0
        modes.append(Mode(
            input_center=float(centre_in), output_center=float(centre_out), share=len(rows) / n,
            gpu_share=g / total_gpu if total_gpu > 0 else 0.0, shape=corner_of(centre_in, centre_out, corners),
            phase=phase_of(prefill_share, phase_threshold), prefill_gpu_share=prefill_share,
            clusters=[] if labels is None else [int(c) for c in np.unique(labels[rows])]))
    return sorted(modes, key=lambda m: (-m.share, m.input_center, m.output_center))


def is_mixed(modes: list[Mode]) -> bool:
    """A product is mixed when its modes sit in two corners or more (modes in one corner make one demand)."""
    return len({m.shape for m in modes}) >= 2


_COUNT_WORDS = {2: "two", 3: "three", 4: "four"}


def _mode_flag(name: str, modes: list[Mode], product_gpu_share: float) -> MixedFlag:
    """The flag of a product with two modes or more, its reason naming each mode's corner, centre and shares."""
    corners: dict[str, CornerMass] = {}
    for shape in dict.fromkeys(m.shape for m in modes):  # in mode order: largest first
        members = [m for m in modes if m.shape == shape]
        corners[shape] = CornerMass(requests=sum(m.share for m in members), gpu_time=sum(m.gpu_share for m in members),
                                    clusters=sorted({c for m in members for c in m.clusters}))
    parts = [f"{m.shape} around {m.input_center:,.0f} in / {m.output_center:,.0f} out "
             f"({_pct(m.share)} of its requests, {_pct(m.gpu_share)} of its GPU-time)" for m in modes]
    reason = f"Product '{name}' has {_COUNT_WORDS.get(len(modes), str(len(modes)))} modes: " + _join(parts) + "."
    return MixedFlag(kind="product", scope=name, corners=corners,
                     mixed_mass=float(1.0 - max(m.gpu_share for m in modes)),
                     gpu_share=product_gpu_share, reason=reason, modes=modes)


def find_clusters(
    data: WorkloadView | pd.DataFrame,
    k: int | None = None,
    *,
    corners: Corners = DEFAULT_CORNERS,
    deployment: object | None = None,
    sample_size: int = DEFAULT_SAMPLE_SIZE,
    silhouette_sample: int = DEFAULT_SILHOUETTE_SAMPLE,
    k_range: tuple[int, int] = DEFAULT_K_RANGE,
    one_shape_silhouette: float = DEFAULT_ONE_SHAPE_SILHOUETTE,
    one_shape_gap_threshold: float = DEFAULT_ONE_SHAPE_GAP,
    material_share: float = DEFAULT_MATERIAL_SHARE,
    phase_threshold: float = DEFAULT_PHASE_THRESHOLD,
    random_state: int = 0,
    gpu_time: tuple[np.ndarray, np.ndarray] | None = None,
    mode_thresholds: ModeThresholds = ModeThresholds(),
) -> ClusterResult:
    """k-means clusters of the log-token plane (k by silhouette unless given), with mixed products and pools.

    ``data``: a workload view (or a canonical frame). Clusters need requests one by one: the view's ``rows``,
    every row of a frame, or a sketch's uniform sample, whose request counts are then scaled to the whole log
    (shares carry the sample's error, about ±0.5 % at 50,000 sampled requests). ``gpu_time``: the costs of
    those rows (``shapes.request_gpu_time``), when the caller has them.
    """
    _validate(k, sample_size, silhouette_sample, k_range, material_share, one_shape_silhouette, one_shape_gap_threshold)
    view = as_view(data)
    rows = view.rows
    inp, out = rows.input_tokens, rows.output_tokens
    n = inp.size
    if n == 0:
        raise ValueError("the log has no requests; load a log with at least one served request")
    prefill_s, decode_s = gpu_time if gpu_time is not None else request_gpu_time(rows, deployment)
    if len(prefill_s) != n or len(decode_s) != n:
        raise ValueError(f"gpu_time arrays have {len(prefill_s)} rows, the requests {n}; cost the same rows")

    # Standardise with the whole log's moments (cheap, and the same whatever sample is drawn).
    plane = log_plane(inp, out)
    points, mean, std = _standardise(plane)
    rng = np.random.default_rng(random_state)
    sample = points if n <= sample_size else points[np.sort(rng.choice(n, size=sample_size, replace=False))]
    judge_args = dict(corners=corners, k_range=k_range, silhouette_sample=silhouette_sample,
                      one_shape_silhouette=one_shape_silhouette, one_shape_gap_threshold=one_shape_gap_threshold,
                      random_state=random_state)
    notes: list[str] = []
    k_scores: dict[int, float] = {}
    silhouette: float | None = None
    gap: float | None = None
    centers = sample.mean(axis=0, keepdims=True)  # k = 1 unless a split is chosen below
    # One thread: on a 20k x 2 sample the OpenMP start-up of a multi-threaded k-means costs ten times the work.
    with _one_thread():
        if k is None:
            judgement = _judge(sample, mean, std, **judge_args)
            gap = judgement.gap
            k_scores = judgement.selection.silhouettes if judgement.selection is not None else {}
            if judgement.one_shape is not None or judgement.selection is None:
                k_source = "one_shape"
                notes.append(judgement.one_shape or "nothing to split: one shape")
            else:
                k_source, silhouette = "auto", k_scores[judgement.best]
                # Place the final centres on the whole sample, starting from the chosen candidate's.
                start = judgement.selection.fits[judgement.best].cluster_centers_
                centers = _kmeans()(n_clusters=judgement.best, init=start, n_init=1,
                                 random_state=random_state).fit(sample).cluster_centers_
        else:
            k_source = "user"
            distinct = len(np.unique(sample, axis=0))
            kk = int(k)
            if kk > distinct:
                notes.append(f"k={kk} asked, but the sample has only {distinct} distinct points: k={distinct}")
                kk = distinct
            if kk > 1:
                fit = _fit(sample, kk, random_state)
                centers = fit.cluster_centers_
                silhouette = _silhouette(sample, fit.labels_, silhouette_sample, random_state)

    raw = _nearest(points, centers)
    k_found = len(centers)
    counts = np.bincount(raw, minlength=k_found)
    log_in_sum = np.bincount(raw, weights=plane[:, 0], minlength=k_found)
    log_out_sum = np.bincount(raw, weights=plane[:, 1], minlength=k_found)
    keep = np.flatnonzero(counts > 0)  # a centre fitted on the sample may win no row of the full log
    geo_in = np.exp(log_in_sum[keep] / counts[keep])
    geo_out = np.exp(log_out_sum[keep] / counts[keep])
    # Stable ids: largest share first; ties by centre so the order never depends on k-means' internal numbering.
    order = sorted(range(len(keep)), key=lambda j: (-counts[keep[j]], geo_in[j], geo_out[j]))
    remap = np.full(k_found, -1, dtype=np.int64)
    remap[keep[order]] = np.arange(len(order))
    labels = remap[raw].astype(np.int8)
    k_final = len(order)
    geo_in, geo_out = geo_in[order], geo_out[order]

    gpu_s = prefill_s + decode_s
    total_gpu = float(gpu_s.sum())
    req_k = np.bincount(labels, minlength=k_final).astype(np.float64)
    gpu_k = np.bincount(labels, weights=gpu_s, minlength=k_final)
    prefill_k = np.bincount(labels, weights=prefill_s, minlength=k_final)

    # Medians per cluster from one stable sort of the labels (radix sort on int8: cheap for a million rows).
    by_label = np.argsort(labels, kind="stable")
    bounds = np.concatenate([[0], np.cumsum(req_k).astype(np.int64)])
    in_sorted, out_sorted = inp[by_label], out[by_label]

    prod, names = rows.product, rows.products
    n_prod = len(names)
    cell = prod.astype(np.int64) * k_final + labels
    prod_req = np.bincount(cell, minlength=n_prod * k_final).reshape(n_prod, k_final).astype(np.float64)
    prod_gpu = np.bincount(cell, weights=gpu_s, minlength=n_prod * k_final).reshape(n_prod, k_final)

    clusters = []
    for c in range(k_final):  # one iteration per cluster (≤ 12)
        lo, hi = bounds[c], bounds[c + 1]
        holders = prod_req[:, c]
        share_in_cluster = holders / holders.sum()
        holder_order = sorted(np.flatnonzero(holders), key=lambda p: (-holders[p], names[p]))
        products = {names[p]: float(share_in_cluster[p]) for p in holder_order}
        prefill_share = float(prefill_k[c] / gpu_k[c]) if gpu_k[c] > 0 else 0.0
        clusters.append(Cluster(
            id=c,
            requests=int(req_k[c]),
            share=float(req_k[c] / n),
            gpu_share=float(gpu_k[c] / total_gpu) if total_gpu > 0 else 0.0,
            input_center=float(geo_in[c]),
            output_center=float(geo_out[c]),
            input_p50=float(np.median(in_sorted[lo:hi])),
            output_p50=float(np.median(out_sorted[lo:hi])),
            shape=corner_of(geo_in[c], geo_out[c], corners),
            phase=phase_of(prefill_share, phase_threshold),
            prefill_gpu_share=prefill_share,
            products=products,
        ))
    cluster_corner = np.array([SHAPES.index(c.shape) for c in clusters], dtype=np.int64)

    product_mix: dict[str, dict[int, dict[str, float]]] = {}
    for p in sorted(range(n_prod), key=lambda p: (-prod_req[p].sum(), names[p])):
        r_tot, g_tot = prod_req[p].sum(), prod_gpu[p].sum()
        if r_tot == 0:
            continue
        product_mix[names[p]] = {
            int(c): {"requests": float(prod_req[p, c] / r_tot),
                     "gpu_time": float(prod_gpu[p, c] / g_tot) if g_tot > 0 else 0.0}
            for c in np.flatnonzero(prod_req[p])
        }

    flagged = []
    by_product = np.argsort(prod, kind="stable")
    product_bounds = np.concatenate([[0], np.cumsum(np.bincount(prod, minlength=n_prod))])
    for p in range(n_prod):  # one iteration per product
        mine = by_product[product_bounds[p]:product_bounds[p + 1]]
        if len(mine) == 0:
            continue
        modes = product_modes(inp[mine], out[mine], prefill_s[mine], decode_s[mine], labels=labels[mine],
                              corners=corners, thresholds=mode_thresholds, material_share=material_share,
                              phase_threshold=phase_threshold, random_state=random_state)
        if is_mixed(modes):
            flagged.append(_mode_flag(names[p], modes, float(prod_gpu[p].sum() / total_gpu) if total_gpu > 0 else 0.0))
        elif len(modes) >= 2:
            # modes in one corner make one demand on the hardware: named, not flagged
            notes.append(f"product '{names[p]}' has {len(modes)} modes, all in {modes[0].shape}; not flagged mixed")
        elif _spans_corners(prod_req[p], prod_gpu[p], cluster_corner, material_share):
            why = ("its requests form one mode" if len(mine) >= MODE_MIN_POINTS else
                   f"its {len(mine):,} requests are too few to tell modes apart ({MODE_MIN_POINTS:,} needed)")
            notes.append(f"product '{names[p]}' spans clusters in several corners, but {why}; not flagged mixed")
    mixed_products = tuple(sorted(flagged, key=lambda f: (-f.mixed_mass, f.scope)))
    mixed_pools = tuple(_mixed_pools(rows, prod, names, labels, gpu_s, prod_req, prod_gpu, cluster_corner,
                                     material_share))
    if rows is not view:   # a sample of the log: counts scaled to every request, shares are the sample's
        total = view.n_requests
        clusters = [replace(cl, requests=int(round(cl.share * total))) for cl in clusters]
        notes.append(f"clusters fitted on a uniform sample of {n:,} of {total:,} requests (the workload sketch); "
                     "shares are the sample's")

    return ClusterResult(
        clusters=tuple(clusters),
        labels=labels,
        k=k_final,
        silhouette=silhouette,
        gap=gap,
        k_scores=k_scores,
        k_source=k_source,
        mixed_products=mixed_products,
        mixed_pools=mixed_pools,
        product_mix=product_mix,
        corners=corners,
        sample_size=int(min(n, sample_size)),
        random_state=int(random_state),
        notes=tuple(notes),
    )


def _pct(x: float) -> str:
    return f"{x:.0%}"


def _ids(ids: list[int]) -> str:
    return f"cluster {ids[0]}" if len(ids) == 1 else "clusters " + ", ".join(str(i) for i in ids)


def _by_corner(values: np.ndarray, cluster_corner: np.ndarray) -> np.ndarray:
    """Sum of per-cluster values per corner (index into SHAPES)."""
    return np.bincount(cluster_corner, weights=values, minlength=len(SHAPES))


def _spans_corners(req: np.ndarray, gpu: np.ndarray, cluster_corner: np.ndarray, material_share: float) -> bool:
    """Whether a product's requests or GPU-time sit materially in clusters of two corners or more."""
    r_tot, g_tot = req.sum(), gpu.sum()
    if r_tot == 0:
        return False
    r_share = _by_corner(req, cluster_corner) / r_tot
    g_share = _by_corner(gpu, cluster_corner) / g_tot if g_tot > 0 else np.zeros(len(SHAPES))
    return int(((r_share >= material_share) | (g_share >= material_share)).sum()) >= 2


def _join(parts: list[str]) -> str:
    return parts[0] if len(parts) == 1 else ", ".join(parts[:-1]) + " and " + parts[-1]


def _pool_flag(scope: str, label: str, req: np.ndarray, gpu: np.ndarray, names: list[str],
               cluster_corner: np.ndarray, material_share: float, pool_gpu_share: float) -> MixedFlag | None:
    """The flag of one pool (``req``/``gpu``: products x clusters) whose material products sit in two corners."""
    r_tot, g_tot = req.sum(), gpu.sum()
    if r_tot == 0:
        return None
    prod_r = req.sum(axis=1) / r_tot
    prod_g = gpu.sum(axis=1) / g_tot if g_tot > 0 else np.zeros(len(names))
    material = [p for p in range(len(names)) if prod_r[p] >= material_share or prod_g[p] >= material_share]
    # A product's corner in this pool is where most of its requests sit (clusters of one corner pooled).
    home = {p: int(np.argmax(_by_corner(req[p], cluster_corner))) for p in material}
    if len(set(home.values())) < 2:
        return None
    corners: dict[str, CornerMass] = {}
    for s in sorted(set(home.values()), key=lambda s: (-sum(prod_r[p] for p in material if home[p] == s), s)):
        members = sorted((p for p in material if home[p] == s), key=lambda p: (-prod_r[p], names[p]))
        corners[SHAPES[s]] = CornerMass(
            requests=float(sum(prod_r[p] for p in members)),
            gpu_time=float(sum(prod_g[p] for p in members)),
            clusters=sorted({int(c) for p in members for c in np.flatnonzero((cluster_corner == s) & (req[p] > 0))}),
            products=[names[p] for p in members],
        )
    parts = [f"{' and '.join(repr(p) for p in m.products)} in {corner} ({_ids(m.clusters)}: "
             f"{_pct(m.requests)} of requests, {_pct(m.gpu_time)} of GPU-time)" for corner, m in corners.items()]
    gpu_times = [m.gpu_time for m in corners.values()]
    reason = f"{label} serves products in {len(corners)} corners: " + _join(parts) + "."
    return MixedFlag(kind="pool", scope=scope, corners=corners, mixed_mass=float(sum(gpu_times) - max(gpu_times)),
                     gpu_share=pool_gpu_share, reason=reason)


def _mixed_pools(rows: WorkloadView, prod: np.ndarray, names: list[str], labels: np.ndarray, gpu_s: np.ndarray,
                 req: np.ndarray, gpu: np.ndarray, cluster_corner: np.ndarray,
                 material_share: float) -> list[MixedFlag]:
    """Flags for the whole log (``req``/``gpu``: products x clusters) and, with several models, each model's pool."""
    n_prod, k = req.shape
    flags = []
    whole = _pool_flag(OVERALL, "The whole log (one pool)", req, gpu, names, cluster_corner, material_share, 1.0)
    if whole is not None:
        flags.append(whole)
    if rows.model is not None:
        m_codes, models = rows.model.astype(np.int64), rows.models
        if len(models) >= 2:  # one model is the whole log again
            mcell = (m_codes * n_prod + prod) * k + labels
            valid = m_codes >= 0
            size = len(models) * n_prod * k
            m_req = np.bincount(mcell[valid], minlength=size).reshape(len(models), n_prod, k).astype(np.float64)
            m_gpu = np.bincount(mcell[valid], weights=gpu_s[valid], minlength=size).reshape(len(models), n_prod, k)
            total_gpu = float(gpu.sum())
            for m, name in enumerate(models):  # one iteration per model
                share = float(m_gpu[m].sum() / total_gpu) if total_gpu > 0 else 0.0
                flag = _pool_flag(name, f"Model pool '{name}'", m_req[m], m_gpu[m], names, cluster_corner,
                                  material_share, share)
                if flag is not None:
                    flags.append(flag)
    return flags
