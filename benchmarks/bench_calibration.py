"""Capacity-model calibration: error of the step-time model on published measurements, row by row.

    python benchmarks/bench_calibration.py                 # stored parameters: errors row by row + medians,
                                                            # then held-out hardware (fit on H100 only → A100s)
    python benchmarks/bench_calibration.py --logo          # also leave-one-GPU-out fits
    python benchmarks/bench_calibration.py --write         # refit on every usable row, store data/efficiency.json
    python benchmarks/bench_calibration.py --reference DIR # another copy of the reference folder

Every run also judges the rows the fit never sees (``data/heldout_max_throughput.csv``: H200, B200, GB200 and
the NVFP4/MXFP4 precisions), per family (dense/MoE) and precision, with the share within 2×.
Errors are predicted / measured − 1 (positive: the model is optimistic). Fits take a minute or two each.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from shapeviz.physics.steps import load_efficiency  # noqa: E402
from shapeviz.serving import calibration as cal  # noqa: E402


def _table(evaluated: pd.DataFrame) -> str:
    ok = evaluated[evaluated["skip"] == ""].copy()
    ok["shape"] = ok["isl"].map("{:.0f}".format) + "/" + ok["osl"].map("{:.0f}".format)
    ok["rate"] = ok["rate_rps"].map(lambda r: "" if pd.isna(r) else f"{r:g}/s")
    cols = ["kind", "gpu", "model", "precision", "tp", "shape", "rate", "version", "measured", "predicted", "error"]
    return ok[cols].to_string(index=False, float_format=lambda v: f"{v:,.3g}")


def _medians(evaluated: pd.DataFrame, title: str) -> None:
    summary = cal.summarize(evaluated)
    print(f"\n== {title}: median |error| per GPU and kind ==")
    print(summary.to_string(index=False, float_format=lambda v: f"{v:.1%}"))


def _holdout(rows: pd.DataFrame, fit_gpus: list[str], check_gpus: list[str],
             evaluations: int) -> tuple[float, pd.DataFrame]:
    t0 = time.perf_counter()
    median, judged = cal.holdout(rows, fit_gpus, check_gpus, max_evaluations=evaluations)
    ok = judged[judged["skip"] == ""]
    print(f"\n== fit on {', '.join(fit_gpus)} from a neutral start ({time.perf_counter() - t0:.0f} s) "
          f"-> held-out {', '.join(check_gpus)}: median |error| {median:.1%} over {len(ok)} rows ==")
    print(cal.summarize(judged).to_string(index=False, float_format=lambda v: f"{v:.1%}"))
    return median, judged


def _family_table(evaluated: pd.DataFrame, title: str, by: tuple[str, ...] = ("family", "precision")) -> None:
    print(f"\n== {title} ==")
    print(cal.by_family_precision(evaluated, by).to_string(index=False, float_format=lambda v: f"{v:.1%}"))


def _judge(efficiency) -> pd.DataFrame:
    """Rows on GPUs and precisions the fit never saw, with the stored (or just fitted) parameters."""
    judged = cal.evaluate(cal.heldout_rows(), efficiency)
    _family_table(judged, "held out (never fitted): H200/B200/GB200 and NVFP4/MXFP4 rows, per family and precision")
    _family_table(judged, "held out, per GPU, family and precision", ("gpu", "family", "precision"))
    worst = (judged.groupby(["gpu", "model", "precision", "tp", "ep", "attention_dp"])["error"].median()
             .rename("median_error").reset_index())
    worst = worst.reindex(worst["median_error"].abs().sort_values(ascending=False).index).head(8)
    print("\n== held out: worst configurations (median error of their rows) ==")
    print(worst.to_string(index=False, float_format=lambda v: f"{v:+.1%}"))
    print("\nheadline:", cal.judged_summary(judged))
    return judged


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--reference", type=Path, default=ROOT.parent / "shared" / "reference",
                        help="folder holding calibration/ (default: ../shared/reference beside the repo)")
    parser.add_argument("--write", action="store_true", help="refit on every usable row and store data/efficiency.json")
    parser.add_argument("--logo", action="store_true", help="also run leave-one-GPU-out fits")
    parser.add_argument("--evaluations", type=int, default=500, help="Nelder-Mead evaluations per round of the full fit")
    parser.add_argument("--holdout-evaluations", type=int, default=cal.HOLDOUT_EVALUATIONS,
                        help="the same for the held-out fits (default: the budget the test recomputes)")
    parser.add_argument("--quiet", action="store_true", help="medians only, no row-by-row table")
    parser.add_argument("--parameters", nargs="+", choices=cal.FITTED, default=list(cal.FITTED),
                        help="with --write: fit only these, keeping the others' stored values")
    args = parser.parse_args(argv)

    rows = cal.reference_rows(args.reference)
    skipped = rows[rows["skip"] != ""]
    print(f"{len(rows)} published measurements, {len(rows) - len(skipped)} usable; skipped by reason:")
    print(skipped["skip"].value_counts().to_string())

    holdout: dict[str, float] = {}
    result = None
    if args.write:
        t0 = time.perf_counter()
        result = cal.fit(rows, parameters=tuple(args.parameters), max_evaluations=args.evaluations,
                         progress=lambda n, loss: print(f"  {n} evaluations, loss {loss:.4f}", flush=True))
        print(f"fitted on {result.rows_used} rows in {time.perf_counter() - t0:.0f} s, loss {result.loss:.4f}")
        efficiency = result.efficiency
    else:
        efficiency = load_efficiency()
    print("\nparameters:", {k: round(v, 4) for k, v in efficiency.to_dict().items()})

    evaluated = cal.evaluate(rows, efficiency)
    if not args.quiet:
        print("\n== row by row (stored parameters) ==")
        print(_table(evaluated))
    _medians(evaluated, "all usable rows, parameters fitted on all GPUs")
    _family_table(evaluated, "in sample (fitted on H100 + A100), per family and precision")
    judged = _judge(efficiency)

    gpus = sorted(rows.loc[rows["skip"] == "", "gpu"].dropna().unique())
    h100 = [g for g in gpus if g.startswith("h100")]
    others = [g for g in gpus if g not in h100]
    holdout["fit_h100_check_a100"], _ = _holdout(rows, h100, others, args.holdout_evaluations)
    if args.logo:
        left_out = []
        for g in gpus:
            holdout[f"leave_out_{g}"], test = _holdout(rows, [x for x in gpus if x != g], [g],
                                                       args.holdout_evaluations)
            left_out.append(test)
        _family_table(pd.concat(left_out),
                      "leave-one-GPU-out (each GPU predicted by a fit on the others), per family and precision")

    if result is not None:
        cal.write_efficiency(result, evaluated, holdout, judged=cal.judged_summary(judged))
        print("\nwrote data/efficiency.json")
    return 0


if __name__ == "__main__":
    sys.exit(main())
