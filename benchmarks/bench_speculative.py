"""Speculative decoding: the step model against published speed-ups per batch, and how long its evaluation takes.

    python benchmarks/bench_speculative.py            # judge: every row of data/speculative_measurements.csv
    python benchmarks/bench_speculative.py --fit      # the acceptance the 'fit' rows set (data/speculative.json)

Each row is one published speed-up of speculative decoding at one batch size (throughput with / without, same
engine, same batch). The model predicts ``speculative.speedup(dep, batch, context)`` with the acceptance of
``data/speculative.json``. Rows marked ``fit`` set an acceptance (``--fit`` prints it); every other row is judged:
median |predicted / measured − 1| per group and overall, and per group the batch where the gain first falls under
1.1× (measured vs predicted, on the group's own batch grid: "within one step" means at most one grid step apart).
Then the closed form at batch 1 with a free draft, and wall/CPU seconds of the evaluations (medians of --repeat),
the Capacity page's ``speculative_effect`` on the 20k-request demo included.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from timing import timed  # noqa: E402  (benchmarks/timing.py, beside this script)

from shapeviz.datadir import DATA_DIR  # noqa: E402
from shapeviz.fleet.speculative import speculative_deployment, speculative_effect  # noqa: E402
from shapeviz.physics import default_deployment  # noqa: E402
from shapeviz.physics.speculative import (  # noqa: E402
    Speculative,
    acceptance_length,
    dataset_alpha,
    speedup,
)
from shapeviz.physics.steps import Deployment, load_efficiency  # noqa: E402
from shapeviz.serving import Workload  # noqa: E402
from shapeviz.workload.synth import generate  # noqa: E402

ROWS = DATA_DIR / "speculative_measurements.csv"
SMALL_GAIN = 1.1


def deployment(row: pd.Series, alpha: float) -> Deployment:
    """The row's replica with its speculative decoding at per-token acceptance ``alpha``."""
    spec = Speculative(str(row.method), int(row.draft_tokens), alpha, "assumed")
    return Deployment(str(row.model), str(row.gpu), str(row.precision), str(row.kv_precision), int(row.tp),
                      speculative=spec)


def predict(rows: pd.DataFrame) -> np.ndarray:
    """Predicted speed-up of every row with the data file's acceptance."""
    out = []
    for _, r in rows.iterrows():
        dep = deployment(r, dataset_alpha(str(r.method), str(r.dataset)))
        out.append(float(speedup(dep, float(r.batch), float(r.context_tokens))))
    return np.array(out)


def fit_alpha(row: pd.Series) -> float:
    """The acceptance at which the model reproduces one row's speed-up (bisection; speed-up rises with α)."""
    lo, hi = 0.0, 1.0
    for _ in range(50):
        mid = (lo + hi) / 2.0
        got = float(speedup(deployment(row, mid), float(row.batch), float(row.context_tokens)))
        lo, hi = (mid, hi) if got < float(row.speedup) else (lo, mid)
    return (lo + hi) / 2.0


def first_below(batches: np.ndarray, gains: np.ndarray) -> int | None:
    """Index of the first batch whose gain is under 1.1×, None if none is."""
    idx = np.flatnonzero(gains < SMALL_GAIN)
    return int(idx[0]) if idx.size else None


def main(argv: list[str] | None = None) -> int:
    """Print the fit or the judgement, the closed-form check and the timings."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--fit", action="store_true", help="print the acceptance each 'fit' row sets")
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args(argv)
    rows = pd.read_csv(ROWS)
    if args.fit:
        for _, r in rows[rows.role == "fit"].iterrows():
            a = fit_alpha(r)
            print(f"{r.engine} {r.gpu} {r.method} k={r.draft_tokens} batch {r.batch}: measured {r.speedup}x -> "
                  f"alpha {a:.4f} (acceptance length {float(acceptance_length(a, int(r.draft_tokens))):.3f})")
        return 0

    rows["predicted"] = predict(rows)
    rows["error"] = rows["predicted"] / rows["speedup"] - 1.0
    judged = rows[rows.role == "judge"]
    print("| engine | GPU | model | method | k | batch | measured | predicted | error | role |")
    print("|---|---|---|---|---:|---:|---:|---:|---:|---|")
    for _, r in rows.iterrows():
        print(f"| {r.engine} | {r.gpu} | {r.model} | {r.method} | {r.draft_tokens} | {r.batch} | {r.speedup:.2f}× | "
              f"{r.predicted:.2f}× | {r.error:+.0%} | {r.role} |")
    print()
    print("| group | judged rows | median abs error | first batch under 1.1×: measured | predicted | within one step |")
    print("|---|---:|---:|---|---|---|")
    for key, g in rows.groupby(["engine", "gpu", "method"], sort=False):
        g = g.sort_values("batch")
        j = g[g.role == "judge"]
        b = g["batch"].to_numpy()
        m_i, p_i = first_below(b, g["speedup"].to_numpy()), first_below(b, g["predicted"].to_numpy())
        within = (m_i is None and p_i is None) or (m_i is not None and p_i is not None and abs(m_i - p_i) <= 1)
        shown = [("none up to " + str(int(b[-1]))) if i is None else str(int(b[i])) for i in (m_i, p_i)]
        print(f"| {' / '.join(map(str, key))} | {len(j)} | {np.median(np.abs(j['error'])):.1%} | {shown[0]} | "
              f"{shown[1]} | {'yes' if within else 'no'} |")
    print()
    print(f"held-out (judge) rows: {len(judged)}, median abs error {np.median(np.abs(judged['error'])):.1%}, "
          f"within 25%: {(np.abs(judged['error']) <= 0.25).mean():.0%}; fit rows: {int((rows.role == 'fit').sum())}")

    # Closed form: batch 1, a free draft (n-gram) and a memory-bound verification give τ = (1 − α^(k+1)) / (1 − α).
    worst = 0.0
    free_sampling = load_efficiency().replace(sequence_overhead_us=0.0)
    for a in (0.3, 0.5, 0.7, 0.9):
        for k in (1, 3, 5):
            # a free draft (n-gram) and free sampling: the formula counts target passes only
            dep = Deployment("llama-3.1-8b", "h100-sxm", "bf16", "bf16", 1, efficiency=free_sampling,
                             speculative=Speculative("ngram", k, a))
            formula = (1 - a ** (k + 1)) / (1 - a)
            worst = max(worst, abs(float(speedup(dep, 1.0, 512.0)) / formula - 1.0))
    print(f"closed form at batch 1 with a free draft and free sampling: worst relative gap {worst:.2e} over 12 (alpha, k) pairs")

    _, wall, cpu = timed(lambda: predict(rows), args.repeat)
    print(f"predict {len(rows)} rows: {wall * 1e3:.1f} ms wall, {cpu * 1e3:.1f} ms CPU (median of {args.repeat})")
    dep = deployment(rows.iloc[0], 0.6)
    grid = np.arange(1.0, 513.0)
    _, wall, cpu = timed(lambda: speedup(dep, grid, 512.0), args.repeat)
    print(f"speed-up over 512 batch sizes (one vectorised call): {wall * 1e3:.2f} ms wall, {cpu * 1e3:.2f} ms CPU")
    # What the Capacity page runs per rerun with the lever on: two plans and two load curves on the demo log.
    w = Workload.from_frame(generate(20_000, seed=0, with_hashes=False))
    dep = speculative_deployment(default_deployment(), w, "eagle3")
    effect, wall, cpu = timed(lambda: speculative_effect(w, dep), args.repeat)
    print(f"speculative_effect on the 20k-request demo ({w.weight.size} workload points): {wall * 1e3:.0f} ms wall, "
          f"{cpu * 1e3:.0f} ms CPU; {effect.citation()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
