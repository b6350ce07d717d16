"""Leave the online-serving rows out of the fit, then judge the simulator on them.

    python benchmarks/bench_leaveout.py [--reference ../shared/reference] [--evaluations 600] [--restarts 2]
                                        [--stored] [--control] [--rows] [--save FILE | --load FILE]

The stored efficiencies (``data/efficiency.json``) were fitted on every usable published row, the 19 Triton
online-serving TTFT/ITL pairs below saturation and NIM at concurrency 1 included (``data.kinds``: online_ttft,
online_itl, nim_ttft, nim_itl), so judging the simulator on those rows with them is an in-sample check. This
script refits the same parameters with the calibration's own objective and optimiser (Nelder-Mead on logit-scaled
bounds), from a neutral start (every fitted parameter at the middle of its bounds, so the stored fit cannot leak
in through the starting point) and a first simplex one logit wide, on every usable row EXCEPT those kinds, and simulates
every Triton online-serving row (below and past saturation) and every NIM concurrency row with the result:
TTFT, ITL, the knee, and saturation throughput. ``--stored`` simulates the same rows with the stored efficiencies
too (in sample: the figures of bench_simulator.py); ``--control`` refits on every row with the same budget, so
the held-out figures can be told apart from a weaker neutral-start fit (slow: the online rows are the costly
ones to evaluate). The calibration model's error per kind of row is printed for every parameter set.

Simulation settings are bench_simulator.py's: Poisson at the offered QPS with 500 requests (QPS "inf": all at
t = 0), NIM as a closed loop of C clients, prompts scheduled whole (``chunked_prefill=False``), the defaults
otherwise. That choice was made while looking at the NIM C=25/50 rows (see benchmarks/README.md), so the NIM
C>1 rows judge the efficiencies out of sample but not the scheduling choice.
"""
from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from bench_simulator import knee, nim_rows, online_rows  # noqa: E402

from shapeviz.physics.steps import Efficiency, load_efficiency  # noqa: E402
from shapeviz.serving import calibration as cal  # noqa: E402

# The online-serving kinds of data/efficiency.json's data.kinds: Triton online rows and NIM at concurrency 1.
ONLINE_KINDS = ("online_ttft", "online_itl", "nim_ttft", "nim_itl")
CURVE = ["model", "tp", "isl", "osl"]


def _abs(err: pd.Series) -> tuple[float, float]:
    a = err.abs()
    return (float(a.median()), float(a.max())) if len(a) else (math.nan, math.nan)


def judge(online: pd.DataFrame, nim: pd.DataFrame) -> dict[str, float]:
    """Median and worst |error| of TTFT, ITL, saturation throughput and NIM, and the knees, for one parameter set."""
    out: dict[str, float] = {}
    finite = online[np.isfinite(online["qps"])]
    for name, part in (("below saturation", finite[~finite["saturated"]]),
                       ("saturated, finite QPS", finite[finite["saturated"]])):
        out[f"{name}: rows"] = len(part)
        for metric in ("ttft", "itl"):
            med, worst = _abs(part[f"sim_{metric}"] / part[metric] - 1)
            out[f"{name}: {metric.upper()} median"], out[f"{name}: {metric.upper()} worst"] = med, worst
    inf = online[~np.isfinite(online["qps"])]
    med, worst = _abs(inf["sim_served"] / inf["served"] - 1)
    out["saturation throughput: rows"] = len(inf)
    out["saturation throughput median"], out["saturation throughput worst"] = med, worst
    steps, total = 0, 0
    for _, curve in finite.sort_values("qps").groupby(CURVE):
        loads = curve["qps"].to_numpy()
        m, s = knee(loads, curve["ttft"].to_numpy()), knee(loads, curve["sim_ttft"].to_numpy())
        total += 1
        if m == s or (math.isfinite(m) and math.isfinite(s) and max(m, s) / min(m, s) <= 2.0) \
                or (not math.isfinite(m) and s == loads[-1]) or (not math.isfinite(s) and m == loads[-1]):
            steps += 1
    out["knees within one load step"] = steps
    out["knee curves"] = total
    loop = nim[nim["concurrency"] > 1]
    out["NIM C>1: rows"] = len(loop)
    for metric, col in (("TTFT", "ttft"), ("ITL", "itl"), ("throughput", "tput")):
        med, worst = _abs(loop[f"sim_{col}"] / loop[col] - 1)
        out[f"NIM C>1: {metric} median"], out[f"NIM C>1: {metric} worst"] = med, worst
    one = nim[nim["concurrency"] == 1]
    out["NIM C=1: TTFT error"] = float((one["sim_ttft"] / one["ttft"] - 1).iloc[0]) if len(one) else math.nan
    out["NIM C=1: ITL error"] = float((one["sim_itl"] / one["itl"] - 1).iloc[0]) if len(one) else math.nan
    return out


def knees(online: pd.DataFrame) -> pd.DataFrame:
    """Measured and simulated knee (first offered QPS whose mean TTFT doubles the lightest load's) per curve."""
    finite = online[np.isfinite(online["qps"])].sort_values("qps")
    rows = []
    for key, curve in finite.groupby(CURVE):
        loads = curve["qps"].to_numpy()
        rows.append(dict(zip(CURVE, key), measured=knee(loads, curve["ttft"].to_numpy()),
                         simulated=knee(loads, curve["sim_ttft"].to_numpy())))
    return pd.DataFrame(rows)


def fitted_rows_error(rows: pd.DataFrame, eff: Efficiency) -> dict[str, float]:
    """Median |error| of the (analytic) calibration model per kind: the rows a fit sees, and the online ones."""
    judged = cal.evaluate(rows, eff)
    ok = judged[judged["skip"] == ""]
    return {k: float(g["error"].abs().median()) for k, g in ok.groupby("kind")}


def refit(rows: pd.DataFrame, evaluations: int, restarts: int, step: float = 1.0) -> tuple[Efficiency, float]:
    """The calibration's objective, bounds and optimiser from a neutral start, with a simplex ``step`` logits wide.

    ``calibration.fit`` hands Nelder-Mead only a starting point, and scipy's default first simplex moves a
    coordinate at 0 by 0.00025: from the neutral start (every parameter at logit 0) most parameters never leave
    the middle of their bounds. One logit unit per parameter lets each of them move.
    """
    from scipy.optimize import minimize

    start = cal.neutral_start()
    usable = rows[rows["skip"] == ""]
    names = [n for n in cal.FITTED if n != "weight_only_efficiency" or cal._has_weight_only_rows(usable)]
    loss_of = cal._loss_function(usable)

    def efficiency(z: np.ndarray) -> Efficiency:
        return start.replace(**{n: cal._from_unit(n, float(v)) for n, v in zip(names, z)})

    z = np.zeros(len(names))
    for _ in range(restarts + 1):   # each restart re-opens a full-size simplex around the best point so far
        simplex = np.vstack([z, z + step * np.eye(len(names))])
        result = minimize(lambda v: loss_of(efficiency(v)), z, method="Nelder-Mead",
                          options={"maxfev": evaluations, "initial_simplex": simplex, "xatol": 1e-3,
                                   "fatol": 1e-5, "adaptive": True})
        z = result.x
    return efficiency(z), float(result.fun)


def main(argv: list[str] | None = None) -> int:
    """Refit without the online-serving rows and print the simulator's errors on them, beside the stored fit's."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--reference", type=Path, default=ROOT.parent / "shared" / "reference")
    parser.add_argument("--evaluations", type=int, default=600, help="Nelder-Mead evaluations per restart")
    parser.add_argument("--restarts", type=int, default=2)
    parser.add_argument("--stored", action="store_true", help="also simulate with the stored efficiencies")
    parser.add_argument("--control", action="store_true", help="also refit on every row with the same budget")
    parser.add_argument("--rows", action="store_true", help="print every simulated row of the held-out fit")
    parser.add_argument("--save", type=Path, default=None, help="write the held-out fit's parameters (JSON)")
    parser.add_argument("--load", type=Path, default=None, help="reuse parameters written by --save (no refit)")
    args = parser.parse_args(argv)

    rows = cal.reference_rows(args.reference)
    online_kind = rows["kind"].isin(ONLINE_KINDS) & (rows["skip"] == "")
    print(f"usable rows {int((rows['skip'] == '').sum())}; left out of the refit: {int(online_kind.sum())} "
          f"({', '.join(f'{k} {n}' for k, n in rows[online_kind]['kind'].value_counts().sort_index().items())})")

    stored = {"stored fit (every row: online in sample)": load_efficiency()}
    sets: dict[str, Efficiency] = {}
    fits = [("refit without online rows (held out)", rows[~online_kind])]
    if args.control:
        fits.append(("control: same refit on every row (in sample)", rows))
    if args.load:   # a refit saved earlier: the same held-out parameters without the minutes of fitting
        saved = json.loads(args.load.read_text())
        sets[fits[0][0]] = load_efficiency().replace(**{k: float(v) for k, v in saved.items()})
        fits = fits[1:]
    for label, data in fits:
        t0 = time.process_time()
        eff, loss = refit(data, args.evaluations, args.restarts)
        stored_loss = cal._loss_function(data[data["skip"] == ""])(load_efficiency())
        print(f"{label}: {int((data['skip'] == '').sum())} rows, loss {loss:.4f} (the stored parameters on the same "
              f"rows: {stored_loss:.4f}), {time.process_time() - t0:.0f} s CPU")
        sets[label] = eff
    held = "refit without online rows (held out)"
    if args.save:
        args.save.write_text(json.dumps({k: getattr(sets[held], k) for k in cal.FITTED}, indent=1) + "\n")
    every = {**stored, **sets}

    print("\n| parameter | " + " | ".join(every) + " |")
    print("|---|" + "---:|" * len(every))
    for name in cal.FITTED:
        print(f"| {name} | " + " | ".join(f"{getattr(e, name):.4g}" for e in every.values()) + " |")
    print("\nCalibration model (analytic), median |error| per kind of row:")
    print("| kind | " + " | ".join(every) + " |")
    print("|---|" + "---:|" * len(every))
    errors = {label: fitted_rows_error(rows, eff) for label, eff in every.items()}
    for kind in sorted(next(iter(errors.values()))):
        print(f"| {kind}{' (left out of the refit)' if kind in ONLINE_KINDS else ''} | "
              + " | ".join(f"{e[kind]:.1%}" for e in errors.values()) + " |")
    sys.stdout.flush()
    if args.stored:
        sets = {**stored, **sets}

    results, details = {}, {}
    for label, eff in sets.items():
        t0 = time.process_time()
        online, nim = online_rows(args.reference, analytic=False, eff=eff), nim_rows(args.reference, eff=eff)
        results[label] = judge(online, nim)
        details[label] = (online, nim)
        print(f"simulated with '{label}': {time.process_time() - t0:.0f} s CPU", file=sys.stderr)

    table = pd.DataFrame(results)
    print("\n| figure | " + " | ".join(sets) + " |")
    print("|---|" + "---:|" * len(sets))
    for name, values in table.iterrows():
        cells = [f"{v:.0f}" if (name.endswith("rows") or "knee" in name) else f"{v:+.1%}" if "error" in name
                 else f"{v:.1%}" for v in values]
        print(f"| {name} | " + " | ".join(cells) + " |")

    online, nim = details[held]
    print(f"\nKnees with '{held}':")
    print(knees(online).to_string(index=False))
    if args.rows:
        cols = ["model", "tp", "isl", "osl", "qps", "served", "sim_served", "ttft", "sim_ttft", "itl", "sim_itl"]
        print(online[cols].to_string(index=False, float_format=lambda v: f"{v:,.1f}"))
        print(nim.to_string(index=False, float_format=lambda v: f"{v:,.1f}"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
