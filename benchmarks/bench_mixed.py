"""Mixed-product benchmark: false flags and misses of the two-mode test on generated products, real traces, speed.

The cases come from ``benchmarks/mixed_cases.py`` (committed before any threshold was chosen): one-mode products
(lognormal, clipped normal, uniform, log-uniform; in each corner and on corner borders) and two-mode products
(pairs of modes in different corners at several spreads, separations and shares). Seeds 0-4 tune, 5-9 are held out.

Sections (``--section``, all by default):
- ``tune``: the three measures of each product's first split (``sampled_split_test``) on the tuning seeds, a grid
  of thresholds scored on them (a split that passes and leaves material sides; the modes' corners are not
  looked at here, so the grid may count a split whose two modes share a corner as a flag), and the chosen row (fewest false flags, then fewest misses among two-mode
  products whose true density has two peaks); the held-out seeds are not read;
- ``heldout``: false-flag and miss rates per kind on the held-out seeds, each product alone, through
  ``product_modes`` with the library's default thresholds (what ``find_clusters`` runs per product);
- ``eight``: logs of eight products (two two-mode, six one-mode) through ``find_clusters``, held-out seeds;
- ``traces``: every product of every trace under ``../shared/data/traces`` (``--traces``), flagged or not, with modes;
- ``speed``: ``find_clusters`` on a generated log of ``--rows`` requests (eight products), CPU seconds.

Usage: ``python benchmarks/bench_mixed.py --section heldout``.
"""
from __future__ import annotations

import argparse
import itertools
import os
import sys
import time
from collections import defaultdict
from collections.abc import Iterable
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from mixed_cases import HELD_OUT_SEEDS, TUNING_SEEDS, Case, eight_product_logs, one_mode_cases, two_mode_cases  # noqa: E402

from shapeviz.analyses.clusters import (  # noqa: E402
    DEFAULT_MATERIAL_SHARE,
    ModeThresholds,
    find_clusters,
    is_mixed,
    log_plane,
    product_modes,
    sampled_split_test,
)
from shapeviz.analyses.shapes import request_gpu_time  # noqa: E402



def _gpu(case: Case) -> tuple[np.ndarray, np.ndarray]:
    frame = pd.DataFrame({"input_tokens": case.input_tokens, "output_tokens": case.output_tokens,
                          "product": pd.Categorical(["p"] * case.n)})
    return request_gpu_time(frame)


def _cases(seeds: Iterable[int]) -> list[Case]:
    return [c for s in seeds for c in (*one_mode_cases(s), *two_mode_cases(s))]


def _group(case: Case) -> str:
    if not case.two_modes:
        return case.kind
    return f"{case.kind} ({'two peaks' if case.bimodal else 'one peak and a shoulder'})"


def _rates(results: list[tuple[Case, bool]]) -> pd.DataFrame:
    by: dict[str, list[bool]] = defaultdict(list)
    for case, flagged in results:
        by[_group(case)].append(flagged != case.two_modes)
    rows = [{"kind": k, "products": len(v), "wrong": int(sum(v)), "rate": sum(v) / len(v),
             "what is wrong": "missed (not flagged)" if k.startswith("two") else "false flag"}
            for k, v in sorted(by.items())]
    return pd.DataFrame(rows)


def tune() -> None:
    """First-split measures on the tuning seeds, and the grid of thresholds scored on them."""
    stats = []
    for case in _cases(TUNING_SEEDS):
        test = sampled_split_test(case.input_tokens, case.output_tokens, 0)
        prefill, decode = _gpu(case)
        gpu = prefill + decode
        material = False
        if test is not None:
            below = log_plane(case.input_tokens, case.output_tokens) @ test.axis < test.cut
            shares = [max(below.mean(), gpu[below].sum() / gpu.sum()), max((~below).mean(), gpu[~below].sum() / gpu.sum())]
            material = min(shares) >= DEFAULT_MATERIAL_SHARE
        stats.append((case, test, material))
    out = ROOT / "benchmarks" / "out"
    out.mkdir(exist_ok=True)
    pd.DataFrame([{"case": c.label, "two_modes": c.two_modes, "bimodal": c.bimodal, "material": m,
                   **({"bic_gain": t.bic_gain, "separation": t.separation, "valley": t.valley} if t else {})}
                  for c, t, m in stats]).to_csv(out / "mixed_tune.csv", index=False)
    print(f"tuning set: seeds {TUNING_SEEDS}, {len(stats)} products "
          f"({sum(not c.two_modes for c, _, _ in stats)} one-mode, {sum(c.two_modes for c, _, _ in stats)} two-mode)")
    grid = []
    for gain, sep, valley in itertools.product((0.0, 0.02, 0.05, 0.1), (0.0, 2.0, 2.5, 3.0),
                                               (0.6, 0.65, 0.7, 0.75, 0.8)):
        th = ModeThresholds(gain, sep, valley)
        flags = [(c, t is not None and t.splits(th) and m) for c, t, m in stats]
        false = sum(f for c, f in flags if not c.two_modes)
        far = [f for c, f in flags if c.two_modes and c.bimodal]
        near = [f for c, f in flags if c.two_modes and not c.bimodal]
        grid.append({"bic_gain": gain, "separation": sep, "valley": valley, "false_flags": false,
                     "missed_far": len(far) - sum(far), "missed_near": len(near) - sum(near)})
    table = pd.DataFrame(grid).sort_values(["false_flags", "missed_far", "missed_near", "valley", "separation",
                                            "bic_gain"], ascending=[True, True, True, False, True, True])
    print(table.head(15).to_string(index=False))
    th = ModeThresholds()
    print(f"\nlibrary defaults {th}, on the tuning seeds:")
    print(_rates([(c, t is not None and t.splits(th) and m) for c, t, m in stats]).to_string(index=False))


def heldout() -> None:
    """False flags and misses per kind on the held-out seeds, each product alone."""
    results, cpu = [], 0.0
    for case in _cases(HELD_OUT_SEEDS):
        prefill, decode = _gpu(case)
        c0 = time.process_time()
        modes = product_modes(case.input_tokens, case.output_tokens, prefill, decode)
        cpu += time.process_time() - c0
        results.append((case, is_mixed(modes)))
    print(f"held-out set: seeds {HELD_OUT_SEEDS}, {len(results)} products alone, thresholds {ModeThresholds()}; "
          f"product_modes {cpu / len(results) * 1000:.0f} ms CPU per product")
    print(_rates(results).to_string(index=False))
    peaks = pd.DataFrame([{"pull": c.params["pull"], "sigma": c.params["sigma"], "minor": c.params["minor"],
                           "missed": not f} for c, f in results if c.kind == "two_lognormal" and c.bimodal])
    print("two-peak lognormal pairs, miss rate by how far apart (pull 1.0: modes at the corner anchors, 0.6: "
          "pulled together) and spread:")
    print(peaks.pivot_table(index="pull", columns="sigma", values="missed", aggfunc="mean").round(3).to_string())
    print(peaks.pivot_table(index="minor", columns="sigma", values="missed", aggfunc="mean").round(3).to_string())


def eight() -> None:
    """Logs of eight products through find_clusters, held-out seeds."""
    results, cpu, logs = [], 0.0, 0
    for seed in HELD_OUT_SEEDS:
        for frame, cases in eight_product_logs(seed):
            c0 = time.process_time()
            result = find_clusters(frame)
            cpu += time.process_time() - c0
            logs += 1
            flagged = {f.scope for f in result.mixed_products}
            names = list(frame["product"].cat.categories)
            results += [(case, name in flagged) for name, case in zip(sorted(names, key=lambda s: int(s[1:].split("-")[0])), cases)]
    print(f"eight-product logs: {logs} logs of held-out seeds, find_clusters {cpu / logs:.2f} s CPU per log")
    print(_rates(results).to_string(index=False))


def traces(root: Path) -> None:
    """Every product of every trace: flagged or not, with its modes."""
    from shapeviz.ingest import load_log

    for path in sorted(p for p in root.rglob("*") if p.is_file() and p.suffix in (".csv", ".gz", ".jsonl", ".parquet")):
        try:
            frame = load_log(path).frame
        except Exception as error:  # noqa: BLE001 - a file that is not a log is reported, not fatal
            print(f"{path.relative_to(root)}: not read ({type(error).__name__})")
            continue
        c0 = time.process_time()
        result = find_clusters(frame)
        cpu = time.process_time() - c0
        flags = {f.scope: f for f in result.mixed_products}
        for product in frame["product"].cat.categories:
            n = int((frame["product"] == product).sum())
            flag = flags.get(product)
            named = [note for note in result.notes if note.startswith(f"product '{product}' has ")]
            print(f"{path.relative_to(root)} [{product}] {n:,} requests: "
                  + (flag.reason if flag else named[0] if named else "one mode") + f"  (find_clusters {cpu:.2f} s CPU)")


def speed(rows: int) -> None:
    """find_clusters on a generated eight-product log of ``rows`` requests."""
    from shapeviz.workload import synth

    frame = synth.generate(rows, 0, with_hashes=False)
    gpu = request_gpu_time(frame)
    for _ in range(2):
        c0, w0 = time.process_time(), time.perf_counter()
        result = find_clusters(frame, gpu_time=gpu)
        print(f"find_clusters, {rows:,} requests, {len(frame['product'].cat.categories)} products: "
              f"{time.process_time() - c0:.2f} s CPU, {time.perf_counter() - w0:.2f} s wall; "
              f"{len(result.mixed_products)} mixed product(s); load average {os.getloadavg()[0]:.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--section", choices=["tune", "heldout", "eight", "traces", "speed"], action="append")
    parser.add_argument("--traces", type=Path, default=ROOT.parent / "shared" / "data" / "traces")
    parser.add_argument("--rows", type=int, default=1_000_000)
    args = parser.parse_args()
    sections = args.section or ["tune", "heldout", "eight", "traces", "speed"]
    print(f"load average {os.getloadavg()[0]:.2f}")
    for section in sections:
        print(f"\n== {section}")
        {"tune": tune, "heldout": heldout, "eight": eight, "traces": lambda: traces(args.traces),
         "speed": lambda: speed(args.rows)}[section]()


if __name__ == "__main__":
    main()
